//! Keeping subsets true while other programs write the child collections: a resumable
//! change-stream follower.
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the options, the [`Follow`] operation and the [`Follower`] handle |
//! | `run.rs` | running a follower: the checks first, one stream per child collection, the stop |
//! | `stream.rs` | one child collection's stream: its loop, reading batches, saving the place |
//! | `apply.rs` | applying a batch: its parents resynced once each, retries, the batch report |
//! | `catch_up.rs` | the full pass when the changes cannot be read one by one |
//! | `pre_images.rs` | checking and turning on the pre- and post-images the follower needs |
//! | `event.rs` | which parents a change event concerns |
//! | `token.rs` | where a follower's place (its resume tokens) is saved |
//! | `stats.rs` | totals, batch reports, updates for an observer |
//!
//! One change stream per distinct child collection of the store; each event is mapped to the
//! parents it concerns in every subset field stored in that collection. Events are gathered
//! for a short window, parents deduplicated and resynced with the race-safe reconcile (which
//! writes nothing when it finds no drift, so the library's own writes cost no second write),
//! and only then is the place saved. A follower stopped at any point, even killed, redoes at
//! most its last batch when it starts again.

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;

use super::RawStore;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::job::SweepOptions;

mod apply;
mod catch_up;
mod event;
mod pre_images;
mod run;
mod stats;
mod stream;
mod token;

pub use stats::{CatchUp, FollowBatch, FollowStats, FollowUpdate};

use stats::Counters;

/// Options of [`RawStore::follow`] and [`crate::Store::follow`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FollowOptions {
    name: String,
    window: Duration,
    max_batch: usize,
    concurrency: usize,
    token_collection: Option<String>,
    catch_up: bool,
    enable_pre_images: bool,
    sweep: SweepOptions,
}

impl FollowOptions {
    /// A follower named `name`: its place is saved under this name, so a follower started again
    /// with the same name goes on where the last one stopped. Run one follower per name.
    pub fn new(name: impl Into<String>) -> Self {
        FollowOptions {
            name: name.into(),
            window: Duration::from_millis(100),
            max_batch: 1_000,
            concurrency: 8,
            token_collection: None,
            catch_up: false,
            enable_pre_images: true,
            sweep: SweepOptions::default(),
        }
    }

    /// The follower's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Gathers events for up to `window` after the first one of a batch (default 100 ms), so
    /// that a burst on one parent costs one resync. Also the longest wait of one read for
    /// events (between 10 ms and 1 s), which bounds how long a stop waits.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Ends a batch at `n` events even within its window (default 1,000; at least 1).
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// Resyncs up to `n` parents at once (default 8; at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Saves the place in `collection` of the store's database (default: the store's
    /// [`Names::followers`](crate::bookkeeping::Names::followers), `subset_followers` under the
    /// default prefix).
    pub fn token_collection(mut self, collection: impl Into<String>) -> Self {
        self.token_collection = Some(collection.into());
        self
    }

    /// On a first start (no saved place), reconciles every parent before following, to take in
    /// what other programs wrote before the follower existed (default: off; the follower then
    /// keeps true what changes from its first start on).
    pub fn catch_up(mut self, yes: bool) -> Self {
        self.catch_up = yes;
        self
    }

    /// Whether the follower may turn on `changeStreamPreAndPostImages` on the child collections
    /// (default: yes). Without them a deleted child's parent cannot be told; with `false`, a
    /// collection without them is an [`Error::FollowUnsupported`].
    pub fn enable_pre_images(mut self, yes: bool) -> Self {
        self.enable_pre_images = yes;
        self
    }

    /// How catch-ups scan the parents (see [`CatchUp`]).
    pub fn sweep(mut self, options: SweepOptions) -> Self {
        self.sweep = options;
        self
    }
}

/// The observer given to [`Follow::on_update`].
type Observer = Arc<dyn Fn(&FollowUpdate<'_>) + Send + Sync>;

/// A follower, built by [`RawStore::follow`] or [`crate::Store::follow`]: awaiting it runs it
/// until it is stopped ([`Follow::until`]) or fails; [`Follow::spawn`] runs it in a task of its
/// own behind a [`Follower`] handle.
///
/// ```no_run
/// # use subset_runtime::follow::FollowOptions;
/// # use subset_runtime::raw;
/// # async fn demo(
/// #     store: raw::Store,
/// #     shutdown_signal: impl std::future::Future<Output = ()> + Send + 'static,
/// # ) -> subset_runtime::Result<()> {
/// // In a service: a task of its own, stopped (its place saved) at shutdown.
/// let follower = store.follow(FollowOptions::new("reviews")).spawn();
/// // … serve …
/// let stats = follower.stop().await?;
/// println!("{} events, {} parents rewritten", stats.events, stats.written);
///
/// // Or in the caller's task, until a signal (`tokio::signal::ctrl_c`, say).
/// store
///     .follow(FollowOptions::new("reviews"))
///     .until(shutdown_signal)
///     .await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a follower does nothing until it is awaited or spawned"]
pub struct Follow {
    store: RawStore,
    options: FollowOptions,
    shutdown: Option<BoxFuture<'static, ()>>,
    observer: Option<Observer>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow")
            .field("store", &self.store)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Follow {
    /// Stops when `shutdown` completes: the batch in hand is finished and its place saved.
    pub fn until(mut self, shutdown: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(shutdown.boxed());
        self
    }

    /// Calls `observer` with every [`FollowUpdate`]: streams started, batches applied, catch-ups.
    /// It runs in the follower's task between batches, so it should be quick (send to a channel,
    /// bump a metric, print a line).
    pub fn on_update(
        mut self,
        observer: impl Fn(&FollowUpdate<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The running totals, shared with the follower once it runs.
    pub fn stats(&self) -> FollowStats {
        self.counters.snapshot()
    }

    /// Runs the follower in a task of its own (on the current Tokio runtime) and returns its
    /// handle. Dropping the handle stops the follower the same way as [`Follower::stop`], in
    /// the background.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn spawn(mut self) -> Follower {
        let (stop, stopped) = oneshot::channel::<()>();
        let counters = Arc::clone(&self.counters);
        let follow = match self.shutdown.take() {
            Some(shutdown) => {
                let either = futures::future::select(shutdown, stopped).map(|_| ());
                self.until(either)
            }
            None => self.until(stopped.map(|_| ())),
        };
        Follower {
            stop: Some(stop),
            task: tokio::spawn(follow.into_future()),
            counters,
        }
    }
}

impl IntoFuture for Follow {
    type Output = Result<FollowStats>;
    type IntoFuture = BoxFuture<'static, Result<FollowStats>>;

    fn into_future(self) -> Self::IntoFuture {
        self.run().boxed()
    }
}

/// A follower running in a task of its own ([`Follow::spawn`]).
#[derive(Debug)]
pub struct Follower {
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<FollowStats>>,
    counters: Arc<Counters>,
}

impl Follower {
    /// The running totals.
    pub fn stats(&self) -> FollowStats {
        self.counters.snapshot()
    }

    /// Whether the follower has ended: stopped, or failed (then [`Follower::stop`] returns the
    /// error).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the follower: the batch in hand is finished and its place saved. Returns the final
    /// totals.
    ///
    /// # Errors
    ///
    /// The error the follower failed with, if it failed before the stop.
    pub async fn stop(mut self) -> Result<FollowStats> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is shutting down and cancelled the task: the counters say what was
            // done; a batch cut short was not saved, so the next start redoes it.
            Err(_) => Ok(self.counters.snapshot()),
        }
    }
}

impl RawStore {
    /// A follower that keeps every subset of this store true while other programs write the
    /// child collections: it follows each child collection's change stream, resyncs the parents
    /// each change concerns, and saves its place (resume token) after they are resynced, so that
    /// it can be stopped or killed and started again without missing a change. Await it, or
    /// [`Follow::spawn`] it.
    ///
    /// Needs a replica set or a sharded cluster, MongoDB 6.0 or later, and
    /// `changeStreamPreAndPostImages` on each child collection, which it turns on itself unless
    /// told not to ([`FollowOptions::enable_pre_images`]). When its place can no longer be
    /// resumed (it fell off the oplog), it says so and reconciles every parent of that
    /// collection before following again.
    ///
    /// # Errors
    ///
    /// When awaited: [`Error::FollowUnsupported`] on a standalone server, or when pre-images
    /// cannot be turned on; [`Error::Mongo`] when the server fails in a way that retrying a
    /// batch did not get past (the place is then not moved past that batch).
    pub fn follow(&self, options: FollowOptions) -> Follow {
        Follow {
            store: self.clone(),
            options,
            shutdown: None,
            observer: None,
            counters: Arc::default(),
        }
    }
}
