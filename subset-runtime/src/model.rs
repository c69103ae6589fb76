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
pub trait Subset: Serialize + DeserializeOwned + Send + Sync + Unpin + 'static {
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
    /// `#[derive(Child)]` sets it from [`Child::Id`] when that is a [`crate::spec::SortableField`]; the
    /// default admits anything an `_id` can sort by.
    const ID_VALUES: SortValues = SortValues::Id;
    /// Used by the derives: the fields serde never writes under their own name, as (Rust name,
    /// serde key: `skip`, `skip_serializing` or `flatten`), so that a parent naming one in
    /// `sort`, `filter` or `sum` fails to build.
    ///
    /// `#[serde(skip_deserializing)]` fields are not listed: they are stored, so MongoDB sorts by
    /// them, and the engine takes every sort value it needs (cursors, the last embedded child,
    /// reconciliation) from stored documents, never from decoded children; that such a field
    /// reads back as its default changes what the caller sees, not the order or the pages.
    #[doc(hidden)]
    const __UNSTORED: &'static [(&'static str, &'static str)] = &[];

    /// Used by the derives: the fields of [`Child::FIELDS`] that serde stores only sometimes, or
    /// in another form than their Rust type's, as (Rust name, serde key: `skip_serializing_if`,
    /// `with` or `serialize_with`), so that a parent sorting, filtering or summing by one fails
    /// to build: the engine queries and reads these fields in the stored documents.
    #[doc(hidden)]
    const __ALTERED: &'static [(&'static str, &'static str)] = &[];

    /// Used by the derives: the type's name, for messages.
    #[doc(hidden)]
    const __NAME: &'static str = "the child type";

    /// Used by the derives: `true` in the stub impl `#[derive(Child)]` emits next to its errors,
    /// whose lists are empty, so that a parent's checks do not report its fields as missing.
    #[doc(hidden)]
    const __STUB: bool = false;
}

/// A field's Rust name and the name it has in BSON after serde's renames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldName {
    /// The field's name in the Rust struct.
    pub rust: &'static str,
    /// The field's name in the stored document.
    pub bson: &'static str,
}

// The sort grammar's own: what a sort string says is what a descriptor holds, with nothing to
// map between the two.
pub use subset_spec::Direction;

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

/// A parent collection and its subset fields: what [`raw::Store`](crate::raw::Store) works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParentSpec {
    /// The parent collection.
    pub collection: &'static str,
    /// One descriptor per subset field.
    pub subsets: &'static [SubsetSpec],
}

impl ParentSpec {
    /// A descriptor made at run time (see [`crate::spec::SpecBuilder`]): the strings are leaked, as a
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
    /// How many children stay embedded, 1 to [`MAX_KEEP`](crate::spec::MAX_KEEP).
    pub keep: u32,
    /// The sort order as written by the user; `_id` is appended by [`SubsetSpec::order`].
    pub sort: &'static [SortKey],
    /// BSON name of the parent's integer field that counts the children, if any.
    pub count: Option<&'static str>,
    /// The numbers the count field's Rust type holds, which no write may carry it past.
    pub count_type: NumberType,
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
    /// Whether the child type has the parent key as a field of its own: embedded copies then
    /// keep the key too (a page item says which parent it belongs to, wherever it was read),
    /// and a child pushed with a key other than its parent's `_id` is refused. Without it, the
    /// key is only in the child collection.
    pub embed_key: bool,
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
    /// The numbers the parent field's Rust type holds, which no write may carry it past.
    pub ty: NumberType,
}

/// The numbers a parent's count or sum field holds: those of its Rust type. A write that would
/// carry the field past them is refused ([`crate::Error::NumberOverflow`]) with nothing
/// written, since the server would store a wider number (an `$inc` past `i32::MAX` makes an
/// int64) that the parent's type could not read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NumberType {
    /// An integer type, named `name` (`"i32"`), from `min` to `max` (`i64::MAX` for a `u64`:
    /// BSON has no larger integer).
    Integer {
        /// The Rust type's name.
        name: &'static str,
        /// Its least value.
        min: i64,
        /// Its greatest value, as BSON stores it.
        max: i64,
    },
    /// `f64` (or `f32`): a float holds any sum, rounded.
    Float,
    /// `Decimal128`: 34 significant digits; beyond them the server's `$inc` and `$sum` round,
    /// as IEEE 754-2008 decimal128 does.
    Decimal,
    /// Not known (a descriptor built at run time without types): only what the server refuses
    /// (an `$inc` past `i64`) is refused.
    Unknown,
}

impl NumberType {
    /// The numbers of the integer type `name`, from `min` to `max`.
    pub const fn integer(name: &'static str, min: i64, max: i64) -> Self {
        NumberType::Integer { name, min, max }
    }

    /// The type's word in the registry of definitions (`"i32"`, `"f64"`, `"decimal"`), `None`
    /// for [`NumberType::Unknown`]; [`NumberType::parse`] reads it back.
    pub fn word(&self) -> Option<&'static str> {
        match self {
            NumberType::Integer { name, .. } => Some(name),
            NumberType::Float => Some("f64"),
            NumberType::Decimal => Some("decimal"),
            NumberType::Unknown => None,
        }
    }

    /// The type [`NumberType::word`] names, if any.
    pub fn parse(word: &str) -> Option<NumberType> {
        Some(match word {
            "i32" => NumberType::integer("i32", i32::MIN.into(), i32::MAX.into()),
            "i64" => NumberType::integer("i64", i64::MIN, i64::MAX),
            "u32" => NumberType::integer("u32", 0, u32::MAX.into()),
            // BSON holds no integer past `i64::MAX`.
            "u64" => NumberType::integer("u64", 0, i64::MAX),
            "f64" => NumberType::Float,
            "decimal" => NumberType::Decimal,
            _ => return None,
        })
    }
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
/// field in upper case (`Product::RECENT_REVIEWS`), with the struct's visibility; pass it to
/// [`crate::Store::children`]. `C` is the type the child collection holds: `Review` for a
/// `Vec<Review>` and for a `Vec<ReviewPreview>` of previews of it alike.
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

impl<P: Subset, C> SubsetField<P, C> {
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
    count_type: NumberType::Unknown,
    sums: &[],
    id_values: SortValues::ObjectId,
    embed: None,
    embed_key: false,
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
