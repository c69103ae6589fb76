//! The handle of one subset field: the double write and merged pagination.

use bson::{doc, Bson, Document, RawDocumentBuf};
use futures::{Stream, StreamExt, TryStreamExt};
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::{ClientSession, Collection};

use crate::cursor::{Cursor, Page, PageRequest, MAX_PAGE_SIZE};
use crate::error::{Error, Result};
use crate::model::{Child, Parent, SubsetField, SubsetSpec};
use crate::store::{Store, WriteMode};
use crate::{decode, order, txn};

/// MongoDB's error code for a duplicate key.
const DUPLICATE_KEY: i32 = 11000;

/// One subset field of one store: `store.subset(Product::RECENT_REVIEWS)`.
///
/// Every method takes the parent's `_id`; the handle itself is a cheap pair of references.
pub struct Subset<'a, P, C> {
    store: &'a Store<P>,
    field: SubsetField<P, C>,
}

impl<P, C> std::fmt::Debug for Subset<'_, P, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subset")
            .field("field", &self.field)
            .finish()
    }
}

/// A child ready to be written: its `_id`, its embedded form, and its child-collection form
/// (the embedded form plus the parent key).
struct Prepared {
    id: Bson,
    embedded: Document,
    stored: Document,
}

impl<'a, P: Parent, C: Child> Subset<'a, P, C> {
    pub(crate) fn new(store: &'a Store<P>, field: SubsetField<P, C>) -> Self {
        Subset { store, field }
    }

    /// This field's descriptor.
    pub fn spec(&self) -> &'static SubsetSpec {
        self.field.spec()
    }

    fn children<T: Send + Sync>(&self) -> Collection<T> {
        self.store.children(self.spec())
    }

    fn mongo_child(&self) -> impl Fn(mongodb::error::Error) -> Error + '_ {
        move |e| Error::mongo(self.spec().child_collection, e)
    }

    fn prepare(&self, parent: &Bson, child: &C) -> Result<Prepared> {
        let spec = self.spec();
        let embedded = bson::to_document(child).map_err(|source| Error::Serialize {
            what: "a child",
            source: Box::new(source),
        })?;
        let id = embedded
            .get("_id")
            .cloned()
            .ok_or_else(|| Error::ChildWithoutId {
                collection: spec.child_collection.to_owned(),
            })?;
        let mut stored = embedded.clone();
        stored.insert(spec.key, parent.clone());
        Ok(Prepared {
            id,
            embedded,
            stored,
        })
    }

    /// The one update that keeps the subset: `$push` with `$each`, `$sort`, `$slice: keep`, and
    /// `$inc` of the count by `added`.
    fn push_update(&self, each: Vec<Bson>, added: i64) -> Document {
        let spec = self.spec();
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

    /// Adds one child: it goes into the child collection with the parent key, and into the
    /// parent's embedded subset (sorted, capped at `keep`) with the count incremented, in one
    /// update.
    ///
    /// On a replica set both writes are one transaction. On a standalone server the child is
    /// written first, so a crash in between leaves at worst a child missing from the subset.
    ///
    /// Pushing a child whose `_id` is already stored under this parent, as a retry does, writes
    /// no second copy and does not count it again; it only puts the stored child back into the
    /// subset if it belongs there and is missing.
    ///
    /// # Errors
    ///
    /// [`Error::ParentNotFound`] (nothing is left in the child collection),
    /// [`Error::ChildOwnedElsewhere`] when the `_id` is stored under another parent,
    /// [`Error::ChildWithoutId`], [`Error::Serialize`], [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION, field = self.spec().field))]
    pub async fn push(&self, parent: &P::Id, child: &C) -> Result<()> {
        self.push_prepared(parent, std::slice::from_ref(child))
            .await
    }

    /// Adds many children at once: one `insertMany` and one update, in one transaction on a
    /// replica set. Children already stored under this parent (a retried batch) are not written
    /// or counted again.
    ///
    /// # Errors
    ///
    /// As [`Subset::push`].
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION, field = self.spec().field, n = children.len()))]
    pub async fn push_many(&self, parent: &P::Id, children: &[C]) -> Result<()> {
        self.push_prepared(parent, children).await
    }

    async fn push_prepared(&self, parent: &P::Id, children: &[C]) -> Result<()> {
        if children.is_empty() {
            return Ok(());
        }
        let parent = Store::<P>::parent_id(parent)?;
        let mut batch = children
            .iter()
            .map(|c| self.prepare(&parent, c))
            .collect::<Result<Vec<_>>>()?;
        match self.store.mode().await? {
            WriteMode::Ordered => self.push_ordered(&parent, batch).await,
            WriteMode::Transactional => {
                // A duplicate aborts the whole transaction; then we set the stored children
                // aside and run it again with the rest. Bounded, as each round removes at least
                // one child from the batch.
                loop {
                    let op = PushOp {
                        handle: self,
                        parent: &parent,
                        batch: &batch,
                    };
                    match txn::run(self.store.database().client(), P::COLLECTION, &op).await {
                        Err(e) if e.mongo_error().is_some_and(is_duplicate) => {
                            let stored = self.set_aside_stored(&parent, &mut batch).await?;
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
            Err(e) => {
                let failed = failed_indexes(&e);
                if failed.is_empty() {
                    return Err(self.mongo_child()(e));
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
                (fresh, duplicates, other.then_some(e))
            }
        };
        if !fresh.is_empty() {
            let added = fresh.len() as i64;
            let each = fresh
                .iter()
                .map(|p| Bson::Document(p.embedded.clone()))
                .collect();
            let updated = self
                .store
                .parents::<Document>()
                .update_one(
                    doc! { "_id": parent.clone() },
                    self.push_update(each, added),
                )
                .await
                .map_err(|e| Error::mongo(P::COLLECTION, e))?;
            if updated.matched_count == 0 {
                let ids: Vec<Bson> = fresh.iter().map(|p| p.id.clone()).collect();
                self.children::<Document>()
                    .delete_many(doc! { "_id": { "$in": ids }, self.spec().key: parent.clone() })
                    .await
                    .map_err(self.mongo_child())?;
                return Err(self.parent_not_found(parent));
            }
        }
        for p in &duplicates {
            self.restore(parent, &p.id).await?;
        }
        match failure {
            Some(e) => Err(self.mongo_child()(e)),
            None => Ok(()),
        }
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
            .map_err(self.mongo_child())?
            .try_collect()
            .await
            .map_err(self.mongo_child())?;
        let before = batch.len();
        for id in stored.iter().filter_map(|d| d.get("_id")) {
            self.restore(parent, id).await?;
            batch.retain(|p| &p.id != id);
        }
        Ok(before - batch.len())
    }

    /// Puts a child that is already in the child collection back into the subset if it is
    /// missing there, without counting it again. `$push`/`$sort`/`$slice` drops it again at once
    /// when it no longer ranks in the top `keep`, so this never disturbs a correct subset.
    async fn restore(&self, parent: &Bson, id: &Bson) -> Result<()> {
        let spec = self.spec();
        let stored = self
            .children::<Document>()
            .find_one(doc! { "_id": id.clone() })
            .await
            .map_err(self.mongo_child())?;
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
        let filter = doc! {
            "_id": parent.clone(),
            format!("{}._id", spec.field): { "$ne": id.clone() },
        };
        self.store
            .parents::<Document>()
            .update_one(filter, self.push_update(vec![Bson::Document(stored)], 0))
            .await
            .map_err(|e| Error::mongo(P::COLLECTION, e))?;
        Ok(())
    }

    fn parent_not_found(&self, parent: &Bson) -> Error {
        Error::ParentNotFound {
            collection: P::COLLECTION.to_owned(),
            id: Box::new(parent.clone()),
        }
    }

    /// One page of children, in the subset's order, exactly once across pages.
    ///
    /// A first page of at most `keep` children is served from the embedded subset in one query
    /// that projects only this field. Every other page comes from the child collection by keyset
    /// on (sort keys, `_id`) after the cursor's position, never by `skip`, so it costs the same
    /// at page 1,000 as at page 2 and stays exact while children are pushed between pages.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPageSize`], [`Error::InvalidCursor`] (malformed, or made for another
    /// parent or field), [`Error::ParentNotFound`] for a first page of a missing parent,
    /// [`Error::MalformedParent`] / [`Error::MalformedChild`] for stored documents of the wrong
    /// shape, [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION, field = self.spec().field, size = request.size))]
    pub async fn page(&self, parent: &P::Id, request: &PageRequest) -> Result<Page<C>> {
        let spec = self.spec();
        if request.size == 0 || request.size > MAX_PAGE_SIZE {
            return Err(Error::InvalidPageSize {
                size: request.size,
                max: MAX_PAGE_SIZE,
            });
        }
        let parent = Store::<P>::parent_id(parent)?;
        let keys = spec.order().count();
        let after = match &request.after {
            Some(cursor) => Some(cursor.check(spec.field, &parent, keys)?),
            None if request.size <= spec.keep => return self.embedded_page(parent, request).await,
            None => None,
        };
        let size = request.size as usize;
        let filter = match after {
            Some(position) => order::after_filter(spec, &parent, position),
            None => doc! { spec.key: parent.clone() },
        };
        let raws: Vec<RawDocumentBuf> = self
            .children::<RawDocumentBuf>()
            .find(filter)
            .sort(order::sort_doc(spec))
            .limit(request.size as i64 + 1)
            .await
            .map_err(self.mongo_child())?
            .try_collect()
            .await
            .map_err(self.mongo_child())?;
        if raws.is_empty() && after.is_none() && !self.parent_exists(&parent).await? {
            return Err(self.parent_not_found(&parent));
        }
        let next = (raws.len() > size).then(|| self.cursor(&parent, &raws[size - 1]));
        let items = raws
            .iter()
            .take(size)
            .map(|raw| decode::child::<C>(raw, spec.child_collection, None))
            .collect::<Result<_>>()?;
        Ok(Page { items, next })
    }

    /// The first page, from the embedded subset.
    async fn embedded_page(&self, parent: Bson, request: &PageRequest) -> Result<Page<C>> {
        let spec = self.spec();
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
            .map_err(|e| Error::mongo(P::COLLECTION, e))?
            .ok_or_else(|| self.parent_not_found(&parent))?;
        let elements = decode::subset_elements::<P>(&raw, spec)?;
        let size = request.size as usize;
        let items = elements
            .iter()
            .take(size)
            .enumerate()
            .map(|(i, e)| {
                let path = format!("{}.{i}", spec.field);
                decode::child::<C>(e, P::COLLECTION, Some(&path))
            })
            .collect::<Result<Vec<C>>>()?;
        // More children exist when the subset holds more than this page, or when it is full and
        // the count (if kept) says the collection holds more than this page.
        let more = elements.len() > size
            || (elements.len() == size && elements.len() as u32 == spec.keep && {
                match spec.count.map(|c| raw.get(c)) {
                    Some(Ok(Some(v))) => count_value(v).is_none_or(|n| n > size as i64),
                    _ => true,
                }
            });
        let next = match (more, items.len()) {
            (true, n) if n > 0 => Some(self.cursor(&parent, elements[n - 1])),
            _ => None,
        };
        Ok(Page { items, next })
    }

    fn cursor(&self, parent: &Bson, last: &bson::RawDocument) -> Cursor {
        Cursor {
            field: self.spec().field.to_owned(),
            parent: parent.clone(),
            position: order::position(self.spec(), last),
        }
    }

    async fn parent_exists(&self, parent: &Bson) -> Result<bool> {
        let found = self
            .store
            .parents::<Document>()
            .find_one(doc! { "_id": parent.clone() })
            .projection(doc! { "_id": 1 })
            .await
            .map_err(|e| Error::mongo(P::COLLECTION, e))?;
        Ok(found.is_some())
    }

    /// Every child of `parent`, in the subset's order, streamed from the child collection.
    ///
    /// The query starts when the stream is first polled. Each item is a [`Result`]: a stored
    /// child of the wrong shape is an [`Error::MalformedChild`] naming its `_id` and field.
    pub fn all(&self, parent: &P::Id) -> impl Stream<Item = Result<C>> + Send + 'static {
        let spec = self.spec();
        let collection = self.children::<RawDocumentBuf>();
        let parent = Store::<P>::parent_id(parent);
        futures::stream::once(async move {
            let filter = doc! { spec.key: parent? };
            let cursor = collection
                .find(filter)
                .sort(order::sort_doc(spec))
                .await
                .map_err(|e| Error::mongo(spec.child_collection, e))?;
            Ok(cursor.map(move |raw| {
                let raw = raw.map_err(|e| Error::mongo(spec.child_collection, e))?;
                decode::child::<C>(&raw, spec.child_collection, None)
            }))
        })
        .try_flatten()
    }

    /// How many children `parent` has in the child collection.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = P::COLLECTION, field = self.spec().field))]
    pub async fn count(&self, parent: &P::Id) -> Result<u64> {
        let parent = Store::<P>::parent_id(parent)?;
        self.children::<Document>()
            .count_documents(doc! { self.spec().key: parent })
            .await
            .map_err(self.mongo_child())
    }
}

/// The writes of a push inside a transaction: the parent update first, so that a missing parent
/// or a write conflict on a hot parent is found before the insert does any work.
struct PushOp<'h, 'a, P, C> {
    handle: &'h Subset<'a, P, C>,
    parent: &'h Bson,
    batch: &'h [Prepared],
}

impl<P: Parent, C: Child> txn::TxnOp for PushOp<'_, '_, P, C> {
    type Output = ();

    async fn run(&self, session: &mut ClientSession) -> mongodb::error::Result<Result<()>> {
        let h = self.handle;
        let each = self
            .batch
            .iter()
            .map(|p| Bson::Document(p.embedded.clone()))
            .collect();
        let update = h.push_update(each, self.batch.len() as i64);
        let updated = h
            .store
            .parents::<Document>()
            .update_one(doc! { "_id": self.parent.clone() }, update)
            .session(&mut *session)
            .await?;
        if updated.matched_count == 0 {
            return Ok(Err(h.parent_not_found(self.parent)));
        }
        let children = h.children::<Document>();
        if let [one] = self.batch {
            children.insert_one(&one.stored).session(session).await?;
        } else {
            children
                .insert_many(self.batch.iter().map(|p| &p.stored))
                .session(session)
                .await?;
        }
        Ok(Ok(()))
    }
}

/// Whether a driver error is a duplicate-key write error.
fn is_duplicate(e: &mongodb::error::Error) -> bool {
    failed_indexes(e)
        .iter()
        .any(|(_, code)| *code == DUPLICATE_KEY)
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
fn count_value(v: bson::RawBsonRef<'_>) -> Option<i64> {
    match v {
        bson::RawBsonRef::Int32(n) => Some(i64::from(n)),
        bson::RawBsonRef::Int64(n) => Some(n),
        _ => None,
    }
}
