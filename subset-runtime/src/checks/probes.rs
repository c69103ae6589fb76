//! What the derives ask of a type that may not implement the trait they need (a child type
//! without `#[derive(Child)]`, an `_id` type that is no sort key), answered without a second
//! error: the mistake is reported once, by the one item that needs the trait. Path resolution
//! prefers an inherent associated item to a trait's, but skips an inherent impl whose bounds do
//! not hold; so each probe has an inherent impl bounded by the trait and a fallback trait the
//! generated code imports. Where a constant already says whether the type qualifies, a const
//! parameter picks the impl instead ([`FieldOf`], [`FullOf`]).

use std::marker::PhantomData;

use super::fields::HeldNumber;
use super::{FilterField, SortableField, SumField};
use crate::model::{Child, FieldName, NumberType};
use crate::values::SortValues;

/// `T` is the type of a child's `I`th field of [`Child::FIELDS`]: `#[derive(Child)]` implements it,
/// with `CHILD` true, for each, so that a parent reads a sort key's [`SortValues`] by the index
/// [`field_index`](super::field_index) finds (the helper [`sort_values_at`] infers `T` from the one
/// impl). The type is a parameter, not an associated type: an impl is then as visible as the
/// field's type, so a public child may have fields of private types.
///
/// With `CHILD` false (the name is no stored field, or the type is no [`Child`], each reported
/// elsewhere), every type has it, for [`NotAChild`]: nothing more is reported.
#[doc(hidden)]
pub trait FieldOf<T: ?Sized, const I: usize, const CHILD: bool> {
    /// The field's values: its type's [`SortableField::VALUES`](super::SortableField::VALUES) when
    /// the derive can tell (whether the field can be a sort key is checked on the field itself,
    /// where the parent names it).
    const SORT_VALUES: SortValues;
}

impl<C: ?Sized, const I: usize> FieldOf<NotAChild, I, false> for C {
    const SORT_VALUES: SortValues = SortValues::Scalar;
}

/// [`Child::Full`] where `CHILD` (`Described::<C>::IS_CHILD`) is true, the type itself where it
/// is false: the full type a parent reads a sum's and a filter's field from, named without
/// requiring `C: Child`, which is reported once elsewhere. `#[derive(Child)]` implements it.
#[doc(hidden)]
pub trait FullOf<const CHILD: bool> {
    /// The full child type.
    type Full: ?Sized;
}

impl<T: ?Sized> FullOf<false> for T {
    type Full = T;
}

/// What [`FieldOf`] gives for a name that is no stored field of a [`Child`]. It passes the
/// checks of a sort key, a sum and a filter ([`field_at`]): the name is reported once, in
/// constant evaluation.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct NotAChild;

#[diagnostic::do_not_recommend]
impl SortableField for NotAChild {
    const VALUES: SortValues = SortValues::Scalar;
}

#[diagnostic::do_not_recommend]
impl FilterField for NotAChild {}

#[diagnostic::do_not_recommend]
impl<P: ?Sized> SumField<NotAChild> for P {}

/// The `I`th field of `C` (its type `T` inferred from its one [`FieldOf`] impl; [`NotAChild`]
/// where `CHILD` is false), for the derive's never-called check function: the type checks of a
/// sort key, a sum and a filter, by the index [`field_index`](super::field_index) finds rather
/// than by the field's name, so that a name that is no field is reported once, with the field
/// most likely meant ([`field_problem`](super::field_problem)), and not as rustc's "no field".
#[doc(hidden)]
pub fn field_at<'a, C, T, const I: usize, const CHILD: bool>() -> &'a T
where
    C: FieldOf<T, I, CHILD> + ?Sized,
    T: ?Sized,
{
    super::nothing()
}

/// `Probe::<T>::VALUES`: `T`'s [`SortValues`] if `T` is a [`SortableField`], else
/// [`SortValues::Id`].
///
/// `#[derive(Child)]` uses it for the `_id` type, which may be any serializable type. Path
/// resolution prefers an inherent associated constant to a trait's, but skips an inherent impl
/// whose bounds do not hold; so, for a concrete type, this picks the inherent constant exactly
/// when `T: SortableField`, and [`IdFallback`]'s otherwise. (For a type that is still generic
/// where it is named, the bound cannot be proved and the fallback is taken: a safe default.)
#[doc(hidden)]
pub struct Probe<T: ?Sized>(PhantomData<fn() -> PhantomData<T>>);

impl<T: SortableField + ?Sized> Probe<T> {
    /// `T`'s values.
    pub const VALUES: SortValues = T::VALUES;
}

/// The fallback of [`Probe`]: any value an `_id` can sort by.
#[doc(hidden)]
pub trait IdFallback {
    /// [`SortValues::Id`].
    const VALUES: SortValues = SortValues::Id;
}

impl<T: ?Sized> IdFallback for Probe<T> {}

/// `ChildIds::<C>::VALUES`: `C`'s [`Child::ID_VALUES`], or [`SortValues::Id`] when `C` does not
/// implement [`Child`], which the derive reports once elsewhere (the same inherent-before-trait
/// resolution as [`Probe`], so that no second error names the same mistake).
#[doc(hidden)]
pub struct ChildIds<C: ?Sized>(PhantomData<fn() -> PhantomData<C>>);

impl<C: Child> ChildIds<C> {
    /// `C`'s `_id` values.
    pub const VALUES: SortValues = C::ID_VALUES;
}

impl<C: ?Sized> IdFallback for ChildIds<C> {}

/// `Numbers::<T>::TYPE`: the [`NumberType`] of a count or sum field of type `T`, or
/// [`NumberType::Unknown`] for a type that can be neither (reported once, by the field's
/// check) or that is still generic where it is named. The same inherent-before-trait
/// resolution as [`Probe`].
#[doc(hidden)]
pub struct Numbers<T: ?Sized>(PhantomData<fn() -> PhantomData<T>>);

impl<T: HeldNumber + ?Sized> Numbers<T> {
    /// `T`'s numbers.
    pub const TYPE: NumberType = T::TYPE;
}

/// The fallback of [`Numbers`].
#[doc(hidden)]
pub trait NumbersFallback {
    /// [`NumberType::Unknown`].
    const TYPE: NumberType = NumberType::Unknown;
}

impl<T: ?Sized> NumbersFallback for Numbers<T> {}

/// `Described::<C>::…`: what the derives read of a child type `C` and of its full type, or
/// nothing when `C` is not a [`Child`]. The same inherent-before-trait resolution as
/// `Probe`, so that a type without `#[derive(Child)]` is reported once, by
/// the one item that needs the trait, and not again by each lookup.
#[doc(hidden)]
pub struct Described<C: ?Sized>(PhantomData<fn() -> PhantomData<C>>);

impl<C: Child> Described<C> {
    /// Whether `C` implements [`Child`] by a derive that succeeded (not the stub impl it emits
    /// next to its errors, which lists no fields).
    pub const IS_CHILD: bool = !C::__STUB;
    /// Whether `C` and its full type are children as [`Described::IS_CHILD`] tells.
    pub const FULL_IS_CHILD: bool = !C::__STUB && !<C::Full as Child>::__STUB;
    /// [`Child::__NAME`].
    pub const NAME: &'static str = C::__NAME;
    /// [`Child::__ALTERED`].
    pub const ALTERED: &'static [(&'static str, &'static str)] = C::__ALTERED;
    /// [`Child::__NAME`] of [`Child::Full`].
    pub const FULL_NAME: &'static str = <C::Full as Child>::__NAME;
    /// [`Child::__ALTERED`] of [`Child::Full`].
    pub const FULL_ALTERED: &'static [(&'static str, &'static str)] = <C::Full as Child>::__ALTERED;
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
    /// Not a child.
    const IS_CHILD: bool = false;
    /// Not a child.
    const FULL_IS_CHILD: bool = false;
    /// No name.
    const NAME: &'static str = "";
    /// No fields.
    const ALTERED: &'static [(&'static str, &'static str)] = &[];
    /// No name.
    const FULL_NAME: &'static str = "";
    /// No fields.
    const FULL_ALTERED: &'static [(&'static str, &'static str)] = &[];
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

/// The [`SortValues`] of a sort key: the field of type `T` (inferred) at index `I` of `C`'s
/// [`Child::FIELDS`].
#[doc(hidden)]
pub const fn sort_values_at<C, T, const I: usize, const CHILD: bool>() -> SortValues
where
    C: FieldOf<T, I, CHILD> + ?Sized,
    T: ?Sized,
{
    <C as FieldOf<T, I, CHILD>>::SORT_VALUES
}

/// A type, as a value: what [`field_type`] returns, and the type of the constants
/// `#[derive(Child)]` gives each stored field, by which a generic parent finds the type of the
/// field under its key.
#[doc(hidden)]
pub struct TypeOf<T: ?Sized>(Marker<T>);

impl<T: ?Sized> TypeOf<T> {
    /// `T`.
    pub const NEW: Self = TypeOf(PhantomData);
}

/// The type `T` of the `I`th field of `C` (inferred from its one [`FieldOf`] impl; [`NotAChild`]
/// where `CHILD` is false): the derive checks that a field stored under the parent key can hold
/// the parent's `_id` by a trait of its own, whose message names the key, implemented for the
/// types it may have.
#[doc(hidden)]
pub const fn field_type<C, T, const I: usize, const CHILD: bool>() -> TypeOf<T>
where
    C: FieldOf<T, I, CHILD> + ?Sized,
    T: ?Sized,
{
    TypeOf(PhantomData)
}

/// A type in a probe's parameters, without owning one (and `Send`, `Sync` whatever it is).
type Marker<T> = PhantomData<fn() -> PhantomData<T>>;

/// `SameType::<A, B>::SAME`: whether `A` and `B` are one type. Path resolution prefers an
/// inherent associated constant to a trait's, but skips an inherent impl that does not apply
/// (here: whose two parameters are not one type), as `Described` does.
#[doc(hidden)]
pub struct SameType<A: ?Sized, B: ?Sized>(Marker<A>, Marker<B>);

impl<T: ?Sized> SameType<T, T> {
    /// One type.
    pub const SAME: bool = true;
}

/// The fallback of [`SameType`].
#[doc(hidden)]
pub trait SameTypeFallback {
    /// Two types.
    const SAME: bool = false;
}

impl<A: ?Sized, B: ?Sized> SameTypeFallback for SameType<A, B> {}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bson::oid::ObjectId;

    #[test]
    fn probes_pick_the_type_when_it_is_sortable() {
        struct Compound;
        assert_eq!(Probe::<ObjectId>::VALUES, SortValues::ObjectId);
        assert_eq!(Probe::<String>::VALUES, SortValues::String);
        assert_eq!(Probe::<Compound>::VALUES, SortValues::Id);
        assert_eq!(ChildIds::<Compound>::VALUES, SortValues::Id);
    }

    #[test]
    fn probes() {
        use crate::checks::SameTypeFallback as _;
        const {
            assert!(SameType::<String, String>::SAME && !SameType::<String, i64>::SAME);
        }
    }
}
