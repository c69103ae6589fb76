//! A delivery-app shop with 800 reviews: the document fully embedded against the subset layout
//! with the 10 latest embedded.
//!
//! `cargo run --example delivery_shops --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use rand::distr::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, DateTime, RawDocumentBuf};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Store, Subset};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    user: String,
    stars: i32,
    text: String,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "shops")]
struct Shop {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "shop_reviews",
        keep = 10,
        sort = "date desc",
        count = "review_count"
    )]
    reviews: Vec<Review>,
    #[serde(default)]
    review_count: i64,
}

fn word(rng: &mut impl Rng, len: usize) -> String {
    rng.sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let db = server
        .client()
        .await?
        .database("subset_example_delivery_shops");
    db.drop().await?;

    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let reviews: Vec<Review> = (0..800)
        .map(|_| Review {
            id: ObjectId::new(),
            user: word(&mut rng, 8),
            stars: rng.random_range(1..=5),
            text: word(&mut rng, 12),
            date: DateTime::from_millis(now - rng.random_range(0..90 * 24 * 3_600_000)),
        })
        .collect();
    let shop = Shop {
        id: ObjectId::new(),
        name: "Noodle Bar".into(),
        reviews: reviews.clone(),
        review_count: reviews.len() as i64,
    };

    // Fully embedded: what a naive model stores.
    db.collection::<Shop>("shops_embedded")
        .insert_one(&shop)
        .await?;
    // Subset: the 10 latest embedded, all 800 in their own collection.
    let store = Store::<Shop>::new(&db);
    store.ensure_indexes().await?;
    store.insert(&shop).await?;

    let size = |name: &'static str| {
        let coll = db.collection::<RawDocumentBuf>(name);
        async move {
            let raw = coll.find_one(doc! { "_id": shop.id }).await?;
            Ok::<_, mongodb::error::Error>(raw.map_or(0, |r| r.as_bytes().len()))
        }
    };
    let embedded = size("shops_embedded").await?;
    let subset = size("shops").await?;
    let stored = store.subset(Shop::REVIEWS).count(&shop.id).await?;
    println!(
        "shop with {} reviews ({stored} in `shop_reviews`)",
        reviews.len()
    );
    println!(
        "  fully embedded: {:>6} bytes ({:.1} KB)",
        embedded,
        embedded as f64 / 1000.0
    );
    println!(
        "  subset, keep 10: {:>5} bytes ({:.1} KB)",
        subset,
        subset as f64 / 1000.0
    );
    println!("  {:.0}x smaller", embedded as f64 / subset as f64);
    db.drop().await?;
    Ok(())
}
