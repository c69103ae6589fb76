//! Whole-collection passes: reconcile or check every parent in batches, and the server-side cap
//! (a `$jsonSchema` validator) that stops writers outside this library from growing a subset.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use futures::TryStreamExt;

use crate::error::Result;
use crate::model::SubsetSpec;
use crate::raw::RawStore;
use crate::resync::Drift;

/// How many drifted parents a [`SweepReport`] keeps in detail.
const DRIFT_SAMPLES: usize = 1_000;

/// Options of [`RawStore::reconcile_all`] and [`RawStore::check_all`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SweepOptions {
    /// How many parent `_id`s are read per query; at least 1 (`limit(0)` would mean no limit).
    batch_size: u32,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions { batch_size: 500 }
    }
}

impl SweepOptions {
    /// Reads `size` parents per batch.
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size.max(1);
        self
    }
}

/// Where a sweep is, handed to its progress callback after every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepProgress {
    /// Parents looked at.
    pub checked: u64,
    /// Parents with drift in any subset field.
    pub drifted: u64,
    /// Parents rewritten to fix it.
    pub fixed: u64,
    /// Time since the sweep started.
    pub elapsed: Duration,
}

/// The result of a sweep.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SweepReport {
    /// The final counts.
    pub progress: SweepProgress,
    /// The drift found, one entry per drifted parent and field (the first 1,000).
    pub drifts: Vec<(String, Drift)>,
}

impl RawStore {
    /// Reconciles every parent, in `_id` order and batches, calling `progress` after each batch.
    /// Idempotent, and safe while writers run (see [`crate::RawSubset::reconcile`]).
    ///
    /// # Errors
    ///
    /// The first error of a parent (a malformed one, say) stops the sweep: it names the parent,
    /// and a rerun resumes harmlessly from the start.
    pub async fn reconcile_all(
        &self,
        specs: &[SubsetSpec],
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.sweep(specs, options, true, progress).await
    }

    /// The same scan as [`RawStore::reconcile_all`], read-only: what drifted, for monitoring.
    ///
    /// # Errors
    ///
    /// As [`RawStore::reconcile_all`].
    pub async fn check_all(
        &self,
        specs: &[SubsetSpec],
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.sweep(specs, options, false, progress).await
    }

    #[tracing::instrument(skip_all, fields(collection = %self.collection_name(), write))]
    async fn sweep(
        &self,
        specs: &[SubsetSpec],
        options: &SweepOptions,
        write: bool,
        mut progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let mut after: Option<Bson> = None;
        loop {
            let filter = match &after {
                Some(last) => doc! { "_id": { "$gt": last.clone() } },
                None => doc! {},
            };
            let ids: Vec<Document> = self
                .parents::<Document>()
                .find(filter)
                .sort(doc! { "_id": 1 })
                .projection(doc! { "_id": 1 })
                .limit(i64::from(options.batch_size))
                .await
                .map_err(|e| self.mongo(e))?
                .try_collect()
                .await
                .map_err(|e| self.mongo(e))?;
            let Some(last) = ids.last().and_then(|d| d.get("_id")).cloned() else {
                break;
            };
            for id in ids.iter().filter_map(|d| d.get("_id")) {
                let (mut drifted, mut fixed) = (false, false);
                for spec in specs {
                    let subset = self.subset(spec);
                    let drift = if write {
                        subset.reconcile(id).await?
                    } else {
                        subset.check(id).await?
                    };
                    if !drift.is_clean() {
                        drifted = true;
                        fixed |= drift.fixed;
                        if report.drifts.len() < DRIFT_SAMPLES {
                            report.drifts.push((spec.field.to_owned(), drift));
                        }
                    }
                }
                report.progress.checked += 1;
                report.progress.drifted += u64::from(drifted);
                report.progress.fixed += u64::from(fixed);
            }
            report.progress.elapsed = started.elapsed();
            progress(&report.progress);
            after = Some(last);
        }
        report.progress.elapsed = started.elapsed();
        Ok(report)
    }

    /// Installs on the parent collection a `$jsonSchema` validator with `bsonType: "array"` and
    /// `maxItems: keep` for each subset field, so that a write outside this library that forgets
    /// `$slice` is rejected by the server. Creates the collection if needed; merges with (rather
    /// than replaces) a validator the collection already has, replacing only its own earlier
    /// version, so it is idempotent.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`], e.g. when the user lacks the `collMod` privilege.
    #[tracing::instrument(skip_all, fields(collection = %self.collection_name()))]
    pub async fn ensure_schema(&self, specs: &[SubsetSpec]) -> Result<()> {
        let ours = self.schema(specs);
        let db = self.database();
        let existing = db
            .list_collections()
            .filter(doc! { "name": self.collection_name() })
            .await
            .map_err(|e| self.mongo(e))?
            .try_next()
            .await
            .map_err(|e| self.mongo(e))?;
        let Some(existing) = existing else {
            return db
                .create_collection(self.collection_name())
                .validator(ours)
                .await
                .map_err(|e| self.mongo(e));
        };
        let current = existing.options.validator.unwrap_or_default();
        let merged = merge_validator(current.clone(), ours);
        if merged == current {
            return Ok(());
        }
        db.run_command(doc! { "collMod": self.collection_name(), "validator": merged })
            .await
            .map_err(|e| self.mongo(e))?;
        Ok(())
    }

    fn schema(&self, specs: &[SubsetSpec]) -> Document {
        let properties: Document = specs
            .iter()
            .map(|spec| {
                let rule = doc! { "bsonType": "array", "maxItems": i64::from(spec.keep) };
                (spec.field.to_owned(), Bson::Document(rule))
            })
            .collect();
        doc! {
            "$jsonSchema": {
                "title": schema_title(self.collection_name()),
                "bsonType": "object",
                "properties": properties,
            }
        }
    }
}

/// The title that marks our schema inside a user's validator.
fn schema_title(collection: &str) -> String {
    format!("subset: capped subsets of `{collection}`")
}

fn is_ours(validator: &Document) -> bool {
    validator
        .get_document("$jsonSchema")
        .and_then(|s| s.get_str("title"))
        .is_ok_and(|t| t.starts_with("subset: "))
}

/// `current` with our schema in place: alone if there was nothing, swapped for our earlier
/// version, or added to the user's rules under `$and`.
fn merge_validator(current: Document, ours: Document) -> Document {
    if current.is_empty() || is_ours(&current) {
        return ours;
    }
    if current.len() == 1 {
        if let Ok(all) = current.get_array("$and") {
            let mut rules: Vec<Bson> = all
                .iter()
                .filter(|r| !r.as_document().is_some_and(is_ours))
                .cloned()
                .collect();
            rules.push(Bson::Document(ours));
            return doc! { "$and": rules };
        }
    }
    doc! { "$and": [current, ours] }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(keep: i64) -> Document {
        doc! { "$jsonSchema": { "title": schema_title("p"), "properties": { "a": { "maxItems": keep } } } }
    }

    #[test]
    fn merging_keeps_user_rules_and_replaces_only_ours() {
        assert_eq!(merge_validator(Document::new(), ours(5)), ours(5));
        assert_eq!(merge_validator(ours(5), ours(7)), ours(7));
        let user = doc! { "name": { "$type": "string" } };
        let merged = merge_validator(user.clone(), ours(5));
        assert_eq!(merged, doc! { "$and": [user.clone(), ours(5)] });
        let again = merge_validator(merged, ours(7));
        assert_eq!(again, doc! { "$and": [user, ours(7)] });
    }
}
