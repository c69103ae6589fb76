//! Product + reviews: 1,250 reviews pushed in random date order, a product page from one query,
//! every review 20 at a time, and the document size against a fully-embedded copy.
//!
//! `cargo run --example product_reviews --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use bson::oid::ObjectId;
use bson::{doc, DateTime, RawDocumentBuf};
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::testkit::{MongoServer, Topology};
use subset::{Child, PageRequest, Store, Subset};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    rating: i32,
    comment: String,
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
        keep = 5,
        sort = "date desc",
        count = "total_reviews",
        sum = "rating_total = rating"
    )]
    recent_reviews: Vec<Review>,
    #[serde(default)]
    total_reviews: i64,
    // The sum of every review's rating, kept with the count: the average needs no scan.
    #[serde(default)]
    rating_total: i64,
}

impl Product {
    /// The average rating over every review, `None` before the first.
    fn average_rating(&self) -> Option<f64> {
        (self.total_reviews > 0).then(|| self.rating_total as f64 / self.total_reviews as f64)
    }
}

const REVIEWS: usize = 1_250;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let db = server
        .client()
        .await?
        .database("subset_example_product_reviews");
    db.drop().await?;

    let store = Store::<Product>::new(&db);
    store.ensure_indexes().await?;
    println!("server {} ({:?} writes)", server.uri(), store.mode().await?);

    let product = Product {
        id: ObjectId::new(),
        name: "Espresso grinder".into(),
        recent_reviews: Vec::new(),
        total_reviews: 0,
        rating_total: 0,
    };
    store.insert(&product).await?;

    // 1,250 reviews over the last year, pushed in random order.
    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let mut reviews: Vec<Review> = (0..REVIEWS)
        .map(|i| Review {
            id: ObjectId::new(),
            author: format!("customer{:04}", rng.random_range(0..10_000)),
            rating: rng.random_range(1..=5),
            comment: format!("review number {i}: grinds evenly, a bit loud"),
            date: DateTime::from_millis(now - rng.random_range(0..365 * 24 * 3_600_000)),
        })
        .collect();
    reviews.shuffle(&mut rng);
    let handle = store.subset(Product::RECENT_REVIEWS);
    for review in &reviews {
        handle.push(&product.id, review).await?;
    }

    // The product page: one query, the five latest reviews, the total and the rating sum are
    // embedded.
    let page = store.get(&product.id).await?.ok_or("product vanished")?;
    let average = page.average_rating().ok_or("no reviews")?;
    let truth = reviews.iter().map(|r| i64::from(r.rating)).sum::<i64>() as f64 / REVIEWS as f64;
    assert!((average - truth).abs() < 1e-9, "the running sum is exact");
    println!(
        "\n{} — {} reviews, {:.2}★ on average; latest {}:",
        page.name,
        page.total_reviews,
        average,
        page.recent_reviews.len()
    );
    for r in &page.recent_reviews {
        println!(
            "  {}  {}★  {}",
            r.date.try_to_rfc3339_string()?,
            r.rating,
            r.author
        );
    }

    // Every review, 20 at a time: page 1 from the embedded subset, the rest by keyset.
    let mut request = PageRequest::first(20);
    let (mut pages, mut seen, mut last): (usize, usize, Option<DateTime>) = (0, 0, None);
    loop {
        let page = handle.page(&product.id, &request).await?;
        pages += 1;
        for r in &page.items {
            assert!(last.is_none_or(|l| l >= r.date), "pages are in date order");
            last = Some(r.date);
        }
        seen += page.items.len();
        match page.next {
            Some(next) => request = PageRequest::after(next, 20),
            None => break,
        }
    }
    println!("\npaged through {seen} reviews in {pages} pages of 20");

    // And back from the end: the same reviews, each backward page in date order too.
    let mut request = PageRequest::last(20);
    let (mut back, mut newer): (usize, Option<DateTime>) = (0, None);
    loop {
        let page = handle.page(&product.id, &request).await?;
        for r in page.items.iter().rev() {
            assert!(newer.is_none_or(|n| n <= r.date), "pages are in date order");
            newer = Some(r.date);
        }
        back += page.items.len();
        match page.previous {
            Some(previous) => request = PageRequest::before(previous, 20),
            None => break,
        }
    }
    assert_eq!(back, seen, "the same reviews both ways");

    // Size of the stored product against the same product with every review embedded.
    let stored = db
        .collection::<RawDocumentBuf>("products")
        .find_one(doc! { "_id": product.id })
        .await?
        .ok_or("product vanished")?;
    let mut embedded = subset::bson_compat::to_document(&product)?;
    embedded.insert("recent_reviews", subset::bson_compat::to_bson(&reviews)?);
    embedded.insert("total_reviews", REVIEWS as i64);
    embedded.insert("rating_total", page.rating_total);
    let full = subset::bson_compat::to_vec(&embedded)?.len();
    println!(
        "product document: {} bytes as a subset, {} bytes fully embedded ({:.0}x)",
        stored.as_bytes().len(),
        full,
        full as f64 / stored.as_bytes().len() as f64
    );
    db.drop().await?;
    Ok(())
}
