//! The BSON-level engine: one implementation of the pattern's writes and reads, working on
//! documents and descriptors. The typed [`crate::Store`] and [`crate::Subset`] are thin layers
//! over it; tools that know collections and fields only at run time use it directly.
//!
//! One file per operation, each written once as [`exec::Steps`] that the executor ([`exec`])
//! runs in a transaction, in order, or in the caller's transaction:
//!
//! | file | holds |
//! |---|---|
//! | `exec.rs` | the executor: transactions and their retry loop, ordered runs, caller sessions |
//! | `insert.rs`, `delete.rs` | a parent with its children, in and out |
//! | `push.rs` | `push` / `push_many`: the child insert and the capped `$push` |
//! | `page.rs` | merged pagination, `all`, `count` |
//! | `remove_update.rs` | removing and replacing one child |
//! | `resync.rs` | recomputing a subset from the child collection: backfill, reconcile, check |
//! | `sweep.rs` | every parent in `_id` batches: `reconcile_all`, `check_all`, and the sweep itself |
//! | `schema.rs` | the child-collection indexes and the server-side cap |
//! | `query.rs` | the queries several operations share |
//! | `driver_error.rs` | what a driver error means for us |

use std::sync::Arc;

use bson::{doc, Bson};
use mongodb::{Collection, Database};
use tokio::sync::OnceCell;

use crate::error::{Error, Result};
use crate::model::{ParentSpec, SubsetSpec};

mod delete;
pub mod driver_error;
mod exec;
mod insert;
mod page;
mod push;
mod query;
mod remove_update;
mod resync;
mod schema;
mod sweep;

pub use resync::Drift;
pub use sweep::{ParentFailure, SweepOptions, SweepProgress, SweepReport};

/// How a store makes its double writes (child collection + embedded copy) hang together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// Every multi-document write runs in one transaction (replica sets and sharded clusters).
    Transactional,
    /// Writes run one after the other, child collection first, so that a crash in between leaves
    /// drift that `reconcile` repairs, never a lost child: a pushed child missing from the
    /// subset or uncounted, or the embedded copy of a removed or replaced child left behind
    /// (standalone servers, which have no transactions).
    Ordered,
}

/// A parent collection at the BSON level, with its subset fields and its write mode.
///
/// Cheap to clone; clones share the detected [`WriteMode`].
#[derive(Clone)]
pub struct RawStore {
    db: Database,
    spec: ParentSpec,
    mode: Arc<OnceCell<WriteMode>>,
}

impl std::fmt::Debug for RawStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawStore")
            .field("database", &self.db.name())
            .field("collection", &self.spec.collection)
            .field("mode", &self.mode.get())
            .finish()
    }
}

impl RawStore {
    /// The parent collection described by `spec`, in `db`. The write mode is detected on first
    /// use.
    pub fn new(db: &Database, spec: ParentSpec) -> Self {
        RawStore {
            db: db.clone(),
            spec,
            mode: Arc::new(OnceCell::new()),
        }
    }

    /// The same store with its write mode forced.
    pub fn with_mode(self, mode: WriteMode) -> Self {
        RawStore {
            mode: Arc::new(OnceCell::new_with(Some(mode))),
            ..self
        }
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// The parent collection and its subset fields.
    pub fn spec(&self) -> &ParentSpec {
        &self.spec
    }

    /// The parent collection's name.
    pub fn collection_name(&self) -> &'static str {
        self.spec.collection
    }

    /// The write mode: forced, or detected once with a `hello` command (a replica set member or
    /// a `mongos` means [`WriteMode::Transactional`]).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the server cannot be reached.
    pub async fn mode(&self) -> Result<WriteMode> {
        self.mode
            .get_or_try_init(|| async {
                let hello = self
                    .db
                    .run_command(doc! { "hello": 1 })
                    .await
                    .map_err(|e| self.mongo(e))?;
                let replicated = hello.contains_key("setName")
                    || hello.get_str("msg").is_ok_and(|m| m == "isdbgrid");
                let mode = if replicated {
                    WriteMode::Transactional
                } else {
                    WriteMode::Ordered
                };
                tracing::debug!(?mode, "detected write mode");
                Ok(mode)
            })
            .await
            .copied()
    }

    /// The engine of one subset field of this collection.
    pub fn subset<'a>(&'a self, spec: &'a SubsetSpec) -> RawSubset<'a> {
        RawSubset { store: self, spec }
    }

    pub(crate) fn parents<T: Send + Sync>(&self) -> Collection<T> {
        self.db.collection(self.spec.collection)
    }

    pub(crate) fn mongo(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.spec.collection, e)
    }
}

/// One subset field of a [`RawStore`]: the double write and merged pagination over documents.
#[derive(Debug, Clone, Copy)]
pub struct RawSubset<'a> {
    store: &'a RawStore,
    spec: &'a SubsetSpec,
}

impl<'a> RawSubset<'a> {
    /// The field's descriptor.
    pub fn spec(&self) -> &'a SubsetSpec {
        self.spec
    }

    /// The store.
    pub fn store(&self) -> &'a RawStore {
        self.store
    }

    pub(crate) fn children<T: Send + Sync>(&self) -> Collection<T> {
        self.store.db.collection(self.spec.child_collection)
    }

    pub(crate) fn mongo_child(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.spec.child_collection, e)
    }

    pub(crate) fn parent_not_found(&self, parent: &Bson) -> Error {
        Error::ParentNotFound {
            collection: self.store.spec.collection.to_owned(),
            id: Box::new(parent.clone()),
        }
    }
}
