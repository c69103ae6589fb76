//! The total order of a subset and the queries derived from it: `$sort` documents, index keys
//! and keyset filters.

use std::cmp::Ordering;

use crate::bson::{doc, Bson, Document, RawDocument};

use crate::model::{Direction, SubsetSpec};
use crate::values;

/// The `$sort` / `sort` document: the user's keys, then `_id`.
pub(crate) fn sort_doc(spec: &SubsetSpec) -> Document {
    spec.order()
        .map(|k| (k.field.to_owned(), Bson::Int32(k.direction.as_i32())))
        .collect()
}

/// The projection of a child's position: the order's fields.
pub(crate) fn projection(spec: &SubsetSpec) -> Document {
    spec.order()
        .map(|k| (k.field.to_owned(), Bson::Int32(1)))
        .collect()
}

/// The child-collection index that turns every page into an index scan:
/// `{key: 1, <sort keys>, _id}`, with a filtered view's field after the key (an equality, so
/// the scan stays in order).
pub(crate) fn index_keys(spec: &SubsetSpec) -> Document {
    let mut keys = doc! { spec.key: 1 };
    if let Some(filter) = spec.filter {
        keys.insert(filter.field, 1);
    }
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

/// The `$sort` document of a backward page: [`sort_doc`] with every direction flipped, so that
/// the server walks the same `{key, <sort keys>, _id}` index from the other end.
pub(crate) fn reverse_sort_doc(spec: &SubsetSpec) -> Document {
    spec.order()
        .map(|k| (k.field.to_owned(), Bson::Int32(-k.direction.as_i32())))
        .collect()
}

/// Which side of a position a keyset filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Strictly after it in the subset's order (a forward page).
    After,
    /// Strictly before it in the subset's order (a backward page).
    Before,
}

/// Children of `parent` strictly on `side` of `position` in the subset's order.
///
/// After it, for keys `k1..kn`, this is `k1 > v1 OR (k1 = v1 AND k2 > v2) OR …`, with `<` for
/// descending keys; before it, every comparison flipped and the equalities kept. The last key
/// is `_id`, so the order is total and no child is served twice.
pub(crate) fn keyset_filter(
    spec: &SubsetSpec,
    parent: &Bson,
    position: &[Bson],
    side: Side,
) -> Document {
    let mut branches = branches(spec, "", position, side, Held::Equal);
    let mut filter = spec.children_of(parent);
    match branches.len() {
        0 => {}
        1 => {
            if let Some(Bson::Document(only)) = branches.pop() {
                filter.extend(only);
            }
        }
        _ => {
            // Implied by the `$or`, but it gives the planner a tight bound on the first sort
            // key, so one index scan starts at the cursor instead of at the parent's first
            // (or, backward, last) child.
            if let (Some(first), Some(value)) = (spec.order().next(), position.first()) {
                let op = match (first.direction, side) {
                    (Direction::Asc, Side::After) | (Direction::Desc, Side::Before) => "$gte",
                    (Direction::Desc, Side::After) | (Direction::Asc, Side::Before) => "$lte",
                };
                filter.insert(first.field, doc! { op: value.clone() });
            }
            filter.insert("$or", branches);
        }
    }
    filter
}

/// The `$or` branches matching documents whose order fields, under `prefix` (`"recent.0."` for
/// the head of an embedded subset), sort strictly after `after`: `k1 > v1`, `k1 ≥ v1 AND k2 >
/// v2`, …, with `<` and `≤` for descending keys. These match what equalities in place of the
/// `≥` would (a branch whose earlier key is strictly beyond holds an earlier branch too), but
/// the common case then holds on the first branch the server tries, a compound one: a
/// comparison of `field.0.key` that fails also looks for a field `0` in every element of the
/// array, a pass over a long subset on every push (0.14–0.22 ms at `keep = 1000`).
pub(crate) fn after_branches(spec: &SubsetSpec, prefix: &str, after: &[Bson]) -> Vec<Bson> {
    branches(spec, prefix, after, Side::After, Held::AtMost)
}

/// How the branches of a keyset filter hold the keys before each one's strict comparison.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// `$eq`: each branch is an index range of its own (a page of the child collection).
    Equal,
    /// Not strictly beyond the value (`$gte` for `$gt`): see [`after_branches`].
    AtMost,
}

/// [`after_branches`] for either `side` of `position`, holding the earlier keys as `held` says.
fn branches(
    spec: &SubsetSpec,
    prefix: &str,
    position: &[Bson],
    side: Side,
    held: Held,
) -> Vec<Bson> {
    let mut branches = Vec::with_capacity(position.len());
    let mut equal = Document::new();
    let mut keys = spec.order().zip(position).peekable();
    while let Some((key, value)) = keys.next() {
        // A key compares the other way when it descends, and again when the page reads back.
        let (op, or_equal) = match (key.direction, side) {
            (Direction::Asc, Side::After) | (Direction::Desc, Side::Before) => ("$gt", "$gte"),
            (Direction::Desc, Side::After) | (Direction::Asc, Side::Before) => ("$lt", "$lte"),
        };
        let path = format!("{prefix}{}", key.field);
        let comparison = doc! { op: value.clone() };
        if keys.peek().is_none() {
            // No key follows to need the equalities: the last branch takes them, uncopied.
            equal.insert(path, comparison);
            branches.push(Bson::Document(equal));
            break;
        }
        let mut branch = equal.clone();
        branch.insert(path.clone(), comparison);
        branches.push(Bson::Document(branch));
        // An operator, not a bare value: a forged cursor value such as `{"$ne": null}` stays a
        // value.
        let held = match held {
            Held::Equal => "$eq",
            Held::AtMost => or_equal,
        };
        equal.insert(path, doc! { held: value.clone() });
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
        other => Some(values::element_bracket(other.element_type())),
    }
}

/// The type bracket one key of the order must have, and how a message says so.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Expected {
    /// The `$type` operand of the bracket.
    pub(crate) bracket: Bson,
    /// The end of "is a string where …": `the child type holds a date`.
    pub(crate) what: String,
}

/// The bracket each key of the order must have: the Rust field type's for typed keys; for keys
/// the descriptor has no type for (run-time descriptors, an `_id` that is not a
/// `SortableField`), the bracket of `stored`, the position of a stored child, if given; a
/// missing or null value there says nothing. Never the cursor's: a forged cursor would make
/// every healthy child look malformed.
pub(crate) fn expected(spec: &SubsetSpec, stored: Option<&[Bson]>) -> Vec<Option<Expected>> {
    spec.order()
        .enumerate()
        .map(|(i, key)| match key.values.bracket() {
            Some(bracket) => Some(Expected {
                bracket,
                what: format!("the child type holds {}", key.values),
            }),
            None => {
                let value = stored?.get(i)?;
                Some(Expected {
                    bracket: type_bracket(value)?,
                    what: format!(
                        "the other children have {}",
                        values::type_name(value.element_type())
                    ),
                })
            }
        })
        .collect()
}

/// Children of `parent` with a sort value outside its key's `expected` bracket. MongoDB
/// brackets `$lt`/`$gt` by type, so a keyset page never reaches such a child: pagination looks
/// for them once it has reached the end, so that they are reported rather than silently skipped.
pub(crate) fn misfit_filter(
    spec: &SubsetSpec,
    parent: &Bson,
    expected: &[Option<Expected>],
) -> Document {
    let branches: Vec<Bson> = spec
        .order()
        .zip(expected)
        .filter_map(|(key, expected)| {
            let bracket = expected.as_ref()?.bracket.clone();
            Some(Bson::Document(
                doc! { key.field: { "$not": { "$type": bracket } } },
            ))
        })
        .collect();
    let mut filter = spec.children_of(parent);
    filter.insert("$or", branches);
    filter
}

/// The first key of `misfit` (a child found by [`misfit_filter`]) outside its `expected`
/// bracket, and the problem to report: `(field, "is a string where …")`.
pub(crate) fn misfit_problem(
    spec: &SubsetSpec,
    expected: &[Option<Expected>],
    misfit: &RawDocument,
) -> Option<(&'static str, String)> {
    spec.order()
        .zip(expected)
        .zip(position(spec, misfit))
        .find_map(|((key, expected), got)| {
            let expected = expected.as_ref()?;
            (type_bracket(&got).as_ref() != Some(&expected.bracket)).then(|| {
                let found = match misfit.get(key.field) {
                    Ok(Some(_)) => values::describe(&got),
                    _ => "missing".to_owned(),
                };
                let problem = format!(
                    "is {found} where {}, so it has no place in the subset's order",
                    expected.what
                );
                (key.field, problem)
            })
        })
}

/// Why `position`, read from a stored child, cannot be a cursor: the first key whose value is
/// missing or null (`$lt: null` matches nothing, so a walk could not continue from it), or one
/// the key's Rust type cannot hold (it sorts in another bracket than the other children).
pub(crate) fn unplaceable(spec: &SubsetSpec, position: &[Bson]) -> Option<(&'static str, String)> {
    spec.order().zip(position).find_map(|(key, value)| {
        if matches!(value, Bson::Null) {
            Some((
                key.field,
                "is missing or null, so it has no place in the subset's order".to_owned(),
            ))
        } else if !key.values.admits(value) {
            Some((
                key.field,
                format!(
                    "is {} where the child type holds {}, so it has no place in the subset's order",
                    values::describe(value),
                    key.values
                ),
            ))
        } else {
            None
        }
    })
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
        let f = keyset_filter(
            &SPEC,
            &Bson::Int32(7),
            &[3.into(), 10.into(), 99.into()],
            Side::After,
        );
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
    fn the_heads_guard_holds_earlier_keys_not_beyond() {
        let branches = after_branches(&SPEC, "top.0.", &[3.into(), 10.into(), 99.into()]);
        assert_eq!(
            branches,
            [
                doc! { "top.0.rating": { "$gt": 3 } },
                doc! { "top.0.rating": { "$gte": 3 }, "top.0.date": { "$lt": 10 } },
                doc! {
                    "top.0.rating": { "$gte": 3 },
                    "top.0.date": { "$lte": 10 },
                    "top.0._id": { "$lt": 99 },
                },
            ]
            .map(Bson::Document)
        );
    }

    #[test]
    fn the_backward_filter_flips_every_comparison_and_the_sort() {
        assert_eq!(
            reverse_sort_doc(&SPEC),
            doc! { "rating": -1, "date": 1, "_id": 1 }
        );
        let f = keyset_filter(
            &SPEC,
            &Bson::Int32(7),
            &[3.into(), 10.into(), 99.into()],
            Side::Before,
        );
        assert_eq!(
            f,
            doc! {
                "product_id": 7,
                "rating": { "$lte": 3 },
                "$or": [
                    { "rating": { "$lt": 3 } },
                    { "rating": { "$eq": 3 }, "date": { "$gt": 10 } },
                    { "rating": { "$eq": 3 }, "date": { "$eq": 10 }, "_id": { "$gt": 99 } },
                ]
            }
        );
    }

    #[test]
    fn position_reads_missing_as_null() {
        let raw = crate::bson::rawdoc! { "_id": 1, "rating": 4 };
        assert_eq!(
            position(&SPEC, &raw),
            vec![Bson::Int32(4), Bson::Null, Bson::Int32(1)]
        );
    }

    #[test]
    fn misfits_are_other_brackets_of_each_typed_key() {
        let expected = expected(&SPEC, None);
        let f = misfit_filter(&SPEC, &Bson::Int32(7), &expected);
        assert_eq!(
            f,
            doc! {
                "product_id": 7,
                "$or": [
                    { "rating": { "$not": { "$type": "number" } } },
                    { "date": { "$not": { "$type": 9 } } },
                    { "_id": { "$not": { "$type": 7 } } },
                ]
            }
        );
        let misfit = crate::bson::rawdoc! { "_id": crate::bson::oid::ObjectId::new(), "rating": 2, "date": "x" };
        let (field, problem) = misfit_problem(&SPEC, &expected, &misfit).unwrap();
        assert_eq!(field, "date");
        assert!(
            problem.starts_with("is a string where the child type holds a date"),
            "{problem}"
        );
        let missing = crate::bson::rawdoc! { "_id": crate::bson::oid::ObjectId::new(), "date": crate::bson::DateTime::MIN };
        let (field, problem) = misfit_problem(&SPEC, &expected, &missing).unwrap();
        assert_eq!((field, problem.starts_with("is missing")), ("rating", true));
    }

    #[test]
    fn untyped_keys_take_their_bracket_from_a_stored_child_only() {
        let untyped = crate::spec::SpecBuilder::new("recent", "reviews", "product_id")
            .sort("rating asc, date desc")
            .build()
            .unwrap();
        assert_eq!(expected(untyped, None), [None, None, None]);
        let stored = [3.into(), Bson::Null, "x".into()];
        let expected = expected(untyped, Some(&stored));
        let f = misfit_filter(untyped, &Bson::Int32(7), &expected);
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
        let misfit = crate::bson::rawdoc! { "_id": 5, "rating": 1 };
        let (field, problem) = misfit_problem(untyped, &expected, &misfit).unwrap();
        assert_eq!(field, "_id");
        assert!(
            problem.contains("is an int32 where the other children have a string"),
            "{problem}"
        );
    }

    #[test]
    fn a_stored_position_the_types_cannot_hold_is_unplaceable() {
        let id = Bson::ObjectId(crate::bson::oid::ObjectId::new());
        let date = Bson::DateTime(crate::bson::DateTime::from_millis(1));
        assert_eq!(
            unplaceable(&SPEC, &[3.into(), date.clone(), id.clone()]),
            None
        );
        let (field, problem) = unplaceable(&SPEC, &[3.into(), Bson::Null, id.clone()]).unwrap();
        assert_eq!(
            (field, problem.starts_with("is missing or null")),
            ("date", true)
        );
        let (field, problem) = unplaceable(&SPEC, &[3.into(), "x".into(), id]).unwrap();
        assert_eq!(field, "date");
        assert!(
            problem.starts_with("is a string where the child type holds a date"),
            "{problem}"
        );
        let (field, _) = unplaceable(&SPEC, &[3.into(), date, "x".into()]).unwrap();
        assert_eq!(field, "_id");
    }
}
