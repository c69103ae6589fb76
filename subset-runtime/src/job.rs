//! [`Job`]: a call across parents (a sweep, a rebuild, a bulk removal), run when awaited.

use std::fmt;
use std::future::IntoFuture;

use futures::future::BoxFuture;

use crate::error::Result;

/// The progress callback a job calls after each batch of parents.
pub(crate) type Progress<'a, P> = Box<dyn FnMut(&P) + Send + 'a>;

type Run<'a, T, P> =
    Box<dyn FnOnce(SweepOptions, Progress<'a, P>) -> BoxFuture<'a, Result<T>> + Send + 'a>;

/// A call across parents that runs when awaited, with the same shape as the calls on one
/// parent ([`crate::Action`]): [`Store::check_all`](crate::Store::check_all),
/// [`Store::reconcile_all`](crate::Store::reconcile_all), [`Store::rebuild`](crate::Store::rebuild)
/// and [`Children::remove_where`](crate::Children::remove_where) return one.
///
/// `T` is what it reports, `P` what it hands its progress callback after each batch of parents.
/// Its future is `Send`, so a job can be spawned, raced in `select!` or bounded by
/// `tokio::time::timeout` as it is.
///
/// It takes no session: each parent is changed in a transaction of its own (on a replica set),
/// so that a job over millions of parents neither holds one transaction open for its whole run
/// nor loses all its work to one failure.
///
/// ```no_run
/// # use subset_runtime as subset;
/// # async fn demo<P: subset::Subset>(store: subset::Store<P>) -> subset::Result<()> {
/// use subset::repair::SweepOptions;
///
/// let report = store
///     .reconcile_all()
///     .options(SweepOptions::default().batch_size(1_000))
///     .progress(|p| eprintln!("{} parents visited", p.checked))
///     .await?;
/// assert!(report.failures.is_empty());
/// # Ok(())
/// # }
/// ```
#[must_use = "a job does nothing until it is awaited"]
pub struct Job<'a, T, P> {
    options: SweepOptions,
    progress: Progress<'a, P>,
    run: Run<'a, T, P>,
}

impl<'a, T, P> Job<'a, T, P> {
    pub(crate) fn new(
        run: impl FnOnce(SweepOptions, Progress<'a, P>) -> BoxFuture<'a, Result<T>> + Send + 'a,
    ) -> Self {
        Job {
            options: SweepOptions::default(),
            progress: Box::new(|_| {}),
            run: Box::new(run),
        }
    }

    /// How many parents are read per batch and visited at once (default
    /// [`SweepOptions::default`]).
    pub fn options(mut self, options: SweepOptions) -> Self {
        self.options = options;
        self
    }

    /// Calls `progress` after each batch of parents (by default, nothing is called).
    pub fn progress(mut self, progress: impl FnMut(&P) + Send + 'a) -> Self {
        self.progress = Box::new(progress);
        self
    }
}

impl<'a, T: 'a, P: 'a> IntoFuture for Job<'a, T, P> {
    type Output = Result<T>;
    type IntoFuture = BoxFuture<'a, Result<T>>;

    fn into_future(self) -> Self::IntoFuture {
        (self.run)(self.options, self.progress)
    }
}

impl<T, P> fmt::Debug for Job<'_, T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Options of [`crate::raw::Store::sweep`], [`crate::raw::Store::reconcile_all`], [`crate::raw::Store::check_all`] and
/// [`crate::raw::Store::resync_all`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SweepOptions {
    /// How many parent `_id`s are read per query; at least 1 (`limit(0)` would mean no limit).
    pub(crate) batch_size: u32,
    /// How many parents are visited at once; at least 1.
    pub(crate) concurrency: usize,
    /// Whether a rebuild may empty a view that holds children today.
    pub(crate) allow_emptying: bool,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            batch_size: 500,
            concurrency: 4,
            allow_emptying: false,
        }
    }
}

impl SweepOptions {
    /// Reads `size` parent `_id`s per query (default 500).
    pub fn batch_size(mut self, size: u32) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// For [`crate::raw::Store::rebuild`], [`crate::raw::Store::reconcile_all`] and [`crate::raw::Store::check_all`]:
    /// rebuilds (or reports as to be rebuilt) a parent of another definition even when that
    /// empties a view whose children are still stored under another key (default: refused, see
    /// [`crate::Error::RebuildWouldEmpty`]). A renamed key usually wants `key = "…"` on the field
    /// instead. A view whose children are gone is rebuilt empty either way.
    pub fn allow_emptying(mut self, allow: bool) -> Self {
        self.allow_emptying = allow;
        self
    }

    /// Visits up to `n` parents at once (default 4).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
}
