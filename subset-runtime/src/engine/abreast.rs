//! Pushes to several parents written together (group commit across parents, see
//! [`super::exec::traffic::Across`]): the pushes queued on each parent in this process, in one
//! transaction (each parent's in turn, one commit for all), or without transactions in three
//! round trips for all (every lease at once, one insert, every parent update at once). Patches
//! do not ride: a vote is two commands and a
//! commit, and sixteen voters over a hundred parents wrote 27 % fewer votes a second one
//! transaction at a time (`subset-bench --experiments votes`, 2026-12-06) than each in its own.

use std::future::Future;
use std::sync::Arc;

use crate::bson::Bson;

use super::batch::Prepared;
use super::exec::lease::Leases;
use super::exec::{self, Ctx, Retry, Steps};
use super::push::PushSteps;
use super::query;
use super::{RawChildren, RawStore, WriteMode};
use crate::error::driver::InsertFailure;
use crate::error::{Error, Result};
use futures::future::join_all;

/// The pushes queued on one parent, through the field `field`, as they wait to be written
/// with other parents'.
pub(super) struct Aboard {
    pub(super) field: &'static str,
    pub(super) parent: Bson,
    pub(super) children: Arc<[Prepared]>,
}

impl RawStore {
    /// Writes `aboard` with the work queued for other parents while another group is in flight
    /// ([`super::exec::traffic::Across`]): in one transaction, or without transactions in three
    /// round trips ([`write_ordered`]); alone (and when that group fails) with `alone`, under
    /// the writer's own turn.
    pub(super) async fn ride<A, AF>(&self, aboard: Aboard, alone: A) -> Result<()>
    where
        A: Fn(Arc<Aboard>) -> AF,
        AF: Future<Output = Result<()>>,
    {
        let aboard = Arc::new(aboard);
        let ordered = self.mode().await? == WriteMode::Ordered;
        let together = |all: Vec<Arc<Aboard>>| async move {
            match ordered {
                true => write_ordered(self, &all).await,
                false => self.write_abreast(&all).await,
            }
        };
        self.shared.across.ride(aboard, together, alone).await
    }

    /// The work of `all` (each for another parent, whose turn its writer holds) in one
    /// transaction of ours. Any error ends it, and the caller has each writer write alone, for
    /// its own result.
    async fn write_abreast(&self, all: &[Arc<Aboard>]) -> Result<()> {
        let subsets = aboard(self, all)?;
        exec::execute(self, None, &Abreast { subsets: &subsets }).await
    }
}

/// The subsets `all` push through (fields of `store`), each with its work.
fn aboard<'s>(
    store: &'s RawStore,
    all: &'s [Arc<Aboard>],
) -> Result<Vec<(RawChildren<'s>, &'s Aboard)>> {
    let specs = &store.spec().subsets;
    let subsets: Vec<(RawChildren<'_>, &Aboard)> = all
        .iter()
        .filter_map(|a| {
            let spec = specs.iter().find(|s| s.field == a.field)?;
            Some((store.children(spec), &**a))
        })
        .collect();
    if subsets.len() < all.len() {
        // Work through a field this store does not have (never: each writer's field is
        // one of the store's): each writer writes its own, and gets its own answer.
        return Err(Error::PartialModel {
            collection: store.collection_name().to_owned(),
        });
    }
    Ok(subsets)
}

/// The work of `all` without a transaction, in three round trips whatever their number:
/// every parent's shared lease at once (each on a connection of its own), one insert of
/// every child per child collection, then every parent's update at once. The pushes commute
/// (see [`exec::lease`]), so the group is as exact as each push alone. Where anything does
/// not go as a lone push's first try would (a lease that cannot be shared now, an insert or
/// an update refused, missing or cut off), it leaves each parent as a lone push would
/// leave it after that failure and returns an error: each writer then writes alone, for
/// its own answer (a push already written finds its children stored and embedded, and
/// changes nothing).
async fn write_ordered(store: &RawStore, all: &[Arc<Aboard>]) -> Result<()> {
    let subsets = aboard(store, all)?;
    let taken = join_all(subsets.iter().map(|(_, a)| async move {
        let mut ctx = Ctx::apart();
        let leases = Leases::share(store, &mut ctx, &a.parent).await;
        (ctx, leases)
    }))
    .await;
    let mut riders = Vec::with_capacity(subsets.len());
    let mut shared = true;
    for ((ctx, leases), (subset, aboard)) in taken.into_iter().zip(&subsets) {
        match leases {
            Ok(Some(leases)) => riders.push(Rider {
                ctx,
                leases,
                subset,
                aboard,
                unfinished: false,
            }),
            _ => shared = false,
        }
    }
    let together = || Error::PartialModel {
        collection: store.collection_name().to_owned(),
    };
    if !shared {
        release_all(riders, |_| false).await;
        return Err(together());
    }
    if let Err(unknown) = insert_all(&riders).await {
        // What the insert wrote is unknown: the parents are marked for a rebuild, which
        // each writer's own push then settles.
        release_all(riders, |_| unknown).await;
        return Err(together());
    }
    let written = join_all(riders.iter_mut().map(|r| async move {
        let fresh: Vec<&Prepared> = r.aboard.children.iter().collect();
        let steps = PushSteps::new(r.subset, &r.aboard.parent, &r.aboard.children);
        let pushed = steps.push_to_parent(&mut r.ctx, &fresh, true).await;
        let parent = &r.aboard.parent;
        match pushed {
            Ok(true) if !r.ctx.is_outdated(parent) && !r.ctx.is_lost(parent) => Fate::Written,
            // Missing, or refused: its children come out again, as a lone push's would.
            Ok(false) => Fate::TakenBack,
            Err(e) if crate::error::driver::was_refused(&e) => Fate::TakenBack,
            // Outdated, overtaken or cut off: marked for a rebuild.
            _ => Fate::Unfinished,
        }
    }))
    .await;
    if written.iter().all(|w| *w == Fate::Written) {
        release_all(riders, |_| false).await;
        return Ok(());
    }
    for (r, fate) in riders.iter_mut().zip(&written) {
        if *fate == Fate::TakenBack {
            let ids = r.aboard.children.iter().map(|p| p.id.clone()).collect();
            let owned = query::owned(r.subset.spec(), &r.aboard.parent, ids);
            let children = r.subset.children::<crate::bson::Document>();
            if r.ctx.run(children.delete_many(owned)).await.is_err() {
                r.unfinished = true;
            }
        }
        r.unfinished |= *fate == Fate::Unfinished;
    }
    // A parent whose lease another writer took (its update wrote nothing, its children are
    // stored) is marked whatever holds its lease now, as a lone push marks it.
    let lost: Vec<Bson> = riders
        .iter()
        .filter(|r| r.ctx.is_lost(&r.aboard.parent))
        .map(|r| r.aboard.parent.clone())
        .collect();
    release_all(riders, |r| r.unfinished).await;
    for parent in &lost {
        store.model().mark_unsettled(parent).await;
    }
    Err(together())
}

/// [`write_ordered`]'s insert: every child of `riders`, one `insertMany`
/// per child collection. `Err(unknown)` when it failed, having taken out again what it
/// wrote (`false`), or not knowing what it wrote (`true`).
async fn insert_all(riders: &[Rider<'_, '_>]) -> std::result::Result<(), bool> {
    let mut collections: Vec<&str> = Vec::new();
    for r in riders {
        let collection = r.subset.spec().child_collection;
        if !collections.contains(&collection) {
            collections.push(collection);
        }
    }
    for (i, collection) in collections.iter().enumerate() {
        let of: Vec<&Rider<'_, '_>> = riders
            .iter()
            .filter(|r| r.subset.spec().child_collection == *collection)
            .collect();
        let children = of[0].subset.children::<crate::bson::Document>();
        let stored = of
            .iter()
            .flat_map(|r| r.aboard.children.iter().map(|p| &p.stored));
        let inserted = children.insert_many(stored).ordered(false).await;
        let Err(e) = inserted else {
            continue;
        };
        let Some(failed) = InsertFailure::of(&e).filter(|f| !f.write_concern) else {
            return Err(true);
        };
        // Out again: what this insert wrote (all but the refused), and every earlier one.
        let mut position = 0;
        for r in riders {
            let earlier = collections[..i].contains(&r.subset.spec().child_collection);
            let this = r.subset.spec().child_collection == *collection;
            let mut ids = Vec::new();
            for p in r.aboard.children.iter() {
                if this {
                    let kept = !failed.duplicates.contains(&position)
                        && !failed.refused.iter().any(|(k, _)| *k == position);
                    position += 1;
                    if kept {
                        ids.push(p.id.clone());
                    }
                } else if earlier {
                    ids.push(p.id.clone());
                }
            }
            if ids.is_empty() {
                continue;
            }
            let owned = query::owned(r.subset.spec(), &r.aboard.parent, ids);
            let stored = r.subset.children::<crate::bson::Document>();
            if stored.delete_many(owned).await.is_err() {
                return Err(true);
            }
        }
        return Err(false);
    }
    Ok(())
}

/// One writer of a group written without a transaction, with its parent's shared lease.
struct Rider<'s, 'a> {
    ctx: Ctx<'static>,
    leases: Leases,
    subset: &'s RawChildren<'a>,
    aboard: &'s Aboard,
    /// Whether its parent is left for a rebuild: its lease is given back as unfinished.
    unfinished: bool,
}

/// What became of one rider's parent update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Written, and its lease given back with it.
    Written,
    /// Not written, and its children to be taken out again.
    TakenBack,
    /// Not written for sure: its parent is marked for a rebuild.
    Unfinished,
}

/// Gives back each rider's lease, as unfinished where `unfinished` says so.
async fn release_all(riders: Vec<Rider<'_, '_>>, unfinished: impl Fn(&Rider<'_, '_>) -> bool) {
    join_all(riders.into_iter().map(|r| {
        let unfinished = unfinished(&r);
        async move { r.leases.release(r.ctx.held(), unfinished).await }
    }))
    .await;
}

/// The writes of [`RawStore::write_abreast`].
struct Abreast<'s, 'a> {
    subsets: &'s [(RawChildren<'a>, &'s Aboard)],
}

impl Steps for Abreast<'_, '_> {
    type Output = ();

    // No parents: each writer holds its parent's turn already, and the executor would wait for
    // those turns.

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        for (subset, aboard) in self.subsets {
            PushSteps::new(subset, &aboard.parent, &aboard.children)
                .run(ctx)
                .await?;
        }
        Ok(())
    }

    async fn before_retry(&self, _attempt: u32, error: Error) -> Result<Retry<()>> {
        // A conflict on one of the parents: each push goes alone, where a contended parent is
        // noticed (and folded, when the store folds).
        Err(error)
    }
}
