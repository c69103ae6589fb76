//! What `#[derive(Subset)]` and `#[derive(Child)]` describe: the parent and child traits and the
//! static descriptors of each subset field.

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::values::SortValues;

/// A parent document type: one collection, an `_id`, and one or more subset fields.
///
/// Implemented by `#[derive(Subset)]`; implementing it by hand is possible but the derive checks
/// at compile time what a hand-written impl would only find out at run time.
pub trait Parent: Serialize + DeserializeOwned + Send + Sync + Unpin + 'static {
    /// The type of the parent's `_id`.
    type Id: Serialize + Send + Sync + fmt::Debug;

    /// The parent collection.
    const COLLECTION: &'static str;

    /// One descriptor per subset field, in declaration order.
    const SUBSETS: &'static [SubsetSpec];

    /// The parent collection and its subset fields, as the engine takes them.
    const SPEC: ParentSpec = ParentSpec {
        collection: Self::COLLECTION,
        subsets: Self::SUBSETS,
    };

    /// The parent's `_id`.
    fn id(&self) -> &Self::Id;
}

/// A child document type: it lives in a child collection and, for the top `keep`, embedded in
/// its parent.
///
/// Implemented by `#[derive(Child)]`, which records the BSON name of every field so that sort keys
/// named by Rust field name follow `#[serde(rename)]` and `#[serde(rename_all)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is used as a subset child but does not implement `subset::Child`",
    label = "this child type needs `#[derive(subset::Child)]`",
    note = "add `#[derive(subset::Child)]` next to `Serialize` and `Deserialize` on `{Self}`"
)]
pub trait Child: Serialize + DeserializeOwned + Send + Sync + Unpin + 'static {
    /// The type of the child's `_id`.
    type Id: Serialize + Send + Sync + fmt::Debug;

    /// The type stored in the child collection: `Self` for a child, the full child type for a
    /// preview (`#[subset(preview_of = Review)]`), which embeds only some of its fields.
    type Full: Child;

    /// Every serialized field, as (Rust name, BSON name).
    const FIELDS: &'static [FieldName];

    /// For a preview, the fields its embedded copies keep ([`Child::FIELDS`]); `None` for a
    /// child, which is embedded whole. Becomes [`SubsetSpec::embed`].
    const EMBED: Option<&'static [FieldName]> = None;

    /// The values the `_id` can hold, which a cursor's `_id` is checked against.
    /// `#[derive(Child)]` sets it from [`Child::Id`] when that is a [`SortableField`]; the
    /// default admits anything an `_id` can sort by.
    const ID_VALUES: SortValues = SortValues::Id;
    /// Used by the derives: the fields serde never writes, as (Rust name, serde key: `skip` or
    /// `skip_serializing`), so that a parent naming one in `sort` fails to build.
    ///
    /// `#[serde(skip_deserializing)]` fields are not listed: they are stored, so MongoDB sorts by
    /// them, and the engine takes every sort value it needs (cursors, the last embedded child,
    /// reconciliation) from stored documents, never from decoded children; that such a field
    /// reads back as its default changes what the caller sees, not the order or the pages.
    #[doc(hidden)]
    const __UNSTORED: &'static [(&'static str, &'static str)] = &[];
}

/// A field's Rust name and the name it has in BSON after serde's renames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldName {
    /// The field's name in the Rust struct.
    pub rust: &'static str,
    /// The field's name in the stored document.
    pub bson: &'static str,
}

/// Sort direction of one sort key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Smallest first (`1`).
    Asc,
    /// Largest first (`-1`).
    Desc,
}

impl Direction {
    /// The number MongoDB uses for this direction in sort and index specifications.
    pub const fn as_i32(self) -> i32 {
        match self {
            Direction::Asc => 1,
            Direction::Desc => -1,
        }
    }
}

/// One key of a subset's sort order, by BSON field name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKey {
    /// BSON name of the child field.
    pub field: &'static str,
    /// Its direction.
    pub direction: Direction,
    /// The values the field can hold: the Rust field's type for the derive,
    /// [`SortValues::Scalar`] for descriptors built at run time.
    pub values: SortValues,
}

/// A parent collection and its subset fields: what [`crate::RawStore`] works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParentSpec {
    /// The parent collection.
    pub collection: &'static str,
    /// One descriptor per subset field.
    pub subsets: &'static [SubsetSpec],
}

impl ParentSpec {
    /// A descriptor made at run time (see [`crate::SpecBuilder`]): the strings are leaked, as a
    /// descriptor describes the program's configuration and lives as long as it does. Build one
    /// per configuration, not one per request.
    pub fn leak(collection: impl Into<String>, subsets: Vec<SubsetSpec>) -> Self {
        ParentSpec {
            collection: Box::leak(collection.into().into_boxed_str()),
            subsets: Box::leak(subsets.into_boxed_slice()),
        }
    }
}

/// Everything the runtime needs to know about one subset field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubsetSpec {
    /// BSON name of the embedded array in the parent document.
    pub field: &'static str,
    /// Rust name of the embedded array field, for messages.
    pub rust_field: &'static str,
    /// The child collection holding every child.
    pub child_collection: &'static str,
    /// BSON name of the field that holds the parent's `_id` in each child-collection document.
    pub key: &'static str,
    /// How many children stay embedded, 1 to [`MAX_KEEP`](crate::MAX_KEEP).
    pub keep: u32,
    /// The sort order as written by the user; `_id` is appended by [`SubsetSpec::order`].
    pub sort: &'static [SortKey],
    /// BSON name of the parent's integer field that counts the children, if any.
    pub count: Option<&'static str>,
    /// The parent's numeric fields kept equal to the sum of a child field over all the
    /// children (see [`SumSpec`]).
    pub sums: &'static [SumSpec],
    /// The values the children's `_id` can hold ([`Child::ID_VALUES`]), for the `_id` that
    /// [`SubsetSpec::order`] appends.
    pub id_values: SortValues,
    /// The fields an embedded copy keeps (by BSON name; `_id` always), when the field holds
    /// previews of the children rather than whole children (without the parent key). A preview
    /// holds every sort key, so the server can sort the embedded array.
    pub embed: Option<&'static [FieldName]>,
    /// For a filtered view, the `bool` child field a child must pass to be embedded, counted,
    /// summed and paged by this field; `None` for every child.
    pub filter: Option<FilterSpec>,
}

/// The filter of a filtered view: the children whose `field` holds `equals`.
///
/// Several subset fields may be views of one child collection and key (the latest five, the
/// three most helpful, the verified ones): a push through any of them updates every view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterSpec {
    /// BSON name of the child's `bool` field.
    pub field: &'static str,
    /// The value a child must hold there: `true` for `filter = "verified"`, `false` for
    /// `filter = "!hidden"`.
    pub equals: bool,
}

/// A running sum: a parent field kept equal to the sum of one child field over every child of
/// the subset, maintained with `$inc` in the same update as the count and recomputed by
/// `reconcile`.
///
/// Integer sums are exact. A float sum is kept by adding and subtracting each child's value, so
/// it can drift from the true sum by rounding; `reconcile` recomputes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumSpec {
    /// BSON name of the parent field holding the sum.
    pub parent: &'static str,
    /// BSON name of the child field summed; every child must hold a number there.
    pub child: &'static str,
}

impl SubsetSpec {
    /// The total order used everywhere: the user's keys, then `_id` in the direction of the last
    /// key (unless the user already sorts by `_id`), so that no two children compare equal.
    pub fn order(&self) -> impl Iterator<Item = SortKey> + Clone + '_ {
        let last = self.sort.last().map_or(Direction::Asc, |k| k.direction);
        let has_id = self.sort.iter().any(|k| k.field == "_id");
        let tie = (!has_id).then_some(SortKey {
            field: "_id",
            direction: last,
            values: self.id_values,
        });
        self.sort.iter().copied().chain(tie)
    }

    /// Whether `other` is a view of the same children: the same child collection and key.
    pub fn same_children(&self, other: &SubsetSpec) -> bool {
        self.child_collection == other.child_collection && self.key == other.key
    }

    /// The children of `parent` this field keeps: every child under the key, or, for a
    /// filtered view, those that pass its filter. The one filter every query of the field's
    /// children starts from.
    pub fn children_of(&self, parent: &crate::bson::Bson) -> crate::bson::Document {
        let mut filter = crate::bson::doc! { self.key: parent.clone() };
        if let Some(f) = self.filter {
            filter.insert(f.field, f.equals);
        }
        filter
    }

    /// Whether a child document passes this field's filter (every child does without one), as
    /// [`SubsetSpec::children_of`] selects it.
    pub fn admits(&self, child: &crate::bson::Document) -> bool {
        match self.filter {
            None => true,
            Some(f) => child.get(f.field) == Some(&crate::bson::Bson::Boolean(f.equals)),
        }
    }
}

/// A typed reference to one subset field of `P` whose children are `C`.
///
/// `#[derive(Subset)]` generates one as an associated constant per subset field, named after the
/// field in upper case (`Product::RECENT_REVIEWS`); pass it to [`crate::Store::subset`].
pub struct SubsetField<P, C> {
    index: usize,
    _types: PhantomData<fn() -> (P, C)>,
}

impl<P, C> SubsetField<P, C> {
    /// Used by the derive: the field at `index` in `P::SUBSETS`. Unbounded, so that a child
    /// type without `#[derive(Child)]` is reported once, where the descriptor needs it.
    #[doc(hidden)]
    pub const fn __new(index: usize) -> Self {
        SubsetField {
            index,
            _types: PhantomData,
        }
    }
}

impl<P: Parent, C> SubsetField<P, C> {
    /// The field's descriptor.
    pub fn spec(&self) -> &'static SubsetSpec {
        &P::SUBSETS[self.index]
    }
}

impl<P, C> Clone for SubsetField<P, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P, C> Copy for SubsetField<P, C> {}

impl<P, C> fmt::Debug for SubsetField<P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubsetField")
            .field("index", &self.index)
            .finish()
    }
}

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

/// A descriptor for unit tests: `rating asc, date desc`, keep 5, key `product_id`.
#[cfg(test)]
pub(crate) const TEST_SPEC: SubsetSpec = SubsetSpec {
    field: "recent",
    rust_field: "recent",
    child_collection: "reviews",
    key: "product_id",
    keep: 5,
    sort: &[
        SortKey {
            field: "rating",
            direction: Direction::Asc,
            values: SortValues::Integer {
                min: i32::MIN as i64,
                max: i32::MAX as i64,
            },
        },
        SortKey {
            field: "date",
            direction: Direction::Desc,
            values: SortValues::DateTime,
        },
    ],
    count: None,
    sums: &[],
    id_values: SortValues::ObjectId,
    embed: None,
    filter: None,
};

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::TEST_SPEC as SPEC;

    #[test]
    fn order_appends_id_in_last_direction() {
        let order: Vec<_> = SPEC.order().collect();
        assert_eq!(order.len(), 3);
        assert_eq!(
            order[2],
            SortKey {
                field: "_id",
                direction: Direction::Desc,
                values: SortValues::ObjectId,
            }
        );
    }

    #[test]
    fn order_keeps_explicit_id() {
        let spec = SubsetSpec {
            sort: &[SortKey {
                field: "_id",
                direction: Direction::Asc,
                values: SortValues::ObjectId,
            }],
            ..SPEC
        };
        assert_eq!(spec.order().count(), 1);
    }
}
