//! Product + reviews: the product page from one query. 1,250 reviews with 1 KB bodies pushed in
//! random date order; the product embeds previews (no body) of the latest 5 and of the 3 most
//! helpful, and keeps the number of reviews, of verified reviews and the rating sum. "More
//! reviews" goes on after the last preview; every review 20 at a time both ways; an update and
//! a remove; the document size against whole reviews embedded and against every review embedded.
//!
//! `cargo run --example product_reviews --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use std::cmp::Reverse;
use std::collections::HashSet;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
use rand::seq::{IndexedRandom, SliceRandom};
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
    helpful: i32,
    verified: bool,
    date: DateTime,
    body: String,
}

/// What the product page shows of a review. `helpful` is here because `most_helpful` sorts by
/// it; `verified` is not: the filtered view reads it from the whole review.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
struct ReviewPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    rating: i32,
    helpful: i32,
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
    latest: Vec<ReviewPreview>,
    #[subset(child = "reviews", keep = 3, sort = "helpful desc, date desc")]
    most_helpful: Vec<ReviewPreview>,
    // The page shows only how many reviews are verified, and a view needs `keep` of at least 1:
    // keep 1, the cheapest, whose count is the number wanted. The one preview it holds is the
    // latest verified review, which the page could badge.
    #[subset(
        child = "reviews",
        keep = 1,
        sort = "date desc",
        filter = "verified",
        count = "verified_reviews"
    )]
    latest_verified: Vec<ReviewPreview>,
    #[serde(default)]
    total_reviews: i64,
    // The sum of every review's rating, kept with the count: the average needs no scan.
    #[serde(default)]
    rating_total: i64,
    #[serde(default)]
    verified_reviews: i64,
}

impl Product {
    /// The average rating over every review, `None` before the first.
    fn average_rating(&self) -> Option<f64> {
        (self.total_reviews > 0).then(|| self.rating_total as f64 / self.total_reviews as f64)
    }
}

const REVIEWS: usize = 1_250;

const PHRASES: [&str; 8] = [
    "Grinds evenly from espresso to filter.",
    "A bit loud in the morning.",
    "The burrs needed a day to settle in.",
    "Retention is low, about a tenth of a gram.",
    "The hopper lid rattles when it runs.",
    "Stepless adjustment takes some patience.",
    "Customer service replaced a cracked catch cup within a week.",
    "Worth the price after a year of daily use.",
];

/// A review body of about 1 KB.
fn body(rng: &mut impl Rng, i: usize) -> String {
    let mut text = format!("Review {i}.");
    while text.len() < 1_000 {
        text.push(' ');
        text.push_str(PHRASES.choose(rng).expect("phrases"));
    }
    text
}

fn preview(r: &Review) -> ReviewPreview {
    ReviewPreview {
        id: r.id,
        author: r.author.clone(),
        rating: r.rating,
        helpful: r.helpful,
        date: r.date,
    }
}

/// Every review newest first, ties by `_id` descending: the order of `latest`, written out here.
fn by_date(all: &[Review]) -> Vec<&Review> {
    let mut sorted: Vec<&Review> = all.iter().collect();
    sorted.sort_by_key(|r| Reverse((r.date, r.id)));
    sorted
}

/// The order of `most_helpful`, written out here.
fn by_helpful(all: &[Review]) -> Vec<&Review> {
    let mut sorted: Vec<&Review> = all.iter().collect();
    sorted.sort_by_key(|r| Reverse((r.helpful, r.date, r.id)));
    sorted
}

/// Asserts the stored product page against `all`, computed here from the reviews pushed: the
/// previews of each view, the counts and the average.
fn assert_page(page: &Product, all: &[Review]) {
    let latest: Vec<ReviewPreview> = by_date(all).into_iter().take(5).map(preview).collect();
    let helpful: Vec<ReviewPreview> = by_helpful(all).into_iter().take(3).map(preview).collect();
    let verified: Vec<&Review> = by_date(all).into_iter().filter(|r| r.verified).collect();
    assert_eq!(page.latest, latest, "the latest 5");
    assert_eq!(page.most_helpful, helpful, "the 3 most helpful");
    assert_eq!(
        page.latest_verified,
        [preview(verified[0])],
        "latest verified"
    );
    assert_eq!(page.total_reviews, all.len() as i64);
    assert_eq!(page.verified_reviews, verified.len() as i64);
    let truth = all.iter().map(|r| i64::from(r.rating)).sum::<i64>() as f64 / all.len() as f64;
    let average = page.average_rating().expect("reviews exist");
    assert!((average - truth).abs() < 1e-9, "the running sum is exact");
}

fn print_page(page: &Product) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "\n{} — {} reviews, {:.2}★ on average, {} verified",
        page.name,
        page.total_reviews,
        page.average_rating().ok_or("no reviews")?,
        page.verified_reviews
    );
    for (title, previews) in [
        ("latest", &page.latest),
        ("most helpful", &page.most_helpful),
    ] {
        println!("  {title} {}:", previews.len());
        for r in previews {
            println!(
                "    {}  {}★  {:<12}  {} found it helpful",
                r.date.try_to_rfc3339_string()?,
                r.rating,
                r.author,
                r.helpful
            );
        }
    }
    Ok(())
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
        .database("subset_example_product_reviews");
    db.drop().await?;

    let store = Store::<Product>::new(&db);
    store.ensure_indexes().await?;
    println!("server {} ({:?} writes)", server.uri(), store.mode().await?);

    // Inserted with no previews: a preview is not the review, so reviews come in through pushes.
    let product = Product {
        id: ObjectId::new(),
        name: "Espresso grinder".into(),
        latest: Vec::new(),
        most_helpful: Vec::new(),
        latest_verified: Vec::new(),
        total_reviews: 0,
        rating_total: 0,
        verified_reviews: 0,
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
            helpful: rng.random_range(0..250),
            verified: rng.random_bool(0.7),
            date: DateTime::from_millis(now - rng.random_range(0..365 * 24 * 3_600_000)),
            body: body(&mut rng, i),
        })
        .collect();
    reviews.shuffle(&mut rng);
    // Typed by the whole review; a push through it updates all three views in one update.
    let handle = store.children(Product::LATEST);
    for review in &reviews {
        handle.push(&product.id, review).await?;
    }

    // The product page: one query, previews of the latest 5 and of the 3 most helpful, the
    // counts and the rating sum are embedded.
    let page = store.get(&product.id).await?.ok_or("product vanished")?;
    assert_page(&page, &reviews);
    print_page(&page)?;

    // "More reviews": whole reviews, 20 at a time, right after the last preview shown.
    let last = page.latest.last().ok_or("no previews")?;
    let mut request = PageRequest::after(handle.cursor_of(&product.id, last)?, 20);
    let mut ids: Vec<ObjectId> = page.latest.iter().map(|r| r.id).collect();
    loop {
        let more = handle.page(&product.id, &request).await?;
        ids.extend(more.items.iter().map(|r| r.id));
        match more.next {
            Some(next) => request = PageRequest::after(next, 20),
            None => break,
        }
    }
    let truth: Vec<ObjectId> = by_date(&reviews).iter().map(|r| r.id).collect();
    assert_eq!(
        ids, truth,
        "previews + more reviews = every review in date order"
    );
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        REVIEWS,
        "none twice"
    );
    println!(
        "\nmore reviews: {} after the {} previews, none twice, none missing",
        ids.len() - page.latest.len(),
        page.latest.len()
    );

    // Every review, 20 at a time from the first: pages hold whole reviews, bodies included.
    let mut request = PageRequest::first(20);
    let (mut pages, mut seen, mut last): (usize, usize, Option<DateTime>) = (0, 0, None);
    loop {
        let page = handle.page(&product.id, &request).await?;
        pages += 1;
        for r in &page.items {
            assert!(last.is_none_or(|l| l >= r.date), "pages are in date order");
            assert!(r.body.len() >= 1_000, "a page holds whole reviews");
            last = Some(r.date);
        }
        seen += page.items.len();
        match page.next {
            Some(next) => request = PageRequest::after(next, 20),
            None => break,
        }
    }
    assert_eq!(seen, REVIEWS);
    println!("paged through {seen} reviews in {pages} pages of 20");

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

    // The latest verified review turns out not to be: the filtered view takes the next one and
    // its count drops, the other views keep their previews.
    let latest_verified = page.latest_verified[0].id;
    let flipped = reviews
        .iter_mut()
        .find(|r| r.id == latest_verified)
        .ok_or("latest verified review not pushed")?;
    flipped.verified = false;
    handle.update(&product.id, flipped).await?;
    let page = store.get(&product.id).await?.ok_or("product vanished")?;
    assert_page(&page, &reviews);
    assert_ne!(page.latest_verified[0].id, latest_verified);
    println!(
        "marked one review unverified: {} verified",
        page.verified_reviews
    );

    // The most helpful review is removed: the next one is backfilled and the count and the
    // average leave it out.
    let gone = page.most_helpful[0].id;
    handle.remove(&product.id, &gone).await?;
    reviews.retain(|r| r.id != gone);
    let page = store.get(&product.id).await?.ok_or("product vanished")?;
    assert_page(&page, &reviews);
    assert_eq!(handle.count(&product.id).await?, REVIEWS as u64 - 1);
    println!(
        "removed the most helpful review: {} reviews, {:.2}★ on average, {} verified",
        page.total_reviews,
        page.average_rating().ok_or("no reviews")?,
        page.verified_reviews
    );

    // Sizes: the stored product; the same product with the same embedded reviews whole (bodies
    // included); and with every review embedded whole.
    let stored = db
        .collection::<RawDocumentBuf>("products")
        .find_one(doc! { "_id": product.id })
        .await?
        .ok_or("product vanished")?;
    let stored_doc: Document = subset::bson_compat::from_slice(stored.as_bytes())?;
    let whole = |id: &Bson| -> Result<Bson, Box<dyn std::error::Error>> {
        let review = reviews
            .iter()
            .find(|r| Bson::ObjectId(r.id) == *id)
            .ok_or("an embedded review that was not pushed")?;
        Ok(subset::bson_compat::to_bson(review)?)
    };
    let mut with_whole = stored_doc.clone();
    for field in ["latest", "most_helpful", "latest_verified"] {
        let embedded = stored_doc.get_array(field)?;
        let reviews = embedded
            .iter()
            .map(|e| match e {
                Bson::Document(d) => whole(d.get("_id").unwrap_or(&Bson::Null)),
                _ => Err("an embedded review that is not a document".into()),
            })
            .collect::<Result<Vec<Bson>, _>>()?;
        with_whole.insert(field, reviews);
    }
    let mut embedded: Document = stored_doc.clone();
    embedded.remove("most_helpful");
    embedded.remove("latest_verified");
    embedded.insert("latest", subset::bson_compat::to_bson(&by_date(&reviews))?);
    let len = |d: &Document| subset::bson_compat::to_vec(d).map(|v| v.len());
    let (previews, with_whole, full) =
        (stored.as_bytes().len(), len(&with_whole)?, len(&embedded)?);
    println!("\nproduct document, {} reviews:", page.total_reviews);
    println!("  subset with previews:      {previews:>7} bytes");
    println!(
        "  subset with whole reviews: {with_whole:>7} bytes ({:.1}x)",
        with_whole as f64 / previews as f64
    );
    println!(
        "  fully embedded:            {full:>7} bytes ({:.0}x)",
        full as f64 / previews as f64
    );
    assert!(previews < with_whole && with_whole < full);
    db.drop().await?;
    Ok(())
}
