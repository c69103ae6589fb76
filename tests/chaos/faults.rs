//! Deterministic error paths on one node: the server's `failCommand` fail point (test commands
//! are on in the test kit's servers) fails one command of this test's own client (`appName`) at
//! a chosen step of a write: the child's insert, the parent's update, the commit. For each, what
//! the call returns, what is stored, and that a retry of the same call ends with exactly one copy
//! of the child, counted once.
//!
//! Each write runs twice: `sampled`, each step under one fault (the everyday run), and
//! `every_fault`, every fault at every step, behind `ignore` (`.ci/run` runs it:
//! `cargo test --features mongodb-subset/testkit --test chaos -- --ignored`).

use crate::common;

use std::future::IntoFuture;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use common::{embedded_ids, Product, Review};
use mongodb::options::ClientOptions;
use subset::bson;
use subset::testkit::{MongoServer, Topology};
use subset::{Error, Store, WriteMode};

/// A fault: the commands it fails, and how (`failCommand`'s `data` besides the command list).
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The connection closes before the reply: the outcome is unknown to the client.
    ClosedConnection,
    /// A write conflict, labelled transient: the whole transaction may be retried.
    Transient,
    /// An error no retry cures (code 2, BadValue).
    Fatal,
    /// The write is applied but not acknowledged as durably as asked.
    WriteConcern,
}

impl Fault {
    fn data(self) -> Document {
        match self {
            Fault::ClosedConnection => doc! { "closeConnection": true },
            Fault::Transient => doc! {
                "errorCode": 112,
                "errorLabels": ["TransientTransactionError"],
            },
            Fault::Fatal => doc! { "errorCode": 2 },
            Fault::WriteConcern => doc! {
                "writeConcernError": { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "injected" },
            },
        }
    }
}

/// `failCommand` is one fail point per server: the cases of this binary, whose tests run on
/// parallel threads, take turns with it (other binaries have servers of their own, and an
/// external server's other clients are left alone by `appName`).
pub(crate) static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server's `failCommand` fail point, held for one case: armed for one command of this
/// case's own client (its `appName`).
struct FailPoint {
    admin: mongodb::Database,
    app: String,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl FailPoint {
    /// Runs `call` with `command` failing once under `fault`, and checks that a fatal fault
    /// reached the caller (that the fail point fired).
    async fn once<T>(
        &self,
        case: (WriteMode, &str, Fault),
        call: impl IntoFuture<Output = subset::Result<T>>,
    ) -> subset::Result<T> {
        self.times(1, case, call).await
    }

    /// As [`FailPoint::once`], failing the first `times` such commands.
    async fn times<T>(
        &self,
        times: i32,
        (mode, command, fault): (WriteMode, &str, Fault),
        call: impl IntoFuture<Output = subset::Result<T>>,
    ) -> subset::Result<T> {
        let mut data = fault.data();
        data.insert("failCommands", vec![command]);
        data.insert("appName", self.app.as_str());
        self.configure(doc! { "mode": { "times": times }, "data": data })
            .await;
        let result = call.await;
        self.configure(doc! { "mode": "off" }).await;
        if matches!(fault, Fault::Fatal) {
            assert!(
                result.is_err(),
                "{mode:?} {command}: the fatal fault did not fire"
            );
        }
        // Without a transaction, a write applied short of its write concern is one whose
        // outcome the caller cannot know, and the error says so in its type.
        let write = matches!(command, "insert" | "update" | "delete" | "findAndModify");
        if matches!((mode, fault), (WriteMode::Ordered, Fault::WriteConcern)) && write {
            assert!(
                matches!(&result, Err(Error::OutcomeUnknown { .. })),
                "{mode:?} {command}: a write-concern error is an unknown outcome, not {:?}",
                result.as_ref().err()
            );
        }
        result
    }

    async fn configure(&self, setting: Document) {
        let mut command = doc! { "configureFailPoint": "failCommand" };
        command.extend(setting);
        self.admin
            .run_command(command)
            .await
            .expect("failCommand (test commands on)");
    }
}

/// A store in `mode` on a fresh database of the shared replica set, on a client of its own
/// (named for `appName`), and the fail point for it, held until the case ends.
async fn faulty(mode: WriteMode) -> (Store<Product>, FailPoint) {
    let turn = FAIL_POINT.lock().await;
    let app = format!("faults-{}", ObjectId::new().to_hex());
    let server = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod");
    let name = server.database().await.unwrap().name().to_owned();
    let mut options = ClientOptions::parse(server.uri()).await.unwrap();
    options.app_name = Some(app.clone());
    let client = mongodb::Client::with_options(options).unwrap();
    let point = FailPoint {
        admin: client.database("admin"),
        app,
        _turn: turn,
    };
    // Folding on, for the cases of folded pushes (it changes nothing else).
    let store = Store::with_options(
        &client.database(&name),
        subset::StoreOptions::new().mode(mode).folding(true),
    );
    // The store registers its model on its first write: done here, before any fault, so that
    // each fault hits the steps of the operation under test.
    let warm_up = Product::named("warm-up");
    store.insert(&warm_up).await.unwrap();
    store.delete(&warm_up.id).await.unwrap();
    (store, point)
}

/// (copies of the child in the collection, its copies embedded, the stored count).
async fn stored(store: &Store<Product>, product: &ObjectId, child: &ObjectId) -> (u64, usize, i64) {
    let db = store.database();
    let copies = db
        .collection::<Document>("reviews")
        .count_documents(doc! { "_id": child })
        .await
        .unwrap();
    let embedded = embedded_ids(store, "recent_reviews", &Bson::ObjectId(*product))
        .await
        .iter()
        .filter(|id| **id == Bson::ObjectId(*child))
        .count();
    let count = db
        .collection::<Document>("products")
        .find_one(doc! { "_id": product })
        .await
        .unwrap()
        .and_then(|p| p.get("total_reviews").cloned())
        .map_or(-1, |c| match c {
            Bson::Int32(n) => i64::from(n),
            Bson::Int64(n) => n,
            _ => -2,
        });
    (copies, embedded, count)
}

/// One push under one fault at one step: what it returned, then the state after a retry of the
/// same call, which must be one copy, embedded once, counted once.
async fn push_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let review = Review::at(1);
    let first = point
        .once((mode, command, fault), reviews.push(&product.id, &review))
        .await;
    let outcome = outcome(&first);
    let after_first = stored(&store, &product.id, &review.id).await;
    // The retry a caller makes when it got an error, or does anyway (an idempotent push).
    reviews.push(&product.id, &review).await.unwrap();
    let after_retry = stored(&store, &product.id, &review.id).await;
    assert_eq!(
        after_retry,
        (1, 1, 1),
        "{mode:?} {command} {fault:?}: first call {outcome}, then {after_first:?}; after a retry: one copy, embedded once, counted once"
    );
    if first.is_ok() {
        assert_eq!(
            after_first,
            (1, 1, 1),
            "{mode:?} {command} {fault:?}: acknowledged is whole"
        );
    }
    if matches!(mode, WriteMode::Transactional) && first.is_err() {
        assert_eq!(
            after_first,
            (0, 0, 0),
            "{mode:?} {command} {fault:?}: a failed transaction leaves nothing"
        );
    }
    format!("{mode:?} {command} {fault:?}: {outcome}; then {after_first:?}")
}

/// One remove under one fault at one step, of one of two children: what it returned, then the
/// state after a retry (which may find the child gone: `ChildNotFound`), which must be the other
/// child alone, embedded and counted.
async fn remove_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (gone, kept) = (Review::at(1), Review::at(2));
    reviews
        .push_many(&product.id, &[gone.clone(), kept.clone()])
        .await
        .unwrap();
    let first = point
        .once(
            (mode, command, fault),
            reviews.remove(&product.id, &gone.id),
        )
        .await;
    let outcome = outcome(&first);
    let after_first = stored(&store, &product.id, &gone.id).await;
    match reviews.remove(&product.id, &gone.id).await {
        Ok(()) | Err(Error::ChildNotFound { .. }) => {}
        Err(other) => panic!("{mode:?} {command} {fault:?}: the retry failed: {other:?}"),
    }
    // Ordered, a remove whose child delete got through but whose parent was not told (a
    // write-concern error, which withholds the deleted child) leaves the embedded copy and the
    // count: the drift the consistency guide says `reconcile` repairs, and the retry cannot
    // see (the child is gone). Finishing it in the retry would race concurrent removes.
    if matches!(mode, WriteMode::Ordered)
        && stored(&store, &product.id, &gone.id).await != (0, 0, 1)
    {
        assert!(
            matches!((command, fault), ("findAndModify", Fault::WriteConcern)),
            "{mode:?} {command} {fault:?}: only that case may need a reconcile"
        );
        reviews.reconcile(&product.id).await.unwrap();
    }
    assert_eq!(
        stored(&store, &product.id, &gone.id).await,
        (0, 0, 1),
        "{mode:?} {command} {fault:?}: first call {outcome}, then {after_first:?}; after a retry: gone everywhere, the other one counted"
    );
    assert_eq!(stored(&store, &product.id, &kept.id).await, (1, 1, 1));
    format!("remove: {mode:?} {command} {fault:?}: {outcome}; then {after_first:?}")
}

/// Which cases of a write a test runs.
#[derive(Debug, Clone, Copy)]
enum Matrix {
    /// The everyday run: each step of each write mode under one fault, the faults taken in
    /// turn.
    Sampled,
    /// Every fault at every step (behind `ignore`; `.ci/run` runs it as its long step).
    Every,
}

const FAULTS: [Fault; 4] = [
    Fault::ClosedConnection,
    Fault::Transient,
    Fault::Fatal,
    Fault::WriteConcern,
];

/// The cases of a write whose commands are `steps`: faults at each step and, in a
/// transaction, at the commit; in both write modes.
fn cases(matrix: Matrix, steps: &[&'static str]) -> Vec<(WriteMode, &'static str, Fault)> {
    let transactional = steps.iter().copied().chain(["commitTransaction"]);
    let at = transactional
        .map(|step| (WriteMode::Transactional, step))
        .chain(steps.iter().map(|step| (WriteMode::Ordered, *step)));
    faulted(matrix, at)
}

/// Each of `at` under the faults `matrix` asks for.
fn faulted<T: Copy>(
    matrix: Matrix,
    at: impl Iterator<Item = (T, &'static str)>,
) -> Vec<(T, &'static str, Fault)> {
    match matrix {
        Matrix::Sampled => at
            .enumerate()
            .map(|(i, (mode, command))| (mode, command, FAULTS[i % FAULTS.len()]))
            .collect(),
        Matrix::Every => at
            .flat_map(|(mode, command)| FAULTS.map(|fault| (mode, command, fault)))
            .collect(),
    }
}

/// A test of one write under faults, twice: `sampled` in the everyday run, `every_fault`
/// (every fault at every step) behind `ignore`.
macro_rules! under_faults {
    ($(#[$doc:meta])* $name:ident, $steps:expr, $under:ident) => {
        $(#[$doc])*
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread")]
            async fn sampled() {
                for (mode, command, fault) in cases(Matrix::Sampled, &$steps) {
                    println!("{}", $under(mode, command, fault).await);
                }
            }

            #[tokio::test(flavor = "multi_thread")]
            #[ignore = "long: every fault at every step; .ci/run runs it"]
            async fn every_fault() {
                for (mode, command, fault) in cases(Matrix::Every, &$steps) {
                    println!("{}", $under(mode, command, fault).await);
                }
            }
        }
    };
}

fn outcome(result: &subset::Result<()>) -> String {
    match result {
        Ok(()) => "ok".to_owned(),
        Err(Error::Mongo { source, .. }) => format!("Mongo({:?})", source.kind)
            .chars()
            .take(60)
            .collect(),
        Err(other) => format!("{other:?}").chars().take(60).collect(),
    }
}

under_faults!(
    a_remove_under_each_fault_at_each_step_ends_with_the_child_gone_once,
    ["findAndModify", "update"],
    remove_under
);

/// One update (a replacement that moves the child to the head) under one fault at one step:
/// after a retry, the child is stored once, as replaced, and embedded first.
async fn update_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (moved, other) = (Review::at(1), Review::at(2));
    reviews
        .push_many(&product.id, &[moved.clone(), other.clone()])
        .await
        .unwrap();
    let mut replaced = moved.clone();
    replaced.date = bson::DateTime::from_millis(3);
    replaced.author = "edited".into();
    let first = point
        .once(
            (mode, command, fault),
            reviews.update(&product.id, &replaced),
        )
        .await;
    let outcome = outcome(&first);
    let after_first = stored(&store, &product.id, &moved.id).await;
    reviews.update(&product.id, &replaced).await.unwrap();
    assert_eq!(
        stored(&store, &product.id, &moved.id).await,
        (1, 1, 2),
        "{mode:?} {command} {fault:?}: first call {outcome}, then {after_first:?}"
    );
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(
        got.recent_reviews[0], replaced,
        "{mode:?} {command} {fault:?}: re-ranked"
    );
    format!("update: {mode:?} {command} {fault:?}: {outcome}; then {after_first:?}")
}

under_faults!(
    an_update_under_each_fault_at_each_step_ends_replaced_once,
    ["findAndModify", "update"],
    update_under
);

under_faults!(
    a_push_under_each_fault_at_each_step_ends_in_one_copy_counted_once,
    ["insert", "update"],
    push_under
);

/// A push to a parent contended across processes (folded, see `tests/chaos/fold.rs`) under one fault
/// at one step: its queue append (`findAndModify`), or the fold's parent update, child insert
/// or commit. A fatal fault in the fold sets the push aside to be written alone, so there it
/// fails twice, to reach the caller. After a retry of the same call: one copy, counted once,
/// nothing left queued.
async fn folded_push_under(command: &str, fault: Fault) -> String {
    let mode = WriteMode::Transactional;
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    // Contended from now on, in this store: the pushes below are folded.
    common::folded(&store, &product.id, &Review::at(0))
        .await
        .unwrap();
    let review = Review::at(1);
    let times = if command != "findAndModify" && matches!(fault, Fault::Fatal) {
        2
    } else {
        1
    };
    let first = point
        .times(
            times,
            (mode, command, fault),
            reviews.push(&product.id, &review),
        )
        .await;
    let outcome = outcome(&first);
    let after_first = stored(&store, &product.id, &review.id).await;
    if first.is_ok() {
        assert_eq!(
            after_first,
            (1, 1, 2),
            "{command} {fault:?}: acknowledged is whole"
        );
    } else {
        assert_eq!(
            after_first.0 + after_first.1 as u64,
            0,
            "{command} {fault:?}: nothing written"
        );
    }
    reviews.push(&product.id, &review).await.unwrap();
    assert_eq!(
        stored(&store, &product.id, &review.id).await,
        (1, 1, 2),
        "{command} {fault:?}: first call {outcome}, then {after_first:?}; after a retry: one copy, embedded once, counted once"
    );
    assert!(
        common::queued(&store, &product.id).await.is_empty(),
        "{command} {fault:?}: left queued"
    );
    format!("folded: {command} {fault:?}: {outcome}; then {after_first:?}")
}

/// The fold's steps, each under faults: its queue append, the parent update, the child insert
/// and the commit, all in a transaction of the fold.
fn folded_cases(matrix: Matrix) -> Vec<((), &'static str, Fault)> {
    let steps = ["findAndModify", "update", "insert", "commitTransaction"];
    faulted(matrix, steps.into_iter().map(|step| ((), step)))
}

mod a_folded_push_under_each_fault_at_each_step_ends_in_one_copy_counted_once {
    use super::*;

    #[tokio::test(flavor = "multi_thread")]
    async fn sampled() {
        for ((), command, fault) in folded_cases(Matrix::Sampled) {
            println!("{}", folded_push_under(command, fault).await);
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    #[ignore = "long: every fault at every step; .ci/run runs it"]
    async fn every_fault() {
        for ((), command, fault) in folded_cases(Matrix::Every) {
            println!("{}", folded_push_under(command, fault).await);
        }
    }
}

/// `(parent stored, children stored)` of `product`.
async fn parent_and_children(store: &Store<Product>, product: &ObjectId) -> (bool, u64) {
    let db = store.database();
    let parent = db
        .collection::<Document>("products")
        .count_documents(doc! { "_id": product })
        .await
        .unwrap();
    let children = db
        .collection::<Document>("reviews")
        .count_documents(doc! { "product_id": product })
        .await
        .unwrap();
    (parent == 1, children)
}

/// A batch push under one fault at one step: after a retry, each child once, all counted.
async fn push_many_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let batch: Vec<Review> = (1..=3).map(Review::at).collect();
    let first = point
        .once(
            (mode, command, fault),
            reviews.push_many(&product.id, &batch),
        )
        .await;
    let outcome = outcome(&first);
    reviews.push_many(&product.id, &batch).await.unwrap();
    for review in &batch {
        assert_eq!(
            stored(&store, &product.id, &review.id).await,
            (1, 1, 3),
            "{mode:?} {command} {fault:?}: first call {outcome}"
        );
    }
    format!("push_many: {mode:?} {command} {fault:?}: {outcome}")
}

under_faults!(
    a_batch_push_under_each_fault_at_each_step_ends_with_each_child_once,
    ["insert", "update"],
    push_many_under
);

/// A delete of a parent with children under one fault at one step: after a retry, nothing of
/// either is left.
async fn delete_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let mut product = Product::named("faults");
    product.recent_reviews = (1..=3).map(Review::at).collect();
    store.insert(&product).await.unwrap();
    let first = point
        .once((mode, command, fault), store.delete(&product.id))
        .await
        .map(|_| ());
    let outcome = outcome(&first);
    let after_first = parent_and_children(&store, &product.id).await;
    store.delete(&product.id).await.unwrap();
    assert_eq!(
        parent_and_children(&store, &product.id).await,
        (false, 0),
        "{mode:?} {command} {fault:?}: first call {outcome}, then {after_first:?}"
    );
    format!("delete: {mode:?} {command} {fault:?}: {outcome}; then {after_first:?}")
}

under_faults!(
    a_delete_under_each_fault_at_each_step_ends_with_nothing_left,
    ["delete"],
    delete_under
);

/// A reconcile of a parent whose subset lost a child (written around the library) under one
/// fault at one step: after a retry, the subset and count are true.
async fn reconcile_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let review = Review::at(1);
    let mut raw = subset::bson_compat::to_document(&review).unwrap();
    raw.insert("product_id", product.id);
    store
        .database()
        .collection::<Document>("reviews")
        .insert_one(raw)
        .await
        .unwrap();
    let first = point
        .once((mode, command, fault), reviews.reconcile(&product.id))
        .await
        .map(|_| ());
    let outcome = outcome(&first);
    reviews.reconcile(&product.id).await.unwrap();
    assert_eq!(
        stored(&store, &product.id, &review.id).await,
        (1, 1, 1),
        "{mode:?} {command} {fault:?}: first call {outcome}"
    );
    assert!(reviews.check(&product.id).await.unwrap().is_clean());
    format!("reconcile: {mode:?} {command} {fault:?}: {outcome}")
}

under_faults!(
    /// A reconcile writes only the parent: its steps are its reads (`find`), the update, the
    /// commit.
    a_reconcile_under_each_fault_at_each_step_ends_true, ["find", "update"], reconcile_under);

/// An insert of a parent with children under one fault at one step: after a retry of the same
/// call, the parent once with every child. (The retry of an insert that got through is
/// `ParentExists`: an insert is not idempotent, but nothing is lost or doubled.)
async fn insert_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let mut product = Product::named("faults");
    product.recent_reviews = (1..=3).map(Review::at).collect();
    let first = point
        .once((mode, command, fault), store.insert(&product))
        .await;
    let outcome = outcome(&first);
    let after_first = parent_and_children(&store, &product.id).await;
    let retry = store.insert(&product).await;
    assert!(
        matches!(retry, Ok(()) | Err(Error::ParentExists { .. })),
        "{mode:?} {command} {fault:?}: the retry is done or finds the parent: {retry:?}"
    );
    let after_retry = parent_and_children(&store, &product.id).await;
    assert_eq!(
        after_retry,
        (true, 3),
        "{mode:?} {command} {fault:?}: first call {outcome}, then {after_first:?}"
    );
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!((got.recent_reviews.len(), got.total_reviews), (3, 3));
    format!(
        "insert: {mode:?} {command} {fault:?}: {outcome}; then {after_first:?}; retry {}: {after_retry:?}",
        self::outcome(&retry)
    )
}

under_faults!(
    an_insert_under_each_fault_at_each_step_ends_with_the_parent_and_every_child,
    ["insert", "update"],
    insert_under
);

/// A patch (a new date, which re-ranks the child, and a new author) under one fault at one
/// step: a set is idempotent, so after a retry of the same call the child holds the new values
/// once, embedded where its new date ranks it, and the count is unchanged. In a transaction, a
/// failed first call left the child as it was. The date moves the child below the other
/// review: the view is recomputed.
async fn patch_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    patch_to(mode, command, fault, 0).await
}

/// [`patch_under`] with a date that raises the child above the other review: the view is
/// re-ranked in place, in the parent's one update.
async fn raising_patch_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    patch_to(mode, command, fault, 3).await
}

/// A patch of the older of two reviews to the date `millis` (0: last; 3: first), under `fault`
/// at `command`.
async fn patch_to(mode: WriteMode, command: &str, fault: Fault, millis: i64) -> String {
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (patched, other) = (Review::at(1), Review::at(2));
    reviews
        .push_many(&product.id, &[patched.clone(), other.clone()])
        .await
        .unwrap();
    let date = bson::DateTime::from_millis(millis);
    let at = usize::from(millis < 2);
    let patch = || {
        reviews
            .patch(&product.id, &patched.id)
            .set(Review::DATE, date)
            .set(Review::AUTHOR, "edited".to_owned())
    };
    let first = point.once((mode, command, fault), patch()).await;
    let outcome = outcome(&first);
    let got = store.get(&product.id).await.unwrap().unwrap();
    if matches!(mode, WriteMode::Transactional) && first.is_err() {
        assert_eq!(
            got.recent_reviews[1], patched,
            "{mode:?} {command} {fault:?}: a failed transaction leaves the child as it was"
        );
    }
    if first.is_ok() {
        assert_eq!(
            got.recent_reviews[at].author, "edited",
            "{mode:?} {command} {fault:?}"
        );
    }
    patch().await.unwrap();
    let mut expected = patched.clone();
    expected.date = date;
    expected.author = "edited".into();
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(
        (&got.recent_reviews[at], got.total_reviews),
        (&expected, 2),
        "{mode:?} {command} {fault:?}: first call {outcome}"
    );
    assert_eq!(stored(&store, &product.id, &patched.id).await, (1, 1, 2));
    assert!(reviews.check(&product.id).await.unwrap().is_clean());
    format!("patch: {mode:?} {command} {fault:?}: {outcome}")
}

under_faults!(
    /// The child's `findAndModify`, then the view's recompute: its reads and its update.
    a_patch_under_each_fault_at_each_step_ends_patched_once, ["findAndModify", "find", "update"], patch_under);

under_faults!(
    /// The child's `findAndModify`, then the parent's update that re-ranks the view in place.
    a_raising_patch_under_each_fault_at_each_step_ends_patched_once,
    ["findAndModify", "update"],
    raising_patch_under
);

/// A move between two products under one fault at one step: after a retry (which finds the
/// child moved, `ChildNotFound`, when the first got through), the child is the other
/// product's, once, and each product counts its own. Ordered, a first call cut off after the
/// child moved leaves the old product's copy and count: the drift `reconcile` repairs, as the
/// consistency guide says; a transaction leaves nothing of a failed move.
async fn move_under(mode: WriteMode, command: &str, fault: Fault) -> String {
    let (store, point) = faulty(mode).await;
    let (from, to) = (Product::named("from"), Product::named("to"));
    store.insert(&from).await.unwrap();
    store.insert(&to).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let review = Review::at(1);
    reviews.push(&from.id, &review).await.unwrap();
    let first = point
        .once(
            (mode, command, fault),
            reviews.move_child(&from.id, &review.id, &to.id),
        )
        .await;
    let outcome = outcome(&first);
    let after_first = stored(&store, &from.id, &review.id).await;
    if matches!(mode, WriteMode::Transactional) && first.is_err() {
        assert_eq!(
            after_first,
            (1, 1, 1),
            "{mode:?} {command} {fault:?}: left as it was"
        );
    }
    match reviews.move_child(&from.id, &review.id, &to.id).await {
        Ok(()) | Err(Error::ChildNotFound { .. }) => {}
        Err(other) => panic!("{mode:?} {command} {fault:?}: the retry failed: {other:?}"),
    }
    if matches!(mode, WriteMode::Ordered) {
        for product in [&from.id, &to.id] {
            reviews.reconcile(product).await.unwrap();
        }
    }
    assert_eq!(
        (
            stored(&store, &from.id, &review.id).await,
            stored(&store, &to.id, &review.id).await
        ),
        ((1, 0, 0), (1, 1, 1)),
        "{mode:?} {command} {fault:?}: first call {outcome}, then {after_first:?}"
    );
    format!("move: {mode:?} {command} {fault:?}: {outcome}; then {after_first:?}")
}

under_faults!(
    a_move_under_each_fault_at_each_step_ends_under_the_new_parent,
    ["findAndModify", "update"],
    move_under
);

/// Without a transaction, a connection lost twice (the write, and the driver's one retry of
/// it): nobody knows whether the child was written, and the error says so in its type. A retry
/// of the same push ends with one copy, embedded once; counted once after a reconcile where the
/// parent update was the step lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_cut_off_twice_is_an_unknown_outcome_and_its_retry_ends_whole() {
    for command in ["insert", "update"] {
        let mode = WriteMode::Ordered;
        let (store, point) = faulty(mode).await;
        let product = Product::named("faults");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let review = Review::at(1);
        let mut data = Fault::ClosedConnection.data();
        data.insert("failCommands", vec![command]);
        data.insert("appName", point.app.as_str());
        point
            .configure(doc! { "mode": { "times": 2 }, "data": data })
            .await;
        let first = reviews.push(&product.id, &review).await;
        point.configure(doc! { "mode": "off" }).await;
        assert!(
            matches!(&first, Err(Error::OutcomeUnknown { .. })),
            "{command}: {first:?}"
        );
        assert!(first.as_ref().unwrap_err().is_outcome_unknown());
        // A parent update that never arrived left the child uncounted, and the push that
        // failed between its writes marked the parent for a rebuild as it gave its lease back:
        // the retry finds the child stored and rebuilds the parent, which counts it, with no
        // reconcile.
        reviews.push(&product.id, &review).await.unwrap();
        assert_eq!(
            stored(&store, &product.id, &review.id).await,
            (1, 1, 1),
            "{command}: after a retry, one copy, embedded once, counted once"
        );
    }
}

/// A commit the server refuses leaves the transaction open on the server (the driver counts it
/// committed, and will not abort it), holding every document it wrote until the server's
/// transaction lifetime ends it (20 s on the test kit's servers, 60 s by default). The library
/// ends it at once: another store's push to the same parent (another process's, as far as the
/// server can tell) is not held up behind it.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_commit_leaves_nothing_open_that_holds_its_parent() {
    let mode = WriteMode::Transactional;
    let (store, point) = faulty(mode).await;
    let product = Product::named("faults");
    store.insert(&product).await.unwrap();
    let review = Review::at(1);
    let refused = point
        .once(
            (mode, "commitTransaction", Fault::Fatal),
            store
                .children(Product::RECENT_REVIEWS)
                .push(&product.id, &review),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let other = Store::<Product>::new(store.database());
    let started = std::time::Instant::now();
    other
        .children(Product::RECENT_REVIEWS)
        .push(&product.id, &Review::at(2))
        .await
        .unwrap();
    // Behind a transaction left open, the push would wait for the server to reap it.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the next push waited {:?}",
        started.elapsed()
    );
    assert_eq!(
        stored(&store, &product.id, &review.id).await,
        (0, 0, 1),
        "the refused push left nothing, and the other was counted"
    );
}
