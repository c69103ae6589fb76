//! A rebuild's batch: many parents rebuilt from one read of the parents and one `aggregate`
//! per child collection (see `resync/rebuilt.rs`), rather than each on its own.
//!
//! In a transaction, the batch reads and writes every parent in one snapshot and commits
//! once; a writer of another definition that changes a child meanwhile touches the parent, the
//! transaction conflicts and starts over, as one parent's would. Without one, each parent keeps
//! the protocol of [`Model::rebuild_parent`] (marked as built under none with a nonce, read,
//! marked as built here only if the nonce is still there), each step one command for the whole
//! batch. A parent the batch cannot finish (see [`Rebuilding::Alone`]) is rebuilt on its own
//! after it, where it succeeds or fails as it always has.

use super::{Model, MARKER};
use crate::bson::{doc, oid::ObjectId, Bson, Document};

use super::rebuild::unmarked;
use crate::engine::exec::{self, Ctx, Retry, Steps};
use crate::engine::parent_write::{send_updates, Guard, ParentUpdate, Written};
use crate::engine::resync::Rebuilt;
use crate::engine::RawStore;
use crate::error::{Error, Result};

/// How many times a batch's transaction is tried before its parents are left to rebuilds of
/// their own: a batch conflicts with the writers of any of its parents.
const BATCH_ATTEMPTS: u32 = 2;

/// What a batch did with one of its parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rebuilding {
    /// Rebuilt and marked as built under this definition.
    Rebuilt,
    /// Left to a rebuild of its own: gone since the scan, malformed, one a rebuild may refuse,
    /// one a concurrent writer marked again, or the whole batch failed.
    Alone,
}

/// The rebuild of `parents`, as one operation of the executor.
pub(crate) struct RebuildBatch<'a> {
    store: &'a RawStore,
    parents: &'a [Bson],
    /// Whether the rebuild may empty a view that holds children today.
    allow_emptying: bool,
}

impl<'s> Model<'s> {
    /// The batch that rebuilds `parents` (see the module documentation).
    pub(crate) fn rebuild_batch<'a>(
        &self,
        parents: &'a [Bson],
        allow_emptying: bool,
    ) -> RebuildBatch<'a>
    where
        's: 'a,
    {
        RebuildBatch {
            store: self.store,
            parents,
            allow_emptying,
        }
    }

    /// The update that writes `rebuilt`'s views and marks the parent as built under this
    /// definition, with the notes of malformed children each view's head holds.
    fn rebuilt_marking(&self, rebuilt: &Rebuilt) -> Document {
        let mut update = self.shared.definition.marking(&rebuilt.notes);
        if let Ok(set) = update.get_document_mut("$set") {
            set.extend(rebuilt.set.clone());
        }
        update
    }
}

impl RebuildBatch<'_> {
    fn alone(&self) -> Vec<Rebuilding> {
        vec![Rebuilding::Alone; self.parents.len()]
    }

    /// Every parent read and written in the transaction of `ctx`.
    async fn in_transaction(&self, ctx: &mut Ctx<'_>) -> Result<Vec<Rebuilding>> {
        let model = self.store.model();
        let rebuilt = (self.store)
            .rebuilt(ctx, self.parents, !self.allow_emptying)
            .await?;
        let mut done = self.alone();
        for ((parent, rebuilt), done) in self.parents.iter().zip(rebuilt).zip(&mut done) {
            let Some(rebuilt) = rebuilt else {
                continue;
            };
            let write = ParentUpdate {
                filter: rebuilt.filter.clone(),
                guard: Guard::Rebuild,
                ..ParentUpdate::of(model.rebuilt_marking(&rebuilt))
            };
            if self.store.write_parent(ctx, parent, write).await? == Written::Applied {
                *done = Rebuilding::Rebuilt;
            }
        }
        Ok(done)
    }

    /// Without a transaction: the leased parents marked as built under none, each with a
    /// nonce, in one command; read; then written and marked, each only if its nonce and lease
    /// are still there, in one command.
    async fn ordered(&self, ctx: &mut Ctx<'_>) -> Result<Vec<Rebuilding>> {
        let model = self.store.model();
        let mut done = self.alone();
        // Parents a rebuild may refuse are asked about before anything is written: a refused
        // parent stays as it was.
        let unkeyed = match self.allow_emptying {
            true => vec![false; self.parents.len()],
            false => self.store.holding_unkeyed(ctx, self.parents).await?,
        };
        let mut leased = Vec::new();
        for (i, parent) in self.parents.iter().enumerate() {
            if let (Some(lease), false) = (ctx.lease(parent), unkeyed[i]) {
                leased.push((i, lease, ObjectId::new()));
            }
        }
        if leased.is_empty() {
            return Ok(done);
        }
        let unmarks = leased
            .iter()
            .map(|&(i, lease, nonce)| {
                let mut q = doc! { "_id": self.parents[i].clone() };
                lease.fence(&mut q);
                doc! { "q": q, "u": unmarked(nonce) }
            })
            .collect();
        self.update(ctx, unmarks).await?;
        let ids: Vec<Bson> = leased
            .iter()
            .map(|&(i, ..)| self.parents[i].clone())
            .collect();
        let rebuilt = self.store.rebuilt(ctx, &ids, !self.allow_emptying).await?;
        let mut marks = Vec::new();
        let mut marking: Vec<(usize, bool)> = Vec::new();
        for (&(i, lease, nonce), rebuilt) in leased.iter().zip(rebuilt) {
            // A parent a writer of another definition marked again since its unmark (a new
            // nonce) is left to a rebuild of its own, which reads it again.
            let Some(rebuilt) = rebuilt.filter(|r| r.nonce == Some(nonce)) else {
                continue;
            };
            let parent = &self.parents[i];
            let mut filter = doc! { "_id": parent.clone(), format!("{MARKER}.n"): nonce };
            lease.fence(&mut filter);
            filter.extend(rebuilt.filter.clone());
            let mut update = model.rebuilt_marking(&rebuilt);
            // The lease goes with the marking, as a last parent update gives it back, unless
            // the executor settles the parent after the steps or removes a `_subset` the
            // lease created.
            let release = !ctx.is_outdated(parent) && !ctx.is_bare(parent);
            if release {
                lease.give_back_with(&mut update);
            }
            marks.push(doc! { "q": filter, "u": update });
            marking.push((i, release));
        }
        if marks.is_empty() {
            return Ok(done);
        }
        let matched = self.update(ctx, marks).await?;
        let applied = match matched == marking.len() as i64 {
            true => vec![true; marking.len()],
            false => self.marked_here(ctx, &marking).await?,
        };
        for (&(i, release), applied) in marking.iter().zip(applied) {
            if applied {
                done[i] = Rebuilding::Rebuilt;
                if release {
                    ctx.released(&self.parents[i]);
                }
            }
        }
        Ok(done)
    }

    /// Sends `statements` as one `update` command of the parent collection; how many matched.
    async fn update(&self, ctx: &mut Ctx<'_>, statements: Vec<Document>) -> Result<i64> {
        let parents = self.store.collection_name();
        let updated = send_updates(self.store, ctx, parents, statements, None).await?;
        // A statement the server refused (a parent grown past the document limit, say) is
        // left to a rebuild of its own, which reports it; the others applied.
        if updated.refused {
            tracing::debug!("a rebuild batch's update had write errors");
        }
        Ok(updated.matched)
    }

    /// Which of the parents of `marking` (indices into the batch) are marked as built under
    /// this definition, with no nonce left: read when the marking matched fewer than all.
    async fn marked_here(&self, ctx: &mut Ctx<'_>, marking: &[(usize, bool)]) -> Result<Vec<bool>> {
        let ids: Vec<Bson> = marking
            .iter()
            .map(|&(i, _)| self.parents[i].clone())
            .collect();
        let parents = self.store.parents::<Document>();
        let find = parents
            .find(doc! { "_id": { "$in": ids } })
            .projection(doc! { MARKER: 1 });
        let found = ctx.collect(find).await.map_err(|e| self.store.mongo(e))?;
        let own = self.store.shared.definition.digest();
        Ok(marking
            .iter()
            .map(|&(i, _)| {
                found.iter().any(|parent| {
                    let marker = parent.get_document(MARKER).ok();
                    parent.get("_id") == Some(&self.parents[i])
                        && marker.is_some_and(|m| {
                            m.get_str("d").ok() == Some(own) && !m.contains_key("n")
                        })
                })
            })
            .collect())
    }
}

impl Steps for RebuildBatch<'_> {
    type Output = Vec<Rebuilding>;

    fn parents(&self) -> Vec<&Bson> {
        self.parents.iter().collect()
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<Vec<Rebuilding>> {
        match ctx.atomic() {
            true => self.in_transaction(ctx).await,
            false => self.ordered(ctx).await,
        }
    }

    async fn before_retry(&self, attempt: u32, error: Error) -> Result<Retry<Vec<Rebuilding>>> {
        if attempt >= BATCH_ATTEMPTS {
            tracing::debug!(%error, "a rebuild batch kept conflicting; its parents go alone");
            return Ok(Retry::Done(self.alone()));
        }
        exec::again_after_backoff(attempt, &error).await
    }
}
