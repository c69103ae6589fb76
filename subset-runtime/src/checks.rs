//! What the derives check at compile time, and the types a field can have: the traits a sort
//! key, a count, a sum and a filter field must implement, and the hidden constant functions and
//! never-called checks that `#[derive(Parent)]` and `#[derive(Child)]` emit (through
//! `__private`), each failing the build with a message that names the field at fault.

use std::marker::PhantomData;

use crate::model::{Child, FieldName};
use crate::values::SortValues;

/// A child field found by Rust name: see [`child_field`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct ChildField {
    bson: &'static str,
    /// The serde key that keeps the field from being stored, if any.
    unstored: Option<&'static str>,
}

/// Looks up a child's Rust field; used by the derive in constant context, with
/// [`stored_bson_name`] around it.
///
/// An unknown name comes back unchanged: the derive separately checks that the field exists, with
/// a compiler error that points at the sort string. It also fails the build with `message` when
/// a child field is stored under the parent `key` (checked here rather than in a check of its
/// own so that a child type without `#[derive(Child)]` is reported once).
#[doc(hidden)]
pub const fn child_field<C: Child>(
    rust: &'static str,
    key: &str,
    message: &'static str,
) -> ChildField {
    field_in(C::FIELDS, C::__UNSTORED, rust, key, message)
}

/// [`child_field`] on a child's [`Child::FIELDS`] and [`Child::__UNSTORED`] as read through
/// [`Described`], so that a child type without `#[derive(Child)]` is reported once elsewhere.
#[doc(hidden)]
pub const fn field_in(
    fields: &'static [FieldName],
    unstored: &'static [(&'static str, &'static str)],
    rust: &'static str,
    key: &str,
    message: &'static str,
) -> ChildField {
    let mut found = ChildField {
        bson: rust,
        unstored: None,
    };
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].bson, key) {
            panic!("{}", message);
        }
        if str_eq(fields[i].rust, rust) {
            found.bson = fields[i].bson;
        }
        i += 1;
    }
    let mut i = 0;
    while i < unstored.len() {
        if str_eq(unstored[i].0, rust) {
            found.unstored = Some(unstored[i].1);
        }
        i += 1;
    }
    found
}

/// `Described::<C>::…`: what the derives read of a child type `C` and of its full type, or
/// nothing when `C` is not a [`Child`]. The same inherent-before-trait resolution as
/// `Probe`, so that a type without `#[derive(Child)]` is reported once, by
/// the one item that needs the trait, and not again by each lookup.
#[doc(hidden)]
pub struct Described<C: ?Sized>(PhantomData<fn() -> PhantomData<C>>);

impl<C: Child> Described<C> {
    /// [`Child::FIELDS`].
    pub const FIELDS: &'static [FieldName] = C::FIELDS;
    /// [`Child::__UNSTORED`].
    pub const UNSTORED: &'static [(&'static str, &'static str)] = C::__UNSTORED;
    /// [`Child::EMBED`].
    pub const EMBED: Option<&'static [FieldName]> = C::EMBED;
    /// [`Child::FIELDS`] of [`Child::Full`].
    pub const FULL_FIELDS: &'static [FieldName] = <C::Full as Child>::FIELDS;
    /// [`Child::__UNSTORED`] of [`Child::Full`].
    pub const FULL_UNSTORED: &'static [(&'static str, &'static str)] =
        <C::Full as Child>::__UNSTORED;
}

/// The fallback of [`Described`]: a type with no fields, embedded whole.
#[doc(hidden)]
pub trait DescribedFallback {
    /// No fields.
    const FIELDS: &'static [FieldName] = &[];
    /// No fields.
    const UNSTORED: &'static [(&'static str, &'static str)] = &[];
    /// Embedded whole.
    const EMBED: Option<&'static [FieldName]> = None;
    /// No fields.
    const FULL_FIELDS: &'static [FieldName] = &[];
    /// No fields.
    const FULL_UNSTORED: &'static [(&'static str, &'static str)] = &[];
}

impl<C: ?Sized> DescribedFallback for Described<C> {}

/// A subset's [`SubsetSpec::embed`]: the child's [`Child::EMBED`]; for a preview, fails the
/// build with `message` when its full type has a field stored under the parent `key` (the
/// preview's own fields are checked by the sort keys' [`field_in`]).
#[doc(hidden)]
pub const fn embed(
    embed: Option<&'static [FieldName]>,
    full: &'static [FieldName],
    key: &str,
    message: &'static str,
) -> Option<&'static [FieldName]> {
    if embed.is_some() {
        let mut i = 0;
        while i < full.len() {
            if str_eq(full[i].bson, key) {
                panic!("{}", message);
            }
            i += 1;
        }
    }
    embed
}

/// Check emitted by `#[derive(Child)]` for `preview_of = F`: fails the build with `message` when
/// `F` is itself a preview (`embed` is `F`'s [`Child::EMBED`]), else returns `rust`. It wraps a
/// value of the preview's `EMBED` list, whose items rustc evaluates in every build: a call on a
/// line of its own would be evaluated only where `EMBED` is used.
#[doc(hidden)]
pub const fn full_type(
    embed: Option<&'static [FieldName]>,
    message: &'static str,
    rust: &'static str,
) -> &'static str {
    if embed.is_some() {
        panic!("{}", message);
    }
    rust
}

/// The BSON name of a preview field, `bson`, checked against the full type's field of the same
/// Rust name (`full`, `full_unstored`: its [`Described`] lists): fails the build with `renamed`
/// when the full type stores it under another name, or `unstored` when it never stores it. A
/// name the full type lacks is left to the derive's type check, which reports it.
#[doc(hidden)]
pub const fn preview_bson_name(
    full: &'static [FieldName],
    full_unstored: &'static [(&'static str, &'static str)],
    rust: &'static str,
    bson: &'static str,
    renamed: &'static str,
    unstored: &'static str,
) -> &'static str {
    let mut i = 0;
    while i < full.len() {
        if str_eq(full[i].rust, rust) && !str_eq(full[i].bson, bson) {
            panic!("{}", renamed);
        }
        i += 1;
    }
    let mut i = 0;
    while i < full_unstored.len() {
        if str_eq(full_unstored[i].0, rust) {
            panic!("{}", unstored);
        }
        i += 1;
    }
    bson
}

/// A preview field's type is its full type's field's: the check `#[derive(Child)]` emits for
/// each field of a preview (`P` the preview field's type, `F` the full type's).
#[diagnostic::on_unimplemented(
    message = "a preview field must have the type of the full child's field of the same name: `{Self}` here, `{F}` in the full child",
    label = "declare this field as `{F}`",
    note = "a preview embeds the full child's values as they are stored, so each of its fields has the type the full child gives it"
)]
#[doc(hidden)]
pub trait PreviewField<F: ?Sized> {}

impl<T: ?Sized> PreviewField<T> for T {}

/// Compile-time check emitted by `#[derive(Child)]` for one preview field. The full type's field
/// comes first: with `P` not yet known, the one impl of `PreviewField` cannot turn a mismatch into
/// rustc's "mismatched types" before the bound is checked.
#[doc(hidden)]
pub fn assert_preview_field<F: ?Sized, P: PreviewField<F> + ?Sized>(_: &F, _: &P) {}

/// The BSON name of a sort key's field; fails the build with `skip` or `skip_serializing` (the
/// derive's messages, naming the field) when serde never stores it. Separate from
/// [`child_field`] so that the derive can place this call, and so the error, at the sort string.
#[doc(hidden)]
pub const fn stored_bson_name(
    field: ChildField,
    skip: &'static str,
    skip_serializing: &'static str,
) -> &'static str {
    match field.unstored {
        None => field.bson,
        Some(key) if str_eq(key, "skip") => panic!("{}", skip),
        Some(_) => panic!("{}", skip_serializing),
    }
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Types that can be a sort key: required scalars, so that every child has one value of one BSON
/// type and keyset comparisons (`$lt`, `$gt`, which MongoDB brackets by type) reach every child.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a subset sort key",
    label = "sort keys must be scalar fields",
    note = "sort by a required scalar child field (integer, float, string, bool, date, ObjectId); arrays and nested documents have no single sort value, and an `Option` would put nulls where keyset pagination cannot reach them"
)]
pub trait SortableField {
    /// The BSON values a field of this type holds once serialized (and reads back): a cursor
    /// position for this key must be one of them.
    const VALUES: SortValues;
}

/// Integer types that can hold a subset's child count.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold a subset count",
    label = "the `count` field must be an integer",
    note = "declare the count field as `i64` (or `i32`, `u32`, `u64`) and mark it `#[serde(default)]`"
)]
pub trait CountField {}

macro_rules! impl_sortable {
    ($($t:ty => $values:expr),* $(,)?) => {
        $(impl SortableField for $t { const VALUES: SortValues = $values; })*
    };
}

/// The values of an integer type: an int32 or int64 in its range (`u64` beyond `i64::MAX` has
/// no BSON form).
macro_rules! integer {
    ($t:ty) => {{
        let max = <$t>::MAX as u64;
        let max = if max > i64::MAX as u64 {
            i64::MAX
        } else {
            max as i64
        };
        SortValues::integer(<$t>::MIN as i64, max)
    }};
}

impl_sortable!(
    i8 => integer!(i8), i16 => integer!(i16), i32 => integer!(i32), i64 => integer!(i64),
    u8 => integer!(u8), u16 => integer!(u16), u32 => integer!(u32), u64 => integer!(u64),
    f32 => SortValues::Float, f64 => SortValues::Float,
    bool => SortValues::Bool, char => SortValues::Char, String => SortValues::String,
    crate::bson::DateTime => SortValues::DateTime, crate::bson::oid::ObjectId => SortValues::ObjectId,
    crate::bson::Decimal128 => SortValues::Decimal128, crate::bson::Timestamp => SortValues::Timestamp,
    crate::bson::Uuid => SortValues::Uuid,
);

macro_rules! impl_marker {
    ($trait:ident: $($t:ty),* $(,)?) => { $(impl $trait for $t {})* };
}

impl_marker!(CountField: i32, i64, u32, u64);

/// Types a parent field can have to hold the running sum of a child field of type `C`: an
/// integer for integer children (the sum stays exact), `f64` for any numeric child.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold this running sum",
    label = "a `sum` adds up a numeric child field into a numeric parent field",
    note = "sum a required numeric child field (an integer up to `i64`/`u32`, or `f32`/`f64`) into an `i64` (or `i32`, `u32`) parent field for integers, an `f64` one for floats; mark the parent field `#[serde(default)]`"
)]
pub trait SumField<C: ?Sized> {}

macro_rules! impl_sum {
    ($($parent:ty: $($child:ty),*;)*) => { $($(impl SumField<$child> for $parent {})*)* };
}

impl_sum!(
    i32: i8, i16, i32, u8, u16;
    i64: i8, i16, i32, i64, u8, u16, u32;
    u32: u8, u16, u32;
    f64: i8, i16, i32, i64, u8, u16, u32, f32, f64;
);

/// A child to name fields of in the derive's never-called check function, so that a `sum`'s
/// child field type is known directly from a field access.
#[doc(hidden)]
pub fn nothing<'a, T>() -> &'a T {
    unreachable!("only named in a check function that is never called")
}

/// Compile-time check emitted by the derive for one `sum`: a parent field that can hold the sum
/// of that child field.
#[doc(hidden)]
pub fn assert_sum<P: SumField<C> + ?Sized, C: ?Sized>(_: &P, _: &C) {}

/// Types a filtered view's child field can have: `bool`, which every child holds (a child whose
/// field is missing or null is in no filtered view, so an `Option` would hide it silently).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a view's filter",
    label = "a `filter` names a `bool` child field",
    note = "filter by a required `bool` child field: `filter = \"verified\"` keeps the children where it is true, `filter = \"!hidden\"` those where it is false"
)]
pub trait FilterField {}

impl FilterField for bool {}

/// Compile-time check emitted by the derive for a view's `filter`.
#[doc(hidden)]
pub fn assert_filter<T: FilterField + ?Sized>(_: &T) {}

/// Compile-time check emitted by the derive for the `count` field.
#[doc(hidden)]
pub fn assert_count<T: CountField + ?Sized>(_: &T) {}
