//! The total order of a subset and the queries derived from it: `$sort` documents, index keys
//! and keyset filters.

use std::cmp::Ordering;

use bson::{doc, Bson, Document, RawDocument};

use crate::model::{Direction, SubsetSpec};

/// The `$sort` / `sort` document: the user's keys, then `_id`.
pub(crate) fn sort_doc(spec: &SubsetSpec) -> Document {
    spec.order()
        .map(|k| (k.field.to_owned(), Bson::Int32(k.direction.as_i32())))
        .collect()
}

/// The child-collection index that turns every page into an index scan:
/// `{key: 1, <sort keys>, _id}`.
pub(crate) fn index_keys(spec: &SubsetSpec) -> Document {
    let mut keys = doc! { spec.key: 1 };
    keys.extend(sort_doc(spec));
    keys
}

/// The values of the order's fields in `child`, the position a cursor remembers.
///
/// A missing field reads as `null`, which is where MongoDB sorts it.
pub(crate) fn position(spec: &SubsetSpec, child: &RawDocument) -> Vec<Bson> {
    spec.order()
        .map(|k| {
            child
                .get(k.field)
                .ok()
                .flatten()
                .and_then(|v| Bson::try_from(v).ok())
                .unwrap_or(Bson::Null)
        })
        .collect()
}

/// Children of `parent` strictly after `after` in the subset's order.
///
/// For keys `k1..kn` this is `k1 > v1 OR (k1 = v1 AND k2 > v2) OR …`, with `<` for descending
/// keys; the last key is `_id`, so the order is total and no child is served twice.
pub(crate) fn after_filter(spec: &SubsetSpec, parent: &Bson, after: &[Bson]) -> Document {
    let mut branches = after_branches(spec, "", after);
    let mut filter = doc! { spec.key: parent.clone() };
    match branches.len() {
        0 => {}
        1 => {
            if let Some(Bson::Document(only)) = branches.pop() {
                filter.extend(only);
            }
        }
        _ => {
            // Implied by the `$or`, but it gives the planner a tight bound on the first sort
            // key, so one index scan starts at the cursor instead of at the parent's first child.
            if let (Some(first), Some(value)) = (spec.order().next(), after.first()) {
                let op = match first.direction {
                    Direction::Asc => "$gte",
                    Direction::Desc => "$lte",
                };
                filter.insert(first.field, doc! { op: value.clone() });
            }
            filter.insert("$or", branches);
        }
    }
    filter
}

/// The `$or` branches matching documents whose order fields, under `prefix` (`""` for a
/// child document, `"recent.0."` for the head of an embedded subset), sort strictly after
/// `after`: `k1 > v1`, `k1 = v1 AND k2 > v2`, …, with `<` for descending keys.
pub(crate) fn after_branches(spec: &SubsetSpec, prefix: &str, after: &[Bson]) -> Vec<Bson> {
    let mut branches = Vec::with_capacity(after.len());
    let mut equal = Document::new();
    for (key, value) in spec.order().zip(after) {
        let op = match key.direction {
            Direction::Asc => "$gt",
            Direction::Desc => "$lt",
        };
        let path = format!("{prefix}{}", key.field);
        let mut branch = equal.clone();
        branch.insert(path.clone(), doc! { op: value.clone() });
        branches.push(Bson::Document(branch));
        // `$eq`, not a bare value: a forged cursor value such as `{"$ne": null}` stays a value.
        equal.insert(path, doc! { "$eq": value.clone() });
    }
    branches
}

/// How two positions compare in the subset's order, computed here as the server would, for
/// the values whose order is plain (numbers of one kind, strings under the simple collation,
/// dates, ObjectIds, booleans); `None` for anything else, which the server must sort.
pub(crate) fn compare(spec: &SubsetSpec, a: &[Bson], b: &[Bson]) -> Option<Ordering> {
    for ((key, x), y) in spec.order().zip(a).zip(b) {
        let ordering = match (x, y) {
            (Bson::Int32(x), Bson::Int32(y)) => x.cmp(y),
            (Bson::Int64(x), Bson::Int64(y)) => x.cmp(y),
            (Bson::Int32(x), Bson::Int64(y)) => i64::from(*x).cmp(y),
            (Bson::Int64(x), Bson::Int32(y)) => x.cmp(&i64::from(*y)),
            (Bson::Double(x), Bson::Double(y)) if !x.is_nan() && !y.is_nan() => x.partial_cmp(y)?,
            (Bson::String(x), Bson::String(y)) => x.as_bytes().cmp(y.as_bytes()),
            (Bson::DateTime(x), Bson::DateTime(y)) => x.cmp(y),
            (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
            (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
            _ => return None,
        };
        let ordering = match key.direction {
            Direction::Asc => ordering,
            Direction::Desc => ordering.reverse(),
        };
        if ordering != Ordering::Equal {
            return Some(ordering);
        }
    }
    Some(Ordering::Equal)
}

/// The `$type` operand matching `value`'s comparison bracket: all numbers compare with each
/// other, so they are one bracket; `None` for `null`, which says nothing about the others.
pub(crate) fn type_bracket(value: &Bson) -> Option<Bson> {
    match value {
        Bson::Null | Bson::Undefined => None,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            Some(Bson::String("number".to_owned()))
        }
        other => Some(Bson::Int32(i32::from(other.element_type() as u8))),
    }
}

/// Children of `parent` whose sort values are of another type than `reference`'s (a position
/// of a well-formed child). MongoDB brackets `$lt`/`$gt` by type, so a keyset page never reaches
/// such a child: pagination looks for them once it has reached the end, so that they are
/// reported rather than silently skipped.
pub(crate) fn misfit_filter(spec: &SubsetSpec, parent: &Bson, reference: &[Bson]) -> Document {
    let branches: Vec<Bson> = spec
        .order()
        .zip(reference)
        .filter_map(|(key, value)| {
            let bracket = type_bracket(value)?;
            Some(Bson::Document(
                doc! { key.field: { "$not": { "$type": bracket } } },
            ))
        })
        .collect();
    doc! { spec.key: parent.clone(), "$or": branches }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::TEST_SPEC as SPEC;

    #[test]
    fn sort_and_index_documents() {
        assert_eq!(sort_doc(&SPEC), doc! { "rating": 1, "date": -1, "_id": -1 });
        assert_eq!(
            index_keys(&SPEC),
            doc! { "product_id": 1, "rating": 1, "date": -1, "_id": -1 }
        );
    }

    #[test]
    fn keyset_filter_is_lexicographic() {
        let f = after_filter(&SPEC, &Bson::Int32(7), &[3.into(), 10.into(), 99.into()]);
        assert_eq!(
            f,
            doc! {
                "product_id": 7,
                "rating": { "$gte": 3 },
                "$or": [
                    { "rating": { "$gt": 3 } },
                    { "rating": { "$eq": 3 }, "date": { "$lt": 10 } },
                    { "rating": { "$eq": 3 }, "date": { "$eq": 10 }, "_id": { "$lt": 99 } },
                ]
            }
        );
    }

    #[test]
    fn position_reads_missing_as_null() {
        let raw = bson::rawdoc! { "_id": 1, "rating": 4 };
        assert_eq!(
            position(&SPEC, &raw),
            vec![Bson::Int32(4), Bson::Null, Bson::Int32(1)]
        );
    }

    #[test]
    fn misfits_are_other_brackets_of_each_key() {
        let f = misfit_filter(&SPEC, &Bson::Int32(7), &[3.into(), Bson::Null, "x".into()]);
        assert_eq!(
            f,
            doc! {
                "product_id": 7,
                "$or": [
                    { "rating": { "$not": { "$type": "number" } } },
                    { "_id": { "$not": { "$type": 2 } } },
                ]
            }
        );
    }
}
