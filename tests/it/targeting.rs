//! Shard targeting: every command a call on one parent sends names that parent, so that on a
//! sharded cluster (parents sharded on `_id`, children on a key that leads with the parent key)
//! `mongos` routes it to the shard holding that parent or its children instead of broadcasting
//! it. The commands are recorded with the driver's command monitoring, in both write modes.
//!
//! A child-collection command must pin the parent key to the parent's `_id` by equality (an
//! insert: carry it in every document); every other collection's command must pin `_id`. Two
//! exceptions are by design and asserted as exactly that: `patch_by_id` and `move_by_id` know
//! only the child's `_id`, so they first read its parent key with one `find` by `_id` alone,
//! which every shard answers; and the first write to a collection the registry does not know
//! asks once whether any parent carries a marker. What follows each is targeted. Calls across
//! parents (`remove_where`, `check_all`, the follower, `orphans`) scatter by design and are not
//! checked here (the sharding guide lists them).

use crate::common::{self, CommandLog};

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{Child, PageRequest, Store, Subset, WriteMode};

#[derive(Debug, Clone, Serialize, Deserialize, Child)]
struct Review {
    #[serde(rename = "_id")]
    id: ObjectId,
    rating: i32,
    date: DateTime,
    hidden: bool,
}

/// Two views of one child collection, one filtered, with a count and a sum: every kind of
/// parent update (push, backfill, re-rank, move out of a view) has something to do.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "products")]
struct Product {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "reviews",
        keep = 3,
        sort = "date desc",
        count = "total",
        sum = "rating_total = rating"
    )]
    latest: Vec<Review>,
    #[subset(child = "reviews", keep = 2, sort = "rating desc", filter = "!hidden")]
    best: Vec<Review>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    rating_total: i64,
}

const PARENTS: &str = "products";
const CHILDREN: &str = "reviews";
const KEY: &str = "product_id";

fn product() -> Product {
    Product {
        id: ObjectId::new(),
        latest: Vec::new(),
        best: Vec::new(),
        total: 0,
        rating_total: 0,
    }
}

fn review(millis: i64) -> Review {
    Review {
        id: ObjectId::new(),
        rating: (millis % 5) as i32 + 1,
        date: DateTime::from_millis(millis),
        hidden: millis % 3 == 0,
    }
}

/// The value `filter` pins `field` to by equality (`{field: v}`, `{field: {$eq: v}}`, a
/// one-value `$in`, or any of these inside a top-level `$and`), which is what lets `mongos`
/// target one shard.
fn pinned(filter: &Document, field: &str) -> Option<Bson> {
    if let Some(value) = filter.get(field) {
        let operators = value
            .as_document()
            .filter(|d| d.keys().next().is_some_and(|k| k.starts_with('$')));
        match operators {
            None => return Some(value.clone()),
            Some(ops) => {
                if let Some(v) = ops.get("$eq") {
                    return Some(v.clone());
                }
                if let Ok([v]) = ops.get_array("$in").map(Vec::as_slice) {
                    return Some(v.clone());
                }
            }
        }
    }
    filter
        .get_array("$and")
        .ok()?
        .iter()
        .filter_map(Bson::as_document)
        .find_map(|clause| pinned(clause, field))
}

/// The filters (for an insert, the documents) a command selects its documents by, or `None`
/// for a command that selects none (a transaction's commit, a cursor's `getMore` or
/// `killCursors`, which `mongos` routes by the cursor its targeted `find` opened).
fn selectors(name: &str, command: &Document) -> Option<Vec<Document>> {
    let docs = |array: &str, field: Option<&str>| -> Vec<Document> {
        command
            .get_array(array)
            .unwrap_or_else(|_| panic!("`{name}` without `{array}`: {command}"))
            .iter()
            .map(|entry| {
                let entry = entry.as_document().expect("a document");
                match field {
                    Some(field) => entry.get_document(field).cloned().unwrap_or_default(),
                    None => entry.clone(),
                }
            })
            .collect()
    };
    let one = |field: &str| vec![command.get_document(field).cloned().unwrap_or_default()];
    match name {
        "find" => Some(one("filter")),
        "findAndModify" | "count" | "distinct" => Some(one("query")),
        "update" => Some(docs("updates", Some("q"))),
        "delete" => Some(docs("deletes", Some("q"))),
        "insert" => Some(docs("documents", None)),
        // Targeted when the pipeline opens with a `$match` that pins the key.
        "aggregate" => Some(vec![command
            .get_array("pipeline")
            .ok()
            .and_then(|stages| stages.first())
            .and_then(Bson::as_document)
            .and_then(|stage| stage.get_document("$match").ok())
            .cloned()
            .unwrap_or_default()]),
        "commitTransaction" | "abortTransaction" | "getMore" | "killCursors" | "endSessions"
        | "hello" | "isMaster" | "ismaster" => None,
        other => panic!("a command this test does not know how to read: `{other}`: {command}"),
    }
}

/// One command that does not target: its name, collection and body.
#[derive(Debug, Clone, PartialEq)]
struct Scatter {
    name: String,
    collection: String,
    command: Document,
}

/// The commands logged since the last take; panics if the call sent none.
fn take(log: &CommandLog, call: &str) -> Vec<(String, String, Document)> {
    let commands = std::mem::take(&mut *log.lock().unwrap());
    assert!(!commands.is_empty(), "{call}: sent no command");
    commands
}

/// The commands that would go to every shard: a child-collection command whose selector does
/// not pin [`KEY`] to one of `parents`, any other collection's whose selector does not pin
/// `_id` (to one of `parents` on the parent collection).
fn scatters(commands: &[(String, String, Document)], parents: &[&ObjectId]) -> Vec<Scatter> {
    let parents: Vec<Bson> = parents.iter().map(|p| Bson::ObjectId(**p)).collect();
    let mut out = Vec::new();
    for (name, collection, command) in commands {
        let Some(selectors) = selectors(name, command) else {
            continue;
        };
        let targeted = selectors.iter().all(|selector| {
            if collection == CHILDREN {
                pinned(selector, KEY).is_some_and(|v| parents.contains(&v))
            } else if collection == PARENTS {
                pinned(selector, "_id").is_some_and(|v| parents.contains(&v))
            } else {
                // The library's own collections (the definitions' registry) are keyed by `_id`.
                pinned(selector, "_id").is_some()
            }
        });
        if !targeted {
            out.push(Scatter {
                name: name.clone(),
                collection: collection.clone(),
                command: command.clone(),
            });
        }
    }
    out
}

/// Asserts that every command sent inside a transaction (`autocommit: false`) went to the
/// parent or the child collection, or to one of `also`, so that the transaction has no other
/// shard.
#[track_caller]
fn assert_transactions_stay_on(commands: &[(String, String, Document)], also: &[&str], call: &str) {
    for (name, collection, command) in commands {
        let in_transaction = command.get_bool("autocommit").ok() == Some(false);
        let selects = selectors(name, command).is_some();
        let ours = collection == PARENTS || collection == CHILDREN;
        assert!(
            !in_transaction || !selects || ours || also.contains(&collection.as_str()),
            "{call}: a transaction also wrote or read `{collection}`: {command}"
        );
    }
}

/// Asserts that the call whose commands are in `log` targeted `parents`, in transactions that
/// touch the parent and the child collection only.
#[track_caller]
fn assert_targeted(log: &CommandLog, parents: &[&ObjectId], call: &str) {
    assert_targeted_touching(log, parents, &[], call);
}

/// [`assert_targeted`] of a call whose transaction also touches the collections `also`.
#[track_caller]
fn assert_targeted_touching(log: &CommandLog, parents: &[&ObjectId], also: &[&str], call: &str) {
    let commands = take(log, call);
    assert_transactions_stay_on(&commands, also, call);
    let scatters = scatters(&commands, parents);
    assert!(scatters.is_empty(), "{call}: scattered: {scatters:#?}");
}

/// Asserts that the call's only untargeted command is the read of the child's parent key by
/// its `_id` (one per attempt), and that everything else targeted `parents`.
#[track_caller]
fn assert_targeted_after_lookup(
    log: &CommandLog,
    parents: &[&ObjectId],
    child: &ObjectId,
    call: &str,
) {
    let commands = take(log, call);
    assert_transactions_stay_on(&commands, &[], call);
    let scatters = scatters(&commands, parents);
    assert!(
        !scatters.is_empty(),
        "{call}: the lookup by `_id` is missing"
    );
    for scatter in &scatters {
        let filter = scatter.command.get_document("filter").ok();
        assert!(
            scatter.name == "find"
                && scatter.collection == CHILDREN
                && filter.is_some_and(
                    |f| f.len() == 1 && pinned(f, "_id") == Some(Bson::ObjectId(*child))
                ),
            "{call}: scattered beyond the lookup of the parent key: {scatter:#?}"
        );
    }
}

/// Asserts that the call's only untargeted command is the registration's question whether any
/// parent of the collection carries a marker (one `find` of `{_subset: {$exists: true}}`),
/// asked once, by the first write to a collection the registry does not know yet.
#[track_caller]
fn assert_targeted_after_registration(log: &CommandLog, parents: &[&ObjectId], call: &str) {
    let commands = take(log, call);
    assert_transactions_stay_on(&commands, &[], call);
    let scatters = scatters(&commands, parents);
    let marked = bson::doc! { "_subset": { "$exists": true } };
    assert!(
        matches!(
            scatters.as_slice(),
            [Scatter { name, collection, command }]
                if name == "find"
                    && collection == PARENTS
                    && command.get_document("filter").ok() == Some(&marked)
        ),
        "{call}: scattered beyond the registration's one question: {scatters:#?}"
    );
}

async fn every_call_on_one_parent_targets_it(mode: WriteMode) {
    let (db, log) = common::recorded_replica_db().await;
    let store = Store::<Product>::with_options(&db, subset::StoreOptions::new().mode(mode));
    assert_eq!(store.mode().await.unwrap(), mode);
    store.ensure_indexes().await.unwrap();
    let (a, b) = (product(), product());
    log.lock().unwrap().clear();

    let mut seeded = a.clone();
    seeded.latest = (1..=2).map(review).collect();
    store.insert(&seeded).await.unwrap();
    assert_targeted_after_registration(&log, &[&a.id], "the first insert");
    // Another store, as another process would have, finds the collection registered.
    let store = Store::<Product>::with_options(&db, subset::StoreOptions::new().mode(mode));
    let reviews = store.children(Product::LATEST);
    store.insert(&b).await.unwrap();
    assert_targeted(&log, &[&b.id], "insert");

    let first = review(10);
    reviews.push(&a.id, &first).await.unwrap();
    assert_targeted(&log, &[&a.id], "push");
    let batch: Vec<Review> = (100..120).map(review).collect();
    reviews.push_many(&a.id, &batch).await.unwrap();
    assert_targeted(&log, &[&a.id], "push_many");
    reviews.push(&a.id, &review(5)).await.unwrap();
    assert_targeted(&log, &[&a.id], "push behind the head");
    reviews
        .push_many(&b.id, &[review(7), review(8)])
        .await
        .unwrap();
    assert_targeted(&log, &[&b.id], "push_many to another parent");

    let got = store.get(&a.id).await.unwrap().expect("the parent");
    assert_eq!(got.total, 24);
    assert_targeted(&log, &[&a.id], "get");

    // Pages from the embedded subset, then from the child collection, both ways.
    let page = reviews.page(&a.id, &PageRequest::first(3)).await.unwrap();
    assert_targeted(&log, &[&a.id], "first page within keep");
    let page = reviews
        .page(&a.id, &PageRequest::after(page.next.expect("more"), 5))
        .await
        .unwrap();
    assert_targeted(&log, &[&a.id], "a later page");
    reviews
        .page(
            &a.id,
            &PageRequest::before(page.previous.expect("earlier"), 2),
        )
        .await
        .unwrap();
    assert_targeted(&log, &[&a.id], "a page back");
    let mut request = PageRequest::first(10);
    let mut pages = 0;
    loop {
        let page = reviews.page(&a.id, &request).await.unwrap();
        pages += 1;
        assert_targeted(&log, &[&a.id], &format!("page {pages} of a walk"));
        match page.next {
            Some(next) => request = PageRequest::after(next, 10),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    reviews.page(&a.id, &PageRequest::last(4)).await.unwrap();
    assert_targeted(&log, &[&a.id], "last page");
    let best = store.children(Product::BEST);
    best.page(&a.id, &PageRequest::first(10)).await.unwrap();
    assert_targeted(&log, &[&a.id], "first page of the filtered view");
    let all: Vec<Review> = reviews
        .all(&a.id)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 24);
    assert_targeted(&log, &[&a.id], "all");
    assert_eq!(reviews.count(&a.id).await.unwrap(), 24);
    assert_targeted(&log, &[&a.id], "count");
    assert_eq!(best.count(&a.id).await.unwrap(), 18);
    assert_targeted(&log, &[&a.id], "count of the filtered view");

    // Changes of an embedded child, which re-rank and backfill, and of one deep in the list.
    let newest = batch.last().unwrap();
    reviews
        .patch(&a.id, &newest.id)
        .set(Review::HIDDEN, true)
        .await
        .unwrap();
    assert_targeted(&log, &[&a.id], "patch");
    reviews
        .patch(&a.id, &first.id)
        .inc(Review::RATING, 1)
        .await
        .unwrap();
    assert_targeted(&log, &[&a.id], "patch of a child outside the subset");
    let mut changed = batch[18].clone();
    changed.date = DateTime::from_millis(1);
    reviews.update(&a.id, &changed).await.unwrap();
    assert_targeted(&log, &[&a.id], "update");
    reviews.remove(&a.id, &newest.id).await.unwrap();
    assert_targeted(&log, &[&a.id], "remove of an embedded child");
    reviews.remove(&a.id, &first.id).await.unwrap();
    assert_targeted(&log, &[&a.id], "remove");
    reviews
        .move_child(&a.id, &batch[17].id, &b.id)
        .await
        .unwrap();
    assert_targeted(&log, &[&a.id, &b.id], "move_child");
    reviews.reconcile(&a.id).await.unwrap();
    assert_targeted(&log, &[&a.id], "reconcile");
    let drift = reviews.check(&b.id).await.unwrap();
    assert!(drift.is_clean(), "{drift:?}");
    assert_targeted(&log, &[&b.id], "check");

    reviews
        .patch_by_id(&batch[16].id)
        .set(Review::RATING, 5)
        .await
        .unwrap();
    assert_targeted_after_lookup(&log, &[&a.id], &batch[16].id, "patch_by_id");
    reviews.move_by_id(&batch[16].id, &b.id).await.unwrap();
    assert_targeted_after_lookup(&log, &[&a.id, &b.id], &batch[16].id, "move_by_id");

    for parent in [&a.id, &b.id] {
        for field in [Product::LATEST.spec(), Product::BEST.spec()] {
            let drift = store
                .raw()
                .children(field)
                .check(&Bson::ObjectId(*parent))
                .await
                .unwrap();
            assert!(drift.is_clean(), "{mode:?} {parent}: {drift:?}");
        }
    }
    // A parent's fold documents go with it, in its transaction (by `_id`): a third collection,
    // as the bookkeeping guide says, and the sharding guide counts.
    log.lock().unwrap().clear();
    assert!(store.delete(&a.id).await.unwrap());
    assert_targeted_touching(&log, &[&a.id], &["subset_folds"], "delete");
}

#[tokio::test]
async fn every_call_on_one_parent_targets_it_with_transactions() {
    every_call_on_one_parent_targets_it(WriteMode::Transactional).await;
}

#[tokio::test]
async fn every_call_on_one_parent_targets_it_with_ordered_writes() {
    every_call_on_one_parent_targets_it(WriteMode::Ordered).await;
}
