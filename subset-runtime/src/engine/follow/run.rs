//! Running a follower: the checks before it starts, one collection follower per child
//! collection, and the stop signal they all watch.

use futures::future::Either;
use tokio::sync::watch;

use super::pre_images;
use super::stats::{Counters, FollowStats};
use super::stream::{CollectionFollower, Shared, Stop};
use super::token::Tokens;
use super::{Follow, FollowOptions, Observer};
use crate::engine::RawStore;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

impl Follow {
    pub(super) async fn run(self) -> Result<FollowStats> {
        let Follow {
            store,
            options,
            shutdown,
            observer,
            counters,
        } = self;
        let (stop_tx, stop_rx) = watch::channel(false);
        let follow = follow(
            &store,
            &options,
            observer.as_ref(),
            &counters,
            Stop(stop_rx),
        );
        let result = match shutdown {
            None => follow.await,
            Some(shutdown) => {
                futures::pin_mut!(follow);
                match futures::future::select(follow, shutdown).await {
                    Either::Left((result, _)) => result,
                    Either::Right(((), follow)) => {
                        tracing::info!(follower = %options.name, "stop requested");
                        let _ = stop_tx.send(true);
                        follow.await
                    }
                }
            }
        };
        drop(stop_tx);
        result.map(|()| counters.snapshot())
    }
}

/// Follows every child collection of `store` until a stop or an error.
async fn follow(
    store: &RawStore,
    options: &FollowOptions,
    observer: Option<&Observer>,
    counters: &Counters,
    stop: Stop,
) -> Result<()> {
    if !store.replicated().await? {
        return Err(Error::FollowUnsupported {
            collection: store.collection_name().to_owned(),
            reason: "the server is a standalone mongod, which has no oplog and so no change streams: following needs a replica set (a single-node one will do) or a sharded cluster; on a standalone server, run `reconcile_all` on a schedule instead".to_owned(),
            source: None,
        });
    }
    let collections = by_collection(store.spec().subsets);
    for (collection, _) in &collections {
        pre_images::ensure_pre_images(store, collection, options.enable_pre_images).await?;
    }
    let shared = Shared {
        store,
        options,
        tokens: Tokens::new(
            store.database(),
            options
                .token_collection
                .as_deref()
                .unwrap_or(store.bookkeeping().followers()),
            &options.name,
            store.collection_name(),
        ),
        counters,
        observer,
        stop,
    };
    let followers = collections
        .into_iter()
        .map(|(name, fields)| CollectionFollower {
            shared: &shared,
            name,
            fields,
        });
    let followers: Vec<_> = followers.collect();
    futures::future::try_join_all(followers.iter().map(CollectionFollower::run)).await?;
    Ok(())
}

/// The subset fields grouped by child collection, each collection once, in declaration order.
fn by_collection(subsets: &[SubsetSpec]) -> Vec<(&'static str, Vec<SubsetSpec>)> {
    let mut groups: Vec<(&'static str, Vec<SubsetSpec>)> = Vec::new();
    for spec in subsets {
        match groups.iter_mut().find(|(c, _)| *c == spec.child_collection) {
            Some((_, fields)) => fields.push(*spec),
            None => groups.push((spec.child_collection, vec![*spec])),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC;

    #[test]
    fn each_child_collection_is_followed_once_for_all_its_fields() {
        let first = SubsetSpec {
            field: "first",
            key: "first_of",
            ..TEST_SPEC
        };
        let other = SubsetSpec {
            child_collection: "orders",
            ..TEST_SPEC
        };
        let groups = by_collection(&[TEST_SPEC, other, first]);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].0, "reviews");
        assert_eq!(groups[0].1, [TEST_SPEC, first]);
        assert_eq!(groups[1].0, "orders");
    }
}
