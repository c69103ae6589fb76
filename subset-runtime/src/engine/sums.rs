//! Running sums: parent fields kept equal to the sum of a child field over every child, moved by
//! `$inc` in the same update as the count and recomputed, with the count, by a resync.

use crate::bson::{Bson, Document};
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// A summed value: integers add exactly, anything with a float in it adds as a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    /// The number a stored value holds, if it is an int32, int64 or double.
    pub(crate) fn of(value: &Bson) -> Option<Num> {
        match value {
            Bson::Int32(n) => Some(Num::Int(i64::from(*n))),
            Bson::Int64(n) => Some(Num::Int(*n)),
            Bson::Double(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    pub(crate) fn add(self, other: Num) -> Num {
        match (self, other) {
            // An integer sum past `i64` has no exact form; a float keeps it readable.
            (Num::Int(a), Num::Int(b)) => a
                .checked_add(b)
                .map_or(Num::Float(a as f64 + b as f64), Num::Int),
            (a, b) => Num::Float(a.as_f64() + b.as_f64()),
        }
    }

    fn neg(self) -> Num {
        match self {
            Num::Int(n) => n.checked_neg().map_or(Num::Float(-(n as f64)), Num::Int),
            Num::Float(f) => Num::Float(-f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(f) => f,
        }
    }

    fn is_zero(self) -> bool {
        self.as_f64() == 0.0
    }

    /// Whether two sums are the same number (an int32 and an int64 of one value are).
    pub(crate) fn same(self, other: Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (a, b) => a.as_f64() == b.as_f64(),
        }
    }

    pub(crate) fn into_bson(self) -> Bson {
        match self {
            Num::Int(n) => Bson::Int64(n),
            Num::Float(f) => Bson::Double(f),
        }
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
            Some(value) => format!(
                "is {}, not a number: the running sum `{}` adds it",
                crate::decode::type_name(value.element_type()),
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
        let total = plus.chain(minus).fold(Num::Int(0), Num::add);
        if !total.is_zero() {
            inc.insert(sum.parent, total.into_bson());
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
                .fold(Num::Int(0), Num::add);
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
