//! [`StoreOptions`]: how a store writes and reads, and where it keeps its bookkeeping.

use mongodb::options::{ReadConcern, WriteConcern};

use crate::bookkeeping::names::{Names, PrefixError};
use crate::engine::WriteMode;

/// How a store writes and reads, and where it keeps its bookkeeping: given once, when the store
/// is made ([`Store::with_options`](crate::Store::with_options),
/// [`raw::Store::with_options`](crate::raw::Store::with_options)), as the driver's
/// `ClientOptions`. The default is what [`Store::new`](crate::Store::new) uses.
///
/// ```
/// # use subset_runtime as subset;
/// use subset::{StoreOptions, WriteMode};
///
/// let options = StoreOptions::new()
///     .mode(WriteMode::Ordered)
///     .bookkeeping_prefix("shop_subset")?;
/// assert_eq!(options.bookkeeping.folds(), "shop_subset_folds");
/// # Ok::<(), subset::bookkeeping::PrefixError>(())
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The write mode; `None` (the default) detects it with a `hello` command on first use (a
    /// replica set member or a `mongos` means [`WriteMode::Transactional`]).
    pub mode: Option<WriteMode>,
    /// The write concern of the transactions the store starts; `None` (the default) is
    /// `w: majority`, whatever the client or database says. A caller's transaction keeps the
    /// caller's concerns; ordered writes use the database's, as every other write on it does.
    pub write_concern: Option<WriteConcern>,
    /// The read concern of reads outside transactions (`get`, pages, `count`, `all`, and the
    /// reads of an ordered write); `None` (the default) inherits the database's. `majority`
    /// never shows a child that a failover later rolls back; `local` (the server's default) is
    /// faster. Reads inside a transaction use the transaction's snapshot.
    pub read_concern: Option<ReadConcern>,
    /// Whether pushes to a parent that several processes push to at once are folded (default:
    /// off). Pushes to one parent within a process always share a transaction (group commit);
    /// transactions of different processes on one parent still conflict, and retry. Folding
    /// queues such pushes in a document per parent in [`Names::folds`] (`subset_folds`), where
    /// one transaction at a time writes them all, and waits for them with a change stream: it
    /// creates that collection and needs the `changeStream` privilege, which is why it is asked
    /// for. Without it, a parent contended across processes is reported: a `tracing` warning
    /// once per parent, and [`Store::contention`](crate::Store::contention). Only on replica
    /// sets and sharded clusters (transactions).
    pub folding: bool,
    /// The names of the store's own collections (see [`crate::bookkeeping`]); default under
    /// [`DEFAULT_PREFIX`](crate::bookkeeping::DEFAULT_PREFIX).
    pub bookkeeping: Names,
}

impl StoreOptions {
    /// The default options.
    pub fn new() -> Self {
        StoreOptions::default()
    }

    /// Forces the write mode, e.g. [`WriteMode::Ordered`] to skip transactions on a replica set
    /// where the caller accepts the standalone guarantees (see [`StoreOptions::mode`]).
    pub fn mode(mut self, mode: WriteMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// The write concern of the store's own transactions (see [`StoreOptions::write_concern`]).
    pub fn write_concern(mut self, concern: WriteConcern) -> Self {
        self.write_concern = Some(concern);
        self
    }

    /// The read concern outside transactions (see [`StoreOptions::read_concern`]).
    pub fn read_concern(mut self, concern: ReadConcern) -> Self {
        self.read_concern = Some(concern);
        self
    }

    /// Folds pushes to a parent contended across processes (see [`StoreOptions::folding`]).
    pub fn folding(mut self, on: bool) -> Self {
        self.folding = on;
        self
    }

    /// Keeps the store's own collections under `prefix` rather than
    /// [`DEFAULT_PREFIX`](crate::bookkeeping::DEFAULT_PREFIX) (`subset`): `<prefix>_definitions`,
    /// `<prefix>_folds`, `<prefix>_jobs` and `<prefix>_followers`, as GridFS keeps its buckets
    /// under one prefix. The marker field of each parent stays `_subset`. Every store and
    /// program (the command line's `--bookkeeping-prefix`) writing the same parents must use
    /// the same prefix: a store of another prefix reads another registry, and another queue of
    /// folded pushes.
    ///
    /// # Errors
    ///
    /// [`PrefixError`] for a prefix no collection name can start with (empty, longer than
    /// [`MAX_PREFIX_LEN`](crate::bookkeeping::MAX_PREFIX_LEN) bytes, or with a `$`, a `.` or a
    /// NUL).
    pub fn bookkeeping_prefix(mut self, prefix: &str) -> Result<Self, PrefixError> {
        self.bookkeeping = Names::with_prefix(prefix)?;
        Ok(self)
    }
}
