//! Experiment 1, the working set: product-page reads, review writes and "show all reviews" in
//! each layout.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use rand::rngs::StdRng;
use rand::SeedableRng;
use subset::bson;
use subset::bson_compat;
use subset::{PageRequest, Store, WriteMode};

use crate::data::{
    DataSet, Product, ProductInfo, ProductWithReviews, Review, StoredReview, EMBEDDED,
    PAGE_REVIEWS, REFERENCED, REVIEWS,
};
use crate::measure::{closed_loop, time, Run, Task};
use crate::stats::Picker;
use crate::Res;

/// The ways of storing products and their reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Every review inside its product; the page reads the whole product, as an application
    /// that maps the document to one type does.
    EmbeddedWhole,
    /// Every review inside its product; the page reads the product with `$slice: 10`.
    Embedded,
    /// This library: the 10 latest reviews embedded, all of them in the review collection.
    Subset,
    /// The product, then its 10 latest reviews: two queries.
    TwoQuery,
    /// The product with its 10 latest reviews joined by one `$lookup` aggregation.
    Lookup,
}

impl Layout {
    pub const ALL: [Layout; 5] = [
        Layout::EmbeddedWhole,
        Layout::Embedded,
        Layout::Subset,
        Layout::TwoQuery,
        Layout::Lookup,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layout::EmbeddedWhole => "fully embedded, whole document",
            Layout::Embedded => "fully embedded, `$slice: 10`",
            Layout::Subset => "subset (this library)",
            Layout::TwoQuery => "referenced, two queries",
            Layout::Lookup => "referenced, $lookup",
        }
    }
}

/// Everything a benchmark task needs; shared by all tasks.
pub struct Ctx {
    db: Database,
    /// The server's process when the benchmark started it, for its disk reads.
    pub mongod: Option<u32>,
    pub store: Store<Product>,
    pub data: DataSet,
    embedded: Collection<ProductWithReviews>,
    referenced: Collection<ProductInfo>,
    reviews: Collection<Review>,
}

impl Ctx {
    pub fn new(db: &Database, data: DataSet) -> Ctx {
        Ctx {
            db: db.clone(),
            mongod: None,
            store: Store::new(db),
            data,
            embedded: db.collection(EMBEDDED),
            referenced: db.collection(REFERENCED),
            reviews: db.collection(REVIEWS),
        }
    }

    /// One product page (the product and its 10 latest reviews) of product `i`; returns how many
    /// reviews it shows.
    pub async fn read(&self, layout: Layout, i: usize) -> Res<usize> {
        let id = self.data.product_id(i);
        let shown = match layout {
            Layout::EmbeddedWhole => {
                let p = self
                    .embedded
                    .find_one(doc! { "_id": id })
                    .await?
                    .ok_or("missing product")?;
                p.reviews.len().min(PAGE_REVIEWS)
            }
            Layout::Embedded => {
                let p = self
                    .embedded
                    .find_one(doc! { "_id": id })
                    .projection(doc! { "reviews": { "$slice": PAGE_REVIEWS as i32 } })
                    .await?
                    .ok_or("missing product")?;
                p.reviews.len()
            }
            Layout::Subset => {
                let p = self.store.get(&id).await?.ok_or("missing product")?;
                p.recent_reviews.len()
            }
            Layout::TwoQuery => {
                let _info = self
                    .referenced
                    .find_one(doc! { "_id": id })
                    .await?
                    .ok_or("missing product")?;
                let reviews: Vec<Review> = self
                    .reviews
                    .find(doc! { "product_id": id })
                    .sort(doc! { "date": -1, "_id": -1 })
                    .limit(PAGE_REVIEWS as i64)
                    .await?
                    .try_collect()
                    .await?;
                reviews.len()
            }
            Layout::Lookup => {
                let mut cursor = self
                    .referenced
                    .aggregate([
                        doc! { "$match": { "_id": id } },
                        doc! { "$lookup": {
                            "from": REVIEWS,
                            "localField": "_id",
                            "foreignField": "product_id",
                            "pipeline": [
                                { "$sort": { "date": -1, "_id": -1 } },
                                { "$limit": PAGE_REVIEWS as i32 },
                                { "$project": { "product_id": 0 } },
                            ],
                            "as": "reviews",
                        } },
                    ])
                    .with_type::<ProductWithReviews>()
                    .await?;
                let p = cursor.try_next().await?.ok_or("missing product")?;
                p.reviews.len()
            }
        };
        Ok(shown)
    }

    /// Writes one new review of product `i` in `layout` (`$lookup` shares the referenced
    /// layout's write). `ordered` forces the library's ordered (no transaction) writes.
    pub async fn write(&self, layout: Layout, i: usize, n: u64, ordered: bool) -> Res<()> {
        let id = self.data.product_id(i);
        let review = self.data.new_review(i, n);
        match layout {
            Layout::Embedded | Layout::EmbeddedWhole => {
                self.embedded
                    .update_one(
                        doc! { "_id": id },
                        doc! {
                            "$push": { "reviews": {
                                "$each": [bson_compat::to_bson(&review)?],
                                "$position": 0,
                            } },
                            "$inc": { "total_reviews": 1 },
                        },
                    )
                    .await?;
            }
            Layout::Subset => {
                let store = if ordered {
                    let options = subset::StoreOptions::new().mode(WriteMode::Ordered);
                    Store::with_options(self.store.database(), options)
                } else {
                    self.store.clone()
                };
                store
                    .children(Product::RECENT_REVIEWS)
                    .push(&id, &review)
                    .await?;
            }
            Layout::TwoQuery | Layout::Lookup => {
                self.reviews
                    .clone_with_type::<StoredReview>()
                    .insert_one(StoredReview {
                        review: &review,
                        product_id: id,
                    })
                    .await?;
                self.referenced
                    .update_one(doc! { "_id": id }, doc! { "$inc": { "total_reviews": 1 } })
                    .await?;
            }
        }
        Ok(())
    }

    /// Reads every review of product `i`, 20 at a time; returns (reviews, pages).
    pub async fn show_all(&self, layout: Layout, i: usize) -> Res<(usize, usize)> {
        const SIZE: usize = 20;
        let id = self.data.product_id(i);
        let (mut seen, mut pages) = (0, 0);
        match layout {
            Layout::Embedded | Layout::EmbeddedWhole => loop {
                // An array has no keyset: each page is a `$slice` at an offset.
                let p = self
                    .embedded
                    .find_one(doc! { "_id": id })
                    .projection(doc! { "reviews": { "$slice": [seen as i64, SIZE as i64] } })
                    .await?
                    .ok_or("missing product")?;
                pages += 1;
                seen += p.reviews.len();
                if p.reviews.len() < SIZE {
                    break;
                }
            },
            Layout::Subset => {
                let handle = self.store.children(Product::RECENT_REVIEWS);
                let mut request = PageRequest::first(SIZE as u32);
                loop {
                    let page = handle.page(&id, &request).await?;
                    pages += 1;
                    seen += page.items.len();
                    match page.next {
                        Some(next) => request = PageRequest::after(next, SIZE as u32),
                        None => break,
                    }
                }
            }
            Layout::TwoQuery | Layout::Lookup => {
                let mut after: Option<(bson::DateTime, bson::oid::ObjectId)> = None;
                loop {
                    let filter = match after {
                        None => doc! { "product_id": id },
                        Some((date, rid)) => doc! {
                            "product_id": id,
                            "date": { "$lte": date },
                            "$or": [
                                { "date": { "$lt": date } },
                                { "date": date, "_id": { "$lt": rid } },
                            ],
                        },
                    };
                    let page: Vec<Review> = self
                        .reviews
                        .find(filter)
                        .sort(doc! { "date": -1, "_id": -1 })
                        .limit(SIZE as i64)
                        .await?
                        .try_collect()
                        .await?;
                    pages += 1;
                    seen += page.len();
                    match page.last() {
                        Some(last) if page.len() == SIZE => after = Some((last.date, last.id)),
                        _ => break,
                    }
                }
            }
        }
        Ok((seen, pages))
    }
}

/// One read measurement.
#[derive(Debug, Clone)]
pub struct ReadRun {
    pub run: Run,
    /// Kilobytes WiredTiger read into its cache per page view (from the OS or disk).
    pub cache_kb: f64,
    /// Kilobytes the server read from storage per page view: what the operating system's page
    /// cache did not hold (`NaN` when the server is not the benchmark's own).
    pub disk_kb: f64,
}

/// Bytes WiredTiger has read into its cache since the server started.
pub async fn cache_reads(db: &Database) -> Res<f64> {
    let status = db.run_command(doc! { "serverStatus": 1 }).await?;
    let bytes = status
        .get_document("wiredTiger")
        .and_then(|w| w.get_document("cache"))
        .ok()
        .and_then(|c| c.get("bytes read into cache"))
        .and_then(|b| match b {
            Bson::Int64(n) => Some(*n as f64),
            Bson::Int32(n) => Some(f64::from(*n)),
            Bson::Double(n) => Some(*n),
            _ => None,
        });
    Ok(bytes.unwrap_or(f64::NAN))
}

/// A task reading the product pages of the products `picker` picks.
struct Reader {
    ctx: Arc<Ctx>,
    layout: Layout,
    picker: Arc<Picker>,
    rng: StdRng,
}

impl Task for Reader {
    async fn op(&mut self) -> Res<()> {
        let i = self.picker.pick(&mut self.rng);
        let shown = self.ctx.read(self.layout, i).await?;
        if shown != PAGE_REVIEWS {
            return Err(format!("{}: page of {shown} reviews", self.layout.name()).into());
        }
        Ok(())
    }
}

/// `tasks` tasks read random product pages for `warmup` (not recorded), then for `duration`,
/// counting what WiredTiger reads into its cache, and the server from storage, during the
/// measured part.
pub async fn reads(
    ctx: &Arc<Ctx>,
    layout: Layout,
    picker: &Arc<Picker>,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
    seed: u64,
) -> Res<ReadRun> {
    let readers = |seed: u64| {
        (0..tasks).map(move |t| Reader {
            ctx: Arc::clone(ctx),
            layout,
            picker: Arc::clone(picker),
            rng: StdRng::seed_from_u64(seed ^ (t as u64 + 1)),
        })
    };
    closed_loop(readers(seed ^ 0x5EED), Duration::ZERO, warmup).await?;
    let disk = || ctx.mongod.and_then(crate::memory::disk_reads);
    let (before, disk_before) = (cache_reads(&ctx.db).await?, disk());
    let run = closed_loop(readers(seed), Duration::ZERO, duration).await?;
    let (after, disk_after) = (cache_reads(&ctx.db).await?, disk());
    let pages = run.len() as f64;
    Ok(ReadRun {
        cache_kb: (after - before) / 1024.0 / pages,
        disk_kb: match (disk_before, disk_after) {
            (Some(b), Some(a)) => a.saturating_sub(b) as f64 / 1024.0 / pages,
            _ => f64::NAN,
        },
        run,
    })
}

/// `n` single review writes to uniformly random products.
pub async fn writes(
    ctx: &Ctx,
    layout: Layout,
    ordered: bool,
    n: usize,
    seed: u64,
    series: usize,
) -> Res<Run> {
    let picker = Picker::Uniform(ctx.data.products);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut latencies = Vec::with_capacity(n);
    for k in 0..n {
        let i = picker.pick(&mut rng);
        let ((), ms) = time(ctx.write(layout, i, (series * n + k) as u64, ordered)).await?;
        latencies.push(ms);
    }
    Ok(Run::sequential(latencies))
}

/// "Show all reviews" of `n` random products: the run (one operation a product), and pages read.
pub async fn show_all(ctx: &Ctx, layout: Layout, n: usize, seed: u64) -> Res<(Run, usize)> {
    let picker = Picker::Uniform(ctx.data.products);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut latencies = Vec::with_capacity(n);
    let mut pages = 0;
    for _ in 0..n {
        let i = picker.pick(&mut rng);
        let ((seen, p), ms) = time(ctx.show_all(layout, i)).await?;
        latencies.push(ms);
        pages += p;
        if seen < ctx.data.review_count(i) {
            return Err(format!("{}: showed {seen} reviews of product {i}", layout.name()).into());
        }
    }
    Ok((Run::sequential(latencies), pages))
}

/// A read of every layout once, to fail early on a broken layout.
pub async fn check(ctx: &Ctx) -> Res<()> {
    for layout in Layout::ALL {
        let shown = ctx.read(layout, 0).await?;
        if shown != PAGE_REVIEWS {
            return Err(format!("{}: page of {shown} reviews", layout.name()).into());
        }
    }
    let stored = ctx
        .store
        .get(&ctx.data.product_id(0))
        .await?
        .ok_or("missing")?;
    if stored.total_reviews != ctx.data.review_count(0) as i64 {
        // Reused data with reviews written by an earlier run.
        return Ok(());
    }
    let expected: Vec<Bson> = ctx.data.reviews(0)[..PAGE_REVIEWS]
        .iter()
        .map(|r| Bson::ObjectId(r.id))
        .collect();
    let got: Vec<Bson> = stored
        .recent_reviews
        .iter()
        .map(|r| Bson::ObjectId(r.id))
        .collect();
    if got != expected {
        return Err("the subset does not hold the 10 latest reviews".into());
    }
    Ok(())
}
