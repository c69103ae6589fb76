//! A delivery-app shop with 800 reviews: the subset layout, embedding previews (user, stars,
//! date) of the 10 latest with the text only in the child collection, against the same 10
//! embedded whole and against every review embedded whole.
//!
//! `cargo run --example delivery_shops --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use std::cmp::Reverse;

use futures::TryStreamExt;
use rand::distr::Alphanumeric;
use rand::Rng;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, DateTime, Document, RawDocumentBuf};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, PageRequest, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    user: String,
    stars: i32,
    text: String,
    date: DateTime,
}

/// What the shop page lists of a review; the text is read only when a review is opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    user: String,
    stars: i32,
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
    reviews: Vec<ReviewPreview>,
    #[serde(default)]
    review_count: i64,
}

const REVIEWS: usize = 800;

fn word(rng: &mut impl Rng, len: usize) -> String {
    rng.sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// A review text of 5 to 60 words: most are a line, some a paragraph.
fn text(rng: &mut impl Rng) -> String {
    let words = rng.random_range(5..=60);
    (0..words)
        .map(|_| {
            let len = rng.random_range(2..=9);
            word(rng, len)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn preview(r: &Review) -> ReviewPreview {
    ReviewPreview {
        id: r.id,
        user: r.user.clone(),
        stars: r.stars,
        date: r.date,
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Returned from `main`, an error would print as its `Debug`, without the advice its `Display`
    // gives: print that, then each cause it does not already quote.
    let Err(error) = run().await else {
        return std::process::ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    let shown = error.to_string();
    std::iter::successors(error.source(), |e| e.source())
        .filter(|cause| !shown.contains(&cause.to_string()))
        .for_each(|cause| eprintln!("caused by: {cause}"));
    std::process::ExitCode::FAILURE
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let db = server
        .client()
        .await?
        .database("subset_example_delivery_shops");
    db.drop().await?;

    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let reviews: Vec<Review> = (0..REVIEWS)
        .map(|_| Review {
            id: ObjectId::new(),
            user: word(&mut rng, 8),
            stars: rng.random_range(1..=5),
            text: text(&mut rng),
            date: DateTime::from_millis(now - rng.random_range(0..90 * 24 * 3_600_000)),
        })
        .collect();
    let mut newest: Vec<&Review> = reviews.iter().collect();
    newest.sort_by_key(|r| Reverse((r.date, r.id)));

    // Subset: previews of the 10 latest embedded, all 800 whole in their own collection. The
    // shop goes in without previews (a preview cannot be stored as a review), then the reviews.
    let shop = Shop {
        id: ObjectId::new(),
        name: "Noodle Bar".into(),
        reviews: Vec::new(),
        review_count: 0,
    };
    let store = Store::<Shop>::new(&db);
    store.ensure_indexes().await?;
    store.insert(&shop).await?;
    let handle = store.children(Shop::REVIEWS);
    handle.push_many(&shop.id, &reviews).await?;

    let page = store.get(&shop.id).await?.ok_or("shop vanished")?;
    let latest: Vec<ReviewPreview> = newest.iter().take(10).map(|r| preview(r)).collect();
    assert_eq!(page.reviews, latest, "previews of the 10 latest");
    assert_eq!(page.review_count, REVIEWS as i64);
    let stored = handle.count(&shop.id).await?;
    assert_eq!(stored, REVIEWS as u64);
    // The text is in the child collection: a page holds whole reviews.
    let first = handle.page(&shop.id, &PageRequest::first(10)).await?;
    assert!(first.items.iter().eq(newest.iter().take(10).copied()));

    // The same shop with the same 10 reviews embedded whole, and with all 800 embedded whole
    // (what a naive model stores); each in a collection of its own, to measure as stored.
    let raw = db
        .collection::<Document>("shops")
        .find_one(doc! { "_id": shop.id })
        .await?
        .ok_or("shop vanished")?;
    let mut embedded_keys: Vec<&str> = raw.get_array("reviews")?[0]
        .as_document()
        .ok_or("an embedded review that is not a document")?
        .keys()
        .map(String::as_str)
        .collect();
    embedded_keys.sort_unstable();
    assert_eq!(embedded_keys, ["_id", "date", "stars", "user"], "no text");
    let mut whole = raw.clone();
    whole.insert("reviews", subset::bson_compat::to_bson(&newest[..10])?);
    db.collection::<Document>("shops_whole")
        .insert_one(&whole)
        .await?;
    let mut embedded = raw.clone();
    embedded.insert("reviews", subset::bson_compat::to_bson(&reviews)?);
    db.collection::<Document>("shops_embedded")
        .insert_one(&embedded)
        .await?;
    let back: Vec<Review> = db
        .collection::<Document>("shops_embedded")
        .find_one(doc! { "_id": shop.id })
        .await?
        .ok_or("embedded copy vanished")?
        .get_array("reviews")?
        .iter()
        .map(|r| subset::bson_compat::from_bson(r.clone()))
        .collect::<Result<_, _>>()?;
    assert_eq!(back, reviews, "the fully embedded copy holds every review");
    let children: Vec<Review> = handle.all(&shop.id).await?.try_collect().await?;
    assert!(
        children.iter().eq(newest.iter().copied()),
        "the child collection holds every review whole, newest first"
    );

    let size = |name: &'static str| {
        let coll = db.collection::<RawDocumentBuf>(name);
        async move {
            let raw = coll.find_one(doc! { "_id": shop.id }).await?;
            Ok::<_, mongodb::error::Error>(raw.map_or(0, |r| r.as_bytes().len()))
        }
    };
    let previews = size("shops").await?;
    let whole = size("shops_whole").await?;
    let embedded = size("shops_embedded").await?;
    assert!(0 < previews && previews < whole && whole < embedded);
    let text_bytes: usize = reviews.iter().map(|r| r.text.len()).sum();
    println!(
        "shop with {} reviews ({stored} in `shop_reviews`, {:.0} bytes of text each on average)",
        page.review_count,
        text_bytes as f64 / REVIEWS as f64
    );
    println!(
        "  fully embedded:          {:>6} bytes ({:.1} KB)",
        embedded,
        embedded as f64 / 1000.0
    );
    println!(
        "  subset, 10 whole:        {:>6} bytes ({:.1} KB)",
        whole,
        whole as f64 / 1000.0
    );
    println!(
        "  subset, 10 previews:     {:>6} bytes ({:.1} KB)",
        previews,
        previews as f64 / 1000.0
    );
    println!(
        "  previews: {:.0}x smaller than fully embedded, {:.1}x smaller than 10 whole",
        embedded as f64 / previews as f64,
        whole as f64 / previews as f64
    );
    db.drop().await?;
    Ok(())
}
