//! `subset-bench`: the subset pattern and the `subset` library measured on a real `mongod`.
//!
//! `cargo run --release -p subset-bench` starts a throwaway `mongod` (0.25 GB cache) unless
//! `MONGODB_URI` names a server, runs the experiments of `docs/bench/README.md`, and writes
//! `docs/bench/results.md` and `docs/bench/working-set.svg`. With `--memory-limit` the `mongod`
//! it starts measures the working set confined to that much memory (see `memory.rs`).

mod batching;
mod data;
mod hand;
mod hot_parent;
mod load;
mod measure;
mod memory;
mod model_change;
mod overhead;
mod previews;
mod push_cost;
mod report;
mod stats;
mod sum_types;
mod trips;
mod votes;
mod wire;
mod working_set;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use subset::testkit::{MongoServer, Topology};
use subset::WriteMode;

use crate::data::{DataSet, EMBEDDED, REFERENCED, REVIEWS, SUBSET};
use crate::measure::Rounds;
use crate::memory::Cgroup;
use crate::report::{
    Memory, Overhead, OverheadRun, RatioRow, ReadRow, Report, ShowRow, Trips, WorkingSet, WriteRow,
};
use crate::stats::Picker;
use crate::working_set::{Ctx, Layout};

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Experiment {
    /// Product pages, review writes and "show all reviews" per layout, data larger than cache.
    WorkingSet,
    /// The library against the same operations written with the raw driver.
    Overhead,
    /// Commands sent per operation (command monitoring).
    RoundTrips,
    /// `push_many` in batches against one `push` per review.
    Batching,
    /// 16 tasks pushing to one parent against 16 parents, in both write modes; 4 and 8 processes
    /// of 4 tasks on one parent; 4 processes of 4 tasks over 1,000 parents, Zipf-distributed;
    /// each through the library and written by hand with the driver.
    HotParent,
    /// Push latency into full subsets of keep 5, 100 and 1000, in order and out of order; and at
    /// keep 1000 a hand-written layout that appends with a plain `$push` and trims every 1000.
    PushCost,
    /// Parents embedding previews of 1 KB reviews against parents embedding them whole: size,
    /// product-page reads/s and push latency.
    Previews,
    /// 16 tasks voting "helpful" on one review, 100 reviews of one product and 100 products:
    /// the library's `patch().inc` against a hand-written `$inc` and read-modify-replace.
    Votes,
    /// A model changed on live data (keep 5 → 10, a view added): reads of parents built under
    /// the old model against rebuilt ones, and `Store::rebuild` in both write modes.
    ModelChange,
    /// Push latency into an account keeping a `Decimal128` running sum against one keeping an
    /// `i64` sum, alternating.
    SumTypes,
}

/// A write mode, as the hidden worker mode takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Transactional,
    Ordered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Topo {
    /// A single-node replica set: the library's writes are transactions.
    ReplicaSet,
    /// A standalone server: the library's writes are ordered, without transactions.
    Standalone,
}

/// Benchmarks of the subset pattern and the `subset` library on a real mongod.
///
/// Starts its own mongod (single-node replica set, 0.25 GB WiredTiger cache) unless MONGODB_URI
/// names a server, and writes results.md and working-set.svg into --out.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Products in the working-set data set (each with --min-reviews..=--max-reviews reviews).
    #[arg(long, default_value_t = 10_000)]
    products: usize,
    #[arg(long, default_value_t = 200)]
    min_reviews: usize,
    #[arg(long, default_value_t = 800)]
    max_reviews: usize,
    /// Which experiments to run.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "working-set,overhead,round-trips,batching,hot-parent,push-cost,previews,votes,model-change,sum-types"
    )]
    experiments: Vec<Experiment>,
    /// Concurrent client tasks for the product-page reads.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    tasks: Vec<usize>,
    /// Seconds measured per read configuration and round.
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// Seconds of unrecorded reads before each measurement (the cache fills with that layout).
    #[arg(long, default_value_t = 1.5)]
    warmup: f64,
    /// Repetitions of every read configuration (and of the batching experiment), interleaved.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Zipf exponent of the skewed product popularity.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Single review writes measured per layout.
    #[arg(long, default_value_t = 300)]
    writes: usize,
    /// Products whose reviews are all read, 20 a page, per layout.
    #[arg(long, default_value_t = 20)]
    show_all: usize,
    /// Iterations per operation and side in the overhead experiment; reads of each kind, before
    /// and after the rebuild, per round in the model-change experiment.
    #[arg(long, default_value_t = 2_000)]
    iterations: usize,
    /// Parents in the model-change experiment, each with 15–25 children.
    #[arg(long, default_value_t = 10_000)]
    parents: usize,
    /// `push_many` batch size in the batching experiment.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Pushes of each kind (in order, out of order) per keep and round, push-cost experiment;
    /// pushes per layout and round, previews experiment.
    #[arg(long, default_value_t = 200)]
    pushes: usize,
    /// Confine the mongod the benchmark starts to this much memory (e.g. `512M`, `1G`) for the
    /// working-set measurements, with a cgroup: the data is written without the limit, then
    /// the server restarts, cold, under it. Needs root (or a delegated cgroup); the report
    /// says when it cannot be done.
    #[arg(long, value_parser = memory::parse_size)]
    memory_limit: Option<u64>,
    /// Concurrent writers while loading the data set.
    #[arg(long, default_value_t = 4)]
    load_tasks: usize,
    /// Server to start (ignored with MONGODB_URI, which is used as it is).
    #[arg(long, value_enum, default_value = "replica-set")]
    topology: Topo,
    /// Database of the working-set data; the other experiments use `<database>_*`.
    #[arg(long, default_value = "subset_bench")]
    database: String,
    /// Keep the working-set data if `--database` already holds it (with MONGODB_URI).
    #[arg(long)]
    reuse: bool,
    /// Seed of the data and of the random product choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where results.md and working-set.svg go.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/bench"))]
    out: PathBuf,
    /// Whether the hot-parent experiment's stores fold pushes to a parent contended across
    /// processes (`StoreOptions::folding`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    hot_folding: bool,
    /// Internal: run as one worker process of the hot-parent experiment against this URI.
    #[arg(long, hide = true)]
    hot_worker: Option<String>,
    #[arg(long, hide = true, value_enum, default_value = "transactional")]
    worker_mode: Mode,
    /// Internal: the worker's first parent and how many it pushes to.
    #[arg(long, hide = true, default_value_t = 0)]
    worker_first: usize,
    #[arg(long, hide = true, default_value_t = 1)]
    worker_count: usize,
    /// Internal: the worker picks each push's parent from a Zipf distribution.
    #[arg(long, hide = true)]
    worker_zipf: bool,
    /// Internal: the worker pushes by hand with the driver, not through the library.
    #[arg(long, hide = true)]
    worker_hand: bool,
    #[arg(long, hide = true, default_value_t = 4)]
    worker_tasks: usize,
}

/// The memory limit asked for, and how it is applied: the cgroup, and the wrapper script that
/// puts `mongod` into it (removed with this value; the cgroup removes itself).
struct Confinement {
    limit: u64,
    setup: Result<(Cgroup, PathBuf), String>,
}

impl Drop for Confinement {
    fn drop(&mut self) {
        if let Ok((_, dir)) = &self.setup {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Makes the cgroup and points the test kit at a `mongod` that enters it. Runs before the
/// benchmark's runtime exists: it sets `SUBSET_MONGOD` for the test kit, and setting the
/// environment is only sound while no other thread reads it.
fn confine(limit: u64) -> Confinement {
    let setup = (|| {
        if std::env::var("MONGODB_URI").is_ok_and(|uri| !uri.trim().is_empty()) {
            return Err("the server at MONGODB_URI was not started by the benchmark".to_owned());
        }
        let cgroup = Cgroup::create()?;
        let real = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(subset::testkit::locate_mongod())
            .map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!("subset-bench-{}", std::process::id()));
        let wrapper = cgroup
            .wrapper(&real, &dir)
            .map_err(|e| format!("cannot write the mongod wrapper: {e}"))?;
        std::env::set_var("SUBSET_MONGOD", &wrapper);
        Ok((cgroup, dir))
    })();
    match &setup {
        Ok((cgroup, _)) => eprintln!("mongod will run in {}", cgroup.describe()),
        Err(reason) => eprintln!("cannot limit mongod's memory: {reason}; running without"),
    }
    Confinement { limit, setup }
}

fn main() -> Res<()> {
    let args = Args::parse();
    if args.min_reviews < data::PAGE_REVIEWS + 1 || args.min_reviews > args.max_reviews {
        return Err("--min-reviews must be above 10 and at most --max-reviews".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    hot_parent::FOLDING.store(args.hot_folding, std::sync::atomic::Ordering::Relaxed);
    if let Some(uri) = &args.hot_worker {
        let mode = match args.worker_mode {
            Mode::Transactional => WriteMode::Transactional,
            Mode::Ordered => WriteMode::Ordered,
        };
        return runtime?.block_on(hot_parent::worker(hot_parent::Worker {
            uri,
            database: &args.database,
            mode,
            writer: if args.worker_hand {
                hot_parent::Writer::Hand
            } else {
                hot_parent::Writer::Library
            },
            first: args.worker_first,
            count: args.worker_count,
            zipf: args.worker_zipf,
            tasks: args.worker_tasks,
            seed: args.seed,
            warmup: Duration::from_secs_f64(args.warmup),
            duration: Duration::from_secs_f64(args.duration),
        }));
    }
    drop(runtime);
    let mut confinement = args.memory_limit.map(confine);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(args, confinement.as_mut()));
    // The servers are gone: the cgroup can go too.
    drop(runtime);
    drop(confinement);
    result
}

async fn run(args: Args, confinement: Option<&mut Confinement>) -> Res<()> {
    let topology = match args.topology {
        Topo::ReplicaSet => Topology::ReplicaSet,
        Topo::Standalone => Topology::Standalone,
    };
    eprintln!("starting the server…");
    let mut server = MongoServer::start(topology).await?;
    let client = server.client().await?;
    let mut report = Report::new(&client, &server, std::env::args().skip(1).collect()).await?;
    eprintln!(
        "server {} (mongod {}, {})",
        server.uri(),
        report.server_version,
        report.topology
    );
    let has = |e| args.experiments.contains(&e);

    if has(Experiment::RoundTrips) {
        eprintln!("round trips…");
        let name = format!("{}_trips", args.database);
        let (mode, counts) = trips::count(server.uri(), &name, None).await?;
        let mut trips = vec![(mode_name(mode, server.is_external()), counts)];
        if mode == WriteMode::Transactional {
            // The other write mode: a standalone server of our own, or forced ordered writes.
            if server.is_external() {
                let (_, counts) =
                    trips::count(server.uri(), &name, Some(WriteMode::Ordered)).await?;
                trips.push(("ordered writes (forced)".into(), counts));
            } else {
                let standalone = MongoServer::start(Topology::Standalone).await?;
                let (mode, counts) = trips::count(standalone.uri(), &name, None).await?;
                trips.push((mode_name(mode, false), counts));
            }
        }
        report.add(Trips(trips));
    }

    if has(Experiment::Batching) {
        eprintln!("batching…");
        let db = client.database(&format!("{}_batching", args.database));
        report.add(batching::run(&db, args.batch, args.rounds, args.seed).await?);
    }

    if has(Experiment::Overhead) {
        eprintln!("library overhead…");
        let name = format!("{}_overhead", args.database);
        let (mode, rows) =
            overhead::run(server.uri(), &name, args.iterations, args.seed, None).await?;
        let mut runs = vec![OverheadRun {
            mode,
            forced: false,
            rows,
        }];
        // The other write mode on the same server: ordered writes forced.
        if mode == WriteMode::Transactional {
            eprintln!("library overhead, ordered writes…");
            let forced = Some(WriteMode::Ordered);
            let (mode, rows) =
                overhead::run(server.uri(), &name, args.iterations, args.seed, forced).await?;
            runs.push(OverheadRun {
                mode,
                forced: true,
                rows,
            });
        }
        report.add(Overhead(runs));
    }

    if has(Experiment::HotParent) {
        eprintln!("hot parent…");
        let db = client.database(&format!("{}_hot", args.database));
        report.add(
            hot_parent::run(
                &db,
                server.uri(),
                args.rounds,
                Duration::from_secs_f64(args.warmup),
                Duration::from_secs_f64(args.duration),
                args.seed,
            )
            .await?,
        );
    }

    if has(Experiment::PushCost) {
        eprintln!("push cost by keep…");
        let db = client.database(&format!("{}_keep", args.database));
        report.add(push_cost::run(&db, args.pushes, args.rounds, args.seed).await?);
    }

    if has(Experiment::SumTypes) {
        eprintln!("sum types…");
        let db = client.database(&format!("{}_sums", args.database));
        report.add(sum_types::run(&db, args.pushes, args.rounds, args.seed).await?);
    }

    if has(Experiment::Previews) {
        eprintln!("preview subsets…");
        let db = client.database(&format!("{}_previews", args.database));
        report.add(
            previews::run(
                &db,
                args.pushes,
                args.rounds,
                Duration::from_secs_f64(args.warmup),
                Duration::from_secs_f64(args.duration),
                args.seed,
            )
            .await?,
        );
    }

    if has(Experiment::Votes) {
        eprintln!("helpful votes…");
        let db = client.database(&format!("{}_votes", args.database));
        report.add(
            votes::run(
                &db,
                args.rounds,
                Duration::from_secs_f64(args.warmup),
                Duration::from_secs_f64(args.duration),
                args.seed,
            )
            .await?,
        );
    }

    if has(Experiment::ModelChange) {
        eprintln!("model change…");
        let db = client.database(&format!("{}_model", args.database));
        report.add(
            model_change::run(&db, args.parents, args.iterations, args.rounds, args.seed).await?,
        );
    }

    if has(Experiment::WorkingSet) {
        drop(client);
        report.add(working_set(&args, &mut server, confinement).await?);
    }

    report.write(&args.out)?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

fn mode_name(mode: WriteMode, external: bool) -> String {
    match (mode, external) {
        (WriteMode::Transactional, false) => "replica set (transactions)".into(),
        (WriteMode::Ordered, false) => "standalone (ordered writes)".into(),
        (WriteMode::Transactional, true) => "MONGODB_URI (transactions)".into(),
        (WriteMode::Ordered, true) => "MONGODB_URI (ordered writes)".into(),
    }
}

/// Stops the server, sets the limit, drops the cgroup's page cache and starts the server again;
/// returns what the report says about memory.
async fn restart_confined(server: &mut MongoServer, confinement: &mut Confinement) -> Res<Memory> {
    let limit = confinement.limit;
    let cgroup = match &mut confinement.setup {
        Ok((cgroup, _)) => cgroup,
        Err(reason) => {
            return Ok(Memory::Cannot {
                limit,
                reason: reason.clone(),
            })
        }
    };
    eprintln!(
        "restarting mongod under a memory limit of {} MiB…",
        limit >> 20
    );
    server.stop()?;
    let limited = cgroup.set_limit(limit);
    cgroup.drop_page_cache();
    let peak_reset = cgroup.reset_peak();
    server.restart().await?;
    Ok(match limited {
        Ok(()) => Memory::Confined {
            // As the kernel holds it (rounded to pages).
            limit: cgroup.limit().unwrap_or(limit),
            cgroup: cgroup.describe(),
            peak_reset,
            usage: memory::Usage::default(),
        },
        Err(e) => Memory::Cannot {
            limit,
            reason: format!("setting it failed: {e}"),
        },
    })
}

async fn working_set(
    args: &Args,
    server: &mut MongoServer,
    confinement: Option<&mut Confinement>,
) -> Res<WorkingSet> {
    let client = server.client().await?;
    let data = DataSet {
        products: args.products,
        min_reviews: args.min_reviews,
        max_reviews: args.max_reviews,
        seed: args.seed,
    };
    let db = client.database(&args.database);
    let reused = args.reuse && load::present(&db, &data).await?;
    let load_time = if reused {
        eprintln!("reusing the data set in {}", args.database);
        None
    } else {
        eprintln!(
            "writing {} products, {} reviews…",
            data.products,
            data.total_reviews()
        );
        Some(load::load(&db, &data, args.load_tasks).await?)
    };
    let mut report = WorkingSet {
        data: report::DataRow {
            products: data.products,
            reviews: data.total_reviews(),
            min_reviews: data.min_reviews,
            max_reviews: data.max_reviews,
            load_time,
        },
        sizes: Vec::new(),
        memory: None,
        reads: Vec::new(),
        ratios: Vec::new(),
        writes: Vec::new(),
        show_all: Vec::new(),
    };
    for name in [EMBEDDED, SUBSET, REFERENCED, REVIEWS] {
        report.sizes.push(load::coll_size(&db, name).await?);
    }
    let cgroup = match confinement {
        Some(confinement) => {
            drop(client);
            report.memory = Some(restart_confined(server, confinement).await?);
            confinement.setup.as_ref().ok().map(|(cgroup, _)| cgroup)
        }
        None => None,
    };
    // A new client: the server may have restarted.
    let client = server.client().await?;
    let db = client.database(&args.database);
    let measured = measurements(args, &db, data, server.pid(), &mut report).await;
    if let (Some(cgroup), Some(Memory::Confined { usage, .. })) = (cgroup, &mut report.memory) {
        *usage = cgroup.usage();
        if let (Err(e), Some(kills @ 1..)) = (&measured, usage.oom_kills) {
            return Err(format!(
                "{e} (mongod ran out of memory: {kills} OOM kills in its cgroup; raise --memory-limit)"
            )
            .into());
        }
    }
    measured.map(|()| report)
}

/// The working-set measurements on a written data set.
async fn measurements(
    args: &Args,
    db: &mongodb::Database,
    data: DataSet,
    mongod: Option<u32>,
    report: &mut WorkingSet,
) -> Res<()> {
    let mut ctx = Ctx::new(db, data);
    ctx.mongod = mongod;
    let ctx = Arc::new(ctx);
    working_set::check(&ctx).await?;

    // Product-page reads: every (layout, popularity, tasks), `rounds` times, interleaved.
    let pickers = [
        (
            "uniform".to_owned(),
            Arc::new(Picker::Uniform(data.products)),
        ),
        (
            format!("Zipf s={}", args.zipf),
            Arc::new(Picker::zipf(data.products, args.zipf, args.seed)),
        ),
    ];
    let warmup = Duration::from_secs_f64(args.warmup);
    let duration = Duration::from_secs_f64(args.duration);
    let configs: Vec<(usize, usize)> = (0..pickers.len())
        .flat_map(|p| args.tasks.iter().map(move |&t| (p, t)))
        .collect();
    let layouts = Layout::ALL.len();
    let total = (args.rounds * layouts * configs.len()) as u64;
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>28} [{bar:40}] {pos}/{len} (eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message("product-page reads");
    // Side `c × layouts + l` is layout `l` in configuration `c`. Within a round, the layouts of
    // one configuration run back to back, so that the ratios between them compare runs made
    // minutes apart at most, not a whole round apart: on a shared machine the load drifts over
    // minutes.
    let side = |c: usize, l: usize| c * layouts + l;
    let schedule = Rounds {
        rounds: args.rounds,
        sides: configs.len() * layouts,
        shift: 0,
    };
    let runs = schedule
        .run(async |turn| {
            let (c, l) = (turn.side / layouts, turn.side % layouts);
            let (p, tasks) = configs[c];
            let seed = args.seed ^ ((turn.round * 1000 + l * 100 + c) as u64);
            let layout = Layout::ALL[l];
            let run =
                working_set::reads(&ctx, layout, &pickers[p].1, tasks, warmup, duration, seed)
                    .await?;
            bar.inc(1);
            Ok(Some(run))
        })
        .await?;
    bar.finish_and_clear();
    let subset = Layout::ALL
        .iter()
        .position(|&l| l == Layout::Subset)
        .unwrap_or(0);
    for (l, layout) in Layout::ALL.into_iter().enumerate() {
        for (c, &(p, tasks)) in configs.iter().enumerate() {
            let s = side(c, l);
            report.reads.push(ReadRow {
                layout,
                popularity: pickers[p].0.clone(),
                tasks,
                ops: runs.spread(s, |r| r.run.rate()),
                p50: runs.spread(s, |r| r.run.p50()),
                p99: runs.spread(s, |r| r.run.p99()),
                cache_kb: runs.spread(s, |r| r.cache_kb),
                disk_kb: runs.spread(s, |r| r.disk_kb),
            });
            if layout != Layout::Subset {
                report.ratios.push(RatioRow {
                    popularity: pickers[p].0.clone(),
                    tasks,
                    other: layout,
                    ratio: runs.ratio(side(c, subset), s, |r| r.run.rate()),
                });
            }
        }
    }

    // One new review per layout; the subset both ways when the server has transactions.
    eprintln!("review writes…");
    let mode = ctx.store.mode().await?;
    let mut writes = vec![(Layout::Embedded, false), (Layout::Subset, false)];
    if mode == WriteMode::Transactional {
        writes.push((Layout::Subset, true));
    }
    writes.push((Layout::TwoQuery, false));
    for (k, (layout, ordered)) in writes.into_iter().enumerate() {
        // The same products for every layout; `k` keeps the new reviews' dates apart.
        let seed = args.seed.wrapping_mul(7919);
        let run = working_set::writes(&ctx, layout, ordered, args.writes, seed, k).await?;
        let name = match (layout, ordered, mode) {
            (Layout::Subset, false, WriteMode::Transactional) => {
                "subset (this library), transaction".to_owned()
            }
            (Layout::Subset, true, _) => "subset (this library), ordered writes".to_owned(),
            (Layout::TwoQuery, _, _) => "referenced (insert + `$inc` count)".to_owned(),
            (Layout::Embedded, _, _) => "fully embedded (`$push` + `$inc`)".to_owned(),
            _ => layout.name().to_owned(),
        };
        report.writes.push(WriteRow {
            name,
            n: run.len(),
            p50: run.p50(),
            p99: run.p99(),
            ops: run.rate(),
        });
    }

    // Show all reviews, 20 a page.
    eprintln!("show all reviews…");
    for layout in [Layout::Embedded, Layout::Subset, Layout::TwoQuery] {
        // The same products for every layout.
        let seed = args.seed.wrapping_mul(104_729);
        let (run, pages) = working_set::show_all(&ctx, layout, args.show_all, seed).await?;
        report.show_all.push(ShowRow {
            layout,
            products: run.len(),
            pages,
            p50: run.p50(),
            max: run.max(),
            per_page: run.total() / pages as f64,
        });
    }
    Ok(())
}
