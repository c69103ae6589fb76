//! Applying a batch: the parents its events concern, each resynced once, retried while the
//! failure may pass, and the report of what it came to.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::bson::{Bson, DateTime};
use futures::StreamExt;

use super::event::{self, Event, Meaning};
use super::stats::FollowBatch;
use super::stream::{Applied, CollectionFollower};
use crate::action::Action;
use crate::engine::exec;
use crate::engine::resync::{Emptying, Resync};
use crate::error::{Error, Result};

/// How many times a batch's failed resyncs are tried before the follower gives up (without
/// saving the batch's place, so that a restart redoes it).
const ATTEMPTS: u32 = 6;

/// What resyncing a batch's parents found.
#[derive(Default)]
struct Tally {
    written: u64,
    skipped: u64,
    orphaned: u64,
    malformed: u64,
    failed: u64,
}

impl CollectionFollower<'_> {
    /// Resyncs every parent the events concern, each once.
    pub(super) async fn apply(&self, events: &[Event]) -> Result<Applied> {
        let started = Instant::now();
        let (mut parents, mut keyless) = (Vec::new(), Vec::new());
        for e in events {
            if event::map(e, &self.fields, &mut parents, &mut keyless) == Meaning::MissingImage {
                return Ok(Applied::MissingImages);
            }
        }
        for child in &keyless {
            tracing::warn!(collection = self.name, child = %child, "a child without a parent key: it belongs to no parent");
        }
        // A burst on one parent costs one resync. Debug output names the BSON type and the
        // value, which is what tells two parent keys apart.
        let mut seen = HashSet::new();
        parents.retain(|(field, parent)| seen.insert((*field, format!("{parent:?}"))));
        let resynced = parents.len() as u64;
        let tally = self.resync(parents).await?;
        let now = DateTime::now().timestamp_millis();
        let oldest = events.iter().filter_map(wall_millis).min();
        let lag = oldest.map(|t| Duration::from_millis(u64::try_from(now - t).unwrap_or(0)));
        Ok(Applied::Batch(Box::new(FollowBatch {
            collection: self.name,
            events: events.len() as u64,
            resynced,
            written: tally.written,
            skipped: tally.skipped,
            orphaned: tally.orphaned,
            keyless: keyless.len() as u64,
            malformed: tally.malformed,
            failed: tally.failed,
            lag,
            took: started.elapsed(),
            totals: Default::default(),
        })))
    }

    /// Reconciles each (field, parent), `concurrency` at once. A parent that failed for a reason
    /// that may pass (the server, the network) or that kept changing under the resync is tried
    /// again; one that failed for a reason of its own is logged and passed over, as
    /// `reconcile_all` does.
    async fn resync(&self, parents: Vec<(usize, Bson)>) -> Result<Tally> {
        let store = self.shared.store;
        let mut tally = Tally::default();
        let mut pending = parents;
        for attempt in 1..=ATTEMPTS {
            let results: Vec<_> = futures::stream::iter(pending.drain(..))
                .map(|(field, parent)| {
                    // Each reconcile runs in a task of its own, so that a follower whose task is
                    // aborted never leaves a transaction half-done: the driver marks a
                    // transaction committed before it sends `commitTransaction`, so one cut off
                    // there would not be aborted, and would hold its parent until the server's
                    // transaction lifetime (60 s) ran out. The reconcile finishes; the place is
                    // not saved, so the next start redoes it.
                    let (store, spec, key) = (store.clone(), self.fields[field], parent.clone());
                    // Unguarded: it follows child writes, and settles a parent of another
                    // definition as those writes do; but not a parent whose adoption was cut
                    // off, whose array holds children only it has (`NotMigrated`, passed over).
                    let task = tokio::spawn(async move {
                        let subset = store.children(&spec);
                        let op = subset.resync_of(&key, Resync::Fix, Emptying::Following);
                        Action::of(op).await
                    });
                    async move {
                        match task.await {
                            Ok(result) => (field, parent, Some(result)),
                            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                            // Cancelled: the runtime is shutting down, and this follower with it.
                            Err(_) => (field, parent, None),
                        }
                    }
                })
                .buffer_unordered(self.shared.options.concurrency)
                .collect()
                .await;
            let mut error = None;
            for (field, parent, result) in results {
                let Some(result) = result else {
                    pending.push((field, parent));
                    continue;
                };
                if let Ok(drift) = &result {
                    tally.malformed += drift.malformed.len() as u64;
                }
                match result {
                    Ok(drift) if drift.is_in_sync() => tally.skipped += 1,
                    Ok(drift) if drift.fixed => tally.written += 1,
                    // Drift the conditional rewrite could not fix: the parent kept changing.
                    Ok(_) => pending.push((field, parent)),
                    // A key no parent has, or none can have (an array, say): no subset to keep.
                    Err(Error::ParentNotFound { .. } | Error::InvalidId { .. }) => {
                        tally.orphaned += 1
                    }
                    Err(
                        e @ (Error::MalformedParent { .. }
                        | Error::MalformedChild { .. }
                        | Error::SubsetTooLarge { .. }
                        | Error::NumberOverflow { .. }
                        | Error::NotMigrated { .. }),
                    ) => {
                        tracing::warn!(parent = %parent, field = self.fields[field].field, error = %e, "parent passed over");
                        tally.failed += 1;
                    }
                    Err(e) => {
                        tracing::debug!(parent = %parent, attempt, error = %e, "resync failed; trying again");
                        pending.push((field, parent));
                        error = Some(e);
                    }
                }
            }
            if pending.is_empty() {
                break;
            }
            if attempt == ATTEMPTS {
                if let Some(e) = error {
                    return Err(e);
                }
                tracing::warn!(
                    parents = pending.len(),
                    "parents kept changing under every resync; passed over"
                );
                tally.failed += pending.len() as u64;
                break;
            }
            exec::backoff(attempt).await;
        }
        Ok(tally)
    }
}

/// When the event happened, by the server's wall clock (6.0+), else its cluster time (whole
/// seconds).
fn wall_millis(e: &Event) -> Option<i64> {
    e.wall_time
        .map(|t| t.timestamp_millis())
        .or_else(|| e.cluster_time.map(|t| i64::from(t.time) * 1000))
}
