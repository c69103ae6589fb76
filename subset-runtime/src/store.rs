//! The parent store: insert, get, delete and indexes for one parent type.

use std::marker::PhantomData;
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use futures::TryStreamExt;
use mongodb::options::IndexOptions;
use mongodb::{ClientSession, Collection, Database, IndexModel};
use tokio::sync::OnceCell;

use crate::error::{Error, Result};
use crate::model::{Child, Parent, SubsetField, SubsetSpec};
use crate::subset::Subset;
use crate::{decode, order, txn};

/// How a store makes its double writes (child collection + embedded copy) hang together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// Every multi-document write runs in one transaction (replica sets and sharded clusters).
    Transactional,
    /// Writes run one after the other, child collection first, so that a crash in between can
    /// only leave a child missing from the embedded subset, never an embedded child missing from
    /// the collection (standalone servers, which have no transactions).
    Ordered,
}

/// The store of parent type `P`: its collection, its child collections, and the write mode.
///
/// Cheap to clone; clones share the detected [`WriteMode`].
pub struct Store<P> {
    db: Database,
    mode: Arc<OnceCell<WriteMode>>,
    _parent: PhantomData<fn() -> P>,
}

impl<P> Clone for Store<P> {
    fn clone(&self) -> Self {
        Store {
            db: self.db.clone(),
            mode: Arc::clone(&self.mode),
            _parent: PhantomData,
        }
    }
}

impl<P> std::fmt::Debug for Store<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("database", &self.db.name())
            .field("parent", &std::any::type_name::<P>())
            .field("mode", &self.mode.get())
            .finish()
    }
}

impl<P: Parent> Store<P> {
    /// A store on `db`. The write mode is detected from the server on first use.
    pub fn new(db: &Database) -> Self {
        Store {
            db: db.clone(),
            mode: Arc::new(OnceCell::new()),
            _parent: PhantomData,
        }
    }

    /// The same store with its write mode forced, e.g. [`WriteMode::Ordered`] to skip
    /// transactions on a replica set where the caller accepts the standalone guarantees.
    pub fn with_mode(self, mode: WriteMode) -> Self {
        Store {
            mode: Arc::new(OnceCell::new_with(Some(mode))),
            ..self
        }
    }

    /// The database this store works in.
    pub fn database(&self) -> &Database {
        &self.db
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
                    .map_err(|e| Error::mongo(P::COLLECTION, e))?;
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

    /// The handle of one subset field: `store.subset(Product::RECENT_REVIEWS)`.
    pub fn subset<C: Child>(&self, field: SubsetField<P, C>) -> Subset<'_, P, C> {
        Subset::new(self, field)
    }

    pub(crate) fn parents<T: Send + Sync>(&self) -> Collection<T> {
        self.db.collection(P::COLLECTION)
    }

    pub(crate) fn children<T: Send + Sync>(&self, spec: &SubsetSpec) -> Collection<T> {
        self.db.collection(spec.child_collection)
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
    /// (as the server sorts them) and its count fields set.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] for a duplicate parent `_id` or child `_id` (nothing is written, or on a
    /// standalone server what was written is removed again), [`Error::ChildWithoutId`] for a child
    /// without `_id`, [`Error::Serialize`] when the parent does not serialize.
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION))]
    pub async fn insert(&self, parent: &P) -> Result<()> {
        let mut doc = bson::to_document(parent).map_err(|source| Error::Serialize {
            what: "a parent",
            source: Box::new(source),
        })?;
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        let mut children = Vec::with_capacity(P::SUBSETS.len());
        for spec in P::SUBSETS {
            let given = match doc.insert(spec.field, Bson::Array(Vec::new())) {
                Some(Bson::Array(given)) => given,
                _ => Vec::new(),
            };
            if let Some(count) = spec.count {
                doc.insert(count, 0_i64);
            }
            let mut docs = Vec::with_capacity(given.len());
            for child in given {
                let Bson::Document(mut child) = child else {
                    return Err(Error::ChildWithoutId {
                        collection: spec.child_collection.to_owned(),
                    });
                };
                if !child.contains_key("_id") {
                    return Err(Error::ChildWithoutId {
                        collection: spec.child_collection.to_owned(),
                    });
                }
                child.insert(spec.key, id.clone());
                docs.push(child);
            }
            children.push(docs);
        }
        let op = InsertOp {
            store: self,
            id: &id,
            parent: &doc,
            children: &children,
        };
        match self.mode().await? {
            WriteMode::Transactional => txn::run(self.db.client(), P::COLLECTION, &op).await,
            WriteMode::Ordered => {
                // A duplicate parent fails here, before anything else is written.
                self.parents::<Document>()
                    .insert_one(&doc)
                    .await
                    .map_err(|e| Error::mongo(P::COLLECTION, e))?;
                let written = op.write_children(None).await;
                if !matches!(written, Ok(Ok(()))) {
                    op.undo().await;
                }
                written.map_err(|e| Error::mongo(P::COLLECTION, e))?
            }
        }
    }

    /// Reads one parent, with its embedded subsets, in one query.
    ///
    /// # Errors
    ///
    /// [`Error::MalformedParent`] / [`Error::MalformedChild`] when the stored document does not
    /// have the shape of `P` (naming the `_id` and the field), [`Error::Mongo`] from the server.
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION))]
    pub async fn get(&self, id: &P::Id) -> Result<Option<P>> {
        let id = Self::parent_id(id)?;
        let raw = self
            .parents::<RawDocumentBuf>()
            .find_one(doc! { "_id": id })
            .await
            .map_err(|e| Error::mongo(P::COLLECTION, e))?;
        raw.map(|raw| decode::parent::<P>(&raw)).transpose()
    }

    /// Deletes a parent and every child of it in each child collection. Returns whether the
    /// parent existed; its children are deleted either way, so orphans left by a crash go too.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] from the server.
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION))]
    pub async fn delete(&self, id: &P::Id) -> Result<bool> {
        let id = Self::parent_id(id)?;
        let op = DeleteOp {
            store: self,
            id: &id,
        };
        match self.mode().await? {
            WriteMode::Transactional => txn::run(self.db.client(), P::COLLECTION, &op).await,
            WriteMode::Ordered => op
                .write(None)
                .await
                .map_err(|e| Error::mongo(P::COLLECTION, e))?,
        }
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
            let index = IndexModel::builder()
                .keys(order::index_keys(spec))
                .options(
                    IndexOptions::builder()
                        .name(format!("subset_{}_{}", spec.key, spec.field))
                        .build(),
                )
                .build();
            self.children::<Document>(spec)
                .create_index(index)
                .await
                .map_err(|e| Error::mongo(spec.child_collection, e))?;
        }
        Ok(())
    }
}

/// The writes of [`Store::insert`]: the parent with empty subsets, the children, then the
/// subsets as the server sorts the child collection.
struct InsertOp<'a, P> {
    store: &'a Store<P>,
    id: &'a Bson,
    parent: &'a Document,
    children: &'a [Vec<Document>],
}

impl<P: Parent> InsertOp<'_, P> {
    /// All of the insert, in `session`'s transaction.
    async fn write(&self, session: &mut ClientSession) -> mongodb::error::Result<Result<()>> {
        self.store
            .parents::<Document>()
            .insert_one(self.parent)
            .session(&mut *session)
            .await?;
        self.write_children(Some(session)).await
    }

    /// Everything after the parent's own insert.
    async fn write_children(
        &self,
        mut session: Option<&mut ClientSession>,
    ) -> mongodb::error::Result<Result<()>> {
        let parents = self.store.parents::<Document>();
        let mut set = Document::new();
        for (spec, docs) in P::SUBSETS.iter().zip(self.children) {
            if docs.is_empty() {
                continue;
            }
            let coll = self.store.children::<Document>(spec);
            match session.as_deref_mut() {
                Some(s) => coll.insert_many(docs).session(s).await?,
                None => coll.insert_many(docs).await?,
            };
            let top = coll
                .find(doc! { spec.key: self.id.clone() })
                .sort(order::sort_doc(spec))
                .limit(i64::from(spec.keep))
                .projection(doc! { spec.key: 0 });
            let top: Vec<Document> = match session.as_deref_mut() {
                Some(s) => top.session(&mut *s).await?.stream(s).try_collect().await?,
                None => top.await?.try_collect().await?,
            };
            set.insert(spec.field, top);
            if let Some(count) = spec.count {
                set.insert(count, docs.len() as i64);
            }
        }
        if !set.is_empty() {
            let update = doc! { "$set": set };
            let filter = doc! { "_id": self.id.clone() };
            match session {
                Some(s) => parents.update_one(filter, update).session(s).await?,
                None => parents.update_one(filter, update).await?,
            };
        }
        Ok(Ok(()))
    }

    /// Best-effort removal of what a failed standalone insert wrote. Only children carrying the
    /// ids given are removed, so children an existing parent already had stay.
    async fn undo(&self) {
        let parents = self.store.parents::<Document>();
        let _ = parents.delete_one(doc! { "_id": self.id.clone() }).await;
        for (spec, docs) in P::SUBSETS.iter().zip(self.children) {
            let ids: Vec<Bson> = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
            if ids.is_empty() {
                continue;
            }
            let _ = self
                .store
                .children::<Document>(spec)
                .delete_many(doc! { "_id": { "$in": ids }, spec.key: self.id.clone() })
                .await;
        }
    }
}

impl<P: Parent> txn::TxnOp for InsertOp<'_, P> {
    type Output = ();

    async fn run(&self, session: &mut ClientSession) -> mongodb::error::Result<Result<()>> {
        self.write(session).await
    }
}

/// The writes of [`Store::delete`]: the parent first, so a crash leaves invisible orphans rather
/// than a parent whose embedded children are gone from the collection.
struct DeleteOp<'a, P> {
    store: &'a Store<P>,
    id: &'a Bson,
}

impl<P: Parent> DeleteOp<'_, P> {
    async fn write(
        &self,
        mut session: Option<&mut ClientSession>,
    ) -> mongodb::error::Result<Result<bool>> {
        let parents = self.store.parents::<Document>();
        let filter = doc! { "_id": self.id.clone() };
        let deleted = match session.as_deref_mut() {
            Some(s) => parents.delete_one(filter).session(s).await?,
            None => parents.delete_one(filter).await?,
        };
        for spec in P::SUBSETS {
            let coll = self.store.children::<Document>(spec);
            let filter = doc! { spec.key: self.id.clone() };
            match session.as_deref_mut() {
                Some(s) => coll.delete_many(filter).session(s).await?,
                None => coll.delete_many(filter).await?,
            };
        }
        Ok(Ok(deleted.deleted_count > 0))
    }
}

impl<P: Parent> txn::TxnOp for DeleteOp<'_, P> {
    type Output = bool;

    async fn run(&self, session: &mut ClientSession) -> mongodb::error::Result<Result<bool>> {
        self.write(Some(session)).await
    }
}
