//! Which BSON values a sort key can hold, so that a cursor's position is checked against the
//! child's field types before any query is sent; and the names of BSON types in messages.
//!
//! The derive knows each sort key's Rust type and records [`SortValues`] for it in the
//! descriptor (through [`crate::spec::SortableField::VALUES`]); it also records the child's `_id` type
//! when that type is a [`crate::spec::SortableField`]. Descriptors built at run time by
//! [`crate::spec::SpecBuilder`] know no Rust types and accept any value a sort key can have.

use std::fmt;

use crate::bson::spec::{BinarySubtype, ElementType};
use crate::bson::Bson;

/// The BSON values one key of a subset's order can hold: what a cursor's position is checked
/// against before a page is queried.
///
/// MongoDB compares `$lt`/`$gt` only within a type bracket (all numbers form one), so a position
/// of another bracket than the children's would match none of them. The typed variants are also
/// narrower than a bracket where the Rust type is: a double is no position of an `i32` field,
/// whose children cannot hold one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SortValues {
    /// Any value a sort key can have: a number, string, boolean, date, ObjectId, timestamp or
    /// binary data. For descriptors built at run time, which know no Rust types.
    Scalar,
    /// Any value an `_id` can sort by: a scalar or a document. For a child `_id` whose Rust type
    /// is not a [`SortableField`](crate::spec::SortableField) (a compound key, a generic
    /// parameter).
    Id,
    /// An int32 or int64 from `min` to `max` (the integer types: serde reads either BSON type
    /// into any of them when the value fits).
    Integer {
        /// The smallest value the field holds.
        min: i64,
        /// The largest value the field holds.
        max: i64,
    },
    /// A double, int32 or int64 (`f32`, `f64`; NaN included).
    Float,
    /// A boolean.
    Bool,
    /// A string of one character (`char`).
    Char,
    /// A string.
    String,
    /// A date.
    DateTime,
    /// An ObjectId.
    ObjectId,
    /// A decimal128.
    Decimal128,
    /// A timestamp.
    Timestamp,
    /// A UUID: binary data of subtype 4, 16 bytes.
    Uuid,
}

impl SortValues {
    /// The values of a Rust integer type from `min` to `max`.
    pub const fn integer(min: i64, max: i64) -> SortValues {
        SortValues::Integer { min, max }
    }

    /// Whether `value` can be this key's value in a stored child.
    pub fn admits(&self, value: &Bson) -> bool {
        match (self, value) {
            (SortValues::Scalar, v) => is_scalar(v),
            (SortValues::Id, v) => is_scalar(v) || matches!(v, Bson::Document(_)),
            (SortValues::Integer { min, max }, Bson::Int32(n)) => {
                (*min..=*max).contains(&(*n).into())
            }
            (SortValues::Integer { min, max }, Bson::Int64(n)) => (*min..=*max).contains(n),
            (SortValues::Float, Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_)) => true,
            (SortValues::Bool, Bson::Boolean(_)) => true,
            (SortValues::Char, Bson::String(s)) => s.chars().count() == 1,
            (SortValues::String, Bson::String(_)) => true,
            (SortValues::DateTime, Bson::DateTime(_)) => true,
            (SortValues::ObjectId, Bson::ObjectId(_)) => true,
            (SortValues::Decimal128, Bson::Decimal128(_)) => true,
            (SortValues::Timestamp, Bson::Timestamp(_)) => true,
            (SortValues::Uuid, Bson::Binary(b)) => {
                b.subtype == BinarySubtype::Uuid && b.bytes.len() == 16
            }
            _ => false,
        }
    }

    /// The `$type` operand of the bracket every value of this key sorts in, or `None` when the
    /// descriptor does not say ([`SortValues::Scalar`], [`SortValues::Id`]).
    pub(crate) fn bracket(&self) -> Option<Bson> {
        let t = match self {
            SortValues::Scalar | SortValues::Id => return None,
            SortValues::Integer { .. } | SortValues::Float | SortValues::Decimal128 => {
                ElementType::Int32
            }
            SortValues::Bool => ElementType::Boolean,
            SortValues::Char | SortValues::String => ElementType::String,
            SortValues::DateTime => ElementType::DateTime,
            SortValues::ObjectId => ElementType::ObjectId,
            SortValues::Timestamp => ElementType::Timestamp,
            SortValues::Uuid => ElementType::Binary,
        };
        Some(element_bracket(t))
    }
}

impl SortValues {
    /// The word the registry stores this as ([`SortValues::parse`] reads it back): `"date"`,
    /// `"string"`, `"int:-2147483648:2147483647"`.
    pub fn name(&self) -> String {
        match self {
            SortValues::Integer { min, max } => format!("int:{min}:{max}"),
            other => NAMES
                .iter()
                .find(|(_, v)| v == other)
                .map_or("scalar", |(n, _)| n)
                .to_owned(),
        }
    }

    /// The values a word names, as [`SortValues::name`] writes it; also `"int"` and `"long"`
    /// (an int64), `"i32"`, `"double"` (as `"float"`). `None` for any other word.
    pub fn parse(word: &str) -> Option<SortValues> {
        if let Some(range) = word.strip_prefix("int:") {
            let (min, max) = range.split_once(':')?;
            let (min, max) = (min.parse().ok()?, max.parse().ok()?);
            return (min <= max).then_some(SortValues::Integer { min, max });
        }
        match word {
            "int" | "long" => Some(SortValues::integer(i64::MIN, i64::MAX)),
            "double" => Some(SortValues::Float),
            "i32" => Some(SortValues::integer(i32::MIN.into(), i32::MAX.into())),
            _ => NAMES.iter().find(|(n, _)| *n == word).map(|(_, v)| *v),
        }
    }
}

/// The words of [`SortValues::name`] for the variants without parameters.
const NAMES: &[(&str, SortValues)] = &[
    ("scalar", SortValues::Scalar),
    ("id", SortValues::Id),
    ("float", SortValues::Float),
    ("bool", SortValues::Bool),
    ("char", SortValues::Char),
    ("string", SortValues::String),
    ("date", SortValues::DateTime),
    ("objectId", SortValues::ObjectId),
    ("decimal", SortValues::Decimal128),
    ("timestamp", SortValues::Timestamp),
    ("uuid", SortValues::Uuid),
];

impl fmt::Display for SortValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SortValues::Scalar => {
                f.write_str("a number, string, boolean, date, ObjectId, timestamp or binary data")
            }
            SortValues::Id => f.write_str(
                "a number, string, boolean, date, ObjectId, timestamp, binary data or document",
            ),
            SortValues::Integer { min, max } => {
                write!(f, "an int32 or int64 from {min} to {max}")
            }
            SortValues::Float => f.write_str("a number (a double, int32 or int64)"),
            SortValues::Bool => f.write_str("a boolean"),
            SortValues::Char => f.write_str("a string of one character"),
            SortValues::String => f.write_str("a string"),
            SortValues::DateTime => f.write_str("a date"),
            SortValues::ObjectId => f.write_str("an ObjectId"),
            SortValues::Decimal128 => f.write_str("a decimal128"),
            SortValues::Timestamp => f.write_str("a timestamp"),
            SortValues::Uuid => f.write_str("a UUID (binary data of subtype 4)"),
        }
    }
}

/// The BSON types a sort key can hold at all: those of the
/// [`SortableField`](crate::spec::SortableField) types. Null, undefined, MinKey/MaxKey, regular
/// expressions, JavaScript, DBPointer, symbols, arrays and documents are not among them.
pub(crate) fn is_scalar(v: &Bson) -> bool {
    matches!(
        v,
        Bson::Double(_)
            | Bson::String(_)
            | Bson::Boolean(_)
            | Bson::Int32(_)
            | Bson::Int64(_)
            | Bson::DateTime(_)
            | Bson::ObjectId(_)
            | Bson::Decimal128(_)
            | Bson::Timestamp(_)
            | Bson::Binary(_)
    )
}

/// The `$type` operand matching a BSON type's comparison bracket: all numbers compare with each
/// other, so they are one bracket (`"number"`).
pub(crate) fn element_bracket(t: ElementType) -> Bson {
    match t {
        ElementType::Int32 | ElementType::Int64 | ElementType::Double | ElementType::Decimal128 => {
            Bson::String("number".to_owned())
        }
        other => Bson::Int32(i32::from(other as u8)),
    }
}

/// Whether a value of type `t` is a number, which `$inc` applies to (and a count or sum holds).
pub(crate) fn is_number(t: ElementType) -> bool {
    matches!(
        t,
        ElementType::Int32 | ElementType::Int64 | ElementType::Double | ElementType::Decimal128
    )
}

/// A readable name for a BSON type, for messages: "a date", "an ObjectId", "an int32".
pub fn type_name(t: crate::bson::spec::ElementType) -> &'static str {
    use crate::bson::spec::ElementType as T;
    match t {
        T::Double => "a double",
        T::String => "a string",
        T::EmbeddedDocument => "a document",
        T::Array => "an array",
        T::Binary => "binary data",
        T::Undefined => "undefined",
        T::ObjectId => "an ObjectId",
        T::Boolean => "a boolean",
        T::DateTime => "a date",
        T::Null => "null",
        T::RegularExpression => "a regular expression",
        T::DbPointer => "a DBPointer",
        T::JavaScriptCode | T::JavaScriptCodeWithScope => "JavaScript code",
        T::Symbol => "a symbol",
        T::Int32 => "an int32",
        T::Timestamp => "a timestamp",
        T::Int64 => "an int64",
        T::Decimal128 => "a decimal128",
        T::MaxKey => "MaxKey",
        T::MinKey => "MinKey",
    }
}

/// `value`'s type for messages: `an int32`, `a double (NaN)`.
pub(crate) fn describe(value: &Bson) -> String {
    let name = type_name(value.element_type());
    match value {
        Bson::Double(d) if d.is_nan() => format!("{name} (NaN)"),
        _ => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bson::oid::ObjectId;
    use crate::bson::{doc, Binary, DateTime, Decimal128, Timestamp};
    use crate::spec::SortableField;

    #[test]
    fn every_kind_of_values_reads_back_from_its_name() {
        let all = NAMES
            .iter()
            .map(|(_, v)| *v)
            .chain([SortValues::integer(-3, 7), SortValues::integer(0, 0)]);
        for values in all {
            assert_eq!(
                SortValues::parse(&values.name()),
                Some(values),
                "{values:?}"
            );
        }
        assert_eq!(
            SortValues::parse("i32"),
            Some(SortValues::integer(i32::MIN.into(), i32::MAX.into()))
        );
        for bad in ["", "Date", "int:3", "int:5:1", "int:a:b"] {
            assert_eq!(SortValues::parse(bad), None, "{bad}");
        }
    }

    /// One value of each kind a forged cursor may carry.
    fn samples() -> Vec<Bson> {
        vec![
            Bson::Int32(7),
            Bson::Int64(1 << 40),
            Bson::Double(1.5),
            Bson::Double(f64::NAN),
            Bson::String("x".into()),
            Bson::String("xy".into()),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(5)),
            Bson::ObjectId(ObjectId::new()),
            Bson::Decimal128(Decimal128::from_bytes([0; 16])),
            Bson::Timestamp(Timestamp {
                time: 1,
                increment: 1,
            }),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Uuid,
                bytes: vec![0; 16],
            }),
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes: vec![1],
            }),
            Bson::Null,
            Bson::Undefined,
            Bson::MinKey,
            Bson::MaxKey,
            Bson::Document(doc! { "a": 1 }),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::RegularExpression(crate::bson_compat::regex("a", "").expect("no NUL byte")),
            Bson::JavaScriptCode("1".into()),
            Bson::Symbol("s".into()),
        ]
    }

    /// The indexes in [`samples`] that `values` admits.
    fn admitted(values: SortValues) -> Vec<usize> {
        samples()
            .iter()
            .enumerate()
            .filter(|(_, v)| values.admits(v))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn each_rust_type_admits_only_what_it_can_hold() {
        assert_eq!(admitted(<i32 as SortableField>::VALUES), [0]);
        assert_eq!(admitted(<i64 as SortableField>::VALUES), [0, 1]);
        assert_eq!(admitted(<u8 as SortableField>::VALUES), [0]);
        assert_eq!(admitted(<f64 as SortableField>::VALUES), [0, 1, 2, 3]);
        assert_eq!(admitted(<String as SortableField>::VALUES), [4, 5]);
        assert_eq!(admitted(<char as SortableField>::VALUES), [4]);
        assert_eq!(admitted(<bool as SortableField>::VALUES), [6]);
        assert_eq!(admitted(<DateTime as SortableField>::VALUES), [7]);
        assert_eq!(admitted(<ObjectId as SortableField>::VALUES), [8]);
        assert_eq!(admitted(<Decimal128 as SortableField>::VALUES), [9]);
        assert_eq!(admitted(<Timestamp as SortableField>::VALUES), [10]);
        assert_eq!(admitted(<crate::bson::Uuid as SortableField>::VALUES), [11]);
    }

    #[test]
    fn integer_ranges_follow_the_rust_type() {
        let u8s = <u8 as SortableField>::VALUES;
        assert!(u8s.admits(&Bson::Int64(255)));
        assert!(!u8s.admits(&Bson::Int32(256)));
        assert!(!u8s.admits(&Bson::Int32(-1)));
        assert!(<u64 as SortableField>::VALUES.admits(&Bson::Int64(i64::MAX)));
        assert!(!<u64 as SortableField>::VALUES.admits(&Bson::Int64(-1)));
        assert!(<i8 as SortableField>::VALUES.admits(&Bson::Int32(-128)));
    }

    #[test]
    fn untyped_keys_admit_every_scalar_and_ids_also_documents() {
        let scalars: Vec<usize> = (0..=12).collect();
        assert_eq!(admitted(SortValues::Scalar), scalars);
        let mut ids = scalars;
        ids.push(17);
        assert_eq!(admitted(SortValues::Id), ids);
    }

    #[test]
    fn nothing_admits_values_no_key_can_sort_by() {
        // null, undefined, MinKey, MaxKey, array, regex, JavaScript, symbol
        for i in [13, 14, 15, 16, 18, 19, 20, 21] {
            for values in [
                SortValues::Scalar,
                SortValues::Id,
                <f64 as SortableField>::VALUES,
                <String as SortableField>::VALUES,
            ] {
                assert!(
                    !values.admits(&samples()[i]),
                    "{values:?} {:?}",
                    samples()[i]
                );
            }
        }
    }

    #[test]
    fn brackets_group_numbers_and_untyped_keys_have_none() {
        let number = Some(Bson::String("number".into()));
        assert_eq!(<i32 as SortableField>::VALUES.bracket(), number);
        assert_eq!(<f32 as SortableField>::VALUES.bracket(), number);
        assert_eq!(<Decimal128 as SortableField>::VALUES.bracket(), number);
        assert_eq!(SortValues::DateTime.bracket(), Some(Bson::Int32(9)));
        assert_eq!(SortValues::Scalar.bracket(), None);
        assert_eq!(SortValues::Id.bracket(), None);
    }

    #[test]
    fn messages_name_the_type() {
        assert_eq!(describe(&Bson::Double(f64::NAN)), "a double (NaN)");
        assert_eq!(describe(&Bson::Int32(1)), "an int32");
        assert_eq!(
            <u8 as SortableField>::VALUES.to_string(),
            "an int32 or int64 from 0 to 255"
        );
    }
}
