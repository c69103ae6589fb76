//! Keeping the copy true: remove with backfill, update with re-sort, reconcile, and the
//! server-side cap.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use subset::bson;
use subset::bson_compat;
use subset::{repair::SweepOptions, Error, Store, WriteMode};

async fn with_reviews(store: &Store<Product>, dates: &[i64]) -> (Product, Vec<Review>) {
    let product = Product::named("lifecycle");
    store.insert(&product).await.unwrap();
    let reviews: Vec<Review> = dates.iter().map(|d| Review::at(*d)).collect();
    store
        .children(Product::RECENT_REVIEWS)
        .push_many(&product.id, &reviews)
        .await
        .unwrap();
    (product, reviews)
}

fn dates(p: &Product) -> Vec<i64> {
    p.recent_reviews
        .iter()
        .map(|r| r.date.timestamp_millis())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_backfills_the_next_child_and_empties_cleanly() {
    for store in stores::<Product>().await {
        let (product, reviews) = with_reviews(&store, &[1, 2, 3, 4, 5, 6, 7]).await;
        let handle = store.children(Product::RECENT_REVIEWS);
        let id = Bson::ObjectId(product.id);
        // An embedded child goes: the evicted 2 comes back.
        handle.remove(&product.id, &reviews[5].id).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(dates(&got), [7, 5, 4, 3, 2]);
        assert_eq!(got.total_reviews, 6);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &id).await;
        // A child that was not embedded goes: the subset stays.
        handle.remove(&product.id, &reviews[0].id).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(dates(&got), [7, 5, 4, 3, 2]);
        assert_eq!(got.total_reviews, 5);
        // Removing one twice, or one that never was, is ChildNotFound and changes nothing.
        for missing in [reviews[0].id, ObjectId::new()] {
            let err = handle.remove(&product.id, &missing).await.unwrap_err();
            assert!(matches!(err, Error::ChildNotFound { .. }), "{err}");
        }
        assert_eq!(
            store.get(&product.id).await.unwrap().unwrap().total_reviews,
            5
        );
        // Every child goes: an empty subset and a zero count.
        for r in [1, 2, 3, 4, 6] {
            handle.remove(&product.id, &reviews[r].id).await.unwrap();
        }
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert!(got.recent_reviews.is_empty());
        assert_eq!(got.total_reviews, 0);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &id).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn update_moves_a_child_in_and_out_of_the_subset() {
    for store in stores::<Product>().await {
        let (product, reviews) = with_reviews(&store, &[10, 20, 30, 40, 50, 60, 70]).await;
        let handle = store.children(Product::RECENT_REVIEWS);
        // Content change, same rank: the embedded copy follows.
        let mut edited = reviews[6].clone();
        edited.author = "edited".into();
        handle.update(&product.id, &edited).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(got.recent_reviews[0].author, "edited");
        // An old child becomes the newest: it enters, the fifth leaves.
        let mut newest = reviews[0].clone();
        newest.date = DateTime::from_millis(100);
        handle.update(&product.id, &newest).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(dates(&got), [100, 70, 60, 50, 40]);
        // The newest becomes the oldest: it leaves, 30 comes back.
        newest.date = DateTime::from_millis(1);
        handle.update(&product.id, &newest).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(dates(&got), [70, 60, 50, 40, 30]);
        assert_eq!(got.total_reviews, 7);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
        let err = handle
            .update(&product.id, &Review::at(5))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ChildNotFound { .. }), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_repairs_every_kind_of_drift_and_reports_it() {
    for store in stores::<Product>().await {
        let (product, reviews) = with_reviews(&store, &[1, 2, 3, 4, 5, 6, 7]).await;
        let handle = store.children(Product::RECENT_REVIEWS);
        let parents = store.database().collection::<Document>("products");
        // Drift as a crash or a careless writer leaves it: a stale and a duplicated copy, a
        // hole, and a wrong count.
        let stale = bson_compat::to_document(&Review::at(99)).unwrap();
        let seven = bson_compat::to_document(&reviews[6]).unwrap();
        parents
            .update_one(
                doc! { "_id": product.id },
                doc! { "$set": { "recent_reviews": [stale, seven.clone(), seven], "total_reviews": 40_i64 } },
            )
            .await
            .unwrap();
        let report = store.check_all().await.unwrap();
        assert_eq!(report.progress.checked, 1);
        assert_eq!(report.progress.drifted, 1);
        assert_eq!(report.progress.fixed, 0);
        let drift = handle.check(&product.id).await.unwrap();
        assert_eq!(drift.missing.len(), 4, "{drift:?}");
        assert_eq!(drift.stale.len(), 2, "{drift:?}");
        assert_eq!(drift.count, Some((40, 7)));
        assert!(!drift.fixed);

        let drift = handle.reconcile(&product.id).await.unwrap();
        assert!(drift.fixed && !drift.is_clean());
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
        assert!(handle.reconcile(&product.id).await.unwrap().is_clean());
        let report = store.reconcile_all().await.unwrap();
        assert_eq!((report.progress.drifted, report.progress.fixed), (0, 0));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_all_walks_every_parent_in_batches() {
    let store = Store::<Product>::with_options(
        &replica_db().await,
        subset::StoreOptions::new().mode(WriteMode::Ordered),
    );
    let mut ids = Vec::new();
    for n in 0..23 {
        let (p, _) = with_reviews(&store, &[n, n + 1, n + 2, n + 3, n + 4, n + 5]).await;
        ids.push(p.id);
    }
    // Every third parent loses its subset.
    let parents = store.database().collection::<Document>("products");
    for id in ids.iter().step_by(3) {
        parents
            .update_one(
                doc! { "_id": id },
                doc! { "$set": { "recent_reviews": [] } },
            )
            .await
            .unwrap();
    }
    let mut calls = 0;
    let report = store
        .reconcile_all()
        .options(SweepOptions::default().batch_size(5))
        .progress(|p| {
            calls += 1;
            assert!(p.checked <= 23);
        })
        .await
        .unwrap();
    assert_eq!(calls, 5);
    assert_eq!(report.progress.checked, 23);
    assert_eq!(report.progress.drifted, 8);
    assert_eq!(report.progress.fixed, 8);
    assert_eq!(report.drifts.len(), 8);
    for id in &ids {
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(*id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_rejects_an_uncapped_push_once_the_schema_is_installed() {
    let store = Store::<Product>::new(&replica_db().await);
    let db = store.database();
    // A validator of the user's own, which must survive.
    db.create_collection("products")
        .validator(doc! { "name": { "$type": "string" } })
        .await
        .unwrap();
    store.ensure_schema().await.unwrap();
    store.ensure_schema().await.unwrap();
    let (product, _) = with_reviews(&store, &[1, 2, 3, 4, 5, 6, 7, 8]).await;
    let parents = db.collection::<Document>("products");
    // The classic mistake: `$push` without `$slice`, past `keep`.
    let err = parents
        .update_one(
            doc! { "_id": product.id },
            doc! { "$push": { "recent_reviews": bson_compat::to_document(&Review::at(9)).unwrap() } },
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("Document failed validation"),
        "{err}"
    );
    // The user's rule still holds.
    let err = parents
        .insert_one(doc! { "name": 5, "recent_reviews": [] })
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("Document failed validation"),
        "{err}"
    );
    // The library's own writes keep working.
    let handle = store.children(Product::RECENT_REVIEWS);
    handle.push(&product.id, &Review::at(10)).await.unwrap();
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(got.recent_reviews.len(), 5);
    assert_eq!(got.total_reviews, 9);
}
