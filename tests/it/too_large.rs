//! A subset that cannot fit in one document: every write that would need it fails with
//! `Error::SubsetTooLarge`, naming the parent and the field, and leaves nothing behind in either
//! write mode; `reconcile` reports it the same way.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use common::{embedded_ids, replica_db, standalone_db, Product, Review};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Error, Store, WriteMode};

/// MongoDB's document limit.
const LIMIT: usize = 16 * 1024 * 1024;

/// A review of 8 MiB: it fits in the child collection, but not in a parent of 9 MiB. (Sizes
/// near the limit itself make the test server's small cache refuse the transaction first.)
fn huge(millis: i64) -> Review {
    let mut review = Review::at(millis);
    review.author = "x".repeat(LIMIT / 2);
    review
}

/// A parent of about 9 MiB, with room for small children but not for a huge one.
fn big_product() -> Product {
    let mut product = Product::named("grinder");
    product.name = "n".repeat(LIMIT / 2 + LIMIT / 16);
    product
}

async fn every_mode() -> Vec<Store<Product>> {
    vec![
        Store::new(&replica_db().await),
        Store::new(&replica_db().await).with_mode(WriteMode::Ordered),
        Store::new(&standalone_db().await),
    ]
}

/// The product with a long subset: from `keep = 32` up a push tries the head first
/// (`$position: 0`, guarded), so a too-large push fails in that update rather than in the
/// `$sort` one.
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "long_products")]
struct LongProduct {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "long_reviews",
        keep = 32,
        sort = "date desc",
        count = "total_reviews"
    )]
    recent_reviews: Vec<Review>,
    #[serde(default)]
    total_reviews: i64,
}

fn assert_too_large(err: &Error, id: ObjectId) {
    assert_too_large_in(err, "products", id);
}

fn assert_too_large_in(err: &Error, parents: &str, id: ObjectId) {
    match err {
        Error::SubsetTooLarge {
            collection,
            id: parent,
            field,
            bytes,
        } => {
            assert_eq!(collection, parents);
            assert_eq!(**parent, Bson::ObjectId(id));
            assert_eq!(field, "recent_reviews");
            assert!(*bytes > LIMIT as u64, "{bytes}");
        }
        other => panic!("expected SubsetTooLarge, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("recent_reviews") && text.contains(&id.to_hex()),
        "{text}"
    );
}

/// (children stored, embedded ids, count).
async fn state(store: &Store<Product>, id: ObjectId) -> (Vec<Bson>, Vec<Bson>, i64) {
    let db = store.database();
    let children: Vec<Bson> = db
        .collection::<Document>("reviews")
        .distinct("_id", doc! { "product_id": id })
        .await
        .unwrap();
    let count = db
        .collection::<Document>("products")
        .find_one(doc! { "_id": id })
        .projection(doc! { "total_reviews": 1 })
        .await
        .unwrap()
        .unwrap()
        .get_i64("total_reviews")
        .unwrap();
    let embedded = embedded_ids(store, "recent_reviews", &Bson::ObjectId(id)).await;
    (children, embedded, count)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_that_outgrows_the_parent_fails_typed_and_leaves_nothing() {
    for store in every_mode().await {
        let product = big_product();
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        reviews.push(&product.id, &Review::at(1)).await.unwrap();
        let before = state(&store, product.id).await;

        let err = reviews.push(&product.id, &huge(2)).await.unwrap_err();
        assert_too_large(&err, product.id);
        assert_eq!(state(&store, product.id).await, before);
        let err = reviews
            .push_many(&product.id, &[Review::at(3), huge(4)])
            .await
            .unwrap_err();
        assert_too_large(&err, product.id);
        assert_eq!(state(&store, product.id).await, before);
        assert!(reviews.check(&product.id).await.unwrap().is_clean());

        // A huge review too old to rank in the subset is only stored: `$slice` drops it before
        // the server measures the document.
        let newer: Vec<Review> = (10..15).map(Review::at).collect();
        reviews.push_many(&product.id, &newer).await.unwrap();
        let (_, embedded, count) = state(&store, product.id).await;
        reviews.push(&product.id, &huge(0)).await.unwrap();
        let (children, still, after) = state(&store, product.id).await;
        assert_eq!(still, embedded);
        assert_eq!(after, count + 1);
        assert_eq!(children.len(), 7);
        store.delete(&product.id).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_head_push_that_outgrows_a_long_subset_fails_typed_and_leaves_nothing() {
    let stores = vec![
        Store::<LongProduct>::new(&replica_db().await),
        Store::new(&replica_db().await).with_mode(WriteMode::Ordered),
        Store::new(&standalone_db().await),
    ];
    for store in stores {
        let product = LongProduct {
            id: ObjectId::new(),
            name: big_product().name,
            recent_reviews: Vec::new(),
            total_reviews: 0,
        };
        store.insert(&product).await.unwrap();
        let reviews = store.children(LongProduct::RECENT_REVIEWS);
        let spec = LongProduct::RECENT_REVIEWS.spec();
        let state = || async {
            let children: Vec<Bson> = store
                .database()
                .collection::<Document>(spec.child_collection)
                .distinct("_id", doc! { spec.key: product.id })
                .await
                .unwrap();
            let id = Bson::ObjectId(product.id);
            let embedded = embedded_ids(&store, spec.field, &id).await;
            let parent = store.get(&product.id).await.unwrap().unwrap();
            (children, embedded, parent.total_reviews)
        };
        reviews.push(&product.id, &Review::at(1)).await.unwrap();
        let before = state().await;

        // Newer than the head: the guarded `$position: 0` update is the one the server refuses.
        let err = reviews.push(&product.id, &huge(2)).await.unwrap_err();
        assert_too_large_in(&err, "long_products", product.id);
        assert_eq!(state().await, before);
        let err = reviews
            .push_many(&product.id, &[Review::at(3), huge(4)])
            .await
            .unwrap_err();
        assert_too_large_in(&err, "long_products", product.id);
        assert_eq!(state().await, before);
        assert!(reviews.check(&product.id).await.unwrap().is_clean());
        store.delete(&product.id).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_that_outgrows_the_parent_is_undone() {
    for store in every_mode().await {
        let product = big_product();
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let review = Review::at(1);
        reviews.push(&product.id, &review).await.unwrap();
        let before = state(&store, product.id).await;

        let mut edited = huge(1);
        edited.id = review.id;
        let err = reviews.update(&product.id, &edited).await.unwrap_err();
        assert_too_large(&err, product.id);
        assert_eq!(state(&store, product.id).await, before);
        let first = subset::PageRequest::first(5);
        let stored = reviews.page(&product.id, &first).await.unwrap();
        assert_eq!(stored.items, vec![review.clone()]);
        assert!(reviews.check(&product.id).await.unwrap().is_clean());
        store.delete(&product.id).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_insert_whose_subset_cannot_fit_is_undone_and_reconcile_names_it() {
    for store in every_mode().await {
        let mut product = big_product();
        product.recent_reviews = vec![Review::at(1), huge(2)];
        let err = store.insert(&product).await.unwrap_err();
        assert_too_large(&err, product.id);
        assert!(store.get(&product.id).await.unwrap().is_none());
        let left = store
            .database()
            .collection::<Document>("reviews")
            .count_documents(doc! { "product_id": product.id })
            .await
            .unwrap();
        assert_eq!(left, 0);

        // Written by someone else into the child collection: reconcile cannot fit it either,
        // and says so, for every attempt.
        product.recent_reviews.clear();
        store.insert(&product).await.unwrap();
        let mut raw = bson_compat::to_document(&huge(3)).unwrap();
        raw.insert("product_id", product.id);
        store
            .database()
            .collection::<Document>("reviews")
            .insert_one(raw)
            .await
            .unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        for _ in 0..2 {
            let err = reviews.reconcile(&product.id).await.unwrap_err();
            assert_too_large(&err, product.id);
        }
        store.delete(&product.id).await.unwrap();
    }
}
