//! Experiment 7, preview subsets: the same products and reviews, with reviews of about 1 KB,
//! stored twice: once embedding whole reviews (`Vec<Review>`, keep 10) and once embedding
//! previews of them (`Vec<ReviewPreview>`: `_id`, author, rating and date, keep 10), each
//! layout with its own parent and child collections. Compared: the parent documents' size,
//! product-page reads (`Store::get`) per second, and the latency of one `push` into a full
//! subset.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use futures::{StreamExt, TryStreamExt};
use mongodb::Database;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{spec::SubsetSpec, Child, Store, Subset, SubsetField};

use crate::data::{sentence, DataSet, ProductInfo, Review, PAGE_REVIEWS};
use crate::measure::{closed_loop, side_by_side, Rounds, Run, Runs, Task, Turn};
use crate::stats::{quantile, sorted, Spread};
use crate::Res;

/// Products per layout.
pub const PRODUCTS: usize = 300;
/// Reviews per product, written with one `push_many` each.
pub const REVIEWS_EACH: usize = 50;
/// Characters of each review's `comment` (it ends within one word past this).
pub const COMMENT_CHARS: usize = 1000;
/// Concurrent tasks reading product pages.
pub const TASKS: usize = 4;
/// Concurrent `push_many` calls while loading.
const LOAD_TASKS: usize = 4;

/// What a product page shows of a review: the full type's fields, minus `helpful` and the
/// 1 KB `comment`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
pub struct ReviewPreview {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub author: String,
    pub rating: i32,
    pub date: DateTime,
}

/// The product embedding its 10 latest reviews whole.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "previews_whole")]
pub struct WholeProduct {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    pub description: String,
    pub category: String,
    pub price: f64,
    #[subset(
        child = "previews_whole_reviews",
        keep = 10,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

/// The same product embedding previews of its 10 latest reviews; the child collection holds
/// the whole reviews.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "previews_preview")]
pub struct PreviewProduct {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    pub description: String,
    pub category: String,
    pub price: f64,
    #[subset(
        child = "previews_preview_reviews",
        keep = 10,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent: Vec<ReviewPreview>,
    #[serde(default)]
    pub total_reviews: i64,
}

/// What the experiment needs of either parent type.
trait Page: Subset<Id = ObjectId> {
    /// The subset field, typed by the whole review in both layouts.
    const FIELD: SubsetField<Self, Review>;
    /// The layout's name in the report.
    const NAME: &'static str;
    fn empty(info: ProductInfo) -> Self;
    /// Reviews shown on the page, and the count.
    fn shown(&self) -> (usize, i64);
}

impl Page for WholeProduct {
    const FIELD: SubsetField<Self, Review> = WholeProduct::RECENT;
    const NAME: &'static str = "whole reviews (`Vec<Review>`)";
    fn empty(info: ProductInfo) -> Self {
        WholeProduct {
            id: info.id,
            name: info.name,
            description: info.description,
            category: info.category,
            price: info.price,
            recent: Vec::new(),
            total_reviews: 0,
        }
    }
    fn shown(&self) -> (usize, i64) {
        (self.recent.len(), self.total_reviews)
    }
}

impl Page for PreviewProduct {
    const FIELD: SubsetField<Self, Review> = PreviewProduct::RECENT;
    const NAME: &'static str = "previews (`Vec<ReviewPreview>`)";
    fn empty(info: ProductInfo) -> Self {
        PreviewProduct {
            id: info.id,
            name: info.name,
            description: info.description,
            category: info.category,
            price: info.price,
            recent: Vec::new(),
            total_reviews: 0,
        }
    }
    fn shown(&self) -> (usize, i64) {
        (self.recent.len(), self.total_reviews)
    }
}

/// One layout's figures.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: &'static str,
    /// Mean and median `$bsonSize` of the parent documents after the load.
    pub parent_mean: f64,
    pub parent_median: f64,
    /// Mean `$bsonSize` of one embedded element (a whole review, or a preview).
    pub element_mean: f64,
    /// Mean `$bsonSize` of a stored child (the whole review and its parent key).
    pub child_mean: f64,
    /// Product pages per second, per round.
    pub reads: Spread,
    /// Per-round read p50 and p99, ms.
    pub read_p50: Spread,
    pub read_p99: Spread,
    /// Per-round `push` p50 and p99, ms.
    pub push_p50: Spread,
    pub push_p99: Spread,
}

#[derive(Debug, Clone)]
pub struct Result {
    pub rounds: usize,
    pub warmup: f64,
    pub seconds: f64,
    pub pushes: usize,
    /// Seconds to write both layouts.
    pub load_secs: f64,
    pub whole: Row,
    pub preview: Row,
    /// Mean whole parent over mean preview parent.
    pub bytes_ratio: f64,
    /// Per round: preview over whole pages/s.
    pub read_ratio: Spread,
    /// Per round: preview over whole push p50.
    pub push_ratio: Spread,
    /// Seconds the whole experiment took.
    pub total_secs: f64,
}

/// One layout's store and the product `_id`s.
struct Side<P> {
    store: Store<P>,
    ids: Arc<Vec<ObjectId>>,
}

/// Review `k` of product `i` with its comment made about 1 KB long, deterministically.
fn long(data: &DataSet, mut review: Review, i: usize, k: u64) -> Review {
    let mut rng =
        StdRng::seed_from_u64(data.seed ^ (i as u64).wrapping_mul(0x9E37_79B9) ^ (k << 32));
    review.comment = sentence(&mut rng, COMMENT_CHARS, COMMENT_CHARS);
    review
}

/// The one subset field of `P`.
fn spec<P: Subset>() -> Res<&'static SubsetSpec> {
    P::SUBSETS.first().ok_or_else(|| "no subset field".into())
}

impl<P: Page> Side<P> {
    /// Inserts the products through the library, then each one's reviews with one `push_many`.
    async fn load(db: &Database, data: &DataSet, reviews: &[Vec<Review>]) -> Res<Self> {
        let store = Store::<P>::new(db);
        store.ensure_indexes().await?;
        let ids: Vec<ObjectId> = (0..data.products).map(|i| data.product_id(i)).collect();
        for i in 0..data.products {
            store.insert(&P::empty(data.info(i))).await?;
        }
        let handle = store.children(P::FIELD);
        futures::stream::iter(ids.iter().zip(reviews))
            .map(|(id, r)| handle.push_many(id, r).into_future())
            .buffer_unordered(LOAD_TASKS)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(Side {
            store,
            ids: Arc::new(ids),
        })
    }

    /// (mean parent, median parent, mean element, mean child) `$bsonSize`s, in bytes.
    async fn sizes(&self) -> Res<(f64, f64, f64, f64)> {
        let db = self.store.database();
        let spec = spec::<P>()?;
        let element = format!("${}", spec.field);
        let mut parents = Vec::new();
        let mut elements = Vec::new();
        let mut cursor = db
            .collection::<Document>(P::COLLECTION)
            .aggregate([doc! { "$project": {
                "_id": 0,
                "size": { "$bsonSize": "$$ROOT" },
                "elements": { "$map": { "input": element, "in": { "$bsonSize": "$$this" } } },
            } }])
            .await?;
        while let Some(d) = cursor.try_next().await? {
            parents.push(number(d.get("size"))?);
            for e in d.get_array("elements")? {
                elements.push(number(Some(e))?);
            }
        }
        let mut cursor = db
            .collection::<Document>(spec.child_collection)
            .aggregate([doc! { "$group": {
                "_id": Bson::Null,
                "size": { "$avg": { "$bsonSize": "$$ROOT" } },
            } }])
            .await?;
        let child_mean = match cursor.try_next().await? {
            Some(d) => number(d.get("size"))?,
            None => f64::NAN,
        };
        let parents = sorted(parents);
        Ok((
            mean(&parents),
            quantile(&parents, 0.5),
            mean(&elements),
            child_mean,
        ))
    }

    /// Product-page reads of uniformly random products by [`TASKS`] tasks: `warmup` not
    /// recorded, then `duration` measured.
    async fn reads(&self, warmup: Duration, duration: Duration, seed: u64) -> Res<Run> {
        let readers = |seed: u64| {
            (0..TASKS).map(move |t| Reader {
                store: self.store.clone(),
                ids: Arc::clone(&self.ids),
                rng: StdRng::seed_from_u64(seed ^ (t as u64 + 1)),
            })
        };
        closed_loop(readers(seed ^ 0x5EED), Duration::ZERO, warmup).await?;
        closed_loop(readers(seed), Duration::ZERO, duration).await
    }

    /// Pushes `review` into product `i`'s full subset.
    async fn push(&self, i: usize, review: &Review) -> Res<()> {
        let handle = self.store.children(P::FIELD);
        handle.push(&self.ids[i % self.ids.len()], review).await?;
        Ok(())
    }

    /// Checks that one product embeds exactly the fields of `keys` in each element.
    async fn check_keys(&self, keys: &[&str]) -> Res<()> {
        let parent = self
            .store
            .database()
            .collection::<Document>(P::COLLECTION)
            .find_one(doc! { "_id": self.ids[0] })
            .await?
            .ok_or("missing product")?;
        for e in parent.get_array(spec::<P>()?.field)? {
            let mut got: Vec<&str> = e
                .as_document()
                .ok_or("an embedded element is not a document")?
                .keys()
                .map(String::as_str)
                .collect();
            got.sort_unstable();
            let mut want = keys.to_vec();
            want.sort_unstable();
            if got != want {
                return Err(format!("{}: an embedded element holds {got:?}", P::NAME).into());
            }
        }
        Ok(())
    }
}

/// A task reading the pages of uniformly random products.
struct Reader<P> {
    store: Store<P>,
    ids: Arc<Vec<ObjectId>>,
    rng: StdRng,
}

impl<P: Page> Task for Reader<P> {
    async fn op(&mut self) -> Res<()> {
        let id = &self.ids[self.rng.random_range(0..self.ids.len())];
        let page = self.store.get(id).await?.ok_or("missing product")?;
        let (shown, total) = page.shown();
        if shown != PAGE_REVIEWS || total < REVIEWS_EACH as i64 {
            return Err(format!("{}: {shown} of {total} shown", P::NAME).into());
        }
        Ok(())
    }
}

fn number(b: Option<&Bson>) -> Res<f64> {
    match b {
        Some(Bson::Int32(n)) => Ok(f64::from(*n)),
        Some(Bson::Int64(n)) => Ok(*n as f64),
        Some(Bson::Double(n)) => Ok(*n),
        other => Err(format!("not a number: {other:?}").into()),
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The experiment on `db` (dropped first and last).
pub async fn run(
    db: &Database,
    pushes: usize,
    rounds: usize,
    warmup: Duration,
    duration: Duration,
    seed: u64,
) -> Res<Result> {
    let started = Instant::now();
    db.drop().await?;
    let data = DataSet {
        products: PRODUCTS,
        min_reviews: REVIEWS_EACH,
        max_reviews: REVIEWS_EACH,
        seed,
    };
    let reviews: Vec<Vec<Review>> = (0..PRODUCTS)
        .map(|i| {
            (0..data.chunks(i))
                .flat_map(|c| data.chunk(i, c))
                .enumerate()
                .map(|(k, r)| long(&data, r, i, k as u64))
                .collect()
        })
        .collect();
    let load = Instant::now();
    let whole = Side::<WholeProduct>::load(db, &data, &reviews).await?;
    let preview = Side::<PreviewProduct>::load(db, &data, &reviews).await?;
    let load_secs = load.elapsed().as_secs_f64();
    drop(reviews);
    whole
        .check_keys(&["_id", "author", "rating", "helpful", "comment", "date"])
        .await?;
    preview
        .check_keys(&["_id", "author", "rating", "date"])
        .await?;
    let whole_sizes = whole.sizes().await?;
    let preview_sizes = preview.sizes().await?;

    // Product-page reads, the layouts back to back in each round, alternating which goes first.
    let schedule = Rounds {
        rounds,
        sides: 2,
        shift: 1,
    };
    let reads = schedule
        .run(async |turn| {
            let seed = seed ^ ((turn.round * 10 + turn.side) as u64);
            let run = if turn.side == 0 {
                whole.reads(warmup, duration, seed).await?
            } else {
                preview.reads(warmup, duration, seed).await?
            };
            Ok(Some(run))
        })
        .await?;

    // One new review, newer than every embedded one, pushed into each layout in turn (the same
    // review and product for both, alternating which goes first).
    let mut next = 0_u64;
    let mut push_pair = |k: usize| {
        next += 1;
        let i = k % PRODUCTS;
        long(&data, data.new_review(i, next), i, next + 1_000_000)
    };
    for k in 0..PRODUCTS.min(pushes) {
        let review = push_pair(k);
        side_by_side(true, whole.push(k, &review), preview.push(k, &review)).await?;
    }
    let mut push_lat = Runs::new(2);
    for round in 0..rounds {
        let mut lat: [Vec<f64>; 2] = Default::default();
        for k in 0..pushes {
            let review = push_pair(k);
            let pair = side_by_side(k % 2 == 0, whole.push(k, &review), preview.push(k, &review));
            for (l, ms) in lat.iter_mut().zip(pair.await?) {
                l.push(ms);
            }
        }
        for (side, l) in lat.into_iter().enumerate() {
            push_lat.record(Turn { round, side }, Run::sequential(l));
        }
    }
    db.drop().await?;

    let row = |s: usize, name, sizes: (f64, f64, f64, f64)| Row {
        name,
        parent_mean: sizes.0,
        parent_median: sizes.1,
        element_mean: sizes.2,
        child_mean: sizes.3,
        reads: reads.spread(s, Run::rate),
        read_p50: reads.spread(s, Run::p50),
        read_p99: reads.spread(s, Run::p99),
        push_p50: push_lat.spread(s, Run::p50),
        push_p99: push_lat.spread(s, Run::p99),
    };
    let read_ratio = reads.ratio(1, 0, Run::rate);
    let push_ratio = push_lat.ratio(1, 0, Run::p50);
    Ok(Result {
        rounds,
        warmup: warmup.as_secs_f64(),
        seconds: duration.as_secs_f64(),
        pushes,
        load_secs,
        whole: row(0, WholeProduct::NAME, whole_sizes),
        preview: row(1, PreviewProduct::NAME, preview_sizes),
        bytes_ratio: whole_sizes.0 / preview_sizes.0,
        read_ratio,
        push_ratio,
        total_secs: started.elapsed().as_secs_f64(),
    })
}
