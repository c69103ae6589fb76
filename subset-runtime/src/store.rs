//! The typed parent store: insert, get, delete and indexes for one parent type.

use std::marker::PhantomData;

use bson::Bson;
use mongodb::Database;

use crate::decode;
use crate::error::{Error, Result};
use crate::model::{Child, Parent, SubsetField};
use crate::raw::{RawStore, WriteMode};
use crate::subset::Subset;

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
}
