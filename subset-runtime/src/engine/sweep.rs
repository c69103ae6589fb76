//! Whole-collection passes: every parent in `_id` order and batches, a few at once, and the two
//! passes built on it, `reconcile_all` and `check_all`.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::bson::{doc, Bson, Document};
use futures::{Stream, StreamExt, TryStreamExt};

use super::{Drift, RawStore};
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// How many drifted parents, and how many failed ones, a [`SweepReport`] keeps in detail.
const SAMPLES: usize = 1_000;

/// Options of [`RawStore::sweep`], [`RawStore::reconcile_all`] and [`RawStore::check_all`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SweepOptions {
    /// How many parent `_id`s are read per query; at least 1 (`limit(0)` would mean no limit).
    batch_size: u32,
    /// How many parents are visited at once; at least 1.
    concurrency: usize,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            batch_size: 500,
            concurrency: 4,
        }
    }
}

impl SweepOptions {
    /// Reads `size` parent `_id`s per query (default 500).
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// Visits up to `n` parents at once (default 4).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
}

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

impl RawStore {
    /// The parent `_id`s, in `_id` order, `batch_size` per query: a scan that stays correct while
    /// the documents it has passed are rewritten, and that needs no long-lived cursor.
    pub fn parent_ids(&self, batch_size: u32) -> impl Stream<Item = Result<Vec<Bson>>> + Send {
        let parents = self.parents::<Document>();
        let name = self.collection_name();
        futures::stream::try_unfold(Some(None), move |after: Option<Option<Bson>>| {
            let parents = parents.clone();
            async move {
                let Some(after) = after else {
                    return Ok(None);
                };
                let filter = match after {
                    Some(last) => doc! { "_id": { "$gt": last } },
                    None => doc! {},
                };
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
        self.parent_ids(options.batch_size)
            .map_ok(|ids| futures::stream::iter(ids.into_iter().map(Ok)))
            .try_flatten()
            .map(move |id| {
                let visited = id.map(|id| (id.clone(), visit(id)));
                async move {
                    let (id, visiting) = visited?;
                    Ok((id, visiting.await))
                }
            })
            .buffered(options.concurrency)
    }

    /// Reconciles every parent's subsets, in `_id` order and batches, calling `progress` after
    /// each batch. Idempotent, and safe while writers run (see
    /// [`crate::raw::RawSubset::reconcile`]). A parent that fails (a malformed one, say) is recorded in
    /// [`SweepReport::failures`] and the sweep goes on.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the parent collection itself cannot be scanned.
    pub async fn reconcile_all(
        &self,
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.resync_all(self.spec().subsets, options, true, progress)
            .await
    }

    /// [`RawStore::reconcile_all`] for some of the subset fields only: a follower catching up on
    /// one child collection.
    pub(crate) async fn reconcile_fields(
        &self,
        fields: &[SubsetSpec],
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.resync_all(fields, options, true, progress).await
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
        self.resync_all(self.spec().subsets, options, false, progress)
            .await
    }

    #[tracing::instrument(skip_all, fields(collection = %self.collection_name(), write))]
    async fn resync_all(
        &self,
        fields: &[SubsetSpec],
        options: &SweepOptions,
        write: bool,
        mut progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let parents = self.sweep(options, |id| async move {
            let mut found = Vec::with_capacity(fields.len());
            for spec in fields {
                let result = self.subset(spec).resync_in(&id, write, None).await;
                found.push((spec.field, result));
            }
            Ok(found)
        });
        futures::pin_mut!(parents);
        while let Some((id, found)) = parents.try_next().await? {
            let (mut drifted, mut fixed, mut failed) = (false, false, false);
            for (field, result) in found.unwrap_or_default() {
                match result {
                    // Deleted between the `_id` scan and its resync: nothing to compare.
                    Err(Error::ParentNotFound { .. }) => {}
                    Err(error) => {
                        failed = true;
                        tracing::warn!(parent = %id, field, %error, "sweep: parent failed");
                        if report.failures.len() < SAMPLES {
                            report.failures.push(ParentFailure {
                                parent: id.clone(),
                                field: field.to_owned(),
                                error,
                            });
                        }
                    }
                    Ok(drift) if drift.is_clean() => {}
                    Ok(drift) => {
                        drifted = true;
                        fixed |= drift.fixed;
                        if report.drifts.len() < SAMPLES {
                            report.drifts.push((field.to_owned(), drift));
                        }
                    }
                }
            }
            let p = &mut report.progress;
            p.checked += 1;
            p.drifted += u64::from(drifted);
            p.fixed += u64::from(fixed);
            p.failed += u64::from(failed);
            if p.checked % u64::from(options.batch_size) == 0 {
                p.elapsed = started.elapsed();
                progress(p);
            }
        }
        report.progress.elapsed = started.elapsed();
        if report.progress.checked % u64::from(options.batch_size) != 0 {
            progress(&report.progress);
        }
        Ok(report)
    }
}
