//! The typed handle of one subset field: the double write and merged pagination.

use std::marker::PhantomData;

use futures::{Stream, TryStreamExt};

use crate::cursor::{Page, PageRequest};
use crate::decode;
use crate::error::{Error, Result};
use crate::model::{Child, Parent, SubsetSpec};
use crate::raw::RawSubset;
use crate::resync::Drift;
use crate::store::Store;

/// One subset field of one store: `store.subset(Product::RECENT_REVIEWS)`.
///
/// Every method takes the parent's `_id`; the handle itself is a cheap pair of references.
pub struct Subset<'a, P, C> {
    raw: RawSubset<'a>,
    _types: PhantomData<fn() -> (P, C)>,
}

impl<P, C> std::fmt::Debug for Subset<'_, P, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subset").field("raw", &self.raw).finish()
    }
}

impl<'a, P: Parent, C: Child> Subset<'a, P, C> {
    pub(crate) fn new(raw: RawSubset<'a>) -> Self {
        Subset {
            raw,
            _types: PhantomData,
        }
    }

    /// This field's descriptor.
    pub fn spec(&self) -> &'a SubsetSpec {
        self.raw.spec()
    }

    /// The BSON-level engine under this handle.
    pub fn raw(&self) -> RawSubset<'a> {
        self.raw
    }

    fn serialize(children: &[C]) -> Result<Vec<bson::Document>> {
        children
            .iter()
            .map(|c| {
                bson::to_document(c).map_err(|source| Error::Serialize {
                    what: "a child",
                    source: Box::new(source),
                })
            })
            .collect()
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
    pub async fn push(&self, parent: &P::Id, child: &C) -> Result<()> {
        self.push_many(parent, std::slice::from_ref(child)).await
    }

    /// Adds many children at once: one `insertMany` and one update, in one transaction on a
    /// replica set. Children already stored under this parent (a retried batch) are not written
    /// or counted again.
    ///
    /// # Errors
    ///
    /// As [`Subset::push`].
    pub async fn push_many(&self, parent: &P::Id, children: &[C]) -> Result<()> {
        let parent = Store::<P>::parent_id(parent)?;
        self.raw.push(&parent, Self::serialize(children)?).await
    }

    /// One page of children, in the subset's order, exactly once across pages.
    ///
    /// A first page of at most `keep` children is served from the embedded subset in one query
    /// that projects only this field (and its count). Every other page comes from the child
    /// collection by keyset on (sort keys, `_id`) after the cursor's position, never by `skip`,
    /// so it costs the same at page 1,000 as at page 2 and stays exact while children are pushed
    /// between pages.
    ///
    /// Without a `count` field, a first page exactly as large as a full subset cannot tell
    /// whether more children exist; it returns a cursor, and the next page may be empty.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPageSize`], [`Error::InvalidCursor`] (malformed, or made for another
    /// parent or field), [`Error::ParentNotFound`] for a first page of a missing parent,
    /// [`Error::MalformedParent`] / [`Error::MalformedChild`] for stored documents of the wrong
    /// shape, [`Error::Mongo`].
    pub async fn page(&self, parent: &P::Id, request: &PageRequest) -> Result<Page<C>> {
        let parent = Store::<P>::parent_id(parent)?;
        self.raw
            .page_with(&parent, request, |raw, collection, path| {
                decode::child::<C>(raw, collection, path)
            })
            .await
    }

    /// Every child of `parent`, in the subset's order, streamed from the child collection.
    ///
    /// The query starts when the stream is first polled. Each item is a [`Result`]: a stored
    /// child of the wrong shape is an [`Error::MalformedChild`] naming its `_id` and field.
    pub fn all(&self, parent: &P::Id) -> impl Stream<Item = Result<C>> + Send + 'static {
        let name = self.spec().child_collection;
        let parent = Store::<P>::parent_id(parent);
        let raw = parent.map(|parent| self.raw.all(parent));
        futures::stream::once(async move { raw })
            .try_flatten()
            .and_then(move |doc| async move { decode::child::<C>(&doc, name, None) })
    }

    /// How many children `parent` has in the child collection.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub async fn count(&self, parent: &P::Id) -> Result<u64> {
        self.raw.count(&Store::<P>::parent_id(parent)?).await
    }

    /// Removes a child: from the child collection, from the subset (backfilling the next child
    /// when it was embedded, so the subset is again the top `keep`), and from the count.
    ///
    /// One transaction on a replica set. On a standalone server the child is deleted first, so
    /// a crash can leave its embedded copy behind, which [`Subset::reconcile`] removes; it can
    /// never lose another child.
    ///
    /// # Errors
    ///
    /// [`Error::ChildNotFound`] when no such child is stored under `parent` (nothing changes),
    /// [`Error::ParentNotFound`], [`Error::Mongo`].
    pub async fn remove(&self, parent: &P::Id, child: &C::Id) -> Result<()> {
        let child = bson::to_bson(child).map_err(|source| Error::Serialize {
            what: "a child _id",
            source: Box::new(source),
        })?;
        self.raw
            .remove(&Store::<P>::parent_id(parent)?, &child)
            .await
    }

    /// Replaces a stored child (matched by `_id`) in the child collection and in the subset.
    /// When its sort keys changed, the subset is recomputed, so the child may enter or leave it.
    ///
    /// # Errors
    ///
    /// [`Error::ChildNotFound`] when no child with this `_id` is stored under `parent`,
    /// [`Error::ParentNotFound`], [`Error::Serialize`], [`Error::Mongo`].
    pub async fn update(&self, parent: &P::Id, child: &C) -> Result<()> {
        let mut docs = Self::serialize(std::slice::from_ref(child))?;
        let doc = docs.pop().unwrap_or_default();
        self.raw.update(&Store::<P>::parent_id(parent)?, doc).await
    }

    /// Recomputes the subset and the count from the child collection, fixes them if they
    /// differ, and reports what differed. Safe while writers run.
    ///
    /// # Errors
    ///
    /// [`Error::ParentNotFound`], [`Error::MalformedParent`], [`Error::Mongo`].
    pub async fn reconcile(&self, parent: &P::Id) -> Result<Drift> {
        self.raw.reconcile(&Store::<P>::parent_id(parent)?).await
    }

    /// What [`Subset::reconcile`] would find, without changing anything.
    ///
    /// # Errors
    ///
    /// As [`Subset::reconcile`].
    pub async fn check(&self, parent: &P::Id) -> Result<Drift> {
        self.raw.check(&Store::<P>::parent_id(parent)?).await
    }
}
