//! Experiment 5, hot parents: 16 tasks pushing to one parent against the same 16 tasks spread
//! over 16 parents, in one process; 4 and 8 processes of 4 tasks each on one parent; and 4
//! processes of 4 tasks each over 1,000 parents picked by a Zipf distribution (one hot, many
//! cold). Each for a fixed time, in both write modes, through the library and, with the very
//! same load on parents of their own, written by hand with the driver ([`HandPush`]: in
//! transactions the update and the insert in one, retried on `TransientTransactionError` by the
//! driver's `and_run`; ordered, the insert then the update; no coordination either way).
//!
//! In transactions, pushes to one parent conflict: the server lets one commit and aborts the
//! others, which retry. Within one process the store queues pushes to a parent that has a
//! transaction in flight and runs them together in the next one (group commit). Across
//! processes, when the stores fold (`--hot-folding true`, the default here; the library's
//! default is off, `StoreOptions::folding`), a parent whose push transaction conflicted is
//! folded: pushes queue in its document
//! of `subset_folds` and one transaction at a time writes every push queued (see the
//! consistency guide). For those configurations the benchmark starts copies of itself in a
//! worker mode (`--hot-worker`) against the same server, starts them at once, and gathers their
//! latencies and acknowledged pushes from their output.
//!
//! Around each run the server's transaction counters (`serverStatus`) give the transactions
//! committed and aborted per push. The library counts its retries nowhere (each is a `tracing`
//! debug event), so retries are not reported; each retry of a whole transaction follows an abort
//! (only a commit whose result is unknown is retried without one).
//!
//! After each run the collections are checked against the pushes acknowledged so far, with the
//! driver alone: each acknowledged review stored once, under its parent, no other review stored,
//! each parent's count and embedded `_id`s consistent with that; then `Children::check` compares
//! every touched parent's subset with the child collection.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use futures::TryStreamExt;
use mongodb::Database;
use rand::rngs::StdRng;
use rand::SeedableRng;
use subset::bson;
use subset::bson_compat;
use subset::{Store, WriteMode};

use crate::data::{DataSet, Product, Review, REVIEWS, SUBSET};
use crate::hand::HandPush;
use crate::measure::{closed_loop, Rounds, Run, Task};
use crate::stats::{Picker, Spread};
use crate::Res;

/// Whether the stores fold (`--hot-folding`), in this process and its workers.
pub static FOLDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn folding() -> bool {
    FOLDING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Pushing tasks in the one-process configurations.
pub const TASKS: usize = 16;
/// Pushing tasks in each worker process.
pub const TASKS_PER_PROCESS: usize = 4;
/// Parents of the Zipf mix.
pub const ZIPF_PARENTS: usize = 1_000;
/// The Zipf mix's exponent: with 1,000 parents the hottest gets about 18 % of the pushes, the
/// next about 8 %, and half of the parents fewer than 0.03 % each.
pub const ZIPF_EXPONENT: f64 = 1.1;
/// Processes of the Zipf mix.
pub const ZIPF_PROCESSES: usize = 4;
/// Parents of one writer: [`TASKS`] for the one-parent and spread configurations (the first is
/// the hot one), then the Zipf mix's. The library pushes to parents `0..PARENTS`, the writes by
/// hand to the same number after them (see [`Writer::first`]).
const PARENTS: usize = TASKS + ZIPF_PARENTS;
/// Parents written: both writers'.
const ALL_PARENTS: usize = 2 * PARENTS;
/// The parents' `keep`.
const KEEP: usize = 10;

/// Who writes the pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// `Children::push`.
    Library,
    /// [`HandPush`], in the same write mode.
    Hand,
}

impl Writer {
    /// Both, in the order a configuration runs them in the first round.
    pub const ALL: [Writer; 2] = [Writer::Library, Writer::Hand];

    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Writer::Library => "library",
            Writer::Hand => "by hand",
        }
    }

    /// Its first parent: parent `i` of a configuration is parent `first() + i` of the
    /// experiment, so that the two writers never share a parent.
    fn first(self) -> usize {
        match self {
            Writer::Library => 0,
            Writer::Hand => PARENTS,
        }
    }
}

/// How the pushes are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// [`TASKS`] tasks in one process, one parent per task.
    Spread,
    /// [`TASKS`] tasks in one process on the same parent.
    OneParent,
    /// This many processes of [`TASKS_PER_PROCESS`] tasks on the same parent.
    Processes(usize),
    /// [`ZIPF_PROCESSES`] processes of [`TASKS_PER_PROCESS`] tasks, each push to one of
    /// [`ZIPF_PARENTS`] parents drawn from a Zipf distribution.
    Zipf,
}

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::Spread,
        Shape::OneParent,
        Shape::Processes(4),
        Shape::Processes(8),
        Shape::Zipf,
    ];

    pub fn name(self) -> String {
        match self {
            Shape::Spread => format!("{TASKS} tasks, {TASKS} parents (one each)"),
            Shape::OneParent => format!("{TASKS} tasks, 1 parent"),
            Shape::Processes(n) => format!("{n} processes × {TASKS_PER_PROCESS} tasks, 1 parent"),
            Shape::Zipf => format!(
                "{ZIPF_PROCESSES} processes × {TASKS_PER_PROCESS} tasks, {} parents, Zipf s={ZIPF_EXPONENT}",
                thousands(ZIPF_PARENTS as u64)
            ),
        }
    }

    /// Worker processes, for the configurations that push from several.
    pub fn processes(self) -> Option<usize> {
        match self {
            Shape::Spread | Shape::OneParent => None,
            Shape::Processes(n) => Some(n),
            Shape::Zipf => Some(ZIPF_PROCESSES),
        }
    }

    /// The parents it pushes to.
    fn parents(self) -> Parents {
        match self {
            Shape::Spread => Parents::Each { count: TASKS },
            Shape::OneParent | Shape::Processes(_) => Parents::Each { count: 1 },
            Shape::Zipf => Parents::Zipf,
        }
    }
}

/// Which parents the tasks of a run push to, as indices into the experiment's parents (see
/// [`parent_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parents {
    /// Task `t` always pushes to parent `t % count`.
    Each { count: usize },
    /// Each push goes to parent `TASKS + k`, `k` Zipf-distributed over [`ZIPF_PARENTS`]; which
    /// parent is hot follows from the seed, the same in every process.
    Zipf,
}

/// The `_id` of parent `i`.
pub fn parent_id(i: usize) -> ObjectId {
    data_set().product_id(i)
}

/// The data the parents and the reviews are generated from.
fn data_set() -> DataSet {
    DataSet {
        products: ALL_PARENTS,
        min_reviews: 1,
        max_reviews: 1,
        seed: 1,
    }
}

/// One configuration over the rounds.
#[derive(Debug, Clone)]
pub struct Row {
    pub mode: WriteMode,
    pub shape: Shape,
    pub writer: Writer,
    /// Pushes measured, all rounds.
    pub pushes: usize,
    pub rate: Spread,
    pub p50: Spread,
    pub p99: Spread,
    /// The slowest push of any round.
    pub max: f64,
    /// Transactions the server committed per acknowledged push (warm-up included), per round.
    pub commits: Spread,
    /// Transactions the server aborted per acknowledged push (warm-up included), per round.
    pub aborts: Spread,
}

/// A configuration in one mode: the library against the same pushes by hand.
#[derive(Debug, Clone)]
pub struct Against {
    pub mode: WriteMode,
    pub shape: Shape,
    /// Per round, the library's pushes/s over the hand-written ones'.
    pub rate: Spread,
    /// The same for p99 latency.
    pub p99: Spread,
}

/// A configuration's transactions against its ordered writes, through the library.
#[derive(Debug, Clone)]
pub struct Versus {
    pub shape: Shape,
    /// Per round, transactional pushes/s over ordered pushes/s.
    pub rate: Spread,
    /// The same for p99 latency.
    pub p99: Spread,
    /// The slowest push of any round, transactions and ordered writes.
    pub max: (f64, f64),
}

#[derive(Debug, Clone)]
pub struct Result {
    pub seconds: f64,
    pub warmup: f64,
    pub rounds: usize,
    /// Whether the library's stores folded (`--hot-folding`).
    pub folding: bool,
    pub rows: Vec<Row>,
    /// Per configuration that ran in both modes.
    pub versus: Vec<Versus>,
    /// Per configuration and mode that ran with both writers.
    pub against: Vec<Against>,
    /// Per round of the Zipf mix (both modes), the hottest parent's share of the pushes.
    pub zipf_hottest: Option<Spread>,
    /// Why the multi-process configurations did not run, if they did not.
    pub processes_skipped: Option<String>,
    /// Acknowledged pushes, warm-up included, all checked after their run.
    pub checked_pushes: u64,
    /// Runs checked.
    pub checked_runs: usize,
    /// Parents `Children::check` found clean, over all checks.
    pub checked_parents: usize,
    /// Wall-clock seconds of the whole experiment.
    pub total_secs: f64,
}

impl Result {
    pub fn versus(&self, shape: Shape) -> Option<&Versus> {
        self.versus.iter().find(|v| v.shape == shape)
    }

    /// The row of `shape` in `mode` by `writer`, if it ran.
    pub fn row(&self, mode: WriteMode, shape: Shape, writer: Writer) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.mode == mode && r.shape == shape && r.writer == writer)
    }
}

/// A new review dated now: pushes arrive newest last, as new reviews do, so most go to the head
/// of the subset; concurrent ones may arrive slightly out of order and take the `$sort` path.
fn fresh_review(data: &DataSet, task: usize, n: u64) -> Review {
    let mut review = data.new_review(task, n);
    review.id = ObjectId::new();
    review.date = DateTime::now();
    review
}

/// Pushes acknowledged: the parent's index and the review's `_id`.
type Acked = Vec<(usize, ObjectId)>;

/// What writes a run's pushes.
#[derive(Clone)]
enum Pushing {
    Library(Store<Product>),
    Hand(HandPush),
}

impl Pushing {
    fn writer(&self) -> Writer {
        match self {
            Pushing::Library(_) => Writer::Library,
            Pushing::Hand(_) => Writer::Hand,
        }
    }

    async fn push(&self, parent: ObjectId, review: &Review) -> Res<()> {
        match self {
            Pushing::Library(store) => {
                let handle = store.children(Product::RECENT_REVIEWS);
                handle.push(&parent, review).await?;
            }
            Pushing::Hand(hand) => hand.push(parent, std::slice::from_ref(review)).await?,
        }
        Ok(())
    }
}

/// A task pushing new reviews.
struct Pusher {
    pushing: Pushing,
    task: usize,
    next: Next,
    data: DataSet,
    /// Reviews pushed so far.
    n: u64,
    acked: Arc<Mutex<Acked>>,
}

/// How a task picks its next parent.
enum Next {
    Always(usize),
    Zipf { picker: Picker, rng: Box<StdRng> },
}

impl Task for Pusher {
    async fn op(&mut self) -> Res<()> {
        let parent = self.pushing.writer().first()
            + match &mut self.next {
                Next::Always(i) => *i,
                Next::Zipf { picker, rng } => TASKS + picker.pick(rng),
            };
        let review = fresh_review(&self.data, self.task, self.n);
        self.n += 1;
        self.pushing.push(parent_id(parent), &review).await?;
        self.acked
            .lock()
            .map_err(|_| "a pushing task panicked")?
            .push((parent, review.id));
        Ok(())
    }
}

/// `tasks` tasks push to `parents` (of `pushing`'s writer) for `warmup` (not recorded), then for
/// `duration`. Returns the run and every push acknowledged, warm-up included. `zipf_seed` orders
/// the Zipf mix's parents (the same in every process); `seed` the rest.
async fn pushes(
    pushing: &Pushing,
    parents: Parents,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
    zipf_seed: u64,
    seed: u64,
) -> Res<(Run, Acked)> {
    let data = DataSet { seed, ..data_set() };
    let acked = Arc::new(Mutex::new(Vec::new()));
    let pushers: Vec<Pusher> = (0..tasks)
        .map(|task| Pusher {
            pushing: pushing.clone(),
            task,
            next: match parents {
                Parents::Each { count } => Next::Always(task % count.max(1)),
                Parents::Zipf => Next::Zipf {
                    picker: Picker::zipf(ZIPF_PARENTS, ZIPF_EXPONENT, zipf_seed),
                    rng: Box::new(StdRng::seed_from_u64(
                        seed ^ (task as u64).wrapping_mul(0x9E37_79B9),
                    )),
                },
            },
            data,
            n: 0,
            acked: Arc::clone(&acked),
        })
        .collect();
    let run = closed_loop(pushers, warmup, duration).await?;
    let acked = std::mem::take(&mut *acked.lock().map_err(|_| "a pushing task panicked")?);
    Ok((run, acked))
}

/// Drops `db`, and writes [`ALL_PARENTS`] empty products.
async fn fresh(db: &Database) -> Res<()> {
    db.drop().await?;
    let store = Store::<Product>::new(db);
    store.ensure_indexes().await?;
    let data = data_set();
    let parents = (0..ALL_PARENTS)
        .map(|i| {
            let info = data.info(i);
            bson_compat::to_document(&Product {
                id: info.id,
                name: info.name,
                description: info.description,
                category: info.category,
                price: info.price,
                recent_reviews: Vec::new(),
                total_reviews: 0,
            })
        })
        .collect::<std::result::Result<Vec<Document>, _>>()?;
    db.collection::<Document>(SUBSET)
        .insert_many(parents)
        .await?;
    Ok(())
}

/// The server's transaction counters (`serverStatus`).
#[derive(Debug, Clone, Copy, Default)]
struct Transactions {
    committed: i64,
    aborted: i64,
}

impl Transactions {
    async fn read(db: &Database) -> Res<Transactions> {
        let status = db
            .client()
            .database("admin")
            .run_command(doc! { "serverStatus": 1 })
            .await?;
        let number = |key: &str| match status
            .get_document("transactions")
            .ok()
            .and_then(|d| d.get(key))
        {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Double(n)) => *n as i64,
            _ => 0,
        };
        Ok(Transactions {
            committed: number("totalCommitted"),
            aborted: number("totalAborted"),
        })
    }

    fn since(self, before: Transactions) -> Transactions {
        Transactions {
            committed: self.committed - before.committed,
            aborted: self.aborted - before.aborted,
        }
    }
}

/// One run: the measurement, the server's transactions during it (warm-up included), the
/// pushes acknowledged (warm-up included), and the hottest parent's share of them.
struct Measured {
    run: Run,
    transactions: Transactions,
    acked: u64,
    hottest: f64,
}

impl Measured {
    fn per_push(&self, n: i64) -> f64 {
        n as f64 / self.acked.max(1) as f64
    }
}

/// The pushes acknowledged so far, per parent, and the check of the collections against them.
struct Ledger {
    /// Acknowledged pushes per parent index.
    expected: Vec<u64>,
    index: HashMap<ObjectId, usize>,
    pushes: u64,
    runs: usize,
    clean_parents: usize,
}

impl Ledger {
    fn new() -> Ledger {
        Ledger {
            expected: vec![0; ALL_PARENTS],
            index: (0..ALL_PARENTS).map(|i| (parent_id(i), i)).collect(),
            pushes: 0,
            runs: 0,
            clean_parents: 0,
        }
    }

    /// Adds one run's acknowledged pushes and checks the collections: with the driver alone,
    /// that each of them is stored once under its parent and nothing else is stored, and each
    /// parent's count and embedded `_id`s agree with that; then `Children::check` on every parent
    /// the run touched (its subset is the top [`KEEP`] of the child collection, in order).
    async fn check(
        &mut self,
        db: &Database,
        store: &Store<Product>,
        acked: &[(usize, ObjectId)],
    ) -> Res<()> {
        let what = |m: String| -> Box<dyn std::error::Error + Send + Sync> {
            format!("hot parent, check after run {}: {m}", self.runs + 1).into()
        };
        let mut ids = HashSet::with_capacity(acked.len());
        let mut touched = HashSet::new();
        for &(parent, id) in acked {
            if !ids.insert(id) {
                return Err(what(format!("review {id} acknowledged twice")));
            }
            touched.insert(parent);
            self.expected[parent] += 1;
        }
        self.pushes += acked.len() as u64;

        // This run's reviews, each found once under its parent.
        let reviews = db.collection::<Document>(REVIEWS);
        for chunk in acked.chunks(10_000) {
            let mut want: HashMap<usize, u64> = HashMap::new();
            for &(parent, _) in chunk {
                *want.entry(parent).or_default() += 1;
            }
            let in_chunk: Vec<ObjectId> = chunk.iter().map(|&(_, id)| id).collect();
            let found = self
                .group(&reviews, doc! { "_id": { "$in": in_chunk } })
                .await?;
            if found != want {
                return Err(what(format!(
                    "of {} acknowledged reviews, {} found, or under other parents",
                    chunk.len(),
                    found.values().sum::<u64>()
                )));
            }
        }
        // Every parent's children: exactly the acknowledged ones, so none twice nor extra.
        let stored = self.group(&reviews, doc! {}).await?;
        for (i, &want) in self.expected.iter().enumerate() {
            let got = stored.get(&i).copied().unwrap_or(0);
            if got != want {
                return Err(what(format!(
                    "parent {} holds {got} reviews, {want} pushes to it were acknowledged",
                    parent_id(i)
                )));
            }
        }
        let mut parents = db
            .collection::<Document>(SUBSET)
            .find(doc! {})
            .projection(doc! { "total_reviews": 1, "recent_reviews._id": 1 })
            .await?;
        let mut seen = 0;
        while let Some(parent) = parents.try_next().await? {
            let id = parent.get_object_id("_id")?;
            let i = *self
                .index
                .get(&id)
                .ok_or_else(|| what(format!("unknown parent {id}")))?;
            seen += 1;
            let want = self.expected[i];
            let count = match parent.get("total_reviews") {
                Some(Bson::Int64(n)) => *n,
                Some(Bson::Int32(n)) => i64::from(*n),
                other => return Err(what(format!("parent {id}: count {other:?}"))),
            };
            if count != want as i64 {
                return Err(what(format!(
                    "parent {id} counts {count}, {want} pushes to it were acknowledged"
                )));
            }
            let embedded: Vec<ObjectId> = parent
                .get_array("recent_reviews")?
                .iter()
                .filter_map(|e| match e {
                    Bson::Document(d) => d.get_object_id("_id").ok(),
                    _ => None,
                })
                .collect();
            let distinct: HashSet<&ObjectId> = embedded.iter().collect();
            if embedded.len() != KEEP.min(want as usize) || distinct.len() != embedded.len() {
                return Err(what(format!(
                    "parent {id} embeds {} reviews ({} distinct), {want} were pushed to it",
                    embedded.len(),
                    distinct.len()
                )));
            }
        }
        if seen != ALL_PARENTS {
            return Err(what(format!("{seen} parents of {ALL_PARENTS}")));
        }
        // The library's own comparison of each touched subset with the child collection.
        let handle = store.children(Product::RECENT_REVIEWS);
        for &i in &touched {
            let drift = handle.check(&parent_id(i)).await?;
            if !drift.is_clean() {
                return Err(what(format!("parent {} drifted: {drift:?}", parent_id(i))));
            }
        }
        self.clean_parents += touched.len();
        self.runs += 1;
        Ok(())
    }

    /// Reviews matching `filter`, counted per parent index.
    async fn group(
        &self,
        reviews: &mongodb::Collection<Document>,
        filter: Document,
    ) -> Res<HashMap<usize, u64>> {
        let mut cursor = reviews
            .aggregate([
                doc! { "$match": filter },
                doc! { "$group": { "_id": "$product_id", "n": { "$sum": 1 } } },
            ])
            .await?;
        let mut counts = HashMap::new();
        while let Some(group) = cursor.try_next().await? {
            let parent = group.get_object_id("_id")?;
            let i = *self
                .index
                .get(&parent)
                .ok_or_else(|| format!("hot parent: reviews of an unknown parent {parent}"))?;
            let n = match group.get("n") {
                Some(Bson::Int32(n)) => u64::try_from(*n)?,
                Some(Bson::Int64(n)) => u64::try_from(*n)?,
                other => return Err(format!("hot parent: a count of {other:?}").into()),
            };
            counts.insert(i, n);
        }
        Ok(counts)
    }
}

/// The largest share of `acked` that went to one parent.
fn hottest(acked: &[(usize, ObjectId)]) -> f64 {
    let mut per: HashMap<usize, u64> = HashMap::new();
    for &(parent, _) in acked {
        *per.entry(parent).or_default() += 1;
    }
    per.values().copied().max().unwrap_or(0) as f64 / acked.len().max(1) as f64
}

/// The experiment on `db` (dropped first and last); `uri` and `database` are handed to the
/// worker processes.
pub async fn run(
    db: &Database,
    uri: &str,
    rounds: usize,
    warmup: Duration,
    duration: Duration,
    seed: u64,
) -> Res<Result> {
    let started = std::time::Instant::now();
    fresh(db).await?;
    let transactional =
        Store::<Product>::with_options(db, subset::StoreOptions::new().folding(folding()));
    if transactional.mode().await? != WriteMode::Transactional {
        return Err("the hot-parent experiment needs a replica set (transactions)".into());
    }
    let ordered =
        Store::<Product>::with_options(db, subset::StoreOptions::new().mode(WriteMode::Ordered));
    let exe = std::env::current_exe();
    let mut processes_skipped = exe
        .as_ref()
        .err()
        .map(|e| format!("the benchmark cannot find its own executable: {e}"));
    let mut ledger = Ledger::new();

    let modes = [WriteMode::Transactional, WriteMode::Ordered];
    let shapes = Shape::ALL;
    let writers = Writer::ALL;
    // Side `(m × shapes + s) × writers + w` is shape `s` in mode `m` by writer `w`. Which mode
    // goes first alternates between rounds, the shapes keep their order, and the two writers of
    // a configuration run back to back, which of them first alternating between rounds too.
    let side = |m: usize, s: usize, w: usize| (m * shapes.len() + s) * writers.len() + w;
    let schedule = Rounds {
        rounds,
        sides: modes.len() * shapes.len() * writers.len(),
        shift: shapes.len() * writers.len(),
    };
    let order = |round: usize, j: usize| schedule.side(round, j) ^ (round % 2);
    let runs = schedule
        .run_in(order, async |turn| {
            let w = turn.side % writers.len();
            let config = turn.side / writers.len();
            let (m, s) = (config / shapes.len(), config % shapes.len());
            let (mode, shape, writer) = (modes[m], shapes[s], writers[w]);
            let store = match mode {
                WriteMode::Transactional => &transactional,
                WriteMode::Ordered => &ordered,
            };
            eprintln!(
                "  round {}, {}, {}, {}",
                turn.round + 1,
                mode_name(mode),
                shape.name(),
                writer.name()
            );
            // The same seed for both writers: the same parents in the same order.
            let run_seed = seed ^ ((turn.round * 100 + m * 10 + s) as u64);
            let before = Transactions::read(db).await?;
            let (run, acked) = match shape.processes() {
                None => {
                    let pushing = match writer {
                        Writer::Library => Pushing::Library(store.clone()),
                        Writer::Hand => Pushing::Hand(HandPush::new(db, mode)),
                    };
                    let parents = shape.parents();
                    pushes(&pushing, parents, TASKS, warmup, duration, seed, run_seed).await?
                }
                Some(processes) => {
                    let Ok(exe) = &exe else { return Ok(None) };
                    let job = Workers {
                        exe: exe.clone(),
                        uri: uri.to_owned(),
                        database: db.name().to_owned(),
                        mode,
                        writer,
                        processes,
                        parents: shape.parents(),
                        seed,
                        warmup,
                        duration,
                    };
                    match tokio::task::spawn_blocking(move || job.run()).await? {
                        Ok(Gathered::Ran { latencies, acked }) => {
                            (Run::over(latencies, duration), acked)
                        }
                        Ok(Gathered::NotStarted(why)) => {
                            eprintln!("hot parent: worker processes did not start: {why}");
                            processes_skipped = Some(format!("worker processes failed: {why}"));
                            return Ok(None);
                        }
                        // Pushes may have landed that nobody acknowledged: the check cannot
                        // go on.
                        Err(e) => return Err(format!("hot parent: a worker failed: {e}").into()),
                    }
                }
            };
            let transactions = Transactions::read(db).await?.since(before);
            ledger.check(db, store, &acked).await?;
            Ok(Some(Measured {
                run,
                transactions,
                acked: acked.len() as u64,
                hottest: hottest(&acked),
            }))
        })
        .await?;
    db.drop().await?;

    let max = |r| {
        runs.of(r)
            .map(|x: &Measured| x.run.max())
            .fold(f64::NAN, f64::max)
    };
    let mut rows = Vec::new();
    let mut against = Vec::new();
    for (m, mode) in modes.into_iter().enumerate() {
        for (s, shape) in shapes.into_iter().enumerate() {
            for (w, writer) in writers.into_iter().enumerate() {
                let r = side(m, s, w);
                if runs.of(r).next().is_none() {
                    continue;
                }
                rows.push(Row {
                    mode,
                    shape,
                    writer,
                    pushes: runs.of(r).map(|x| x.run.len()).sum(),
                    rate: runs.spread(r, |x| x.run.rate()),
                    p50: runs.spread(r, |x| x.run.p50()),
                    p99: runs.spread(r, |x| x.run.p99()),
                    max: max(r),
                    commits: runs.spread(r, |x| x.per_push(x.transactions.committed)),
                    aborts: runs.spread(r, |x| x.per_push(x.transactions.aborted)),
                });
            }
            let (l, h) = (side(m, s, 0), side(m, s, 1));
            if runs.of(l).next().is_some() && runs.of(h).next().is_some() {
                against.push(Against {
                    mode,
                    shape,
                    rate: runs.ratio(l, h, |x| x.run.rate()),
                    p99: runs.ratio(l, h, |x| x.run.p99()),
                });
            }
        }
    }
    let versus = shapes
        .into_iter()
        .enumerate()
        .filter_map(|(s, shape)| {
            let (t, o) = (side(0, s, 0), side(1, s, 0));
            runs.of(t).next()?;
            runs.of(o).next()?;
            Some(Versus {
                shape,
                rate: runs.ratio(t, o, |x| x.run.rate()),
                p99: runs.ratio(t, o, |x| x.run.p99()),
                max: (max(t), max(o)),
            })
        })
        .collect();
    let zipf = shapes.iter().position(|&s| s == Shape::Zipf);
    let zipf_hottest = zipf.and_then(|s| {
        let shares: Vec<f64> = (0..modes.len())
            .flat_map(|m| (0..writers.len()).map(move |w| side(m, s, w)))
            .flat_map(|r| runs.of(r).map(|x| x.hottest))
            .collect();
        (!shares.is_empty()).then(|| Spread::of(&shares))
    });
    Ok(Result {
        seconds: duration.as_secs_f64(),
        warmup: warmup.as_secs_f64(),
        rounds,
        folding: folding(),
        rows,
        versus,
        against,
        zipf_hottest,
        processes_skipped,
        checked_pushes: ledger.pushes,
        checked_runs: ledger.runs,
        checked_parents: ledger.clean_parents,
        total_secs: started.elapsed().as_secs_f64(),
    })
}

fn mode_name(mode: WriteMode) -> &'static str {
    match mode {
        WriteMode::Transactional => "transactions",
        WriteMode::Ordered => "ordered",
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (k, c) in digits.chars().enumerate() {
        if k > 0 && (digits.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A multi-process configuration: `processes` copies of this executable in worker mode.
struct Workers {
    exe: std::path::PathBuf,
    uri: String,
    database: String,
    mode: WriteMode,
    writer: Writer,
    processes: usize,
    parents: Parents,
    seed: u64,
    warmup: Duration,
    duration: Duration,
}

/// What the workers reported.
enum Gathered {
    /// Every worker pushed: the measured latencies and the pushes acknowledged.
    Ran { latencies: Vec<f64>, acked: Acked },
    /// A worker could not be started or did not get ready; nothing was pushed.
    NotStarted(String),
}

/// Started workers, killed (by their own pids) if the run is abandoned.
struct Started(Vec<(Child, BufReader<ChildStdout>)>);

impl Drop for Started {
    fn drop(&mut self) {
        for (child, _) in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Workers {
    /// Starts the workers, waits until each is connected and says `ready`, tells them all to
    /// go, and gathers their latencies and acknowledged pushes. Blocking.
    fn run(self) -> Res<Gathered> {
        let (first, count, zipf) = match self.parents {
            Parents::Each { count } => (0, count, false),
            Parents::Zipf => (TASKS, ZIPF_PARENTS, true),
        };
        let mut started = Started(Vec::new());
        for _ in 0..self.processes {
            let mut command = Command::new(&self.exe);
            command
                .args(["--hot-worker", &self.uri, "--database", &self.database])
                .args([
                    "--worker-mode",
                    match self.mode {
                        WriteMode::Transactional => "transactional",
                        WriteMode::Ordered => "ordered",
                    },
                ])
                .args(["--worker-first", &first.to_string()])
                .args(["--worker-count", &count.to_string()])
                .args(["--worker-tasks", &TASKS_PER_PROCESS.to_string()])
                .args(["--seed", &self.seed.to_string()])
                .args(["--hot-folding", &folding().to_string()])
                .args(["--warmup", &self.warmup.as_secs_f64().to_string()])
                .args(["--duration", &self.duration.as_secs_f64().to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            if zipf {
                command.arg("--worker-zipf");
            }
            if self.writer == Writer::Hand {
                command.arg("--worker-hand");
            }
            let mut child = match command.spawn() {
                Ok(child) => child,
                Err(e) => return Ok(Gathered::NotStarted(e.to_string())),
            };
            let Some(out) = child.stdout.take() else {
                return Ok(Gathered::NotStarted("no worker stdout".into()));
            };
            started.0.push((child, BufReader::new(out)));
        }
        for (_, out) in &mut started.0 {
            let mut line = String::new();
            out.read_line(&mut line)?;
            if line.trim() != "ready" {
                return Ok(Gathered::NotStarted(format!(
                    "a worker said {line:?} instead of `ready`"
                )));
            }
        }
        for (child, _) in &mut started.0 {
            let stdin = child.stdin.as_mut().ok_or("no worker stdin")?;
            stdin.write_all(b"go\n")?;
            stdin.flush()?;
        }
        let (mut latencies, mut acked) = (Vec::new(), Vec::new());
        for (child, out) in &mut started.0 {
            for line in out.lines() {
                let line = line?;
                let bad = || format!("a worker wrote {line:?}");
                match line.split_whitespace().collect::<Vec<_>>()[..] {
                    ["L", ms] => latencies.push(ms.parse::<f64>().map_err(|_| bad())?),
                    ["A", parent, id] => acked.push((
                        parent.parse::<usize>().map_err(|_| bad())?,
                        id.parse::<ObjectId>().map_err(|_| bad())?,
                    )),
                    _ => return Err(bad().into()),
                }
            }
            let status = child.wait()?;
            if !status.success() {
                return Err(format!("a worker exited with {status}").into());
            }
        }
        Ok(Gathered::Ran { latencies, acked })
    }
}

/// What a worker process does (`--hot-worker URI`).
pub struct Worker<'a> {
    pub uri: &'a str,
    pub database: &'a str,
    pub mode: WriteMode,
    /// Who writes: the library, or [`HandPush`] (on the hand-written parents).
    pub writer: Writer,
    /// Its tasks push to parent `first` (`count` 1), to `first + t % count` (task `t`), or,
    /// with `zipf`, each push to one of [`ZIPF_PARENTS`] from `first` on, Zipf-distributed; of
    /// the writer's parents, as in [`Writer::first`].
    pub first: usize,
    pub count: usize,
    pub zipf: bool,
    pub tasks: usize,
    /// The Zipf mix's order of parents (the same in every worker of a run).
    pub seed: u64,
    pub warmup: Duration,
    pub duration: Duration,
}

/// Worker mode: `tasks` tasks of `writer` push once this process reads `go` on its standard input; writes
/// `ready` first, and at the end `L <ms>` per measured latency and `A <parent> <review _id>`
/// per acknowledged push (warm-up included), one a line, on its standard output.
pub async fn worker(w: Worker<'_>) -> Res<()> {
    let parents = match (w.zipf, w.first, w.count) {
        (true, TASKS, ZIPF_PARENTS) => Parents::Zipf,
        (false, 0, count @ 1..=TASKS) => Parents::Each { count },
        _ => return Err("a worker's parents are the first 1..=16 or the Zipf mix".into()),
    };
    let client = mongodb::Client::with_uri_str(w.uri).await?;
    let db = client.database(w.database);
    let store = Store::<Product>::with_options(
        &db,
        subset::StoreOptions::new().mode(w.mode).folding(folding()),
    );
    // Connected and the parent there before the clock starts.
    store
        .get(&parent_id(w.writer.first() + w.first))
        .await?
        .ok_or("the hot parent is missing")?;
    let pushing = match w.writer {
        Writer::Library => Pushing::Library(store.clone()),
        Writer::Hand => Pushing::Hand(HandPush::new(&db, w.mode)),
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ready")?;
        out.flush()?;
    }
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    if go.trim() != "go" {
        return Err(format!("expected `go`, read {go:?}").into());
    }
    let own = w.seed ^ u64::from(std::process::id()).wrapping_mul(0xC2B2_AE3D);
    let (run, acked) = pushes(
        &pushing, parents, w.tasks, w.warmup, w.duration, w.seed, own,
    )
    .await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for l in run.latencies() {
        writeln!(out, "L {l}")?;
    }
    for (parent, id) in &acked {
        writeln!(out, "A {parent} {}", id.to_hex())?;
    }
    out.flush()?;
    // A client dropped as the process exits ends its sessions on a runtime that is shutting
    // down, and the driver panics; shut it down while the runtime runs.
    drop((pushing, store, db));
    client.shutdown().await;
    Ok(())
}
