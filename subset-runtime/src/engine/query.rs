//! Queries more than one operation sends, built in one place.

use crate::bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use futures::TryStreamExt;
use mongodb::action::Find;
use mongodb::Collection;

use super::exec::Ctx;
use super::{RawChildren, RawStore};
use crate::error::{driver, Error, Result};
use crate::model::SubsetSpec;
use crate::order;

/// The children that belong in `parent`'s subset: the child collection's first `keep` in the
/// subset's order, in their embedded form ([`embedded`], made by the server), leaving out the
/// `excluded` `_id`s (children no subset may embed).
pub(crate) fn top_children<'c>(
    children: &'c Collection<Document>,
    spec: &SubsetSpec,
    parent: &Bson,
    excluded: &[Bson],
) -> Find<'c, Document> {
    children
        .find(top_filter(spec, parent, excluded))
        .sort(order::sort_doc(spec))
        .limit(i64::from(spec.keep))
        .projection(embedded_projection(spec))
}

/// [`top_children`] as aggregation stages, for a read that computes several views in one
/// `aggregate`: the same filter, order, limit and projection, so that the two never differ.
pub(crate) fn top_stages(spec: &SubsetSpec, parent: &Bson, excluded: &[Bson]) -> Vec<Document> {
    let mut stages = vec![
        doc! { "$match": top_filter(spec, parent, excluded) },
        doc! { "$sort": order::sort_doc(spec) },
        doc! { "$limit": i64::from(spec.keep) },
    ];
    // An empty projection is the whole child to a `find`, and an error to `$project`.
    let projection = embedded_projection(spec);
    if !projection.is_empty() {
        stages.push(doc! { "$project": projection });
    }
    stages
}

/// The filter of [`top_children`].
fn top_filter(spec: &SubsetSpec, parent: &Bson, excluded: &[Bson]) -> Document {
    let mut filter = spec.children_of(parent);
    if !excluded.is_empty() {
        filter.insert("_id", doc! { "$nin": excluded });
    }
    filter
}

/// The projection that turns a stored child into its embedded form: without the parent key
/// (unless the children hold it as a field, [`SubsetSpec::embed_key`]), or, for a preview
/// subset, only `_id` and the preview's fields.
pub(crate) fn embedded_projection(spec: &SubsetSpec) -> Document {
    match spec.embed {
        None if spec.embed_key => Document::new(),
        None => doc! { spec.key: 0 },
        Some(fields) => {
            let mut projection = doc! { "_id": 1 };
            for field in fields {
                projection.insert(field.bson, 1);
            }
            if spec.embed_key {
                projection.insert(spec.key, 1);
            }
            projection
        }
    }
}

/// The embedded form of `child` (a child as given to a push or read back from the child
/// collection), the same as [`embedded_projection`] makes: the whole child, or its preview
/// fields, with the parent key only where [`SubsetSpec::embed_key`] keeps it. Kept in the
/// child's field order, as the server's projection keeps it.
pub(crate) fn embedded(spec: &SubsetSpec, mut child: Document) -> Document {
    if !spec.embed_key {
        child.remove(spec.key);
    }
    match spec.embed {
        None => child,
        Some(fields) => {
            let kept = |name: &str| {
                name == "_id"
                    || (spec.embed_key && name == spec.key)
                    || fields.iter().any(|f| f.bson == name)
            };
            child.into_iter().filter(|(name, _)| kept(name)).collect()
        }
    }
}

/// The parent projection that reads one subset field, its count and its sums, and the marker
/// of the definition they were built under.
pub(crate) fn subset_projection(spec: &SubsetSpec) -> Document {
    let mut projection = doc! { spec.field: 1, super::MARKER: 1 };
    if let Some(count) = spec.count {
        projection.insert(count, 1);
    }
    for sum in spec.sums {
        projection.insert(sum.parent, 1);
    }
    projection
}

/// A `$lookup` stage of a read ahead ([`read_ahead`]): `pipeline` run on the child collection
/// of `spec`, its answer as the array `name`.
pub(crate) fn lookup(spec: &SubsetSpec, pipeline: Vec<Document>, name: &str) -> Document {
    doc! { "$lookup": { "from": spec.child_collection, "pipeline": pipeline, "as": name } }
}

/// The children read with a parent in one `aggregate` ([`read_ahead`]): the lookups' arrays,
/// by name.
#[derive(Debug)]
pub(crate) struct ReadAhead(RawDocumentBuf);

impl ReadAhead {
    /// The children of the lookup `name`; `None` when the answer has no such array.
    pub(crate) fn branch(&self, name: &str) -> Option<Vec<Document>> {
        self.each(name, |raw| Document::try_from(raw).ok())
    }

    /// [`ReadAhead::branch`] as the raw documents.
    pub(crate) fn raws(&self, name: &str) -> Option<Vec<RawDocumentBuf>> {
        self.each(name, |raw| Some(raw.to_owned()))
    }

    /// Each document of the lookup `name`, as `made` makes it; `None` when the answer has no
    /// such array, or any of it is not a document `made` takes.
    fn each<T>(&self, name: &str, made: impl Fn(&RawDocument) -> Option<T>) -> Option<Vec<T>> {
        let array = self.0.get_array(name).ok()?;
        array
            .into_iter()
            .map(|element| made(element.ok()?.as_document()?))
            .collect()
    }
}

/// What [`read_ahead`] found.
pub(crate) enum Ahead {
    /// The parent as a `find` returns it (projected, when the read projects), and its lookups.
    Read(RawDocumentBuf, ReadAhead),
    /// No parent has this `_id`.
    Missing,
    /// Not read: the caller reads the parent and the children apart, as it does when not
    /// reading ahead. In the caller's session (whose transaction, if any, a failed command
    /// would abort); when the parent and the lookups' answers together are over the 16 MiB of
    /// one document (and the store's look-ahead starts its count again); when the server cannot
    /// run the pipeline.
    Apart,
}

/// The parent `id` (with `projection`, if any) and, in the same `aggregate`, what the
/// `$lookup` stages `lookups` ([`lookup`]) read from the child collections: one command where
/// a read of a parent whose views must be computed otherwise sends two. The parent comes back
/// as stored, under a field of its own, so no name of the lookups can meet one of its fields.
///
/// # Errors
///
/// [`Error::Mongo`].
pub(crate) async fn read_ahead(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    id: &Bson,
    projection: Option<Document>,
    lookups: Vec<Document>,
) -> Result<Ahead> {
    if ctx.has_session() {
        return Ok(Ahead::Apart);
    }
    let mut pipeline = vec![doc! { "$match": { "_id": id.clone() } }];
    pipeline.extend(projection.map(|p| doc! { "$project": p }));
    pipeline.push(doc! { "$replaceWith": { "p": "$$ROOT" } });
    pipeline.extend(lookups);
    let parents = store.parents::<Document>();
    let read = parents.aggregate(pipeline).with_type::<RawDocumentBuf>();
    let found = match ctx.aggregate(read).await {
        Ok(found) => found,
        // The server built the whole answer to refuse it: the count starts again, so that
        // reads of a parent this large do not pay that on every read.
        Err(e) if driver::is_too_large(&e) => {
            store.shared.lookahead.reset();
            return Ok(Ahead::Apart);
        }
        Err(e) if driver::is_unsupported(&e) => {
            tracing::debug!(error = %e, "the server cannot run a read ahead: reading apart");
            store.shared.lookahead.refused();
            return Ok(Ahead::Apart);
        }
        Err(e) => return Err(store.mongo(e)),
    };
    let Some(looked) = found.into_iter().next() else {
        return Ok(Ahead::Missing);
    };
    let parent = looked
        .get_document("p")
        .map_err(|e| Error::MalformedParent {
            collection: store.collection_name().to_owned(),
            id: Box::new(id.clone()),
            field: "_id".to_owned(),
            problem: format!("came back from a read ahead unreadable: {e}"),
        })?
        .to_owned();
    Ok(Ahead::Read(parent, ReadAhead(looked)))
}

/// Children of `parent` whose `_id` is one of `ids`.
pub(crate) fn owned(spec: &SubsetSpec, parent: &Bson, ids: Vec<Bson>) -> Document {
    doc! { "_id": { "$in": ids }, spec.key: parent.clone() }
}

/// Whether `parent` is stored, read in the step's session.
pub(crate) async fn has_parent(
    s: &RawChildren<'_>,
    ctx: &mut Ctx<'_>,
    parent: &Bson,
) -> Result<bool> {
    let parents = s.store().parents::<Document>();
    let found = parents
        .find_one(doc! { "_id": parent.clone() })
        .projection(doc! { "_id": 1 });
    let found = ctx.run(found).await.map_err(|e| s.store().mongo(e))?;
    Ok(found.is_some())
}

/// The error for a child not stored under `parent`: [`Error::ParentNotFound`] when there is
/// no such parent, else [`Error::ChildNotFound`].
pub(crate) async fn child_not_found(
    s: &RawChildren<'_>,
    ctx: &mut Ctx<'_>,
    parent: &Bson,
    child: &Bson,
) -> Error {
    match has_parent(s, ctx, parent).await {
        Ok(false) => s.parent_not_found(parent),
        Ok(true) => Error::ChildNotFound {
            collection: s.spec().child_collection.to_owned(),
            parent: Box::new(parent.clone()),
            id: Box::new(child.clone()),
        },
        Err(e) => e,
    }
}

/// The error of a parent update meant to add about `adding` bytes to the subset:
/// [`Error::SubsetTooLarge`] when the server refused it for the document's size, else `e`.
pub(crate) async fn parent_write_error(
    s: &RawChildren<'_>,
    e: Error,
    parent: &Bson,
    adding: i64,
) -> Error {
    match e {
        Error::Mongo { source, .. } if driver::is_too_large(&source) => {
            let stored = stored_size(s, parent).await.unwrap_or(0);
            too_large(s, *source, parent, stored.saturating_add_signed(adding))
        }
        other => other,
    }
}

/// The error of a parent write that would have made a document of about `bytes`.
pub(crate) fn too_large(
    s: &RawChildren<'_>,
    e: mongodb::error::Error,
    parent: &Bson,
    bytes: u64,
) -> Error {
    if !driver::is_too_large(&e) {
        return s.store().mongo(e);
    }
    Error::SubsetTooLarge {
        collection: s.store().shared.spec.collection.to_owned(),
        id: Box::new(parent.clone()),
        field: s.spec().field.to_owned(),
        bytes,
    }
}

/// The parent's size as stored, read outside any transaction (a refused write has aborted
/// ours), for a message only.
async fn stored_size(s: &RawChildren<'_>, parent: &Bson) -> Option<u64> {
    let pipeline = [
        doc! { "$match": { "_id": parent.clone() } },
        doc! { "$project": { "_id": 0, "size": { "$bsonSize": "$$ROOT" } } },
    ];
    let sizes: Vec<Document> = s
        .store()
        .parents::<Document>()
        .aggregate(pipeline)
        .await
        .ok()?
        .try_collect()
        .await
        .ok()?;
    let size = sizes.first()?.get("size")?;
    match size {
        Bson::Int32(n) => u64::try_from(*n).ok(),
        Bson::Int64(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}
