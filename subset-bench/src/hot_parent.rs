//! Experiment 5, hot parents: 16 tasks pushing to one parent against the same 16 tasks spread
//! over 16 parents, for a fixed time, in both write modes; and 4 processes of 4 tasks each on
//! one parent.
//!
//! In transactions, pushes to one parent conflict: the server lets one commit and aborts the
//! others, which retry. Within one process the store queues pushes to a parent that has a
//! transaction in flight and runs them together in the next one (group commit). Processes do not
//! share that queue: their pushes conflict and spread out by the backoff (exponential, full
//! jitter). For that case the benchmark starts copies of itself in a worker mode (`--hot-worker`)
//! against the same server, starts them at once, and gathers their latencies from their output.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use bson::oid::ObjectId;
use bson::{DateTime, Document};
use mongodb::Database;
use subset::bson;
use subset::bson_compat;
use subset::{Store, WriteMode};

use crate::data::{DataSet, Product, Review, SUBSET};
use crate::measure::{closed_loop, Rounds, Run, Task};
use crate::stats::Spread;
use crate::Res;

/// Pushing tasks in every configuration.
pub const TASKS: usize = 16;
/// Worker processes in the cross-process configuration (each with `TASKS / PROCESSES` tasks).
pub const PROCESSES: usize = 4;

/// How the pushes are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One parent per task.
    Spread,
    /// Every task on the same parent.
    OneParent,
    /// Every task on the same parent, from [`PROCESSES`] processes.
    Processes,
}

impl Shape {
    pub fn name(self) -> String {
        match self {
            Shape::Spread => format!("{TASKS} tasks, {TASKS} parents (one each)"),
            Shape::OneParent => format!("{TASKS} tasks, 1 parent"),
            Shape::Processes => format!(
                "{PROCESSES} processes × {} tasks, 1 parent",
                TASKS / PROCESSES
            ),
        }
    }
}

/// One configuration over the rounds.
#[derive(Debug, Clone)]
pub struct Row {
    pub mode: WriteMode,
    pub shape: Shape,
    /// Pushes measured, all rounds.
    pub pushes: usize,
    pub rate: Spread,
    pub p50: Spread,
    pub p99: Spread,
    /// The slowest push of any round.
    pub max: f64,
}

#[derive(Debug, Clone)]
pub struct Result {
    pub seconds: f64,
    pub rounds: usize,
    pub rows: Vec<Row>,
    /// Per round, on one parent in one process: transactional pushes/s over ordered pushes/s.
    pub rate_ratio: Spread,
    /// The same for p99 latency.
    pub p99_ratio: Spread,
    /// Why the cross-process configuration did not run, if it did not.
    pub processes_skipped: Option<String>,
}

/// A new review dated now: pushes arrive newest last, as new reviews do, so most go to the head
/// of the subset; concurrent ones may arrive slightly out of order and take the `$sort` path.
fn fresh_review(data: &DataSet, task: usize, n: u64) -> Review {
    let mut review = data.new_review(task, n);
    review.id = ObjectId::new();
    review.date = DateTime::now();
    review
}

/// A task pushing new reviews to one parent.
struct Pusher {
    store: Store<Product>,
    parent: ObjectId,
    data: DataSet,
    task: usize,
    /// Reviews pushed so far.
    n: u64,
}

impl Task for Pusher {
    async fn op(&mut self) -> Res<()> {
        let review = fresh_review(&self.data, self.task, self.n);
        self.n += 1;
        let handle = self.store.subset(Product::RECENT_REVIEWS);
        handle.push(&self.parent, &review).await?;
        Ok(())
    }
}

/// `tasks` tasks push for `warmup` (not recorded), then for `duration`. Task `t` pushes to
/// `parents[t % parents.len()]`.
async fn pushes(
    store: &Store<Product>,
    parents: &[ObjectId],
    tasks: usize,
    warmup: Duration,
    duration: Duration,
    seed: u64,
) -> Res<Run> {
    let data = DataSet {
        products: TASKS,
        min_reviews: 1,
        max_reviews: 1,
        seed,
    };
    let pushers = (0..tasks).map(|task| Pusher {
        store: store.clone(),
        parent: parents[task % parents.len()],
        data,
        task,
        n: 0,
    });
    closed_loop(pushers, warmup, duration).await
}

/// Drops `db`, and writes [`TASKS`] empty products; returns their `_id`s.
async fn fresh(db: &Database) -> Res<Vec<ObjectId>> {
    db.drop().await?;
    let store = Store::<Product>::new(db);
    store.ensure_indexes().await?;
    let data = DataSet {
        products: TASKS,
        min_reviews: 1,
        max_reviews: 1,
        seed: 1,
    };
    let parents = (0..TASKS)
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
    Ok((0..TASKS).map(|i| data.product_id(i)).collect())
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
    let parents = fresh(db).await?;
    let one = [parents[0]];
    let transactional = Store::<Product>::new(db);
    if transactional.mode().await? != WriteMode::Transactional {
        return Err("the hot-parent experiment needs a replica set (transactions)".into());
    }
    let ordered = Store::<Product>::new(db).with_mode(WriteMode::Ordered);
    let exe = std::env::current_exe();
    let mut processes_skipped = exe
        .as_ref()
        .err()
        .map(|e| format!("the benchmark cannot find its own executable: {e}"));

    let modes = [WriteMode::Transactional, WriteMode::Ordered];
    let shapes = [Shape::Spread, Shape::OneParent, Shape::Processes];
    // Side `m × shapes + s` is shape `s` in mode `m`; which mode goes first alternates between
    // rounds, the shapes keep their order.
    let side = |m: usize, s: usize| m * shapes.len() + s;
    let schedule = Rounds {
        rounds,
        sides: modes.len() * shapes.len(),
        shift: shapes.len(),
    };
    let runs = schedule
        .run(async |turn| {
            let (m, s) = (turn.side / shapes.len(), turn.side % shapes.len());
            let store = match modes[m] {
                WriteMode::Transactional => &transactional,
                WriteMode::Ordered => &ordered,
            };
            let seed = seed ^ ((turn.round * 100 + m * 10 + s) as u64);
            let run = match shapes[s] {
                Shape::Spread => pushes(store, &parents, TASKS, warmup, duration, seed).await?,
                Shape::OneParent => pushes(store, &one, TASKS, warmup, duration, seed).await?,
                Shape::Processes => {
                    let Ok(exe) = &exe else { return Ok(None) };
                    let job = Workers {
                        exe: exe.clone(),
                        uri: uri.to_owned(),
                        database: db.name().to_owned(),
                        mode: modes[m],
                        parent: parents[0],
                        warmup,
                        duration,
                    };
                    match tokio::task::spawn_blocking(move || job.run()).await? {
                        Ok(latencies) => Run::over(latencies, duration),
                        Err(e) => {
                            eprintln!("hot parent: worker processes failed: {e}");
                            processes_skipped = Some(format!("worker processes failed: {e}"));
                            return Ok(None);
                        }
                    }
                }
            };
            Ok(Some(run))
        })
        .await?;

    // Every push counted once and the subsets right, after all that contention.
    let handle = transactional.subset(Product::RECENT_REVIEWS);
    for id in parents.iter() {
        let drift = handle.check(id).await?;
        if !drift.is_clean() {
            return Err(format!("hot parent: parent {id} drifted: {drift:?}").into());
        }
    }
    db.drop().await?;

    let mut rows = Vec::new();
    for (m, mode) in modes.into_iter().enumerate() {
        for (s, shape) in shapes.into_iter().enumerate() {
            let r = side(m, s);
            if runs.of(r).next().is_none() {
                continue;
            }
            rows.push(Row {
                mode,
                shape,
                pushes: runs.of(r).map(Run::len).sum(),
                rate: runs.spread(r, Run::rate),
                p50: runs.spread(r, Run::p50),
                p99: runs.spread(r, Run::p99),
                max: runs.of(r).map(Run::max).fold(f64::NAN, f64::max),
            });
        }
    }
    // On one parent in one process, transactions over ordered writes.
    let (t, o) = (side(0, 1), side(1, 1));
    Ok(Result {
        seconds: duration.as_secs_f64(),
        rounds,
        rows,
        rate_ratio: runs.ratio(t, o, Run::rate),
        p99_ratio: runs.ratio(t, o, Run::p99),
        processes_skipped,
    })
}

/// The cross-process configuration: [`PROCESSES`] copies of this executable in worker mode.
struct Workers {
    exe: std::path::PathBuf,
    uri: String,
    database: String,
    mode: WriteMode,
    parent: ObjectId,
    warmup: Duration,
    duration: Duration,
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
    /// go, and gathers their latencies. Blocking.
    fn run(self) -> Res<Vec<f64>> {
        let mode = match self.mode {
            WriteMode::Transactional => "transactional",
            WriteMode::Ordered => "ordered",
        };
        let mut started = Started(Vec::new());
        for _ in 0..PROCESSES {
            let mut child = Command::new(&self.exe)
                .args(["--hot-worker", &self.uri, "--database", &self.database])
                .args([
                    "--worker-mode",
                    mode,
                    "--worker-parent",
                    &self.parent.to_hex(),
                ])
                .args(["--worker-tasks", &(TASKS / PROCESSES).to_string()])
                .args(["--warmup", &self.warmup.as_secs_f64().to_string()])
                .args(["--duration", &self.duration.as_secs_f64().to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?;
            let out = BufReader::new(child.stdout.take().ok_or("no worker stdout")?);
            started.0.push((child, out));
        }
        for (_, out) in &mut started.0 {
            let mut line = String::new();
            out.read_line(&mut line)?;
            if line.trim() != "ready" {
                return Err(format!("a worker said {line:?} instead of `ready`").into());
            }
        }
        for (child, _) in &mut started.0 {
            let stdin = child.stdin.as_mut().ok_or("no worker stdin")?;
            stdin.write_all(b"go\n")?;
            stdin.flush()?;
        }
        let mut all = Vec::new();
        for (child, out) in &mut started.0 {
            for line in out.lines() {
                let line = line?;
                all.push(
                    line.trim()
                        .parse::<f64>()
                        .map_err(|_| format!("a worker wrote {line:?}"))?,
                );
            }
            let status = child.wait()?;
            if !status.success() {
                return Err(format!("a worker exited with {status}").into());
            }
        }
        Ok(all)
    }
}

/// Worker mode (`--hot-worker URI`): `tasks` tasks push to `parent` in `database` once this
/// process reads `go` on its standard input; writes `ready` first and then one latency (ms)
/// per line on its standard output.
pub async fn worker(
    uri: &str,
    database: &str,
    mode: WriteMode,
    parent: ObjectId,
    tasks: usize,
    warmup: Duration,
    duration: Duration,
) -> Res<()> {
    let client = mongodb::Client::with_uri_str(uri).await?;
    let db = client.database(database);
    let store = Store::<Product>::new(&db).with_mode(mode);
    // Connected and the parent there before the clock starts.
    store
        .get(&parent)
        .await?
        .ok_or("the hot parent is missing")?;
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
    let seed = u64::from(std::process::id());
    let run = pushes(&store, &[parent], tasks, warmup, duration, seed).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for l in run.latencies() {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    // A client dropped as the process exits ends its sessions on a runtime that is shutting
    // down, and the driver panics; shut it down while the runtime runs.
    drop((store, db));
    client.shutdown().await;
    Ok(())
}
