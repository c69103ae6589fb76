//! Pushes to several parents in one transaction (group commit across parents, see
//! [`super::exec::traffic::Across`]): the pushes queued on each parent in this process, each
//! parent's in turn, one commit for all. Patches do not ride: a vote is two commands and a
//! commit, and sixteen voters over a hundred parents wrote 27 % fewer votes a second one
//! transaction at a time (`subset-bench --experiments votes`, 2026-12-06) than each in its own.

use std::future::Future;
use std::sync::Arc;

use crate::bson::Bson;

use super::batch::Prepared;
use super::exec::{self, Ctx, Retry, Steps};
use super::push::PushSteps;
use super::{RawChildren, RawStore, WriteMode};
use crate::error::{Error, Result};

/// The pushes queued on one parent, through the field `field`, as they wait to be written
/// with other parents'.
pub(super) struct Aboard {
    pub(super) field: &'static str,
    pub(super) parent: Bson,
    pub(super) children: Arc<[Prepared]>,
}

impl RawStore {
    /// Writes `aboard`: in transactions with the work queued for other parents while another
    /// group is in flight ([`super::exec::traffic::Across`]), else (and when that group fails)
    /// with `alone`, under the writer's own turn.
    pub(super) async fn ride<A, AF>(&self, aboard: Aboard, alone: A) -> Result<()>
    where
        A: Fn(Arc<Aboard>) -> AF,
        AF: Future<Output = Result<()>>,
    {
        let aboard = Arc::new(aboard);
        if self.mode().await? != WriteMode::Transactional {
            return alone(aboard).await;
        }
        let together = |all: Vec<Arc<Aboard>>| async move { self.write_abreast(&all).await };
        self.shared.across.ride(aboard, together, alone).await
    }

    /// The work of `all` (each for another parent, whose turn its writer holds) in one
    /// transaction of ours. Any error ends it, and the caller has each writer write alone, for
    /// its own result.
    async fn write_abreast(&self, all: &[Arc<Aboard>]) -> Result<()> {
        let specs = &self.spec().subsets;
        let subsets: Vec<(RawChildren<'_>, &Aboard)> = all
            .iter()
            .filter_map(|a| {
                let spec = specs.iter().find(|s| s.field == a.field)?;
                Some((self.children(spec), &**a))
            })
            .collect();
        if subsets.len() < all.len() {
            // Work through a field this store does not have (never: each writer's field is
            // one of the store's): each writer writes its own, and gets its own answer.
            return Err(Error::PartialModel {
                collection: self.collection_name().to_owned(),
            });
        }
        exec::execute(self, None, &Abreast { subsets: &subsets }).await
    }
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
