//! Queries more than one operation sends, built in one place.

use crate::bson::{doc, Bson, Document};
use mongodb::action::Find;
use mongodb::Collection;

use crate::model::SubsetSpec;
use crate::order;

/// The children that belong in `parent`'s subset: the child collection's first `keep` in the
/// subset's order, in their embedded form (without the parent key).
pub(crate) fn top_children<'c>(
    children: &'c Collection<Document>,
    spec: &SubsetSpec,
    parent: &Bson,
) -> Find<'c, Document> {
    children
        .find(doc! { spec.key: parent.clone() })
        .sort(order::sort_doc(spec))
        .limit(i64::from(spec.keep))
        .projection(doc! { spec.key: 0 })
}

/// The parent projection that reads one subset field, its count and its sums.
pub(crate) fn subset_projection(spec: &SubsetSpec) -> Document {
    let mut projection = doc! { spec.field: 1 };
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
