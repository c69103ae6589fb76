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
        Store::with_options(
            &replica_db().await,
            subset::StoreOptions::new().mode(WriteMode::Ordered),
        ),
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
    let _big = crate::BIG_DOCUMENTS.lock().await;
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
    let _big = crate::BIG_DOCUMENTS.lock().await;
    let stores = vec![
        Store::<LongProduct>::new(&replica_db().await),
        Store::with_options(
            &replica_db().await,
            subset::StoreOptions::new().mode(WriteMode::Ordered),
        ),
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
    let _big = crate::BIG_DOCUMENTS.lock().await;
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
    let _big = crate::BIG_DOCUMENTS.lock().await;
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
        // so it leaves it out and names it, and the count stays exact.
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
            let drift = reviews.reconcile(&product.id).await.unwrap();
            assert_eq!(drift.malformed.len(), 1, "{drift:?}");
            assert!(
                drift.malformed[0].problem.contains("recent_reviews"),
                "{drift:?}"
            );
            assert_eq!(
                drift.malformed_in_head,
                vec![drift.malformed[0].child.clone()]
            );
        }
        assert_eq!(
            store.get(&product.id).await.unwrap().unwrap().total_reviews,
            1
        );
        store.delete(&product.id).await.unwrap();
    }
}

/// A parent that another program wrote (no marker) with five small reviews embedded and stored.
async fn unmarked_product(store: &Store<Product>) -> Product {
    let mut product = Product::named("small");
    product.recent_reviews = (1..6).rev().map(Review::at).collect();
    product.total_reviews = 5;
    let db = store.database();
    let raw = bson_compat::to_document(&product).unwrap();
    db.collection::<Document>("products")
        .insert_one(raw)
        .await
        .unwrap();
    for review in &product.recent_reviews {
        let mut raw = bson_compat::to_document(review).unwrap();
        raw.insert("product_id", product.id);
        db.collection::<Document>("reviews")
            .insert_one(raw)
            .await
            .unwrap();
    }
    product
}

/// A write of a near-limit child refused whole: `SubsetTooLarge`, or, in a transaction, the test
/// server's small cache refusing the transaction first (`TransactionTooLargeForCache`, 388).
fn assert_refused(err: &Error, id: ObjectId) {
    let cache = err.mongo_error().is_some_and(
        |e| matches!(e.kind.as_ref(), mongodb::error::ErrorKind::Command(c) if c.code == 388),
    );
    if !cache {
        assert_too_large(err, id);
    }
}

/// A review of 16 MiB less `short` bytes, newer than every other: it ranks first.
fn near_limit(short: usize) -> Review {
    let mut review = Review::at(100);
    review.author = "x".repeat(LIMIT - short);
    review
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_refused_while_settling_its_parent_takes_its_child_out_again() {
    let _big = crate::BIG_DOCUMENTS.lock().await;
    for store in every_mode().await {
        // Built by another program: the push settles the parent from the child collection,
        // and that rebuild is what cannot hold the child.
        let product = unmarked_product(&store).await;
        let reviews = store.children(Product::RECENT_REVIEWS);
        let err = reviews
            .push(&product.id, &near_limit(200))
            .await
            .unwrap_err();
        assert_refused(&err, product.id);
        let (children, embedded, count) = state(&store, product.id).await;
        assert_eq!((children.len(), embedded.len(), count), (5, 5, 5));
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(got.total_reviews, 5);
        let drift = reviews.check(&product.id).await.unwrap();
        assert!(drift.is_clean(), "{drift:?}");
        // And the parent takes the next push.
        reviews.push(&product.id, &Review::at(50)).await.unwrap();
        assert_eq!(state(&store, product.id).await.2, 6);
        store.delete(&product.id).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_no_subset_can_hold_is_reported_by_name_and_read_from_the_collection() {
    let _big = crate::BIG_DOCUMENTS.lock().await;
    for store in every_mode().await {
        let product = unmarked_product(&store).await;
        // Stored by another program: no push refused it.
        let huge = near_limit(200);
        let mut raw = bson_compat::to_document(&huge).unwrap();
        raw.insert("product_id", product.id);
        let db = store.database();
        db.collection::<Document>("reviews")
            .insert_one(raw)
            .await
            .unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);

        let drift = reviews.check(&product.id).await.unwrap();
        assert_eq!(drift.malformed.len(), 1, "{drift:?}");
        assert_eq!(drift.malformed[0].child, Bson::ObjectId(huge.id));
        assert_eq!(drift.malformed[0].field, "author");
        assert!(drift.malformed[0].problem.contains("16777216"), "{drift:?}");
        // Every reconcile succeeds, and the second finds nothing to do.
        let fixed = reviews.reconcile(&product.id).await.unwrap();
        assert!(fixed.fixed, "{fixed:?}");
        let again = reviews.reconcile(&product.id).await.unwrap();
        assert!(again.is_in_sync() && !again.fixed, "{again:?}");
        let report = store.reconcile_all().await.unwrap();
        assert_eq!(report.progress.failed, 0, "{report:?}");

        // The count is exact, the parent decodes, and the first page is the collection's.
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(got.total_reviews, 6);
        assert!(got.recent_reviews.iter().all(|r| r.id != huge.id));
        let page = reviews
            .page(&product.id, &subset::PageRequest::first(5))
            .await
            .unwrap();
        assert_eq!(page.items[0].id, huge.id);
        assert_eq!(page.items.len(), 5);
        // Newer children still go in; the huge one stays in the first page.
        reviews.push(&product.id, &Review::at(200)).await.unwrap();
        let page = reviews
            .page(&product.id, &subset::PageRequest::first(2))
            .await
            .unwrap();
        assert_eq!(page.items[1].id, huge.id);
        assert_eq!(state(&store, product.id).await.2, 7);
        store.delete(&product.id).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_refused_while_settling_its_parent_puts_the_child_back() {
    let _big = crate::BIG_DOCUMENTS.lock().await;
    for store in every_mode().await {
        let product = unmarked_product(&store).await;
        let reviews = store.children(Product::RECENT_REVIEWS);
        let mut edited = near_limit(200);
        edited.id = product.recent_reviews[0].id;
        let err = reviews.update(&product.id, &edited).await.unwrap_err();
        assert_refused(&err, product.id);
        let (children, _, count) = state(&store, product.id).await;
        assert_eq!((children.len(), count), (5, 5));
        let stored = store
            .database()
            .collection::<Document>("reviews")
            .find_one(doc! { "_id": edited.id })
            .await
            .unwrap()
            .unwrap();
        // Compared without printing: the refused author is 16 MiB.
        let author = stored.get_str("author").unwrap();
        assert!(
            author == product.recent_reviews[0].author,
            "the child was not put back"
        );
        let drift = reviews.check(&product.id).await.unwrap();
        assert!(drift.is_clean(), "{drift:?}");
        store.delete(&product.id).await.unwrap();
    }
}
