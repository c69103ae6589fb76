//! The BSON-level engine: one implementation of the pattern's writes and reads, working on
//! documents and descriptors. The typed [`crate::Store`] and [`crate::Subset`] are thin layers
//! over it; tools that know collections and fields only at run time use it directly.

use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use futures::{Stream, StreamExt, TryStreamExt};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::IndexOptions;
use mongodb::{ClientSession, Collection, Database, IndexModel};
use tokio::sync::OnceCell;

use crate::cursor::{Cursor, Page, PageRequest, MAX_PAGE_SIZE};
use crate::error::{Error, Result};
use crate::model::SubsetSpec;
use crate::{decode, order, txn};

/// MongoDB's error code for a duplicate key.
const DUPLICATE_KEY: i32 = 11000;

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

/// A parent collection at the BSON level, with its write mode.
///
/// Cheap to clone; clones share the detected [`WriteMode`].
#[derive(Clone)]
pub struct RawStore {
    db: Database,
    collection: String,
    mode: Arc<OnceCell<WriteMode>>,
}

impl std::fmt::Debug for RawStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawStore")
            .field("database", &self.db.name())
            .field("collection", &self.collection)
            .field("mode", &self.mode.get())
            .finish()
    }
}

impl RawStore {
    /// The parent collection `collection` in `db`. The write mode is detected on first use.
    pub fn new(db: &Database, collection: impl Into<String>) -> Self {
        RawStore {
            db: db.clone(),
            collection: collection.into(),
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

    /// The parent collection's name.
    pub fn collection_name(&self) -> &str {
        &self.collection
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
        self.db.collection(&self.collection)
    }

    pub(crate) fn mongo(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(&self.collection, e)
    }

    /// Inserts a parent document with the children found in its subset fields; see
    /// [`crate::Store::insert`].
    ///
    /// # Errors
    ///
    /// As [`crate::Store::insert`].
    #[tracing::instrument(skip_all, fields(collection = %self.collection))]
    pub async fn insert(&self, specs: &[SubsetSpec], mut parent: Document) -> Result<()> {
        let id = parent
            .get("_id")
            .cloned()
            .ok_or_else(|| Error::ParentWithoutId {
                collection: self.collection.clone(),
            })?;
        let mut children = Vec::with_capacity(specs.len());
        for spec in specs {
            let given = match parent.insert(spec.field, Bson::Array(Vec::new())) {
                Some(Bson::Array(given)) => given,
                _ => Vec::new(),
            };
            if let Some(count) = spec.count {
                parent.insert(count, 0_i64);
            }
            let mut docs = Vec::with_capacity(given.len());
            for child in given {
                let without_id = || Error::ChildWithoutId {
                    collection: spec.child_collection.to_owned(),
                };
                let Bson::Document(mut child) = child else {
                    return Err(without_id());
                };
                if !child.contains_key("_id") {
                    return Err(without_id());
                }
                child.insert(spec.key, id.clone());
                docs.push(child);
            }
            children.push(docs);
        }
        let op = InsertOp {
            store: self,
            specs,
            id: &id,
            parent: &parent,
            children: &children,
        };
        match self.mode().await? {
            WriteMode::Transactional => txn::run(self.db.client(), &self.collection, &op).await,
            WriteMode::Ordered => {
                // A duplicate parent fails here, before anything else is written.
                self.parents::<Document>()
                    .insert_one(&parent)
                    .await
                    .map_err(|e| self.mongo(e))?;
                let written = op.write_children(None).await;
                if written.is_err() {
                    op.undo().await;
                }
                written
            }
        }
    }

    /// Reads one parent document.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = %self.collection))]
    pub async fn get(&self, id: &Bson) -> Result<Option<RawDocumentBuf>> {
        self.parents::<RawDocumentBuf>()
            .find_one(doc! { "_id": id.clone() })
            .await
            .map_err(|e| self.mongo(e))
    }

    /// Deletes a parent and its children; see [`crate::Store::delete`].
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = %self.collection))]
    pub async fn delete(&self, specs: &[SubsetSpec], id: &Bson) -> Result<bool> {
        let op = DeleteOp {
            store: self,
            specs,
            id,
        };
        match self.mode().await? {
            WriteMode::Transactional => txn::run(self.db.client(), &self.collection, &op).await,
            WriteMode::Ordered => op.write(None).await,
        }
    }
}

/// One subset field of a [`RawStore`]: the double write and merged pagination over documents.
#[derive(Debug, Clone, Copy)]
pub struct RawSubset<'a> {
    store: &'a RawStore,
    spec: &'a SubsetSpec,
}

/// A child ready to be written: its `_id`, its embedded form, and its child-collection form
/// (the embedded form plus the parent key).
struct Prepared {
    id: Bson,
    embedded: Document,
    stored: Document,
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
            collection: self.store.collection.clone(),
            id: Box::new(parent.clone()),
        }
    }

    /// Creates the child-collection index `{key: 1, <sort keys>, _id}`; idempotent.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] naming the child collection.
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection, field = self.spec.field))]
    pub async fn ensure_index(&self) -> Result<()> {
        let spec = self.spec;
        let index = IndexModel::builder()
            .keys(order::index_keys(spec))
            .options(
                IndexOptions::builder()
                    .name(format!("subset_{}_{}", spec.key, spec.field))
                    .build(),
            )
            .build();
        self.children::<Document>()
            .create_index(index)
            .await
            .map_err(|e| self.mongo_child(e))?;
        Ok(())
    }

    fn prepare(&self, parent: &Bson, embedded: Document) -> Result<Prepared> {
        let id = embedded
            .get("_id")
            .cloned()
            .ok_or_else(|| Error::ChildWithoutId {
                collection: self.spec.child_collection.to_owned(),
            })?;
        let mut stored = embedded.clone();
        stored.insert(self.spec.key, parent.clone());
        Ok(Prepared {
            id,
            embedded,
            stored,
        })
    }

    /// The one update that keeps the subset: `$push` with `$each`, `$sort`, `$slice: keep`, and
    /// `$inc` of the count by `added`.
    pub(crate) fn push_update(&self, each: Vec<Bson>, added: i64) -> Document {
        let spec = self.spec;
        let mut update = doc! {
            "$push": {
                spec.field: {
                    "$each": each,
                    "$sort": order::sort_doc(spec),
                    "$slice": i64::from(spec.keep),
                }
            }
        };
        if let (Some(count), true) = (spec.count, added != 0) {
            update.insert("$inc", doc! { count: added });
        }
        update
    }

    /// The parent filter of a push: the parent, unless one of `ids` is already embedded (a
    /// reconcile that read the child collection between our insert and this update has put it
    /// there and counted it; pushing it again would embed and count it twice).
    fn push_filter(&self, parent: &Bson, ids: Vec<Bson>) -> Document {
        doc! {
            "_id": parent.clone(),
            format!("{}._id", self.spec.field): { "$nin": ids },
        }
    }

    /// Adds children (documents with an `_id`); see [`crate::Subset::push`].
    ///
    /// # Errors
    ///
    /// As [`crate::Subset::push`].
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection, field = self.spec.field, n = children.len()))]
    pub async fn push(&self, parent: &Bson, children: Vec<Document>) -> Result<()> {
        if children.is_empty() {
            return Ok(());
        }
        let mut batch = children
            .into_iter()
            .map(|c| self.prepare(parent, c))
            .collect::<Result<Vec<_>>>()?;
        match self.store.mode().await? {
            WriteMode::Ordered => self.push_ordered(parent, batch).await,
            WriteMode::Transactional => {
                // A duplicate aborts the whole transaction; then we set the stored children
                // aside and run it again with the rest. Bounded, as each round removes at least
                // one child from the batch.
                loop {
                    let op = PushOp {
                        subset: self,
                        parent,
                        batch: &batch,
                    };
                    let client = self.store.db.client();
                    match txn::run(client, &self.store.collection, &op).await {
                        Err(e) if e.mongo_error().is_some_and(is_duplicate) => {
                            let stored = self.set_aside_stored(parent, &mut batch).await?;
                            if stored == 0 {
                                return Err(e);
                            }
                            if batch.is_empty() {
                                return Ok(());
                            }
                        }
                        other => return other,
                    }
                }
            }
        }
    }

    /// Standalone: `insertMany` (unordered) first, then one update for what it inserted.
    async fn push_ordered(&self, parent: &Bson, batch: Vec<Prepared>) -> Result<()> {
        let inserted = if let [one] = batch.as_slice() {
            self.children::<Document>()
                .insert_one(&one.stored)
                .await
                .map(|_| ())
        } else {
            self.children::<Document>()
                .insert_many(batch.iter().map(|p| &p.stored))
                .ordered(false)
                .await
                .map(|_| ())
        };
        let (fresh, duplicates, failure) = match inserted {
            Ok(()) => (batch, Vec::new(), None),
            // Applied, but not as durably as asked: embed and count them, then report it.
            Err(e) if failed_indexes(&e).is_empty() && is_write_concern_only(&e) => {
                (batch, Vec::new(), Some(e))
            }
            Err(e) => {
                let failed = failed_indexes(&e);
                if failed.is_empty() {
                    return Err(self.mongo_child(e));
                }
                let mut fresh = Vec::new();
                let mut duplicates = Vec::new();
                let mut other = false;
                for (i, p) in batch.into_iter().enumerate() {
                    match failed.iter().find(|(index, _)| *index == i) {
                        None => fresh.push(p),
                        Some((_, DUPLICATE_KEY)) => duplicates.push(p),
                        Some(_) => other = true,
                    }
                }
                let concern = is_write_concern_only(&e) || has_write_concern_error(&e);
                (fresh, duplicates, (other || concern).then_some(e))
            }
        };
        if !fresh.is_empty() && !self.push_to_parent(parent, &fresh).await? {
            let ids: Vec<Bson> = fresh.iter().map(|p| p.id.clone()).collect();
            self.children::<Document>()
                .delete_many(doc! { "_id": { "$in": ids }, self.spec.key: parent.clone() })
                .await
                .map_err(|e| self.mongo_child(e))?;
            return Err(self.parent_not_found(parent));
        }
        for p in &duplicates {
            self.restore(parent, &p.id).await?;
        }
        match failure {
            Some(e) => Err(self.mongo_child(e)),
            None => Ok(()),
        }
    }

    /// The parent half of an ordered push: `$push`/`$sort`/`$slice` and `$inc` in one update,
    /// unless a concurrent remove, update or reconcile has already embedded some of these
    /// children (it read them from the child collection between our insert and this update).
    /// Then only the others are pushed, and all of them are counted, since a remove or update
    /// does not recount. Returns `false` when the parent does not exist.
    async fn push_to_parent(&self, parent: &Bson, fresh: &[Prepared]) -> Result<bool> {
        let parents = self.store.parents::<Document>();
        let added = fresh.len() as i64;
        let mut pending: Vec<&Prepared> = fresh.iter().collect();
        for _ in 0..8 {
            let ids: Vec<Bson> = pending.iter().map(|p| p.id.clone()).collect();
            let each = pending
                .iter()
                .map(|p| Bson::Document(p.embedded.clone()))
                .collect();
            let updated = parents
                .update_one(self.push_filter(parent, ids), self.push_update(each, added))
                .await
                .map_err(|e| self.store.mongo(e))?;
            if updated.matched_count == 1 {
                return Ok(true);
            }
            let path = format!("{}._id", self.spec.field);
            let found = parents
                .find_one(doc! { "_id": parent.clone() })
                .projection(doc! { path: 1 })
                .await
                .map_err(|e| self.store.mongo(e))?;
            let Some(found) = found else {
                return Ok(false);
            };
            let embedded: Vec<&Bson> = found
                .get_array(self.spec.field)
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_document()?.get("_id"))
                        .collect()
                })
                .unwrap_or_default();
            pending.retain(|p| !embedded.contains(&&p.id));
            if pending.is_empty() {
                break;
            }
        }
        // Everything is embedded (or the parent is too contended to say): count what we added.
        if let Some(count) = self.spec.count {
            parents
                .update_one(
                    doc! { "_id": parent.clone() },
                    doc! { "$inc": { count: added } },
                )
                .await
                .map_err(|e| self.store.mongo(e))?;
        }
        Ok(true)
    }

    /// After a duplicate-key abort: finds which children of `batch` are already stored, checks
    /// they are this parent's, restores them into the subset if missing, and removes them from
    /// `batch`. Returns how many were set aside.
    async fn set_aside_stored(&self, parent: &Bson, batch: &mut Vec<Prepared>) -> Result<usize> {
        let ids: Vec<Bson> = batch.iter().map(|p| p.id.clone()).collect();
        let stored: Vec<Document> = self
            .children::<Document>()
            .find(doc! { "_id": { "$in": ids } })
            .projection(doc! { "_id": 1 })
            .await
            .map_err(|e| self.mongo_child(e))?
            .try_collect()
            .await
            .map_err(|e| self.mongo_child(e))?;
        let before = batch.len();
        for id in stored.iter().filter_map(|d| d.get("_id")) {
            self.restore(parent, id).await?;
            batch.retain(|p| &p.id != id);
        }
        Ok(before - batch.len())
    }

    /// Puts a child that is already in the child collection back into the subset if it is
    /// missing there, without counting it again. `$push`/`$sort`/`$slice` drops it again at once
    /// when it does not rank in the top `keep`, so this never disturbs a correct subset.
    async fn restore(&self, parent: &Bson, id: &Bson) -> Result<()> {
        let spec = self.spec;
        let stored = self
            .children::<Document>()
            .find_one(doc! { "_id": id.clone() })
            .await
            .map_err(|e| self.mongo_child(e))?;
        let Some(mut stored) = stored else {
            // Gone again (deleted by someone else): nothing to restore.
            return Ok(());
        };
        let owner = stored.remove(spec.key).unwrap_or(Bson::Null);
        if &owner != parent {
            return Err(Error::ChildOwnedElsewhere {
                collection: spec.child_collection.to_owned(),
                id: Box::new(id.clone()),
                parent: Box::new(parent.clone()),
                owner: Box::new(owner),
            });
        }
        let updated = self
            .store
            .parents::<Document>()
            .update_one(
                self.push_filter(parent, vec![id.clone()]),
                self.push_update(vec![Bson::Document(stored)], 0),
            )
            .await
            .map_err(|e| self.store.mongo(e))?;
        // No match: the child is embedded already, or the parent is gone (its children left
        // behind by an interrupted delete), which a push must report.
        if updated.matched_count == 0 && !self.parent_exists(parent).await? {
            return Err(self.parent_not_found(parent));
        }
        Ok(())
    }

    pub(crate) async fn parent_exists(&self, parent: &Bson) -> Result<bool> {
        let found = self
            .store
            .parents::<Document>()
            .find_one(doc! { "_id": parent.clone() })
            .projection(doc! { "_id": 1 })
            .await
            .map_err(|e| self.store.mongo(e))?;
        Ok(found.is_some())
    }

    /// One page of children as raw documents; see [`crate::Subset::page`].
    ///
    /// # Errors
    ///
    /// As [`crate::Subset::page`].
    pub async fn page(&self, parent: &Bson, request: &PageRequest) -> Result<Page<RawDocumentBuf>> {
        self.page_with(parent, request, |raw, _, _| Ok(raw.to_raw_document_buf()))
            .await
    }

    /// One page, each child turned into `T` by `decode(child, collection, path in the parent)`.
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection, field = self.spec.field, size = request.size))]
    pub(crate) async fn page_with<T>(
        &self,
        parent: &Bson,
        request: &PageRequest,
        decode: impl Fn(&RawDocument, &str, Option<&str>) -> Result<T>,
    ) -> Result<Page<T>> {
        let spec = self.spec;
        if request.size == 0 || request.size > MAX_PAGE_SIZE {
            return Err(Error::InvalidPageSize {
                size: request.size,
                max: MAX_PAGE_SIZE,
            });
        }
        let keys = spec.order().count();
        let after = match &request.after {
            Some(cursor) => Some(cursor.check(spec.field, parent, keys)?),
            None if request.size <= spec.keep => {
                return self.embedded_page(parent, request, decode).await
            }
            None => None,
        };
        let size = request.size as usize;
        let filter = match after {
            Some(position) => order::after_filter(spec, parent, position),
            None => doc! { spec.key: parent.clone() },
        };
        let raws: Vec<RawDocumentBuf> = self
            .children::<RawDocumentBuf>()
            .find(filter)
            .sort(order::sort_doc(spec))
            .limit(i64::from(request.size) + 1)
            .await
            .map_err(|e| self.mongo_child(e))?
            .try_collect()
            .await
            .map_err(|e| self.mongo_child(e))?;
        if raws.is_empty() && after.is_none() && !self.parent_exists(parent).await? {
            return Err(self.parent_not_found(parent));
        }
        let next = match raws.get(size - 1) {
            Some(last) if raws.len() > size => Some(self.cursor(parent, last)?),
            _ => None,
        };
        let items = raws
            .iter()
            .take(size)
            .map(|raw| decode(raw, spec.child_collection, None))
            .collect::<Result<_>>()?;
        if let (None, Some(position)) = (&next, after) {
            let reference = match raws.last() {
                Some(last) => order::position(spec, last),
                None => position.to_vec(),
            };
            self.report_misfit(parent, &reference).await?;
        }
        Ok(Page { items, next })
    }

    /// At the end of a keyset walk: fails with [`Error::MalformedChild`] if a child of `parent`
    /// has a sort value of another type than the children served, which the keyset pages could
    /// not reach. One index scan of the parent's keys, once per walk.
    async fn report_misfit(&self, parent: &Bson, reference: &[Bson]) -> Result<()> {
        let spec = self.spec;
        let filter = order::misfit_filter(spec, parent, reference);
        if filter.get_array("$or").map_or(true, |b| b.is_empty()) {
            return Ok(());
        }
        let projection: Document = spec
            .order()
            .map(|k| (k.field.to_owned(), Bson::Int32(1)))
            .collect();
        let misfit = self
            .children::<RawDocumentBuf>()
            .find_one(filter)
            .projection(projection)
            .await
            .map_err(|e| self.mongo_child(e))?;
        let Some(misfit) = misfit else {
            return Ok(());
        };
        let Some((field, found, expected)) = spec
            .order()
            .zip(reference)
            .zip(order::position(spec, &misfit))
            .find_map(|((key, want), got)| {
                let bracket = order::type_bracket(want);
                let differs = bracket.is_some() && bracket != order::type_bracket(&got);
                differs.then_some((key.field, got.element_type(), want.element_type()))
            })
        else {
            // The filter and this comparison agree on brackets; nothing to name if they do not.
            return Ok(());
        };
        Err(Error::MalformedChild {
            collection: spec.child_collection.to_owned(),
            id: Box::new(decode::id_of(&misfit)),
            field: field.to_owned(),
            problem: format!(
                "is {} where the other children have {}, so it has no place in the subset's order",
                if misfit.get(field).ok().flatten().is_none() {
                    "missing"
                } else {
                    decode::type_name(found)
                },
                decode::type_name(expected)
            ),
        })
    }

    /// The first page, from the embedded subset, in one query projecting this field (and the
    /// count, which tells whether a full subset is all there is).
    async fn embedded_page<T>(
        &self,
        parent: &Bson,
        request: &PageRequest,
        decode: impl Fn(&RawDocument, &str, Option<&str>) -> Result<T>,
    ) -> Result<Page<T>> {
        let spec = self.spec;
        let mut projection = doc! { spec.field: 1 };
        if let Some(count) = spec.count {
            projection.insert(count, 1);
        }
        let raw = self
            .store
            .parents::<RawDocumentBuf>()
            .find_one(doc! { "_id": parent.clone() })
            .projection(projection)
            .await
            .map_err(|e| self.store.mongo(e))?
            .ok_or_else(|| self.parent_not_found(parent))?;
        let elements = decode::subset_elements(&raw, &self.store.collection, spec)?;
        let size = request.size as usize;
        let items = elements
            .iter()
            .take(size)
            .enumerate()
            .map(|(i, e)| {
                let path = format!("{}.{i}", spec.field);
                decode(e, &self.store.collection, Some(&path))
            })
            .collect::<Result<Vec<T>>>()?;
        // More children exist when the subset holds more than this page, or when it is full and
        // the count (if kept) says the collection holds more than this page.
        let full = elements.len() == size && elements.len() as u32 == spec.keep;
        let more = elements.len() > size
            || (full
                && match spec.count.map(|c| raw.get(c)) {
                    Some(Ok(Some(v))) => count_value(v).is_none_or(|n| n > size as i64),
                    _ => true,
                });
        let next = match (more, items.len()) {
            (true, n) if n > 0 => Some(self.cursor(parent, elements[n - 1])?),
            _ => None,
        };
        Ok(Page { items, next })
    }

    /// The cursor after `last`. A child whose sort key is missing or null has no position a
    /// keyset comparison can continue from (`$lt: null` matches nothing), so it is an error
    /// naming it rather than a walk that silently ends there.
    fn cursor(&self, parent: &Bson, last: &RawDocument) -> Result<Cursor> {
        let position = order::position(self.spec, last);
        if let Some(key) = self
            .spec
            .order()
            .zip(&position)
            .find_map(|(key, value)| matches!(value, Bson::Null).then_some(key.field))
        {
            return Err(Error::MalformedChild {
                collection: self.spec.child_collection.to_owned(),
                id: Box::new(decode::id_of(last)),
                field: key.to_owned(),
                problem: "is missing or null, so it has no place in the subset's order".into(),
            });
        }
        Ok(Cursor {
            field: self.spec.field.to_owned(),
            parent: parent.clone(),
            position,
        })
    }

    /// Every child of `parent` in order, as raw documents; see [`crate::Subset::all`].
    pub fn all(&self, parent: Bson) -> impl Stream<Item = Result<RawDocumentBuf>> + Send + 'static {
        let collection = self.children::<RawDocumentBuf>();
        let (key, name, sort) = (
            self.spec.key,
            self.spec.child_collection,
            order::sort_doc(self.spec),
        );
        futures::stream::once(async move {
            let cursor = collection
                .find(doc! { key: parent })
                .sort(sort)
                .await
                .map_err(|e| Error::mongo(name, e))?;
            Ok(cursor.map(move |raw| raw.map_err(|e| Error::mongo(name, e))))
        })
        .try_flatten()
    }

    /// How many children `parent` has in the child collection.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection, field = self.spec.field))]
    pub async fn count(&self, parent: &Bson) -> Result<u64> {
        self.children::<Document>()
            .count_documents(doc! { self.spec.key: parent.clone() })
            .await
            .map_err(|e| self.mongo_child(e))
    }
}

/// The writes of a push inside a transaction: the parent update first, so that a missing parent
/// or a write conflict on a hot parent is found before the insert does any work.
struct PushOp<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    batch: &'s [Prepared],
}

impl txn::TxnOp for PushOp<'_, '_> {
    type Output = ();

    async fn run(&self, session: &mut ClientSession) -> Result<()> {
        let s = self.subset;
        let each = self
            .batch
            .iter()
            .map(|p| Bson::Document(p.embedded.clone()))
            .collect();
        let update = s.push_update(each, self.batch.len() as i64);
        let updated = s
            .store
            .parents::<Document>()
            .update_one(doc! { "_id": self.parent.clone() }, update)
            .session(&mut *session)
            .await
            .map_err(|e| s.store.mongo(e))?;
        if updated.matched_count == 0 {
            return Err(s.parent_not_found(self.parent));
        }
        let children = s.children::<Document>();
        let inserted = if let [one] = self.batch {
            children
                .insert_one(&one.stored)
                .session(session)
                .await
                .map(|_| ())
        } else {
            children
                .insert_many(self.batch.iter().map(|p| &p.stored))
                .session(session)
                .await
                .map(|_| ())
        };
        inserted.map_err(|e| s.mongo_child(e))
    }
}

/// The writes of [`RawStore::insert`]: the parent with empty subsets, the children, then the
/// subsets as the server sorts the child collection.
struct InsertOp<'a> {
    store: &'a RawStore,
    specs: &'a [SubsetSpec],
    id: &'a Bson,
    parent: &'a Document,
    children: &'a [Vec<Document>],
}

impl InsertOp<'_> {
    /// Everything after the parent's own insert.
    async fn write_children(&self, mut session: Option<&mut ClientSession>) -> Result<()> {
        let mut set = Document::new();
        for (spec, docs) in self.specs.iter().zip(self.children) {
            if docs.is_empty() {
                continue;
            }
            let child = |e| Error::mongo(spec.child_collection, e);
            let coll = self.store.db.collection::<Document>(spec.child_collection);
            match session.as_deref_mut() {
                Some(s) => coll.insert_many(docs).session(s).await.map(|_| ()),
                None => coll.insert_many(docs).await.map(|_| ()),
            }
            .map_err(child)?;
            let top = coll
                .find(doc! { spec.key: self.id.clone() })
                .sort(order::sort_doc(spec))
                .limit(i64::from(spec.keep))
                .projection(doc! { spec.key: 0 });
            let top: Vec<Document> = match session.as_deref_mut() {
                Some(s) => match top.session(&mut *s).await {
                    Ok(mut cursor) => cursor.stream(s).try_collect().await,
                    Err(e) => Err(e),
                },
                None => match top.await {
                    Ok(cursor) => cursor.try_collect().await,
                    Err(e) => Err(e),
                },
            }
            .map_err(child)?;
            set.insert(spec.field, top);
            if let Some(count) = spec.count {
                set.insert(count, docs.len() as i64);
            }
        }
        if !set.is_empty() {
            let parents = self.store.parents::<Document>();
            let (filter, update) = (doc! { "_id": self.id.clone() }, doc! { "$set": set });
            match session {
                Some(s) => parents.update_one(filter, update).session(s).await,
                None => parents.update_one(filter, update).await,
            }
            .map_err(|e| self.store.mongo(e))?;
        }
        Ok(())
    }

    /// Best-effort removal of what a failed standalone insert wrote. Only children carrying the
    /// ids given are removed, so children an existing parent already had stay.
    async fn undo(&self) {
        let parents = self.store.parents::<Document>();
        let _ = parents.delete_one(doc! { "_id": self.id.clone() }).await;
        for (spec, docs) in self.specs.iter().zip(self.children) {
            let ids: Vec<Bson> = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
            if ids.is_empty() {
                continue;
            }
            let _ = self
                .store
                .db
                .collection::<Document>(spec.child_collection)
                .delete_many(doc! { "_id": { "$in": ids }, spec.key: self.id.clone() })
                .await;
        }
    }
}

impl txn::TxnOp for InsertOp<'_> {
    type Output = ();

    async fn run(&self, session: &mut ClientSession) -> Result<()> {
        self.store
            .parents::<Document>()
            .insert_one(self.parent)
            .session(&mut *session)
            .await
            .map_err(|e| self.store.mongo(e))?;
        self.write_children(Some(session)).await
    }
}

/// The writes of [`RawStore::delete`]: the parent first, so a crash leaves invisible orphans
/// rather than a parent whose embedded children are gone from the collection.
struct DeleteOp<'a> {
    store: &'a RawStore,
    specs: &'a [SubsetSpec],
    id: &'a Bson,
}

impl DeleteOp<'_> {
    async fn write(&self, mut session: Option<&mut ClientSession>) -> Result<bool> {
        let parents = self.store.parents::<Document>();
        let filter = doc! { "_id": self.id.clone() };
        let deleted = match session.as_deref_mut() {
            Some(s) => parents.delete_one(filter).session(s).await,
            None => parents.delete_one(filter).await,
        }
        .map_err(|e| self.store.mongo(e))?;
        for spec in self.specs {
            let coll = self.store.db.collection::<Document>(spec.child_collection);
            let filter = doc! { spec.key: self.id.clone() };
            match session.as_deref_mut() {
                Some(s) => coll.delete_many(filter).session(s).await,
                None => coll.delete_many(filter).await,
            }
            .map_err(|e| Error::mongo(spec.child_collection, e))?;
        }
        Ok(deleted.deleted_count > 0)
    }
}

impl txn::TxnOp for DeleteOp<'_> {
    type Output = bool;

    async fn run(&self, session: &mut ClientSession) -> Result<bool> {
        self.write(Some(session)).await
    }
}

/// Whether a driver error is a duplicate-key write error.
fn is_duplicate(e: &mongodb::error::Error) -> bool {
    failed_indexes(e)
        .iter()
        .any(|(_, code)| *code == DUPLICATE_KEY)
}

/// Whether an insert failed only on its write concern (the documents were written).
fn is_write_concern_only(e: &mongodb::error::Error) -> bool {
    match e.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteConcernError(_)) => true,
        ErrorKind::InsertMany(m) => {
            m.write_errors.as_ref().is_none_or(Vec::is_empty) && m.write_concern_error.is_some()
        }
        _ => false,
    }
}

/// Whether an `insertMany` error also carries a write-concern error.
fn has_write_concern_error(e: &mongodb::error::Error) -> bool {
    matches!(e.kind.as_ref(), ErrorKind::InsertMany(m) if m.write_concern_error.is_some())
}

/// The (index in the batch, error code) of each failed document of an insert.
fn failed_indexes(e: &mongodb::error::Error) -> Vec<(usize, i32)> {
    match e.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(w)) => vec![(0, w.code)],
        ErrorKind::InsertMany(m) => m
            .write_errors
            .iter()
            .flatten()
            .map(|w| (w.index, w.code))
            .collect(),
        _ => Vec::new(),
    }
}

/// An integer count as stored (`$inc` may leave an int32 or an int64).
pub(crate) fn count_value(v: bson::RawBsonRef<'_>) -> Option<i64> {
    match v {
        bson::RawBsonRef::Int32(n) => Some(i64::from(n)),
        bson::RawBsonRef::Int64(n) => Some(n),
        _ => None,
    }
}
