//! `subset` in a crate on bson 3: the derive, a push beyond `keep`, the product page and every
//! page of children, on the test kit's real server.

use mongodb::bson::oid::ObjectId;
use mongodb::bson::{doc, DateTime};
use serde::{Deserialize, Serialize};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Error, PageRequest, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "reviews",
        keep = 3,
        sort = "date desc",
        count = "total_reviews"
    )]
    recent_reviews: Vec<Review>,
    #[serde(default)]
    total_reviews: i64,
}

/// `subset::bson` is the driver's bson, and that is bson 3: `serialize_to_document` exists only
/// there (bson 2 calls it `to_document`).
#[test]
fn subset_bson_is_the_drivers_bson_3() {
    let id: subset::bson::oid::ObjectId = ObjectId::new();
    let stored = subset::bson::serialize_to_document(&Review {
        id,
        rating: 4,
        date: DateTime::from_millis(1),
    })
    .unwrap();
    assert_eq!(stored.get_object_id("_id").unwrap(), id);
}

#[tokio::test(flavor = "multi_thread")]
async fn insert_push_get_and_page() {
    let db = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod")
        .database()
        .await
        .expect("connect to the test mongod");
    let store = Store::<Product>::new(&db);
    store.ensure_indexes().await.unwrap();
    let product = Product {
        id: ObjectId::new(),
        name: "grinder".into(),
        recent_reviews: Vec::new(),
        total_reviews: 0,
    };
    store.insert(&product).await.unwrap();

    // Seven pushes to a subset that keeps three.
    let reviews = store.children(Product::RECENT_REVIEWS);
    let pushed: Vec<Review> = (1..=7)
        .map(|n| Review {
            id: ObjectId::new(),
            rating: n % 5 + 1,
            date: DateTime::from_millis(i64::from(n) * 1_000),
        })
        .collect();
    for review in &pushed {
        reviews.push(&product.id, review).await.unwrap();
    }
    let newest_first: Vec<Review> = pushed.iter().rev().cloned().collect();

    // The product page: the three newest embedded, all seven counted.
    let page = store
        .get(&product.id)
        .await
        .unwrap()
        .expect("inserted above");
    assert_eq!(page.recent_reviews, newest_first[..3]);
    assert_eq!(page.total_reviews, 7);

    // Every review, two at a time through the token, each exactly once and newest first.
    let mut seen = Vec::new();
    let mut request = PageRequest::first(2);
    loop {
        let page = reviews.page(&product.id, &request).await.unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items);
        match page.next {
            Some(next) => request = PageRequest::after(next.encode().parse().unwrap(), 2),
            None => break,
        }
    }
    assert_eq!(seen, newest_first);

    // A malformed stored child is named with its field: the decoder reads bson 3's errors as it
    // reads bson 2's (serde's message inside them).
    let children = db.collection::<mongodb::bson::Document>("reviews");
    let cases = [
        (doc! { "rating": "five" }, "invalid type"),
        (doc! {}, "missing field `rating`"),
    ];
    for (fields, problem) in cases {
        let id = ObjectId::new();
        let mut child = doc! { "_id": id, "product_id": product.id };
        child.extend(fields);
        child.insert("date", DateTime::from_millis(500));
        children.insert_one(&child).await.unwrap();
        let err = reviews
            .page(&product.id, &PageRequest::first(20))
            .await
            .unwrap_err();
        match err {
            Error::MalformedChild {
                field,
                problem: got,
                ..
            } => {
                assert_eq!(field, "rating");
                assert!(got.contains(problem), "{got}");
            }
            other => panic!("expected MalformedChild, got {other}"),
        }
        children.delete_one(doc! { "_id": id }).await.unwrap();
    }
}
