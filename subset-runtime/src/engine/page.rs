//! Merged pagination: the first page from the embedded subset, later pages by keyset on
//! (sort keys, `_id`) from the child collection; and the whole collection as a stream.

use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use futures::{Stream, StreamExt, TryStreamExt};

use super::exec::Ctx;
use super::{query, RawSubset};
use crate::cursor::{Cursor, Page, PageRequest, MAX_PAGE_SIZE};
use crate::error::{Error, Result};
use crate::{decode, order};

impl RawSubset<'_> {
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
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection_name(), field = self.spec.field, size = request.size))]
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
        if raws.is_empty()
            && after.is_none()
            && !self.parent_exists(&mut Ctx::read(None), parent).await?
        {
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
        let raw = self
            .store
            .parents::<RawDocumentBuf>()
            .find_one(doc! { "_id": parent.clone() })
            .projection(query::subset_projection(spec))
            .await
            .map_err(|e| self.store.mongo(e))?
            .ok_or_else(|| self.parent_not_found(parent))?;
        let elements = decode::subset_elements(&raw, self.store.collection_name(), spec)?;
        let size = request.size as usize;
        let items = elements
            .iter()
            .take(size)
            .enumerate()
            .map(|(i, e)| {
                let path = format!("{}.{i}", spec.field);
                decode(e, self.store.collection_name(), Some(&path))
            })
            .collect::<Result<Vec<T>>>()?;
        // More children exist when the subset holds more than this page, or when it is full and
        // the count (if kept) says the collection holds more than this page.
        let full = elements.len() == size && elements.len() as u32 == spec.keep;
        let more = elements.len() > size
            || (full
                && match spec.count.map(|c| raw.get(c)) {
                    Some(Ok(Some(v))) => decode::count_value(v).is_none_or(|n| n > size as i64),
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
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection_name(), field = self.spec.field))]
    pub async fn count(&self, parent: &Bson) -> Result<u64> {
        self.children::<Document>()
            .count_documents(doc! { self.spec.key: parent.clone() })
            .await
            .map_err(|e| self.mongo_child(e))
    }
}
