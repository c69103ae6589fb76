//! Queries more than one operation sends, built in one place.

use crate::bson::{doc, Bson, Document};
use mongodb::action::Find;
use mongodb::Collection;

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
    let mut filter = spec.children_of(parent);
    if !excluded.is_empty() {
        filter.insert("_id", doc! { "$nin": excluded });
    }
    children
        .find(filter)
        .sort(order::sort_doc(spec))
        .limit(i64::from(spec.keep))
        .projection(embedded_projection(spec))
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

/// Children of `parent` whose `_id` is one of `ids`.
pub(crate) fn owned(spec: &SubsetSpec, parent: &Bson, ids: Vec<Bson>) -> Document {
    doc! { "_id": { "$in": ids }, spec.key: parent.clone() }
}
