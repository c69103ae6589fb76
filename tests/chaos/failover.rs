//! Failover on a 3-member replica set: writers push with retryable writes and `w: majority`
//! while the primary steps down, and later while it is SIGKILLed and restarted. No
//! acknowledged child may be lost, the subsets must be exact without any reconcile, and writes
//! must resume after each failover.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use mongodb::error::ErrorKind;
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use rand::Rng;
use subset::bson::{doc, Bson, Document};
use subset::{Store, WriteMode};
use subset_testkit::{skip, ReplicaSet};

/// How long each phase may take before the test gives up on it.
const PHASE_TIMEOUT: Duration = Duration::from_secs(30);

const WRITERS: usize = 4;
const PARENTS: usize = 3;

/// How long to wait for a primary other than `old`, polling every member; the time it took.
async fn new_primary(set: &ReplicaSet, old: usize, since: Instant) -> (usize, Duration) {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        if let Some(p) = set.primary().await {
            if p != old {
                return (p, since.elapsed());
            }
        }
        assert!(
            Instant::now() < deadline,
            "no new primary after {PHASE_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_pushes_survive_a_stepdown_and_a_primary_crash() {
    if external_server() {
        return skip("MONGODB_URI is set: this test needs mongod processes of its own");
    }
    let started = Instant::now();
    let mut set = ReplicaSet::start(3)
        .await
        .expect("start a 3-member replica set");
    eprintln!(
        "3-member replica set: first primary after {:.2?}",
        started.elapsed()
    );

    // Retryable writes are the driver's default; `w: majority` explicitly, so that an
    // acknowledged commit is on two members and survives the loss of either.
    let uri = format!(
        "{}&w=majority&retryWrites=true&serverSelectionTimeoutMS=20000",
        set.uri()
    );
    // What the driver saw fail underneath the library's own retries.
    let failed = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let mut options = ClientOptions::parse(&uri).await.unwrap();
    let seen = failed.clone();
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Failed(f) = event {
            let code = match f.failure.kind.as_ref() {
                ErrorKind::Command(c) => c.code_name.clone(),
                ErrorKind::Write(_) => "write error".to_owned(),
                ErrorKind::Io(_) => "network error".to_owned(),
                _ => "other".to_owned(),
            };
            *seen
                .lock()
                .unwrap()
                .entry(format!("{} {code}", f.command_name))
                .or_default() += 1;
        }
    }));
    let client = mongodb::Client::with_options(options).unwrap();
    let db = client.database("failover");
    let store = Store::<Product>::new(&db);
    assert_eq!(store.mode().await.unwrap(), WriteMode::Transactional);
    store.ensure_indexes().await.unwrap();
    let mut parents = Vec::new();
    for n in 0..PARENTS {
        let p = Product::named(&format!("failover {n}"));
        store.insert(&p).await.unwrap();
        parents.push(p.id);
    }

    let log = Arc::new(WriteLog::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (store, log, stop, parents) =
            (store.clone(), log.clone(), stop.clone(), parents.clone());
        writers.push(tokio::spawn(async move {
            let reviews = store.children(Product::RECENT_REVIEWS);
            let mut n = 0_usize;
            while !stop.load(Ordering::Relaxed) {
                let parent = parents[(w + n) % PARENTS];
                let review = Review::at(rand::rng().random_range(0..100_000));
                // The same child until it is acknowledged: a retry is idempotent, so an
                // ambiguous failure (committed, but the reply lost) is harmless.
                let deadline = Instant::now() + 2 * PHASE_TIMEOUT;
                loop {
                    match reviews.push(&parent, &review).await {
                        Ok(()) => {
                            log.ack(w, parent, review.id);
                            break;
                        }
                        Err(e) => {
                            log.error(w, &e);
                            assert!(Instant::now() < deadline, "writer {w} stuck: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                n += 1;
            }
        }));
    }
    assert!(
        log.wait_acks_after(started, 50, PHASE_TIMEOUT).await,
        "writers never got going"
    );

    // 1. A clean stepdown.
    let first = set.primary().await.expect("a primary");
    let t_step = Instant::now();
    set.step_down(first, 10).await.expect("replSetStepDown");
    let (second, step_window) = new_primary(&set, first, t_step).await;
    let resumed = log
        .wait_acks_after(t_step + step_window, 20, PHASE_TIMEOUT)
        .await;
    assert!(resumed, "writes did not resume after the stepdown");
    let step_silence = log.longest_silence(t_step - Duration::from_millis(500), Instant::now());
    let errors_step = log.errors().len();

    // 2. The new primary is SIGKILLed, then restarted; it rejoins as a secondary.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t_kill = Instant::now();
    set.kill(second);
    let (third, kill_window) = new_primary(&set, second, t_kill).await;
    let resumed = log
        .wait_acks_after(t_kill + kill_window, 20, PHASE_TIMEOUT)
        .await;
    assert!(
        resumed,
        "writes did not resume after the primary was killed"
    );
    let kill_silence = log.longest_silence(t_kill - Duration::from_millis(500), Instant::now());
    let errors_kill = log.errors().len() - errors_step;
    let t_restart = Instant::now();
    set.restart(second)
        .await
        .expect("restart the killed member");
    let rejoined = t_restart.elapsed();
    let acks_before = log.acks().len();
    assert!(
        log.wait_acks_after(Instant::now(), 20, PHASE_TIMEOUT).await,
        "writes stopped after the killed member rejoined"
    );

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer panicked");
    }
    let acks = log.acks();
    let errors = log.errors();
    eprintln!(
        "stepdown of member {first}: new primary {second} after {step_window:.2?}, longest \
         silence {step_silence:.2?}, {errors_step} errors"
    );
    eprintln!(
        "SIGKILL of member {second}: new primary {third} after {kill_window:.2?}, longest \
         silence {kill_silence:.2?}, {errors_kill} errors; restarted member rejoined after \
         {rejoined:.2?}"
    );
    eprintln!(
        "{} pushes acknowledged ({acks_before} before the restart), {} errors in all:",
        acks.len(),
        errors.len()
    );
    for (kind, n) in log.error_kinds() {
        eprintln!("  {n:>4} × {kind}");
    }
    eprintln!("commands the driver saw fail (retried underneath):");
    for (kind, n) in failed.lock().unwrap().iter() {
        eprintln!("  {n:>4} × {kind}");
    }

    // No acknowledged child lost, read from the current primary with majority read concern.
    let majority = db.client().database_with_options(
        db.name(),
        mongodb::options::DatabaseOptions::builder()
            .read_concern(mongodb::options::ReadConcern::majority())
            .build(),
    );
    let ids: Vec<_> = acks.iter().map(|a| a.child).collect();
    let lost = absent_ids(&majority, "reviews", &ids).await;
    assert!(
        lost.is_empty(),
        "{} acknowledged children lost: {lost:?}",
        lost.len()
    );

    // No drift, without any reconcile: every subset and count exact.
    let report = store.check_all().await.unwrap();
    assert_eq!(report.progress.checked, PARENTS as u64);
    assert_eq!(report.progress.drifted, 0, "{:?}", report.drifts);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut total = 0;
    for parent in &parents {
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(*parent)).await;
        let n = reviews.count(parent).await.unwrap();
        let acked = acks.iter().filter(|a| a.parent == *parent).count() as u64;
        assert_eq!(n, acked, "children of {parent}: stored vs acknowledged");
        total += n;
    }

    // The killed member catches up with everything. It may first roll back what it had taken
    // but not replicated when it died (never anything acknowledged, with `w: majority`), and
    // refuses reads meanwhile.
    let direct = mongodb::Client::with_uri_str(format!(
        "mongodb://127.0.0.1:{}/?directConnection=true",
        set.port(second)
    ))
    .await
    .unwrap();
    let on_member = direct
        .database("failover")
        .collection::<Document>("reviews");
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut refused = 0;
    loop {
        let n = match on_member.count_documents(doc! {}).await {
            Ok(n) => Some(n),
            Err(_) => {
                refused += 1;
                None
            }
        };
        if n == Some(total) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted member has {n:?} children, the set {total}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("the restarted member caught up ({refused} reads refused meanwhile)");
    drop(set);
    eprintln!("whole failover test: {:.2?}", started.elapsed());
}
