//! Merged pagination: the first page from the embedded subset, later pages by keyset on
//! (sort keys, `_id`) from the child collection; and the whole collection as a stream.

use std::borrow::Cow;

use crate::bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use futures::stream::BoxStream;
use mongodb::ClientSession;

use super::exec::Ctx;
use super::model_change::{self, ViewState};
use super::query::{self, Ahead};
use super::RawChildren;
use crate::action::{span, Action, Operation};
use crate::cursor::{Anchor, Cursor, Page, PageRequest, MAX_PAGE_SIZE};
use crate::error::{Error, Result};
use crate::model::SubsetSpec;
use crate::order::Side;
use crate::{decode, order};

/// The filter and order of a page read forward from the first child.
fn from_start(spec: &SubsetSpec, parent: &Bson) -> (Document, Document) {
    (spec.children_of(parent), order::sort_doc(spec))
}

/// How many children a page reads: one past the page says whether more follow.
fn read_size(request: &PageRequest) -> i64 {
    i64::from(request.size) + 1
}

/// The name of a first page's children read ahead with the parent.
const PAGE: &str = "page";

/// What the embedded subset answers to a first page.
// Returned once and unpacked at once: boxing the page would cost every first page an
// allocation.
#[allow(clippy::large_enum_variant)]
enum Embedded<T> {
    /// The page.
    Page(Page<T>),
    /// Not the page: it comes from the child collection, read already when it holds the
    /// children (read ahead with the parent).
    Collection(Option<Vec<RawDocumentBuf>>),
}

impl<'a> RawChildren<'a> {
    /// One page of children as raw documents; see [`crate::Children::page`].
    ///
    /// # Errors
    ///
    /// As [`crate::Children::page`].
    pub fn page<'r>(
        &'r self,
        parent: &Bson,
        request: &'r PageRequest,
    ) -> Action<'r, Page<RawDocumentBuf>> {
        Action::of(self.page_as(parent, request, |raw, _, _| Ok(raw.to_owned())))
    }

    /// The operation of a page whose children `decode(child, collection, path in the parent)`
    /// turns into `T`.
    pub(crate) fn page_as<'r, T, D>(
        &self,
        parent: &Bson,
        request: &'r PageRequest,
        decode: D,
    ) -> PageOf<'r, D>
    where
        'a: 'r,
        D: Fn(&RawDocument, &str, Option<&str>) -> Result<T>,
    {
        PageOf {
            subset: *self,
            parent: parent.clone(),
            request,
            decode,
        }
    }
}

/// [`RawChildren::page`], each child decoded by `decode`.
pub(crate) struct PageOf<'a, D> {
    subset: RawChildren<'a>,
    parent: Bson,
    request: &'a PageRequest,
    decode: D,
}

impl<'s, 'a: 's, T, D> Operation<'s> for PageOf<'a, D>
where
    T: Send + 's,
    D: Fn(&RawDocument, &str, Option<&str>) -> Result<T> + Send + Sync + 's,
{
    type Output = Page<T>;

    fn span(&self) -> tracing::Span {
        let s = self.subset;
        let span = span!(
            "subset.page",
            s.store(),
            Some(s.spec.field),
            Some(&self.parent)
        );
        span.record("subset.page_size", self.request.size);
        span
    }

    fn check(&self) -> Result<()> {
        self.subset.store.check_parent_id(&self.parent)?;
        let size = self.request.size;
        if size == 0 || size > MAX_PAGE_SIZE {
            return Err(Error::InvalidPageSize {
                size,
                max: MAX_PAGE_SIZE,
            });
        }
        Ok(())
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Page<T>> {
        let ctx = &mut Ctx::read(caller);
        let (s, parent, request, decode) = (self.subset, &self.parent, self.request, &self.decode);
        let spec = s.spec;
        let backward = request.is_backward();
        // Whether the parent was read already, which an empty first page then needs not ask.
        let mut parent_read = false;
        // The page's children, when they were read with the parent.
        let mut read_ahead = None;
        let from = match &request.anchor {
            // A preview subset embeds parts of children, and a page holds whole ones.
            // From the child collection when the embedded subset was built under another
            // definition of the model (see [`raw::Store::rebuild`](crate::raw::Store::rebuild)).
            Anchor::Start if request.size <= spec.keep && spec.embed.is_none() => {
                match s.embedded_page(ctx, parent, request, decode).await? {
                    Embedded::Page(page) => return Ok(page),
                    Embedded::Collection(read) => read_ahead = read,
                }
                parent_read = true;
                None
            }
            Anchor::Start | Anchor::End => None,
            Anchor::After(cursor) | Anchor::Before(cursor) => {
                Some((cursor, cursor.check(spec, parent)?))
            }
        };
        // A backward page always reads the child collection, even one that lies within the head
        // the embedded subset also holds. The collection is the truth and a keyset page selects
        // by position alone, so a backward walk serves each position once whichever source the
        // pages next to it came from. The embedded copy can lag the collection for a moment (an
        // ordered push has stored the child but not yet embedded it; a remove has not yet
        // backfilled the subset): a page taken partly from each could serve a child twice or
        // skip one at the seam, and choosing per page would make two walks over the same data
        // differ. The forward first page is the one read from the parent, because it is the
        // product page the pattern exists for: one query, the head as the parent holds it.
        let size = request.size as usize;
        let (filter, sort) = match (from, backward) {
            (Some((_, position)), false) => (
                order::keyset_filter(spec, parent, position, Side::After),
                order::sort_doc(spec),
            ),
            (Some((_, position)), true) => (
                order::keyset_filter(spec, parent, position, Side::Before),
                order::reverse_sort_doc(spec),
            ),
            (None, false) => from_start(spec, parent),
            (None, true) => (spec.children_of(parent), order::reverse_sort_doc(spec)),
        };
        // One child past the page says whether more follow in the direction of reading.
        let children = s.children::<RawDocumentBuf>();
        let mut raws = match read_ahead {
            Some(raws) => raws,
            None => ctx
                .collect(children.find(filter).sort(sort).limit(read_size(request)))
                .await
                .map_err(|e| s.mongo_child(e))?,
        };
        if raws.is_empty()
            && from.is_none()
            && !parent_read
            && !query::has_parent(&s, ctx, parent).await?
        {
            return Err(s.parent_not_found(parent));
        }
        let more = raws.len() > size;
        raws.truncate(size);
        if backward {
            // Read from the far end; served in the subset's order.
            raws.reverse();
        }
        let mut items = Vec::with_capacity(raws.len());
        let mut cursors = Vec::with_capacity(raws.len());
        for raw in &raws {
            items.push(decode(raw, spec.child_collection, None)?);
            cursors.push(s.cursor(parent, raw)?);
        }
        if let Some((cursor, _)) = from {
            // At the end of the walk, or when the children served have other type brackets
            // than the cursor (a forged position, or children of mixed types). The child
            // farthest from the cursor stands for the page.
            let farthest = if backward {
                cursors.first()
            } else {
                cursors.last()
            };
            let served = farthest.map(|c| c.position.as_slice());
            let odd = served.is_some_and(|s| cursor.check_brackets(spec, s).is_err());
            if !more || odd {
                let served = served.map(<[Bson]>::to_vec);
                s.report_misfit(ctx, parent, cursor, served).await?;
            }
        }
        // The direction of reading is exact (the extra child); the other is known only from
        // the request: a page from a cursor has at least that cursor's child beyond it.
        let (has_previous, has_next) = if backward {
            (more, from.is_some())
        } else {
            (from.is_some(), more)
        };
        Ok(Page::new(items, cursors, has_previous, has_next))
    }
}

impl RawChildren<'_> {
    /// At the end of a keyset walk (or on a page whose children have other type brackets than
    /// its cursor): fails with [`Error::MalformedChild`] if a child of `parent` has a sort value
    /// outside its key's type bracket, which the keyset pages could not reach. One index scan of
    /// the parent's keys, once per walk.
    ///
    /// The brackets come from the descriptor's types ([`crate::spec::SortValues`]), which the cursor
    /// was checked against before the query. Keys without a type (run-time descriptors) take
    /// theirs from a stored child, never from the cursor, so that a forged cursor cannot make
    /// healthy children look malformed: the last child `served`, or, when the last page is
    /// empty, the one [`RawChildren::stored_position`] finds. When no child is malformed, a cursor
    /// of other brackets than that child is [`Error::InvalidCursor`]: a genuine cursor is the
    /// position of a child, so over healthy children it has their brackets.
    async fn report_misfit(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        cursor: &Cursor,
        served: Option<Vec<Bson>>,
    ) -> Result<()> {
        let spec = self.spec;
        let untyped = spec.order().any(|k| k.values.bracket().is_none());
        let stored = match served {
            None if untyped => self.stored_position(ctx, parent, cursor).await?,
            served => served,
        };
        let expected = order::expected(spec, stored.as_deref());
        let filter = order::misfit_filter(spec, parent, &expected);
        if filter.get_array("$or").is_ok_and(|b| !b.is_empty()) {
            let children = self.children::<RawDocumentBuf>();
            let misfit = ctx
                .run(
                    children
                        .find_one(filter)
                        .projection(order::projection(spec)),
                )
                .await
                .map_err(|e| self.mongo_child(e))?;
            // The filter and `misfit_problem` agree on brackets; nothing to name if they do not.
            if let Some((misfit, (field, problem))) = misfit.as_ref().and_then(|misfit| {
                order::misfit_problem(spec, &expected, misfit).map(|found| (misfit, found))
            }) {
                return Err(Error::MalformedChild {
                    collection: spec.child_collection.to_owned(),
                    id: Box::new(decode::id_of(misfit)),
                    parent: Some(Box::new(parent.clone())),
                    field: field.to_owned(),
                    problem,
                });
            }
        }
        match (untyped, &stored) {
            (true, Some(stored)) => cursor.check_brackets(spec, stored),
            _ => Ok(()),
        }
    }

    /// After an empty last page, the position of a stored child of `parent` to take untyped
    /// keys' brackets from: the child `cursor` was made from, when it is still stored with the
    /// cursor's brackets (a genuine cursor, even over children of mixed types); otherwise the
    /// parent's first child in order. `None` when the parent has no children. One `find_one`
    /// by `_id`, and a second only for a forged cursor or a child deleted since.
    async fn stored_position(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        cursor: &Cursor,
    ) -> Result<Option<Vec<Bson>>> {
        let spec = self.spec;
        let children = self.children::<RawDocumentBuf>();
        let id = spec
            .order()
            .zip(&cursor.position)
            .find_map(|(key, value)| (key.field == "_id").then_some(value));
        if let Some(id) = id {
            let own = ctx
                .run(
                    children
                        .find_one(doc! { spec.key: parent.clone(), "_id": { "$eq": id.clone() } })
                        .projection(order::projection(spec)),
                )
                .await
                .map_err(|e| self.mongo_child(e))?;
            if let Some(own) = own {
                let position = order::position(spec, &own);
                if cursor.check_brackets(spec, &position).is_ok() {
                    return Ok(Some(position));
                }
            }
        }
        let first = ctx
            .run(
                children
                    .find_one(spec.children_of(parent))
                    .sort(order::sort_doc(spec))
                    .projection(order::projection(spec)),
            )
            .await
            .map_err(|e| self.mongo_child(e))?;
        Ok(first.map(|first| order::position(spec, &first)))
    }

    /// The first page, from the embedded subset, in one query projecting this field (and the
    /// count, which tells whether a full subset is all there is); [`Embedded::Collection`]
    /// when the subset was built under another definition of the model, or cannot answer as
    /// the child collection would (see [`subset_answers`]).
    ///
    /// While the store reads ahead ([`model_change::Lookahead`]), the query also reads the
    /// page from the child collection (`$lookup`), as the caller would next: an outdated
    /// parent's first page is then one command.
    async fn embedded_page<T>(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        request: &PageRequest,
        decode: &impl Fn(&RawDocument, &str, Option<&str>) -> Result<T>,
    ) -> Result<Embedded<T>> {
        let spec = self.spec;
        let lookahead = &self.store.shared.lookahead;
        let field = self.store.field_index(spec);
        let mut read = None;
        if field.is_some_and(|i| lookahead.wanted(i)) {
            // The query [`RawChildren::page`] sends the child collection for this page.
            let (filter, sort) = from_start(spec, parent);
            let page = vec![
                doc! { "$match": filter },
                doc! { "$sort": sort },
                doc! { "$limit": read_size(request) },
            ];
            let lookups = vec![query::lookup(spec, page, PAGE)];
            let projection = Some(query::subset_projection(spec));
            match query::read_ahead(self.store, ctx, parent, projection, lookups).await? {
                Ahead::Read(raw, ahead) => read = Some((raw, Some(ahead))),
                Ahead::Missing => return Err(self.parent_not_found(parent)),
                Ahead::Apart => {}
            }
        }
        let (raw, ahead) = match read {
            Some(read) => read,
            None => {
                let parents = self.store.parents::<RawDocumentBuf>();
                let raw = ctx
                    .run(
                        parents
                            .find_one(doc! { "_id": parent.clone() })
                            .projection(query::subset_projection(spec)),
                    )
                    .await
                    .map_err(|e| self.store.mongo(e))?
                    .ok_or_else(|| self.parent_not_found(parent))?;
                (raw, None)
            }
        };
        let collection = || Embedded::Collection(ahead.as_ref().and_then(|a| a.raws(PAGE)));
        let stale = self.store.model().view_state(&raw, spec).await? == ViewState::Stale;
        if let Some(i) = field {
            lookahead.saw(i, stale);
        }
        if stale {
            return Ok(collection());
        }
        let mut elements = decode::subset_elements(&raw, self.store.collection_name(), spec)?;
        // Built with a larger `keep`: its head is this subset.
        elements.truncate(spec.keep as usize);
        let count = spec
            .count
            .and_then(|c| raw.get(c).ok().flatten())
            .and_then(decode::count_value);
        let noted = model_change::noted_malformed(&raw, spec);
        if !subset_answers(spec.keep, elements.len(), count, noted) {
            return Ok(collection());
        }
        let size = request.size as usize;
        let mut items = Vec::with_capacity(elements.len().min(size));
        let mut cursors = Vec::with_capacity(items.capacity());
        let collection = self.store.collection_name();
        for (i, element) in elements.iter().take(size).enumerate() {
            // The element's path is written only into an error: a child that does not decode
            // is decoded again with it (about 1.5 % of a first page, measured, were the paths).
            let item = match decode(element, collection, None) {
                Ok(item) => item,
                Err(_) => decode(element, collection, Some(&format!("{}.{i}", spec.field)))?,
            };
            items.push(item);
            cursors.push(self.cursor(parent, element)?);
        }
        // More children exist when the subset holds more than this page, or when it is full and
        // the count (if kept) says the collection holds more than this page.
        let full = elements.len() == size && elements.len() as u32 == spec.keep;
        let more = elements.len() > size
            || (full
                && match spec.count.map(|c| raw.get(c)) {
                    Some(Ok(Some(v))) => decode::count_value(v).is_none_or(|n| n > size as i64),
                    _ => true,
                });
        Ok(Embedded::Page(Page::new(items, cursors, false, more)))
    }

    /// The cursor of `child` (a child of `parent` or its embedded copy: anything that holds its
    /// sort keys and `_id`), which a page continues from either way; see
    /// [`crate::Children::cursor_of`].
    ///
    /// A child whose sort key is missing or null has no position a keyset comparison can
    /// continue from (`$lt: null` matches nothing), and one whose sort key has a type its Rust
    /// field cannot hold would make a cursor that a page refuses: both are errors
    /// naming the child rather than a walk that ends there (every child on a page has a cursor).
    ///
    /// # Errors
    ///
    /// [`Error::MalformedChild`] naming the sort key at fault.
    pub fn cursor(&self, parent: &Bson, child: &RawDocument) -> Result<Cursor> {
        let position = order::position(self.spec, child);
        if let Some((field, problem)) = order::unplaceable(self.spec, &position) {
            return Err(Error::MalformedChild {
                collection: self.spec.child_collection.to_owned(),
                id: Box::new(decode::id_of(child)),
                parent: Some(Box::new(parent.clone())),
                field: field.to_owned(),
                problem,
            });
        }
        Ok(Cursor {
            field: Cow::Borrowed(self.spec.field),
            parent: parent.clone(),
            position,
        })
    }

    /// Every child of `parent` in order, as raw documents; see [`crate::Children::all`].
    ///
    /// # Errors
    ///
    /// As [`crate::Children::all`].
    pub fn all<'r>(&'r self, parent: &Bson) -> Action<'r, BoxStream<'r, Result<RawDocumentBuf>>> {
        Action::of(All {
            subset: *self,
            parent: parent.clone(),
        })
    }

    /// How many children `parent` has in the child collection; see [`crate::Children::count`].
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub fn count<'r>(&'r self, parent: &Bson) -> Action<'r, u64> {
        Action::of(Count {
            subset: *self,
            parent: parent.clone(),
        })
    }
}

/// [`RawChildren::all`].
struct All<'a> {
    subset: RawChildren<'a>,
    parent: Bson,
}

impl<'s, 'a: 's> Operation<'s> for All<'a> {
    type Output = BoxStream<'s, Result<RawDocumentBuf>>;

    fn span(&self) -> tracing::Span {
        let s = self.subset;
        span!(
            "subset.all",
            s.store(),
            Some(s.spec.field),
            Some(&self.parent)
        )
    }

    fn check(&self) -> Result<()> {
        self.subset.store.check_parent_id(&self.parent)
    }

    /// The stream, read in the caller's session if given (which the stream then holds until it
    /// is dropped).
    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Self::Output> {
        let spec = self.subset.spec;
        let name = spec.child_collection;
        let children = self.subset.children::<RawDocumentBuf>();
        let find = children
            .find(spec.children_of(&self.parent))
            .sort(order::sort_doc(spec));
        Ctx::read(caller)
            .stream(find, move |e| Error::mongo(name, e))
            .await
    }
}

/// [`RawChildren::count`].
struct Count<'a> {
    subset: RawChildren<'a>,
    parent: Bson,
}

impl<'s, 'a: 's> Operation<'s> for Count<'a> {
    type Output = u64;

    fn span(&self) -> tracing::Span {
        let s = self.subset;
        span!(
            "subset.count",
            s.store(),
            Some(s.spec.field),
            Some(&self.parent)
        )
    }

    fn check(&self) -> Result<()> {
        self.subset.store.check_parent_id(&self.parent)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<u64> {
        let s = self.subset;
        let children = s.children::<Document>();
        Ctx::read(caller)
            .run(children.count_documents(s.spec.children_of(&self.parent)))
            .await
            .map_err(|e| s.mongo_child(e))
    }
}

/// Whether a view's embedded subset, built under this definition, gives the first page that the
/// child collection would: a page is the same whichever the parent's bookkeeping (built,
/// outdated, never marked), items, `has_next` and errors alike.
///
/// Not when the parent's marker notes `noted` malformed children among the head (see
/// [`model_change::noted_malformed`]): the subset left them out, and the collection's page
/// fails at the first one with [`Error::MalformedChild`], as it does for an outdated parent.
/// Nor when the subset holds fewer than `keep` (`held`) while the kept `count` says more
/// children exist: the subset cannot tell whether more follow (a child left out, or a lag
/// a reconcile fixes), and its `has_next` would say none do.
pub(crate) fn subset_answers(keep: u32, held: usize, count: Option<i64>, noted: u32) -> bool {
    if noted > 0 {
        return false;
    }
    let short = held < keep as usize;
    !(short && count.is_some_and(|n| n > held as i64))
}

#[cfg(test)]
mod tests {
    use super::subset_answers;

    #[test]
    fn a_note_of_malformed_children_sends_the_page_to_the_collection() {
        assert!(subset_answers(5, 5, Some(40), 0));
        assert!(!subset_answers(5, 5, Some(40), 1));
        assert!(!subset_answers(5, 2, None, 2));
    }

    #[test]
    fn a_short_subset_answers_only_when_the_count_says_it_is_everything() {
        // Two good children of three: `has_next` from the subset would be false.
        assert!(!subset_answers(5, 2, Some(3), 0));
        assert!(subset_answers(5, 2, Some(2), 0));
        // A count below the array (a lag the other way) leaves the subset to answer.
        assert!(subset_answers(5, 2, Some(1), 0));
        // No count kept: nothing says more exist.
        assert!(subset_answers(5, 2, None, 0));
        assert!(subset_answers(5, 0, Some(0), 0));
        assert!(!subset_answers(5, 0, Some(1), 0));
    }
}
