//! Whether a parent's array can be moved into a child collection: an array of documents, each
//! with every sort field and a usable, unique `_id` (or none, to be assigned).

use std::collections::HashMap;

use bson::spec::ElementType;
use bson::{RawBsonRef, RawDocument};
use subset_runtime::bson;
use subset_runtime::spec::SubsetSpec;

use subset_runtime::raw::bson_type_name as type_name;

/// How many element positions a problem names.
const NAMED: usize = 3;

/// A parent's array as found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Shape {
    /// Elements.
    pub len: u64,
    /// Elements without an `_id`.
    pub without_id: u64,
    /// Bytes of the array in the parent document.
    pub array_bytes: u64,
}

impl Shape {
    /// The array's bytes if only `keep` of its elements (of average size) stayed.
    pub fn kept_bytes(&self, keep: u32) -> u64 {
        kept_bytes(self.array_bytes, self.len, keep)
    }
}

/// An array of `len` elements in `array_bytes` bytes, cut to `keep` elements of average size.
pub fn kept_bytes(array_bytes: u64, len: u64, keep: u32) -> u64 {
    // 5 bytes are the array's header and terminator.
    let elements = array_bytes.saturating_sub(5);
    match elements.checked_div(len) {
        Some(each) => 5 + each * len.min(u64::from(keep)),
        None => array_bytes,
    }
}

/// The comparison bracket of a sort value, as the engine's keyset pages see it: MongoDB compares
/// `$lt`/`$gt` only within one type, and all numbers are one. A page walk follows the type of
/// the children it serves, so a child of another type is never reached (the engine reports it
/// as a `MalformedChild` at the end of the walk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bracket {
    /// Any int32, int64, double or decimal128.
    Number,
    /// Any other type, by itself.
    Type(ElementType),
}

impl Bracket {
    /// The bracket of `value`; `None` for null and undefined, which have no place in an order.
    pub fn of(value: RawBsonRef<'_>) -> Option<Bracket> {
        match value.element_type() {
            ElementType::Null | ElementType::Undefined => None,
            ElementType::Int32
            | ElementType::Int64
            | ElementType::Double
            | ElementType::Decimal128 => Some(Bracket::Number),
            other => Some(Bracket::Type(other)),
        }
    }

    /// The bracket with an article: "a number", "a date".
    pub fn name(self) -> &'static str {
        match self {
            Bracket::Number => "a number",
            Bracket::Type(t) => type_name(t),
        }
    }
}

/// How many values of one field fall in each bracket, to find the one most of them share.
#[derive(Debug, Default, Clone)]
pub struct Brackets {
    /// Each bracket seen, how many values, and the position of the first.
    seen: Vec<(Bracket, u64, u64)>,
}

impl Brackets {
    /// Counts the value at position `at`.
    pub fn add(&mut self, bracket: Bracket, at: u64) {
        match self.seen.iter_mut().find(|(b, ..)| *b == bracket) {
            Some((_, n, _)) => *n += 1,
            None => self.seen.push((bracket, 1, at)),
        }
    }

    /// The bracket most values share (on a tie, the one seen first) and how many share it;
    /// `None` when all values share one, or there are none: nothing differs.
    pub fn majority(&self) -> Option<(Bracket, u64)> {
        if self.seen.len() < 2 {
            return None;
        }
        self.most()
    }

    /// The bracket most values share (on a tie, the one seen first) and how many share it;
    /// `None` when there are no values.
    pub fn most(&self) -> Option<(Bracket, u64)> {
        self.seen
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|(b, n, _)| (*b, *n))
    }

    /// The brackets other than `usual`, in the order first seen.
    pub fn others(&self, usual: Bracket) -> impl Iterator<Item = Bracket> + '_ {
        self.seen
            .iter()
            .map(|(b, ..)| *b)
            .filter(move |b| *b != usual)
    }
}

/// What one element holds under one key of the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortValue {
    Missing,
    Null,
    /// An array, a document, a regular expression…: nothing a cursor can hold.
    Unsortable(ElementType),
    Sortable(Bracket),
}

impl SortValue {
    /// `value` under `key`; a missing `_id` is one `migrate` will assign, an ObjectId.
    pub fn of(key: &str, value: Option<RawBsonRef<'_>>) -> SortValue {
        let Some(value) = value else {
            return match key {
                "_id" => SortValue::Sortable(Bracket::Type(ElementType::ObjectId)),
                _ => SortValue::Missing,
            };
        };
        match Bracket::of(value) {
            None => SortValue::Null,
            // Any `_id` MongoDB accepts will do: it is the last key, and unique.
            Some(bracket) if key == "_id" => SortValue::Sortable(bracket),
            Some(Bracket::Type(
                t @ (ElementType::Array
                | ElementType::EmbeddedDocument
                | ElementType::RegularExpression
                | ElementType::JavaScriptCode
                | ElementType::JavaScriptCodeWithScope
                | ElementType::Symbol
                | ElementType::DbPointer
                | ElementType::MinKey
                | ElementType::MaxKey),
            )) => SortValue::Unsortable(t),
            Some(bracket) => SortValue::Sortable(bracket),
        }
    }
}

/// Reads `spec.field` of `parent` and says what is wrong with it, naming the path in MongoDB's
/// dotted notation.
pub fn check(parent: &RawDocument, spec: &SubsetSpec) -> Result<Shape, String> {
    let field = spec.field;
    let value = parent
        .get(field)
        .map_err(|e| format!("`{field}` cannot be read: {e}"))?;
    let Some(value) = value else {
        return Ok(Shape::default());
    };
    let RawBsonRef::Array(array) = value else {
        return Err(format!(
            "`{field}` is {}, not an array",
            type_name(value.element_type())
        ));
    };
    let mut shape = Shape {
        array_bytes: array.as_bytes().len() as u64,
        ..Shape::default()
    };
    let keys: Vec<&str> = spec.order().map(|k| k.field).collect();
    // Per key of the order, what each element holds.
    let mut values: Vec<Vec<SortValue>> = vec![Vec::new(); keys.len()];
    let mut seen: HashMap<String, u64> = HashMap::new();
    for (i, element) in array.into_iter().enumerate() {
        let i = i as u64;
        let element = element.map_err(|e| format!("`{field}.{i}` cannot be read: {e}"))?;
        let RawBsonRef::Document(child) = element else {
            return Err(format!(
                "`{field}.{i}` is {}, not a document",
                type_name(element.element_type())
            ));
        };
        shape.len += 1;
        for (key, values) in keys.iter().zip(&mut values) {
            let value = child
                .get(key)
                .map_err(|e| format!("`{field}.{i}.{key}` cannot be read: {e}"))?;
            values.push(SortValue::of(key, value));
        }
        match child.get("_id") {
            Ok(Some(id)) => {
                let kind = id.element_type();
                if matches!(
                    kind,
                    ElementType::Array | ElementType::RegularExpression | ElementType::Undefined
                ) {
                    return Err(format!(
                        "`{field}.{i}._id` is {}, which MongoDB does not accept as an `_id`",
                        type_name(kind)
                    ));
                }
                // Display conflates 1 and 1.0 and 1L, as the `_id` index does.
                let text =
                    bson::Bson::try_from(id).map_or_else(|_| format!("{id:?}"), |b| b.to_string());
                if let Some(first) = seen.insert(text.clone(), i) {
                    return Err(format!(
                        "`{field}.{i}._id` repeats `{field}.{first}._id` ({text}): each child needs its own `_id`"
                    ));
                }
            }
            Ok(None) => shape.without_id += 1,
            Err(e) => return Err(format!("`{field}.{i}._id` cannot be read: {e}")),
        }
    }
    for (key, values) in keys.iter().zip(&values) {
        order_problem(field, key, values)?;
    }
    Ok(shape)
}

/// What keeps the elements' values under `key` from having one place each in the order: some
/// missing or null, some that no cursor can hold ([`placeless`]), or some of another type than
/// most.
fn order_problem(field: &str, key: &str, values: &[SortValue]) -> Result<(), String> {
    placeless(field, key, values)?;
    let len = values.len();
    let mut brackets = Brackets::default();
    for (i, v) in values.iter().enumerate() {
        if let SortValue::Sortable(b) = v {
            brackets.add(*b, i as u64);
        }
    }
    let Some((most, n)) = brackets.majority() else {
        return Ok(());
    };
    let others: Vec<(usize, Option<&str>)> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match v {
            SortValue::Sortable(b) if *b != most => Some((i, Some(b.name()))),
            _ => None,
        })
        .collect();
    Err(format!(
        "sort field `{key}` is {} on {n} of {len} elements and of another type on {}, which pages in this order never reach: {}",
        most.name(),
        others.len(),
        named(field, &others)
    ))
}

/// The elements of the array `field` (its values under `key`, one per element, in order) that
/// have no place in an order by `key`: the first kind found of missing, null, or a value no
/// cursor can hold, with how many and the first few positions. `inspect` asks it of every
/// element field that holds a sortable value somewhere in an array; the dry run, of each key.
pub fn placeless(field: &str, key: &str, values: &[SortValue]) -> Result<(), String> {
    let len = values.len();
    let positions = |wanted: fn(&SortValue) -> bool| -> Vec<(usize, Option<&str>)> {
        let kind = |v: &SortValue| match v {
            SortValue::Unsortable(t) => Some(type_name(*t)),
            _ => None,
        };
        values
            .iter()
            .enumerate()
            .filter(|(_, v)| wanted(v))
            .map(|(i, v)| (i, kind(v)))
            .collect()
    };
    // Which values, what they are, and why that matters when it is not plain.
    type Kind = fn(&SortValue) -> bool;
    let absent: [(Kind, &str, &str); 3] = [
        (|v| *v == SortValue::Missing, "is missing", ""),
        (
            |v| *v == SortValue::Null,
            "is null",
            ", which gives them no place in the order",
        ),
        (
            |v| matches!(v, SortValue::Unsortable(_)),
            "holds no sortable value",
            "",
        ),
    ];
    for (wanted, what, why) in absent {
        let at = positions(wanted);
        if !at.is_empty() {
            return Err(format!(
                "sort field `{key}` {what} on {} of {len} elements{why}: {}",
                at.len(),
                named(field, &at)
            ));
        }
    }
    Ok(())
}

/// The positions `at` in the array `field`, each with the type found there if any: the first
/// [`NAMED`], then how many more.
fn named(field: &str, at: &[(usize, Option<&str>)]) -> String {
    let mut named: Vec<String> = at
        .iter()
        .take(NAMED)
        .map(|(i, kind)| match kind {
            Some(kind) => format!("`{field}.{i}` ({kind})"),
            None => format!("`{field}.{i}`"),
        })
        .collect();
    if at.len() > NAMED {
        named.push(format!("and {} more", at.len() - NAMED));
    }
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};
    use subset_runtime::spec::SpecBuilder;

    fn spec() -> &'static SubsetSpec {
        SpecBuilder::new("reviews", "reviews", "shop_id")
            .sort("date desc")
            .build()
            .unwrap()
    }

    fn shape(parent: bson::Document) -> Result<Shape, String> {
        let raw = RawDocumentBuf::try_from(&parent).unwrap();
        check(&raw, spec())
    }

    #[test]
    fn good_arrays_are_measured() {
        let id = bson::oid::ObjectId::new();
        let s = shape(doc! { "reviews": [{ "_id": id, "date": 1 }, { "date": 2 }] }).unwrap();
        assert_eq!((s.len, s.without_id), (2, 1));
        assert_eq!(shape(doc! {}).unwrap().len, 0);
    }

    #[test]
    fn problems_name_the_path() {
        let err = shape(doc! { "reviews": "many" }).unwrap_err();
        assert_eq!(err, "`reviews` is a string, not an array");
        let err = shape(doc! { "reviews": [{ "date": 1 }, 7] }).unwrap_err();
        assert_eq!(err, "`reviews.1` is an int32, not a document");
        let err = shape(doc! { "reviews": [{ "date": 1 }, { "x": 1 }] }).unwrap_err();
        assert_eq!(
            err,
            "sort field `date` is missing on 1 of 2 elements: `reviews.1`"
        );
        let err = shape(doc! { "reviews": [{ "_id": 1, "date": 1 }, { "_id": 1, "date": 2 }] })
            .unwrap_err();
        assert!(
            err.contains("`reviews.1._id` repeats `reviews.0._id`"),
            "{err}"
        );
    }

    #[test]
    fn sort_values_of_another_type_than_most_are_named() {
        let date = |n: i64| bson::DateTime::from_millis(n);
        let err = shape(doc! { "reviews": [
            { "date": date(1) }, { "date": "not a date" }, { "date": date(3) },
        ] })
        .unwrap_err();
        assert_eq!(
            err,
            "sort field `date` is a date on 2 of 3 elements and of another type on 1, which pages in this order never reach: `reviews.1` (a string)"
        );
        // All numbers compare with each other; a consistent other type is fine.
        assert!(
            shape(doc! { "reviews": [{ "date": 1 }, { "date": 2.5 }, { "date": 3_i64 }] }).is_ok()
        );
        assert!(shape(doc! { "reviews": [{ "date": "a" }, { "date": "b" }] }).is_ok());
        // On a tie, the type seen first is the rule.
        let err = shape(doc! { "reviews": [{ "date": true }, { "date": 1 }] }).unwrap_err();
        assert!(err.ends_with("`reviews.1` (a number)"), "{err}");
        let err = shape(doc! { "reviews": [{ "date": 1 }, { "date": null }] }).unwrap_err();
        assert!(
            err.starts_with("sort field `date` is null on 1 of 2 elements"),
            "{err}"
        );
        let err = shape(doc! { "reviews": [{ "date": [1, 2] }] }).unwrap_err();
        assert_eq!(
            err,
            "sort field `date` holds no sortable value on 1 of 1 elements: `reviews.0` (an array)"
        );
    }

    #[test]
    fn ids_to_assign_count_as_object_ids() {
        let id = bson::oid::ObjectId::new();
        assert!(shape(doc! { "reviews": [{ "_id": id, "date": 1 }, { "date": 2 }] }).is_ok());
        let err =
            shape(doc! { "reviews": [{ "_id": 7, "date": 1 }, { "date": 2 }, { "date": 3 }] })
                .unwrap_err();
        assert!(
            err.starts_with("sort field `_id` is an ObjectId on 2 of 3 elements"),
            "{err}"
        );
    }
}
