//! Which definition of the model each parent's views were built under, so that a model can
//! change on live data: a new view, another `keep`, order, filter, preview, count or sum.
//!
//! **The marker.** Every parent this library writes carries `_subset: { d, v }`: `d` names the
//! whole definition the parent's views were built under (a digest of every view of the store),
//! `v` holds, per view field, the digest of that view without its `keep` and the `keep`. A
//! reader trusts a view whose digest is its own and whose stored `keep` covers its own (a
//! larger one is trimmed); any other view it computes from the child collection, which is
//! always right and costs a query. Only writers of the same whole definition change a parent
//! in place: each parent update is conditional on `d`, so code with another definition never
//! edits views it does not know (a view added by newer code, say).
//!
//! A view's entry may also hold `m`, a note that malformed children are among the view's head
//! (see `guard.rs`), which a resync writes and a rebuild's marking keeps. Beside `d` and `v`, a
//! marker may hold `a_<field>`, the mark of an adoption of that view under way (see
//! `marker.rs`), which neither names a definition nor counts as one.
//!
//! **The registry.** One document per parent collection in the registry collection
//! ([`Names::definitions`](crate::bookkeeping::Names::definitions), `subset_definitions`): the
//! definition writes converge to (`current`), every definition seen (`seen`, digests in the
//! order of deploys, and `definitions`, each whole: see `stored.rs` and
//! [`Registered`]), and the one parents without a marker were built under (`legacy`, the first registered: data written before
//! markers existed, or by other programs). A store registers its definition on first use (its
//! first write, or its first read of a parent without a marker); a definition never seen before becomes current (a deploy of new code), one seen before
//! does not (an old process restarting during a rolling deploy). [`crate::raw::Store::rebuild`] makes
//! its definition current explicitly (after a rollback).
//!
//! **A write that finds a parent of another definition** (its parent update, through
//! [`crate::engine::parent_write`], matched nothing and the parent is of another definition) leaves
//! it to the executor, which settles it after the operation's own writes: if the store's definition is
//! current it rebuilds every view of the parent from the child collection and marks it; if not
//! (old code during a deploy) it cannot build the current views, so it marks the parent as
//! built under none, and every reader computes it until a writer of the current definition or a
//! rebuild comes by. Old and new code never undo each other's work: the parent only ever moves
//! towards the current definition.
//!
//! | file | holds |
//! |---|---|
//! | `digest.rs` | [`Definition`]: the digests of a store's definition and of each view, and its marker |
//! | `registry.rs` | the registry: which definition is current, which one unmarked parents were built under |
//! | `stored.rs` | a definition as the registry keeps it whole, and read back |
//! | `guard.rs` | the condition a parent update carries, and how a stored parent's views may be read |
//! | `lookahead.rs` | when a read asks for the children with the parent, in one command |
//! | `rebuild.rs` | settling a parent of another definition: rebuilt under this one, or marked for a rebuild |
//! | `rebuild_batch.rs` | a rebuild's batch: many parents rebuilt from one read of each collection |

mod digest;
mod guard;
mod lookahead;
mod marker;
mod rebuild;
mod rebuild_batch;
mod registry;
mod stored;

pub(crate) use digest::Definition;
pub(crate) use guard::{marked, touch, ViewState};
pub(crate) use lookahead::Lookahead;
pub(crate) use marker::{
    adopting, adoption_mark, malformed_note, noted_malformed, ADOPTING, MARKER,
};
pub(crate) use rebuild::unmarked;
pub(crate) use rebuild_batch::Rebuilding;
pub(crate) use registry::RegistryCache;

use super::RawStore;
pub use registry::{Registered, RegisteredDefinition};

/// The model-change subsystem of a store: the registry of definitions, which definition each
/// parent was built under, and settling a parent of another one (see the module docs). Its
/// state lives in the store (`definition`, `registry`), which it reads through.
#[derive(Clone, Copy)]
pub(crate) struct Model<'a> {
    pub(super) store: &'a RawStore,
}

impl std::ops::Deref for Model<'_> {
    type Target = RawStore;

    fn deref(&self) -> &RawStore {
        self.store
    }
}

impl RawStore {
    /// The model-change subsystem of this store.
    pub(crate) fn model(&self) -> Model<'_> {
        Model { store: self }
    }
}
