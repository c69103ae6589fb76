//! Crashes: mongod is SIGKILLed at random moments while 4 writers push, then restarted on the
//! same data. No child a writer saw acknowledged may be lost. On a standalone server (ordered
//! writes) the crash may leave drift, which `check_all` reports and `reconcile_all` repairs; on
//! a replica set (transactions) there is none.
//!
//! The standalone run is made twice: on the one-view `Product`, and on a `Shelf` with three
//! views of one collection (previews, a filtered view) and running sums, whose drift `check_all`
//! must find in every view and sum.

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
