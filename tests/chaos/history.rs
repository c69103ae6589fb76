//! The history checker: concurrent clients push, remove, patch, walk and read the reviews of a
//! few products on a 3-member replica set while faults are applied at random (a step-down, a
//! member paused past the election timeout, a member killed and restarted, replication from the
//! primary stopped for a while, and stopped until the primary is paused or killed). Every call
//! is recorded with its start, end and outcome; at the end the database is read with majority
//! and checked against the history:
//!
//! - an acknowledged push is present unless a remove of it followed; an acknowledged remove
//!   stays removed; an acknowledged patch is the child's last value unless a later patch with an
//!   unknown outcome may have replaced it;
//! - a failed write left nothing (unless a retry wrote it); an unknown one is there at most once;
//! - each parent's count equals its children in the child collection, and every view is clean;
//! - no read with majority showed a child that is absent at the end without a remove of it;
//! - every complete walk showed each child that existed throughout it exactly once.
//!
//! It runs twice on one set: with the library's default transactions (`w: "majority"`) and
//! majority reads, where nothing may be lost or shown and then lost; and with `w: 1` and local
//! reads, where a failover rolls back what only the old primary had, which the checker must see
//! and report. The faults come from a seeded generator: the seed is printed, and
//! `SUBSET_HISTORY_SEED=<seed>` replays the same faults and the same choices of calls (the
//! timing, and so the interleaving, is the machine's).

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::{Future, IntoFuture};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{external_server, Product, Review};
use futures::TryStreamExt;
use mongodb::error::ErrorKind;
use mongodb::options::{
    Acknowledgment, ClientOptions, DatabaseOptions, InsertOneOptions, ReadConcern, WriteConcern,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, Bson, DateTime, Document};
use subset::{Error, PageRequest, Store, Subset};
use subset_testkit::{skip, ReplicaSet};

/// Concurrent clients.
const TASKS: usize = 4;

/// Products the clients share (transactions on one product conflict, and are retried).
const PARENTS: usize = 6;

/// Page sizes of walks: at most `keep` (5) is served from the embedded subset.
const PAGE_SIZES: [u32; 3] = [3, 5, 10];

/// How long one call may take before its outcome counts as unknown.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the set may take to have a primary again, and every member back.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Rounds of faults (each kind once per round, in a random order) of the long run.
const LONG_ROUNDS: usize = 8;

/// What a history of calls is checked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// The library's default transactions (`w: "majority"`), and reads with majority.
    Majority,
    /// Transactions with `w: 1`, and local reads.
    One,
}

impl Durability {
    fn name(self) -> &'static str {
        match self {
            Durability::Majority => "w: majority, majority reads",
            Durability::One => "w: 1, local reads",
        }
    }

    fn store(self, db: &mongodb::Database) -> Store<Product> {
        match self {
            Durability::Majority => Store::with_options(
                db,
                subset::StoreOptions::new().read_concern(ReadConcern::majority()),
            ),
            Durability::One => Store::with_options(
                db,
                subset::StoreOptions::new()
                    .write_concern(WriteConcern::builder().w(Acknowledgment::Nodes(1)).build())
                    .read_concern(ReadConcern::local()),
            ),
        }
    }
}

/// The faults, each applied once per round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// `replSetStepDown` of the primary.
    StepDown,
    /// SIGSTOP of a member (the primary three times in four) past the election timeout, then
    /// SIGCONT.
    Pause,
    /// SIGKILL of a member (the primary three times in four), then a restart.
    Kill,
    /// The others stop replicating from the primary for 1 to 3 s, then start again.
    StopReplication,
    /// The same, then the primary is paused or killed before replication starts again: a new
    /// primary is elected without what only the old one had, which rolls it back.
    StopReplicationThenFailover,
}

const FAULTS: [Fault; 5] = [
    Fault::StepDown,
    Fault::Pause,
    Fault::Kill,
    Fault::StopReplication,
    Fault::StopReplicationThenFailover,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::StepDown => "step down",
            Fault::Pause => "pause",
            Fault::Kill => "kill and restart",
            Fault::StopReplication => "stop replication",
            Fault::StopReplicationThenFailover => "stop replication, then failover",
        }
    }
}

/// What a call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Push,
    Remove,
    Patch,
    Walk,
    Get,
}

impl Kind {
    fn is_write(self) -> bool {
        matches!(self, Kind::Push | Kind::Remove | Kind::Patch)
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// The library says nothing was written.
    Failed(String),
    /// It may or may not have been written: `Error::OutcomeUnknown`, a network error, a
    /// timeout.
    Unknown(String),
}

impl Outcome {
    fn of(error: &Error) -> Outcome {
        let network = error
            .mongo_error()
            .is_some_and(|e| matches!(e.kind.as_ref(), ErrorKind::Io(_)));
        let timeout = matches!(error, Error::TransactionTimeout { .. });
        if error.is_outcome_unknown() || network || timeout {
            Outcome::Unknown(error.to_string())
        } else {
            Outcome::Failed(error.to_string())
        }
    }
}

/// One recorded call.
#[derive(Debug, Clone)]
struct Call {
    task: usize,
    kind: Kind,
    parent: ObjectId,
    child: Option<ObjectId>,
    /// The author a push or a patch writes (unique to the call).
    value: Option<String>,
    start: Instant,
    end: Instant,
    outcome: Outcome,
    /// A failed remove or patch that found no such child.
    not_found: bool,
    /// The children a read showed, in order (every page of a walk).
    shown: Vec<ObjectId>,
    /// A walk that read every page, to the end.
    complete: bool,
}

impl Call {
    fn overlaps(&self, start: Instant, end: Instant) -> bool {
        self.start < end && self.end > start
    }
}

/// How a call that did not succeed ended: its outcome, and whether it found no such child.
type Failure = (Outcome, bool);

/// Awaits a call of the library with a time limit.
async fn timed<T>(call: impl Future<Output = subset::Result<T>>) -> Result<T, Failure> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err((
            Outcome::of(&error),
            matches!(error, Error::ChildNotFound { .. }),
        )),
        Err(_) => Err((
            Outcome::Unknown(format!("no answer within {CALL_TIMEOUT:?}")),
            false,
        )),
    }
}

/// Records how a call ended.
fn ended<T>(call: &mut Call, result: &Result<T, Failure>) {
    call.end = Instant::now();
    if let Err((outcome, not_found)) = result {
        call.outcome = outcome.clone();
        call.not_found = *not_found;
    }
}

/// One client: pushes (retrying half the failures), removes and patches of its own children,
/// walks and gets of any product, until `stop`.
async fn run_client(
    task: usize,
    store: Store<Product>,
    parents: Arc<Vec<ObjectId>>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> Vec<Call> {
    let mut rng = StdRng::seed_from_u64(seed ^ ((task as u64 + 1) << 32));
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut calls = Vec::new();
    // The children this client pushed that may exist.
    let mut mine: Vec<(ObjectId, Review)> = Vec::new();
    let mut n = 0_u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let roll = rng.random_range(0..100);
        let parent = parents[rng.random_range(0..parents.len())];
        let call = |kind, parent, start| Call {
            task,
            kind,
            parent,
            child: None,
            value: None,
            start,
            end: start,
            outcome: Outcome::Ok,
            not_found: false,
            shown: Vec::new(),
            complete: false,
        };
        match roll {
            0..35 => {
                let review = Review {
                    id: ObjectId::new(),
                    author: format!("client {task} push {n}"),
                    rating: rng.random_range(1..=5),
                    date: DateTime::from_millis(rng.random_range(0..1_000_000)),
                };
                mine.push((parent, review.clone()));
                // The same child again after a failure, half the time: a retry must not write
                // a second copy.
                for _ in 0..3 {
                    let mut c = call(Kind::Push, parent, Instant::now());
                    c.child = Some(review.id);
                    c.value = Some(review.author.clone());
                    let result = timed(reviews.push(&parent, &review).into_future()).await;
                    ended(&mut c, &result);
                    let done = c.outcome == Outcome::Ok;
                    calls.push(c);
                    if done || !rng.random_bool(0.5) {
                        break;
                    }
                }
            }
            35..55 if !mine.is_empty() => {
                let i = rng.random_range(0..mine.len());
                let (parent, child) = (mine[i].0, mine[i].1.id);
                for _ in 0..3 {
                    let mut c = call(Kind::Remove, parent, Instant::now());
                    c.child = Some(child);
                    let result = timed(reviews.remove(&parent, &child).into_future()).await;
                    ended(&mut c, &result);
                    let (done, gone) = (c.outcome == Outcome::Ok, c.not_found);
                    calls.push(c);
                    if done || gone {
                        mine.swap_remove(i);
                        break;
                    }
                    if !rng.random_bool(0.5) {
                        break;
                    }
                }
            }
            55..70 if !mine.is_empty() => {
                let i = rng.random_range(0..mine.len());
                let (parent, child) = (mine[i].0, mine[i].1.id);
                let author = format!("client {task} patch {n}");
                // A new date re-ranks the child in the subset; `set` is idempotent, an `inc`
                // would not be.
                let date = DateTime::from_millis(rng.random_range(0..1_000_000));
                let mut c = call(Kind::Patch, parent, Instant::now());
                c.child = Some(child);
                c.value = Some(author.clone());
                let patch = reviews
                    .patch(&parent, &child)
                    .set(Review::AUTHOR, author)
                    .set(Review::DATE, date);
                let result = timed(patch.into_future()).await;
                ended(&mut c, &result);
                if c.not_found {
                    mine.swap_remove(i);
                }
                calls.push(c);
            }
            70..85 => {
                let size = PAGE_SIZES[rng.random_range(0..PAGE_SIZES.len())];
                let mut c = call(Kind::Walk, parent, Instant::now());
                let mut request = PageRequest::first(size);
                loop {
                    match timed(reviews.page(&parent, &request).into_future()).await {
                        Ok(page) => {
                            c.shown.extend(page.items.iter().map(|r| r.id));
                            match page.next {
                                Some(cursor) => request = PageRequest::after(cursor, size),
                                None => {
                                    c.complete = true;
                                    break;
                                }
                            }
                        }
                        Err((outcome, _)) => {
                            c.outcome = outcome;
                            break;
                        }
                    }
                }
                c.end = Instant::now();
                calls.push(c);
            }
            _ => {
                let mut c = call(Kind::Get, parent, Instant::now());
                let result = timed(store.get(&parent).into_future()).await;
                ended(&mut c, &result);
                match result {
                    Ok(Some(product)) => {
                        c.shown = product.recent_reviews.iter().map(|r| r.id).collect()
                    }
                    Ok(None) => c.outcome = Outcome::Failed("the product is gone".into()),
                    Err(_) => {}
                }
                calls.push(c);
            }
        }
    }
    calls
}

/// A fault applied, for the summary.
#[derive(Debug)]
struct Applied {
    fault: Fault,
    at: Duration,
    what: Result<String, String>,
}

/// A member other than the primary a quarter of the time.
fn target(set: &ReplicaSet, primary: usize, rng: &mut StdRng) -> (usize, &'static str) {
    if rng.random_bool(0.75) {
        (primary, "the primary")
    } else {
        let others: Vec<usize> = (0..set.len()).filter(|m| *m != primary).collect();
        (others[rng.random_range(0..others.len())], "a secondary")
    }
}

/// The writable primary that every member answering names as the primary. A member resumed
/// after a pause says it is a writable primary until it hears of the new term, and for a moment
/// it may be the only one saying so (the new primary may still be draining).
async fn agreed_primary(set: &ReplicaSet) -> Option<usize> {
    let replies = futures::future::join_all((0..set.len()).map(|m| set.hello(m))).await;
    (0..set.len()).find(|&m| {
        let host = format!("127.0.0.1:{}", set.port(m));
        replies[m]
            .as_ref()
            .is_some_and(|r| r.get_bool("isWritablePrimary").unwrap_or(false))
            && replies
                .iter()
                .flatten()
                .all(|r| r.get_str("primary").ok() == Some(host.as_str()))
    })
}

/// Waits for a primary the members agree on, other than `old`; which, and how long it took.
async fn new_primary(set: &ReplicaSet, old: Option<usize>) -> Result<(usize, Duration), String> {
    let since = Instant::now();
    while since.elapsed() < SETTLE_TIMEOUT {
        if let Some(p) = agreed_primary(set).await.filter(|p| Some(*p) != old) {
            return Ok((p, since.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "no agreed primary (other than {old:?}) after {SETTLE_TIMEOUT:?}"
    ))
}

/// Waits until member `member` is a secondary, or the primary the members agree on (a member
/// resumed after a pause rolls back what only it had before it is a secondary).
async fn rejoined(set: &ReplicaSet, member: usize) -> Result<Duration, String> {
    let since = Instant::now();
    while since.elapsed() < SETTLE_TIMEOUT {
        if let Some(reply) = set.hello(member).await {
            if reply.get_bool("secondary").unwrap_or(false)
                || agreed_primary(set).await == Some(member)
            {
                return Ok(since.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("member {member} not back after {SETTLE_TIMEOUT:?}"))
}

fn millis(rng: &mut StdRng, range: std::ops::Range<u64>) -> Duration {
    Duration::from_millis(rng.random_range(range))
}

/// Applies one fault and undoes it; what happened, or why it could not be applied.
async fn apply(set: &mut ReplicaSet, fault: Fault, rng: &mut StdRng) -> Result<String, String> {
    let (primary, _) = new_primary(set, None).await?;
    // Long enough for the others to miss two heartbeats and hold an election.
    let past_election = set.election_timeout() * 2 + Duration::from_secs(1);
    match fault {
        Fault::StepDown => {
            set.step_down(primary, 10)
                .await
                .map_err(|e| e.to_string())?;
            let (new, after) = new_primary(set, Some(primary)).await?;
            Ok(format!(
                "member {primary} stepped down, member {new} primary after {after:.1?}"
            ))
        }
        Fault::Pause => {
            let (member, role) = target(set, primary, rng);
            let hold = past_election + millis(rng, 0..2_000);
            set.pause(member);
            tokio::time::sleep(hold).await;
            set.resume(member);
            let back = rejoined(set, member).await?;
            let now = match new_primary(set, None).await? {
                (p, _) if p == member => "it is the primary (no election won meanwhile)".to_owned(),
                (p, _) => format!("member {p} is the primary"),
            };
            Ok(format!(
                "member {member} ({role}) paused for {hold:.1?}, back as a secondary or the primary \
                 {back:.1?} after SIGCONT; {now}"
            ))
        }
        Fault::Kill => {
            let (member, role) = target(set, primary, rng);
            set.kill(member);
            let elected = if member == primary {
                let (p, after) = new_primary(set, Some(primary)).await?;
                format!(", member {p} primary after {after:.1?}")
            } else {
                String::new()
            };
            let down = millis(rng, 500..2_000);
            tokio::time::sleep(down).await;
            set.restart(member).await.map_err(|e| e.to_string())?;
            Ok(format!(
                "member {member} ({role}) killed{elected}; restarted {down:.1?} after"
            ))
        }
        Fault::StopReplication => {
            let hold = millis(rng, 1_000..3_000);
            set.stop_replication(primary)
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::sleep(hold).await;
            set.start_replication(primary)
                .await
                .map_err(|e| e.to_string())?;
            Ok(format!(
                "replication from member {primary} (the primary) stopped for {hold:.1?}"
            ))
        }
        Fault::StopReplicationThenFailover => {
            let hold = millis(rng, 1_000..3_000);
            let pause = rng.random_bool(0.5);
            set.stop_replication(primary)
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::sleep(hold).await;
            if pause {
                set.pause(primary);
            } else {
                set.kill(primary);
            }
            let (new, after) = new_primary(set, Some(primary)).await?;
            set.start_replication(primary)
                .await
                .map_err(|e| e.to_string())?;
            let how = if pause {
                tokio::time::sleep(past_election.saturating_sub(after)).await;
                set.resume(primary);
                "paused"
            } else {
                set.restart(primary).await.map_err(|e| e.to_string())?;
                "killed"
            };
            let back = rejoined(set, primary).await?;
            Ok(format!(
                "replication from member {primary} (the primary) stopped for {hold:.1?}, then \
                 it was {how}: member {new} primary after {after:.1?}; member {primary} back \
                 {back:.1?} later"
            ))
        }
    }
}

/// Undoes whatever a fault that went wrong left: every member running, resumed, replicating,
/// and a primary.
async fn heal(set: &mut ReplicaSet) {
    for member in 0..set.len() {
        set.resume(member);
        if set.hello(member).await.is_none() {
            set.restart(member)
                .await
                .expect("restart a member after a fault");
        }
    }
    for member in 0..set.len() {
        set.start_replication(member)
            .await
            .expect("start replication after a fault");
    }
    for member in 0..set.len() {
        rejoined(set, member)
            .await
            .expect("every member back after a fault");
    }
}

/// How many rollbacks the members' logs report so far.
fn rollbacks(set: &ReplicaSet) -> usize {
    (0..set.len())
        .map(|m| {
            std::fs::read_to_string(set.log_path(m))
                .map(|log| log.matches("\"msg\":\"Rollback complete\"").count())
                .unwrap_or(0)
        })
        .sum()
}

/// The database at the end, read with majority.
struct Final {
    /// Each stored child: its parent and author.
    children: HashMap<ObjectId, (ObjectId, String)>,
    /// Each parent: its count and the `_id`s it embeds.
    parents: Vec<(ObjectId, i64, Vec<ObjectId>)>,
    /// The parents whose views `check` found drifted, with what it found.
    drifted: Vec<String>,
}

async fn read_final(store: &Store<Product>, parents: &[ObjectId]) -> Final {
    let db = store.database();
    let majority = db.client().database_with_options(
        db.name(),
        DatabaseOptions::builder()
            .read_concern(ReadConcern::majority())
            .build(),
    );
    // A write acknowledged by a majority after every call: the majority snapshot read next
    // holds everything that survives.
    majority
        .collection::<Document>("history_marker")
        .insert_one(doc! {})
        .with_options(
            InsertOneOptions::builder()
                .write_concern(WriteConcern::majority())
                .build(),
        )
        .await
        .expect("a majority write after the history");
    let spec = store.children(Product::RECENT_REVIEWS).spec();
    let docs: Vec<Document> = majority
        .collection::<Document>(spec.child_collection)
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let children = docs
        .iter()
        .map(|d| {
            let id = d.get_object_id("_id").unwrap();
            let parent = d.get_object_id(spec.key).unwrap();
            (id, (parent, d.get_str("author").unwrap().to_owned()))
        })
        .collect();
    let mut stored = Vec::new();
    for parent in parents {
        let d = majority
            .collection::<Document>(Product::COLLECTION)
            .find_one(doc! { "_id": parent })
            .await
            .unwrap()
            .expect("a product of the history");
        let count = match d.get("total_reviews") {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            other => panic!("total_reviews of {parent} is {other:?}"),
        };
        let embedded = d
            .get_array("recent_reviews")
            .unwrap()
            .iter()
            .map(|r| r.as_document().unwrap().get_object_id("_id").unwrap())
            .collect();
        stored.push((*parent, count, embedded));
    }
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut drifted = Vec::new();
    for parent in parents {
        let drift = reviews.check(parent).await.expect("check a product's view");
        if !drift.is_clean() {
            drifted.push(format!("{drift:?}"));
        }
    }
    Final {
        children,
        parents: stored,
        drifted,
    }
}

/// What the checker found in one history.
#[derive(Debug, Default)]
struct Figures {
    calls: BTreeMap<Kind, usize>,
    seconds: f64,
    walks_complete: usize,
    faults: BTreeMap<Fault, usize>,
    faults_refused: usize,
    rollbacks_logged: usize,
    writes: [usize; 3],
    reads: [usize; 2],
    /// Acknowledged pushes absent at the end with no remove of them.
    lost_pushes: Vec<ObjectId>,
    /// Acknowledged removes whose child is back.
    undone_removes: Vec<ObjectId>,
    /// Children whose author is older than their last acknowledged patch's.
    lost_patches: Vec<ObjectId>,
    /// Failed pushes present, or failed patches applied, with no retry that wrote them.
    failed_written: Vec<ObjectId>,
    /// Children a failed call found absent, present at the end.
    reappeared: Vec<ObjectId>,
    /// Unknown pushes (and no acknowledged retry): present, absent at the end.
    unknown_pushes: [usize; 2],
    /// Children shown by a read, absent at the end with no remove of them; and how many reads.
    phantoms: BTreeSet<ObjectId>,
    phantom_reads: usize,
    /// Parents whose count differs from their children (stored, actual).
    counts_off: Vec<(ObjectId, i64, usize)>,
    /// A child shown twice by one get, or embedded twice.
    shown_twice: Vec<String>,
    /// A child shown twice by one walk (and not re-ranked by a patch meanwhile).
    walked_twice: Vec<String>,
    /// Children that existed throughout a complete walk and were not on it.
    missed_by_walks: Vec<String>,
    drifted: Vec<String>,
}

impl Figures {
    fn lost(&self) -> usize {
        self.lost_pushes.len() + self.undone_removes.len() + self.lost_patches.len()
    }

    fn double_counts(&self) -> usize {
        self.shown_twice.len()
            + self.walked_twice.len()
            + self
                .counts_off
                .iter()
                .filter(|(_, stored, actual)| *stored > *actual as i64)
                .count()
    }
}

/// Whether a child is there, as far as the history tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// Never written: every push of it failed.
    Never,
    Pushed,
    Patched,
    Removed,
    /// A failed call found it absent.
    NotFound,
    /// A write of it may or may not have happened.
    Maybe,
}

fn check(calls: &[Call], end: &Final, figures: &mut Figures) {
    let mut writes: HashMap<ObjectId, Vec<&Call>> = HashMap::new();
    for c in calls {
        *figures.calls.entry(c.kind).or_default() += 1;
        if c.kind == Kind::Walk && c.complete {
            figures.walks_complete += 1;
        }
        let slot = match (&c.outcome, c.kind.is_write()) {
            (Outcome::Ok, true) => &mut figures.writes[0],
            (Outcome::Failed(_), true) => &mut figures.writes[1],
            (Outcome::Unknown(_), true) => &mut figures.writes[2],
            (Outcome::Ok, false) => &mut figures.reads[0],
            (_, false) => &mut figures.reads[1],
        };
        *slot += 1;
        if let (true, Some(child)) = (c.kind.is_write(), c.child) {
            writes.entry(child).or_default().push(c);
        }
    }
    // Each child's writes come from the one client that owns it, one after the other.
    for (child, history) in &mut writes {
        history.sort_by_key(|c| c.start);
        let mut presence = Presence::Never;
        let mut unknown_push = false;
        // The authors it may have at the end, and those of failed patches.
        let mut allowed: HashSet<&str> = HashSet::new();
        let mut failed_values: HashSet<&str> = HashSet::new();
        for c in history.iter() {
            let value = c.value.as_deref();
            match (c.kind, &c.outcome) {
                (Kind::Push, Outcome::Ok) => {
                    if !matches!(presence, Presence::Pushed | Presence::Patched) {
                        allowed.extend(value);
                    }
                    presence = Presence::Pushed;
                    unknown_push = false;
                }
                // Pushing a stored child changes nothing.
                (Kind::Push, Outcome::Unknown(_))
                    if !matches!(presence, Presence::Pushed | Presence::Patched) =>
                {
                    presence = Presence::Maybe;
                    allowed.extend(value);
                    unknown_push = true;
                }
                (Kind::Remove, Outcome::Ok) => presence = Presence::Removed,
                (Kind::Remove, Outcome::Unknown(_))
                    if !matches!(presence, Presence::Removed | Presence::NotFound) =>
                {
                    presence = Presence::Maybe;
                }
                (Kind::Patch, Outcome::Ok) => {
                    presence = Presence::Patched;
                    allowed = value.into_iter().collect();
                }
                (Kind::Patch, Outcome::Unknown(_)) => {
                    allowed.extend(value);
                }
                (Kind::Patch, Outcome::Failed(_)) => {
                    failed_values.extend(value);
                }
                _ => {}
            }
            if c.not_found {
                presence = Presence::NotFound;
            }
        }
        let stored = end.children.get(child);
        match (presence, stored) {
            (Presence::Pushed, None) => figures.lost_pushes.push(*child),
            (Presence::Patched, None) => figures.lost_patches.push(*child),
            (Presence::Removed, Some(_)) => figures.undone_removes.push(*child),
            (Presence::Never, Some(_)) => figures.failed_written.push(*child),
            (Presence::NotFound, Some(_)) => figures.reappeared.push(*child),
            _ => {}
        }
        if unknown_push && presence == Presence::Maybe {
            figures.unknown_pushes[usize::from(stored.is_none())] += 1;
        }
        if let Some((_, author)) = stored {
            let known = matches!(
                presence,
                Presence::Pushed | Presence::Patched | Presence::Maybe
            );
            if failed_values.contains(author.as_str()) && !allowed.contains(author.as_str()) {
                figures.failed_written.push(*child);
            } else if known && !allowed.contains(author.as_str()) {
                figures.lost_patches.push(*child);
            }
        }
    }

    // Reads: phantoms, and the same child twice.
    let removed: HashSet<ObjectId> = calls
        .iter()
        .filter(|c| c.kind == Kind::Remove && !matches!(c.outcome, Outcome::Failed(_)))
        .filter_map(|c| c.child)
        .collect();
    for c in calls.iter().filter(|c| !c.kind.is_write()) {
        let mut phantom = false;
        for id in &c.shown {
            if !end.children.contains_key(id) && !removed.contains(id) {
                figures.phantoms.insert(*id);
                phantom = true;
            }
        }
        figures.phantom_reads += usize::from(phantom);
        let mut seen = HashSet::new();
        for id in &c.shown {
            let moved = writes.get(id).is_some_and(|h| {
                h.iter()
                    .any(|w| w.kind == Kind::Patch && w.overlaps(c.start, c.end))
            });
            if !seen.insert(*id) && !moved {
                let what = format!(
                    "{id} twice in a {:?} of {} by client {} ({:.3?} long): {}",
                    c.kind,
                    c.parent,
                    c.task,
                    c.end - c.start,
                    story(writes.get(id), c.start, end.children.get(id)),
                );
                match c.kind {
                    Kind::Walk => figures.walked_twice.push(what),
                    _ => figures.shown_twice.push(what),
                }
            }
        }
    }

    // Complete walks: each child that existed throughout, exactly once.
    for walk in calls.iter().filter(|c| c.kind == Kind::Walk && c.complete) {
        let shown: HashSet<&ObjectId> = walk.shown.iter().collect();
        for (child, (parent, _)) in &end.children {
            if *parent != walk.parent || shown.contains(child) {
                continue;
            }
            let Some(history) = writes.get(child) else {
                continue;
            };
            let before = history
                .iter()
                .any(|w| w.kind == Kind::Push && w.outcome == Outcome::Ok && w.end < walk.start);
            let touched = history.iter().any(|w| {
                (w.kind == Kind::Remove && w.start < walk.end)
                    || (w.kind == Kind::Patch && w.overlaps(walk.start, walk.end))
            });
            if before && !touched {
                figures.missed_by_walks.push(format!(
                    "{child} of {parent}: a walk by client {} ({:.3?} long) missed it: {}",
                    walk.task,
                    walk.end - walk.start,
                    story(Some(history), walk.start, end.children.get(child)),
                ));
            }
        }
    }

    // Counts and views.
    let mut per_parent: HashMap<ObjectId, usize> = HashMap::new();
    for (parent, _) in end.children.values() {
        *per_parent.entry(*parent).or_default() += 1;
    }
    for (parent, count, embedded) in &end.parents {
        let actual = per_parent.get(parent).copied().unwrap_or(0);
        if *count != actual as i64 {
            figures.counts_off.push((*parent, *count, actual));
        }
        let unique: HashSet<_> = embedded.iter().collect();
        if unique.len() != embedded.len() {
            figures
                .shown_twice
                .push(format!("a child embedded twice in {parent}: {embedded:?}"));
        }
    }
    figures.drifted = end.drifted.clone();
}

/// A child's writes, timed from `origin` (a read's start), and how it ended: what a read that
/// saw it twice or missed it had to go by.
fn story(
    history: Option<&Vec<&Call>>,
    origin: Instant,
    stored: Option<&(ObjectId, String)>,
) -> String {
    let at = |t: Instant| match t.checked_duration_since(origin) {
        Some(d) => d.as_secs_f64(),
        None => -(origin - t).as_secs_f64(),
    };
    let mut parts: Vec<String> = history
        .into_iter()
        .flatten()
        .map(|w| {
            let outcome = match w.outcome {
                Outcome::Ok => "ok",
                Outcome::Failed(_) => "failed",
                Outcome::Unknown(_) => "unknown",
            };
            let value = w.value.as_deref().unwrap_or("");
            format!(
                "{:?} {outcome} `{value}` {:+.3}..{:+.3} s",
                w.kind,
                at(w.start),
                at(w.end)
            )
        })
        .collect();
    parts.push(match stored {
        Some((_, author)) => format!("at the end `{author}`"),
        None => "absent at the end".to_owned(),
    });
    parts.join(", ")
}

/// One history: the clients against `durability`'s store while the faults of `rounds` rounds
/// are applied; then the check.
async fn history(
    set: &mut ReplicaSet,
    client: &mongodb::Client,
    durability: Durability,
    seed: u64,
    rounds: usize,
) -> Figures {
    let db = client.database(match durability {
        Durability::Majority => "history_majority",
        Durability::One => "history_w1",
    });
    // The products are written with majority before any fault, whatever the run's concern.
    let setup = Store::<Product>::new(&db);
    setup.ensure_indexes().await.unwrap();
    let mut parents = Vec::new();
    for n in 0..PARENTS {
        let product = Product::named(&format!("history {n}"));
        setup.insert(&product).await.unwrap();
        parents.push(product.id);
    }
    let parents = Arc::new(parents);
    let store = durability.store(&db);
    let rollbacks_before = rollbacks(set);

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..TASKS)
        .map(|task| {
            tokio::spawn(run_client(
                task,
                store.clone(),
                parents.clone(),
                seed,
                stop.clone(),
            ))
        })
        .collect();

    let mut rng = StdRng::seed_from_u64(seed ^ 0xFA17);
    let mut applied = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..rounds {
        let mut bag = FAULTS;
        bag.shuffle(&mut rng);
        for fault in bag {
            tokio::time::sleep(millis(&mut rng, 500..2_000)).await;
            let at = started.elapsed();
            let what = apply(set, fault, &mut rng).await;
            if what.is_err() {
                heal(set).await;
            }
            applied.push(Applied { fault, at, what });
        }
    }
    heal(set).await;
    // Let the clients run a moment on the healed set, then stop them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut calls = Vec::new();
    for c in clients {
        calls.extend(c.await.expect("a client panicked"));
    }
    let seconds = started.elapsed().as_secs_f64();

    let end = read_final(&store, &parents).await;
    let mut figures = Figures {
        seconds,
        rollbacks_logged: rollbacks(set) - rollbacks_before,
        ..Figures::default()
    };
    for a in &applied {
        match &a.what {
            Ok(_) => *figures.faults.entry(a.fault).or_default() += 1,
            Err(_) => figures.faults_refused += 1,
        }
    }
    check(&calls, &end, &mut figures);
    report(durability, seed, &applied, &figures, &calls);
    figures
}

/// Writes the summary to stderr past the test harness's capture, so that a passing run shows
/// its figures too.
fn report(durability: Durability, seed: u64, applied: &[Applied], f: &Figures, calls: &[Call]) {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str("history: ");
        out.push_str(&s);
        out.push('\n');
    };
    let total: usize = f.calls.values().sum();
    line(format!(
        "{} (seed {seed}): {total} calls in {:.1} s: {}; {} complete walks",
        durability.name(),
        f.seconds,
        f.calls
            .iter()
            .map(|(k, n)| format!("{n} {k:?}"))
            .collect::<Vec<_>>()
            .join(", ")
            .to_lowercase(),
        f.walks_complete,
    ));
    line(format!(
        "  faults applied: {} ({} could not be applied)",
        FAULTS
            .iter()
            .map(|k| format!("{} {}", k.name(), f.faults.get(k).unwrap_or(&0)))
            .collect::<Vec<_>>()
            .join(", "),
        f.faults_refused,
    ));
    for a in applied {
        match &a.what {
            Ok(what) => line(format!(
                "    {:>5.1} s {}: {what}",
                a.at.as_secs_f64(),
                a.fault.name()
            )),
            Err(why) => line(format!(
                "    {:>5.1} s {}: NOT APPLIED: {why}",
                a.at.as_secs_f64(),
                a.fault.name()
            )),
        }
    }
    line(format!(
        "  writes: {} ok, {} failed, {} unknown; reads: {} ok, {} failed; the servers logged {} rollbacks",
        f.writes[0], f.writes[1], f.writes[2], f.reads[0], f.reads[1], f.rollbacks_logged
    ));
    line(format!(
        "  lost acknowledged writes: {} (pushes {}, removes undone {}, patches {})",
        f.lost(),
        f.lost_pushes.len(),
        f.undone_removes.len(),
        f.lost_patches.len()
    ));
    line(format!(
        "  phantom reads: {} ({} children shown, then absent with no remove of them)",
        f.phantom_reads,
        f.phantoms.len()
    ));
    line(format!(
        "  double counts: {} (counts off {}, a child twice in a walk {}, in a get or embedded {}); \
         views drifted: {}",
        f.double_counts(),
        f.counts_off.len(),
        f.walked_twice.len(),
        f.shown_twice.len(),
        f.drifted.len()
    ));
    line(format!(
        "  failed writes present: {}, children back after not found: {}, missed by walks: {}; \
         unknown pushes present {}, absent {}",
        f.failed_written.len(),
        f.reappeared.len(),
        f.missed_by_walks.len(),
        f.unknown_pushes[0],
        f.unknown_pushes[1]
    ));
    for what in f.walked_twice.iter().chain(&f.missed_by_walks).take(4) {
        line(format!("    {what}"));
    }
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for c in calls {
        if let Outcome::Failed(e) | Outcome::Unknown(e) = &c.outcome {
            let kind = if matches!(c.outcome, Outcome::Unknown(_)) {
                "unknown"
            } else {
                "failed"
            };
            let key: String = without_ids(e).chars().take(110).collect();
            *errors
                .entry(format!("{kind} {:?}: {key}", c.kind))
                .or_default() += 1;
        }
    }
    for (e, n) in errors {
        line(format!("    {n:>4} × {e}"));
    }
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

/// An error message with each `ObjectId("…")` as `…`, so that errors group by kind.
fn without_ids(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(at) = rest.find("ObjectId(\"") {
        out.push_str(&rest[..at]);
        out.push('…');
        rest = rest[at..].find(')').map_or("", |end| &rest[at + end + 1..]);
    }
    out.push_str(rest);
    out
}

/// The seed: `SUBSET_HISTORY_SEED`, or a fresh one.
fn seed() -> u64 {
    match std::env::var("SUBSET_HISTORY_SEED") {
        Ok(s) if !s.is_empty() => s
            .parse()
            .unwrap_or_else(|_| panic!("SUBSET_HISTORY_SEED is `{s}`, not a number")),
        _ => rand::random(),
    }
}

async fn histories(rounds: usize) {
    if external_server() {
        return skip("MONGODB_URI is set: this test needs mongod processes of its own");
    }
    let seed = seed();
    let _ = writeln!(
        std::io::stderr(),
        "history: seed {seed} (replay the same faults and choices with SUBSET_HISTORY_SEED={seed})"
    );
    let started = Instant::now();
    let mut set = ReplicaSet::start(3)
        .await
        .expect("start a 3-member replica set");
    // Heartbeats every half second, so that the driver finds a new primary soon.
    let uri = format!(
        "{}&heartbeatFrequencyMS=500&serverSelectionTimeoutMS=20000",
        set.uri()
    );
    let client = mongodb::Client::with_options(ClientOptions::parse(&uri).await.unwrap()).unwrap();

    let majority = history(&mut set, &client, Durability::Majority, seed, rounds).await;
    let one = history(&mut set, &client, Durability::One, seed, rounds).await;
    let _ = writeln!(
        std::io::stderr(),
        "history: both runs in {:.1} s (seed {seed})",
        started.elapsed().as_secs_f64()
    );
    if one.lost() + one.phantoms.len() == 0 {
        let _ = writeln!(
            std::io::stderr(),
            "history: w: 1 lost nothing and showed no phantom in this run: it checked nothing \
             about rollbacks (the servers logged {} rollbacks)",
            one.rollbacks_logged
        );
    }

    // With majority: nothing lost, nothing shown and then lost, nothing counted twice.
    let m = &majority;
    let context = format!("w: majority, seed {seed}");
    assert!(
        m.lost_pushes.is_empty(),
        "{context}: acknowledged pushes lost: {:?}",
        m.lost_pushes
    );
    assert!(
        m.undone_removes.is_empty(),
        "{context}: acknowledged removes undone: {:?}",
        m.undone_removes
    );
    assert!(
        m.lost_patches.is_empty(),
        "{context}: acknowledged patches lost: {:?}",
        m.lost_patches
    );
    assert!(
        m.failed_written.is_empty(),
        "{context}: failed writes present: {:?}",
        m.failed_written
    );
    assert!(
        m.reappeared.is_empty(),
        "{context}: children back after not found: {:?}",
        m.reappeared
    );
    assert!(
        m.phantoms.is_empty(),
        "{context}: phantom reads: {:?}",
        m.phantoms
    );
    assert!(
        m.missed_by_walks.is_empty(),
        "{context}: {:?}",
        m.missed_by_walks
    );
    assert!(m.walked_twice.is_empty(), "{context}: {:?}", m.walked_twice);
    // Either way: a rollback takes a whole transaction, so counts and views stay exact, and
    // one parent document never holds a child twice. (A walk with local reads can see a child
    // twice or miss it at `w: 1`: a rollback during the walk undoes a patch of its date, which
    // moves it across the walk's position.)
    for (f, context) in [(m, context.clone()), (&one, format!("w: 1, seed {seed}"))] {
        assert!(
            f.counts_off.is_empty(),
            "{context}: counts off (parent, stored, actual): {:?}",
            f.counts_off
        );
        assert!(f.shown_twice.is_empty(), "{context}: {:?}", f.shown_twice);
        assert!(
            f.drifted.is_empty(),
            "{context}: views drifted: {:?}",
            f.drifted
        );
        let applied: usize = f.faults.values().sum();
        assert!(applied > 0, "{context}: no fault could be applied");
        assert!(f.writes[0] > 0, "{context}: no write was acknowledged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_under_faults_lose_nothing_acknowledged_with_majority() {
    histories(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run with cargo test --features mongodb-subset/testkit --test chaos history -- --ignored"]
async fn long_histories_under_faults() {
    histories(LONG_ROUNDS).await;
}
