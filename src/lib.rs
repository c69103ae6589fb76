//! The MongoDB *Subset Pattern* as a derive.
//!
//! A parent (a product) keeps its `keep` most relevant children (the 5 latest reviews) embedded,
//! so the product page is one query; every child also lives in its own collection, so history is
//! unbounded and the parent document stays small. `#[derive(Parent)]` generates the typed glue
//! and checks its use at compile time; the runtime does the traps right:
//!
//! - every push is one `$push` with `$each`, `$sort` and `$slice` (the array can never grow past
//!   `keep`), plus `$inc` of the count, in the same update;
//! - the double write (child collection + embedded copy) is one transaction on a replica set and
//!   ordered child-first on a standalone server; a retried push is not stored or counted twice;
//! - pagination serves the first page from the embedded array and every later page by keyset on
//!   (sort keys, `_id`) from the child collection: each child exactly once, never `skip`;
//!   backward too ([`PageRequest::last`], [`PageRequest::before`]), Relay-shaped, with a cursor
//!   per child.
//!
//! # Quick start
//!
//! ```no_run
//! use subset::bson::{oid::ObjectId, DateTime};
//! use serde::{Deserialize, Serialize};
//! use subset::{Child, PageRequest, Store, Parent};
//!
//! #[derive(Debug, Clone, Serialize, Deserialize, Child)]
//! struct Review {
//!     #[serde(rename = "_id")]
//!     id: ObjectId,
//!     author: String,
//!     rating: i32,
//!     date: DateTime,
//! }
//!
//! #[derive(Debug, Clone, Serialize, Deserialize, Parent)]
//! #[subset(collection = "products")]
//! struct Product {
//!     #[serde(rename = "_id")]
//!     id: ObjectId,
//!     name: String,
//!     #[subset(child = "reviews", keep = 5, sort = "date desc", count = "total_reviews")]
//!     recent_reviews: Vec<Review>,
//!     #[serde(default)]
//!     total_reviews: i64,
//! }
//!
//! # async fn demo(db: mongodb::Database) -> subset::Result<()> {
//! let store = Store::<Product>::new(&db);
//! store.ensure_indexes().await?;
//!
//! let product = Product {
//!     id: ObjectId::new(),
//!     name: "Grinder".into(),
//!     recent_reviews: vec![],
//!     total_reviews: 0,
//! };
//! store.insert(&product).await?;
//!
//! let reviews = store.subset(Product::RECENT_REVIEWS);
//! let review = Review { id: ObjectId::new(), author: "ana".into(), rating: 5, date: DateTime::now() };
//! reviews.push(&product.id, &review).await?;
//!
//! // The product page: one query, the latest reviews and the total included.
//! let page = store.get(&product.id).await?.expect("inserted above");
//! assert_eq!(page.total_reviews, 1);
//!
//! // Every review, 20 at a time; `next` encodes to a URL-safe token for web APIs.
//! let mut request = PageRequest::first(20);
//! loop {
//!     let page = reviews.page(&product.id, &request).await?;
//!     for review in &page.items { /* … */ }
//!     match page.next {
//!         Some(next) => request = PageRequest::after(next, 20),
//!         None => break,
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Attributes
//!
//! | where | key | meaning |
//! |---|---|---|
//! | struct | `collection = "products"` | the parent collection (required) |
//! | `Vec<C>` field | `child = "reviews"` | the child collection (required) |
//! | `Vec<C>` field | `keep = 5` | how many children stay embedded, 1 to 1000 (required) |
//! | `Vec<C>` field | `sort = "date desc, rating asc"` | the order, by the child's Rust field names; `_id` is appended as the last tie-breaker, in the direction of the last key (required) |
//! | `Vec<C>` field | `key = "product_id"` | the field holding the parent's `_id` in each child document (default: the parent's name in snake case + `_id`) |
//! | `Vec<C>` field | `count = "total_reviews"` | an integer parent field kept equal to the number of children (optional) |
//!
//! The child type derives [`Child`] so that sort keys follow its serde renames. Serde renames on
//! the parent (`rename`, `rename_all`) are honoured in every update, sort and index.
//!
//! # Generated items
//!
//! For each subset field the derive adds an associated constant named after the field in upper
//! case (`Product::RECENT_REVIEWS`), a [`SubsetField`] to pass to [`Store::subset`].
//!
//! # bson 2 or 3
//!
//! `subset` uses the driver's bson: [`bson`] is `mongodb::bson`. The feature `bson-2` (default)
//! turns on the driver's `bson-2`, `bson-3` its `bson-3`; with both on, bson 3 wins, as in the
//! driver. Whenever anything in the build turns on the driver's `bson-3`, turn on this crate's
//! `bson-3` too (with `default-features = false`): the crate is compiled against the bson API its
//! feature names. Name bson as `subset::bson` (or `mongodb::bson`) so that your types and
//! `subset`'s agree. bson 3 renamed its serde functions (`to_document` became
//! `serialize_to_document`, and so on); [`bson_compat`] has them under one name for both
//! versions, for code that must build on either.
//!
//! # Test server
//!
//! With the `testkit` feature, `subset::testkit` is the `subset-testkit` crate: a throwaway
//! `mongod` (found on the machine or downloaded once) for tests and examples.
//!
//! # GraphQL
//!
//! With the `async-graphql` feature, [`Cursor`] implements `async_graphql`'s `CursorType` and a
//! [`Page`] turns into its `Connection` (edges with their cursors, and the page info), so a
//! resolver returns `handle.page(&id, &request).await?.into()`.

#![warn(missing_docs)]

pub use subset_derive::{Child, Parent};
pub use subset_runtime::*;

// The `subset-testkit` crate, whose own docs render as this module's.
#[cfg(feature = "testkit")]
#[doc(inline)]
pub use subset_testkit as testkit;

#[doc(hidden)]
pub use subset_runtime::__private;
