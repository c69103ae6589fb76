//! Experiment 2, library overhead: each operation through the library and written by hand with
//! the raw driver, interleaved A/B on the same server and data, in one write mode per run (the
//! benchmark runs it in each mode the server offers).

use bson::oid::ObjectId;
use bson::{doc, DateTime};
use futures::TryStreamExt;
use mongodb::{Client, Collection, Database};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use subset::bson;
use subset::{Cursor, PageRequest, Store, StoreOptions, WriteMode};

use crate::data::{DataSet, Product, Review, PAGE_REVIEWS, REVIEWS, SUBSET};
use crate::hand::HandPush;
use crate::measure::{side_by_side, time, Run, Runs, Turn};
use crate::stats::quantile;
use crate::wire::{Tally, Wire};
use crate::Res;

/// The operations compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Get,
    FirstPage,
    LaterPage,
    Push,
    PushMany,
}

impl Op {
    pub const ALL: [Op; 5] = [
        Op::Get,
        Op::FirstPage,
        Op::LaterPage,
        Op::Push,
        Op::PushMany,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "`get`",
            Op::FirstPage => "`page`, first (10, embedded)",
            Op::LaterPage => "`page`, later (20, keyset)",
            Op::Push => "`push`",
            Op::PushMany => "`push_many` (10)",
        }
    }
}

/// How many products and reviews each the experiment writes first.
const PRODUCTS: usize = 200;
const REVIEWS_EACH: usize = 60;
const BATCH: usize = 10;
const LATER_PAGE: usize = 20;
/// The parts of a run whose ratios give the range.
const BLOCKS: usize = 5;
/// Calls per operation and side tallied on the wire, after the timed ones.
pub const WIRE_CALLS: usize = 200;
/// Calls of each side on the monitored client before its tally starts.
const WIRE_WARMUP: usize = 20;

#[derive(Deserialize)]
struct FirstPage {
    recent_reviews: Vec<Review>,
    total_reviews: i64,
}

struct Bench {
    /// Both sides on a client without command monitoring, for the timed pairs: the driver
    /// builds each command's event before any handler can decline it, a cost of the monitor's
    /// that grows with the command and would be timed with the library and the hand alike.
    timed: Sides,
    /// The same data through the monitored client, for the wire pass.
    wire: Sides,
    /// Whether the wire pass is running.
    tallying: bool,
    mode: WriteMode,
    ids: Vec<ObjectId>,
    /// Per product: the library's cursor after the first page, and the same position by hand.
    after: Vec<(Cursor, DateTime, ObjectId)>,
    data: DataSet,
    next: u64,
}

/// The library and the hand on one client.
struct Sides {
    store: Store<Product>,
    /// The writes by hand, in the store's write mode.
    hand: HandPush,
    products: Collection<Product>,
    reviews: Collection<Review>,
}

impl Sides {
    /// The sides on `db`: `store`, and the hand in `mode`.
    fn on(db: &Database, store: Store<Product>, mode: WriteMode) -> Sides {
        Sides {
            store,
            hand: HandPush::new(db, mode),
            products: db.collection(SUBSET),
            reviews: db.collection(REVIEWS),
        }
    }
}

/// The experiment's store on `db`, in `mode` or in the mode it detects.
fn store_on(db: &Database, mode: Option<WriteMode>) -> Store<Product> {
    match mode {
        Some(mode) => Store::<Product>::with_options(db, StoreOptions::new().mode(mode)),
        None => Store::<Product>::new(db),
    }
}

impl Bench {
    /// The sides of the pass that is running.
    fn sides(&self) -> &Sides {
        match self.tallying {
            true => &self.wire,
            false => &self.timed,
        }
    }

    /// The new reviews `op` writes (none for reads), made before the clock starts.
    fn input(&mut self, op: Op, i: usize) -> Vec<Review> {
        let n = match op {
            Op::Push => 1,
            Op::PushMany => BATCH,
            _ => 0,
        };
        (0..n)
            .map(|_| {
                self.next += 1;
                self.data.new_review(i, self.next)
            })
            .collect()
    }

    async fn library(&self, op: Op, i: usize, input: &[Review]) -> Res<()> {
        let id = self.ids[i];
        let store = &self.sides().store;
        let handle = store.children(Product::RECENT_REVIEWS);
        match op {
            Op::Get => {
                store.get(&id).await?.ok_or("missing product")?;
            }
            Op::FirstPage => {
                let page = handle
                    .page(&id, &PageRequest::first(PAGE_REVIEWS as u32))
                    .await?;
                assert_len(page.items.len(), PAGE_REVIEWS)?;
            }
            Op::LaterPage => {
                let request = PageRequest::after(self.after[i].0.clone(), LATER_PAGE as u32);
                let page = handle.page(&id, &request).await?;
                assert_len(page.items.len(), LATER_PAGE)?;
            }
            Op::Push => handle.push(&id, &input[0]).await?,
            Op::PushMany => handle.push_many(&id, input).await?,
        }
        Ok(())
    }

    async fn by_hand(&self, op: Op, i: usize, input: &[Review]) -> Res<()> {
        let id = self.ids[i];
        let sides = self.sides();
        match op {
            Op::Get => {
                sides
                    .products
                    .find_one(doc! { "_id": id })
                    .await?
                    .ok_or("missing product")?;
            }
            Op::FirstPage => {
                let page = sides
                    .products
                    .clone_with_type::<FirstPage>()
                    .find_one(doc! { "_id": id })
                    .projection(doc! { "recent_reviews": 1, "total_reviews": 1 })
                    .await?
                    .ok_or("missing product")?;
                let items: Vec<Review> =
                    page.recent_reviews.into_iter().take(PAGE_REVIEWS).collect();
                let _more = page.total_reviews > items.len() as i64;
                assert_len(items.len(), PAGE_REVIEWS)?;
            }
            Op::LaterPage => {
                let (_, date, rid) = &self.after[i];
                let filter = doc! {
                    "product_id": id,
                    "date": { "$lte": *date },
                    "$or": [
                        { "date": { "$lt": *date } },
                        { "date": *date, "_id": { "$lt": *rid } },
                    ],
                };
                let mut page: Vec<Review> = sides
                    .reviews
                    .find(filter)
                    .sort(doc! { "date": -1, "_id": -1 })
                    .limit(LATER_PAGE as i64 + 1)
                    .await?
                    .try_collect()
                    .await?;
                let _more = page.len() > LATER_PAGE;
                page.truncate(LATER_PAGE);
                assert_len(page.len(), LATER_PAGE)?;
            }
            Op::Push | Op::PushMany => sides.hand.push(id, input).await?,
        }
        Ok(())
    }
}

fn assert_len(got: usize, want: usize) -> Res<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("a page of {got} where {want} were expected").into())
    }
}

/// The result for one operation.
#[derive(Debug, Clone)]
pub struct Row {
    pub op: Op,
    pub iterations: usize,
    pub library_p50: f64,
    pub hand_p50: f64,
    pub ratio: f64,
    /// Ratio of medians within each of the [`BLOCKS`] parts of the run.
    pub block_min: f64,
    pub block_max: f64,
    /// Where a call's time went, through the library and by hand.
    pub library_wire: OnTheWire,
    pub hand_wire: OnTheWire,
}

/// The median call of one side in the wire pass: what it sent and received, and how its latency
/// splits between waiting on replies and the client's own work.
#[derive(Debug, Clone)]
pub struct OnTheWire {
    pub commands: f64,
    pub sent: f64,
    pub received: f64,
    /// Median latency of the pass's calls, ms.
    pub p50: f64,
    /// Median time waiting on the server's replies, ms.
    pub waited: f64,
    /// Median of latency minus waiting: serializing, decoding and the library's own work, ms.
    pub client: f64,
    /// The commands of the calls that sent the most common sequence of them, in order, each
    /// with its median milliseconds to the reply: which command the waiting goes to.
    pub split: Vec<(String, f64)>,
}

impl OnTheWire {
    /// The medians of `calls`: each call's tally and latency in ms.
    fn of(calls: &[(Tally, f64)]) -> OnTheWire {
        let median = |f: &dyn Fn(&(Tally, f64)) -> f64| {
            let mut v: Vec<f64> = calls.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            quantile(&v, 0.5)
        };
        OnTheWire {
            commands: median(&|(t, _)| f64::from(t.commands)),
            sent: median(&|(t, _)| t.sent as f64),
            received: median(&|(t, _)| t.received as f64),
            p50: median(&|(_, ms)| *ms),
            waited: median(&|(t, _)| t.waited),
            client: median(&|(t, ms)| ms - t.waited),
            split: split(calls),
        }
    }
}

/// [`OnTheWire::split`] of `calls`.
fn split(calls: &[(Tally, f64)]) -> Vec<(String, f64)> {
    let names = |t: &Tally| t.each.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let mut sequences: Vec<(Vec<String>, usize)> = Vec::new();
    for (t, _) in calls {
        let seq = names(t);
        match sequences.iter_mut().find(|(s, _)| *s == seq) {
            Some((_, n)) => *n += 1,
            None => sequences.push((seq, 1)),
        }
    }
    let Some((common, _)) = sequences.into_iter().max_by_key(|(_, n)| *n) else {
        return Vec::new();
    };
    let alike: Vec<&Tally> = calls
        .iter()
        .map(|(t, _)| t)
        .filter(|t| names(t) == common)
        .collect();
    common
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let mut v: Vec<f64> = alike.iter().map(|t| t.each[i].1).collect();
            v.sort_by(f64::total_cmp);
            (name, quantile(&v, 0.5))
        })
        .collect()
}

/// Writes the experiment's products (through the library) into a fresh `db`; the store writes
/// in `mode`, or in the mode it detects.
async fn setup(db: &Database, wire: &Database, seed: u64, mode: Option<WriteMode>) -> Res<Bench> {
    db.drop().await?;
    let data = DataSet {
        products: PRODUCTS,
        min_reviews: REVIEWS_EACH,
        max_reviews: REVIEWS_EACH,
        seed,
    };
    let store = store_on(db, mode);
    store.ensure_indexes().await?;
    let detected = store.mode().await?;
    let handle = store.children(Product::RECENT_REVIEWS);
    let mut ids = Vec::with_capacity(PRODUCTS);
    let mut after = Vec::with_capacity(PRODUCTS);
    for i in 0..PRODUCTS {
        let info = data.info(i);
        let product = Product {
            id: info.id,
            name: info.name,
            description: info.description,
            category: info.category,
            price: info.price,
            recent_reviews: data.reviews(i),
            total_reviews: 0,
        };
        store.insert(&product).await?;
        let first = handle
            .page(&info.id, &PageRequest::first(PAGE_REVIEWS as u32))
            .await?;
        let last = first.items.last().ok_or("empty first page")?;
        let cursor = first.next.ok_or("no second page")?;
        after.push((cursor, last.date, last.id));
        ids.push(info.id);
    }
    let wire = Sides::on(wire, store_on(wire, mode), detected);
    if wire.store.mode().await? != detected {
        return Err("the monitored client's store writes in another mode".into());
    }
    Ok(Bench {
        timed: Sides::on(db, store, detected),
        wire,
        tallying: false,
        mode: detected,
        ids,
        after,
        data,
        next: 0,
    })
}

/// Runs every operation `iterations` times each way, alternating which goes first, with the
/// library's store in `mode` (or the mode it detects) and the writes by hand in the same mode,
/// in database `database` of `uri`; then [`WIRE_CALLS`] more each way with the commands tallied.
/// Returns the mode and a row per operation.
pub async fn run(
    uri: &str,
    database: &str,
    iterations: usize,
    seed: u64,
    mode: Option<WriteMode>,
) -> Res<(WriteMode, Vec<Row>)> {
    let wire = Wire::connect(uri).await?;
    let db = Client::with_uri_str(uri).await?.database(database);
    let monitored = wire.client().database(database);
    let mut bench = setup(&db, &monitored, seed, mode).await?;
    let mut rng = StdRng::seed_from_u64(seed);
    let warmup = (iterations / 10).max(20);
    let mut rows = Vec::new();
    for op in Op::ALL {
        let mut lib = Vec::with_capacity(iterations);
        let mut hand = Vec::with_capacity(iterations);
        for k in 0..warmup + iterations {
            let i = rng.random_range(0..PRODUCTS);
            let library_first = k % 2 == 0;
            // The side that runs second gets the newer review, so that both push at the head
            // of the subset (a review older than the head costs the library a second update).
            let (first, second) = (bench.input(op, i), bench.input(op, i));
            let inputs = if library_first {
                [first, second]
            } else {
                [second, first]
            };
            let [l, h] = side_by_side(
                library_first,
                bench.library(op, i, &inputs[0]),
                bench.by_hand(op, i, &inputs[1]),
            )
            .await?;
            if k >= warmup {
                lib.push(l);
                hand.push(h);
            }
        }
        let mut blocks = Runs::new(2);
        for round in 0..BLOCKS {
            let range = round * iterations / BLOCKS..(round + 1) * iterations / BLOCKS;
            let (l, h) = (lib[range.clone()].to_vec(), hand[range].to_vec());
            blocks.record(Turn { round, side: 0 }, Run::sequential(l));
            blocks.record(Turn { round, side: 1 }, Run::sequential(h));
        }
        let block = blocks.ratio(0, 1, Run::p50);
        let library_p50 = Run::sequential(lib).p50();
        let hand_p50 = Run::sequential(hand).p50();
        // The wire pass: each call alone on the tally, so that what it sent is its own.
        let (mut lib_calls, mut hand_calls) = (Vec::new(), Vec::new());
        bench.tallying = true;
        // Untallied first calls, so that the monitored store's first reads (its registry) are
        // no call's, as they are no timed call's.
        for _ in 0..WIRE_WARMUP {
            let i = rng.random_range(0..PRODUCTS);
            let (lib_input, hand_input) = (bench.input(op, i), bench.input(op, i));
            bench.library(op, i, &lib_input).await?;
            bench.by_hand(op, i, &hand_input).await?;
        }
        wire.tally(true);
        for _ in 0..WIRE_CALLS {
            let i = rng.random_range(0..PRODUCTS);
            // The library first, the hand with the newer review, as in the timed pairs.
            let (lib_input, hand_input) = (bench.input(op, i), bench.input(op, i));
            wire.take();
            let ((), ms) = time(bench.library(op, i, &lib_input)).await?;
            lib_calls.push((wire.take(), ms));
            let ((), ms) = time(bench.by_hand(op, i, &hand_input)).await?;
            hand_calls.push((wire.take(), ms));
        }
        wire.tally(false);
        bench.tallying = false;
        rows.push(Row {
            op,
            iterations,
            library_p50,
            hand_p50,
            ratio: library_p50 / hand_p50,
            block_min: block.min,
            block_max: block.max,
            library_wire: OnTheWire::of(&lib_calls),
            hand_wire: OnTheWire::of(&hand_calls),
        });
    }
    db.drop().await?;
    Ok((bench.mode, rows))
}
