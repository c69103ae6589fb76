//! Experiment 9, a model change on live data. Products embed their 5 latest reviews with a
//! count (the old model, which writes the data through the library); then the model changes,
//! two ways, on the same collections:
//!
//! - a larger `keep`: the 10 latest reviews, same order and count;
//! - a new view: the old one plus previews of the 3 oldest reviews (`date asc`, no count).
//!
//! **Reads.** Until a parent is rebuilt, a store of the new model computes the views built
//! under the old one from the review collection. One task reads random products through the
//! new model's store while every product is built under the old model (outdated), and again
//! right after `Store::rebuild` built them under the new one: `Store::get` and the first page
//! of 10 for the larger `keep`, `Store::get` for the new view. Every read is compared with the
//! reviews the product was written with (untimed): an outdated read must be as right as a
//! rebuilt one.
//!
//! **Rebuilds.** `Store::rebuild` of the larger `keep` over every product, in transactions and
//! in ordered writes (`StoreOptions::mode(WriteMode::Ordered)`), and in the detected write mode while one
//! task pushes new reviews through the same model; `Store::rebuild` of the new view. After
//! each, `Store::check_all` of the model rebuilt must find no product drifted nor outdated, and
//! the rebuild must have failed none and rebuilt every product (but those a push rebuilt
//! first): the experiment stops with an error otherwise.
//!
//! Between the steps the products are put back as the old model wrote them, from a copy made
//! after the load (`$out`), and the pushed reviews deleted, so that every rebuild starts from
//! the same documents. One round, with `m1` the write mode that goes first (transactions in
//! the first round, ordered writes in the second, and so on, when the server has
//! transactions):
//!
//! 1. reads of the larger `keep`, outdated; its rebuild in `m1`; the same reads, rebuilt;
//! 2. its rebuild in `m2`; its rebuild while a task pushes;
//! 3. reads of the new view, outdated; its rebuild; the same reads, rebuilt.
//!
//! The pushes go to odd-numbered products only, and the reads read even-numbered ones.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bson::doc;
use bson::oid::ObjectId;
use futures::{StreamExt, TryStreamExt};
use mongodb::{Collection, Database};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{PageRequest, Store, Subset, WriteMode};

use crate::data::{DataSet, Review};
use crate::measure::{time, Run, Runs, Turn};
use crate::previews::ReviewPreview;
use crate::stats::Spread;
use crate::Res;

/// Reviews per product: from 15 to 25, 20 on average.
pub const MIN_REVIEWS: usize = 15;
pub const MAX_REVIEWS: usize = 25;
/// The old model's `keep`, the larger one's, and the new view's.
pub const OLD_KEEP: usize = 5;
pub const NEW_KEEP: usize = 10;
pub const OLDEST_KEEP: usize = 3;
/// The size of the first page read.
pub const PAGE: usize = 10;
/// Reads of each kind whose server operations are counted, per state and round.
pub const OPS_READS: usize = 100;
/// Concurrent inserts while writing the products.
const LOAD_TASKS: usize = 4;
/// The parent collection of every version of the model, and the copy of it as the old model
/// wrote it.
const COLLECTION: &str = "model_change";
const COPY: &str = "model_change_as_written";

/// One version of the product model: always the collection `model_change`, the reviews always
/// `model_change_reviews` under `product_id` (named, so that the key does not follow the
/// struct's name).
macro_rules! product {
    ($(#[$doc:meta])* $name:ident { $($field:tt)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Serialize, Deserialize, Subset)]
        #[subset(collection = "model_change")]
        pub struct $name {
            #[serde(rename = "_id")]
            pub id: ObjectId,
            pub name: String,
            pub description: String,
            pub category: String,
            pub price: f64,
            #[serde(default)]
            pub total_reviews: i64,
            $($field)*
        }
    };
}

product!(
    /// The old model: the 5 latest reviews and the count.
    Keep5 {
        #[subset(
            child = "model_change_reviews",
            key = "product_id",
            keep = 5,
            sort = "date desc",
            count = "total_reviews"
        )]
        pub recent: Vec<Review>,
    }
);

product!(
    /// A larger `keep`: the 10 latest reviews, the same order and count.
    Keep10 {
        #[subset(
            child = "model_change_reviews",
            key = "product_id",
            keep = 10,
            sort = "date desc",
            count = "total_reviews"
        )]
        pub recent: Vec<Review>,
    }
);

product!(
    /// A new view: the old model's, and previews of the 3 oldest reviews.
    WithOldest {
        #[subset(
            child = "model_change_reviews",
            key = "product_id",
            keep = 5,
            sort = "date desc",
            count = "total_reviews"
        )]
        pub recent: Vec<Review>,
        #[subset(
            child = "model_change_reviews",
            key = "product_id",
            keep = 3,
            sort = "date asc"
        )]
        pub oldest: Vec<ReviewPreview>,
    }
);

/// A read the experiment times, through a store of a new model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// `Store::get`, keep 10.
    GetKeep,
    /// `Children::page` of the first 10, keep 10.
    PageKeep,
    /// `Store::get`, the old view and the new one.
    GetView,
}

impl Read {
    pub const ALL: [Read; 3] = [Read::GetKeep, Read::PageKeep, Read::GetView];

    pub fn name(self) -> &'static str {
        match self {
            Read::GetKeep => "`get`, keep 5 → 10",
            Read::PageKeep => "first `page` (10), keep 5 → 10",
            Read::GetView => "`get`, + a view (3 oldest, previews)",
        }
    }

    /// What an outdated read costs more, as the guide puts it.
    pub fn outdated_cost(self) -> &'static str {
        match self {
            Read::GetKeep => {
                "the view and its count computed, read ahead: the parent's `aggregate` with 2 `$lookup`s"
            }
            Read::PageKeep => {
                "from the review collection, read ahead: the parent's `aggregate` with 1 `$lookup`"
            }
            Read::GetView => {
                "the new view computed, read ahead: the parent's `aggregate` with 1 `$lookup`"
            }
        }
    }

    /// The side of [`Runs`] of this read, outdated or rebuilt.
    fn side(self, rebuilt: bool) -> usize {
        2 * (self as usize) + usize::from(rebuilt)
    }
}

/// A rebuild the experiment times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The larger `keep`'s rebuild, in this mode.
    Grow(WriteMode),
    /// The larger `keep`'s rebuild, in the detected mode, while a task pushes through it.
    GrowPushing,
    /// The new view's rebuild, in the detected mode.
    AddView,
}

impl Step {
    pub const ALL: [Step; 4] = [
        Step::Grow(WriteMode::Transactional),
        Step::Grow(WriteMode::Ordered),
        Step::GrowPushing,
        Step::AddView,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Step::Grow(_) => "keep 5 → 10",
            Step::GrowPushing => "keep 5 → 10, 1 task pushing through the new model",
            Step::AddView => "+ a view (3 oldest, previews)",
        }
    }

    /// The write mode of the rebuild, where `detected` is the server's.
    pub fn mode(self, detected: WriteMode) -> WriteMode {
        match self {
            Step::Grow(mode) => mode,
            Step::GrowPushing | Step::AddView => detected,
        }
    }

    fn side(self) -> usize {
        Step::ALL.iter().position(|&s| s == self).unwrap_or(0)
    }
}

/// One read over the rounds: outdated and rebuilt.
#[derive(Debug, Clone)]
pub struct ReadRow {
    pub read: Read,
    pub outdated_p50: Spread,
    pub outdated_p99: Spread,
    pub rebuilt_p50: Spread,
    pub rebuilt_p99: Spread,
    /// Per round: outdated over rebuilt.
    pub ratio_p50: Spread,
    pub ratio_p99: Spread,
    /// Operations the server counted per read, per round.
    pub outdated_ops: Spread,
    pub rebuilt_ops: Spread,
}

/// One rebuild over the rounds.
#[derive(Debug, Clone)]
pub struct RebuildRow {
    pub step: Step,
    /// Parents rebuilt per second, per round.
    pub rate: Spread,
    /// Seconds of the rebuild, per round.
    pub secs: Spread,
    /// Parents rebuilt, all rounds: a push rebuilds the parent it finds outdated, so that
    /// fewer are left for the rebuild.
    pub rebuilt: u64,
    /// Parents the following `check_all` read per second, per round (in ordered writes: no
    /// transaction per parent).
    pub check_rate: Spread,
    /// Pushes during the rebuild, all rounds, and pushes/s per round.
    pub pushes: Option<(u64, Spread)>,
}

/// What `check_all` of the larger `keep` found before any rebuild.
#[derive(Debug, Clone, Copy)]
pub struct FirstCheck {
    pub checked: u64,
    pub outdated: u64,
    pub drifted: u64,
    pub secs: f64,
}

#[derive(Debug, Clone)]
pub struct Result {
    pub parents: usize,
    pub reviews: usize,
    pub rounds: usize,
    /// The server's write mode.
    pub mode: WriteMode,
    /// Seconds to write the products and reviews through the old model.
    pub load_secs: f64,
    /// Seconds to put the products back as written, median of every time.
    pub restore_secs: f64,
    /// Mean `$bsonSize` of a product built under the old model, and under the larger `keep`.
    pub parent_bytes: (f64, f64),
    pub first_check: FirstCheck,
    pub reads: Vec<ReadRow>,
    pub rebuilds: Vec<RebuildRow>,
    /// Recorded reads of each kind, outdated and rebuilt, per round.
    pub reads_each: usize,
    /// Reads compared with the reviews written: every one, recorded or not (a wrong one stops
    /// the experiment).
    pub checked_reads: u64,
    pub total_secs: f64,
}

/// The reads measured: each side's latencies, and the server's operations per read.
struct Measured {
    latencies: Runs<Run>,
    ops: Runs<f64>,
}

/// One rebuild: how long it took and what it did.
struct Rebuilt {
    rebuilt: u64,
    secs: f64,
    check_secs: f64,
    pushes: Option<(u64, f64)>,
}

impl Rebuilt {
    fn rate(&self) -> f64 {
        self.rebuilt as f64 / self.secs
    }
}

/// The stores of every model version, each in the detected write mode and in ordered writes.
struct Bench {
    data: DataSet,
    old: Store<Keep5>,
    keep: Store<Keep10>,
    keep_ordered: Store<Keep10>,
    view: Store<WithOldest>,
    view_ordered: Store<WithOldest>,
    parents: Collection<bson::Document>,
    /// The copy of the products as the old model wrote them.
    copy: Collection<bson::Document>,
    reviews: Collection<bson::Document>,
    /// Reads compared with the written reviews.
    checked: AtomicU64,
    /// The first push number of the next pushing task (each gets 2^32): every pushed review's
    /// date is unique.
    pushed: AtomicU64,
}

/// `Store::rebuild` of `store`'s model, `model` in errors; no parent may fail.
async fn rebuild<P: Subset>(store: &Store<P>, model: &str) -> Res<Rebuilt> {
    let started = Instant::now();
    let report = store.rebuild().await?;
    let secs = started.elapsed().as_secs_f64();
    let p = report.progress;
    if p.failed != 0 || !report.failures.is_empty() {
        return Err(format!(
            "{model}: the rebuild failed {} parents, the first: {:?}",
            p.failed,
            report
                .failures
                .first()
                .map(|f| format!("{}: {}", f.parent, f.error))
        )
        .into());
    }
    Ok(Rebuilt {
        rebuilt: p.fixed,
        secs,
        check_secs: f64::NAN,
        pushes: None,
    })
}

/// `Store::check_all` of `store`'s model, which must find no parent drifted, outdated or
/// failed; returns its seconds.
async fn check_clean<P: Subset>(store: &Store<P>, model: &str) -> Res<f64> {
    let started = Instant::now();
    let check = store.check_all().await?;
    let secs = started.elapsed().as_secs_f64();
    let c = check.progress;
    if c.drifted != 0 || c.outdated != 0 || c.failed != 0 || !check.failures.is_empty() {
        return Err(format!(
            "{model}: after the rebuild, check_all found {} of {} parents drifted, {} outdated, \
             {} failed (first drift: {:?}; first failure: {:?})",
            c.drifted,
            c.checked,
            c.outdated,
            c.failed,
            check.drifts.first(),
            check
                .failures
                .first()
                .map(|f| format!("{}: {}", f.parent, f.error))
        )
        .into());
    }
    Ok(secs)
}

impl Bench {
    fn new(db: &Database, parents: usize, seed: u64) -> Bench {
        Bench {
            data: DataSet {
                products: parents,
                min_reviews: MIN_REVIEWS,
                max_reviews: MAX_REVIEWS,
                seed,
            },
            old: Store::new(db),
            keep: Store::new(db),
            keep_ordered: Store::with_options(
                db,
                subset::StoreOptions::new().mode(WriteMode::Ordered),
            ),
            view: Store::new(db),
            view_ordered: Store::with_options(
                db,
                subset::StoreOptions::new().mode(WriteMode::Ordered),
            ),
            parents: db.collection(COLLECTION),
            copy: db.collection(COPY),
            reviews: db.collection(Keep5::RECENT.spec().child_collection),
            checked: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
        }
    }

    fn parent_count(&self) -> u64 {
        self.data.products as u64
    }

    /// Writes every product with all its reviews through the old model, `LOAD_TASKS` at once.
    async fn load(&self) -> Res<()> {
        self.old.ensure_indexes().await?;
        let store = &self.old;
        futures::stream::iter(0..self.data.products)
            .map(|i| {
                let info = self.data.info(i);
                let product = Keep5 {
                    id: info.id,
                    name: info.name,
                    description: info.description,
                    category: info.category,
                    price: info.price,
                    total_reviews: 0,
                    recent: self.data.reviews(i),
                };
                async move { store.insert(&product).await }
            })
            .buffer_unordered(LOAD_TASKS)
            .try_collect::<Vec<()>>()
            .await?;
        // The new models' indexes, as their code would make them on deploy.
        self.keep.ensure_indexes().await?;
        self.view.ensure_indexes().await?;
        Ok(())
    }

    /// The mean `$bsonSize` of a product.
    async fn parent_bytes(&self) -> Res<f64> {
        let pipeline = [doc! { "$group": {
            "_id": bson::Bson::Null,
            "size": { "$avg": { "$bsonSize": "$$ROOT" } },
        } }];
        let mut cursor = self.parents.aggregate(pipeline).await?;
        match cursor.try_next().await? {
            Some(d) => Ok(d.get_f64("size")?),
            None => Err("no products".into()),
        }
    }

    /// `n` reads of each of `reads`, interleaved (the kind that goes first rotates), each of a
    /// random even-numbered product and compared with its reviews; latencies per kind.
    async fn reads(&self, reads: &[Read], n: usize, rng: &mut StdRng) -> Res<Vec<Vec<f64>>> {
        let mut latencies = vec![Vec::with_capacity(n); reads.len()];
        for k in 0..n {
            for j in 0..reads.len() {
                let r = (j + k) % reads.len();
                let i = 2 * rng.random_range(0..self.data.products.div_ceil(2));
                latencies[r].push(self.read(reads[r], i).await?);
            }
        }
        Ok(latencies)
    }

    /// One read of product `i`, timed, then compared with the reviews it was written with.
    async fn read(&self, read: Read, i: usize) -> Res<f64> {
        let id = self.data.product_id(i);
        let want = self.data.reviews(i);
        let wrong = |what: String| -> Res<f64> {
            Err(format!("{}: product {i} read wrong: {what}", read.name()).into())
        };
        let total = want.len() as i64;
        match read {
            Read::GetKeep => {
                let (got, ms) = time(self.keep.get(&id)).await?;
                let got = got.ok_or("a product is missing")?;
                self.checked.fetch_add(1, Ordering::Relaxed);
                if got.recent[..] != want[..NEW_KEEP] || got.total_reviews != total {
                    return wrong(format!(
                        "{} reviews, count {}",
                        got.recent.len(),
                        got.total_reviews
                    ));
                }
                Ok(ms)
            }
            Read::PageKeep => {
                let handle = self.keep.children(Keep10::RECENT);
                let request = PageRequest::first(PAGE as u32);
                let (page, ms) = time(handle.page(&id, &request)).await?;
                self.checked.fetch_add(1, Ordering::Relaxed);
                if page.items[..] != want[..PAGE] || page.next.is_none() {
                    return wrong(format!("a page of {}", page.items.len()));
                }
                Ok(ms)
            }
            Read::GetView => {
                let (got, ms) = time(self.view.get(&id)).await?;
                let got = got.ok_or("a product is missing")?;
                self.checked.fetch_add(1, Ordering::Relaxed);
                let oldest: Vec<ReviewPreview> = want
                    .iter()
                    .rev()
                    .take(OLDEST_KEEP)
                    .map(|r| ReviewPreview {
                        id: r.id,
                        author: r.author.clone(),
                        rating: r.rating,
                        date: r.date,
                    })
                    .collect();
                if got.recent[..] != want[..OLD_KEEP]
                    || got.oldest != oldest
                    || got.total_reviews != total
                {
                    return wrong(format!(
                        "{} latest, {} oldest, count {}",
                        got.recent.len(),
                        got.oldest.len(),
                        got.total_reviews
                    ));
                }
                Ok(ms)
            }
        }
    }

    /// Unrecorded reads, then `n` recorded ones of each of `reads`, into `into`; then
    /// [`OPS_READS`] more of each kind alone, for the operations the server counted per read.
    async fn measure_reads(
        &self,
        reads: &[Read],
        rebuilt: bool,
        n: usize,
        turn: Turn,
        rng: &mut StdRng,
        into: &mut Measured,
    ) -> Res<()> {
        self.reads(reads, n.div_ceil(10), rng).await?;
        for (read, latencies) in reads.iter().zip(self.reads(reads, n, rng).await?) {
            let side = read.side(rebuilt);
            into.latencies
                .record(Turn { side, ..turn }, Run::sequential(latencies));
        }
        for &read in reads {
            let before = self.server_ops().await?;
            self.reads(&[read], OPS_READS, rng).await?;
            // Less the `serverStatus` that read `before`.
            let counted = self.server_ops().await? - before - 1;
            let side = read.side(rebuilt);
            into.ops
                .record(Turn { side, ..turn }, counted as f64 / OPS_READS as f64);
        }
        Ok(())
    }

    /// The operations the server has received (`serverStatus` `opcounters`: a `find` is a
    /// query, an `aggregate` a command).
    async fn server_ops(&self) -> Res<i64> {
        let status = self
            .parents
            .client()
            .database("admin")
            .run_command(doc! { "serverStatus": 1 })
            .await?;
        let counters = status.get_document("opcounters")?;
        let mut total = 0;
        for key in ["insert", "query", "update", "delete", "getmore", "command"] {
            total += match counters.get(key) {
                Some(bson::Bson::Int32(n)) => i64::from(*n),
                Some(bson::Bson::Int64(n)) => *n,
                Some(bson::Bson::Double(n)) => *n as i64,
                _ => 0,
            };
        }
        Ok(total)
    }

    /// The rebuild of `step`, checked (by a store in ordered writes: the check only reads,
    /// and needs no transaction per parent).
    async fn rebuild(&self, step: Step) -> Res<Rebuilt> {
        const KEEP: &str = "keep 10";
        let mut done = match step {
            Step::Grow(WriteMode::Ordered) => rebuild(&self.keep_ordered, KEEP).await?,
            Step::Grow(_) => rebuild(&self.keep, KEEP).await?,
            Step::GrowPushing => self.rebuild_pushing().await?,
            Step::AddView => rebuild(&self.view, "keep 5 + 3 oldest").await?,
        };
        done.check_secs = match step {
            Step::AddView => check_clean(&self.view_ordered, "keep 5 + 3 oldest").await?,
            _ => check_clean(&self.keep_ordered, KEEP).await?,
        };
        let all = self.parent_count();
        if step != Step::GrowPushing && done.rebuilt != all {
            return Err(format!(
                "{}: the rebuild rebuilt {} of {all} parents",
                step.name(),
                done.rebuilt
            )
            .into());
        }
        Ok(done)
    }

    /// The larger `keep`'s rebuild while one task pushes new reviews to random odd-numbered
    /// products through the same model, from just before it starts until it ends.
    async fn rebuild_pushing(&self) -> Res<Rebuilt> {
        let stop = Arc::new(AtomicBool::new(false));
        let pusher = tokio::spawn({
            let (store, data, stop) = (self.keep.clone(), self.data, stop.clone());
            let first = self.pushed.fetch_add(1 << 32, Ordering::Relaxed);
            async move {
                let handle = store.children(Keep10::RECENT);
                let mut rng = StdRng::seed_from_u64(data.seed ^ first);
                let mut pushes = 0_u64;
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let i = 2 * rng.random_range(0..data.products / 2) + 1;
                    let review = data.new_review(i, first + pushes);
                    handle.push(&data.product_id(i), &review).await?;
                    pushes += 1;
                }
                Res::Ok((pushes, started.elapsed().as_secs_f64()))
            }
        });
        let rebuilt = rebuild(&self.keep, "keep 10 with pushes").await;
        stop.store(true, Ordering::Relaxed);
        let pushed = pusher.await??;
        let mut rebuilt = rebuilt?;
        rebuilt.pushes = Some(pushed);
        Ok(rebuilt)
    }

    /// Copies the products as the old model wrote them.
    async fn copy(&self) -> Res<()> {
        let out = [doc! { "$out": COPY }];
        self.parents
            .aggregate(out)
            .await?
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// Puts the products back as the old model wrote them, and deletes the pushed reviews
    /// (every one dated after every written one); returns the seconds it took.
    async fn restore(&self) -> Res<f64> {
        let started = Instant::now();
        let out = [doc! { "$out": COLLECTION }];
        self.copy
            .aggregate(out)
            .await?
            .try_collect::<Vec<_>>()
            .await?;
        let pushed = self.data.new_review(0, 0).date;
        self.reviews
            .delete_many(doc! { "date": { "$gte": pushed } })
            .await?;
        Ok(started.elapsed().as_secs_f64())
    }
}

/// The experiment on `db` (dropped first and last): `parents` products, `reads` reads of each
/// kind and state per round.
pub async fn run(
    db: &Database,
    parents: usize,
    reads: usize,
    rounds: usize,
    seed: u64,
) -> Res<Result> {
    if parents < 10 {
        return Err("the model-change experiment needs at least 10 parents".into());
    }
    // The report names the views by these constants.
    let keeps = [
        (Keep5::RECENT.spec(), OLD_KEEP),
        (Keep10::RECENT.spec(), NEW_KEEP),
        (WithOldest::RECENT.spec(), OLD_KEEP),
        (WithOldest::OLDEST.spec(), OLDEST_KEEP),
    ];
    if let Some((spec, keep)) = keeps.iter().find(|(s, k)| s.keep as usize != *k) {
        return Err(format!("the view {} keeps {}, not {keep}", spec.field, spec.keep).into());
    }
    let started = Instant::now();
    db.drop().await?;
    let bench = Bench::new(db, parents, seed);
    let load = Instant::now();
    bench.load().await?;
    let load_secs = load.elapsed().as_secs_f64();
    let old_bytes = bench.parent_bytes().await?;
    bench.copy().await?;
    let mode = bench.keep.mode().await?;
    let transactions = mode == WriteMode::Transactional;
    eprintln!(
        "  {parents} products, {} reviews written in {load_secs:.0} s",
        bench.data.total_reviews()
    );

    // What the new model's check sees before any rebuild.
    let check_started = Instant::now();
    let check = bench.keep_ordered.check_all().await?.progress;
    let first_check = FirstCheck {
        checked: check.checked,
        outdated: check.outdated,
        drifted: check.drifted,
        secs: check_started.elapsed().as_secs_f64(),
    };

    let mut measured = Measured {
        latencies: Runs::new(2 * Read::ALL.len()),
        ops: Runs::new(2 * Read::ALL.len()),
    };
    let mut rebuild_runs: Runs<Rebuilt> = Runs::new(Step::ALL.len());
    let mut new_bytes = f64::NAN;
    let mut restores = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed ^ 0x30de1);
    for round in 0..rounds {
        let (m1, m2) = match (transactions, round % 2) {
            (false, _) => (WriteMode::Ordered, None),
            (true, 0) => (WriteMode::Transactional, Some(WriteMode::Ordered)),
            (true, _) => (WriteMode::Ordered, Some(WriteMode::Transactional)),
        };
        let mut step = async |step: Step| -> Res<()> {
            let done = bench.rebuild(step).await?;
            eprintln!(
                "  round {}: {}, {}: {:.0} parents/s ({} in {:.1} s; check_all {:.1} s)",
                round + 1,
                step.name(),
                mode_name(step.mode(mode)),
                done.rate(),
                done.rebuilt,
                done.secs,
                done.check_secs
            );
            rebuild_runs.record(
                Turn {
                    round,
                    side: step.side(),
                },
                done,
            );
            Ok(())
        };

        // The side is set per read.
        let turn = Turn { round, side: 0 };
        let keep_reads = [Read::GetKeep, Read::PageKeep];
        bench
            .measure_reads(&keep_reads, false, reads, turn, &mut rng, &mut measured)
            .await?;
        step(Step::Grow(m1)).await?;
        if round == 0 {
            new_bytes = bench.parent_bytes().await?;
        }
        bench
            .measure_reads(&keep_reads, true, reads, turn, &mut rng, &mut measured)
            .await?;
        restores.push(bench.restore().await?);
        if let Some(m2) = m2 {
            step(Step::Grow(m2)).await?;
            restores.push(bench.restore().await?);
        }
        step(Step::GrowPushing).await?;
        restores.push(bench.restore().await?);
        let view_reads = [Read::GetView];
        bench
            .measure_reads(&view_reads, false, reads, turn, &mut rng, &mut measured)
            .await?;
        step(Step::AddView).await?;
        bench
            .measure_reads(&view_reads, true, reads, turn, &mut rng, &mut measured)
            .await?;
        restores.push(bench.restore().await?);
    }
    db.drop().await?;

    let reads_rows = Read::ALL
        .into_iter()
        .filter(|r| measured.latencies.of(r.side(false)).next().is_some())
        .map(|read| {
            let (a, b) = (read.side(false), read.side(true));
            ReadRow {
                read,
                outdated_p50: measured.latencies.spread(a, Run::p50),
                outdated_p99: measured.latencies.spread(a, Run::p99),
                rebuilt_p50: measured.latencies.spread(b, Run::p50),
                rebuilt_p99: measured.latencies.spread(b, Run::p99),
                ratio_p50: measured.latencies.ratio(a, b, Run::p50),
                ratio_p99: measured.latencies.ratio(a, b, Run::p99),
                outdated_ops: measured.ops.spread(a, |x| *x),
                rebuilt_ops: measured.ops.spread(b, |x| *x),
            }
        })
        .collect();
    let rebuilds = Step::ALL
        .into_iter()
        .filter(|s| rebuild_runs.of(s.side()).next().is_some())
        .map(|step| {
            let s = step.side();
            RebuildRow {
                step,
                rate: rebuild_runs.spread(s, Rebuilt::rate),
                secs: rebuild_runs.spread(s, |r| r.secs),
                rebuilt: rebuild_runs.of(s).map(|r| r.rebuilt).sum(),
                check_rate: rebuild_runs.spread(s, |r| parents as f64 / r.check_secs),
                pushes: (step == Step::GrowPushing).then(|| {
                    let total = rebuild_runs
                        .of(s)
                        .filter_map(|r| r.pushes.map(|(n, _)| n))
                        .sum();
                    let rate = rebuild_runs.spread(s, |r| {
                        r.pushes.map_or(f64::NAN, |(n, secs)| n as f64 / secs)
                    });
                    (total, rate)
                }),
            }
        })
        .collect();
    Ok(Result {
        parents,
        reviews: bench.data.total_reviews(),
        rounds,
        mode,
        load_secs,
        restore_secs: Spread::of(&restores).median,
        parent_bytes: (old_bytes, new_bytes),
        first_check,
        reads: reads_rows,
        rebuilds,
        reads_each: reads,
        checked_reads: bench.checked.load(Ordering::Relaxed),
        total_secs: started.elapsed().as_secs_f64(),
    })
}

pub fn mode_name(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::Transactional => "transactions",
        WriteMode::Ordered => "ordered writes",
    }
}
