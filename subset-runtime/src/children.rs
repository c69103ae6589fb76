//! The typed handle of one subset field: the double write and merged pagination.

use std::marker::PhantomData;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use crate::action::Action;
use crate::cursor::{Cursor, Page, PageRequest};
use crate::engine::{BulkProgress, BulkReport, Drift, RawChildren};
use crate::error::Result;
use crate::job::Job;
use crate::model::{Child, Subset, SubsetSpec};
use crate::{decode, encode};

/// One subset field of one store: `store.children(Product::RECENT_REVIEWS)`.
///
/// Every method takes the parent's `_id`; the handle itself is a cheap pair of references.
pub struct Children<'a, P, C> {
    raw: RawChildren<'a>,
    _types: PhantomData<fn() -> (P, C)>,
}

impl<P, C> std::fmt::Debug for Children<'_, P, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Children").field("raw", &self.raw).finish()
    }
}

impl<'a, P: Subset, C: Child> Children<'a, P, C> {
    pub(crate) fn new(raw: RawChildren<'a>) -> Self {
        Children {
            raw,
            _types: PhantomData,
        }
    }

    /// This field's descriptor.
    pub fn spec(&self) -> &'a SubsetSpec {
        self.raw.spec()
    }

    /// The BSON-level engine under this handle.
    pub fn raw(&self) -> RawChildren<'a> {
        self.raw
    }

    fn serialize(children: &[C]) -> Result<Vec<crate::bson::Document>> {
        children
            .iter()
            .map(|c| encode::document(c, "a child"))
            .collect()
    }

    fn parent_id(id: &P::Id) -> Result<crate::bson::Bson> {
        encode::id(id, "a parent _id")
    }

    /// Adds one child: it goes into the child collection with the parent key, and into the
    /// parent's embedded subset (sorted, capped at `keep`) with the count incremented and its
    /// values added to the running sums (see [`crate::spec::SumSpec`]), in one update.
    ///
    /// Every view of the same child collection and key (see [`crate::spec::FilterSpec`]) gets the
    /// child in that same update, whichever view's handle pushed it: one `$push` per view that
    /// admits it, one `$inc` for every count and sum.
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
    /// [`crate::Error::ParentNotFound`] (nothing is left in the child collection),
    /// [`crate::Error::ChildOwnedElsewhere`] when the `_id` is stored under another parent,
    /// [`crate::Error::ParentKeyMismatch`] when the child's own parent key names another parent,
    /// [`crate::Error::ChildWithoutId`], [`crate::Error::MalformedChild`] when a summed field is
    /// not a number, [`crate::Error::SubsetTooLarge`] when the parent cannot hold the child,
    /// [`crate::Error::NumberOverflow`] when a count or sum would leave its Rust type (each
    /// leaving nothing), [`crate::Error::Serialize`], [`crate::Error::Mongo`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{bson::oid::ObjectId, Child, Children, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>, Review: Child<Id = ObjectId>>(
    /// #     reviews: Children<'_, Product, Review>, product_id: ObjectId, review: Review,
    /// # ) -> subset::Result<()> {
    /// reviews.push(&product_id, &review).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn push<'r>(&'r self, parent: &'r P::Id, child: &'r C) -> Action<'r, ()> {
        self.push_many(parent, std::slice::from_ref(child))
    }

    /// Adds many children at once: one `insertMany` and one update, in one transaction on a
    /// replica set. Children already stored under this parent (a retried batch) are not written
    /// or counted again.
    ///
    /// # Errors
    ///
    /// As [`Children::push`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{bson::oid::ObjectId, Child, Children, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>, Review: Child<Id = ObjectId>>(
    /// #     reviews: Children<'_, Product, Review>, product_id: ObjectId, imported: Vec<Review>,
    /// # ) -> subset::Result<()> {
    /// reviews.push_many(&product_id, &imported).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn push_many<'r>(&'r self, parent: &'r P::Id, children: &'r [C]) -> Action<'r, ()> {
        let call = || {
            Ok(self
                .raw
                .push(&Self::parent_id(parent)?, Self::serialize(children)?))
        };
        Action::or_refused(call())
    }

    /// One page of children, in the subset's order, exactly once across pages.
    ///
    /// A first page of at most `keep` children is served from the embedded subset in one query
    /// that projects only this field (and its count). Every other page comes from the child
    /// collection by keyset on (sort keys, `_id`) after the cursor's position, never by `skip`,
    /// so it costs the same at page 1,000 as at page 2 and stays exact while children are pushed
    /// between pages.
    ///
    /// Backward pages ([`PageRequest::last`], [`PageRequest::before`]) read the same index in
    /// reverse, always from the child collection, and come back in the subset's order too. Every
    /// child on a page has a cursor ([`Page::cursors`]) to go on from either way.
    ///
    /// When the parent's subset was built under another definition of the model (before
    /// [`crate::Store::rebuild`] reached it), the first page comes from the child collection
    /// instead: the same children, at one query more (the parent's marker is read first), or
    /// in one `aggregate` with the parent while most reads find the subset outdated.
    ///
    /// Without a `count` field, a first page exactly as large as a full subset cannot tell
    /// whether more children exist; it returns a cursor, and the next page may be empty.
    ///
    /// With `.session(&mut s)` the page is read in the caller's session: inside the caller's
    /// transaction it sees that transaction's own pushes and removes, and in a causally
    /// consistent session it follows the session's earlier writes.
    ///
    /// A page always holds whole children. Where the field embeds previews
    /// ([`SubsetSpec::embed`]), the parent cannot serve one, so the first page too comes from the
    /// child collection; to go on right after the previews a page already showed, start from
    /// the last one's cursor ([`Children::cursor_of`]).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidPageSize`], [`crate::Error::InvalidCursor`] (malformed, or made for another
    /// parent or field), [`crate::Error::ParentNotFound`] for a first or last page of a missing parent,
    /// [`crate::Error::MalformedParent`] / [`crate::Error::MalformedChild`] for stored documents of the wrong
    /// shape (a child on the page whose sort key is missing or null has no cursor, and is one),
    /// [`crate::Error::Mongo`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{bson::oid::ObjectId, Child, Children, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>, Review: Child<Id = ObjectId>>(
    /// #     reviews: Children<'_, Product, Review>, product_id: ObjectId, token: String,
    /// # ) -> subset::Result<()> {
    /// use subset::{Cursor, PageRequest};
    ///
    /// // The product page: the first 20 reviews, and the token of its "more reviews" link.
    /// let page = reviews.page(&product_id, &PageRequest::first(20)).await?;
    /// let more_link: Option<String> = page.next.as_ref().map(Cursor::encode);
    ///
    /// // The request behind that link: the 20 reviews after the last one shown.
    /// let after = Cursor::decode(&token)?;
    /// let more = reviews.page(&product_id, &PageRequest::after(after, 20)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn page<'r>(&'r self, parent: &'r P::Id, request: &'r PageRequest) -> Action<'r, Page<C>> {
        let call = || {
            let parent = Self::parent_id(parent)?;
            let of_parent = parent.clone();
            Ok(Action::of(self.raw.page_as(
                &parent,
                request,
                move |raw, collection, path| {
                    decode::child::<C>(raw, collection, path).map_err(|e| e.of_parent(&of_parent))
                },
            )))
        };
        Action::or_refused(call())
    }

    /// The cursor of one child, or of its embedded preview, to page on from in either direction:
    /// `PageRequest::after(reviews.cursor_of(&id, last_preview)?, 20)` reads the 20 whole
    /// children that follow the previews a product page showed, none twice and none skipped,
    /// whatever was pushed meanwhile.
    ///
    /// `child` is any type whose full child is `C` (`C` itself, or a preview of it): what a
    /// cursor needs, the sort keys and `_id`, every preview holds.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Serialize`], [`crate::Error::MalformedChild`] when a sort key is null
    /// (a keyset cannot continue from there).
    pub fn cursor_of<V>(&self, parent: &P::Id, child: &V) -> Result<Cursor>
    where
        V: Child<Full = C>,
    {
        let parent = Self::parent_id(parent)?;
        let raw = encode::raw(child, "a child")?;
        self.raw.cursor(&parent, &raw)
    }

    /// Every child of `parent`, in the subset's order, streamed from the child collection:
    /// `reviews.all(&id).await?` is the stream.
    ///
    /// Each item is a [`Result`]: a stored child of the wrong shape is an
    /// [`crate::Error::MalformedChild`] naming its `_id` and field. With `.session(&mut s)`, the
    /// stream reads in that session and holds it until dropped.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] when the query cannot start.
    pub fn all<'r>(&'r self, parent: &'r P::Id) -> Action<'r, BoxStream<'r, Result<C>>> {
        let name = self.spec().child_collection;
        let call = || {
            let parent = Self::parent_id(parent)?;
            Ok(self.raw.all(&parent).map(move |raw| {
                Ok(raw
                    .and_then(move |doc| {
                        let child = decode::child::<C>(&doc, name, None);
                        futures::future::ready(child.map_err(|e| e.of_parent(&parent)))
                    })
                    .boxed())
            }))
        };
        Action::or_refused(call())
    }

    /// How many children `parent` has in the child collection (for a filtered view, how many
    /// pass its filter). One count of the child collection, which does not read the parent: a
    /// parent that does not exist has 0 (a page of it is [`crate::Error::ParentNotFound`]).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`].
    pub fn count<'r>(&'r self, parent: &'r P::Id) -> Action<'r, u64> {
        Action::or_refused(Self::parent_id(parent).map(|parent| self.raw.count(&parent)))
    }

    /// The children of this field's child collection that belong to no parent (their key is
    /// missing, an array, or names no stored parent), counted by kind with a few `_id`s. No
    /// subset shows them and no per-parent check finds them; see
    /// [`raw::Children::orphans`](crate::raw::Children::orphans) for the query.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`].
    pub fn orphans(&self) -> Action<'_, crate::repair::Orphans> {
        self.raw.orphans()
    }

    /// Removes a child: from the child collection, from the subset (backfilling the next child
    /// when it was embedded, so the subset is again the top `keep`), and from the count; in
    /// every view of these children.
    ///
    /// One transaction on a replica set. On a standalone server the child is deleted first, so
    /// a crash can leave its embedded copy behind, which [`Children::reconcile`] removes; it can
    /// never lose another child.
    ///
    /// # Errors
    ///
    /// [`crate::Error::ChildNotFound`] when no such child is stored under `parent` (nothing changes),
    /// [`crate::Error::ParentNotFound`], [`crate::Error::NumberOverflow`] when a sum would leave
    /// its Rust type (taking away a negative value), [`crate::Error::Mongo`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{bson::oid::ObjectId, Child, Children, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>, Review: Child<Id = ObjectId>>(
    /// #     reviews: Children<'_, Product, Review>, product_id: ObjectId, review_id: ObjectId,
    /// # ) -> subset::Result<()> {
    /// // A delete sent twice: the second finds nothing to remove.
    /// match reviews.remove(&product_id, &review_id).await {
    ///     Ok(()) | Err(subset::Error::ChildNotFound { .. }) => {}
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn remove<'r>(&'r self, parent: &'r P::Id, child: &'r C::Id) -> Action<'r, ()> {
        let call = || {
            let child = encode::id(child, "a child _id")?;
            Ok(self.raw.remove(&Self::parent_id(parent)?, &child))
        };
        Action::or_refused(call())
    }

    /// Replaces a stored child (matched by `_id`) in the child collection and in the subset.
    /// When its sort keys changed, the subset is recomputed, so the child may enter or leave it;
    /// so is every other view of these children, and a filtered view's flag that flipped moves
    /// the child into or out of it (and its count and sums).
    ///
    /// # Errors
    ///
    /// [`crate::Error::ChildNotFound`] when no child with this `_id` is stored under `parent`,
    /// [`crate::Error::ParentNotFound`], [`crate::Error::MalformedChild`] when a summed field is
    /// not a number, [`crate::Error::ParentKeyMismatch`] when the child's own parent key names
    /// another parent, [`crate::Error::SubsetTooLarge`], [`crate::Error::NumberOverflow`],
    /// [`crate::Error::Serialize`], [`crate::Error::Mongo`].
    pub fn update<'r>(&'r self, parent: &'r P::Id, child: &'r C) -> Action<'r, ()> {
        let call = || {
            let doc = encode::document(child, "a child")?;
            Ok(self.raw.update(&Self::parent_id(parent)?, doc))
        };
        Action::or_refused(call())
    }

    /// Changes some fields of a stored child (matched by `_id` under `parent`), named by the
    /// constants `#[derive(Child)]` generates: `reviews.patch(&id, &review_id).inc(Review::HELPFUL,
    /// 1).await?`. See [`crate::patch`].
    ///
    /// The child collection is changed with one `findOneAndUpdate`, which applies the change
    /// atomically: concurrent `inc`s all count. Every view of these children follows, in the
    /// same transaction on a replica set:
    ///
    /// - a changed sort key re-ranks the child in each view ordered by it (it may enter or leave
    ///   the subset, with backfill); views in another order are not recomputed;
    /// - a changed filter flag moves it into or out of that view, with its count and sums;
    /// - a changed summed field moves each sum by exactly the difference;
    /// - any other change is made to the embedded copies with the same operators (`$inc` on
    ///   `field.$[c].path`), in one parent update; a preview's copies only where the preview
    ///   holds the field, and the parent is not written at all when no view embeds, orders,
    ///   filters or sums a field the patch changes.
    ///
    /// On a standalone server the child is changed first; a crash before the parent update
    /// leaves drift that [`Children::reconcile`] repairs. There, two concurrent `set`s of one
    /// embedded field can leave the copy at the value the child held first (increments are
    /// exact either way).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidPatch`] when the patch changes one field twice, or unsets or
    /// nulls a field a view orders, filters or sums by (nothing is written);
    /// [`crate::Error::ChildNotFound`], [`crate::Error::ParentNotFound`],
    /// [`crate::Error::Serialize`], [`crate::Error::Mongo`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # trait Fields: Sized { const HELPFUL: subset::patch::Field<Self, i32>; }
    /// # use subset::{bson::oid::ObjectId, Child, Children, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>, Review: Child<Id = ObjectId> + Fields>(
    /// #     reviews: Children<'_, Product, Review>, product_id: ObjectId, review_id: ObjectId,
    /// # ) -> subset::Result<()> {
    /// // A "helpful" vote.
    /// reviews.patch(&product_id, &review_id).inc(Review::HELPFUL, 1).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn patch<'r>(&'r self, parent: &'r P::Id, child: &'r C::Id) -> crate::patch::Patch<'r, C> {
        let ids = Self::parent_id(parent)
            .and_then(|parent| Ok((Some(parent), encode::id(child, "a child _id")?)));
        crate::patch::Patch::one(self.raw, ids)
    }

    /// [`Children::patch`] of a child known by its `_id` alone (a "helpful" button knows the
    /// review, not its product): the parent is read from the child collection, then the patch
    /// runs as [`Children::patch`] does, with the same guarantees. A child moved to another
    /// parent meanwhile is followed there.
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{Child, Children, Subset};
    /// # use subset::patch::Field;
    /// # async fn demo<P: Subset<Id = i32>, R: Child<Id = i32>>(
    /// #     reviews: Children<'_, P, R>, helpful: Field<R, i32>,
    /// # ) -> subset::Result<()> {
    /// reviews.patch_by_id(&42).inc(helpful, 1).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Children::patch`]; [`crate::Error::UnknownChild`] when no stored child has this
    /// `_id` (or it carries no parent key).
    pub fn patch_by_id<'r>(&'r self, child: &'r C::Id) -> crate::patch::Patch<'r, C> {
        let ids = encode::id(child, "a child _id").map(|child| (None, child));
        crate::patch::Patch::one(self.raw, ids)
    }

    /// Sets or unsets fields of every child that matches `filter` (a query on child fields, by
    /// BSON name), across all parents, in the child collection and in every view: anonymising
    /// every review of a user is `reviews.patch_where(doc! { "author": "ann" }).set(Review::AUTHOR,
    /// "anonymous".to_owned()).await?`. No `inc`: a rerun of a job cut off part way could not
    /// tell which children it already added to. [`Patch::options`](crate::patch::Patch::options)
    /// and [`Patch::progress`](crate::patch::Patch::progress) are as on a [`Job`].
    ///
    /// Each parent's children and views change together; the job is resumable and reports what
    /// it did, as [`Children::remove_where`].
    ///
    /// # Errors
    ///
    /// As [`Children::remove_where`]; [`crate::Error::InvalidPatch`], [`crate::Error::Serialize`].
    pub fn patch_where<'r>(
        &'r self,
        filter: crate::bson::Document,
    ) -> crate::patch::Patch<'r, C, crate::patch::ByFilter<'r>> {
        crate::patch::Patch::matching(self.raw, filter)
    }

    /// Removes every child that matches `filter` (a query on child fields, by BSON name: a
    /// user's right to be forgotten is `doc! { "author": "ann" }`), across all parents, from
    /// the child collection and from every view, each parent's views backfilled and its counts
    /// and sums recounted: a [`Job`], whose progress callback is called after each batch of
    /// parents.
    ///
    /// Each parent is done in one transaction on a replica set. The job is resumable: killed at
    /// any point and run again with the same filter, it ends as one uninterrupted run would
    /// (without transactions, a journal in the store's
    /// [`Names::jobs`](crate::bookkeeping::Names::jobs) lists the parents
    /// it may have left half done, and the rerun finishes them first). It is not atomic as a
    /// whole: pages read meanwhile may see some parents done and others not yet.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] when the child collection cannot be read (a filter the server
    /// refuses, say); a parent that fails is listed in [`BulkReport::failures`] with its error
    /// and the job goes on.
    pub fn remove_where(&self, filter: crate::bson::Document) -> Job<'_, BulkReport, BulkProgress> {
        Job::new(move |options, progress| {
            Box::pin(async move { self.raw.remove_where(&filter, &options, progress).await })
        })
    }

    /// How many children match `filter`, and under how many parents: what
    /// [`Children::remove_where`] or [`Children::patch_where`] would change, without changing
    /// it (the dry run). Children of no parent are not counted.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`], for a filter the server refuses too.
    pub fn count_where(&self, filter: crate::bson::Document) -> Action<'_, crate::bulk::Matches> {
        self.raw.count_where(&filter)
    }

    /// Moves a child stored under `from` to the parent `to` (a review filed under the wrong
    /// product): its parent key changes in the child collection, every view of `from` loses it
    /// (backfilled, its count and sums moved down) and every view of `to` takes it in
    /// (re-ranked, counted, summed).
    ///
    /// One transaction on a replica set. On a standalone server the child moves first, then
    /// `from` is fixed, then `to`: a crash in between leaves the child counted under the old
    /// parent and not yet under the new one, which [`Children::reconcile`] of each repairs; the
    /// child itself is never lost. A move to the parent it is under changes nothing.
    ///
    /// # Errors
    ///
    /// [`crate::Error::ParentNotFound`] when `to` does not exist (nothing changes),
    /// [`crate::Error::ChildNotFound`] when the child is not stored under `from`,
    /// [`crate::Error::SubsetTooLarge`], [`crate::Error::NumberOverflow`], [`crate::Error::Mongo`].
    pub fn move_child<'r>(
        &'r self,
        from: &'r P::Id,
        child: &'r C::Id,
        to: &'r P::Id,
    ) -> Action<'r, ()> {
        let call = || {
            let child = encode::id(child, "a child _id")?;
            let (from, to) = (Self::parent_id(from)?, Self::parent_id(to)?);
            Ok(self.raw.move_child(&from, &child, &to))
        };
        Action::or_refused(call())
    }

    /// [`Children::move_child`] of a child known by its `_id` alone: the parent it moves from is
    /// read from the child collection (and followed if another move lands first).
    ///
    /// # Errors
    ///
    /// As [`Children::move_child`]; [`crate::Error::UnknownChild`] when no stored child has
    /// this `_id` (or it carries no parent key).
    pub fn move_by_id<'r>(&'r self, child: &'r C::Id, to: &'r P::Id) -> Action<'r, ()> {
        let call = || {
            let child = encode::id(child, "a child _id")?;
            Ok(self.raw.move_by_id(&child, &Self::parent_id(to)?))
        };
        Action::or_refused(call())
    }

    /// Recomputes the subset, the count and the running sums from the child collection, fixes
    /// them if they differ, and reports what differed. Safe while writers run.
    ///
    /// Pushes queued for a fold whose callers went away ([`Drift::queued`]) are written first,
    /// in a transaction of their own, when the store writes in transactions and no session is
    /// given; otherwise they are only reported.
    ///
    /// # Errors
    ///
    /// [`crate::Error::ParentNotFound`], [`crate::Error::MalformedParent`],
    /// [`crate::Error::MalformedChild`] when a stored child's summed field is not a number,
    /// [`crate::Error::Mongo`]; [`crate::Error::RebuildWouldEmpty`] for a parent built under another
    /// definition that a rebuild would refuse.
    pub fn reconcile<'r>(&'r self, parent: &'r P::Id) -> Action<'r, Drift> {
        Action::or_refused(Self::parent_id(parent).map(|parent| self.raw.reconcile(&parent)))
    }

    /// What [`Children::reconcile`] would find, without changing anything.
    ///
    /// # Errors
    ///
    /// As [`Children::reconcile`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use subset_runtime as subset;
    /// # use subset::{bson::oid::ObjectId, Child, Children, Subset};
    /// # async fn demo<Product: Subset<Id = ObjectId>, Review: Child<Id = ObjectId>>(
    /// #     reviews: Children<'_, Product, Review>, product_id: ObjectId,
    /// # ) -> subset::Result<()> {
    /// let drift = reviews.check(&product_id).await?;
    /// if !drift.is_in_sync() {
    ///     eprintln!("product {product_id}: {drift:?}");
    ///     reviews.reconcile(&product_id).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn check<'r>(&'r self, parent: &'r P::Id) -> Action<'r, Drift> {
        Action::or_refused(Self::parent_id(parent).map(|parent| self.raw.check(&parent)))
    }
}
