//! The handles: [`RawStore`], a parent collection at the BSON level, and [`RawChildren`], one
//! of its subset fields. Each operation adds its public methods in its own file.

use std::sync::Arc;

use crate::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::options::{Acknowledgment, CollectionOptions, ReadConcern, WriteConcern};
use mongodb::{Collection, Database};
use tokio::sync::OnceCell;

use super::Contention;
use super::{abreast, batch, exec, model_change, push, views, WriteMode};
use crate::bookkeeping::names::Names;
use crate::error::{Error, Result};
use crate::model::{ParentSpec, SubsetSpec};
use crate::options::StoreOptions;

/// Whether a `hello` reply is from a server that knows `$sortArray` (MongoDB 5.2, wire
/// version 15).
fn sorts_arrays(hello: &Document) -> bool {
    hello.get_i32("maxWireVersion").is_ok_and(|v| v >= 15)
}

/// The concerns a store sets itself rather than inheriting them from the client.
#[derive(Debug, Clone)]
struct Concerns {
    /// The write concern of the transactions the store starts.
    transaction: WriteConcern,
    /// The read concern of reads outside transactions; `None` inherits the database's.
    read: Option<ReadConcern>,
}

/// Why an acknowledged push may not survive what the deployment is exposed to, given the
/// concern its writes actually use: in transactions the store's own (`transaction`), whose
/// `w` other than majority lets a failover roll a push back; in ordered writes the database's,
/// which without `j: true` on a standalone server may not be journaled before a crash.
fn durability_warning(
    mode: WriteMode,
    transaction: &WriteConcern,
    db: Option<&WriteConcern>,
) -> Option<&'static str> {
    match mode {
        WriteMode::Transactional => transaction
            .w
            .as_ref()
            .is_some_and(|w| *w != Acknowledgment::Majority)
            .then_some(
                "the store's transactions use a write concern other than w: majority: an acknowledged push can be rolled back by a failover",
            ),
        WriteMode::Ordered => (db.and_then(|c| c.journal) != Some(true)).then_some(
            "ordered writes without a j: true write concern on the database: an acknowledged push can be lost in a crash",
        ),
    }
}

/// A parent collection at the BSON level, with its subset fields and its write mode.
///
/// Cheap to clone (one `Arc`, as the driver's `Client`); clones share the detected
/// [`WriteMode`], the turns on parents and the registry they read.
#[derive(Clone)]
pub struct RawStore {
    pub(super) shared: Arc<Shared>,
}

/// What a store and its clones share: the subsystems' state.
pub(super) struct Shared {
    pub(super) db: Database,
    pub(super) spec: ParentSpec,
    concerns: Concerns,
    pub(super) views: views::ViewTable,
    pub(super) definition: model_change::Definition,
    pub(super) registry: model_change::RegistryCache,
    /// Which views reads ask for with the parent (a model changing).
    pub(super) lookahead: model_change::Lookahead,
    pub(super) traffic: exec::traffic::Traffic<batch::Queued>,
    pub(super) across: exec::traffic::Across<Arc<abreast::Aboard>>,
    pub(super) mode: OnceCell<WriteMode>,
    /// Whether the server sorts arrays in expressions (`$sortArray`, MongoDB 5.2), asked once.
    pub(super) sorts_arrays: OnceCell<bool>,
    pub(super) folds: push::fold::Folds,
    pub(super) names: Names,
}

impl std::fmt::Debug for RawStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawStore")
            .field("database", &self.shared.db.name())
            .field("collection", &self.shared.spec.collection)
            .field("mode", &self.shared.mode.get())
            .finish()
    }
}

impl RawStore {
    /// The parent collection described by `spec`, in `db`, with the default options (the write
    /// mode is detected on first use).
    pub fn new(db: &Database, spec: ParentSpec) -> Self {
        RawStore::with_options(db, spec, StoreOptions::default())
    }

    /// The parent collection described by `spec`, in `db`, with `options`.
    pub fn with_options(db: &Database, spec: ParentSpec, options: StoreOptions) -> Self {
        RawStore::made(db, spec, options, false)
    }

    /// A store of some subset fields of a model defined elsewhere (a command-line tool given
    /// one field): it reads and repairs those fields as a store of the whole model does, but
    /// leaves the definition each parent was built under to the stores of the whole model. It
    /// registers nothing and writes no marker. It takes a parent as built under its fields when
    /// the parent has no marker, or one whose entries for these fields are exactly their
    /// definitions and `keep`s; its writes to any other parent change the child collections
    /// and mark the parent as built under none, which every reader then computes and the
    /// whole model's next write or rebuild builds. Its checks report such a parent as
    /// [`crate::repair::Drift::outdated`]; its [`RawStore::rebuild`] is
    /// [`Error::PartialModel`].
    pub fn for_fields(db: &Database, spec: ParentSpec, options: StoreOptions) -> Self {
        RawStore::made(db, spec, options, true)
    }

    fn made(db: &Database, spec: ParentSpec, options: StoreOptions, partial: bool) -> Self {
        let StoreOptions {
            mode,
            write_concern,
            read_concern,
            folding,
            bookkeeping,
        } = options;
        let shared = Shared {
            db: db.clone(),
            concerns: Concerns {
                transaction: write_concern.unwrap_or_else(WriteConcern::majority),
                read: read_concern,
            },
            views: views::ViewTable::new(&spec),
            definition: model_change::Definition::of(&spec, partial),
            registry: model_change::RegistryCache::default(),
            lookahead: model_change::Lookahead::new(spec.subsets.len()),
            traffic: exec::traffic::Traffic::default(),
            across: exec::traffic::Across::default(),
            spec,
            mode: OnceCell::new_with(mode),
            sorts_arrays: OnceCell::new(),
            folds: push::fold::Folds::new(folding),
            names: bookkeeping,
        };
        RawStore {
            shared: Arc::new(shared),
        }
    }

    /// The names this store writes besides the documents: its marker field and its
    /// collections.
    pub fn bookkeeping(&self) -> &Names {
        &self.shared.names
    }

    /// How often this store's pushes (and its clones') met other processes' transactions on a
    /// parent: what [`StoreOptions::folding`] would fold.
    pub fn contention(&self) -> Contention {
        self.shared.folds.contention()
    }

    /// The write concern of the transactions this store starts.
    pub fn transaction_write_concern(&self) -> &WriteConcern {
        &self.shared.concerns.transaction
    }

    /// The database.
    pub fn database(&self) -> &Database {
        &self.shared.db
    }

    /// The parent collection and its subset fields.
    pub fn spec(&self) -> &ParentSpec {
        &self.shared.spec
    }

    /// The place of `spec` among the store's subset fields: `None` for a descriptor the store
    /// does not list (made at run time).
    pub(crate) fn field_index(&self, spec: &SubsetSpec) -> Option<usize> {
        self.shared.spec.subsets.iter().position(|s| s == spec)
    }

    /// The parent collection's name.
    pub fn collection_name(&self) -> &'static str {
        self.shared.spec.collection
    }

    /// The write mode: forced, or detected once with a `hello` command (a replica set member or
    /// a `mongos` means [`WriteMode::Transactional`]).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the server cannot be reached.
    pub async fn mode(&self) -> Result<WriteMode> {
        self.shared
            .mode
            .get_or_try_init(|| async {
                let mode = if self.replicated().await? {
                    WriteMode::Transactional
                } else {
                    WriteMode::Ordered
                };
                tracing::debug!(?mode, "detected write mode");
                self.warn_if_not_durable(mode);
                Ok(mode)
            })
            .await
            .copied()
    }

    /// Whether the server is a replica set member or a `mongos` (asked with `hello`, whatever
    /// mode is forced): what transactions and change streams need.
    pub(crate) async fn replicated(&self) -> Result<bool> {
        let hello = self.hello().await?;
        Ok(hello.contains_key("setName") || hello.get_str("msg").is_ok_and(|m| m == "isdbgrid"))
    }

    /// The server's `hello` reply, which also settles [`RawStore::sorts_arrays`]: one `hello`
    /// answers both.
    async fn hello(&self) -> Result<Document> {
        let hello = self
            .shared
            .db
            .run_command(doc! { "hello": 1 })
            .await
            .map_err(|e| self.mongo(e))?;
        let _ = self.shared.sorts_arrays.set(sorts_arrays(&hello));
        Ok(hello)
    }

    /// Whether the server knows `$sortArray` (MongoDB 5.2, wire version 15), which re-ranks a
    /// view in place (see [`crate::engine::patch`]); asked once with `hello`.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the server cannot be reached.
    pub(crate) async fn sorts_arrays(&self) -> Result<bool> {
        self.shared
            .sorts_arrays
            .get_or_try_init(|| async { Ok(sorts_arrays(&self.hello().await?)) })
            .await
            .copied()
    }

    /// Whether the server is known to know `$sortArray`, without asking it: `false` until
    /// [`RawStore::sorts_arrays`] has asked (a group's riders that re-rank have asked first).
    pub(crate) fn sorts_arrays_known(&self) -> bool {
        self.shared.sorts_arrays.get().copied().unwrap_or(false)
    }

    /// Warns, once per store, when the database's write concern cannot make an acknowledged
    /// push survive what the deployment is exposed to: a failover (`w` other than majority on
    /// a replica set, where the write can be rolled back) or a crash (no `j: true` on a
    /// standalone server, where the write may not be journaled yet).
    fn warn_if_not_durable(&self, mode: WriteMode) {
        if let Some(warning) = durability_warning(
            mode,
            &self.shared.concerns.transaction,
            self.shared.db.write_concern(),
        ) {
            tracing::warn!(collection = self.shared.spec.collection, "{warning}");
        }
    }

    /// The engine of one subset field of this collection.
    pub fn children<'a>(&'a self, spec: &'a SubsetSpec) -> RawChildren<'a> {
        let views = self
            .shared
            .views
            .of(spec)
            .unwrap_or_else(|| std::slice::from_ref(spec));
        RawChildren {
            store: self,
            spec,
            views,
        }
    }

    /// The queues on parents this store's operations enter (see [`exec::traffic`]).
    pub(super) fn traffic(&self) -> &exec::traffic::Traffic<batch::Queued> {
        &self.shared.traffic
    }

    /// The subset fields grouped by the children they show.
    pub(crate) fn views(&self) -> &views::ViewTable {
        &self.shared.views
    }

    pub(crate) fn parents<T: Send + Sync>(&self) -> Collection<T> {
        self.collection(self.shared.spec.collection)
    }

    /// A collection of this store's database, read with the store's read concern if it has one.
    pub(crate) fn collection<T: Send + Sync>(&self, name: &str) -> Collection<T> {
        match &self.shared.concerns.read {
            None => self.shared.db.collection(name),
            Some(read) => self.shared.db.collection_with_options(
                name,
                CollectionOptions::builder()
                    .read_concern(read.clone())
                    .build(),
            ),
        }
    }

    pub(crate) fn mongo(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.shared.spec.collection, e)
    }

    /// Refuses a parent `_id` no parent can have (see [`Error::InvalidId`]).
    pub(crate) fn check_parent_id(&self, id: &Bson) -> Result<()> {
        crate::encode::check_id(id, "parent", self.shared.spec.collection)
    }
}

/// One subset field of a [`RawStore`]: the double write and merged pagination over documents.
#[derive(Clone, Copy)]
pub struct RawChildren<'a> {
    pub(super) store: &'a RawStore,
    pub(super) spec: &'a SubsetSpec,
    /// Every view of the field's children, `spec` included (see [`RawChildren::views`]): its
    /// group in the store's table, or `spec` alone.
    pub(super) views: &'a [SubsetSpec],
}

impl std::fmt::Debug for RawChildren<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Left out: the views follow from the store and the spec.
        f.debug_struct("RawChildren")
            .field("store", &self.store)
            .field("spec", &self.spec)
            .finish()
    }
}

impl<'a> RawChildren<'a> {
    /// The field's descriptor.
    pub fn spec(&self) -> &'a SubsetSpec {
        self.spec
    }

    /// The store.
    pub fn store(&self) -> &'a RawStore {
        self.store
    }

    /// Every view of this field's children: the store's subset fields over the same child
    /// collection and key, this one included, in declaration order (this one alone when the
    /// store does not list it). A write of a child updates all of them.
    ///
    /// Found once, when the store was built; this walks that table.
    pub fn views(&self) -> impl ExactSizeIterator<Item = RawChildren<'a>> + Clone + 'a {
        let (store, views) = (self.store, self.views);
        views
            .iter()
            .map(move |spec| RawChildren { store, spec, views })
    }

    /// The descriptors of [`RawChildren::views`], in the same order: what every per-view vector
    /// of a write is indexed by.
    pub(crate) fn view_specs(&self) -> &'a [SubsetSpec] {
        self.views
    }

    pub(crate) fn children<T: Send + Sync>(&self) -> Collection<T> {
        self.store.collection(self.spec.child_collection)
    }

    pub(crate) fn mongo_child(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.spec.child_collection, e)
    }

    /// The `_id` of `child`, which a child must have, checked as [`RawChildren::check_child_id`]
    /// does.
    pub(crate) fn child_id(&self, child: &Document) -> Result<Bson> {
        let id = child
            .get("_id")
            .cloned()
            .ok_or_else(|| Error::ChildWithoutId {
                collection: self.spec.child_collection.to_owned(),
            })?;
        self.check_child_id(&id)?;
        Ok(id)
    }

    /// Refuses a child `_id` no child can have (see [`Error::InvalidId`]).
    pub(crate) fn check_child_id(&self, id: &Bson) -> Result<()> {
        crate::encode::check_id(id, "child", self.spec.child_collection)
    }

    pub(crate) fn parent_not_found(&self, parent: &Bson) -> Error {
        Error::ParentNotFound {
            collection: self.store.shared.spec.collection.to_owned(),
            id: Box::new(parent.clone()),
        }
    }
}

/// About how many bytes `docs` take as array elements.
pub(crate) fn bson_len<'d>(docs: impl IntoIterator<Item = &'d Document>) -> i64 {
    docs.into_iter()
        .map(|d| RawDocumentBuf::try_from(d).map_or(0, |r| r.as_bytes().len() as i64 + 8))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn the_warning_looks_at_the_concern_each_mode_uses() {
        let w1 = WriteConcern::builder().w(Acknowledgment::Nodes(1)).build();
        let journaled = WriteConcern::builder().journal(true).build();
        let tx = WriteMode::Transactional;
        // A database with w: 1 does not weaken the store's own transactions…
        let majority = WriteConcern::majority();
        assert_eq!(durability_warning(tx, &majority, Some(&w1)), None);
        // …and a store given w: 1 is warned about whatever the database says.
        assert!(durability_warning(tx, &w1, None).is_some());
        assert!(durability_warning(tx, &w1, Some(&majority)).is_some());
        // Ordered writes use the database's concern.
        assert!(durability_warning(WriteMode::Ordered, &majority, None).is_some());
        let ordered = durability_warning(WriteMode::Ordered, &w1, Some(&journaled));
        assert_eq!(ordered, None);
    }
}
