//! Whole-collection passes: every parent in `_id` order and batches, a few at once, and the two
//! passes built on it, `reconcile_all` and `check_all` (`resync_all` with the caller's rules).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::bson::{doc, Bson, Document};
use futures::{Stream, StreamExt, TryStreamExt};

use super::model_change::Rebuilding;
use super::resync::{Emptying, Resync};
use super::{Drift, RawStore};
use crate::action::Action;
use crate::error::{Error, Result};
use crate::job::SweepOptions;
use crate::model::SubsetSpec;

/// Where a sweep is, handed to its progress callback after every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SweepProgress {
    /// Parents looked at.
    pub checked: u64,
    /// Parents with drift in any subset field.
    pub drifted: u64,
    /// Parents rewritten to fix it.
    pub fixed: u64,
    /// Parents that could not be checked or fixed (see [`SweepReport::failures`]).
    pub failed: u64,
    /// Malformed children found (see [`Drift::malformed`]): stored children no subset may
    /// embed, left out of their parents' subsets and reported, in [`SweepReport::drifts`], with
    /// their parents (which count as drifted only if their subsets were wrong too).
    pub malformed: u64,
    /// Parents with a view built under another definition of the model (see
    /// [`Drift::outdated`]); a reconcile or [`RawStore::rebuild`] rebuilt them.
    pub outdated: u64,
    /// Children of pushes found queued for a fold (see [`Drift::queued`]): pushes whose caller
    /// went away, which a reconcile in transactions wrote.
    pub queued: u64,
    /// Time since the sweep started.
    pub elapsed: Duration,
}

/// A parent a sweep could not check or fix, and why.
#[derive(Debug)]
#[non_exhaustive]
pub struct ParentFailure {
    /// The parent's `_id`.
    pub parent: Bson,
    /// The subset field (BSON name) being checked or fixed.
    pub field: String,
    /// What went wrong: a malformed parent, say, named in the error.
    pub error: Error,
}

impl ParentFailure {
    /// `parent` cannot be checked or fixed in `field`, for `error`: what the `refuse` of
    /// [`RawStore::resync_all`] returns.
    pub fn new(parent: Bson, field: impl Into<String>, error: Error) -> Self {
        ParentFailure {
            parent,
            field: field.into(),
            error,
        }
    }
}

/// The result of a sweep.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct SweepReport {
    /// The final counts.
    pub progress: SweepProgress,
    /// The drift found, one entry per drifted parent and field (the first 1,000).
    pub drifts: Vec<(String, Drift)>,
    /// The parents that failed, one entry per parent and field (the first 1,000); the sweep
    /// went on past each of them.
    pub failures: Vec<ParentFailure>,
}

impl SweepReport {
    /// How many drifted parents, and how many failed ones, a report keeps in detail.
    pub const SAMPLES: usize = 1_000;
}

/// How many parents a rebuild reads and writes together (see `model_change/rebuild_batch.rs`).
const REBUILD_BATCH: usize = 32;

/// The refusal of a sweep that refuses no parent.
fn refuse_none(_: Vec<Bson>) -> futures::future::Ready<Result<Vec<ParentFailure>>> {
    futures::future::ok(Vec::new())
}

/// Runs `visit` on every item of `batches`, `concurrency` at once, and yields the results in
/// order. An `Err` item is `batches` failing, and ends the stream: nothing after it is visited.
fn visit_each<'s, X, T, V, F>(
    batches: impl Stream<Item = Result<Vec<X>>> + 's,
    concurrency: usize,
    mut visit: V,
) -> impl Stream<Item = Result<T>> + 's
where
    X: 's,
    V: FnMut(X) -> F + 's,
    F: Future<Output = T> + 's,
{
    let mut failed = false;
    batches
        .take_while(move |batch| {
            let before = failed;
            failed |= batch.is_err();
            futures::future::ready(!before)
        })
        .map_ok(|batch| futures::stream::iter(batch.into_iter().map(Ok)))
        .try_flatten()
        .map(move |item| {
            let visiting = item.map(&mut visit);
            async move { Ok(visiting?.await) }
        })
        .buffered(concurrency)
}

impl RawStore {
    /// The parent `_id`s, in `_id` order, `batch_size` per query: a scan that stays correct while
    /// the documents it has passed are rewritten, and that needs no long-lived cursor.
    pub fn parent_ids(&self, batch_size: u32) -> impl Stream<Item = Result<Vec<Bson>>> + Send {
        self.parent_ids_where(Document::new(), batch_size)
    }

    /// [`RawStore::parent_ids`] of the parents matching `filter`.
    fn parent_ids_where(
        &self,
        filter: Document,
        batch_size: u32,
    ) -> impl Stream<Item = Result<Vec<Bson>>> + Send {
        let parents = self.parents::<Document>();
        let name = self.collection_name();
        futures::stream::try_unfold(Some(None), move |after: Option<Option<Bson>>| {
            let parents = parents.clone();
            let mut filter = filter.clone();
            async move {
                let Some(after) = after else {
                    return Ok(None);
                };
                if let Some(last) = after {
                    filter.insert("_id", doc! { "$gt": last });
                }
                let ids: Vec<Bson> = parents
                    .find(filter)
                    .sort(doc! { "_id": 1 })
                    .projection(doc! { "_id": 1 })
                    .limit(i64::from(batch_size.max(1)))
                    .await
                    .map_err(|e| Error::mongo(name, e))?
                    .map_ok(|mut d| d.remove("_id").unwrap_or(Bson::Null))
                    .try_collect()
                    .await
                    .map_err(|e| Error::mongo(name, e))?;
                Ok(ids.last().cloned().map(|last| (ids, Some(Some(last)))))
            }
        })
    }

    /// Runs `visit` on every parent, in `_id` order and batches, `concurrency` at once, and
    /// yields each parent's `_id` with its result, in `_id` order. The caller decides what a
    /// failed parent means (stop, skip, report); an `Err` item is the scan itself failing.
    pub fn sweep<'s, T, V, F>(
        &'s self,
        options: &SweepOptions,
        mut visit: V,
    ) -> impl Stream<Item = Result<(Bson, Result<T>)>> + 's
    where
        V: FnMut(Bson) -> F + 's,
        F: Future<Output = Result<T>> + 's,
        T: 's,
    {
        visit_each(
            self.parent_ids(options.batch_size),
            options.concurrency,
            move |id: Bson| {
                let visiting = visit(id.clone());
                async move { (id, visiting.await) }
            },
        )
    }

    /// Reconciles every parent's subsets, in `_id` order and batches, calling `progress` after
    /// each batch. Idempotent, and safe while writers run (see
    /// [`crate::raw::Children::reconcile`]). A parent built under another definition is rebuilt,
    /// unless [`RawStore::rebuild`] would refuse it ([`Error::RebuildWouldEmpty`], see
    /// [`SweepOptions::allow_emptying`]), which then fails it here too. A parent that fails (a malformed one, say) is recorded in
    /// [`SweepReport::failures`] and the sweep goes on. At the end, the fold documents of
    /// parents that are gone are deleted.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the parent collection itself cannot be scanned.
    pub async fn reconcile_all(
        &self,
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.resync_all(options, true, refuse_none, |_| false, progress)
            .await
    }

    /// Rebuilds, under this store's definition of the model, every parent whose views were
    /// built under another (the guide's *Changing a model on live data*): the step after deploying a
    /// changed model, or after rolling one back, that puts reads back to one query.
    ///
    /// First makes this definition the one every writer converges to, whatever code version
    /// it runs, then visits the parents not marked as built under it (parents written without
    /// a marker too, which it marks), in `_id` order and batches,
    /// rebuilding them from the child collections 32 at a time (one transaction for the 32 where
    /// there are transactions; a parent its batch cannot finish is rebuilt on its own, and
    /// fails alone).
    /// Resumable: a rerun visits only what is left. Safe beside writers of this and of other
    /// definitions: a parent a writer of an older definition changes meanwhile is marked again
    /// and read from the child collection until a writer of this one, or the next rebuild,
    /// comes by; [`SweepProgress::outdated`] of a [`RawStore::check_all`] says how many.
    ///
    /// The report counts the parents rebuilt in [`SweepProgress::fixed`] (also
    /// [`SweepProgress::outdated`]) and names those that failed.
    ///
    /// At the end it drops from the registry the stored definitions no parent is built under
    /// any more ([`crate::bookkeeping::Registered`]): it keeps the current one, and any other
    /// while a parent is built under it (the legacy one while parents without a marker remain,
    /// a parent that failed keeps its own); the digests stay listed.
    ///
    /// A parent whose rebuild would empty a view that holds children today, while those
    /// children are still stored under another key (a renamed key), is not rebuilt: it fails
    /// with [`Error::RebuildWouldEmpty`], and when the first parents to rebuild all would,
    /// nothing is written and the rebuild returns that error (unless
    /// [`SweepOptions::allow_emptying`]). A reconcile or check of such a parent fails the same
    /// way. A view whose children are gone (its last child removed by code of another model,
    /// which left the view as it was) is rebuilt empty.
    ///
    /// # Errors
    ///
    /// [`Error::RebuildWouldEmpty`]; [`Error::Mongo`] when the registry cannot be written or the
    /// parent collection scanned.
    #[tracing::instrument(skip_all, fields(collection = %self.collection_name()))]
    pub async fn rebuild(
        &self,
        options: &SweepOptions,
        mut progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        let started = Instant::now();
        // Not marked as built under this model (unmarked parents too, which the rebuild marks
        // whatever they were built under), or without one of its fields.
        let own = self.shared.definition.digest();
        let marker = format!("{}.d", super::MARKER);
        let mut outdated = vec![Bson::Document(doc! { marker: { "$ne": own } })];
        for spec in self.spec().subsets {
            outdated.push(Bson::Document(doc! { spec.field: { "$exists": false } }));
        }
        let outdated = doc! { "$or": outdated };
        if !options.allow_emptying {
            // Before anything is written (the registry first): a model whose key matches no
            // child would empty every parent, and a few of them say so.
            self.model().refuse_emptying(&outdated).await?;
        }
        self.model().make_current().await?;
        let ids = self.parent_ids_where(outdated, options.batch_size);
        let allow_emptying = options.allow_emptying;
        let batches = ids.map_ok(|ids| {
            ids.chunks(REBUILD_BATCH)
                .map(<[Bson]>::to_vec)
                .collect::<Vec<_>>()
        });
        let visits = visit_each(batches, options.concurrency, |batch: Vec<Bson>| {
            self.rebuild_batch(batch, allow_emptying)
        });
        futures::pin_mut!(visits);
        let mut report = SweepReport::default();
        let every = u64::from(options.batch_size);
        while let Some(rebuilt) = visits.try_next().await? {
            let p = &mut report.progress;
            let before = p.checked;
            for (id, rebuilt) in rebuilt {
                match rebuilt {
                    Ok(()) => {
                        p.checked += 1;
                        p.outdated += 1;
                        p.fixed += 1;
                    }
                    // Deleted since the scan.
                    Err(Error::ParentNotFound { .. }) => {}
                    Err(error) => {
                        p.checked += 1;
                        p.failed += 1;
                        tracing::warn!(parent = %id, %error, "rebuild: parent failed");
                        if report.failures.len() < SweepReport::SAMPLES {
                            report.failures.push(ParentFailure::new(id, "", error));
                        }
                    }
                }
            }
            if p.checked / every > before / every {
                p.elapsed = started.elapsed();
                progress(p);
            }
        }
        // Definitions the rebuild moved every parent off are of no more use to anyone.
        self.model().drop_unused_definitions().await?;
        // Every parent is built under this model now: reads find nothing to read ahead.
        self.shared.lookahead.reset();
        report.progress.elapsed = started.elapsed();
        progress(&report.progress);
        Ok(report)
    }

    /// Rebuilds `parents` as one batch (see `model_change/rebuild_batch.rs`), then each parent
    /// the batch left on its own, as [`RawStore::rebuild`] always has: one result per parent,
    /// in order.
    async fn rebuild_batch(
        &self,
        parents: Vec<Bson>,
        allow_emptying: bool,
    ) -> Vec<(Bson, Result<()>)> {
        let batch = self.model().rebuild_batch(&parents, allow_emptying);
        let done = match super::exec::execute(self, None, &batch).await {
            Ok(done) => done,
            Err(error) => {
                tracing::debug!(%error, "a rebuild batch failed; its parents go alone");
                vec![Rebuilding::Alone; parents.len()]
            }
        };
        let mut results = Vec::with_capacity(parents.len());
        for (id, done) in parents.iter().zip(done) {
            let rebuilt = match done {
                Rebuilding::Rebuilt => Ok(()),
                Rebuilding::Alone => {
                    let steps = self.model().rebuild_steps(id, allow_emptying);
                    super::exec::execute(self, None, &steps).await
                }
            };
            results.push((id.clone(), rebuilt));
        }
        results
    }

    /// [`RawStore::reconcile_all`] for some of the subset fields only: a follower catching up on
    /// one child collection.
    pub(crate) async fn reconcile_fields(
        &self,
        fields: &[SubsetSpec],
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.resync_fields(fields, options, true, refuse_none, |_| false, progress)
            .await
    }

    /// The same pass as [`RawStore::reconcile_all`], read-only: what drifted, for monitoring.
    ///
    /// # Errors
    ///
    /// As [`RawStore::reconcile_all`].
    pub async fn check_all(
        &self,
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.resync_all(options, false, refuse_none, |_| false, progress)
            .await
    }

    /// The pass of [`RawStore::reconcile_all`] (`write`) or [`RawStore::check_all`], with the
    /// caller's own rules. Before a batch is visited, `refuse` returns the parents of it to pass
    /// over, each with its failure: a rule that takes one query a batch rather than one a
    /// parent; an error of `refuse` ends the pass before any parent of its batch is visited.
    /// Every failure, refused or met, is shown to `stop`: the first it returns `true` for ends
    /// the pass with its error (the parents after it already under way, `concurrency` at most,
    /// are not waited for), and the others are recorded as in [`RawStore::reconcile_all`].
    ///
    /// # Errors
    ///
    /// As [`RawStore::reconcile_all`]; an error of `refuse`; the error of the failure that
    /// stopped the pass.
    pub async fn resync_all<R, F>(
        &self,
        options: &SweepOptions,
        write: bool,
        refuse: R,
        stop: impl FnMut(&ParentFailure) -> bool,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport>
    where
        R: FnMut(Vec<Bson>) -> F,
        F: Future<Output = Result<Vec<ParentFailure>>>,
    {
        self.resync_fields(self.spec().subsets, options, write, refuse, stop, progress)
            .await
    }

    #[tracing::instrument(skip_all, fields(collection = %self.collection_name(), write))]
    async fn resync_fields<R, F>(
        &self,
        fields: &[SubsetSpec],
        options: &SweepOptions,
        write: bool,
        mut refuse: R,
        mut stop: impl FnMut(&ParentFailure) -> bool,
        mut progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport>
    where
        R: FnMut(Vec<Bson>) -> F,
        F: Future<Output = Result<Vec<ParentFailure>>>,
    {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let batches = self.parent_ids(options.batch_size).and_then(|ids| {
            let refusing = refuse(ids.clone());
            async move {
                let mut refused = refusing.await?;
                Ok(ids
                    .into_iter()
                    .map(|id| {
                        let mine = refused.extract_if(.., |f| f.parent == id).collect();
                        (id, mine)
                    })
                    .collect::<Vec<(Bson, Vec<ParentFailure>)>>())
            }
        });
        let parents = visit_each(batches, options.concurrency, |(id, refused)| async move {
            let mut found = Vec::with_capacity(fields.len());
            if refused.is_empty() {
                for spec in fields {
                    let resync = match write {
                        true => Resync::Fix,
                        false => Resync::Check,
                    };
                    let emptying = match options.allow_emptying {
                        true => Emptying::Allowed,
                        false => Emptying::Refused,
                    };
                    let subset = self.children(spec);
                    let op = subset.resync_of(&id, resync, emptying);
                    let result = Action::of(op).await;
                    found.push((spec.field.to_owned(), result));
                }
            } else {
                found.extend(refused.into_iter().map(|f| (f.field, Err(f.error))));
            }
            (id, found)
        });
        futures::pin_mut!(parents);
        while let Some((id, found)) = parents.try_next().await? {
            let (mut drifted, mut fixed, mut failed) = (false, false, false);
            let mut outdated = false;
            for (field, result) in found {
                match result {
                    // Deleted between the `_id` scan and its resync: nothing to compare.
                    Err(Error::ParentNotFound { .. }) => {}
                    Err(error) => {
                        failed = true;
                        tracing::warn!(parent = %id, field, %error, "sweep: parent failed");
                        let failure = ParentFailure::new(id.clone(), field, error);
                        if stop(&failure) {
                            return Err(failure.error);
                        }
                        if report.failures.len() < SweepReport::SAMPLES {
                            report.failures.push(failure);
                        }
                    }
                    Ok(drift) if drift.is_clean() => {}
                    Ok(drift) => {
                        drifted |= !drift.is_in_sync();
                        outdated |= drift.outdated;
                        fixed |= drift.fixed;
                        report.progress.malformed += drift.malformed.len() as u64;
                        report.progress.queued += drift.queued.len() as u64;
                        if report.drifts.len() < SweepReport::SAMPLES {
                            report.drifts.push((field, drift));
                        }
                    }
                }
            }
            let p = &mut report.progress;
            p.checked += 1;
            p.drifted += u64::from(drifted);
            p.fixed += u64::from(fixed);
            p.failed += u64::from(failed);
            p.outdated += u64::from(outdated);
            if p.checked % u64::from(options.batch_size) == 0 {
                p.elapsed = started.elapsed();
                progress(p);
            }
        }
        if write {
            // The queues of parents deleted without this library (or by a version that left
            // them): nothing can be written for them any more.
            let dropped = self.drop_orphan_folds().await?;
            tracing::debug!(dropped, "fold documents of deleted parents dropped");
        }
        report.progress.elapsed = started.elapsed();
        if report.progress.checked % u64::from(options.batch_size) != 0 {
            progress(&report.progress);
        }
        Ok(report)
    }
}
