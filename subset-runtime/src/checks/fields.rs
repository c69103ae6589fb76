//! The types a field may have in each role a parent gives it: the traits a sort key, a count, a
//! sum, a filter and a preview field must implement. The derives check a field against its
//! trait in code that never runs (`<_ as SortableField>::__check(&child.field)`), so that rustc
//! reports a wrong type at the attribute, with the trait's `on_unimplemented` message.

use crate::model::NumberType;
use crate::values::SortValues;

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

    /// The derive's check that a sort key's field has such a type, called as
    /// `<_ as SortableField>::__check(&child.field)` in code that never runs, so that rustc
    /// reports a type that is none at the sort string, with this trait's message.
    #[doc(hidden)]
    fn __check(&self) {}
}

/// Integer types that can hold a subset's child count.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold a subset count",
    label = "the `count` field must be an integer",
    note = "declare the count field as `i64` (or `i32`, `u32`, `u64`) and mark it `#[serde(default)]`"
)]
pub trait CountField {
    /// The derive's check of the `count` field: see [`SortableField::__check`].
    #[doc(hidden)]
    fn __check(&self) {}
}

/// The traits behind [`CountField`] and [`FilterField`]: each is implemented for the types
/// listed, and only for them. Through a blanket impl that rustc does not recommend, so that an
/// error names the trait's own message and not a list of impls.
mod sealed {
    pub trait Count {}
    pub trait Filter {}
}

#[diagnostic::do_not_recommend]
impl<T: sealed::Count + ?Sized> CountField for T {}

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
    ($trait:path: $($t:ty),* $(,)?) => { $(impl $trait for $t {})* };
}

impl_marker!(sealed::Count: i32, i64, u32, u64);

/// The types a count or a sum can be kept in, with the numbers each holds (see
/// [`NumberType`]): read by the derive through [`Numbers`](super::probes::Numbers).
pub trait HeldNumber {
    /// The numbers a field of this type holds.
    const TYPE: NumberType;
}

macro_rules! impl_held_integer {
    ($($t:ty),*) => {$(
        impl HeldNumber for $t {
            const TYPE: NumberType = match integer!($t) {
                SortValues::Integer { min, max } => NumberType::integer(stringify!($t), min, max),
                _ => NumberType::Unknown,
            };
        }
    )*};
}

impl_held_integer!(i32, i64, u32, u64);

impl HeldNumber for f64 {
    const TYPE: NumberType = NumberType::Float;
}

impl HeldNumber for crate::bson::Decimal128 {
    const TYPE: NumberType = NumberType::Decimal;
}

/// Types a parent field can have to hold the running sum of a child field of type `C`: an
/// integer for integer children (the sum stays exact), `f64` for any numeric child but a
/// decimal, and `Decimal128` for `Decimal128` children only (the sum stays exact, as the
/// server's `$inc` and `$sum` keep it; mixed with integers or floats it would not).
#[diagnostic::on_unimplemented(
    message = "a running sum of the child field's `{C}` cannot be kept in the parent field's `{Self}`",
    label = "a `sum` adds up a required numeric child field (not an `Option`: every child must hold a number there) into a numeric parent field",
    note = "sum a required numeric child field (an integer up to `i64`/`u32`, or `f32`/`f64`) into an `i64` (or `i32`, `u32`) parent field for integers, an `f64` one for floats, and a `bson::Decimal128` child field into a `bson::Decimal128` parent field; mark an integer or float parent field `#[serde(default)]`"
)]
pub trait SumField<C: ?Sized> {
    /// The derive's check of one `sum`, called as `<_ as SumField<_>>::__check(&child.field,
    /// &parent.total)`: see [`SortableField::__check`]. The child field comes first, so that
    /// rustc knows its type when it reports a parent field that cannot hold the sum.
    #[doc(hidden)]
    fn __check(_child: &C, _parent: &Self) {}
}

macro_rules! impl_sum {
    ($($parent:ty: $($child:ty),*;)*) => { $($(impl SumField<$child> for $parent {})*)* };
}

impl_sum!(
    i32: i8, i16, i32, u8, u16;
    i64: i8, i16, i32, i64, u8, u16, u32;
    u32: u8, u16, u32;
    f64: i8, i16, i32, i64, u8, u16, u32, f32, f64;
);

impl SumField<crate::bson::Decimal128> for crate::bson::Decimal128 {}

/// A value to name fields of in the derive's never-called check function.
#[doc(hidden)]
pub fn nothing<'a, T: ?Sized>() -> &'a T {
    unreachable!("only named in a check function that is never called")
}

/// Types a filtered view's child field can have: `bool`, which every child holds (a child whose
/// field is missing or null is in no filtered view, so an `Option` would hide it silently).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a view's filter",
    label = "a `filter` names a `bool` child field",
    note = "filter by a required `bool` child field: `filter = \"verified\"` keeps the children where it is true, `filter = \"!hidden\"` those where it is false"
)]
pub trait FilterField {
    /// The derive's check of a view's `filter`: see [`SortableField::__check`].
    #[doc(hidden)]
    fn __check(&self) {}
}

#[diagnostic::do_not_recommend]
impl<T: sealed::Filter + ?Sized> FilterField for T {}

impl sealed::Filter for bool {}

/// A preview field's type is its full type's field's: `#[derive(Child)]` checks it for each
/// field of a preview (`Self` the preview field's type, `F` the full type's). Implemented only
/// for `F` itself.
#[diagnostic::on_unimplemented(
    message = "a preview field must have the type of the full child's field of the same name: `{Self}` here, `{F}` in the full child",
    label = "declare this field as `{F}`",
    note = "a preview embeds the full child's values as they are stored, so each of its fields has the type the full child gives it"
)]
pub trait PreviewField<F: ?Sized> {}

impl<T: ?Sized> PreviewField<T> for T {}

/// The [`SortValues`] of a sort key of type `T`, given an accessor `|child| &child.field`.
///
/// The derive knows the child type and the field's name, not its type: the accessor lets the
/// compiler infer it. The bound is also the compile-time check that the field can be a sort key
/// (a missing field or a non-scalar type fails the build here, at the sort string).
#[doc(hidden)]
pub const fn sort_values<C, T: SortableField + ?Sized>(_: fn(&C) -> &T) -> SortValues {
    T::VALUES
}
