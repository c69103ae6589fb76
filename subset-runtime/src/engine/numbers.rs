//! Counts and sums within their Rust types: every parent update passes its `$inc` and `$set` of
//! a count or sum field through [`Bounds::of`], which refuses at once a value the field's type
//! cannot hold and turns each increment into a condition of the update, so that the server
//! applies it only to a value that stays in range: the server itself would widen an int32
//! past `i32::MAX` into an int64, and the parent would no longer decode. An increment toward a
//! bound that is `i64`'s own (any `i64` count or sum, a `u64` going up) carries no condition:
//! the server refuses an `$inc` past `i64` itself (code 2) and writes nothing, and the
//! condition would cost the server about 20 µs an update (mongod 6.0.5; `docs/bench/results.md`,
//! section 2's notes).
//!
//! When an update with such conditions matches nothing, or the server refuses it,
//! [`Bounds::broken`] reads the stored values and says which increment would have gone past
//! its type.

use crate::bson::{doc, Bson, Document, RawBsonRef, RawDocument};

use super::decimal::Dec;
use crate::error::Error;
use crate::model::{NumberType, ParentSpec};

/// A count or sum that a write would carry past its Rust type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overflow {
    field: String,
    ty: &'static str,
    arithmetic: String,
}

impl Overflow {
    /// The error of a write of `parent` in `collection` that would overflow.
    pub(crate) fn at(self, collection: &str, parent: &Bson) -> Error {
        Error::NumberOverflow {
            collection: collection.to_owned(),
            id: Box::new(parent.clone()),
            field: self.field,
            ty: self.ty.to_owned(),
            arithmetic: self.arithmetic,
        }
    }
}

/// The values an integer field's Rust type holds: a write that would leave them is refused,
/// since the server would store a value the field cannot read back (an int32 widened to an
/// int64 past `i32::MAX`, a negative number in a `u8`). Children's patched fields and parents'
/// counts and sums are both kept in theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) min: i64,
    pub(crate) max: i64,
    /// The Rust type, for messages.
    pub(crate) name: &'static str,
}

impl Range {
    pub(crate) fn holds(&self, n: i128) -> bool {
        (i128::from(self.min)..=i128::from(self.max)).contains(&n)
    }

    /// The condition on the field under which adding `by` stays in range: `None` when any
    /// value passes (`by` is 0, or not an integer). A document without the field gets `by`
    /// itself, so it passes when `by` is in range.
    pub(crate) fn guard(&self, by: &Bson) -> Option<Bson> {
        let by = integer(by)?;
        let (over, within, limit) = match by.cmp(&0) {
            std::cmp::Ordering::Greater => ("$gt", "$lte", i128::from(self.max) - by),
            std::cmp::Ordering::Less => ("$lt", "$gte", i128::from(self.min) - by),
            std::cmp::Ordering::Equal => return None,
        };
        // Past `i64` only for a range no stored integer reaches: a double compares the same.
        let limit = i64::try_from(limit).map_or(Bson::Double(limit as f64), Bson::Int64);
        Some(if self.holds(by) {
            Bson::Document(doc! { "$not": { over: limit } })
        } else {
            Bson::Document(doc! { within: limit })
        })
    }
}

/// An int32's or int64's value.
pub(crate) fn integer(value: &Bson) -> Option<i128> {
    match value {
        Bson::Int32(n) => Some(i128::from(*n)),
        Bson::Int64(n) => Some(i128::from(*n)),
        _ => None,
    }
}

/// One increment of a parent's count or sum, checked against its field's range.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    field: String,
    range: Range,
    by: Bson,
}

impl Step {
    /// Whether the server refuses this increment past the range itself: it moves toward a
    /// bound of `i64`'s own, past which an `$inc` fails (code 2) with nothing written.
    fn refused_by_the_server(&self) -> bool {
        match integer(&self.by).map(|by| by.cmp(&0)) {
            Some(std::cmp::Ordering::Greater) => self.range.max == i64::MAX,
            Some(std::cmp::Ordering::Less) => self.range.min == i64::MIN,
            _ => false,
        }
    }

    /// The overflow of this increment on the stored `value`, if it overflows.
    fn overflow(&self, value: Option<RawBsonRef<'_>>) -> Option<Overflow> {
        let stored: i128 = match value {
            None | Some(RawBsonRef::Null) => 0,
            Some(RawBsonRef::Int32(n)) => n.into(),
            Some(RawBsonRef::Int64(n)) => n.into(),
            // A float or decimal (written around this crate) is reported by the read, not here.
            Some(_) => return None,
        };
        let by = integer(&self.by)?;
        let result = stored + by;
        if self.range.holds(result) {
            return None;
        }
        let (bound, limit) = match result > i128::from(self.range.max) {
            true => ("more than", self.range.max),
            false => ("less than", self.range.min),
        };
        let sign = if by < 0 { '-' } else { '+' };
        Some(Overflow {
            field: self.field.clone(),
            ty: self.range.name,
            arithmetic: format!(
                "{stored} {sign} {} = {result}, {bound} {limit}",
                by.unsigned_abs()
            ),
        })
    }
}

/// The integer increments of one parent update, which the update is conditioned on.
#[derive(Debug, Default)]
pub(crate) struct Bounds {
    steps: Vec<Step>,
}

impl Bounds {
    /// Checks `update`'s counts and sums against their types in `spec`: a `$set` value out of
    /// range, or an increment that no stored value could take (a batch whose values add up past
    /// `i64`), is refused at once; a decimal increment of a float field becomes a float, as the
    /// field holds one. Returns the increments to condition the update on ([`Bounds::filter`]).
    pub(crate) fn of(spec: &ParentSpec, update: &mut Document) -> Result<Bounds, Overflow> {
        let mut steps = Vec::new();
        if let Ok(set) = update.get_document_mut("$set") {
            for (field, value) in set.iter_mut() {
                match (held(spec, field), &*value) {
                    (Some(NumberType::Integer { name, min, max }), value) => {
                        check_set(field, name, min, max, value)?
                    }
                    (Some(NumberType::Float), Bson::Decimal128(d)) => {
                        if let Some(d) = Dec::of(*d) {
                            *value = Bson::Double(d.to_f64());
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Ok(inc) = update.get_document_mut("$inc") {
            for (field, by) in inc.iter_mut() {
                match (held(spec, field), &*by) {
                    (Some(NumberType::Integer { name, min, max }), by) => {
                        if integer(by).is_none() {
                            return Err(Overflow {
                                field: field.clone(),
                                ty: name,
                                arithmetic: format!(
                                    "the values this write adds, {}, past every integer it holds",
                                    shown(by)
                                ),
                            });
                        }
                        let range = Range { min, max, name };
                        steps.push(Step {
                            field: field.clone(),
                            range,
                            by: by.clone(),
                        });
                    }
                    // A float field keeps any sum as a float: a total past `i64` (exact as a
                    // decimal) goes to it as one.
                    (Some(NumberType::Float), Bson::Decimal128(d)) => {
                        if let Some(d) = Dec::of(*d) {
                            *by = Bson::Double(d.to_f64());
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(Bounds { steps })
    }

    /// Adds the conditions to `filter`: each increment applies only to a value it keeps in range.
    pub(crate) fn filter(&self, filter: &mut Document) {
        if self.steps.is_empty() {
            return;
        }
        let mut all: Vec<Bson> = match filter.remove("$and") {
            Some(Bson::Array(all)) => all,
            Some(other) => vec![other],
            None => Vec::new(),
        };
        all.extend(self.steps.iter().filter_map(|s| {
            if s.refused_by_the_server() {
                return None;
            }
            let condition = s.range.guard(&s.by)?;
            Some(Bson::Document(doc! { s.field.clone(): condition }))
        }));
        if all.is_empty() {
            return;
        }
        filter.insert("$and", all);
    }

    /// The fields to read to tell whether the conditions held.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.field.as_str())
    }

    /// The first increment that `parent` as stored would carry out of range.
    pub(crate) fn broken(&self, parent: &RawDocument) -> Option<Overflow> {
        self.steps
            .iter()
            .find_map(|s| s.overflow(parent.get(&s.field).ok().flatten()))
    }
}

/// The type of `field` of a parent of `spec`, if it is a count or a sum.
fn held(spec: &ParentSpec, field: &str) -> Option<NumberType> {
    spec.subsets.iter().find_map(|view| {
        if view.count == Some(field) {
            return Some(view.count_type);
        }
        view.sums.iter().find(|s| s.parent == field).map(|s| s.ty)
    })
}

/// Refuses a value set into an integer field that it cannot hold (a recount whose `$sum`
/// went past the type, or past `i64` into a float).
fn check_set(
    field: &str,
    name: &'static str,
    min: i64,
    max: i64,
    value: &Bson,
) -> Result<(), Overflow> {
    let fits = match value {
        Bson::Int32(n) => (min..=max).contains(&i64::from(*n)),
        Bson::Int64(n) => (min..=max).contains(n),
        // Not a count or sum this crate computes: left to the read that meets it.
        Bson::Double(_) | Bson::Decimal128(_) => false,
        _ => true,
    };
    if fits {
        return Ok(());
    }
    Err(Overflow {
        field: field.to_owned(),
        ty: name,
        arithmetic: format!(
            "the total of its children, {}, outside {min} to {max}",
            shown(value)
        ),
    })
}

/// A number as the message shows it.
fn shown(value: &Bson) -> String {
    match value {
        Bson::Int32(n) => n.to_string(),
        Bson::Int64(n) => n.to_string(),
        Bson::Double(f) => format!("about {f:e}"),
        Bson::Decimal128(d) => d.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::RawDocumentBuf;
    use crate::model::{SubsetSpec, SumSpec, TEST_SPEC};

    const I32: NumberType = NumberType::integer("i32", i32::MIN as i64, i32::MAX as i64);
    const U32: NumberType = NumberType::integer("u32", 0, u32::MAX as i64);

    fn spec() -> ParentSpec {
        const VIEWS: &[SubsetSpec] = &[SubsetSpec {
            count: Some("n"),
            count_type: U32,
            sums: &[
                SumSpec {
                    parent: "total",
                    child: "v",
                    ty: I32,
                },
                SumSpec {
                    parent: "weight",
                    child: "w",
                    ty: NumberType::Float,
                },
            ],
            ..TEST_SPEC
        }];
        ParentSpec {
            collection: "parents",
            subsets: VIEWS,
        }
    }

    fn raw(d: Document) -> RawDocumentBuf {
        RawDocumentBuf::try_from(&d).expect("a document")
    }

    #[test]
    fn an_increment_holds_only_while_it_stays_in_range() {
        let mut update = doc! { "$inc": { "total": 100_i64, "n": -1_i64 } };
        let bounds = Bounds::of(&spec(), &mut update).expect("no value out of range yet");
        let mut filter = doc! { "_id": 1 };
        bounds.filter(&mut filter);
        let max = i64::from(i32::MAX) - 100;
        assert_eq!(
            filter,
            doc! { "_id": 1, "$and": [
                { "total": { "$not": { "$gt": max } } },
                // A missing count would become -1: it must be there, and at least 1.
                { "n": { "$gte": 1_i64 } },
            ] }
        );
        let near = raw(doc! { "total": i32::MAX - 10, "n": 3_i64 });
        let overflow = bounds.broken(&near).expect("past i32::MAX");
        assert_eq!(overflow.field, "total");
        assert_eq!(
            overflow.arithmetic,
            "2147483637 + 100 = 2147483737, more than 2147483647"
        );
        let empty = raw(doc! { "total": 5, "n": 0_i64 });
        let overflow = bounds.broken(&empty).expect("below 0");
        assert_eq!(
            (overflow.field.as_str(), overflow.ty),
            ("n", "u32"),
            "{overflow:?}"
        );
        assert_eq!(bounds.broken(&raw(doc! { "total": 1, "n": 1 })), None);
    }

    #[test]
    fn an_increment_toward_a_bound_of_i64_is_left_to_the_server() {
        const I64: NumberType = NumberType::integer("i64", i64::MIN, i64::MAX);
        const U64: NumberType = NumberType::integer("u64", 0, i64::MAX);
        const VIEWS: &[SubsetSpec] = &[SubsetSpec {
            count: Some("n"),
            count_type: U64,
            sums: &[SumSpec {
                parent: "total",
                child: "v",
                ty: I64,
            }],
            ..TEST_SPEC
        }];
        let spec = ParentSpec {
            collection: "parents",
            subsets: VIEWS,
        };
        let condition = |update: Document| {
            let mut update = update;
            let mut filter = doc! { "_id": 1 };
            Bounds::of(&spec, &mut update).unwrap().filter(&mut filter);
            filter
        };
        // A push: the server refuses an `$inc` past `i64::MAX` itself.
        assert_eq!(
            condition(doc! { "$inc": { "n": 1_i64, "total": 5_i64 } }),
            doc! { "_id": 1 }
        );
        assert_eq!(
            condition(doc! { "$inc": { "total": -5_i64 } }),
            doc! { "_id": 1 }
        );
        // A removal: below 0 is the `u64`'s own bound, which the server would take.
        assert_eq!(
            condition(doc! { "$inc": { "n": -1_i64 } }),
            doc! { "_id": 1, "$and": [{ "n": { "$gte": 1_i64 } }] }
        );
        // Whoever refuses it, the stored values say why.
        let mut update = doc! { "$inc": { "total": 5_i64 } };
        let bounds = Bounds::of(&spec, &mut update).unwrap();
        let near = raw(doc! { "total": i64::MAX - 1 });
        assert_eq!(bounds.broken(&near).map(|o| o.ty), Some("i64"));
    }

    #[test]
    fn what_no_stored_value_could_hold_is_refused_at_once() {
        let past = Bson::Decimal128("9223372036854775897".parse().expect("a decimal"));
        let mut update = doc! { "$inc": { "total": past.clone() } };
        let overflow = Bounds::of(&spec(), &mut update).unwrap_err();
        assert!(
            overflow.arithmetic.contains("9223372036854775897"),
            "{overflow:?}"
        );
        let mut recount = doc! { "$set": { "total": i64::from(i32::MAX) + 1 } };
        assert!(Bounds::of(&spec(), &mut recount).is_err());
        let mut fits = doc! { "$set": { "total": 7_i64, "other": 1.5 } };
        assert!(Bounds::of(&spec(), &mut fits).is_ok());
        // A float field takes the total as a float.
        let mut float = doc! { "$inc": { "weight": past } };
        let bounds = Bounds::of(&spec(), &mut float).expect("a float holds it");
        assert_eq!(bounds.fields().count(), 0);
        assert!(matches!(
            float.get_document("$inc").unwrap().get("weight"),
            Some(Bson::Double(_))
        ));
    }

    #[test]
    fn an_increment_out_of_range_alone_needs_a_stored_value() {
        let step = Step {
            field: "n".into(),
            range: Range {
                min: 0,
                max: u32::MAX.into(),
                name: "u32",
            },
            by: Bson::Int64(-5),
        };
        assert_eq!(
            step.range.guard(&step.by),
            Some(Bson::Document(doc! { "$gte": 5_i64 }))
        );
        assert!(step.overflow(None).is_some());
    }
}
