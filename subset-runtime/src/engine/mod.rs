//! The BSON-level engine: one implementation of the pattern's writes and reads, working on
//! documents and descriptors. The typed [`crate::Store`] and [`crate::Children`] are thin layers
//! over it; tools that know collections and fields only at run time use it directly.
//!
//! One file per operation, each written once as [`exec::Steps`] that the executor ([`exec`])
//! runs in a transaction, in order, or in the caller's transaction:
//!
//! | file | holds |
//! |---|---|
//! | `handle.rs` | the handles, [`RawStore`] and [`RawChildren`], and their accessors |
//! | `exec/` | the executor: transactions and their retry loop, ordered runs under a lease, caller sessions, turns on a parent, settling |
//! | `parent_write.rs` | the one way an operation updates a parent: the model guard, the touch, the fence |
//! | `insert.rs`, `delete.rs` | a parent with its children, in and out |
//! | `push/` | `push` / `push_many`: its strategies (direct, group commit, fold), the ordered path, the capped `$push` |
//! | `batch.rs` | what pushes and patches queue for a parent's turn holder to take along |
//! | `page.rs` | merged pagination, `all`, `count` |
//! | `parent_key.rs` | the parent key in a child as it is written: filled in, or refused when it names another parent |
//! | `remove_update.rs` | removing and replacing one child |
//! | `patch/` | changing some fields of children, in every copy: the change, and its writes |
//! | `move_child.rs` | a child from one parent to another |
//! | `adopt.rs` | a parent that embeds all its children, into the subset layout |
//! | `bulk.rs` | removing or patching the children that match a filter, across parents |
//! | `model_change/` | which definition of the model each parent's views were built under, and settling a parent of another one |
//! | `resync/` | recomputing a subset from the child collection: backfill, reconcile, check |
//! | `orphans.rs` | children of no parent, found from the child collection |
//! | `sweep.rs` | every parent in `_id` batches: `reconcile_all`, `check_all`, and the sweep itself |
//! | `views.rs` | the fields grouped by the children they show, once per store |
//! | `schema.rs` | the child-collection indexes and the server-side cap |
//! | `follow/` | the change-stream follower: other programs' writes to the child collections |
//! | `numbers.rs` | counts and sums kept within their Rust types |
//! | `query.rs` | the queries several operations share |

mod abreast;
mod adopt;
mod batch;
mod bulk;
mod by_child;
mod decimal;
mod delete;
mod exec;
mod follow;
mod handle;
mod insert;
mod model_change;
mod move_child;
mod numbers;
mod orphans;
mod page;
mod parent_key;
mod parent_write;
mod patch;
mod push;
pub(crate) mod query;
mod remove_update;
mod resync;
mod schema;
mod status;
mod sums;
mod sweep;
mod views;

pub use adopt::{Adopted, Refusal};
pub use bulk::{BulkProgress, BulkReport, Matches};
pub(crate) use by_child::ByChild;
pub use follow::{
    CatchUp, Follow, FollowBatch, FollowOptions, FollowStats, FollowUpdate, Follower,
};
pub(crate) use handle::bson_len;
pub use handle::{RawChildren, RawStore};
pub(crate) use model_change::MARKER;
pub use model_change::{Registered, RegisteredDefinition};
pub(crate) use numbers::Range;
pub use orphans::Orphans;
pub use patch::ChildPatch;
pub use push::fold::Contention;
pub use resync::{Drift, MalformedChild, SumDrift};
pub use status::{
    DefinitionStatus, FoldQueue, FollowerPlace, JobJournal, ModelStatus, Status, ViewName,
};
pub use sweep::{ParentFailure, SweepProgress, SweepReport};

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
