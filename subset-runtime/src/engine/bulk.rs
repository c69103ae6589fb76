//! Removing or patching every child that matches a filter, across parents: a user's right to be
//! forgotten, a spam wave, anonymising a user's reviews.
//!
//! The parents to visit are the distinct keys of the matching children, read in key order and
//! batches, a few at once. Each parent is one step: the children of that parent that match are
//! deleted (or patched) and every view of the parent is recomputed from the child collection,
//! its count and sums recounted.
//!
//! - In [`WriteMode::Transactional`] each parent's step is one transaction: a run killed at
//!   any point leaves each parent done or untouched, and a rerun finds the untouched ones,
//!   whose children still match.
//! - In [`WriteMode::Ordered`] a journal document (in the store's
//!   [`Names::jobs`](crate::bookkeeping::Names::jobs), `subset_jobs`) lists the parents whose
//!   children may be changed and whose views are not recomputed yet: each is added before its
//!   children are written and taken off once its views are. A rerun of the same job first
//!   recomputes the parents the journal still lists, so that one killed between the two steps
//!   ends as it would have. A parent whose step fails (refused part way) is recomputed at once
//!   and taken off; a job that ends with a journal listing no parent deletes it, failed parents
//!   or not (a rerun finds them by their children, which still match).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::bson::{doc, Bson, Document};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use futures::{StreamExt, TryStreamExt};
use mongodb::options::ReturnDocument;
use mongodb::{ClientSession, Collection};

use super::exec::{self, Ctx, Steps};
use super::patch::ChildPatch;
use super::resync::CountFix;
use super::sweep::ParentFailure;
use super::{RawChildren, WriteMode};
use crate::action::{span, Action, Operation};
use crate::error::{Error, Result};
use crate::job::SweepOptions;

/// Where a job by filter is, handed to its progress callback after every batch of parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BulkProgress {
    /// Parents whose matching children were removed or patched, and whose views were
    /// recomputed; with, in a rerun without transactions, those an earlier run left half done,
    /// finished first.
    pub parents: u64,
    /// Children removed or patched.
    pub children: u64,
    /// Parents that failed (see [`BulkReport::failures`]).
    pub failed: u64,
    /// Time since the job started.
    pub elapsed: Duration,
}

/// The result of a job by filter: [`RawChildren::remove_where`], [`RawChildren::patch_where`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct BulkReport {
    /// The final counts.
    pub progress: BulkProgress,
    /// The parents that failed, with why (the first [`BulkReport::SAMPLES`]); the job went on
    /// past each of them, and a rerun of it tries them again.
    pub failures: Vec<ParentFailure>,
}

impl BulkReport {
    /// How many failed parents a report keeps in detail.
    pub const SAMPLES: usize = 1_000;
}

/// What [`RawChildren::count_where`] found: what a job with its filter would change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Matches {
    /// The children that match.
    pub children: u64,
    /// The parents they are under.
    pub parents: u64,
}

/// [`RawChildren::count_where`].
struct CountWhere<'a> {
    subset: RawChildren<'a>,
    filter: Document,
}

impl<'s, 'a: 's> Operation<'s> for CountWhere<'a> {
    type Output = Matches;

    fn span(&self) -> tracing::Span {
        let s = self.subset;
        span!("subset.count_where", s.store(), Some(s.spec().field), None)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Matches> {
        let s = self.subset;
        let key = format!("${}", s.spec().key);
        let pipeline = [
            doc! { "$match": s.matching(&self.filter, None) },
            doc! { "$group": { "_id": key, "n": { "$sum": 1 } } },
            doc! { "$group": { "_id": Bson::Null, "parents": { "$sum": 1 }, "children": { "$sum": "$n" } } },
        ];
        let children = s.children::<Document>();
        let found = Ctx::read(caller)
            .aggregate(children.aggregate(pipeline))
            .await
            .map_err(|e| s.mongo_child(e))?
            .pop();
        let number = |field| {
            found
                .as_ref()
                .and_then(|d| d.get(field))
                .and_then(|n| match n {
                    Bson::Int32(n) => u64::try_from(*n).ok(),
                    Bson::Int64(n) => u64::try_from(*n).ok(),
                    _ => None,
                })
                .unwrap_or(0)
        };
        Ok(Matches {
            children: number("children"),
            parents: number("parents"),
        })
    }
}

/// What a job does to the matching children of each parent.
#[derive(Debug, Clone, Copy)]
enum Change<'p> {
    Remove,
    Patch(&'p ChildPatch),
}

impl RawChildren<'_> {
    /// How many children match `filter` (a query on child fields), and under how many parents:
    /// what [`RawChildren::remove_where`] or [`RawChildren::patch_where`] would change, without
    /// changing it. Children of no parent (no key) are not counted.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`], for a filter the server refuses too.
    pub fn count_where<'r>(&'r self, filter: &Document) -> Action<'r, Matches> {
        Action::of(CountWhere {
            subset: *self,
            filter: filter.clone(),
        })
    }
    /// Removes every child that matches `filter` (a query on child fields), across all
    /// parents, from the child collection and from every view, each parent's views backfilled
    /// and its counts and sums recounted; `progress` is called after each batch of parents.
    ///
    /// Resumable: killed at any point and run again with the same filter, it ends as one
    /// uninterrupted run would (see the module docs of how, in each write mode). Each parent
    /// is changed whole or not at all in a transaction; a job as a whole is not atomic, and
    /// pages read while it runs may see some parents done and others not.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the child collection cannot be read (a filter the server refuses,
    /// say); a parent that fails is in [`BulkReport::failures`] and the job goes on.
    pub async fn remove_where(
        &self,
        filter: &Document,
        options: &SweepOptions,
        progress: impl FnMut(&BulkProgress),
    ) -> Result<BulkReport> {
        self.run_where(filter, Change::Remove, options, progress)
            .await
    }

    /// Applies `patch` to every child that matches `filter`, across all parents, in the child
    /// collection and in every view (re-ranked, moved between filtered views, counts and sums
    /// recounted), as [`RawChildren::remove_where`] does; anonymising a user's reviews is
    /// `patch_where(&doc! { "author": "ann" }, &ChildPatch::new().set("author", "anonymous"))`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPatch`] for a patch [`RawChildren::patch`] refuses, and for an `inc`: a
    /// rerun of a job cut off part way could not tell which children it already added to;
    /// otherwise as [`RawChildren::remove_where`].
    pub async fn patch_where(
        &self,
        filter: &Document,
        patch: &ChildPatch,
        options: &SweepOptions,
        progress: impl FnMut(&BulkProgress),
    ) -> Result<BulkReport> {
        self.check_patch(patch)?;
        if patch.is_empty() {
            return Ok(BulkReport::default());
        }
        if let Some(field) = patch.increments().next() {
            return Err(Error::InvalidPatch {
                collection: self.spec().child_collection.to_owned(),
                field: field.to_owned(),
                reason: "is incremented: a patch by filter may set and unset fields, not increment them, so that a rerun of a job cut off part way changes nothing twice".into(),
            });
        }
        self.run_where(filter, Change::Patch(patch), options, progress)
            .await
    }

    /// `filter` and the parent key: `parent`'s children that match, or, without one, the
    /// matching children of any parent (whose key is there).
    fn matching(&self, filter: &Document, parent: Option<&Bson>) -> Document {
        let key = self.spec().key;
        let owned = match parent {
            Some(parent) => doc! { key: parent.clone() },
            None => doc! { key: { "$exists": true } },
        };
        doc! { "$and": [filter.clone(), owned] }
    }

    #[tracing::instrument(skip_all, fields(collection = %self.spec().child_collection, key = self.spec().key))]
    async fn run_where(
        &self,
        filter: &Document,
        change: Change<'_>,
        options: &SweepOptions,
        mut progress: impl FnMut(&BulkProgress),
    ) -> Result<BulkReport> {
        let started = Instant::now();
        let mut report = BulkReport::default();
        let journal = match self.store().mode().await? {
            WriteMode::Transactional => None,
            WriteMode::Ordered => Some(Journal::open(self, filter, change).await?),
        };
        // A rerun first finishes the parents an earlier run left half done.
        if let Some(journal) = &journal {
            for parent in journal.pending.clone() {
                let steps = RecountSteps {
                    subset: self,
                    parent: &parent,
                };
                match exec::execute(self.store(), None, &steps).await {
                    Ok(()) => {
                        journal.done(&parent).await?;
                        report.progress.parents += 1;
                    }
                    Err(Error::ParentNotFound { .. }) => journal.done(&parent).await?,
                    Err(error) => report.fail(parent, self.spec().field, error),
                }
            }
        }
        let batch_size = options.batch_size;
        let mut after: Option<Bson> = None;
        loop {
            let parents = match self
                .parents_matching(filter, after.as_ref(), batch_size)
                .await
            {
                Ok(parents) => parents,
                Err(error) => {
                    // A filter the server refuses: its journal, which lists nothing half
                    // done, goes, so that refused jobs do not pile up.
                    if let Some(journal) = journal {
                        journal.discard_if_idle().await;
                    }
                    return Err(error);
                }
            };
            let Some(last) = parents.last().cloned() else {
                break;
            };
            after = Some(last);
            let visits = parents.into_iter().map(|parent| {
                let journal = journal.as_ref();
                async move {
                    let result = self.one_parent(&parent, filter, change, journal).await;
                    (parent, result)
                }
            });
            let mut visits = futures::stream::iter(visits).buffered(options.concurrency);
            while let Some((parent, result)) = visits.next().await {
                match result {
                    Ok(n) => {
                        report.progress.parents += 1;
                        report.progress.children += n;
                    }
                    // Deleted meanwhile: its children are no one's to fix.
                    Err(Error::ParentNotFound { .. }) => {}
                    Err(error) => {
                        if let Some(journal) = &journal {
                            self.recount_failed(journal, &parent).await;
                        }
                        report.fail(parent, self.spec().field, error);
                    }
                }
            }
            report.progress.elapsed = started.elapsed();
            progress(&report.progress);
        }
        if let Some(journal) = journal {
            if report.failures.is_empty() {
                journal.close().await?;
            } else {
                // Failed parents are recounted as they fail: a journal that lists none holds
                // nothing a rerun needs (their children still match, and a rerun finds them).
                journal.discard_if_idle().await;
            }
        }
        report.progress.elapsed = started.elapsed();
        Ok(report)
    }

    /// The next `batch` distinct parent keys of the matching children, after `after`.
    async fn parents_matching(
        &self,
        filter: &Document,
        after: Option<&Bson>,
        batch: u32,
    ) -> Result<Vec<Bson>> {
        let key = self.spec().key;
        let mut filter = self.matching(filter, None);
        if let Some(after) = after {
            filter = doc! { "$and": [filter, { key: { "$gt": after.clone() } }] };
        }
        let pipeline = [
            doc! { "$match": filter },
            doc! { "$group": { "_id": format!("${key}") } },
            doc! { "$sort": { "_id": 1 } },
            doc! { "$limit": i64::from(batch) },
        ];
        self.children::<Document>()
            .aggregate(pipeline)
            .await
            .map_err(|e| self.mongo_child(e))?
            .map_ok(|mut d| d.remove("_id").unwrap_or(Bson::Null))
            .try_collect()
            .await
            .map_err(|e| self.mongo_child(e))
    }

    /// After `parent`'s step failed in ordered mode (a change the server refused for one of its
    /// children, say), recomputes its views from the child collection, as a rerun would first
    /// do, and takes it off the journal: a step refused part way may have changed some
    /// children already (an `updateMany` stops at the first child it cannot change). Left on
    /// the journal when the recompute fails too, for a rerun to finish.
    async fn recount_failed(&self, journal: &Journal, parent: &Bson) {
        let steps = RecountSteps {
            subset: self,
            parent,
        };
        let recounted = match exec::execute(self.store(), None, &steps).await {
            Ok(()) | Err(Error::ParentNotFound { .. }) => journal.done(parent).await,
            Err(e) => Err(e),
        };
        if let Err(error) = recounted {
            tracing::warn!(%parent, %error, "job by filter: a failed parent stays on the journal");
        }
    }

    /// One parent's step, between its journal entries in ordered mode: how many children it
    /// changed.
    async fn one_parent(
        &self,
        parent: &Bson,
        filter: &Document,
        change: Change<'_>,
        journal: Option<&Journal>,
    ) -> Result<u64> {
        if let Some(journal) = journal {
            journal.begin(parent).await?;
        }
        let steps = WhereSteps {
            subset: self,
            parent,
            filter: self.matching(filter, Some(parent)),
            change,
        };
        let changed = exec::execute(self.store(), None, &steps).await?;
        if let Some(journal) = journal {
            journal.done(parent).await?;
        }
        Ok(changed)
    }
}

impl BulkReport {
    fn fail(&mut self, parent: Bson, field: &str, error: Error) {
        tracing::warn!(%parent, field, %error, "job by filter: parent failed");
        self.progress.failed += 1;
        if self.failures.len() < BulkReport::SAMPLES {
            self.failures.push(ParentFailure::new(parent, field, error));
        }
    }
}

/// One parent's matching children removed or patched, and every view of it recomputed.
struct WhereSteps<'s, 'a> {
    subset: &'s RawChildren<'a>,
    parent: &'s Bson,
    /// The parent's children that match.
    filter: Document,
    change: Change<'s>,
}

impl Steps for WhereSteps<'_, '_> {
    type Output = u64;

    fn parents(&self) -> Vec<&Bson> {
        vec![self.parent]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<u64> {
        let s = self.subset;
        let children = s.children::<Document>();
        let patch = match self.change {
            Change::Remove => return self.remove(ctx).await,
            Change::Patch(patch) => patch,
        };
        // Without a transaction, the children as they were, to put back if the parent refuses.
        let before = match ctx.atomic() {
            true => Vec::new(),
            false => ctx
                .collect(children.find(self.filter.clone()))
                .await
                .map_err(|e| s.mongo_child(e))?,
        };
        let update = children.update_many(self.filter.clone(), patch.update());
        let patched = ctx.run(update).await.map_err(|e| s.mongo_child(e))?;
        match recount(s, ctx, self.parent).await {
            Ok(()) => Ok(patched.modified_count),
            Err(e) => Err(self.undo(ctx, e, &before, false).await),
        }
    }
}

impl WhereSteps<'_, '_> {
    /// The matching children are read, then deleted by `_id`, so that the count and sums move
    /// by exactly what was deleted, as a `remove` does. Should fewer be deleted than were read
    /// (a concurrent remove, without a transaction), they are recounted instead.
    async fn remove(&self, ctx: &mut Ctx<'_>) -> Result<u64> {
        let s = self.subset;
        let children = s.children::<Document>();
        let found = ctx
            .collect(children.find(self.filter.clone()))
            .await
            .map_err(|e| s.mongo_child(e))?;
        if found.is_empty() {
            return Ok(0);
        }
        let ids: Vec<Bson> = found.iter().filter_map(|c| c.get("_id").cloned()).collect();
        let delete = children.delete_many(super::query::owned(s.spec(), self.parent, ids));
        let deleted = ctx.run(delete).await.map_err(|e| s.mongo_child(e))?;
        if deleted.deleted_count != found.len() as u64 {
            recount(s, ctx, self.parent).await?;
            return Ok(deleted.deleted_count);
        }
        let removed: Vec<&Document> = found.iter().collect();
        let resynced = s
            .recompute()
            .resync_views(ctx, self.parent, |view| {
                CountFix::Inc(super::sums::inc(view, &[], &removed))
            })
            .await;
        match resynced {
            Ok(()) => Ok(deleted.deleted_count),
            Err(e) => Err(self.undo(ctx, e, &found, true).await),
        }
    }

    /// After the parent refused what its children's change would make of it (a subset too
    /// large, a sum past its type), without a transaction: the children go back as they were
    /// (`before`; inserted again when they were `removed`) and the parent is rebuilt from them,
    /// so that the step leaves nothing, as a transaction would. Any other error is `error`.
    async fn undo(
        &self,
        ctx: &mut Ctx<'_>,
        error: Error,
        before: &[Document],
        removed: bool,
    ) -> Error {
        if ctx.atomic() || !crate::error::driver::was_refused(&error) || before.is_empty() {
            return error;
        }
        let s = self.subset;
        let children = s.children::<Document>();
        let put_back = match removed {
            true => ctx
                .run(children.insert_many(before).ordered(false))
                .await
                .map(|_| ()),
            false => {
                let mut result = Ok(());
                for child in before {
                    let id = child.get("_id").cloned().unwrap_or(Bson::Null);
                    let filter = doc! { "_id": id, s.spec().key: self.parent.clone() };
                    result = ctx
                        .run(children.replace_one(filter, child))
                        .await
                        .map(|_| ());
                    if result.is_err() {
                        break;
                    }
                }
                result
            }
        };
        if let Err(e) = put_back {
            return s.mongo_child(e);
        }
        ctx.outdated(self.parent);
        error
    }
}

/// Every view of `parent` recomputed from the child collection, counts and sums recounted.
async fn recount(s: &RawChildren<'_>, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<()> {
    s.recompute()
        .resync_views(ctx, parent, |_| CountFix::Recount)
        .await
}

/// A parent an earlier run left half done, finished.
struct RecountSteps<'s, 'a> {
    subset: &'s RawChildren<'a>,
    parent: &'s Bson,
}

impl Steps for RecountSteps<'_, '_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![self.parent]
    }

    fn run(&self, ctx: &mut Ctx<'_>) -> impl Future<Output = Result<()>> + Send {
        recount(self.subset, ctx, self.parent)
    }
}

/// The journal of one job in ordered mode (see the module docs).
struct Journal {
    jobs: Collection<Document>,
    id: Bson,
    /// The parents an earlier run left half done.
    pending: Vec<Bson>,
}

impl Journal {
    /// The job's journal: the one an earlier run of the same job left, or a new one.
    async fn open(s: &RawChildren<'_>, filter: &Document, change: Change<'_>) -> Result<Self> {
        let spec = s.spec();
        let (kind, patch) = match change {
            Change::Remove => ("remove", Bson::Null),
            Change::Patch(patch) => ("patch", Bson::Document(patch.update())),
        };
        // The job is told apart by its filter and change as BSON bytes: stored as a string,
        // since a filter's `$` operators cannot be matched as a field's value.
        let mut bytes = Vec::new();
        // A document of documents always serializes.
        let _ = doc! { "filter": filter.clone(), "patch": patch }.to_writer(&mut bytes);
        let job = doc! {
            "collection": spec.child_collection,
            "key": spec.key,
            "parents": s.store().collection_name(),
            "change": kind,
            "job": URL_SAFE_NO_PAD.encode(bytes),
        };
        let name = s.store().bookkeeping().jobs();
        let jobs = s.store().database().collection::<Document>(name);
        let started = doc! { "$setOnInsert": { "pending": [], "filter": filter.to_string() } };
        let opened = jobs
            .find_one_and_update(job, started)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await
            .map_err(|e| Error::mongo(name, e))?
            .unwrap_or_default();
        let pending = opened
            .get_array("pending")
            .map(|p| p.to_vec())
            .unwrap_or_default();
        Ok(Journal {
            jobs,
            id: opened.get("_id").cloned().unwrap_or(Bson::Null),
            pending,
        })
    }

    async fn begin(&self, parent: &Bson) -> Result<()> {
        let add = doc! { "$addToSet": { "pending": parent.clone() } };
        self.write(add).await
    }

    async fn done(&self, parent: &Bson) -> Result<()> {
        let pull = doc! { "$pull": { "pending": parent.clone() } };
        self.write(pull).await
    }

    async fn write(&self, update: Document) -> Result<()> {
        self.jobs
            .update_one(doc! { "_id": self.id.clone() }, update)
            .await
            .map(|_| ())
            .map_err(|e| Error::mongo(self.jobs.name(), e))
    }

    /// Deletes the journal when it lists no parent half done (it then holds nothing a rerun
    /// needs); a failure to is logged, as the job's own error is the one to report.
    async fn discard_if_idle(self) {
        let idle = doc! { "_id": self.id.clone(), "pending": { "$size": 0 } };
        if let Err(error) = self.jobs.delete_one(idle).await {
            tracing::warn!(%error, "job by filter: its journal could not be deleted");
        }
    }

    async fn close(self) -> Result<()> {
        self.jobs
            .delete_one(doc! { "_id": self.id.clone() })
            .await
            .map(|_| ())
            .map_err(|e| Error::mongo(self.jobs.name(), e))
    }
}
