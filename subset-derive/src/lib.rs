//! Implementation detail of the `subset` crate: the `Subset` and `Child` derives.
//!
//! Use them through [`subset`](https://docs.rs/mongodb-subset), which re-exports them next to the traits
//! they implement and documents their attributes. Nothing in this crate is a stable API of its
//! own.
//!
//! Each derive runs the same pipeline: read the input into borrowed views with attributes parsed
//! (`ast`, `attr`, `serde_attr`), apply the rules that span several keys or fields (`valid`),
//! then either expand (`expand`) or, if anything was reported, emit every error plus a stub impl
//! (`fallback`); both name the runtime through `paths`. Errors are collected in a `Ctxt` so one
//! compile shows all of them.

mod ast;
mod attr;
mod case;
mod ctxt;
mod expand;
mod fallback;
mod paths;
mod serde_attr;
mod valid;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Implements [`subset::Subset`](https://docs.rs/mongodb-subset/latest/subset/trait.Subset.html)
/// for a struct that keeps the first `keep` of its children embedded, in order, while every child
/// is stored in a collection of its own.
///
/// ```text
/// #[derive(Debug, Clone, Serialize, Deserialize, Subset)]
/// #[subset(collection = "products")]
/// struct Product {
///     #[serde(rename = "_id")]
///     id: ObjectId,
///     name: String,
///     #[subset(child = "reviews", keep = 5, sort = "created_at desc", count = "total_reviews")]
///     recent_reviews: Vec<Review>,
///     #[serde(default)]
///     total_reviews: i64,
/// }
/// ```
///
/// `Review` derives [`Child`](derive@Child). The keys of `#[subset(...)]`, and the constant
/// `Product::RECENT_REVIEWS` the derive adds for the field, are in the
/// [attribute table](https://docs.rs/mongodb-subset/latest/subset/#attributes); what it refuses at
/// compile time, and why, is in
/// [compile-time checks](https://docs.rs/mongodb-subset/latest/subset/guide/checks/index.html),
/// and how it follows serde's attributes in
/// [serde attributes](https://docs.rs/mongodb-subset/latest/subset/guide/serde/index.html).
#[proc_macro_derive(Subset, attributes(subset))]
pub fn derive_parent(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_parent(&input).into()
}

/// Implements [`subset::Child`](https://docs.rs/mongodb-subset/latest/subset/trait.Child.html) for
/// the element type of a subset field.
///
/// ```text
/// #[derive(Debug, Clone, Serialize, Deserialize, Child)]
/// #[serde(rename_all = "camelCase")]
/// struct Review {
///     #[serde(rename = "_id")]
///     id: ObjectId,
///     rating: i32,
///     created_at: bson::DateTime,
/// }
/// ```
///
/// It records each serialized field's Rust name, BSON name (after serde's `rename`,
/// `rename(serialize = …)` and `rename_all`) and type, so that a parent's `sort`, `filter` and
/// `sum` can name child fields the Rust way. Fields with `#[serde(skip)]`, `skip_serializing` or
/// `flatten` are left out and recorded as never stored under their name, and fields with
/// `skip_serializing_if`, `with` or `serialize_with` as stored only sometimes, or in another form
/// than their type's, so that a parent sorting, filtering or summing by one fails to build. The
/// child needs a field stored as `_id`, always and as its type; a field with
/// `skip_serializing_if` must read back without it (`#[serde(default)]`, or an `Option`), and
/// every field under the name it is stored under.
///
/// A *preview* embeds only some fields of a full child type (the extended-reference pattern):
///
/// ```text
/// #[derive(Debug, Clone, Serialize, Deserialize, Child)]
/// #[serde(rename_all = "camelCase")]
/// #[subset(preview_of = Review)]
/// struct ReviewPreview {
///     #[serde(rename = "_id")]
///     id: ObjectId,
///     rating: i32,
///     created_at: bson::DateTime,
/// }
/// ```
///
/// `preview_of` is the one key of `#[subset(...)]` on a child, in the same
/// [attribute table](https://docs.rs/mongodb-subset/latest/subset/#attributes).
///
/// A preview's `Child::Full` is `Review` and its `Child::EMBED` lists its fields (a plain
/// child's `Full` is itself, and its `EMBED` is `None`). Fields are matched with the full type's
/// by Rust name, and the derive checks at compile time, each at the preview field at fault, that
/// `Review` has the field, with the same type and the same BSON name (so the same `rename` and
/// `rename_all`), and stores it under that name; that a field `Review` leaves out of some
/// documents (`skip_serializing_if`) reads back without it, and one `Review` stores through a
/// function (`with`, `serialize_with`) has a `with` or `deserialize_with` of its own; that the
/// preview has `_id`; that `Review` derives `Child` and is no preview; and that no preview field
/// is `#[serde(flatten)]`. A preview with type parameters names the full type's fields, which must
/// then be visible where it is declared.
#[proc_macro_derive(Child, attributes(subset))]
pub fn derive_child(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_child(&input).into()
}
