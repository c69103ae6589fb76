//! What a follower tells: running totals, one report per batch, and the updates an observer
//! receives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::SweepReport;

/// A follower's running totals, from [`crate::follow::Follower::stats`], each batch's
/// [`FollowBatch::totals`], or the result of a follower that stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FollowStats {
    /// Change events read.
    pub events: u64,
    /// Batches applied (each followed by a saved resume token).
    pub batches: u64,
    /// Subset resyncs run: one per parent and subset field a batch concerned, however many of
    /// its events named that parent.
    pub resynced: u64,
    /// Of those, the ones that found drift and rewrote the parent.
    pub written: u64,
    /// Of those, the ones that found the parent in sync and wrote nothing: a write this library
    /// made itself (already right), or a change that left the subset as it was.
    pub skipped: u64,
    /// Parents named by events that do not exist, or whose key no parent `_id` can be (an
    /// array, say): the children that name them belong to no parent (a key of another type
    /// than the parents' `_id`s, a string among ObjectIds, names no parent either).
    pub orphaned: u64,
    /// Children written without any parent key (no key field of any subset over their
    /// collection): they belong to no parent, and each is logged with its `_id`.
    pub keyless: u64,
    /// Malformed children the resyncs found (see [`crate::repair::Drift::malformed`]): left out
    /// of their subsets, and counted at each resync of their parents until they are fixed.
    pub malformed: u64,
    /// Parents that could not be resynced for reasons of their own (a malformed document, a
    /// subset over 16 MiB, an adoption cut off whose array holds the only copies of some
    /// children), logged and passed over; `reconcile_all` names them.
    pub failed: u64,
    /// Full passes over a child collection's parents, run when changes could not be read one
    /// by one (see [`CatchUp`]).
    pub catch_ups: u64,
    /// The last batch's lag: from the wall-clock time of its oldest event to its parents being
    /// resynced.
    pub last_lag: Option<Duration>,
    /// The largest lag of any batch.
    pub max_lag: Duration,
}

/// One applied batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FollowBatch {
    /// The child collection whose events these were.
    pub collection: &'static str,
    /// Events in the batch.
    pub events: u64,
    /// Subset resyncs run (distinct parent and field pairs).
    pub resynced: u64,
    /// Of those, the ones that rewrote the parent.
    pub written: u64,
    /// Of those, the ones that found the parent in sync.
    pub skipped: u64,
    /// Parents not found (see [`FollowStats::orphaned`]).
    pub orphaned: u64,
    /// Children written without a parent key (see [`FollowStats::keyless`]).
    pub keyless: u64,
    /// Malformed children found (see [`FollowStats::malformed`]).
    pub malformed: u64,
    /// Parents passed over (see [`FollowStats::failed`]).
    pub failed: u64,
    /// From the wall-clock time of the batch's oldest event to its parents being resynced.
    pub lag: Option<Duration>,
    /// How long resyncing the batch took.
    pub took: Duration,
    /// The follower's totals after this batch.
    pub totals: FollowStats,
}

/// Why a follower reconciles every parent of a child collection instead of reading changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// The first start of a follower with [`crate::follow::FollowOptions::catch_up`] and no saved
    /// place: whatever other programs wrote before it started.
    FirstStart,
    /// The saved resume token can no longer be resumed: it fell off the oplog
    /// (`ChangeStreamHistoryLost`) or the server no longer finds it.
    HistoryLost,
    /// Changes whose pre- or post-image the server did not record (made before pre-images were
    /// enabled, or expired): their parents are unknown.
    MissingImages,
    /// The child collection was dropped or renamed, which ends its change stream.
    Dropped,
}

/// What a follower reports to the observer given to [`crate::follow::Follow::on_update`].
#[derive(Debug)]
#[non_exhaustive]
pub enum FollowUpdate<'a> {
    /// A change stream opened on `collection`: resumed from the saved place, or from now.
    Started {
        /// The child collection.
        collection: &'static str,
        /// Whether it resumed from a saved resume token.
        resumed: bool,
    },
    /// A batch was applied and its resume token saved.
    Batch(&'a FollowBatch),
    /// A full reconcile of `collection`'s subset fields begins.
    CatchingUp {
        /// The child collection.
        collection: &'static str,
        /// Why.
        reason: CatchUp,
    },
    /// That reconcile finished, and the stream goes on from where it began.
    CaughtUp {
        /// The child collection.
        collection: &'static str,
        /// What the pass found and fixed.
        report: &'a SweepReport,
    },
    /// The follower of `collection` stopped on request, its place saved.
    Stopped {
        /// The child collection.
        collection: &'static str,
    },
}

/// No lag measured yet.
const NO_LAG: u64 = u64::MAX;

/// The totals, shared by a running follower and its handle.
#[derive(Debug)]
pub(crate) struct Counters {
    events: AtomicU64,
    batches: AtomicU64,
    resynced: AtomicU64,
    written: AtomicU64,
    skipped: AtomicU64,
    orphaned: AtomicU64,
    keyless: AtomicU64,
    malformed: AtomicU64,
    failed: AtomicU64,
    catch_ups: AtomicU64,
    last_lag_us: AtomicU64,
    max_lag_us: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            events: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            resynced: AtomicU64::new(0),
            written: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            orphaned: AtomicU64::new(0),
            keyless: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            catch_ups: AtomicU64::new(0),
            last_lag_us: AtomicU64::new(NO_LAG),
            max_lag_us: AtomicU64::new(0),
        }
    }
}

impl Counters {
    pub(crate) fn snapshot(&self) -> FollowStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let last = get(&self.last_lag_us);
        FollowStats {
            events: get(&self.events),
            batches: get(&self.batches),
            resynced: get(&self.resynced),
            written: get(&self.written),
            skipped: get(&self.skipped),
            orphaned: get(&self.orphaned),
            keyless: get(&self.keyless),
            malformed: get(&self.malformed),
            failed: get(&self.failed),
            catch_ups: get(&self.catch_ups),
            last_lag: (last != NO_LAG).then(|| Duration::from_micros(last)),
            max_lag: Duration::from_micros(get(&self.max_lag_us)),
        }
    }

    /// Adds a batch to the totals.
    pub(super) fn add(&self, batch: &FollowBatch) {
        let add = |c: &AtomicU64, n: u64| c.fetch_add(n, Ordering::Relaxed);
        add(&self.events, batch.events);
        add(&self.batches, 1);
        add(&self.resynced, batch.resynced);
        add(&self.written, batch.written);
        add(&self.skipped, batch.skipped);
        add(&self.orphaned, batch.orphaned);
        add(&self.keyless, batch.keyless);
        add(&self.malformed, batch.malformed);
        add(&self.failed, batch.failed);
        if let Some(lag) = batch.lag {
            let us = u64::try_from(lag.as_micros()).unwrap_or(NO_LAG - 1);
            self.last_lag_us.store(us, Ordering::Relaxed);
            self.max_lag_us.fetch_max(us, Ordering::Relaxed);
        }
    }

    /// Counts the events of a batch that a full pass replaced.
    pub(super) fn add_events(&self, n: u64) {
        self.events.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds a full pass to the totals.
    pub(super) fn add_catch_up(&self, report: &SweepReport) {
        let add = |c: &AtomicU64, n: u64| c.fetch_add(n, Ordering::Relaxed);
        let p = &report.progress;
        add(&self.catch_ups, 1);
        add(&self.resynced, p.checked);
        add(&self.written, p.fixed);
        add(
            &self.skipped,
            p.checked.saturating_sub(p.drifted + p.failed),
        );
        add(&self.failed, p.failed);
        add(&self.malformed, p.malformed);
    }
}
