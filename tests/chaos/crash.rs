//! Crashes: mongod is SIGKILLed at random moments while 4 writers push, then restarted on the
//! same data. No child a writer saw acknowledged may be lost. On a standalone server (ordered
//! writes) the crash may leave drift, which `check_all` reports and `reconcile_all` repairs; on
//! a replica set (transactions) there is none.
//!
//! The standalone run is made twice: on the one-view `Product`, and on a `Shelf` with three
//! views of one collection (previews, a filtered view) and running sums, whose drift `check_all`
//! must find in every view and sum.
//!
//! Writers killed, too: writer processes SIGKILLed while the server holds their parent update,
//! in both write modes (the lease they leave is ordered writes' alone). Every read of the parents
//! they left (`get`, the first page, `count`, the sums) must equal the child collection before
//! any repair, and the next write to such a parent must end within 2 s of the kill.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rand::Rng;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{Bson, DateTime};
use subset::{Child, Store, Subset, SubsetField, WriteMode};
use subset_testkit::{skip, MongoServer, Topology};

const WRITERS: usize = 4;
const PARENTS: usize = 3;
/// The most pushes a writer makes; in practice the kills end first, and the writers stop then.
const MAX_PUSHES: usize = 2_000;
/// How long one push may keep failing before the test gives up.
const PUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// The writers' connection string. `journal=true`: on a standalone server an acknowledgement
/// without it only means the write reached memory, and a SIGKILL within the next 100 ms (the
/// journal's flush interval) may lose it. A replica set's default write concern (majority)
/// implies the journal already.
fn writer_uri(server: &MongoServer) -> String {
    let sep = if server.uri().contains('?') { '&' } else { '?' };
    format!(
        "{}{sep}serverSelectionTimeoutMS=2000&journal=true",
        server.uri()
    )
}

/// A mark on a shelf: a rating, a flag, and a note only the child collection keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Mark {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    flagged: bool,
    date: DateTime,
    note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Mark)]
struct MarkPreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: DateTime,
}

/// Three views of the marks, two counts and two sums: every one can drift in a crash.
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "shelves")]
struct Shelf {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "marks",
        keep = 5,
        sort = "date desc",
        count = "total",
        sum = "rating_total = rating"
    )]
    latest: Vec<MarkPreview>,
    #[subset(child = "marks", keep = 3, sort = "rating desc, date desc")]
    best: Vec<MarkPreview>,
    #[subset(
        child = "marks",
        keep = 2,
        sort = "date desc",
        filter = "flagged",
        count = "flagged",
        sum = "flagged_rating = rating"
    )]
    flagged_latest: Vec<MarkPreview>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    rating_total: i64,
    #[serde(default)]
    flagged: i64,
    #[serde(default)]
    flagged_rating: i64,
}

impl ExpectedOrder<Mark> for Shelf {
    fn expected_order(field: &str, a: &Mark, b: &Mark) -> std::cmp::Ordering {
        assert_eq!(field, "latest", "a view of Shelf with no known order");
        (b.date, b.id).cmp(&(a.date, a.id))
    }
}

/// A parent type the writers push into, through `FIELD`.
trait Crashed: Subset<Id = ObjectId> + ExpectedOrder<Self::Kid> {
    type Kid: Child<Id = ObjectId> + Clone;
    const FIELD: SubsetField<Self, Self::Kid>;
    /// The child collection.
    const CHILDREN: &'static str;
    fn named(n: usize) -> Self;
    fn child(millis: i64) -> Self::Kid;
    fn child_id(child: &Self::Kid) -> ObjectId;
}

impl Crashed for Product {
    type Kid = Review;
    const FIELD: SubsetField<Self, Review> = Product::RECENT_REVIEWS;
    const CHILDREN: &'static str = "reviews";
    fn named(n: usize) -> Self {
        Product::named(&format!("crash {n}"))
    }
    fn child(millis: i64) -> Review {
        Review::at(millis)
    }
    fn child_id(child: &Review) -> ObjectId {
        child.id
    }
}

impl Crashed for Shelf {
    type Kid = Mark;
    const FIELD: SubsetField<Self, Mark> = Shelf::LATEST;
    const CHILDREN: &'static str = "marks";
    fn named(_: usize) -> Self {
        Shelf {
            id: ObjectId::new(),
            latest: Vec::new(),
            best: Vec::new(),
            flagged_latest: Vec::new(),
            total: 0,
            rating_total: 0,
            flagged: 0,
            flagged_rating: 0,
        }
    }
    fn child(millis: i64) -> Mark {
        Mark {
            id: ObjectId::new(),
            rating: (millis % 5) as i32 + 1,
            flagged: millis % 3 == 0,
            date: DateTime::from_millis(millis),
            note: "a note the shelf does not embed".to_owned(),
        }
    }
    fn child_id(child: &Mark) -> ObjectId {
        child.id
    }
}

async fn store_at<P: Subset>(uri: &str, db: &str) -> Store<P> {
    let client = mongodb::Client::with_uri_str(uri).await.unwrap();
    Store::new(&client.database(db))
}

/// What one crash run left: the store (on a fresh client), the parents and the writers' log.
struct Run<P> {
    store: Store<P>,
    parents: Vec<ObjectId>,
    log: Arc<WriteLog>,
}

/// Starts the writers on `server`, kills and restarts it `kills` times at random moments, stops
/// the writers, and prints what they saw. Writers 0 and 1 keep their client through the
/// outages; writers 2 and 3 make a fresh one after every error.
async fn crash_run<P: Crashed>(
    server: &mut MongoServer,
    kills: usize,
    expected: WriteMode,
) -> Run<P> {
    let uri = writer_uri(server);
    let db_name = server.database().await.unwrap().name().to_owned();
    let store = store_at::<P>(&uri, &db_name).await;
    assert_eq!(store.mode().await.unwrap(), expected);
    let mut parents = Vec::new();
    for n in 0..PARENTS {
        let p = P::named(n);
        store.insert(&p).await.unwrap();
        parents.push(*p.id());
    }

    let log = Arc::new(WriteLog::default());
    let stop = Arc::new(AtomicBool::new(false));
    let active = Arc::new(AtomicUsize::new(WRITERS));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (uri, db_name, parents, log, stop, active) = (
            uri.clone(),
            db_name.clone(),
            parents.clone(),
            log.clone(),
            stop.clone(),
            active.clone(),
        );
        writers.push(tokio::spawn(async move {
            let fresh_clients = w >= 2;
            let mut store = store_at::<P>(&uri, &db_name).await;
            for n in 0..MAX_PUSHES {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let parent = parents[(w + n) % PARENTS];
                let review = P::child(rand::rng().random_range(0..1_000_000));
                // The same child until acknowledged: retrying is what a client does after an
                // error, and a push is idempotent.
                let deadline = Instant::now() + PUSH_TIMEOUT;
                loop {
                    let result = store.children(P::FIELD).push(&parent, &review).await;
                    match result {
                        Ok(()) => {
                            log.ack(w, parent, P::child_id(&review));
                            break;
                        }
                        Err(e) => {
                            log.error(w, &e);
                            assert!(Instant::now() < deadline, "writer {w} stuck: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            if fresh_clients {
                                store = store_at(&uri, &db_name).await;
                            }
                        }
                    }
                }
            }
            active.fetch_sub(1, Ordering::Relaxed);
        }));
    }

    let started = Instant::now();
    let mut killed_times = 0;
    for k in 0..kills {
        if active.load(Ordering::Relaxed) == 0 {
            eprintln!("{expected:?}: the writers finished their pushes before kill {k}");
            break;
        }
        let (before, outage) = {
            let mut rng = rand::rng();
            (rng.random_range(300..1_500), rng.random_range(0..500))
        };
        tokio::time::sleep(Duration::from_millis(before)).await;
        let acks = log.acks().len();
        let killed = Instant::now();
        server.kill().unwrap();
        tokio::time::sleep(Duration::from_millis(outage)).await;
        server.restart().await.expect("restart mongod on its data");
        let up = killed.elapsed();
        killed_times += 1;
        let resumed = log.wait_acks_after(killed + up, 5, PUSH_TIMEOUT).await;
        assert!(
            resumed || active.load(Ordering::Relaxed) == 0,
            "writes did not resume after kill {k}"
        );
        eprintln!(
            "{expected:?}: kill {k} after {acks} acks; mongod back after {up:.2?}, writes \
             resumed after {:.2?}",
            killed.elapsed()
        );
    }
    assert!(
        killed_times > 0,
        "mongod was never killed while writers ran"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer panicked");
    }
    let (acks, errors) = (log.acks(), log.errors());
    eprintln!(
        "{expected:?}: {} pushes acknowledged, {} errors in {:.2?}",
        acks.len(),
        errors.len(),
        started.elapsed()
    );
    for w in 0..WRITERS {
        eprintln!(
            "  writer {w} ({} client): {} acknowledged, {} errors",
            if w >= 2 { "fresh" } else { "same" },
            acks.iter().filter(|a| a.writer == w).count(),
            errors.iter().filter(|e| e.writer == w).count()
        );
    }
    for (kind, n) in log.error_kinds() {
        eprintln!("  {n:>4} × {kind}");
    }
    Run {
        store: store_at(&uri, &db_name).await,
        parents,
        log,
    }
}

/// Every child a writer saw acknowledged is in the child collection, under its parent.
async fn assert_no_acknowledged_child_lost<P: Crashed>(run: &Run<P>) {
    let acks = run.log.acks();
    let ids: Vec<ObjectId> = acks.iter().map(|a| a.child).collect();
    let lost = absent_ids(run.store.database(), P::CHILDREN, &ids).await;
    assert!(
        lost.is_empty(),
        "{} acknowledged children lost: {lost:?}",
        lost.len()
    );
    let reviews = run.store.children(P::FIELD);
    for parent in &run.parents {
        let acked = acks.iter().filter(|a| a.parent == *parent).count() as u64;
        // Exactly: a retried push never stores a second copy.
        assert_eq!(
            reviews.count(parent).await.unwrap(),
            acked,
            "children of {parent}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_crash_loses_nothing_acknowledged_and_reconcile_repairs_its_drift() {
    if external_server() {
        return skip("MONGODB_URI is set: this test kills mongod, so it needs its own");
    }
    standalone_crash::<Product>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_crash_drifts_views_and_sums_that_reconcile_repairs() {
    if external_server() {
        return skip("MONGODB_URI is set: this test kills mongod, so it needs its own");
    }
    standalone_crash::<Shelf>().await;
}

async fn standalone_crash<P: Crashed>() {
    let mut server = MongoServer::start(Topology::Standalone).await.unwrap();
    let run = crash_run::<P>(&mut server, 3, WriteMode::Ordered).await;
    assert_no_acknowledged_child_lost(&run).await;
    // The drift the crashes caused. Child-first writes can only leave a child stored but not
    // embedded and not counted; the writers' retries put every such child back into its subset
    // (but cannot know to count it). Never an embedded child missing from the collection, never
    // a count too high.
    let before = run.store.check_all().await.unwrap();
    eprintln!(
        "standalone: check_all after the crashes: {} of {} parents drifted",
        before.progress.drifted, before.progress.checked
    );
    for (field, drift) in &before.drifts {
        eprintln!(
            "  {} {field}: {} missing, {} stale, misordered {}, count {:?}, {} sums",
            drift.parent,
            drift.missing.len(),
            drift.stale.len(),
            drift.misordered,
            drift.count,
            drift.sums.len()
        );
        assert!(
            drift.missing.is_empty() && drift.stale.is_empty() && drift.changed.is_empty(),
            "{drift:?}"
        );
        if let Some((stored, actual)) = drift.count {
            assert!(stored < actual as i64, "{drift:?}");
        }
        // A sum misses the same children (every value is positive).
        for sum in &drift.sums {
            let number = |b: &Bson| match b {
                Bson::Int32(n) => i64::from(*n),
                Bson::Int64(n) => *n,
                other => panic!("{other:?}"),
            };
            assert!(number(&sum.stored) < number(&sum.computed), "{drift:?}");
        }
    }
    assert_eq!(before.progress.fixed, 0, "check_all changes nothing");

    let repaired = run.store.reconcile_all().await.unwrap();
    assert_eq!(repaired.progress.drifted, before.progress.drifted);
    assert_eq!(repaired.progress.fixed, before.progress.drifted);
    let after = run.store.check_all().await.unwrap();
    assert_eq!(after.progress.drifted, 0, "{:?}", after.drifts);
    for parent in &run.parents {
        assert_subset_true(&run.store, P::FIELD, &Bson::ObjectId(*parent)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_set_crash_loses_nothing_acknowledged_and_leaves_no_drift() {
    if external_server() {
        return skip("MONGODB_URI is set: this test kills mongod, so it needs its own");
    }
    let mut server = MongoServer::start(Topology::ReplicaSet).await.unwrap();
    let run = crash_run::<Product>(&mut server, 2, WriteMode::Transactional).await;
    assert_no_acknowledged_child_lost(&run).await;
    // Without any reconcile.
    let report = run.store.check_all().await.unwrap();
    assert_eq!(report.progress.checked, PARENTS as u64);
    assert_eq!(report.progress.drifted, 0, "{:?}", report.drifts);
    for parent in &run.parents {
        assert_subset_true(
            &run.store,
            Product::RECENT_REVIEWS,
            &Bson::ObjectId(*parent),
        )
        .await;
    }
}

// Writers killed while they hold a parent's lease. The writers are processes of their own (this
// test binary, run again on one test in the worker role), killed with SIGKILL while the server
// holds their parent update (`failCommand` with `blockConnection`): the child collection has
// their write, the parent not yet, and nothing of theirs gives the lease back.

/// The variable that makes a run of this binary a writer: the job, its fields separated by tabs
/// (see [`Job`]).
const WORKER: &str = "SUBSET_TEST_LEASE_WORKER";

/// How long the server holds a killed writer's parent update: longer than the test reads, so
/// that they meet the parents as the writers left them.
const HELD_UPDATE: Duration = Duration::from_secs(10);

/// Past the last renewal of a dead writer's lease, the lease has expired: the lease lasts 1.5 s.
const LEASE_LAPSED: Duration = Duration::from_millis(1_700);

/// What a worker process writes: a push of a new newest mark, or a patch of a mark's rating.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Push,
    Patch(ObjectId),
}

/// One worker's job, passed in [`WORKER`].
struct Job {
    uri: String,
    db: String,
    app: String,
    mode: WriteMode,
    parent: ObjectId,
    op: Op,
}

impl Job {
    fn encode(&self) -> String {
        let mode = match self.mode {
            WriteMode::Ordered => "ordered",
            _ => "transactional",
        };
        let op = match self.op {
            Op::Push => "push".to_owned(),
            Op::Patch(mark) => mark.to_hex(),
        };
        [
            &self.uri,
            &self.db,
            &self.app,
            mode,
            &self.parent.to_hex(),
            &op,
        ]
        .join("\t")
    }

    fn decode(text: &str) -> Job {
        let fields: Vec<&str> = text.split('\t').collect();
        let [uri, db, app, mode, parent, op] = fields[..] else {
            panic!("a malformed {WORKER}: {text:?}");
        };
        Job {
            uri: uri.to_owned(),
            db: db.to_owned(),
            app: app.to_owned(),
            mode: if mode == "ordered" {
                WriteMode::Ordered
            } else {
                WriteMode::Transactional
            },
            parent: parent.parse().unwrap(),
            op: match op {
                "push" => Op::Push,
                mark => Op::Patch(mark.parse().unwrap()),
            },
        }
    }
}

/// The worker role: on its own client (named `app`, so that the fail point holds it alone),
/// writes once to warm up (the store registers its model with an update), says it is ready,
/// waits for the word, writes its job, and is killed while the server holds the job's parent
/// update. A write that returns is a failure of the test's set-up.
async fn work(job: Job) {
    let mut options = mongodb::options::ClientOptions::parse(&job.uri)
        .await
        .unwrap();
    options.app_name = Some(job.app.clone());
    let client = mongodb::Client::with_options(options).unwrap();
    let store = Store::<Shelf>::with_options(
        &client.database(&job.db),
        subset::StoreOptions::new().mode(job.mode),
    );
    let warm_up = Shelf::named(0);
    store.insert(&warm_up).await.unwrap();
    store.delete(&warm_up.id).await.unwrap();
    println!("{WORKER} ready");
    tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
        .await
        .unwrap()
        .unwrap();
    let marks = store.children(Shelf::LATEST);
    let result = match job.op {
        Op::Push => marks.push(&job.parent, &Shelf::child(10_000)).await,
        Op::Patch(mark) => marks.patch(&job.parent, &mark).set(Mark::RATING, 5).await,
    };
    panic!("the write was to be held until this process was killed, and returned {result:?}");
}

/// If this run of the binary is a worker, its job (the test then does nothing else).
fn worker_job() -> Option<Job> {
    std::env::var(WORKER).ok().map(|job| Job::decode(&job))
}

/// A worker process running `test` (this module's test of that name) on `job`, ready to write.
async fn spawn_worker(test: &str, job: &Job) -> std::process::Child {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let mut child = Command::new(std::env::current_exe().expect("the test's own path"))
        .args([&format!("{module}::{test}"), "--exact", "--nocapture"])
        .env(WORKER, job.encode())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the test binary as a worker");
    let stdout = child.stdout.take().unwrap();
    let ready = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains(&format!("{WORKER} ready")))
    });
    assert!(ready.await.unwrap(), "the worker ended before it was ready");
    child
}

/// Holds the next `update` of each of `workers` (all on clients named `app`) for
/// [`HELD_UPDATE`], has them write, and returns once the server holds every one's parent
/// update (listed by `$currentOp`), with the instant they were told to write: no hold began
/// before it, so no held update is let go before it plus [`HELD_UPDATE`].
///
/// One setting for all: the fail point cannot be set again while it holds a command (the
/// server waits for the command to go first). The workers write at once, so that their parent
/// updates come well before the first renewal of a lease, another `update`.
async fn hold_parent_updates(
    admin: &mongodb::Database,
    app: &str,
    workers: &mut [std::process::Child],
) -> Instant {
    use std::io::Write;
    admin
        .run_command(subset::bson::doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": workers.len() as i64 },
            "data": {
                "failCommands": ["update"],
                "appName": app,
                "blockConnection": true,
                "blockTimeMS": HELD_UPDATE.as_millis() as i64,
            },
        })
        .await
        .expect("failCommand (test commands on)");
    let told = Instant::now();
    for worker in workers.iter_mut() {
        let mut stdin = worker.stdin.take().unwrap();
        writeln!(stdin, "go").unwrap();
    }
    let held =
        subset::bson::doc! { "$match": { "appName": app, "command.update": { "$exists": true } } };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ops: Vec<_> = futures::TryStreamExt::try_collect(
            admin
                .aggregate(vec![subset::bson::doc! { "$currentOp": {} }, held.clone()])
                .await
                .unwrap(),
        )
        .await
        .unwrap();
        if ops.len() == workers.len() {
            return told;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} parent updates held",
            ops.len(),
            workers.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills `worker` (SIGKILL) and reaps it.
fn kill(mut worker: std::process::Child) {
    worker.kill().unwrap();
    worker.wait().unwrap();
}

/// The previews of `marks` (the shelf's marks) that a view of `keep` ordered by `order` holds.
fn top(
    mut marks: Vec<Mark>,
    keep: usize,
    order: fn(&Mark, &Mark) -> std::cmp::Ordering,
) -> Vec<(ObjectId, i32)> {
    marks.sort_by(order);
    marks.iter().take(keep).map(|m| (m.id, m.rating)).collect()
}

fn previews(marks: &[MarkPreview]) -> Vec<(ObjectId, i32)> {
    marks.iter().map(|m| (m.id, m.rating)).collect()
}

/// Every read of `shelf` equals what the child collection holds: `get` (every view, count and
/// sum), the first page and the count.
async fn assert_reads_exact(store: &Store<Shelf>, shelf: &ObjectId, what: &str) {
    let marks: Vec<Mark> = futures::TryStreamExt::try_collect(
        store
            .database()
            .collection::<Mark>("marks")
            .find(subset::bson::doc! { store.children(Shelf::LATEST).spec().key: shelf })
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let latest = |a: &Mark, b: &Mark| (b.date, b.id).cmp(&(a.date, a.id));
    let best = |a: &Mark, b: &Mark| (b.rating, b.date, b.id).cmp(&(a.rating, a.date, a.id));
    let flagged: Vec<Mark> = marks.iter().filter(|m| m.flagged).cloned().collect();
    let got = store
        .get(shelf)
        .await
        .unwrap()
        .expect("the shelf is stored");
    assert_eq!(
        previews(&got.latest),
        top(marks.clone(), 5, latest),
        "{what}: latest"
    );
    assert_eq!(
        previews(&got.best),
        top(marks.clone(), 3, best),
        "{what}: best"
    );
    assert_eq!(
        previews(&got.flagged_latest),
        top(flagged.clone(), 2, latest),
        "{what}: flagged_latest"
    );
    assert_eq!(got.total, marks.len() as i64, "{what}: total");
    let ratings = |marks: &[Mark]| marks.iter().map(|m| i64::from(m.rating)).sum::<i64>();
    assert_eq!(got.rating_total, ratings(&marks), "{what}: rating_total");
    assert_eq!(got.flagged, flagged.len() as i64, "{what}: flagged");
    assert_eq!(
        got.flagged_rating,
        ratings(&flagged),
        "{what}: flagged_rating"
    );
    let handle = store.children(Shelf::LATEST);
    let page = handle
        .page(shelf, &subset::PageRequest::first(5))
        .await
        .unwrap();
    let served: Vec<(ObjectId, i32)> = page.items.iter().map(|m| (m.id, m.rating)).collect();
    assert_eq!(served, top(marks.clone(), 5, latest), "{what}: first page");
    assert_eq!(
        page.has_next(),
        marks.len() > 5,
        "{what}: first page's has_next"
    );
    let count = handle.count(shelf).await.unwrap();
    assert_eq!(count, marks.len() as u64, "{what}: count");
}

/// A shelf with six marks, dated apart, on `store`; and the mark a patch raises to 5 stars (its
/// rating below 5, so that the patch changes the sums, the order of `best` and the copies).
async fn shelf_with_marks(store: &Store<Shelf>) -> (ObjectId, ObjectId) {
    let shelf = Shelf::named(0);
    store.insert(&shelf).await.unwrap();
    let marks: Vec<Mark> = (1..=6).map(|k| Shelf::child(k * 1_000 + k)).collect();
    store
        .children(Shelf::LATEST)
        .push_many(&shelf.id, &marks)
        .await
        .unwrap();
    let patched = marks
        .iter()
        .find(|m| m.rating < 5)
        .expect("a mark under 5 stars")
        .id;
    (shelf.id, patched)
}

/// The fail point's turn (see `faults.rs`), a store in `mode` on a fresh database of the shared
/// replica set, its URI, and the server's `admin` database.
async fn leased(
    mode: WriteMode,
) -> (
    tokio::sync::MutexGuard<'static, ()>,
    Store<Shelf>,
    String,
    mongodb::Database,
) {
    let turn = crate::faults::FAIL_POINT.lock().await;
    let server = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod");
    let db = server.database().await.unwrap();
    let admin = db.client().database("admin");
    (
        turn,
        Store::with_options(&db, subset::StoreOptions::new().mode(mode)),
        server.uri().to_owned(),
        admin,
    )
}

/// A worker's job on `store`'s database.
fn job(
    store: &Store<Shelf>,
    uri: &str,
    app: &str,
    mode: WriteMode,
    parent: ObjectId,
    op: Op,
) -> Job {
    Job {
        uri: uri.to_owned(),
        db: store.database().name().to_owned(),
        app: app.to_owned(),
        mode,
        parent,
        op,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_killed_between_their_writes_leave_parents_every_read_answers_exactly() {
    if let Some(job) = worker_job() {
        return work(job).await;
    }
    if external_server() {
        return skip("MONGODB_URI is set: this test holds the server's commands with a fail point");
    }
    const SHELVES: usize = 4;
    for mode in [WriteMode::Ordered, WriteMode::Transactional] {
        let (_turn, store, uri, admin) = leased(mode).await;
        let app = format!("lease-{}", ObjectId::new().to_hex());
        let mut shelves = Vec::new();
        let mut workers = Vec::new();
        for n in 0..SHELVES {
            let (shelf, mark) = shelf_with_marks(&store).await;
            // Half push a newest mark (a count, sums and a latest one off), half raise a
            // mark's rating (sums, a copy and the order of `best` stale).
            let op = if n % 2 == 0 {
                Op::Push
            } else {
                Op::Patch(mark)
            };
            let job = job(&store, &uri, &app, mode, shelf, op);
            let worker = spawn_worker(
                "writers_killed_between_their_writes_leave_parents_every_read_answers_exactly",
                &job,
            )
            .await;
            shelves.push(shelf);
            workers.push(worker);
        }
        let told = hold_parent_updates(&admin, &app, &mut workers).await;
        workers.into_iter().for_each(kill);
        // Past every dead writer's lease (ordered writes; a dead writer's transaction never
        // commits, and leaves nothing to read around).
        tokio::time::sleep(LEASE_LAPSED).await;
        let left = drifted_parents(&store).await;
        // Before the count: on a machine so slow that a held update was let go, the count
        // says nothing of the library.
        assert!(
            told.elapsed() < HELD_UPDATE,
            "{mode:?}: too slow: the server let a held update go before the parents were read"
        );
        let expected = match mode {
            WriteMode::Ordered => SHELVES as u64,
            _ => 0,
        };
        assert_eq!(
            left, expected,
            "{mode:?}: parents the killed writers left behind"
        );
        for (n, shelf) in shelves.iter().enumerate() {
            assert_reads_exact(&store, shelf, &format!("{mode:?}: shelf {n}")).await;
        }
        // Reads write nothing: the parents are as the writers left them, for a write to settle.
        assert_eq!(
            drifted_parents(&store).await,
            expected,
            "{mode:?}: after the reads"
        );
        assert!(
            told.elapsed() < HELD_UPDATE,
            "{mode:?}: the reads were to end before the server let the held updates go"
        );
        eprintln!("{mode:?}: {SHELVES} writers killed mid-write; every read exact");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_parent_is_written_again_within_two_seconds() {
    if let Some(job) = worker_job() {
        return work(job).await;
    }
    if external_server() {
        return skip("MONGODB_URI is set: this test holds the server's commands with a fail point");
    }
    // The lease is ordered writes' alone; a dead writer's transaction holds nothing the next
    // writer waits for, which the transactional run shows.
    for mode in [WriteMode::Ordered, WriteMode::Transactional] {
        let (_turn, store, uri, admin) = leased(mode).await;
        let (shelf, _) = shelf_with_marks(&store).await;
        let app = format!("lease-{}", ObjectId::new().to_hex());
        let job = job(&store, &uri, &app, mode, shelf, Op::Push);
        let worker = spawn_worker(
            "a_dead_holders_parent_is_written_again_within_two_seconds",
            &job,
        )
        .await;
        let mut workers = [worker];
        hold_parent_updates(&admin, &app, &mut workers).await;
        let [worker] = workers;
        // Alive for a few renewals first: its lease is as fresh as a dead holder's can be.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        kill(worker);
        let killed = Instant::now();
        // A push shares the dead push's lease while it still runs (ordered), and waits for
        // nothing.
        let child = Shelf::child(20_000);
        store
            .children(Shelf::LATEST)
            .push(&shelf, &child)
            .await
            .unwrap();
        let pushed = killed.elapsed();
        // A removal takes the lease alone: it waits for the dead push's to lapse.
        store
            .children(Shelf::LATEST)
            .remove(&shelf, &child.id)
            .await
            .unwrap();
        let stalled = killed.elapsed();
        eprintln!(
            "{mode:?}: after the kill, the next push to a dead holder's parent ended {pushed:.2?} \
             later, and a removal {stalled:.2?} later"
        );
        assert!(
            stalled < Duration::from_secs(2),
            "{mode:?}: a dead holder stalled its parent's next writers for {stalled:.2?}"
        );
        // The removal settled what the dead push left: every view, count and sum exact.
        assert_eq!(drifted_parents(&store).await, 0, "{mode:?}");
        assert_reads_exact(&store, &shelf, &format!("{mode:?}: after the next write")).await;
    }
}

/// How many parents of `store` `check_all` finds behind their children (it writes nothing).
async fn drifted_parents(store: &Store<Shelf>) -> u64 {
    store.check_all().await.unwrap().progress.drifted
}
