//! Round trips: the commands each operation sends, counted with the driver's command monitoring.
//!
//! Counts are deterministic where times are not, so they are asserted here; the benchmark
//! (`subset-bench`) prints the same counts next to its timings. Only commands an operation sends
//! are counted: the store's one-time `hello` (write-mode detection) is done before counting
//! starts, and the driver's own `hello`s (handshakes, server monitoring) are ignored by name.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use futures::TryStreamExt;
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, DateTime, Document};
use subset::{Child, PageRequest, Store, Subset, WriteMode};
use subset_testkit::{MongoServer, Topology};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reviews",
        keep = 10,
        sort = "date desc",
        count = "total_reviews",
        sum = "rating_total = rating"
    )]
    recent_reviews: Vec<Review>,
    #[serde(default)]
    total_reviews: i64,
    // A running sum rides in the count's `$inc`: every command count below holds with it.
    #[serde(default)]
    rating_total: i64,
}

impl Product {
    /// A product without reviews.
    fn empty() -> Product {
        Product {
            id: ObjectId::new(),
            recent_reviews: Vec::new(),
            total_reviews: 0,
            rating_total: 0,
        }
    }
}

/// An answer whose votes no view ranks, filters or sums by: a vote changes each copy in place.
#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Answer {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
    helpful: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "questions")]
struct Question {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "answers",
        keep = 5,
        sort = "date desc",
        count = "total_answers"
    )]
    latest: Vec<Answer>,
    #[serde(default)]
    total_answers: i64,
}

/// An answer whose votes are an `i32`: a copy re-ranked in place must hold them as the server's
/// `$inc` leaves them.
#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct RankedAnswer {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
    helpful: i32,
}

/// Answers on a view ranked by their votes: a vote that raises an answer re-ranks the
/// view in place.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "ranked_questions")]
struct RankedQuestion {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "ranked_answers",
        keep = 3,
        sort = "helpful desc, date desc",
        count = "total_answers"
    )]
    most_helpful: Vec<RankedAnswer>,
    #[serde(default)]
    total_answers: i64,
}

/// A long subset: at `keep = 32` and above a push tries the head first (`$position: 0`, no
/// `$sort`, guarded by a filter on the stored head); below, as for `Product`, it sends the
/// `$sort` update alone.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "threads")]
struct Thread {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "replies",
        keep = 32,
        sort = "date desc",
        count = "total_replies"
    )]
    recent_replies: Vec<Review>,
    #[serde(default)]
    total_replies: i64,
}

fn review(millis: i64) -> Review {
    Review {
        id: ObjectId::new(),
        rating: (millis % 5) as i32 + 1,
        date: DateTime::from_millis(millis),
    }
}

/// The names of the commands sent since the last [`Log::take`], by a client named `app` (for a
/// fail point to single it out).
#[derive(Clone)]
struct Log {
    commands: Arc<Mutex<Vec<String>>>,
    /// The number of statements of each `update` command, in order.
    updates: Arc<Mutex<Vec<usize>>>,
    /// The number of documents each `update` command names by `_id` (a statement by `$in`
    /// names each of its `_id`s), in order.
    targets: Arc<Mutex<Vec<usize>>>,
    app: String,
}

impl Log {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.commands.lock().unwrap())
    }
}

/// A store on a fresh database of `topology`'s shared server, through a client that logs the
/// name of every command it starts, and a product with 50 reviews. The write mode is detected
/// and the log emptied before it is returned.
async fn setup(topology: Topology) -> (Store<Product>, Product, Log) {
    let server = MongoServer::shared(topology)
        .await
        .expect("start the test mongod");
    let name = server
        .database()
        .await
        .expect("connect to the test mongod")
        .name()
        .to_owned();
    let log = Log {
        commands: Arc::default(),
        updates: Arc::default(),
        targets: Arc::default(),
        app: format!("round-trips-{}", ObjectId::new().to_hex()),
    };
    let mut options = ClientOptions::parse(server.uri()).await.unwrap();
    options.app_name = Some(log.app.clone());
    let sink = log.clone();
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            if !matches!(
                started.command_name.as_str(),
                "hello" | "isMaster" | "ismaster"
            ) {
                if started.command_name == "update" {
                    let statements = started.command.get_array("updates").ok();
                    let targets = statements.map_or(0, |u| u.iter().map(common::ids_named).sum());
                    sink.updates
                        .lock()
                        .unwrap()
                        .push(statements.map_or(0, Vec::len));
                    sink.targets.lock().unwrap().push(targets);
                }
                sink.commands.lock().unwrap().push(started.command_name);
            }
        }
    }));
    let db = mongodb::Client::with_options(options)
        .unwrap()
        .database(&name);
    let store = Store::<Product>::new(&db);
    store.mode().await.unwrap();
    store.ensure_indexes().await.unwrap();
    let product = Product::empty();
    store.insert(&product).await.unwrap();
    let reviews: Vec<Review> = (0..50).map(review).collect();
    store
        .children(Product::RECENT_REVIEWS)
        .push_many(&product.id, &reviews)
        .await
        .unwrap();
    log.take();
    (store, product, log)
}

/// A thread with 50 replies in the database of `store`, through the same logging client; the
/// log is emptied before it is returned.
async fn long_subset(store: &Store<Product>, log: &Log) -> (Store<Thread>, ObjectId) {
    let options = subset::StoreOptions::new().mode(store.mode().await.unwrap());
    let threads = Store::<Thread>::with_options(store.database(), options);
    threads.ensure_indexes().await.unwrap();
    let thread = Thread {
        id: ObjectId::new(),
        recent_replies: Vec::new(),
        total_replies: 0,
    };
    threads.insert(&thread).await.unwrap();
    let replies: Vec<Review> = (0..50).map(review).collect();
    threads
        .children(Thread::RECENT_REPLIES)
        .push_many(&thread.id, &replies)
        .await
        .unwrap();
    log.take();
    (threads, thread.id)
}

async fn reads_are_one_command(topology: Topology) {
    let (store, product, log) = setup(topology).await;
    let reviews = store.children(Product::RECENT_REVIEWS);

    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(got.recent_reviews.len(), 10);
    assert_eq!(log.take(), ["find"], "get");

    // A first page within `keep` comes from the embedded subset: one `find` on the parent.
    let first = reviews
        .page(&product.id, &PageRequest::first(10))
        .await
        .unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(log.take(), ["find"], "first page");

    // A later page is one keyset `find` on the child collection (limit size + 1, so the whole
    // result comes in the first batch and no `getMore` or `killCursors` follows).
    let next = first.next.expect("more than one page");
    let later = reviews
        .page(&product.id, &PageRequest::after(next, 20))
        .await
        .unwrap();
    assert_eq!(later.items.len(), 20);
    assert_eq!(log.take(), ["find"], "later page");

    // The last page of a walk adds one `find` for children whose sort key has another BSON
    // type, which no keyset comparison reaches (reported, not skipped).
    let mut request = PageRequest::after(later.next.expect("more pages"), 20);
    let last = loop {
        let page = reviews.page(&product.id, &request).await.unwrap();
        match page.next {
            Some(next) => {
                assert_eq!(log.take(), ["find"], "middle page");
                request = PageRequest::after(next, 20);
            }
            None => break page,
        }
    };
    assert!(!last.items.is_empty());
    assert_eq!(log.take(), ["find", "find"], "last page");
}

#[tokio::test]
async fn reads_are_one_command_on_a_replica_set() {
    reads_are_one_command(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn reads_are_one_command_on_a_standalone() {
    reads_are_one_command(Topology::Standalone).await;
}

#[tokio::test]
async fn push_on_a_standalone_is_lease_insert_then_update() {
    let (store, product, log) = setup(Topology::Standalone).await;
    // A started standalone is detected as such; `MONGODB_URI` may name a replica set, where the
    // ordered writes are forced instead.
    let store = match store.mode().await.unwrap() {
        WriteMode::Ordered => store,
        WriteMode::Transactional => Store::with_options(
            store.database(),
            subset::StoreOptions::new().mode(WriteMode::Ordered),
        ),
    };
    let reviews = store.children(Product::RECENT_REVIEWS);

    // Without a transaction, the writers of a parent take turns: the lease is taken first, and
    // given back by the parent update.
    reviews.push(&product.id, &review(1_000)).await.unwrap();
    assert_eq!(log.take(), ["findAndModify", "insert", "update"], "push");

    let batch: Vec<Review> = (2_000..2_100).map(review).collect();
    reviews.push_many(&product.id, &batch).await.unwrap();
    assert_eq!(
        log.take(),
        ["findAndModify", "insert", "update"],
        "push_many of 100"
    );

    // Older than the subset's head, at keep 10: the `$sort` update, as for any push.
    reviews.push(&product.id, &review(10)).await.unwrap();
    assert_eq!(
        log.take(),
        ["findAndModify", "insert", "update"],
        "push behind the head"
    );

    // At keep 32 a push into the head is one update (`$position: 0`); behind the head the
    // guarded update matches nothing, and the sorting one follows.
    let (threads, thread) = long_subset(&store, &log).await;
    let replies = threads.children(Thread::RECENT_REPLIES);
    replies.push(&thread, &review(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["findAndModify", "insert", "update"],
        "long push"
    );
    replies.push(&thread, &review(10)).await.unwrap();
    assert_eq!(
        log.take(),
        ["findAndModify", "insert", "update", "update"],
        "long push behind the head"
    );
    // A date equal to the head's: `_id` decides, so a newer `_id` goes to the head in one
    // update, and an older one behind it.
    replies.push(&thread, &review(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["findAndModify", "insert", "update"],
        "long push tying the head, after it by `_id`"
    );
    replies.push(&thread, &older_tie(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["findAndModify", "insert", "update", "update"],
        "long push tying the head, before it by `_id`"
    );
    common::assert_subset_true(&threads, Thread::RECENT_REPLIES, &thread.into()).await;
}

/// A review dated `millis` whose `_id` is older than any [`review`]'s.
fn older_tie(millis: i64) -> Review {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    let mut bytes = [0; 12];
    bytes[11] = NEXT.fetch_add(1, Ordering::Relaxed);
    Review {
        id: ObjectId::from_bytes(bytes),
        ..review(millis)
    }
}

impl common::ExpectedOrder<Review> for Thread {
    fn expected_order(field: &str, a: &Review, b: &Review) -> std::cmp::Ordering {
        assert_eq!(
            field, "recent_replies",
            "a subset of Thread with no known order"
        );
        // `date desc`, then `_id` desc.
        (b.date, b.id).cmp(&(a.date, a.id))
    }
}

/// Pushes to sixteen parents at once: the first runs alone, and the fifteen that come while it
/// is in flight go together: one update of their fifteen parents and one insert of their
/// fifteen children, in transactions with one commit (without, after one update that takes the
/// fifteen parents' leases). When
/// a parent of such a group is missing, each push is written alone, and only the one to the
/// missing parent fails.
async fn pushes_to_many_parents_share_their_writes(topology: Topology) {
    let (store, _, log) = setup(topology).await;
    let mode = store.mode().await.unwrap();
    // What a group of fifteen shares: the commit, or the insert.
    let shared = match mode {
        WriteMode::Transactional => "commitTransaction",
        WriteMode::Ordered => "insert",
    };
    let reviews = store.children(Product::RECENT_REVIEWS);
    // Pushes wait for the run in flight for 50 ms at most, then go alone: on a machine loaded
    // enough to hold the first run longer, they would. The grouping is asked of one of three
    // tries; every try must write each push exactly.
    let mut counts = Vec::new();
    let mut products = Vec::new();
    for attempt in 0..3 {
        products.clear();
        for _ in 0..16 {
            let product = Product::empty();
            store.insert(&product).await.unwrap();
            products.push(product.id);
        }
        log.take();
        log.updates.lock().unwrap().clear();

        let pushed: Vec<Review> = (0..16).map(|i| review(1_000 + 100 * attempt + i)).collect();
        let pushes = products
            .iter()
            .zip(&pushed)
            .map(|(p, r)| std::future::IntoFuture::into_future(reviews.push(p, r)));
        for result in futures::future::join_all(pushes).await {
            result.unwrap();
        }
        let commands = log.take();
        let count = |name: &str| commands.iter().filter(|c| *c == name).count();
        // Grouped, the first push's update and one for the fifteen others; in transactions
        // the same for the inserts, without them one update more, which takes the fifteen
        // leases (the first push takes its own).
        let grouped = count(shared) == 2;
        let (updates, leases) = match (mode, grouped) {
            (_, false) => (16, 16),
            (WriteMode::Transactional, true) => (2, 0),
            (WriteMode::Ordered, true) => (3, 1),
        };
        assert_eq!(count("update"), updates, "{mode:?}: {commands:?}");
        if (mode, grouped) == (WriteMode::Ordered, true) {
            // The first push's update, the one statement that takes the fifteen leases (the
            // server plans it once), and the fifteen parents' updates.
            let mut statements = std::mem::take(&mut *log.updates.lock().unwrap());
            statements.sort_unstable();
            assert_eq!(statements, [1, 1, 15], "{commands:?}");
        }
        match mode {
            WriteMode::Transactional => assert_eq!(count("insert"), updates, "{commands:?}"),
            WriteMode::Ordered => assert_eq!(count("findAndModify"), leases, "{commands:?}"),
        }
        for (product, review) in products.iter().zip(&pushed) {
            let stored = store.get(product).await.unwrap().unwrap();
            assert_eq!(stored.total_reviews, 1, "{mode:?}");
            assert_eq!(stored.rating_total, i64::from(review.rating), "{mode:?}");
            let embedded: Vec<ObjectId> = stored.recent_reviews.iter().map(|r| r.id).collect();
            assert_eq!(embedded, [review.id], "{mode:?}");
        }
        counts.push(count(shared));
        if count(shared) == 2 {
            break;
        }
    }
    assert_eq!(
        counts.last(),
        Some(&2),
        "{mode:?}: {shared} of each try: {counts:?}"
    );

    // A group with a parent that does not exist: each push goes alone, with its own result.
    let missing = ObjectId::new();
    let targets = [products[0], products[1], missing, products[2], products[3]];
    let second: Vec<Review> = (0..5).map(|i| review(2_000 + i)).collect();
    let pushes = targets
        .iter()
        .zip(&second)
        .map(|(p, r)| std::future::IntoFuture::into_future(reviews.push(p, r)));
    let results = futures::future::join_all(pushes).await;
    for (target, result) in targets.iter().zip(results) {
        match result {
            Err(subset::Error::ParentNotFound { .. }) if *target == missing => {}
            Ok(()) if *target != missing => {}
            other => panic!("{mode:?}: push to {target}: {other:?}"),
        }
    }
    for product in &products[..4] {
        let stored = store.get(product).await.unwrap().unwrap();
        assert_eq!(stored.total_reviews, 2, "{mode:?}");
        assert_eq!(stored.recent_reviews.len(), 2, "{mode:?}");
    }
    let left = store
        .database()
        .collection::<Document>("reviews")
        .count_documents(doc! { "product_id": missing })
        .await
        .unwrap();
    assert_eq!(
        left, 0,
        "{mode:?}: a child of the missing parent was stored"
    );

    // A group in which one push repeats a child already stored (a retry of an acknowledged
    // push): its insert fails for that child alone; each push then goes alone, and the
    // repeated child is counted once.
    let third: Vec<Review> = (0..4).map(|i| review(3_000 + i)).collect();
    let mut again = third.clone();
    again[2] = second[3].clone();
    let pushes = products[..4]
        .iter()
        .zip(&again)
        .map(|(p, r)| std::future::IntoFuture::into_future(reviews.push(p, r)));
    for result in futures::future::join_all(pushes).await {
        result.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    for (i, product) in products[..4].iter().enumerate() {
        let stored = store.get(product).await.unwrap().unwrap();
        let expected = if i == 2 { 2 } else { 3 };
        assert_eq!(stored.total_reviews, expected, "{mode:?}: product {i}");
        assert_eq!(stored.recent_reviews.len(), expected as usize, "{mode:?}");
    }

    // A group in which the server refuses one parent's update (a sum past `i64`): only that
    // push fails, and leaves nothing; the others are written.
    let parents = store.database().collection::<Document>("products");
    let full = doc! { "_id": products[1] };
    let set = doc! { "$set": { "rating_total": i64::MAX } };
    parents.update_one(full, set).await.unwrap();
    let fourth: Vec<Review> = (0..4).map(|i| review(4_000 + i)).collect();
    let pushes = products[..4]
        .iter()
        .zip(&fourth)
        .map(|(p, r)| std::future::IntoFuture::into_future(reviews.push(p, r)));
    let results = futures::future::join_all(pushes).await;
    for (i, result) in results.iter().enumerate() {
        match result {
            Err(subset::Error::NumberOverflow { field, .. }) if i == 1 => {
                assert_eq!(field, "rating_total", "{mode:?}");
            }
            Ok(()) if i != 1 => {}
            other => panic!("{mode:?}: push to product {i}: {other:?}"),
        }
    }
    for (i, product) in products[..4].iter().enumerate() {
        let stored = store.get(product).await.unwrap().unwrap();
        let expected = match i {
            1 | 2 => 3,
            _ => 4,
        };
        assert_eq!(stored.total_reviews, expected, "{mode:?}: product {i}");
        assert_eq!(stored.recent_reviews.len(), expected as usize, "{mode:?}");
        let newest = stored.recent_reviews[0].id;
        assert_eq!(newest == fourth[i].id, i != 1, "{mode:?}: product {i}");
    }
    let refused = store
        .database()
        .collection::<Document>("reviews")
        .count_documents(doc! { "_id": fourth[1].id })
        .await
        .unwrap();
    assert_eq!(refused, 0, "{mode:?}: the refused push left its child");
}

#[tokio::test]
async fn pushes_to_many_parents_share_a_transaction_on_a_replica_set() {
    pushes_to_many_parents_share_their_writes(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn pushes_to_many_parents_share_an_insert_on_a_standalone() {
    pushes_to_many_parents_share_their_writes(Topology::Standalone).await;
}

#[tokio::test]
async fn push_on_a_replica_set_is_one_transaction_of_three_commands() {
    let (store, product, log) = setup(Topology::ReplicaSet).await;
    // The test kit hands out a replica set or a sharded cluster for `Topology::ReplicaSet`, even
    // at `MONGODB_URI` (a standalone there is an error), so the store must detect transactions.
    assert_eq!(store.mode().await.unwrap(), WriteMode::Transactional);
    let reviews = store.children(Product::RECENT_REVIEWS);

    // The fewest a transaction allows: the two writes, then `commitTransaction`. Starting a
    // transaction sends nothing (the driver attaches `startTransaction` to the first write),
    // and the session is a client-side object whose server session is pooled, so there is no
    // `startSession` or `endSessions` per push. The update goes first so that a missing parent
    // aborts the transaction before the insert does any work.
    reviews.push(&product.id, &review(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "insert", "commitTransaction"],
        "push"
    );

    let batch: Vec<Review> = (2_000..2_100).map(review).collect();
    reviews.push_many(&product.id, &batch).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "insert", "commitTransaction"],
        "push_many of 100"
    );

    // Older than the subset's head, at keep 10: the `$sort` update, as for any push.
    reviews.push(&product.id, &review(10)).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "insert", "commitTransaction"],
        "push behind the head"
    );

    // Sixteen pushes to one parent at once: the first runs alone, the fifteen that arrive while
    // its transaction is in flight queue behind it and go together in the next one.
    let sixteen: Vec<Review> = (3_000..3_016).map(review).collect();
    let pushes = sixteen
        .iter()
        .map(|r| std::future::IntoFuture::into_future(reviews.push(&product.id, r)));
    for pushed in futures::future::join_all(pushes).await {
        pushed.unwrap();
    }
    let commands = log.take();
    let commits = commands
        .iter()
        .filter(|c| *c == "commitTransaction")
        .count();
    assert_eq!(commits, 2, "{commands:?}");
    let stored = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(stored.total_reviews, 50 + 1 + 100 + 1 + 16);
    let ratings = (0..50)
        .chain([1_000])
        .chain(2_000..2_100)
        .chain([10])
        .chain(3_000..3_016)
        .map(|millis| i64::from(review(millis).rating))
        .sum::<i64>();
    assert_eq!(stored.rating_total, ratings);
    let newest: Vec<ObjectId> = sixteen.iter().rev().take(10).map(|r| r.id).collect();
    let embedded: Vec<ObjectId> = stored.recent_reviews.iter().map(|r| r.id).collect();
    assert_eq!(embedded, newest);

    // At keep 32 a push into the head is one update (`$position: 0`); behind the head the
    // guarded update matches nothing, and the sorting one follows in the same transaction.
    let (threads, thread) = long_subset(&store, &log).await;
    let replies = threads.children(Thread::RECENT_REPLIES);
    replies.push(&thread, &review(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "insert", "commitTransaction"],
        "long push"
    );
    replies.push(&thread, &review(10)).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "update", "insert", "commitTransaction"],
        "long push behind the head"
    );
    let stored = threads.get(&thread).await.unwrap().unwrap();
    assert_eq!(stored.total_replies, 52);
    let dates: Vec<i64> = stored
        .recent_replies
        .iter()
        .map(|r| r.date.timestamp_millis())
        .collect();
    let expected: Vec<i64> = [1_000].into_iter().chain((18..50).rev()).take(32).collect();
    assert_eq!(dates, expected);
    // A date equal to the head's: `_id` decides, as without a transaction.
    assert_eq!(log.take(), ["find"], "the read above");
    replies.push(&thread, &review(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "insert", "commitTransaction"],
        "long push tying the head, after it by `_id`"
    );
    replies.push(&thread, &older_tie(1_000)).await.unwrap();
    assert_eq!(
        log.take(),
        ["update", "update", "insert", "commitTransaction"],
        "long push tying the head, before it by `_id`"
    );
    common::assert_subset_true(&threads, Thread::RECENT_REPLIES, &thread.into()).await;
}

/// A note on an item: a rating, a date, and an amount of money summed exactly as a
/// `Decimal128`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Note {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: DateTime,
    amount: subset::bson::Decimal128,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Note)]
struct NotePreview {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: DateTime,
}

/// The first model of items: the 5 latest notes, their count and the sum of their ratings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Subset)]
#[subset(collection = "items")]
struct Item5 {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "notes",
        key = "item_id",
        keep = 5,
        sort = "date desc",
        count = "total",
        sum = "rating_total = rating"
    )]
    latest: Vec<Note>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    rating_total: i64,
}

impl Item5 {
    /// An item without notes.
    fn empty() -> Item5 {
        Item5 {
            id: ObjectId::new(),
            latest: Vec::new(),
            total: 0,
            rating_total: 0,
        }
    }
}

/// The next model of items: the 10 latest notes, and a view added over the same notes,
/// previews of the 3 best rated with the sum of every note's amount.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Subset)]
#[subset(collection = "items")]
struct Item10 {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "notes",
        key = "item_id",
        keep = 10,
        sort = "date desc",
        count = "total",
        sum = "rating_total = rating"
    )]
    latest: Vec<Note>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    rating_total: i64,
    #[subset(
        child = "notes",
        key = "item_id",
        keep = 3,
        sort = "rating desc, date desc",
        sum = "amount_total = amount"
    )]
    best: Vec<NotePreview>,
    amount_total: subset::bson::Decimal128,
}

fn note(i: i64) -> Note {
    Note {
        id: ObjectId::new(),
        rating: (i * 7 % 5) as i32 + 1,
        date: DateTime::from_millis(1_000 * i),
        amount: format!("{i}.{:02}", i * 13 % 100).parse().unwrap(),
    }
}

/// `get` of `id` and its first page of 10 latest notes, each with the commands it sent.
async fn read_counted(
    store: &Store<Item10>,
    id: &ObjectId,
    log: &Log,
) -> ((Item10, Vec<String>), (subset::Page<Note>, Vec<String>)) {
    log.take();
    let got = store.get(id).await.unwrap().expect("the item");
    let get = log.take();
    let page = store
        .children(Item10::LATEST)
        .page(id, &PageRequest::first(10))
        .await
        .unwrap();
    ((got, get), (page, log.take()))
}

/// Asserts that `stale` and `built` (reads of one item) give the same answers.
fn same_answers(
    what: &str,
    stale: &(Item10, subset::Page<Note>),
    built: &(Item10, subset::Page<Note>),
) {
    assert_eq!(stale.0, built.0, "{what}: get");
    assert_eq!(stale.1.items, built.1.items, "{what}: first page");
    assert_eq!(stale.1.next, built.1.next, "{what}: the next page's cursor");
    assert_eq!(stale.1.previous, built.1.previous, "{what}");
}

/// Reads of a parent once it is built again, as [`read_counted`]: the first may still read
/// ahead (the reads before computed its views), each in one `aggregate` with the answers of
/// `stale`; within nine, both reads are one `find` again.
async fn read_built(
    store: &Store<Item10>,
    id: &ObjectId,
    log: &Log,
    stale: &(Item10, subset::Page<Note>),
) -> (Item10, subset::Page<Note>) {
    let one = |sent: &[String]| match sent {
        [name] if name == "find" => true,
        [name] if name == "aggregate" => false,
        other => panic!("one command: {other:?}"),
    };
    for _ in 0..9 {
        let ((got, get), (page, first)) = read_counted(store, id, log).await;
        let read = (got, page);
        same_answers("built again", stale, &read);
        if one(&get) && one(&first) {
            return read;
        }
    }
    panic!("still reading ahead after nine reads of a parent built again");
}

/// A parent whose views the reader cannot take as they are stored (built under an older
/// model, or left by an ordered writer that died between its writes) is read in two commands:
/// `get` the parent, then one `aggregate` of every such view's top, count and sums; its first
/// page the parent, then the child collection. Once such reads are most reads, each is one
/// `aggregate` of the parent that reads the same (`$lookup`). The answers are those of the
/// parent once rebuilt (or reconciled), which reads in one command again.
async fn reads_of_parents_not_built_here_are_two_commands(topology: Topology) {
    let (products, _, log) = setup(topology).await;
    let db = products.database();
    let old = Store::<Item5>::new(db);
    old.ensure_indexes().await.unwrap();
    let item = Item5::empty();
    old.insert(&item).await.unwrap();
    let notes: Vec<Note> = (1..=20).map(note).collect();
    old.children(Item5::LATEST)
        .push_many(&item.id, &notes)
        .await
        .unwrap();
    // No notes: a count and sums of nothing, an empty page.
    let empty = Item5 {
        id: ObjectId::new(),
        ..item.clone()
    };
    old.insert(&empty).await.unwrap();

    // A store of the new model, its registry cache cold: the parents are marked, so it reads
    // no registry.
    let new = Store::<Item10>::new(db);
    new.ensure_indexes().await.unwrap();
    new.mode().await.unwrap();
    let mut outdated = Vec::new();
    // The empty item's first page is its stored one: built with `keep = 5` and holding fewer,
    // it holds every child there is.
    for (id, page_commands) in [(item.id, 2), (empty.id, 1)] {
        let ((got, get), (page, first)) = read_counted(&new, &id, &log).await;
        assert_eq!(get, ["find", "aggregate"], "get of an outdated parent");
        assert_eq!(
            first.len(),
            page_commands,
            "first page of an outdated parent"
        );
        outdated.push((got, page));
    }
    // Not the views as stored: the 10 latest of 20, and the added view.
    let (got, page) = &outdated[0];
    assert_eq!(got.latest.len(), 10);
    assert_eq!(
        got.latest,
        notes.iter().rev().take(10).cloned().collect::<Vec<_>>()
    );
    assert_eq!(page.items, got.latest);
    assert_eq!((got.total, got.best.len()), (20, 3));
    assert_eq!(got.amount_total.to_string(), "219.30");
    assert_eq!(outdated[1].0.amount_total.to_string(), "0");
    // Read on, the item is soon read ahead: one command each, the same answers.
    let mut reads = 0;
    loop {
        let ((got, get), (page, first)) = read_counted(&new, &item.id, &log).await;
        same_answers("read on", &outdated[0], &(got, page));
        if get == ["aggregate"] {
            assert_eq!(first, ["aggregate"], "the first page read ahead too");
            break;
        }
        assert_eq!(get, ["find", "aggregate"]);
        reads += 1;
        assert!(reads < 4, "not read ahead after {reads} more reads");
    }

    let report = new.rebuild().await.unwrap();
    assert_eq!(report.progress.fixed, 2);
    for (id, stale) in [item.id, empty.id].iter().zip(&outdated) {
        read_built(&new, id, &log, stale).await;
    }

    // An ordered writer that died between its writes: its note is stored, the parent is not
    // updated, and its lease has expired. The empty item's writer died before its note.
    let newest = note(40);
    let mut stored = subset::bson_compat::to_document(&newest).unwrap();
    stored.insert("item_id", item.id);
    db.collection::<subset::bson::Document>("notes")
        .insert_one(stored)
        .await
        .unwrap();
    let expired = DateTime::from_millis(DateTime::now().timestamp_millis() - 60_000);
    let items = db.collection::<subset::bson::Document>("items");
    let mut abandoned = Vec::new();
    for id in [item.id, empty.id] {
        let lease = subset::bson::doc! { "o": ObjectId::new(), "u": expired };
        items
            .update_one(
                subset::bson::doc! { "_id": id },
                subset::bson::doc! { "$set": { "_subset.l": lease } },
            )
            .await
            .unwrap();
        let ((got, get), (page, first)) = read_counted(&new, &id, &log).await;
        assert_eq!(get, ["find", "aggregate"], "get of an abandoned parent");
        assert_eq!(first, ["find", "find"], "first page of an abandoned parent");
        abandoned.push((got, page));
    }
    let (got, page) = &abandoned[0];
    assert_eq!(got.latest.first(), Some(&newest));
    assert_eq!(page.items.first(), Some(&newest));
    assert_eq!(got.total, 21);
    assert!(abandoned[1].1.items.is_empty());

    // The next writer settles them: a reconcile finds what the dead one left (and, without
    // transactions, settles every view of a parent whose lease expired).
    for id in [item.id, empty.id] {
        let drift = new.children(Item10::LATEST).reconcile(&id).await.unwrap();
        assert_eq!(drift.fixed, id == item.id, "{drift:?}");
        new.children(Item10::BEST).reconcile(&id).await.unwrap();
        items
            .update_one(
                subset::bson::doc! { "_id": id },
                subset::bson::doc! { "$unset": { "_subset.l": "" } },
            )
            .await
            .unwrap();
    }
    for (id, stale) in [item.id, empty.id].iter().zip(&abandoned) {
        read_built(&new, id, &log, stale).await;
    }
}

/// A rebuild of 40 parents goes in two batches (of 32 and 8), each one read of the parents and
/// one `aggregate` of their children; in transactions, one update per parent and one commit
/// per batch; without, one lease per parent and one `update` command each to mark the batch
/// as built under none and to write it, whatever the number of parents.
async fn a_rebuild_reads_and_writes_parents_in_batches(topology: Topology) {
    let (products, _, log) = setup(topology).await;
    let db = products.database();
    let mode = products.mode().await.unwrap();
    let old = Store::<Item5>::new(db);
    old.ensure_indexes().await.unwrap();
    let mut items = Vec::new();
    for i in 0..40 {
        let item = Item5::empty();
        old.insert(&item).await.unwrap();
        let notes: Vec<Note> = (1..=i % 7 + 1).map(note).collect();
        old.children(Item5::LATEST)
            .push_many(&item.id, &notes)
            .await
            .unwrap();
        items.push((item.id, notes.len()));
    }
    let new = Store::<Item10>::new(db);
    new.mode().await.unwrap();
    log.take();
    let options = subset::repair::SweepOptions::default().concurrency(1);
    let started = std::time::Instant::now();
    let report = new.rebuild().options(options).await.unwrap();
    let took = started.elapsed();
    assert_eq!((report.progress.fixed, report.progress.failed), (40, 0));
    let sent = log.take();
    let mut counts = std::collections::BTreeMap::new();
    for name in &sent {
        *counts.entry(name.as_str()).or_insert(0) += 1;
    }
    // Around the batches, the same in both modes: the refusal's sample (`find`, the parent's
    // `find` and its children's count, an `aggregate`), the registry made current (`find`,
    // `update`), the two pages of the scan, and the unused definitions dropped (two `find`s
    // and an `update`).
    let (finds, updates, aggregates) = (7, 2, 1);
    let expected: std::collections::BTreeMap<&str, usize> = match mode {
        // Per batch: a `find` of its parents, an `aggregate` of their children, an `update`
        // per parent and a commit.
        WriteMode::Transactional => [
            ("find", finds + 2),
            ("aggregate", aggregates + 2),
            ("update", updates + 40),
            ("commitTransaction", 2),
        ]
        .into(),
        // Per batch: a lease per parent (a `findAndModify`), a `find` of the parents and an
        // `aggregate` of their keys before anything is written, one `update` marking them
        // as built under none, a `find` and an `aggregate` to rebuild them, one `update`
        // marking them as built here.
        _ => {
            // A lease held past its renewal period (500 ms; a slow run) is renewed with a
            // `findAndModify` of its own: those come on top of the 40 leases, at most one per
            // lease each period of the rebuild.
            let leases = counts.get("findAndModify").copied().unwrap_or(0);
            let renewals = 40 * (took.as_millis() as usize / 500 + 1);
            assert!((40..=40 + renewals).contains(&leases), "{took:?}: {sent:?}");
            [
                ("find", finds + 2 * 2),
                ("aggregate", aggregates + 2 * 2),
                ("update", updates + 2 * 2),
                ("findAndModify", leases),
            ]
            .into()
        }
    };
    assert_eq!(counts, expected, "{mode:?}: {sent:?}");
    for (id, held) in items {
        let got = new.get(&id).await.unwrap().unwrap();
        assert_eq!((got.latest.len(), got.total), (held, held as i64));
    }
}

#[tokio::test]
async fn a_rebuild_reads_and_writes_parents_in_batches_on_a_replica_set() {
    a_rebuild_reads_and_writes_parents_in_batches(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn a_rebuild_reads_and_writes_parents_in_batches_on_a_standalone() {
    a_rebuild_reads_and_writes_parents_in_batches(Topology::Standalone).await;
}

#[tokio::test]
async fn reads_of_parents_not_built_here_are_two_commands_on_a_replica_set() {
    reads_of_parents_not_built_here_are_two_commands(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn reads_of_parents_not_built_here_are_two_commands_on_a_standalone() {
    reads_of_parents_not_built_here_are_two_commands(Topology::Standalone).await;
}

/// Sixteen questions of one answer each, in `store`'s database and write mode: the store of
/// questions, and each question's `_id` with its answer's.
async fn sixteen_questions(store: &Store<Product>) -> (Store<Question>, Vec<(ObjectId, ObjectId)>) {
    let options = subset::StoreOptions::new().mode(store.mode().await.unwrap());
    let questions = Store::<Question>::with_options(store.database(), options);
    let asked = ask_sixteen(&questions).await;
    (questions, asked)
}

/// Sixteen questions of one answer each, through `questions`: each question's `_id` with its
/// answer's.
async fn ask_sixteen(questions: &Store<Question>) -> Vec<(ObjectId, ObjectId)> {
    questions.ensure_indexes().await.unwrap();
    let answers = questions.children(Question::LATEST);
    let mut asked = Vec::new();
    for i in 0..16 {
        let question = Question {
            id: ObjectId::new(),
            latest: Vec::new(),
            total_answers: 0,
        };
        questions.insert(&question).await.unwrap();
        let answer = Answer {
            id: ObjectId::new(),
            date: DateTime::from_millis(1_000 + i),
            helpful: 0,
        };
        answers.push(&question.id, &answer).await.unwrap();
        asked.push((question.id, answer.id));
    }
    asked
}

/// Another process's push of `pushed` to `target` through `field`, held between its writes
/// (its insert in a transaction, its parent update without one) for 600 ms, and under way for
/// 150 ms when this returns.
async fn held_push<P, C>(
    store: &Store<P>,
    field: subset::SubsetField<P, C>,
    target: ObjectId,
    pushed: C,
) -> tokio::task::JoinHandle<subset::Result<()>>
where
    P: Subset<Id = ObjectId> + Send + Sync + 'static,
    C: Child + Send + Sync + 'static,
{
    let app = format!("pusher-{}", ObjectId::new().to_hex());
    let pusher = crate::mutations::on_own_client(store, &app).await;
    let held = match store.mode().await.unwrap() {
        WriteMode::Transactional => "insert",
        WriteMode::Ordered => "update",
    };
    crate::mutations::hold_next_for(store, &app, held, Duration::from_millis(600)).await;
    let push = tokio::spawn(async move { pusher.children(field).push(&target, &pushed).await });
    tokio::time::sleep(Duration::from_millis(150)).await;
    push
}

/// Votes on sixteen questions at once while another process's push to one of them is held
/// between its writes (its insert in a transaction, its parent update without one), in both
/// modes: the group meets that question (a write conflict, or a lease it cannot take) and its
/// votes go alone, the one on the held question after the push. Every vote counts once, in
/// its answer and its copy, and the pushed answer is embedded with its count.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_votes_meets_another_process_push_held_on_one_of_its_parents() {
    let _turn = crate::FAIL_POINT.lock().await;
    for questions in crate::common::stores::<Question>().await {
        let mode = questions.mode().await.unwrap();
        let asked = ask_sixteen(&questions).await;
        let (target, _) = asked[5];
        let pushed = Answer {
            id: ObjectId::new(),
            date: DateTime::from_millis(5_000),
            helpful: 0,
        };
        let push = held_push(&questions, Question::LATEST, target, pushed.clone()).await;
        let answers = questions.children(Question::LATEST);
        // Without a transaction the pushed answer is stored already, its question not yet
        // written: the vote on that question is on it, and must wait for the push, or its copy
        // would be embedded as it was before the vote.
        let mut targets = asked.clone();
        if mode == WriteMode::Ordered {
            targets[5] = (target, pushed.id);
        }
        let voted = targets.iter().map(|(question, answer)| {
            let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        for (i, result) in futures::future::join_all(voted).await.iter().enumerate() {
            assert!(result.is_ok(), "{mode:?}: vote {i}: {result:?}");
        }
        push.await.unwrap().unwrap();
        crate::mutations::release(&questions).await;
        let stored = questions.database().collection::<Document>("answers");
        for &(question, answer) in &targets {
            let found = stored
                .find_one(doc! { "_id": answer })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(found.get_i64("helpful").ok(), Some(1), "{mode:?}");
            let got = questions.get(&question).await.unwrap().unwrap();
            let copy = got.latest.iter().find(|a| a.id == answer).unwrap();
            assert_eq!(copy.helpful, 1, "{mode:?}: the copy of {answer}");
            let expected = if question == target { 2 } else { 1 };
            assert_eq!(got.total_answers, expected, "{mode:?}");
            assert_eq!(got.latest.len() as i64, expected, "{mode:?}");
        }
    }
}

/// Votes on the answers of sixteen questions at once: the first runs alone, and the fifteen that
/// come while it is in flight go together. In transactions: one update of their answers, one of
/// their questions and one commit. Without: one update that takes every question's lease, one
/// `find` of their answers, one update of the answers and one of every question that gives its
/// lease back. A vote on an answer that does not exist fails alone, and every other vote counts
/// once.
async fn votes_on_many_parents_share_their_writes(topology: Topology) {
    let (store, _, log) = setup(topology).await;
    let mode = store.mode().await.unwrap();
    let (questions, asked) = sixteen_questions(&store).await;
    let answers = questions.children(Question::LATEST);
    let stored = store.database().collection::<Document>("answers");
    // Each answer's votes, stored and embedded.
    let votes = |question: ObjectId, answer: ObjectId| {
        let (questions, stored) = (questions.clone(), stored.clone());
        async move {
            let copy = questions.get(&question).await.unwrap().unwrap().latest[0].clone();
            assert_eq!(copy.id, answer);
            let found = stored.find_one(doc! { "_id": answer }).await.unwrap();
            (found.unwrap().get_i64("helpful").unwrap(), copy.helpful)
        }
    };
    // As for pushes, the grouping is asked of one of three tries; each must count every vote.
    let mut sent = Vec::new();
    let mut grouped_once = false;
    for attempt in 1..=3 {
        log.take();
        log.updates.lock().unwrap().clear();
        let voted = asked.iter().map(|(question, answer)| {
            let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        for result in futures::future::join_all(voted).await {
            result.unwrap();
        }
        let commands = log.take();
        let count = |name: &str| commands.iter().filter(|c| *c == name).count();
        for &(question, answer) in &asked {
            assert_eq!(votes(question, answer).await, (attempt, attempt));
        }
        // Grouped: in transactions two commits, the first vote's and the group's; without, the
        // first vote's lease, answer and question, then the group's four commands.
        let grouped = match mode {
            WriteMode::Transactional => count("commitTransaction") == 2,
            WriteMode::Ordered => commands.len() == 7,
        };
        sent.push(commands.len());
        if grouped {
            grouped_once = true;
            // The first vote's answer and question, then the group's; without transactions the
            // first vote's question, the group's leases, answers and questions.
            assert_eq!(count("update"), 4, "{mode:?}: {commands:?}");
            if mode == WriteMode::Ordered {
                assert_eq!(count("findAndModify"), 2, "{commands:?}");
                assert_eq!(count("find"), 1, "{commands:?}");
                // The first vote's question; the group's leases in one statement, its answers
                // in one (an equal patch), its fifteen questions.
                let mut statements = std::mem::take(&mut *log.updates.lock().unwrap());
                statements.sort_unstable();
                assert_eq!(statements, [1, 1, 1, 15], "{commands:?}");
            }
            break;
        }
    }
    assert!(grouped_once, "{mode:?}: commands of each try: {sent:?}");
    let tries = sent.len() as i64;

    let missing = ObjectId::new();
    let mut targets = asked[..5].to_vec();
    targets[2].1 = missing;
    let voted = targets.iter().map(|(question, answer)| {
        let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
        std::future::IntoFuture::into_future(vote)
    });
    let results = futures::future::join_all(voted).await;
    for (i, result) in results.iter().enumerate() {
        match result {
            Err(subset::Error::ChildNotFound { .. }) if i == 2 => {}
            Ok(()) if i != 2 => {}
            other => panic!("vote {i}: {other:?}"),
        }
    }
    for (i, &(question, answer)) in asked[..5].iter().enumerate() {
        let expected = if i == 2 { tries } else { tries + 1 };
        assert_eq!(
            votes(question, answer).await,
            (expected, expected),
            "{mode:?}: {i}"
        );
    }

    // A group in which one question has lost its view's field, so that its update cannot
    // apply in place: without transactions its answer goes back as it was and its vote goes
    // alone, which settles the question. Every vote counts once, in both modes.
    let parents = store.database().collection::<Document>("questions");
    let unset = doc! { "$unset": { "latest": "" } };
    parents
        .update_one(doc! { "_id": asked[1].0 }, unset)
        .await
        .unwrap();
    let voted = asked[..5].iter().map(|(question, answer)| {
        let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
        std::future::IntoFuture::into_future(vote)
    });
    for result in futures::future::join_all(voted).await {
        result.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    for (i, &(question, answer)) in asked[..5].iter().enumerate() {
        let expected = if i == 2 { tries + 1 } else { tries + 2 };
        assert_eq!(
            votes(question, answer).await,
            (expected, expected),
            "{mode:?}: {i}"
        );
    }

    // A group in which one vote would take its answer past `i64`: the group's update of the
    // answers matches one fewer, every answer goes back as it was, and each vote goes alone.
    // That one is refused; every other counts once. The group (an `update` of several
    // parents: the questions', or their leases') is asked of one of three tries.
    let full = asked[3].1;
    let max = doc! { "$set": { "helpful": i64::MAX } };
    stored.update_one(doc! { "_id": full }, max).await.unwrap();
    let mut grouped = false;
    for _ in 0..3 {
        let mut before = Vec::new();
        for &(_, answer) in &asked {
            let found = stored.find_one(doc! { "_id": answer }).await.unwrap();
            before.push(found.unwrap().get_i64("helpful").unwrap());
        }
        log.targets.lock().unwrap().clear();
        let voted = asked.iter().map(|(question, answer)| {
            let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        let results = futures::future::join_all(voted).await;
        for (i, (result, &(question, answer))) in results.iter().zip(&asked).enumerate() {
            match result {
                Err(subset::Error::InvalidPatch { field, .. }) if answer == full => {
                    assert_eq!(field, "helpful", "{mode:?}");
                }
                Ok(()) if answer != full => {
                    let expected = before[i] + 1;
                    let counted = votes(question, answer).await;
                    assert_eq!(counted, (expected, expected), "{mode:?}: {i}");
                }
                other => panic!("{mode:?}: vote {i}: {other:?}"),
            }
        }
        let found = stored.find_one(doc! { "_id": full }).await.unwrap();
        assert_eq!(found.unwrap().get_i64("helpful").unwrap(), i64::MAX);
        if log.targets.lock().unwrap().iter().any(|&n| n > 1) {
            grouped = true;
            break;
        }
    }
    assert!(grouped, "{mode:?}: no group in three tries");
}

#[tokio::test]
async fn votes_on_many_parents_share_a_transaction_on_a_replica_set() {
    votes_on_many_parents_share_their_writes(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn votes_on_many_parents_share_their_leases_on_a_standalone() {
    votes_on_many_parents_share_their_writes(Topology::Standalone).await;
}

/// Votes on sixteen questions at once without transactions, the group's update of its
/// questions cut off (the server closes the connection instead of running it): as after a lone
/// vote cut off there, each of the group's writers gets `OutcomeUnknown`, its answer counted
/// once, and its question is left for a rebuild (marked, or its lease left to lapse when the
/// give-back cannot land either). Reads then compute the questions from their answers, and the
/// next vote of each rebuilds it.
#[tokio::test]
async fn a_group_of_votes_cut_off_at_its_parents_update_leaves_them_to_rebuild_on_a_standalone() {
    let _turn = crate::FAIL_POINT.lock().await;
    let (store, _, log) = setup(Topology::Standalone).await;
    let (questions, asked) = sixteen_questions(&store).await;
    let answers = questions.children(Question::LATEST);
    let admin = store.database().client().database("admin");
    let stored = store.database().collection::<Document>("answers");
    let parents = store.database().collection::<Document>("questions");
    let helpful = |answer: ObjectId| {
        let stored = stored.clone();
        async move {
            let found = stored.find_one(doc! { "_id": answer }).await.unwrap();
            found.unwrap().get_i64("helpful").unwrap()
        }
    };
    // The first vote alone (its lease, its answer, its question: the first `update`), then the
    // group's: its leases, its answers, and its questions, the fourth `update`, cut off. Asked
    // of one of three tries, as the grouping above.
    let mut grouped = false;
    for _ in 0..3 {
        let mut before = Vec::new();
        for &(_, answer) in &asked {
            before.push(helpful(answer).await);
        }
        admin
            .run_command(doc! {
                "configureFailPoint": "failCommand",
                "mode": { "skip": 3 },
                "data": { "failCommands": ["update"], "appName": &log.app, "closeConnection": true },
            })
            .await
            .expect("failCommand (test commands on)");
        log.take();
        let voted = asked.iter().map(|(question, answer)| {
            let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        let results = futures::future::join_all(voted).await;
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        admin.run_command(off).await.unwrap();
        let commands = log.take();
        // (The cut makes the driver look for the server again, long enough for the leases'
        // renewals, each a `findAndModify`, to go out.)
        grouped = commands.iter().filter(|c| *c == "find").count() == 1
            && commands.iter().position(|c| c == "find") == Some(4);
        for (i, (result, &(_, answer))) in results.iter().zip(&asked).enumerate() {
            // Counted once whatever the answer: an unknown outcome is a vote that landed here.
            assert_eq!(helpful(answer).await, before[i] + 1, "vote {i}: {result:?}");
            match result {
                Ok(()) => {}
                Err(e) if e.is_outcome_unknown() => {}
                Err(e) => panic!("vote {i}: {e}"),
            }
        }
        if grouped {
            let unknown = results.iter().filter(|r| r.is_err()).count();
            assert_eq!(unknown, 15, "{commands:?}: {results:?}");
            break;
        }
    }
    assert!(grouped, "no group in three tries");
    // Once every lease left has lapsed (1.5 s after its last renewal, as the consistency guide
    // says), reads compute the questions from their answers.
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    for &(question, answer) in &asked {
        let copy = questions.get(&question).await.unwrap().unwrap().latest[0].helpful;
        assert_eq!(
            copy,
            helpful(answer).await,
            "{question}: computed from its answer"
        );
    }
    // One more vote each rebuilds every question left.
    for (question, answer) in &asked {
        let vote = answers.patch(question, answer).inc(Answer::HELPFUL, 1);
        vote.await.unwrap();
    }
    let left = doc! { "$or": [{ "_subset.d": "" }, { "_subset.l": { "$exists": true } }] };
    assert_eq!(parents.count_documents(left).await.unwrap(), 0);
    for &(question, answer) in &asked {
        let raw = parents.find_one(doc! { "_id": question }).await.unwrap();
        let raw = raw.unwrap();
        let copy = raw.get_array("latest").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(
            copy.get_i64("helpful").ok(),
            Some(helpful(answer).await),
            "{question}"
        );
    }
}

/// Pushes to sixteen parents at once in transactions, the group of fifteen meeting a write
/// conflict on one of its parents (another process's transaction, held open): the group is
/// tried again as a group, three attempts in all, where splitting at once would cost each push
/// a commit of its own. Then each push goes alone, and
/// the one to the held parent waits its turn behind the other transaction; every push is
/// written exactly once.
#[tokio::test]
async fn a_group_that_meets_a_write_conflict_is_tried_again_as_a_group() {
    let (store, _, log) = setup(Topology::ReplicaSet).await;
    assert_eq!(store.mode().await.unwrap(), WriteMode::Transactional);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let parents = store.database().collection::<Document>("products");
    let updates = || std::mem::take(&mut *log.updates.lock().unwrap());
    // Riders wait for the run in flight for 50 ms at most, then go alone: on a machine loaded
    // enough, they would. The grouping is asked of one of three tries; every try must write
    // each push exactly.
    let mut tries = Vec::new();
    for attempt in 0..3 {
        let mut products = Vec::new();
        for _ in 0..16 {
            let product = Product::empty();
            store.insert(&product).await.unwrap();
            products.push(product.id);
        }
        let held = products[5];
        let mut other = store.database().client().start_session().await.unwrap();
        other.start_transaction().await.unwrap();
        let touch = doc! { "$set": { "touched": true } };
        parents
            .update_one(doc! { "_id": held }, touch)
            .session(&mut other)
            .await
            .unwrap();
        log.take();
        updates();

        let pushed: Vec<Review> = (0..16).map(|i| review(5_000 + 100 * attempt + i)).collect();
        let pushes = products
            .iter()
            .zip(&pushed)
            .map(|(p, r)| std::future::IntoFuture::into_future(reviews.push(p, r)));
        let release = async {
            // Once the pushes to the other parents are written (or after about 30 s, when one of
            // them failed: the results below say which), the other transaction ends, and the
            // push to its parent goes through.
            let others: Vec<&ObjectId> = products.iter().filter(|p| **p != held).collect();
            for _ in 0..2_400 {
                let mut written = 0;
                for product in &others {
                    written += store.get(product).await.unwrap().unwrap().total_reviews;
                }
                if written == others.len() as i64 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other.abort_transaction().await.unwrap();
        };
        let (results, ()) = futures::future::join(futures::future::join_all(pushes), release).await;
        for result in results {
            result.unwrap();
        }
        let sizes = updates();
        for (product, review) in products.iter().zip(&pushed) {
            let stored = store.get(product).await.unwrap().unwrap();
            assert_eq!(stored.total_reviews, 1);
            assert_eq!(stored.rating_total, i64::from(review.rating));
            let embedded: Vec<ObjectId> = stored.recent_reviews.iter().map(|r| r.id).collect();
            assert_eq!(embedded, [review.id]);
        }
        let groups = sizes.iter().filter(|n| **n == 15).count();
        tries.push(groups);
        if groups > 0 {
            // The group's update, three times, each ending in the conflict; then each push's.
            assert_eq!(groups, 3, "{sizes:?}");
            assert!(sizes.iter().all(|n| *n == 1 || *n == 15), "{sizes:?}");
            break;
        }
    }
    assert_eq!(
        tries.last(),
        Some(&3),
        "group updates of each try: {tries:?}"
    );
}

/// Votes on a view ranked by votes: a vote raises its answer, so no other answer can enter or
/// leave the view, and the view is re-ranked in place by the parent update (`$sortArray`)
/// without reading the top from the answers. A view that holds neither the voted answer nor
/// all it can (a copy removed behind the store's back) is recomputed instead.
async fn votes_on_a_ranked_view_re_rank_it_in_place(topology: Topology) {
    let (store, _, log) = setup(topology).await;
    let mode = store.mode().await.unwrap();
    let options = subset::StoreOptions::new().mode(mode);
    let questions = Store::<RankedQuestion>::with_options(store.database(), options);
    questions.ensure_indexes().await.unwrap();
    let question = RankedQuestion {
        id: ObjectId::new(),
        most_helpful: Vec::new(),
        total_answers: 0,
    };
    questions.insert(&question).await.unwrap();
    let answers: Vec<RankedAnswer> = (0..6)
        .map(|i| RankedAnswer {
            id: ObjectId::new(),
            date: DateTime::from_millis(1_000 * i64::from(i)),
            helpful: i,
        })
        .collect();
    let ranked = questions.children(RankedQuestion::MOST_HELPFUL);
    ranked.push_many(&question.id, &answers).await.unwrap();
    let stored = store.database().collection::<Document>("ranked_answers");
    // The view as the answers make it, and as the question holds it.
    let view = || async {
        let sort = doc! { "helpful": -1, "date": -1, "_id": -1 };
        let top = stored.find(doc! {}).sort(sort).limit(3);
        let top: Vec<Document> = top.await.unwrap().try_collect().await.unwrap();
        let computed: Vec<(ObjectId, i32)> = top
            .iter()
            .map(|d| {
                (
                    d.get_object_id("_id").unwrap(),
                    d.get_i32("helpful").unwrap(),
                )
            })
            .collect();
        let held = questions.get(&question.id).await.unwrap().unwrap();
        let held: Vec<(ObjectId, i32)> = held
            .most_helpful
            .iter()
            .map(|a| (a.id, a.helpful))
            .collect();
        let drift = ranked.check(&question.id).await.unwrap();
        assert!(drift.is_clean(), "{drift:?}");
        (held, computed)
    };
    let in_place: &[&str] = match mode {
        WriteMode::Transactional => &["findAndModify", "update", "commitTransaction"],
        // The lease, the answer, then the question, which gives the lease back.
        WriteMode::Ordered => &["findAndModify", "findAndModify", "update"],
    };
    log.take();
    // An embedded answer rising within the view, to its head, then one from outside entering
    // it, then one from outside that stays out.
    for (i, by) in [(4, 1), (4, 2), (0, 10), (1, 1)] {
        log.take();
        ranked
            .patch(&question.id, &answers[i].id)
            .inc(RankedAnswer::HELPFUL, by)
            .await
            .unwrap();
        assert_eq!(
            log.take(),
            in_place,
            "{mode:?}: a vote of {by} on answer {i}"
        );
        let (held, computed) = view().await;
        assert_eq!(
            held, computed,
            "{mode:?}: after a vote of {by} on answer {i}"
        );
    }
    let held: Vec<ObjectId> = view().await.0.iter().map(|(id, _)| *id).collect();
    assert_eq!(held, [answers[0].id, answers[4].id, answers[5].id]);

    // Votes on every answer at once: the first alone, the others, queued behind it, in one
    // run that reads its answers in one `find`, changes them in one `update` and re-ranks the
    // view in one more. Asked of one of three tries, as for the groups above.
    let together: &[&str] = match mode {
        WriteMode::Transactional => &["find", "update", "update", "commitTransaction"],
        WriteMode::Ordered => &["findAndModify", "find", "update", "update"],
    };
    let expected: Vec<&str> = in_place.iter().chain(together).copied().collect();
    let mut tries = Vec::new();
    for _ in 0..3 {
        log.take();
        let votes = answers.iter().map(|a| {
            let vote = ranked
                .patch(&question.id, &a.id)
                .inc(RankedAnswer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        for voted in futures::future::join_all(votes).await {
            voted.unwrap();
        }
        let commands = log.take();
        let (held, computed) = view().await;
        assert_eq!(held, computed, "{mode:?}: after votes on every answer");
        if commands == expected {
            break;
        }
        tries.push(commands);
    }
    assert!(tries.len() < 3, "{mode:?}: {tries:?}");

    // The head's copy removed behind the store's back: the view holds 2 of 3, and not the
    // answer voted on, so re-ranking it would be wrong. The update misses, and the view is
    // recomputed from the answers.
    questions
        .database()
        .collection::<Document>("ranked_questions")
        .update_one(
            doc! { "_id": question.id },
            doc! { "$pull": { "most_helpful": { "_id": answers[0].id } } },
        )
        .await
        .unwrap();
    log.take();
    ranked
        .patch(&question.id, &answers[2].id)
        .inc(RankedAnswer::HELPFUL, 1)
        .await
        .unwrap();
    let commands = log.take();
    assert!(commands.len() > in_place.len(), "{mode:?}: {commands:?}");
    let (held, computed) = view().await;
    assert_eq!(held, computed, "{mode:?}: after the recompute");
    assert_eq!(held[0].0, answers[0].id);
    let stored_total = questions
        .get(&question.id)
        .await
        .unwrap()
        .unwrap()
        .total_answers;
    assert_eq!(stored_total, 6);
}

#[tokio::test]
async fn votes_on_a_ranked_view_re_rank_it_in_place_on_a_replica_set() {
    votes_on_a_ranked_view_re_rank_it_in_place(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn votes_on_a_ranked_view_re_rank_it_in_place_on_a_standalone() {
    votes_on_a_ranked_view_re_rank_it_in_place(Topology::Standalone).await;
}

/// Votes on sixteen questions ranked by votes at once: they ride in groups, as votes on a view
/// ranked by date do, each question's view re-ranked in place by the group's update of the
/// questions, from its answers read in one `find`. A vote taken back (a decrement, which may
/// let an answer the view does not hold enter it) goes alone, and is recomputed. Every view
/// ends as its answers make it, in both modes.
async fn ranked_votes_on_many_parents_share_their_writes(topology: Topology) {
    let (store, _, log) = setup(topology).await;
    let mode = store.mode().await.unwrap();
    let options = subset::StoreOptions::new().mode(mode);
    let questions = Store::<RankedQuestion>::with_options(store.database(), options);
    questions.ensure_indexes().await.unwrap();
    let ranked = questions.children(RankedQuestion::MOST_HELPFUL);
    let mut asked = Vec::new();
    for q in 0..16 {
        let question = RankedQuestion {
            id: ObjectId::new(),
            most_helpful: Vec::new(),
            total_answers: 0,
        };
        questions.insert(&question).await.unwrap();
        let answers: Vec<RankedAnswer> = (0..4)
            .map(|i| RankedAnswer {
                id: ObjectId::new(),
                date: DateTime::from_millis(1_000 * q + i64::from(i)),
                helpful: i,
            })
            .collect();
        ranked.push_many(&question.id, &answers).await.unwrap();
        asked.push((question.id, answers));
    }
    // Every question's view as its answers make it.
    let exact = || async {
        for (question, _) in &asked {
            let drift = ranked.check(question).await.unwrap();
            assert!(drift.is_clean(), "{mode:?}: {drift:?}");
        }
    };
    // The answer each view leaves out rises into it over three votes; the grouping is asked of
    // one of the three.
    let mut sent = Vec::new();
    for _ in 0..3 {
        log.take();
        let votes = asked.iter().map(|(question, answers)| {
            let vote = ranked
                .patch(question, &answers[0].id)
                .inc(RankedAnswer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        for result in futures::future::join_all(votes).await {
            result.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
        let commands = log.take();
        exact().await;
        let count = |name: &str| commands.iter().filter(|c| *c == name).count();
        // The first vote alone, then the group: in transactions two commits; without, the
        // first vote's lease, answer and question, then the group's leases, `find`, answers
        // and questions.
        let grouped = match mode {
            WriteMode::Transactional => count("commitTransaction") == 2 && count("find") == 1,
            WriteMode::Ordered => commands.len() == 7 && count("find") == 1,
        };
        sent.push(commands);
        if grouped {
            break;
        }
    }
    assert!(sent.len() < 3 || sent[2].len() == 7, "{mode:?}: {sent:?}");
    let held = questions.get(&asked[0].0).await.unwrap().unwrap();
    let top: Vec<ObjectId> = held.most_helpful.iter().map(|a| a.id).collect();
    let rounds = sent.len() as i32;
    assert_eq!(
        held.most_helpful
            .iter()
            .find(|a| a.id == asked[0].1[0].id)
            .map(|a| a.helpful),
        (rounds >= 2).then_some(rounds),
        "{mode:?}: {top:?}"
    );

    // One question's votes taken back, on an answer its view holds, which leaves it: that vote
    // goes alone, and its view is recomputed, the answer it left out entering it; the others'
    // go as before. Every vote counts once.
    log.take();
    let votes = asked.iter().enumerate().map(|(i, (question, answers))| {
        let by = if i == 5 { -3 } else { 1 };
        let vote = ranked
            .patch(question, &answers[3].id)
            .inc(RankedAnswer::HELPFUL, by);
        std::future::IntoFuture::into_future(vote)
    });
    for result in futures::future::join_all(votes).await {
        result.unwrap_or_else(|e| panic!("{mode:?}: {e}"));
    }
    exact().await;
    let stored = store.database().collection::<Document>("ranked_answers");
    for (i, (_, answers)) in asked.iter().enumerate() {
        let found = stored
            .find_one(doc! { "_id": answers[3].id })
            .await
            .unwrap();
        let expected = if i == 5 { 0 } else { 4 };
        assert_eq!(
            found.unwrap().get_i32("helpful").unwrap(),
            expected,
            "{mode:?}: {i}"
        );
    }
}

#[tokio::test]
async fn ranked_votes_on_many_parents_share_a_transaction_on_a_replica_set() {
    ranked_votes_on_many_parents_share_their_writes(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn ranked_votes_on_many_parents_share_their_leases_on_a_standalone() {
    ranked_votes_on_many_parents_share_their_writes(Topology::Standalone).await;
}

/// Two views of the same answers: the latest and the most helpful.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "two_view_questions")]
struct TwoViews {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "two_view_answers", keep = 3, sort = "date desc")]
    latest: Vec<RankedAnswer>,
    #[subset(child = "two_view_answers", keep = 3, sort = "helpful desc, date desc")]
    most_helpful: Vec<RankedAnswer>,
}

/// A vote that re-ranks one view and changes a copy in the other is one parent update: the
/// view ranked by votes re-ranked, the other's copy replaced, both in one pipeline.
async fn a_vote_seen_by_two_views_is_one_parent_update(topology: Topology) {
    let (store, _, log) = setup(topology).await;
    let mode = store.mode().await.unwrap();
    let options = subset::StoreOptions::new().mode(mode);
    let questions = Store::<TwoViews>::with_options(store.database(), options);
    questions.ensure_indexes().await.unwrap();
    let question = TwoViews {
        id: ObjectId::new(),
        latest: Vec::new(),
        most_helpful: Vec::new(),
    };
    questions.insert(&question).await.unwrap();
    let answers: Vec<RankedAnswer> = (0..5)
        .map(|i| RankedAnswer {
            id: ObjectId::new(),
            date: DateTime::from_millis(1_000 * i64::from(i)),
            helpful: i,
        })
        .collect();
    let latest = questions.children(TwoViews::LATEST);
    latest.push_many(&question.id, &answers).await.unwrap();
    let one_update: &[&str] = match mode {
        WriteMode::Transactional => &["findAndModify", "update", "commitTransaction"],
        WriteMode::Ordered => &["findAndModify", "findAndModify", "update"],
    };
    // The newest answer, in both views; then the oldest, in neither, entering the ranked one.
    for (i, by) in [(4, 1), (0, 10)] {
        log.take();
        latest
            .patch(&question.id, &answers[i].id)
            .inc(RankedAnswer::HELPFUL, by)
            .await
            .unwrap();
        assert_eq!(log.take(), one_update, "{mode:?}: a vote on answer {i}");
        for view in [TwoViews::LATEST, TwoViews::MOST_HELPFUL] {
            let drift = questions.children(view).check(&question.id).await.unwrap();
            assert!(drift.is_clean(), "{mode:?}: {drift:?}");
        }
    }
    let held = questions.get(&question.id).await.unwrap().unwrap();
    let ranked: Vec<(ObjectId, i32)> = held
        .most_helpful
        .iter()
        .map(|a| (a.id, a.helpful))
        .collect();
    assert_eq!(
        ranked,
        [(answers[0].id, 10), (answers[4].id, 5), (answers[3].id, 3)]
    );
    assert_eq!(held.latest[0].helpful, 5, "{mode:?}");
}

#[tokio::test]
async fn a_vote_seen_by_two_views_is_one_parent_update_on_a_replica_set() {
    a_vote_seen_by_two_views_is_one_parent_update(Topology::ReplicaSet).await;
}

#[tokio::test]
async fn a_vote_seen_by_two_views_is_one_parent_update_on_a_standalone() {
    a_vote_seen_by_two_views_is_one_parent_update(Topology::Standalone).await;
}

/// Ranked votes on sixteen questions at once while another process's push to one of them is
/// held between its writes, in both modes, as for votes on a view by date: the group meets that
/// question and its vote goes alone (without a transaction on the pushed answer, stored but
/// not yet embedded). Every vote counts once, and every view is as its answers make it.
#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_ranked_votes_meets_another_process_push_held_on_one_of_its_parents() {
    let _turn = crate::FAIL_POINT.lock().await;
    for questions in crate::common::stores::<RankedQuestion>().await {
        let mode = questions.mode().await.unwrap();
        questions.ensure_indexes().await.unwrap();
        let ranked = questions.children(RankedQuestion::MOST_HELPFUL);
        let mut asked = Vec::new();
        for i in 0..16 {
            let question = RankedQuestion {
                id: ObjectId::new(),
                most_helpful: Vec::new(),
                total_answers: 0,
            };
            questions.insert(&question).await.unwrap();
            // A full view: a copy it does not hold is not a sign of a push in flight.
            let answers: Vec<RankedAnswer> = (0..3)
                .map(|k| RankedAnswer {
                    id: ObjectId::new(),
                    date: DateTime::from_millis(1_000 + 10 * i + k),
                    helpful: 0,
                })
                .collect();
            ranked.push_many(&question.id, &answers).await.unwrap();
            asked.push((question.id, answers[0].id));
        }
        let (target, _) = asked[5];
        let pushed = RankedAnswer {
            id: ObjectId::new(),
            date: DateTime::from_millis(5_000),
            helpful: 0,
        };
        let field = RankedQuestion::MOST_HELPFUL;
        let push = held_push(&questions, field, target, pushed.clone()).await;
        let mut targets = asked.clone();
        if mode == WriteMode::Ordered {
            targets[5] = (target, pushed.id);
        }
        let voted = targets.iter().map(|(question, answer)| {
            let vote = ranked.patch(question, answer).inc(RankedAnswer::HELPFUL, 1);
            std::future::IntoFuture::into_future(vote)
        });
        for (i, result) in futures::future::join_all(voted).await.iter().enumerate() {
            assert!(result.is_ok(), "{mode:?}: vote {i}: {result:?}");
        }
        push.await.unwrap().unwrap();
        crate::mutations::release(&questions).await;
        let stored = questions
            .database()
            .collection::<Document>("ranked_answers");
        for &(question, answer) in &targets {
            let found = stored.find_one(doc! { "_id": answer }).await.unwrap();
            assert_eq!(found.unwrap().get_i32("helpful").ok(), Some(1), "{mode:?}");
            let drift = ranked.check(&question).await.unwrap();
            assert!(drift.is_clean(), "{mode:?}: {drift:?}");
            let got = questions.get(&question).await.unwrap().unwrap();
            assert_eq!(
                got.most_helpful[0].id, answer,
                "{mode:?}: the voted answer first"
            );
            assert_eq!(got.most_helpful[0].helpful, 1, "{mode:?}");
            let expected = if question == target { 4 } else { 3 };
            assert_eq!(got.total_answers, expected, "{mode:?}");
        }
    }
}
