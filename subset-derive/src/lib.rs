//! Implementation detail of the `subset` crate: the `Subset` and `Child` derives.
//!
//! Use them through [`subset`](https://docs.rs/mongodb-subset), which re-exports them next to the traits
//! they implement and documents their attributes. Nothing in this crate is a stable API of its
//! own.
//!
//! Each derive runs the same pipeline: read the input into borrowed views with attributes parsed
//! (`ast`, `attr`, `serde_attr`), apply the rules that span several keys or fields (`valid`),
//! then either expand (`expand`) or, if anything was reported, emit every error plus a stub impl
//! (`fallback`). Errors are collected in a `Ctxt` so one compile shows all of them.

mod ast;
mod attr;
mod case;
mod ctxt;
mod expand;
mod fallback;
mod serde_attr;
mod valid;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Implements `subset::Subset` for a struct with capped, sorted, embedded children.
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
/// Its keys (`collection` on the struct; `child`, `keep`, `sort`, `key`, `count`, `sum` and
/// `filter` on each `Vec<C>` field) are described in the
/// [attribute table](https://docs.rs/mongodb-subset/latest/subset/#attributes) of the `subset` crate.
///
/// The parent needs a field stored as `_id` (named `_id` or renamed to it with serde); its type is
/// `Subset::Id`. BSON names follow serde's `rename` and `rename_all`. The child type `C` must
/// derive [`Child`](derive@Child).
///
/// `C` may be a preview (`#[subset(preview_of = Review)]`, see [`Child`](derive@Child)): the
/// array then embeds previews `C` of the children, and the child collection holds them whole, as
/// `<C as Child>::Full`. Sort keys name fields of `C`, which must hold every one of them since
/// the server sorts the embedded array; sums name fields of the full type, which need not be in
/// the preview.
///
/// Besides the impl, each subset field gets an associated constant named after it in
/// SCREAMING_SNAKE_CASE, with the struct's visibility: `Product::RECENT_REVIEWS`, a
/// `subset::SubsetField<Product, <C as Child>::Full>` (`SubsetField<Product, Review>` for
/// `Vec<Review>` and for `Vec<ReviewPreview>` alike) to pass to `Store::subset`, which pushes,
/// updates and pages full children.
///
/// At compile time the derive checks every attribute value (with the same rules and messages as
/// the runtime's `SpecBuilder`), that each sort key is a field of the child (of the preview, for
/// a preview) with a scalar type, that the count field is an integer, that each sum's fields are
/// numbers (an integer sum only of an integer child field, never an `Option`), and that neither
/// the child nor a preview's full type stores a field under the parent key; errors point at the
/// attribute or string at fault; a child field name that is no field is rustc's own "no field"
/// error (so the child fields a parent names must be visible where it is declared), and one that
/// is a field's serde name is also answered with that field. Every field the engine reads or writes must be
/// stored always and as its type: a sort key, filter or summed field that is `skip`,
/// `skip_serializing`, `flatten`, `skip_serializing_if`, `with` or `serialize_with` is refused
/// with the reason, and so is an `_id` with `skip_serializing_if`, `skip_deserializing` or a
/// `with` function, and a count or sum kept in the `_id`, in a subset field, in another
/// subset's count or sum, or in a field with a `with`, `serialize_with` or `deserialize_with`
/// function. Every field must read back under the name it is stored under (an `alias` will do),
/// and one that `skip_serializing_if` may leave out must read back without it, unless the engine
/// writes it itself (subset fields, counts, sums). Views of one child
/// collection and key must hold one child type (or previews of it), and must differ in `keep`,
/// filter or order, orders compared once the `_id` tie-breaker is added. (In a generic parent, a
/// sum's field is checked on `C` itself, so there a preview must hold the fields its sums add
/// up, and an unknown child field is rustc's "no field" error.) `docs/guide/serde.md` lists how
/// each serde attribute is followed or refused.
#[proc_macro_derive(Subset, attributes(subset))]
pub fn derive_parent(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_parent(&input).into()
}

/// Implements `subset::Child` for the element type of a subset field.
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
/// is `#[serde(flatten)]`. The full type's fields must be visible where the preview is declared.
#[proc_macro_derive(Child, attributes(subset))]
pub fn derive_child(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive_child(&input).into()
}
