//! The parent store: insert with children, get, delete, indexes, and stored documents of the
//! wrong shape.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use common::*;
use subset::bson;
use subset::bson_compat;
use subset::{Error, PageRequest, Store};

#[tokio::test(flavor = "multi_thread")]
async fn insert_embeds_the_top_keep_and_stores_every_child() {
    for store in stores::<Product>().await {
        let mut product = Product::named("chair");
        product.recent_reviews = (0..12).map(|i| Review::at((i * 5) % 12)).collect();
        product.total_reviews = 999; // overwritten: the count is what was stored
        store.insert(&product).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        let dates: Vec<i64> = got
            .recent_reviews
            .iter()
            .map(|r| r.date.timestamp_millis())
            .collect();
        assert_eq!(dates, [11, 10, 9, 8, 7]);
        assert_eq!(got.total_reviews, 12);
        assert_eq!(got.name, "chair");
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;

        // A second insert of the same parent fails and changes nothing.
        let err = store.insert(&product).await.unwrap_err();
        assert!(matches!(err, Error::ParentExists { .. }), "{err}");
        let reviews = store.children(Product::RECENT_REVIEWS);
        assert_eq!(reviews.count(&product.id).await.unwrap(), 12);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn get_of_a_missing_parent_is_none_and_delete_removes_everything() {
    for store in stores::<Product>().await {
        assert!(store.get(&ObjectId::new()).await.unwrap().is_none());
        let (keep, gone) = (Product::named("keep"), Product::named("gone"));
        for p in [&keep, &gone] {
            store.insert(p).await.unwrap();
            let batch: Vec<Review> = (0..9).map(Review::at).collect();
            store
                .children(Product::RECENT_REVIEWS)
                .push_many(&p.id, &batch)
                .await
                .unwrap();
        }
        assert!(store.delete(&gone.id).await.unwrap());
        assert!(!store.delete(&gone.id).await.unwrap());
        assert!(store.get(&gone.id).await.unwrap().is_none());
        let reviews = store.children(Product::RECENT_REVIEWS);
        assert_eq!(reviews.count(&gone.id).await.unwrap(), 0);
        assert_eq!(reviews.count(&keep.id).await.unwrap(), 9);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ensure_indexes_is_idempotent_and_serves_pages_from_the_index() {
    let store = Store::<Product>::new(&replica_db().await);
    store.ensure_indexes().await.unwrap();
    store.ensure_indexes().await.unwrap();
    let indexes: Vec<_> = {
        use futures::TryStreamExt;
        store
            .database()
            .collection::<Document>("reviews")
            .list_indexes()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    };
    assert_eq!(indexes.len(), 2, "_id_ and ours");
    let ours = indexes
        .iter()
        .find(|i| i.keys.contains_key("product_id"))
        .unwrap();
    assert_eq!(ours.keys, doc! { "product_id": 1, "date": -1, "_id": -1 });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deep_page_reads_only_its_own_index_keys() {
    let store = Store::<Product>::new(&replica_db().await);
    store.ensure_indexes().await.unwrap();
    let product = Product::named("deep");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    // Ties on date, so the keyset needs both of its branches.
    let batch: Vec<Review> = (0..1_000).map(|i| Review::at(i / 4)).collect();
    reviews.push_many(&product.id, &batch).await.unwrap();
    let mut request = PageRequest::first(5);
    for _ in 0..60 {
        let next = reviews
            .page(&product.id, &request)
            .await
            .unwrap()
            .next
            .unwrap();
        request = PageRequest::after(next, 13);
    }
    // The server's profiler records the query the library really sent.
    let db = store.database();
    db.run_command(doc! { "profile": 2 }).await.unwrap();
    let page = reviews.page(&product.id, &request).await.unwrap();
    db.run_command(doc! { "profile": 0 }).await.unwrap();
    assert_eq!(page.items.len(), 13);
    let entry = db
        .collection::<Document>("system.profile")
        .find_one(doc! { "ns": format!("{}.reviews", db.name()), "op": "query" })
        .sort(doc! { "ts": -1 })
        .await
        .unwrap()
        .expect("the page query was profiled");
    let plan = entry.get_str("planSummary").unwrap();
    assert!(plan.starts_with("IXSCAN"), "{plan}");
    assert!(!entry.get_bool("hasSortStage").unwrap_or(false), "{entry}");
    let keys = entry
        .get_i32("keysExamined")
        .map(i64::from)
        .or(entry.get_i64("keysExamined"))
        .unwrap();
    // 14 documents (13 + 1 to see whether more follow), plus the bounds' edges.
    assert!(
        keys <= 20,
        "a page 60 pages deep examined {keys} index keys: {entry}"
    );
}

/// Writes `doc` as a parent straight through the driver.
async fn raw_parent(store: &Store<Product>, doc: Document) {
    store
        .database()
        .collection::<Document>("products")
        .insert_one(doc)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_parents_are_typed_errors_naming_document_and_field() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let good = bson_compat::to_document(&Review::at(1)).unwrap();
    // Without the subset field and without a marker, a parent was written around the library,
    // or before the field was added to the model: the child collection answers for it.
    let id = ObjectId::new();
    raw_parent(
        &store,
        doc! { "_id": id, "name": "x", "total_reviews": 0_i64 },
    )
    .await;
    let product = store.get(&id).await.unwrap().unwrap();
    assert!(product.recent_reviews.is_empty());
    let page = reviews.page(&id, &PageRequest::first(5)).await.unwrap();
    assert!(page.items.is_empty());
    let cases = [
        (
            doc! { "name": "x", "recent_reviews": "oops", "total_reviews": 0_i64 },
            "recent_reviews",
            "not an array",
        ),
        (
            doc! { "name": "x", "recent_reviews": [1, 2], "total_reviews": 0_i64 },
            "recent_reviews.0",
            "not an embedded child",
        ),
        (
            doc! { "name": "x", "recent_reviews": [good.clone(), { "_id": 7, "author": "a", "rating": "five", "date": bson::DateTime::now() }], "total_reviews": 0_i64 },
            "recent_reviews.1",
            "does not decode",
        ),
        (
            doc! { "name": 12, "recent_reviews": [], "total_reviews": 0_i64 },
            "name",
            "does not decode",
        ),
    ];
    for (mut doc, field, problem) in cases {
        let id = ObjectId::new();
        doc.insert("_id", id);
        raw_parent(&store, doc).await;
        let from_get = store.get(&id).await.unwrap_err();
        let from_page = reviews.page(&id, &PageRequest::first(5)).await;
        // A page reads the subset field only: it must fail on that field, and may not on others.
        let from_page = match from_page {
            Err(err) => Some(err),
            Ok(page) if field.starts_with("recent_reviews") => {
                panic!("{field} {problem}: a page was served: {page:?}")
            }
            Ok(_) => None,
        };
        for err in [Some(from_get), from_page].into_iter().flatten() {
            let text = err.to_string();
            assert!(text.contains(field), "{field}: {text}");
            assert!(text.contains(problem), "{problem}: {text}");
            match &err {
                Error::MalformedParent { collection, .. }
                | Error::MalformedChild { collection, .. } => {
                    assert_eq!(collection, "products")
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_children_in_the_collection_name_their_id_and_field() {
    let store = Store::<Product>::new(&replica_db().await);
    let product = Product::named("bad children");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let batch: Vec<Review> = (0..10).map(Review::at).collect();
    reviews.push_many(&product.id, &batch).await.unwrap();
    let bad = ObjectId::new();
    store
        .database()
        .collection::<Document>("reviews")
        .insert_one(doc! { "_id": bad, "product_id": product.id, "author": "x", "rating": 3.5, "date": bson::DateTime::from_millis(-1) })
        .await
        .unwrap();
    let err = reviews
        .page(&product.id, &PageRequest::first(50))
        .await
        .unwrap_err();
    match &err {
        Error::MalformedChild {
            collection,
            id,
            field,
            ..
        } => {
            assert_eq!(collection, "reviews");
            assert_eq!(**id, Bson::ObjectId(bad));
            assert_eq!(field, "rating");
        }
        other => panic!("unexpected {other:?}"),
    }
    use futures::StreamExt;
    let results: Vec<_> = reviews.all(&product.id).await.unwrap().collect().await;
    assert_eq!(results.len(), 11);
    assert!(matches!(results[10], Err(Error::MalformedChild { .. })));
}

#[tokio::test(flavor = "multi_thread")]
async fn children_of_no_parent_are_counted_by_kind_with_their_ids() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let product = Product::named("lamp");
    store.insert(&product).await.unwrap();
    reviews
        .push_many(&product.id, &[Review::at(1), Review::at(2)])
        .await
        .unwrap();
    assert_eq!(reviews.orphans().await.unwrap().total(), 0);
    let collection = store.database().collection::<Document>("reviews");
    let orphan = |key: Option<Bson>| {
        let mut child = bson_compat::to_document(&Review::at(3)).unwrap();
        if let Some(key) = key {
            child.insert("product_id", key);
        }
        child
    };
    let written = [
        orphan(None),
        orphan(Some(Bson::Null)),
        orphan(Some(Bson::Array(vec![Bson::ObjectId(product.id)]))),
        orphan(Some(Bson::ObjectId(ObjectId::new()))),
        orphan(Some(Bson::ObjectId(ObjectId::new()))),
        orphan(Some(Bson::String(product.id.to_hex()))),
    ];
    collection.insert_many(written.iter()).await.unwrap();
    let found = reviews.orphans().await.unwrap();
    assert_eq!(
        (found.keyless, found.invalid_key, found.no_parent),
        (2, 1, 3),
        "{found:?}"
    );
    assert_eq!(found.sample.len(), 5, "{found:?}");
    let ids: Vec<&Bson> = written.iter().map(|c| c.get("_id").unwrap()).collect();
    assert!(found.sample.iter().all(|id| ids.contains(&id)), "{found:?}");
}
