//! Models and helpers shared by the behaviour tests.
#![allow(dead_code)]

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Child, Children, Store, Subset, SubsetField, WriteMode};
use subset_testkit::{MongoServer, Topology};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
pub struct Review {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub author: String,
    pub rating: i32,
    pub date: DateTime,
}

impl Review {
    pub fn at(millis: i64) -> Review {
        Review {
            id: ObjectId::new(),
            author: format!("author {millis}"),
            rating: (millis % 5) as i32 + 1,
            date: DateTime::from_millis(millis),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "products")]
pub struct Product {
    #[serde(rename = "_id")]
    pub id: ObjectId,
    pub name: String,
    #[subset(
        child = "reviews",
        keep = 5,
        sort = "date desc",
        count = "total_reviews"
    )]
    pub recent_reviews: Vec<Review>,
    #[serde(default)]
    pub total_reviews: i64,
}

impl Product {
    pub fn named(name: &str) -> Product {
        Product {
            id: ObjectId::new(),
            name: name.to_owned(),
            recent_reviews: Vec::new(),
            total_reviews: 0,
        }
    }
}

/// A fresh database on the shared single-node replica set.
pub async fn replica_db() -> mongodb::Database {
    MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod")
        .database()
        .await
        .expect("connect to the test mongod")
}

/// Every command a client started: its name, its target collection and the command.
pub type CommandLog = std::sync::Arc<std::sync::Mutex<Vec<(String, String, Document)>>>;

/// A fresh database on the shared single-node replica set, on a client of its own that records
/// every command it starts.
pub async fn recorded_replica_db() -> (mongodb::Database, CommandLog) {
    let server = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod");
    let name = server.database().await.unwrap().name().to_owned();
    let mut options = mongodb::options::ClientOptions::parse(server.uri())
        .await
        .unwrap();
    let log = record_commands(&mut options);
    let client = mongodb::Client::with_options(options).unwrap();
    (client.database(&name), log)
}

/// Makes a client built from `options` record every command it starts.
pub fn record_commands(options: &mut mongodb::options::ClientOptions) -> CommandLog {
    use mongodb::event::{command::CommandEvent, EventHandler};
    let log = CommandLog::default();
    let sink = log.clone();
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            let target = started
                .command
                .get_str(&started.command_name)
                .unwrap_or_default()
                .to_owned();
            sink.lock()
                .unwrap()
                .push((started.command_name.clone(), target, started.command));
        }
    }));
    log
}

/// A fresh database on the shared standalone server.
pub async fn standalone_db() -> mongodb::Database {
    MongoServer::shared(Topology::Standalone)
        .await
        .expect("start the test mongod")
        .database()
        .await
        .expect("connect to the test mongod")
}

/// Both write paths on the replica set: transactions (detected) and ordered writes (forced).
pub async fn stores<P: Subset>() -> Vec<Store<P>> {
    vec![
        Store::new(&replica_db().await),
        Store::with_options(
            &replica_db().await,
            subset::StoreOptions::new().mode(WriteMode::Ordered),
        ),
    ]
}

/// The ids of the embedded subset, in stored order, read raw from the parent document.
pub async fn embedded_ids<P: Subset>(store: &Store<P>, field: &str, id: &Bson) -> Vec<Bson> {
    let parent = store
        .database()
        .collection::<Document>(P::COLLECTION)
        .find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .expect("parent exists");
    parent
        .get_array(field)
        .unwrap()
        .iter()
        .map(|c| c.as_document().unwrap().get("_id").unwrap().clone())
        .collect()
}

/// The order of a test model's subsets, written out by hand from their `sort` attributes (with
/// `_id` last, in the direction of the last key), so that checks never reuse the sort
/// specification under test.
pub trait ExpectedOrder<C> {
    /// How `a` and `b` are ordered in the subset `field` (its BSON name).
    fn expected_order(field: &str, a: &C, b: &C) -> std::cmp::Ordering;
}

impl ExpectedOrder<Review> for Product {
    fn expected_order(field: &str, a: &Review, b: &Review) -> std::cmp::Ordering {
        assert_eq!(
            field, "recent_reviews",
            "a subset of Product with no known order"
        );
        // `date desc`, then `_id` desc.
        (b.date, b.id).cmp(&(a.date, a.id))
    }
}

/// The ids of every child of `parent` in the child collection, in the subset's order, sorted
/// here by [`ExpectedOrder`] rather than by the server with the spec's sort.
pub async fn collection_ids<P: Subset + ExpectedOrder<C>, C: Child>(
    handle: &Children<'_, P, C>,
    store: &Store<P>,
    id: &Bson,
) -> Vec<Bson> {
    let spec = handle.spec();
    let mut children: Vec<(C, Bson)> = store
        .database()
        .collection::<Document>(spec.child_collection)
        .find(doc! { spec.key: id.clone() })
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .map(|d| {
            let child_id = d.get("_id").unwrap().clone();
            let child: C = bson_compat::from_document(d).expect("a child of the test model");
            (child, child_id)
        })
        .collect();
    children.sort_by(|(a, _), (b, _)| P::expected_order(spec.field, a, b));
    children.into_iter().map(|(_, child_id)| child_id).collect()
}

/// The invariant of the pattern: the embedded subset is exactly the first `keep` of the child
/// collection in order, and the count (if kept) equals the collection's count.
pub async fn assert_subset_true<P: Subset + ExpectedOrder<C>, C: Child>(
    store: &Store<P>,
    field: SubsetField<P, C>,
    id: &Bson,
) {
    let handle = store.children(field);
    let spec = handle.spec();
    let all = collection_ids(&handle, store, id).await;
    let embedded = embedded_ids(store, spec.field, id).await;
    let keep = spec.keep as usize;
    assert_eq!(
        embedded,
        all[..all.len().min(keep)],
        "embedded subset of {id}"
    );
    if let Some(count) = spec.count {
        let parent = store
            .database()
            .collection::<Document>(P::COLLECTION)
            .find_one(doc! { "_id": id.clone() })
            .await
            .unwrap()
            .unwrap();
        let n = match parent.get(count) {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            other => panic!("count field {count} is {other:?}"),
        };
        assert_eq!(n, all.len() as i64, "count of {id}");
    }
}

/// What writers under faults saw: every acknowledged push and every error, with times.
#[derive(Debug, Default)]
pub struct WriteLog {
    pub acks: std::sync::Mutex<Vec<Ack>>,
    pub errors: std::sync::Mutex<Vec<WriteError>>,
}

/// A push the server acknowledged.
#[derive(Debug, Clone)]
pub struct Ack {
    pub writer: usize,
    pub parent: ObjectId,
    pub child: ObjectId,
    pub at: std::time::Instant,
}

/// A push that failed (and was retried).
#[derive(Debug, Clone)]
pub struct WriteError {
    pub writer: usize,
    pub at: std::time::Instant,
    pub error: String,
}

impl WriteLog {
    pub fn ack(&self, writer: usize, parent: ObjectId, child: ObjectId) {
        let at = std::time::Instant::now();
        self.acks.lock().unwrap().push(Ack {
            writer,
            parent,
            child,
            at,
        });
    }

    pub fn error(&self, writer: usize, error: &subset::Error) {
        let at = std::time::Instant::now();
        self.errors.lock().unwrap().push(WriteError {
            writer,
            at,
            error: error.to_string(),
        });
    }

    pub fn acks(&self) -> Vec<Ack> {
        self.acks.lock().unwrap().clone()
    }

    pub fn errors(&self) -> Vec<WriteError> {
        self.errors.lock().unwrap().clone()
    }

    /// How many acknowledgements came after `t`.
    pub fn acks_after(&self, t: std::time::Instant) -> usize {
        self.acks
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.at > t)
            .count()
    }

    /// Waits until `n` pushes were acknowledged after `t`; whether they were within `timeout`.
    pub async fn wait_acks_after(
        &self,
        t: std::time::Instant,
        n: usize,
        timeout: std::time::Duration,
    ) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if self.acks_after(t) >= n {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.acks_after(t) >= n
    }

    /// The longest time without any acknowledgement between `from` and `to`: the outage as the
    /// writers saw it.
    pub fn longest_silence(
        &self,
        from: std::time::Instant,
        to: std::time::Instant,
    ) -> std::time::Duration {
        let mut times: Vec<std::time::Instant> = self
            .acks
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.at)
            .filter(|t| *t > from && *t < to)
            .collect();
        times.sort();
        let mut last = from;
        let mut longest = std::time::Duration::ZERO;
        for t in times.into_iter().chain([to]) {
            longest = longest.max(t - last);
            last = t;
        }
        longest
    }

    /// The errors grouped by their first words, e.g. `mongodb error on `products`: Kind: …`,
    /// with how many of each.
    pub fn error_kinds(&self) -> Vec<(String, usize)> {
        let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
        for e in self.errors.lock().unwrap().iter() {
            let key: String = e.error.chars().take(90).collect();
            *kinds.entry(key).or_default() += 1;
        }
        kinds.into_iter().collect()
    }
}

/// The ids among `ids` that are not in `collection`.
pub async fn absent_ids(
    db: &mongodb::Database,
    collection: &str,
    ids: &[ObjectId],
) -> Vec<ObjectId> {
    let mut present = std::collections::HashSet::new();
    for chunk in ids.chunks(5_000) {
        let found: Vec<Document> = db
            .collection::<Document>(collection)
            .find(doc! { "_id": { "$in": chunk.to_vec() } })
            .projection(doc! { "_id": 1 })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        present.extend(found.iter().map(|d| d.get_object_id("_id").unwrap()));
    }
    ids.iter()
        .filter(|id| !present.contains(id))
        .copied()
        .collect()
}

/// Whether `MONGODB_URI` is set: tests that kill servers need servers of their own.
pub fn external_server() -> bool {
    std::env::var_os("MONGODB_URI").is_some_and(|v| !v.is_empty())
}

/// The document `parent`'s pushes queue in, if it has one.
pub async fn folds(store: &Store<Product>, parent: &ObjectId) -> Option<Document> {
    let folds = store
        .database()
        .collection::<Document>(store.bookkeeping().folds());
    folds.find_one(doc! { "_id.parent": parent }).await.unwrap()
}

/// The pushes queued for `parent`.
pub async fn queued(store: &Store<Product>, parent: &ObjectId) -> Vec<Bson> {
    folds(store, parent)
        .await
        .and_then(|d| d.get_array("queue").ok().cloned())
        .unwrap_or_default()
}

/// A transaction that holds `parent` until it is committed: every other write to it conflicts.
pub async fn hold(store: &Store<Product>, parent: &ObjectId) -> mongodb::ClientSession {
    let mut holder = store.database().client().start_session().await.unwrap();
    holder.start_transaction().await.unwrap();
    store
        .database()
        .collection::<Document>("products")
        // An increment: a `$set` of the value a field already has writes nothing, and holds
        // nothing.
        .update_one(doc! { "_id": parent }, doc! { "$inc": { "held": 1 } })
        .session(&mut holder)
        .await
        .unwrap();
    holder
}

/// Pushes `review` to `parent` while another transaction holds the parent, so that the push
/// conflicts and is folded; lets go of the parent once the push has queued.
pub async fn folded(
    store: &Store<Product>,
    parent: &ObjectId,
    review: &Review,
) -> subset::Result<()> {
    let before = queued(store, parent).await.len();
    let mut holder = hold(store, parent).await;
    let (pusher, id, review) = (store.clone(), *parent, review.clone());
    let push = tokio::spawn(async move {
        pusher
            .children(Product::RECENT_REVIEWS)
            .push(&id, &review)
            .await
    });
    wait_for(|| async { queued(store, parent).await.len() > before }).await;
    holder.commit_transaction().await.unwrap();
    push.await.unwrap()
}

/// Polls `done` every 10 ms until it holds; panics after 15 s (a loaded machine has taken over
/// 5 s for a push to fold).
pub async fn wait_for<F, Fut>(mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..1_500 {
        if done().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("waited 15 s");
}

/// Runs `write`, a write of a document of many MiB, again while the server refuses it as too
/// large for its cache at the moment (code 388, `TransactionTooLargeForCache`): the test
/// server's cache is 256 MiB and other tests write at the same time, and eviction soon makes
/// room. Up to 20 tries, 250 ms apart.
pub async fn while_cache_full<T, F, Fut>(mut write: F) -> mongodb::error::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = mongodb::error::Result<T>>,
{
    let mut tries = 1;
    loop {
        match write().await {
            Err(e) if tries < 20 && server_code(&e) == Some(388) => {
                eprintln!("the server's cache is full (code 388), trying again: {e}");
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            done => return done,
        }
    }
}

/// The server's error code in `error`, if it carries one.
pub fn server_code(error: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match error.kind.as_ref() {
        ErrorKind::Command(e) => Some(e.code),
        ErrorKind::Write(WriteFailure::WriteError(e)) => Some(e.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(e)) => Some(e.code),
        _ => None,
    }
}

/// How many `_id`s an `update` statement (an element of the command's `updates`) names: each
/// of an `_id: {$in: [...]}` (a group's one statement over its parents), else one.
pub fn ids_named(statement: &Bson) -> usize {
    let id = statement
        .as_document()
        .and_then(|u| u.get_document("q").ok()?.get_document("_id").ok());
    id.and_then(|id| id.get_array("$in").ok())
        .map_or(1, Vec::len)
}
