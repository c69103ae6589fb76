//! Running sums: parent fields kept equal to the sum of a child field over every child, moved by
//! `$inc` in the same update as the count and recomputed, with the count, by a resync.

use super::decimal::Dec;
use crate::bson::{Bson, Document};
use crate::error::{Error, Result};
use crate::model::{NumberType, SubsetSpec, SumSpec};

/// A summed value: integers add exactly, decimals add exactly as IEEE 754-2008 decimal128 (what
/// the server's `$inc` and `$sum` do with a `Decimal128`), anything with a float in it adds as a
/// float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
    Dec(Dec),
}

impl Num {
    /// The number a stored value holds, if it is an int32, int64, double or finite decimal.
    pub(crate) fn of(value: &Bson) -> Option<Num> {
        match value {
            Bson::Int32(n) => Some(Num::Int(i64::from(*n))),
            Bson::Int64(n) => Some(Num::Int(*n)),
            Bson::Double(f) => Some(Num::Float(*f)),
            Bson::Decimal128(d) => Dec::of(*d).map(Num::Dec),
            _ => None,
        }
    }

    pub(crate) fn add(self, other: Num) -> Num {
        match (self, other) {
            // An integer sum past `i64` is exact as a decimal: a float field takes it as a
            // float, and an integer field refuses it, naming it (see `numbers.rs`).
            (Num::Int(a), Num::Int(b)) => a.checked_add(b).map_or_else(
                || Num::Dec(Dec::from_i64(a)).add(Num::Dec(Dec::from_i64(b))),
                Num::Int,
            ),
            // An integer is a decimal exactly, as the server's `$inc` promotes it.
            (Num::Dec(a), Num::Int(b)) | (Num::Int(b), Num::Dec(a)) => {
                Num::Dec(a).add(Num::Dec(Dec::from_i64(b)))
            }
            // Past the largest `Decimal128`, as past `i64`.
            (Num::Dec(a), Num::Dec(b)) => a
                .add(b)
                .map_or(Num::Float(a.to_f64() + b.to_f64()), Num::Dec),
            (a, b) => Num::Float(a.as_f64() + b.as_f64()),
        }
    }

    fn neg(self) -> Num {
        match self {
            Num::Int(n) => n
                .checked_neg()
                .map_or_else(|| Num::Dec(Dec::from_i64(n).neg()), Num::Int),
            Num::Float(f) => Num::Float(-f),
            Num::Dec(d) => Num::Dec(d.neg()),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(f) => f,
            Num::Dec(d) => d.to_f64(),
        }
    }

    fn is_zero(self) -> bool {
        match self {
            Num::Dec(d) => d.is_zero(),
            n => n.as_f64() == 0.0,
        }
    }

    /// Whether two sums are the same number (an int32 and an int64 of one value are, and so
    /// are the decimals `1.0` and `1.00`, and a decimal and an integer of one value).
    pub(crate) fn same(self, other: Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Dec(a), Num::Dec(b)) => a.same(b),
            (Num::Dec(a), Num::Int(b)) | (Num::Int(b), Num::Dec(a)) => a.same(Dec::from_i64(b)),
            (a, b) => a.as_f64() == b.as_f64(),
        }
    }

    pub(crate) fn into_bson(self) -> Bson {
        match self {
            Num::Int(n) => Bson::Int64(n),
            Num::Float(f) => Bson::Double(f),
            Num::Dec(d) => Bson::Decimal128(d.into_decimal128()),
        }
    }
}

/// A recomputed sum as the parent should hold it: in the type of the `stored` value where that
/// is exact, so that an integer total (the `$sum` of no children is `0`) of a field that holds
/// a `Decimal128` stays a `Decimal128`, which the parent's type reads.
pub(crate) fn like_stored(computed: Bson, stored: Option<&Bson>) -> Bson {
    match (Num::of(&computed), stored) {
        (Some(Num::Int(n)), Some(Bson::Decimal128(_))) => Num::Dec(Dec::from_i64(n)).into_bson(),
        _ => computed,
    }
}

/// The sum of no children as `sum`'s field holds it: a decimal zero for a `Decimal128` field
/// (which an integer zero would not decode into), else an integer zero.
pub(crate) fn zero(sum: &SumSpec) -> Num {
    match sum.ty {
        NumberType::Decimal => Num::Dec(Dec::from_i64(0)),
        _ => Num::Int(0),
    }
}

/// Checks that a child about to be written holds a number in every field `spec` sums it by (none
/// when the field is a view whose filter the child does not pass).
///
/// # Errors
///
/// [`Error::MalformedChild`] naming the field.
pub(crate) fn check_child(spec: &SubsetSpec, child: &Document) -> Result<()> {
    if !spec.admits(child) {
        return Ok(());
    }
    for sum in spec.sums {
        let problem = match child.get(sum.child) {
            Some(value) if Num::of(value).is_some() => continue,
            Some(Bson::Decimal128(_)) => format!(
                "is an infinite or NaN decimal: the running sum `{}` adds only finite numbers",
                sum.parent
            ),
            Some(value) => format!(
                "is {}, not a number: the running sum `{}` adds it",
                crate::values::type_name(value.element_type()),
                sum.parent
            ),
            None => format!(
                "is missing: the running sum `{}` needs a number in every child",
                sum.parent
            ),
        };
        return Err(Error::MalformedChild {
            collection: spec.child_collection.to_owned(),
            id: Box::new(child.get("_id").cloned().unwrap_or(Bson::Null)),
            parent: child.get(spec.key).cloned().map(Box::new),
            field: sum.child.to_owned(),
            problem,
        });
    }
    Ok(())
}

/// The `$inc` of a write that adds `added` children and takes away `removed` ones: the count by
/// the difference, each sum by the added values minus the removed ones, over the children the
/// field admits (a filtered view counts only those that pass). A removed child whose
/// field is not a number (written around this crate) takes nothing away, as `$sum` ignores it.
/// Empty when nothing changes.
pub(crate) fn inc<'d>(
    spec: &SubsetSpec,
    added: &[&'d Document],
    removed: &[&'d Document],
) -> Document {
    let admitted = |docs: &[&'d Document]| -> Vec<&'d Document> {
        docs.iter().copied().filter(|d| spec.admits(d)).collect()
    };
    let (added, removed) = (admitted(added), admitted(removed));
    let mut inc = Document::new();
    let n = added.len() as i64 - removed.len() as i64;
    if let (Some(count), true) = (spec.count, n != 0) {
        inc.insert(count, n);
    }
    for sum in spec.sums {
        let value = |d: &&Document| d.get(sum.child).and_then(Num::of);
        let plus = added.iter().filter_map(value);
        let minus = removed.iter().filter_map(value).map(Num::neg);
        // One value goes to `$inc` as it is, for the server to add; several are added here.
        if let Some(total) = plus.chain(minus).reduce(Num::add) {
            if !total.is_zero() {
                inc.insert(sum.parent, total.into_bson());
            }
        }
    }
    inc
}

/// The sums of `children` (those the field admits), for a parent written with them all at once.
pub(crate) fn totals(spec: &SubsetSpec, children: &[Document]) -> Vec<(&'static str, Bson)> {
    spec.sums
        .iter()
        .map(|sum| {
            let total = children
                .iter()
                .filter(|d| spec.admits(d))
                .filter_map(|d| d.get(sum.child).and_then(Num::of))
                .reduce(Num::add)
                .unwrap_or_else(|| zero(sum));
            (sum.parent, total.into_bson())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::doc;
    use crate::model::{SumSpec, TEST_SPEC};

    const SPEC: SubsetSpec = SubsetSpec {
        count: Some("n"),
        sums: &[SumSpec {
            parent: "total",
            child: "v",
            ty: crate::model::NumberType::Unknown,
        }],
        ..TEST_SPEC
    };

    #[test]
    fn inc_adds_and_takes_away() {
        let (a, b) = (doc! { "v": 3 }, doc! { "v": 4_i64 });
        assert_eq!(
            inc(&SPEC, &[&a, &b], &[]),
            doc! { "n": 2_i64, "total": 7_i64 }
        );
        assert_eq!(
            inc(&SPEC, &[], &[&a]),
            doc! { "n": -1_i64, "total": -3_i64 }
        );
        // A replacement: the count stays, the sum moves by the difference.
        assert_eq!(inc(&SPEC, &[&b], &[&a]), doc! { "total": 1_i64 });
        assert_eq!(inc(&SPEC, &[&a], &[&a]), doc! {});
        let f = doc! { "v": 0.5 };
        assert_eq!(
            inc(&SPEC, &[&a, &f], &[]),
            doc! { "n": 2_i64, "total": 3.5 }
        );
    }

    #[test]
    fn decimals_add_exactly_and_one_value_goes_as_is() {
        let dec = |text: &str| Bson::Decimal128(text.parse().expect("a decimal"));
        let (a, b) = (doc! { "v": dec("0.10") }, doc! { "v": dec("2.5") });
        // One child: its own value, for the server's `$inc` to add.
        assert_eq!(
            inc(&SPEC, &[&a], &[]),
            doc! { "n": 1_i64, "total": dec("0.10") }
        );
        assert_eq!(
            inc(&SPEC, &[], &[&a]),
            doc! { "n": -1_i64, "total": dec("-0.10") }
        );
        // A replacement: the difference, exactly.
        assert_eq!(inc(&SPEC, &[&b], &[&a]), doc! { "total": dec("2.40") });
        assert_eq!(inc(&SPEC, &[&a], &[&a]), doc! {});
        let many: Vec<Document> = (0..1000).map(|_| a.clone()).collect();
        assert_eq!(totals(&SPEC, &many), vec![("total", dec("100.00"))]);
        let stored = dec("3.00");
        assert_eq!(like_stored(Bson::Int32(0), Some(&stored)), dec("0"));
        assert_eq!(like_stored(Bson::Int32(0), None), Bson::Int32(0));
        assert!(Num::of(&dec("100.00"))
            .zip(Num::of(&Bson::Int64(100)))
            .is_some_and(|(a, b)| a.same(b)));
        assert!(check_child(&SPEC, &doc! { "_id": 1, "v": dec("NaN") }).is_err());
    }

    #[test]
    fn check_child_names_the_field() {
        assert!(check_child(&SPEC, &doc! { "_id": 1, "v": 2.5 }).is_ok());
        let err = check_child(&SPEC, &doc! { "_id": 1, "v": "x" }).unwrap_err();
        assert!(
            err.to_string()
                .contains("field `v` is a string, not a number"),
            "{err}"
        );
        let err = check_child(&SPEC, &doc! { "_id": 1 }).unwrap_err();
        assert!(err.to_string().contains("field `v` is missing"), "{err}");
    }
}
