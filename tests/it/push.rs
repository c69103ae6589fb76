//! The double write: capped `$push`, counts, retries, missing parents, concurrency.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Child, Error, Store, Subset, WriteMode};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Score {
    #[serde(rename = "_id")]
    id: i64,
    points: i32,
    at: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "players")]
struct Player {
    #[serde(rename = "_id")]
    id: String,
    // Highest points first; among equal points, the earliest first.
    #[subset(child = "scores", keep = 3, sort = "points desc, at asc")]
    best: Vec<Score>,
    // Ascending with keep = 1: the player's single earliest score.
    #[subset(child = "scores", key = "first_of", keep = 1, sort = "at asc")]
    first: Vec<Score>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[serde(rename_all = "camelCase")]
struct OrderLine {
    #[serde(rename = "_id")]
    line_id: ObjectId,
    placed_at: DateTime,
    unit_price: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[serde(rename_all = "camelCase")]
#[subset(collection = "shops")]
struct DeliveryShop {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "orderLines",
        keep = 2,
        sort = "placed_at desc",
        count = "order_count"
    )]
    latest_orders: Vec<OrderLine>,
    #[serde(default)]
    order_count: i32,
}

impl ExpectedOrder<Score> for Player {
    fn expected_order(field: &str, a: &Score, b: &Score) -> std::cmp::Ordering {
        match field {
            // `points desc, at asc`, then `_id` asc.
            "best" => (b.points, a.at, a.id).cmp(&(a.points, b.at, b.id)),
            // `at asc`, then `_id` asc.
            "first" => (a.at, a.id).cmp(&(b.at, b.id)),
            other => panic!("a subset of Player with no known order: {other}"),
        }
    }
}

fn player(id: &str) -> Player {
    Player {
        id: id.to_owned(),
        best: Vec::new(),
        first: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn push_keeps_the_latest_sorted_and_counts_them() {
    for store in stores::<Product>().await {
        let product = Product::named("lamp");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        // Reverse and shuffled insertion order: the subset is sorted by date, not by arrival.
        for millis in [5, 1, 9, 3, 7, 2, 8, 6, 4, 10] {
            reviews
                .push(&product.id, &Review::at(millis))
                .await
                .unwrap();
        }
        let got = store.get(&product.id).await.unwrap().unwrap();
        let dates: Vec<i64> = got
            .recent_reviews
            .iter()
            .map(|r| r.date.timestamp_millis())
            .collect();
        assert_eq!(dates, [10, 9, 8, 7, 6], "{:?}", store.mode().await);
        assert_eq!(got.total_reviews, 10);
        assert_eq!(reviews.count(&product.id).await.unwrap(), 10);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ties_are_broken_by_id_in_the_last_keys_direction() {
    for store in stores::<Product>().await {
        let product = Product::named("ties");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        // Eight reviews at the same instant: `_id` desc decides, the largest ids stay.
        let mut same: Vec<Review> = (0..8).map(|_| Review::at(42)).collect();
        same.reverse();
        for r in &same {
            reviews.push(&product.id, r).await.unwrap();
        }
        let mut ids: Vec<ObjectId> = same.iter().map(|r| r.id).collect();
        ids.sort();
        ids.reverse();
        let got = store.get(&product.id).await.unwrap().unwrap();
        let embedded: Vec<ObjectId> = got.recent_reviews.iter().map(|r| r.id).collect();
        assert_eq!(embedded, ids[..5]);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn multi_key_sort_asc_and_desc_and_keep_one() {
    for store in stores::<Player>().await {
        let p = player("ada");
        store.insert(&p).await.unwrap();
        let best = store.children(Player::BEST);
        let first = store.children(Player::FIRST);
        let scores = [
            (1, 50, 30),
            (2, 70, 20),
            (3, 70, 10),
            (4, 10, 5),
            (5, 70, 10),
            (6, 60, 1),
        ];
        for (id, points, at) in scores {
            let s = Score {
                id,
                points,
                at: DateTime::from_millis(at),
            };
            best.push(&p.id, &s).await.unwrap();
            // Two subsets on one collection are two sets of documents, told apart by key.
            let s = Score { id: id + 100, ..s };
            first.push(&p.id, &s).await.unwrap();
        }
        let got = store.get(&p.id).await.unwrap().unwrap();
        // points desc, at asc, then _id asc: (3,70,10) and (5,70,10) tie on both keys.
        let ids: Vec<i64> = got.best.iter().map(|s| s.id).collect();
        assert_eq!(ids, [3, 5, 2]);
        let ids: Vec<i64> = got.first.iter().map(|s| s.id).collect();
        assert_eq!(ids, [106]);
        assert_subset_true(&store, Player::BEST, &Bson::String(p.id.clone())).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn camel_case_renames_reach_updates_sorts_and_indexes() {
    for store in stores::<DeliveryShop>().await {
        store.ensure_indexes().await.unwrap();
        let shop = DeliveryShop {
            id: ObjectId::new(),
            latest_orders: Vec::new(),
            order_count: 0,
        };
        store.insert(&shop).await.unwrap();
        let orders = store.children(DeliveryShop::LATEST_ORDERS);
        for (millis, price) in [(3, 300), (1, 100), (2, 200)] {
            let line = OrderLine {
                line_id: ObjectId::new(),
                placed_at: DateTime::from_millis(millis),
                unit_price: price,
            };
            orders.push(&shop.id, &line).await.unwrap();
        }
        let db = store.database();
        let raw = db
            .collection::<Document>("shops")
            .find_one(doc! { "_id": shop.id })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            raw.get_i32("orderCount").ok(),
            None,
            "count is $inc'ed to int64"
        );
        assert_eq!(raw.get_i64("orderCount").unwrap(), 3);
        let embedded = raw.get_array("latestOrders").unwrap();
        let prices: Vec<i64> = embedded
            .iter()
            .map(|o| o.as_document().unwrap().get_i64("unitPrice").unwrap())
            .collect();
        assert_eq!(prices, [300, 200]);
        let child = db
            .collection::<Document>("orderLines")
            .find_one(doc! { "deliveryShopId": { "$exists": false }, "delivery_shop_id": shop.id })
            .await
            .unwrap()
            .expect("the default key is snake_case of the parent name");
        assert!(child.contains_key("placedAt"));
        let indexes = db
            .collection::<Document>("orderLines")
            .list_index_names()
            .await
            .unwrap();
        assert!(indexes.len() == 2, "{indexes:?}");
        let spec = orders.spec();
        assert_eq!(spec.field, "latestOrders");
        assert_eq!(spec.sort[0].field, "placedAt");
        assert_eq!(spec.count, Some("orderCount"));
        let got = store.get(&shop.id).await.unwrap().unwrap();
        assert_eq!(got.order_count, 3);
        assert_eq!(got.latest_orders.len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_push_is_neither_duplicated_nor_counted_twice() {
    for store in stores::<Product>().await {
        let product = Product::named("retry");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let review = Review::at(100);
        reviews.push(&product.id, &review).await.unwrap();
        reviews.push(&product.id, &review).await.unwrap();
        reviews
            .push_many(&product.id, &[review.clone(), Review::at(50)])
            .await
            .unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(got.recent_reviews.len(), 2);
        // Two children, stored once each and counted once each.
        assert_eq!(got.total_reviews, 2);
        assert_eq!(reviews.count(&product.id).await.unwrap(), 2);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_a_crash_between_the_writes_restores_the_subset() {
    // The crash window of the ordered path: the child is stored, the parent update never ran.
    let store = Store::<Product>::with_options(
        &replica_db().await,
        subset::StoreOptions::new().mode(WriteMode::Ordered),
    );
    let product = Product::named("crash");
    store.insert(&product).await.unwrap();
    let review = Review::at(7);
    let mut stored = bson_compat::to_document(&review).unwrap();
    stored.insert("product_id", product.id);
    store
        .database()
        .collection::<Document>("reviews")
        .insert_one(stored)
        .await
        .unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    reviews.push(&product.id, &review).await.unwrap();
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(got.recent_reviews, [review]);
    // Stored once. The retry cannot tell this child from one whose push was counted already,
    // so it does not count it: the count stays one short, the drift the README's table names
    // for this crash, until reconcile recounts.
    assert_eq!(reviews.count(&product.id).await.unwrap(), 1);
    assert_eq!(got.total_reviews, 0);
    let drift = reviews.reconcile(&product.id).await.unwrap();
    assert_eq!(drift.count, Some((0, 1)), "{drift:?}");
    assert_eq!(
        store.get(&product.id).await.unwrap().unwrap().total_reviews,
        1
    );
    assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_to_a_missing_parent_leaves_nothing_behind() {
    for store in stores::<Product>().await {
        let missing = ObjectId::new();
        let reviews = store.children(Product::RECENT_REVIEWS);
        for result in [
            reviews.push(&missing, &Review::at(1)).await,
            reviews
                .push_many(&missing, &[Review::at(2), Review::at(3)])
                .await,
        ] {
            match result {
                Err(Error::ParentNotFound { collection, id }) => {
                    assert_eq!(collection, "products");
                    assert_eq!(*id, Bson::ObjectId(missing));
                }
                other => panic!("expected ParentNotFound, got {other:?}"),
            }
        }
        let left = store
            .database()
            .collection::<Document>("reviews")
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(left, 0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_id_owned_by_another_parent_is_refused() {
    for store in stores::<Product>().await {
        let (a, b) = (Product::named("a"), Product::named("b"));
        store.insert(&a).await.unwrap();
        store.insert(&b).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let review = Review::at(1);
        reviews.push(&a.id, &review).await.unwrap();
        let err = reviews.push(&b.id, &review).await.unwrap_err();
        assert!(matches!(err, Error::ChildOwnedElsewhere { .. }), "{err}");
        let got = store.get(&b.id).await.unwrap().unwrap();
        assert!(got.recent_reviews.is_empty());
        assert_eq!(got.total_reviews, 0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn push_many_is_one_batch_in_order() {
    for store in stores::<Product>().await {
        let product = Product::named("batch");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let batch: Vec<Review> = (0..40).map(|i| Review::at((i * 7919) % 1000)).collect();
        reviews.push_many(&product.id, &batch).await.unwrap();
        reviews.push_many(&product.id, &[]).await.unwrap();
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(got.total_reviews, 40);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sixteen_concurrent_writers_keep_the_subset_exact() {
    for store in stores::<Product>().await {
        let product = Product::named("hot");
        store.insert(&product).await.unwrap();
        let mut writers = Vec::new();
        for w in 0..16_u64 {
            let store = store.clone();
            let id = product.id;
            writers.push(tokio::spawn(async move {
                let reviews = store.children(Product::RECENT_REVIEWS);
                // A small deterministic scramble of dates, with deliberate collisions.
                let mut x = w * 2_654_435_761 + 1;
                for _ in 0..200 {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let millis = ((x >> 33) % 50_000) as i64;
                    reviews.push(&id, &Review::at(millis)).await.unwrap();
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        let reviews = store.children(Product::RECENT_REVIEWS);
        assert_eq!(reviews.count(&product.id).await.unwrap(), 3_200);
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(got.total_reviews, 3_200);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_standalone_server_uses_ordered_writes() {
    let store = Store::<Product>::new(&standalone_db().await);
    assert_eq!(store.mode().await.unwrap(), WriteMode::Ordered);
    let product = Product::named("standalone");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    for i in 0..12 {
        reviews.push(&product.id, &Review::at(i)).await.unwrap();
    }
    let err = reviews
        .push(&ObjectId::new(), &Review::at(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ParentNotFound { .. }), "{err}");
    assert_eq!(reviews.count(&product.id).await.unwrap(), 12);
    assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;

    let replica = Store::<Product>::new(&replica_db().await);
    assert_eq!(replica.mode().await.unwrap(), WriteMode::Transactional);
}
