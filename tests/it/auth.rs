//! Privileges: every read (`get`, pages, `count`, `all`, `check`, `check_all`) works for a user
//! with the built-in `read` role alone, on every kind of parent (pushed through a store,
//! written by another program with no marker, adopted, outdated by a store of another model,
//! left by a writer that died holding its lease, in a database with no registry at all), and
//! sends no write; writes work with `readWrite`;
//! a write by a reader is `Error::Unauthorized` naming the refused action, and so is a follower
//! without `changeStream`.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::bookkeeping::Names;
use subset::bson;
use subset::testkit::{MongoServer, TestkitError, Topology, User};
use subset::{Child, Error, PageRequest, Store, Subset, WriteMode};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Rating {
    #[serde(rename = "_id")]
    id: i64,
    date: i64,
    stars: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "auth_recipes")]
struct Recipe {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "auth_ratings",
        key = "recipe_id",
        keep = 3,
        sort = "date desc",
        count = "ratings"
    )]
    latest: Vec<Rating>,
    #[serde(default)]
    ratings: i64,
}

/// The same collections under an older model that kept five: the parents it writes are
/// outdated for [`Recipe`].
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "auth_recipes")]
struct RecipeKeep5 {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "auth_ratings",
        key = "recipe_id",
        keep = 5,
        sort = "date desc",
        count = "ratings"
    )]
    latest: Vec<Rating>,
    #[serde(default)]
    ratings: i64,
}

/// How many ratings each parent has, dated 0 to `RATINGS - 1`.
const RATINGS: i64 = 7;

/// The commands that write: a reader must send none of them.
const WRITES: [&str; 11] = [
    "insert",
    "update",
    "delete",
    "findAndModify",
    "createIndexes",
    "create",
    "drop",
    "dropIndexes",
    "collMod",
    "renameCollection",
    "dropDatabase",
];

/// The ratings of parent number `n`, `_id`s `n * 100 + date`.
fn ratings(n: i64) -> Vec<Rating> {
    (0..RATINGS)
        .map(|date| Rating {
            id: n * 100 + date,
            date,
            stars: (date % 5) as i32 + 1,
        })
        .collect()
}

/// The `_id`s of parent number `n`'s ratings in the subset's order (latest first).
fn expected_ids(n: i64) -> Vec<i64> {
    (0..RATINGS).rev().map(|date| n * 100 + date).collect()
}

fn ids(ratings: &[Rating]) -> Vec<i64> {
    ratings.iter().map(|r| r.id).collect()
}

fn recipe(name: &str) -> Recipe {
    Recipe {
        id: ObjectId::new(),
        name: name.to_owned(),
        latest: Vec::new(),
        ratings: 0,
    }
}

/// The shared server of `topology` with authentication, or `None` (the test is skipped) with
/// `MONGODB_URI`.
async fn server(topology: Topology) -> Option<&'static MongoServer> {
    match MongoServer::shared_with_auth(topology).await {
        Ok(server) => Some(server),
        Err(TestkitError::External { .. }) => {
            subset::testkit::skip("MONGODB_URI is set: users and roles need a server of our own");
            None
        }
        Err(e) => panic!("start the test mongod with authentication: {e}"),
    }
}

/// `database` on a client of a user with the `read` role alone, and every command it starts.
async fn reader(server: &MongoServer, database: &str) -> (mongodb::Database, common::CommandLog) {
    let mut options = server
        .client_options_as(database, User::Read)
        .await
        .expect("create the reader");
    let log = common::record_commands(&mut options);
    let client = mongodb::Client::with_options(options).unwrap();
    (client.database(database), log)
}

/// Fails if the reader started any write.
fn assert_no_write(log: &common::CommandLog) {
    let log = log.lock().unwrap();
    let writes: Vec<_> = log
        .iter()
        .filter(|(name, _, _)| WRITES.contains(&name.as_str()))
        .map(|(name, target, _)| format!("{name} {target}"))
        .collect();
    assert!(writes.is_empty(), "a read sent writes: {writes:?}");
    assert!(!log.is_empty(), "the reader's commands were not recorded");
}

/// A parent as a program that knows nothing of subsets writes it: its three latest ratings
/// embedded with the count, no marker, and every rating in the child collection.
async fn insert_unmarked(admin: &mongodb::Database, n: i64) -> ObjectId {
    let id = ObjectId::new();
    let all = ratings(n);
    let latest: Vec<Document> = all
        .iter()
        .rev()
        .take(3)
        .map(|r| subset::bson_compat::to_document(r).unwrap())
        .collect();
    admin
        .collection::<Document>("auth_recipes")
        .insert_one(doc! { "_id": id, "name": "unmarked", "latest": latest, "ratings": RATINGS })
        .await
        .unwrap();
    let children: Vec<Document> = all
        .iter()
        .map(|r| {
            let mut child = subset::bson_compat::to_document(r).unwrap();
            child.insert("recipe_id", id);
            child
        })
        .collect();
    admin
        .collection::<Document>("auth_ratings")
        .insert_many(children)
        .await
        .unwrap();
    id
}

/// What a parent's bookkeeping says of its views, which only `check` reports.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// In sync with the child collection.
    InSync,
    /// Built under another model.
    Outdated,
    /// Left behind its children by a writer that died holding its lease.
    Abandoned,
}

/// Every read of parent number `n` through `store`, checked against its ratings.
async fn read_everything(store: &Store<Recipe>, id: &ObjectId, n: i64, kind: Kind, what: &str) {
    let expected = expected_ids(n);
    let handle = store.children(Recipe::LATEST);

    let got = store
        .get(id)
        .await
        .unwrap_or_else(|e| panic!("get {what}: {e}"));
    let got = got.unwrap_or_else(|| panic!("{what} is stored"));
    assert_eq!(ids(&got.latest), expected[..3], "get {what}");
    assert_eq!(got.ratings, RATINGS, "the count of {what}");

    let first = handle
        .page(id, &PageRequest::first(2))
        .await
        .unwrap_or_else(|e| panic!("first page of {what}: {e}"));
    assert_eq!(ids(&first.items), expected[..2], "first page of {what}");
    let next = first.next.clone().expect("a next page");
    let second = handle
        .page(id, &PageRequest::after(next, 4))
        .await
        .unwrap_or_else(|e| panic!("second page of {what}: {e}"));
    assert_eq!(ids(&second.items), expected[2..6], "second page of {what}");

    let count = handle
        .count(id)
        .await
        .unwrap_or_else(|e| panic!("count of {what}: {e}"));
    assert_eq!(count, RATINGS as u64, "count of {what}");

    let all: Vec<Rating> = handle
        .all(id)
        .await
        .unwrap_or_else(|e| panic!("all of {what}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("all of {what}: {e}"));
    assert_eq!(ids(&all), expected, "all of {what}");

    let drift = handle
        .check(id)
        .await
        .unwrap_or_else(|e| panic!("check of {what}: {e}"));
    // A parent built under another model is outdated, and one a dead writer left drifted
    // (the reads above computed their views from the child collection); every other one is in
    // sync.
    assert_eq!(
        drift.outdated,
        kind == Kind::Outdated,
        "check of {what}: {drift:?}"
    );
    assert!(
        kind == Kind::Outdated || drift.is_clean() == (kind == Kind::InSync),
        "check of {what}: {drift:?}"
    );
    assert!(!drift.fixed, "check of {what}: {drift:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_reads_every_kind_of_parent_and_writes_nothing() {
    for topology in [Topology::ReplicaSet, Topology::Standalone] {
        let Some(server) = server(topology).await else {
            return;
        };
        every_kind_of_parent(server).await;
    }
}

async fn every_kind_of_parent(server: &MongoServer) {
    let admin = server.database().await.unwrap();
    let name = admin.name().to_owned();
    let writer = server.database_as(&name, User::ReadWrite).await.unwrap();

    // Written by another program, before any store registered the model.
    let unmarked = insert_unmarked(&admin, 1).await;

    // Pushed through a store.
    let store = Store::<Recipe>::new(&writer);
    let pushed = recipe("pushed");
    store.insert(&pushed).await.unwrap();
    store
        .children(Recipe::LATEST)
        .push_many(&pushed.id, &ratings(2))
        .await
        .unwrap();

    // Left by a writer without transactions that died between its writes: its newest rating is
    // stored, the parent's subset and count are still as they were before it, and its lease
    // has expired.
    let abandoned = recipe("abandoned");
    store.insert(&abandoned).await.unwrap();
    let all = ratings(5);
    store
        .children(Recipe::LATEST)
        .push_many(&abandoned.id, &all[..all.len() - 1])
        .await
        .unwrap();
    let mut newest = subset::bson_compat::to_document(&all[all.len() - 1]).unwrap();
    newest.insert("recipe_id", abandoned.id);
    admin
        .collection::<Document>("auth_ratings")
        .insert_one(newest)
        .await
        .unwrap();
    let expired = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() - 60_000);
    admin
        .collection::<Document>("auth_recipes")
        .update_one(
            doc! { "_id": abandoned.id },
            doc! { "$set": { "_subset.l": { "o": ObjectId::new(), "u": expired } } },
        )
        .await
        .unwrap();

    // Fully embedded, then adopted (as the CLI's migrate does).
    let adopted = ObjectId::new();
    let embedded: Vec<Document> = ratings(3)
        .iter()
        .map(|r| subset::bson_compat::to_document(r).unwrap())
        .collect();
    admin
        .collection::<Document>("auth_recipes")
        .insert_one(doc! { "_id": adopted, "name": "adopted", "latest": embedded })
        .await
        .unwrap();
    store
        .children(Recipe::LATEST)
        .raw()
        .ensure_index()
        .await
        .unwrap();
    store
        .children(Recipe::LATEST)
        .raw()
        .adopt(&Bson::ObjectId(adopted))
        .await
        .unwrap();

    // Written by a store of the older model (which becomes the registry's current one).
    let older = Store::<RecipeKeep5>::new(&writer);
    let outdated = RecipeKeep5 {
        id: ObjectId::new(),
        name: "outdated".to_owned(),
        latest: Vec::new(),
        ratings: 0,
    };
    older.insert(&outdated).await.unwrap();
    older
        .children(RecipeKeep5::LATEST)
        .push_many(&outdated.id, &ratings(4))
        .await
        .unwrap();

    let (read, log) = reader(server, &name).await;
    let store = Store::<Recipe>::new(&read);
    for (id, n, kind, what) in [
        (unmarked, 1, Kind::InSync, "the unmarked parent"),
        (pushed.id, 2, Kind::InSync, "the pushed parent"),
        (adopted, 3, Kind::InSync, "the adopted parent"),
        (outdated.id, 4, Kind::Outdated, "the outdated parent"),
        (abandoned.id, 5, Kind::Abandoned, "the abandoned parent"),
    ] {
        read_everything(&store, &id, n, kind, what).await;
    }
    // Read again and again, the abandoned parent is read ahead (one `aggregate` of the parent
    // with `$lookup`), which the `read` role allows. (The outdated one holds a longer view of
    // the same order, read as stored.)
    for _ in 0..3 {
        let what = "the abandoned parent again";
        read_everything(&store, &abandoned.id, 5, Kind::Abandoned, what).await;
    }
    let read_ahead = log.lock().unwrap().iter().any(|(name, target, command)| {
        name == "aggregate" && target == "auth_recipes" && command.to_string().contains("$lookup")
    });
    assert!(read_ahead, "the reader read ahead");
    let report = store.check_all().await.expect("check_all");
    let progress = &report.progress;
    assert_eq!(progress.checked, 5, "{report:?}");
    assert_eq!((progress.outdated, progress.drifted), (1, 2), "{report:?}");
    assert!(report.failures.is_empty(), "{report:?}");
    assert_no_write(&log);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_reads_a_database_without_a_registry_and_writes_nothing() {
    let Some(server) = server(Topology::ReplicaSet).await else {
        return;
    };
    let admin = server.database().await.unwrap();
    let name = admin.name().to_owned();
    let unmarked = insert_unmarked(&admin, 1).await;
    let registry = || async {
        admin
            .list_collection_names()
            .await
            .unwrap()
            .contains(&Names::default().definitions().to_owned())
    };
    assert!(!registry().await);

    let (read, log) = reader(server, &name).await;
    let store = Store::<Recipe>::new(&read);
    read_everything(&store, &unmarked, 1, Kind::InSync, "the unmarked parent").await;
    let report = store.check_all().await.expect("check_all");
    assert_eq!(report.progress.checked, 1, "{report:?}");
    assert!(report.failures.is_empty(), "{report:?}");
    assert_no_write(&log);
    assert!(!registry().await, "a read created the registry");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_with_read_write_writes_and_a_reader_s_write_is_unauthorized() {
    let Some(server) = server(Topology::ReplicaSet).await else {
        return;
    };
    for mode in [None, Some(WriteMode::Ordered)] {
        let admin = server.database().await.unwrap();
        let name = admin.name().to_owned();
        let options = match mode {
            Some(mode) => subset::StoreOptions::new().mode(mode),
            None => subset::StoreOptions::new(),
        };
        let with_mode = |db: &mongodb::Database| Store::<Recipe>::with_options(db, options.clone());
        let writer = with_mode(&server.database_as(&name, User::ReadWrite).await.unwrap());
        let parent = recipe("written");
        writer.insert(&parent).await.unwrap();
        let handle = writer.children(Recipe::LATEST);
        handle.push_many(&parent.id, &ratings(1)).await.unwrap();
        handle
            .patch(&parent.id, &106)
            .set(Rating::STARS, 1)
            .await
            .unwrap();
        handle.remove(&parent.id, &105).await.unwrap();
        let got = writer.get(&parent.id).await.unwrap().unwrap();
        assert_eq!(ids(&got.latest), [106, 104, 103], "{mode:?}");
        assert_eq!(got.latest[0].stars, 1, "{mode:?}");
        assert_eq!(got.ratings, RATINGS - 1, "{mode:?}");

        let (read, _) = reader(server, &name).await;
        let reader = with_mode(&read);
        let late = Rating {
            id: 199,
            date: 99,
            stars: 5,
        };
        let error = reader
            .children(Recipe::LATEST)
            .push(&parent.id, &late)
            .await
            .expect_err("a reader cannot push");
        let Error::Unauthorized {
            collection,
            action,
            command,
            ..
        } = &error
        else {
            panic!("{mode:?}: not Unauthorized: {error:?}");
        };
        // In a transaction the first write is refused; without one, the lease on the parent
        // (a `findAndModify`) comes first.
        assert!(
            ["insert", "update"].contains(&action.as_str()),
            "{mode:?}: {error}"
        );
        if mode == Some(WriteMode::Ordered) {
            assert_eq!(
                (action.as_str(), command.as_str()),
                ("update", "findAndModify"),
                "{error}"
            );
        }
        assert!(
            ["auth_recipes", "auth_ratings"].contains(&collection.as_str()),
            "{mode:?}: {error}"
        );
        let message = error.to_string();
        assert!(
            message.contains(&format!("`{action}`")) && message.contains("readWrite"),
            "{message}"
        );
        // Nothing of the refused push was written.
        let got = writer.get(&parent.id).await.unwrap().unwrap();
        assert_eq!(ids(&got.latest), [106, 104, 103], "{mode:?}");
        assert_eq!(handle.count(&parent.id).await.unwrap(), RATINGS as u64 - 1);
    }
}

/// A follower needs `changeStream` on the child collection: without it (`readWrite` less that
/// one action), it stops with `Error::Unauthorized` naming the action, at once, having written
/// nothing; with `readWrite` it follows.
#[tokio::test(flavor = "multi_thread")]
async fn a_follower_without_change_stream_is_unauthorized_naming_it() {
    let Some(server) = server(Topology::ReplicaSet).await else {
        return;
    };
    let admin = server.database().await.unwrap();
    let name = admin.name().to_owned();
    let writer = Store::<Recipe>::new(&server.database_as(&name, User::ReadWrite).await.unwrap());
    let parent = recipe("followed");
    writer.insert(&parent).await.unwrap();
    writer
        .children(Recipe::LATEST)
        .push_many(&parent.id, &ratings(1))
        .await
        .unwrap();
    // Pre-images, which a follower turns on when it may, are on already: what is missing is
    // the stream alone.
    admin
        .run_command(doc! {
            "collMod": "auth_ratings", "changeStreamPreAndPostImages": { "enabled": true },
        })
        .await
        .unwrap();
    let limited = Store::<Recipe>::new(
        &server
            .database_as(&name, User::ReadWriteNoChangeStream)
            .await
            .unwrap(),
    );
    let following = limited.follow(subset::follow::FollowOptions::new("limited"));
    let error = tokio::time::timeout(std::time::Duration::from_secs(30), following)
        .await
        .expect("the follower stops by itself")
        .expect_err("a follower without changeStream cannot follow");
    let Error::Unauthorized { action, .. } = &error else {
        panic!("not Unauthorized: {error:?}");
    };
    assert_eq!(action, "changeStream", "{error}");
    assert!(error.to_string().contains("changeStream"), "{error}");
    let tokens = admin
        .collection::<Document>(Names::default().followers())
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(tokens, 0, "a refused follower saved a place");

    let follower = writer
        .follow(subset::follow::FollowOptions::new("allowed"))
        .spawn();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    follower
        .stop()
        .await
        .expect("a follower with readWrite follows");
}
