//! The typed parent store: insert, get, delete and indexes for one parent type.

use std::marker::PhantomData;

use bson::Bson;
use mongodb::Database;

use crate::decode;
use crate::error::{Error, Result};
use crate::model::{Child, Parent, SubsetField};
use crate::raw::{RawStore, WriteMode};
use crate::subset::Subset;
use crate::sweep::{SweepOptions, SweepProgress, SweepReport};

/// The store of parent type `P`: its collection, its child collections, and the write mode.
///
/// Cheap to clone; clones share the detected [`WriteMode`].
pub struct Store<P> {
    raw: RawStore,
    _parent: PhantomData<fn() -> P>,
}

impl<P> Clone for Store<P> {
    fn clone(&self) -> Self {
        Store {
            raw: self.raw.clone(),
            _parent: PhantomData,
        }
    }
}

impl<P> std::fmt::Debug for Store<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("parent", &std::any::type_name::<P>())
            .field("raw", &self.raw)
            .finish()
    }
}

impl<P: Parent> Store<P> {
    /// A store on `db`. The write mode is detected from the server on first use.
    pub fn new(db: &Database) -> Self {
        Store {
            raw: RawStore::new(db, P::COLLECTION),
            _parent: PhantomData,
        }
    }

    /// The same store with its write mode forced, e.g. [`WriteMode::Ordered`] to skip
    /// transactions on a replica set where the caller accepts the standalone guarantees.
    pub fn with_mode(self, mode: WriteMode) -> Self {
        Store {
            raw: self.raw.with_mode(mode),
            _parent: PhantomData,
        }
    }

    /// The database this store works in.
    pub fn database(&self) -> &Database {
        self.raw.database()
    }

    /// The BSON-level engine under this store.
    pub fn raw(&self) -> &RawStore {
        &self.raw
    }

    /// The write mode: forced, or detected once with a `hello` command (a replica set member or
    /// a `mongos` means [`WriteMode::Transactional`]).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] when the server cannot be reached.
    pub async fn mode(&self) -> Result<WriteMode> {
        self.raw.mode().await
    }

    /// The handle of one subset field: `store.subset(Product::RECENT_REVIEWS)`.
    pub fn subset<C: Child>(&self, field: SubsetField<P, C>) -> Subset<'_, P, C> {
        Subset::new(self.raw.subset(field.spec()))
    }

    pub(crate) fn parent_id(id: &P::Id) -> Result<Bson> {
        bson::to_bson(id).map_err(|source| Error::Serialize {
            what: "a parent _id",
            source: Box::new(source),
        })
    }

    /// Inserts a new parent and all its children.
    ///
    /// Every child given in a subset field goes into that field's child collection (with the
    /// parent key set); the parent is stored with the first `keep` of them in the subset's order
    /// (as the server sorts them) and its count fields set to the number given.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] for a duplicate parent `_id` or child `_id` (nothing is written, or on a
    /// standalone server what was written is removed again), [`Error::ChildWithoutId`] for a child
    /// without `_id`, [`Error::Serialize`] when the parent does not serialize.
    pub async fn insert(&self, parent: &P) -> Result<()> {
        let doc = bson::to_document(parent).map_err(|source| Error::Serialize {
            what: "a parent",
            source: Box::new(source),
        })?;
        self.raw.insert(P::SUBSETS, doc).await
    }

    /// Reads one parent, with its embedded subsets, in one query.
    ///
    /// # Errors
    ///
    /// [`Error::MalformedParent`] / [`Error::MalformedChild`] when the stored document does not
    /// have the shape of `P` (naming the `_id` and the field), [`Error::Mongo`] from the server.
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION))]
    pub async fn get(&self, id: &P::Id) -> Result<Option<P>> {
        let raw = self.raw.get(&Self::parent_id(id)?).await?;
        raw.map(|raw| decode::parent::<P>(&raw)).transpose()
    }

    /// Deletes a parent and every child of it in each child collection. Returns whether the
    /// parent existed; its children are deleted either way, so orphans left by a crash go too.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] from the server.
    pub async fn delete(&self, id: &P::Id) -> Result<bool> {
        self.raw.delete(P::SUBSETS, &Self::parent_id(id)?).await
    }

    /// Creates, on each child collection, the index `{key: 1, <sort keys>, _id}` that makes
    /// every page an index scan. Idempotent: an existing identical index is left alone.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] naming the child collection, e.g. when an index of the same name but
    /// other options exists.
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION))]
    pub async fn ensure_indexes(&self) -> Result<()> {
        for spec in P::SUBSETS {
            self.raw.subset(spec).ensure_index().await?;
        }
        Ok(())
    }

    /// Reconciles every parent's subsets and counts with the child collections, in batches,
    /// calling `progress` after each batch. Idempotent and safe while writers run. Run it after a
    /// standalone server crashed, after writes outside this library, or on a schedule as a
    /// safety net.
    ///
    /// # Errors
    ///
    /// The first error stops the sweep (a malformed parent, say, named in the error); a rerun
    /// starts over harmlessly.
    pub async fn reconcile_all(
        &self,
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.raw.reconcile_all(P::SUBSETS, options, progress).await
    }

    /// The same scan as [`Store::reconcile_all`], read-only: how much drift there is, for
    /// monitoring.
    ///
    /// # Errors
    ///
    /// As [`Store::reconcile_all`].
    pub async fn check_all(
        &self,
        options: &SweepOptions,
        progress: impl FnMut(&SweepProgress),
    ) -> Result<SweepReport> {
        self.raw.check_all(P::SUBSETS, options, progress).await
    }

    /// Installs the server-side cap: a `$jsonSchema` validator on the parent collection with
    /// `bsonType: "array"` and `maxItems: keep` on each subset field, merged with any validator
    /// the collection has. A `$push` without `$slice` from code outside this library then fails
    /// with the server's validation error instead of growing the array.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`], e.g. without the `collMod` privilege.
    pub async fn ensure_schema(&self) -> Result<()> {
        self.raw.ensure_schema(P::SUBSETS).await
    }
}
