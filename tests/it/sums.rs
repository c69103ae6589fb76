//! Running sums: `sum = "parent = child"` keeps parent fields equal to the sum of a child field,
//! through push, push_many, remove, update and reconcile, in both write modes.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use subset::bson;

use subset::{follow::FollowOptions, follow::FollowUpdate, follow::Follower, Child, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Rating {
    #[serde(rename = "_id")]
    id: ObjectId,
    stars: i32,
    // A float child field, summed into a float parent field.
    weight: f64,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "rated_products")]
struct Rated {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "ratings",
        keep = 3,
        sort = "date desc",
        count = "total",
        sum = "stars_total = stars, weight_total = weight"
    )]
    recent: Vec<Rating>,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    stars_total: i64,
    #[serde(default)]
    weight_total: f64,
}

impl Rated {
    fn new() -> Rated {
        Rated {
            id: ObjectId::new(),
            recent: Vec::new(),
            total: 0,
            stars_total: 0,
            weight_total: 0.0,
        }
    }

    /// The average rating: the running sum over the count, `None` with no ratings.
    fn average(&self) -> Option<f64> {
        (self.total > 0).then(|| self.stars_total as f64 / self.total as f64)
    }
}

fn rating(millis: i64, stars: i32) -> Rating {
    Rating {
        id: ObjectId::new(),
        stars,
        // Halves add exactly in binary, so the float sum can be compared exactly.
        weight: f64::from(stars) / 2.0,
        date: DateTime::from_millis(millis),
    }
}

/// The count and the sums over the child collection, computed here by reading every child.
async fn truth(store: &Store<Rated>, id: &ObjectId) -> (i64, i64, f64) {
    let children: Vec<Document> = store
        .database()
        .collection::<Document>("ratings")
        .find(doc! { "rated_id": id })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let stars = children
        .iter()
        .map(|c| i64::from(c.get_i32("stars").unwrap()))
        .sum();
    let weight = children.iter().map(|c| c.get_f64("weight").unwrap()).sum();
    (children.len() as i64, stars, weight)
}

async fn assert_sums_true(store: &Store<Rated>, id: &ObjectId) -> Rated {
    let got = store.get(id).await.unwrap().unwrap();
    let (n, stars, weight) = truth(store, id).await;
    let mode = store.mode().await.unwrap();
    assert_eq!(
        (got.total, got.stars_total, got.weight_total),
        (n, stars, weight),
        "{mode:?}"
    );
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn push_remove_and_update_keep_every_sum_true() {
    for store in stores::<Rated>().await {
        let parent = Rated::new();
        store.insert(&parent).await.unwrap();
        let ratings = store.children(Rated::RECENT);
        let first = rating(1, 4);
        ratings.push(&parent.id, &first).await.unwrap();
        let got = assert_sums_true(&store, &parent.id).await;
        assert_eq!((got.stars_total, got.weight_total), (4, 2.0));

        let many: Vec<Rating> = (2..8).map(|i| rating(i, (i % 5) as i32 + 1)).collect();
        ratings.push_many(&parent.id, &many).await.unwrap();
        let got = assert_sums_true(&store, &parent.id).await;
        assert_eq!(got.total, 7);

        // Removing an evicted child and an embedded one.
        ratings.remove(&parent.id, &first.id).await.unwrap();
        assert_sums_true(&store, &parent.id).await;
        ratings.remove(&parent.id, &many[5].id).await.unwrap();
        assert_sums_true(&store, &parent.id).await;

        // Replacing a child moves the sum by the difference, the count not at all.
        let mut changed = many[0].clone();
        changed.stars = 5;
        changed.weight = 10.5;
        ratings.update(&parent.id, &changed).await.unwrap();
        let got = assert_sums_true(&store, &parent.id).await;
        assert_eq!(got.total, 5);

        assert!(ratings.check(&parent.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_the_last_child_brings_the_sums_to_zero() {
    for store in stores::<Rated>().await {
        let parent = Rated::new();
        store.insert(&parent).await.unwrap();
        let ratings = store.children(Rated::RECENT);
        let only = rating(1, 3);
        ratings.push(&parent.id, &only).await.unwrap();
        let got = store.get(&parent.id).await.unwrap().unwrap();
        assert_eq!(got.average(), Some(3.0));
        ratings.remove(&parent.id, &only.id).await.unwrap();
        let got = assert_sums_true(&store, &parent.id).await;
        assert_eq!((got.total, got.stars_total, got.weight_total), (0, 0, 0.0));
        // No children: no average, not a division by zero.
        assert_eq!(got.average(), None);
        // And reconcile agrees that zero is right.
        assert!(ratings.reconcile(&parent.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_repairs_a_tampered_sum_and_check_reports_it() {
    for store in stores::<Rated>().await {
        let parent = Rated::new();
        store.insert(&parent).await.unwrap();
        let ratings = store.children(Rated::RECENT);
        let children: Vec<Rating> = (1..6).map(|i| rating(i, i as i32)).collect();
        ratings.push_many(&parent.id, &children).await.unwrap();
        store
            .database()
            .collection::<Document>("rated_products")
            .update_one(
                doc! { "_id": parent.id },
                doc! { "$set": { "stars_total": 99_i64 }, "$unset": { "weight_total": "" } },
            )
            .await
            .unwrap();

        let drift = ratings.check(&parent.id).await.unwrap();
        assert!(!drift.is_clean());
        assert!(drift.count.is_none());
        assert_eq!(drift.sums.len(), 2, "{drift:?}");
        assert_eq!(drift.sums[0].field, "stars_total");
        assert_eq!(drift.sums[0].stored, Bson::Int64(99));
        assert_eq!(drift.sums[0].computed, Bson::Int64(15));
        assert_eq!(drift.sums[1].field, "weight_total");
        assert_eq!(drift.sums[1].stored, Bson::Null);
        assert_eq!(drift.sums[1].computed, Bson::Double(7.5));
        assert!(!drift.fixed);

        let drift = ratings.reconcile(&parent.id).await.unwrap();
        assert!(drift.fixed);
        assert_eq!(drift.sums.len(), 2);
        assert_sums_true(&store, &parent.id).await;
        assert!(ratings.check(&parent.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_child_without_a_number_is_reported_and_adds_nothing() {
    let store = stores::<Rated>().await.remove(0);
    let parent = Rated::new();
    store.insert(&parent).await.unwrap();
    let ratings = store.children(Rated::RECENT);
    ratings.push(&parent.id, &rating(1, 2)).await.unwrap();
    let bad = ObjectId::new();
    store
        .database()
        .collection::<Document>("ratings")
        .insert_one(doc! { "_id": bad, "rated_id": parent.id, "stars": "five", "weight": 1.0, "date": DateTime::from_millis(2) })
        .await
        .unwrap();
    let drift = ratings.reconcile(&parent.id).await.unwrap();
    match drift.malformed.as_slice() {
        [m] => {
            assert_eq!(m.child, Bson::ObjectId(bad));
            assert_eq!(m.field, "stars");
            assert!(m.problem.starts_with("is a string where"), "{}", m.problem);
        }
        other => panic!("expected one malformed child, got {other:?}"),
    }
    // Left out of the subset (so `get` reads the parent) and of the sum; still counted.
    let got = store.get(&parent.id).await.unwrap().unwrap();
    assert_eq!(got.recent.len(), 1, "{got:?}");
    assert_eq!((got.total, got.stars_total), (2, 2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_inserted_with_children_starts_with_their_sums() {
    for store in stores::<Rated>().await {
        let mut parent = Rated::new();
        parent.recent = (1..5).map(|i| rating(i, 5)).collect();
        // Whatever the caller put in the sum fields, the children decide.
        parent.stars_total = 1000;
        store.insert(&parent).await.unwrap();
        let got = assert_sums_true(&store, &parent.id).await;
        assert_eq!(
            (got.total, got.stars_total, got.weight_total),
            (4, 20, 10.0)
        );
    }
}

/// A follower of `store`, spawned, once its change stream is open.
pub(crate) async fn started_follower<P: Subset>(store: &Store<P>, name: &str) -> Follower {
    let started = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&started);
    let follower = store
        .follow(FollowOptions::new(name).window(Duration::from_millis(30)))
        .on_update(move |update| {
            if matches!(
                update,
                FollowUpdate::Started { .. } | FollowUpdate::CatchingUp { .. }
            ) {
                seen.store(true, Ordering::SeqCst);
            }
        })
        .spawn();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !started.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the follower did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    follower
}

#[tokio::test(flavor = "multi_thread")]
async fn the_follower_keeps_the_sums_of_children_written_around_the_library() {
    let db = replica_db().await;
    let store = Store::<Rated>::new(&db);
    let parent = Rated::new();
    store.insert(&parent).await.unwrap();
    let follower = started_follower(&store, "sums").await;

    // Another program inserts, changes and deletes children with plain driver calls.
    let children = db.collection::<Document>("ratings");
    let raw = |r: &Rating| {
        let mut d = subset::bson_compat::to_document(r).unwrap();
        d.insert("rated_id", parent.id);
        d
    };
    let written: Vec<Rating> = (1..7).map(|i| rating(i, (i % 5) as i32 + 1)).collect();
    children.insert_many(written.iter().map(raw)).await.unwrap();
    children
        .update_one(
            doc! { "_id": written[0].id },
            doc! { "$set": { "stars": 5, "weight": 2.5 } },
        )
        .await
        .unwrap();
    children
        .delete_one(doc! { "_id": written[1].id })
        .await
        .unwrap();

    let (n, stars, weight) = truth(&store, &parent.id).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = store.get(&parent.id).await.unwrap().unwrap();
        if (got.total, got.stars_total, got.weight_total) == (n, stars, weight) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower left {:?}, the children sum to {:?}",
            (got.total, got.stars_total, got.weight_total),
            (n, stars, weight)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    follower.stop().await.unwrap();
    assert!(store
        .children(Rated::RECENT)
        .check(&parent.id)
        .await
        .unwrap()
        .is_clean());
}

/// A stars rating stored as the integer it wraps, summed once it says so.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
struct Stars(i32);

impl subset::spec::SortableField for Stars {
    const VALUES: subset::spec::SortValues = <i32 as subset::spec::SortableField>::VALUES;
}

impl subset::spec::SumField<Stars> for i64 {}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Vote {
    #[serde(rename = "_id")]
    id: ObjectId,
    stars: Stars,
    date: DateTime,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// The fields the engine writes itself may be left out by serde: an insert stores the array,
/// the count and the sum whatever the struct serializes, and pushes add to them.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "voted_products")]
struct Voted {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[subset(
        child = "votes",
        keep = 2,
        sort = "stars desc, date desc",
        count = "total",
        sum = "stars_total = stars"
    )]
    best: Vec<Vote>,
    #[serde(default, skip_serializing_if = "is_zero")]
    total: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    stars_total: i64,
}

#[tokio::test(flavor = "multi_thread")]
async fn counts_and_sums_serde_leaves_out_are_written_by_the_engine() {
    for store in stores::<Voted>().await {
        let parent = Voted {
            id: ObjectId::new(),
            best: Vec::new(),
            total: 0,
            stars_total: 0,
        };
        store.insert(&parent).await.unwrap();
        let raw = store
            .database()
            .collection::<Document>("voted_products")
            .find_one(doc! { "_id": parent.id })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(raw.get("best"), Some(&Bson::Array(Vec::new())));
        assert_eq!(raw.get("total"), Some(&Bson::Int64(0)));
        assert_eq!(raw.get("stars_total"), Some(&Bson::Int64(0)));

        let votes = store.children(Voted::BEST);
        for (millis, stars) in [(1, 3), (2, 5), (3, 4)] {
            let vote = Vote {
                id: ObjectId::new(),
                stars: Stars(stars),
                date: DateTime::from_millis(millis),
            };
            votes.push(&parent.id, &vote).await.unwrap();
        }
        let got = store.get(&parent.id).await.unwrap().unwrap();
        assert_eq!((got.total, got.stars_total), (3, 12));
        let best: Vec<Stars> = got.best.iter().map(|v| v.stars).collect();
        assert_eq!(best, [Stars(5), Stars(4)]);
        assert!(votes.check(&parent.id).await.unwrap().is_clean());
    }
}

/// A ledger entry: an amount of money, which a float would round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Entry {
    #[serde(rename = "_id")]
    id: ObjectId,
    amount: bson::Decimal128,
    date: DateTime,
}

/// A balance kept as the exact `Decimal128` sum of the entries' amounts.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "decimal_ledgers")]
struct Ledger {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "ledger_entries",
        keep = 5,
        sort = "date desc",
        count = "entries",
        sum = "balance = amount"
    )]
    recent: Vec<Entry>,
    #[serde(default)]
    entries: i64,
    balance: bson::Decimal128,
}

fn dec(text: &str) -> bson::Decimal128 {
    text.parse().expect("a decimal")
}

impl Ledger {
    fn new() -> Ledger {
        Ledger {
            id: ObjectId::new(),
            recent: Vec::new(),
            entries: 0,
            balance: dec("0"),
        }
    }
}

fn entry(millis: i64, amount: &str) -> Entry {
    Entry {
        id: ObjectId::new(),
        amount: dec(amount),
        date: DateTime::from_millis(millis),
    }
}

/// The ledger's balance as the server's `$sum` over its entries has it, and as stored.
async fn assert_balance(store: &Store<Ledger>, id: &ObjectId, expected: &str) {
    let mode = store.mode().await.unwrap();
    let mut grouped = store
        .database()
        .collection::<Document>("ledger_entries")
        .aggregate([
            doc! { "$match": { "ledger_id": id } },
            doc! { "$group": { "_id": Bson::Null, "n": { "$sum": 1 }, "s": { "$sum": "$amount" } } },
        ])
        .await
        .unwrap();
    let (n, server) = match grouped.try_next().await.unwrap() {
        Some(g) => (i64::from(g.get_i32("n").unwrap()), g.get("s").cloned()),
        None => (0, None),
    };
    let got = store.get(id).await.unwrap().unwrap();
    // The exact digits, not merely an equal number: every amount has two decimals, so does
    // every exact sum.
    assert_eq!(
        (got.entries, got.balance.to_string()),
        (n, expected.to_owned()),
        "{mode:?}"
    );
    if let Some(server) = server {
        assert_eq!(server, Bson::Decimal128(got.balance), "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn decimal_sums_stay_exact_through_every_write() {
    // A thousand dimes: exactly 100.00 in decimal, not in binary.
    let as_floats: f64 = (0..1000).map(|_| 0.10_f64).sum();
    assert_ne!(as_floats, 100.0);
    for store in stores::<Ledger>().await {
        let (ledger, other) = (Ledger::new(), Ledger::new());
        store.insert(&ledger).await.unwrap();
        store.insert(&other).await.unwrap();
        let entries = store.children(Ledger::RECENT);
        let dimes: Vec<Entry> = (0..1000).map(|i| entry(i, "0.10")).collect();
        for one in &dimes[..100] {
            entries.push(&ledger.id, one).await.unwrap();
        }
        for batch in dimes[100..].chunks(100) {
            entries.push_many(&ledger.id, batch).await.unwrap();
        }
        assert_balance(&store, &ledger.id, "100.00").await;

        entries.remove(&ledger.id, &dimes[999].id).await.unwrap();
        assert_balance(&store, &ledger.id, "99.90").await;
        // A patch of the amount moves the balance by the difference.
        entries
            .patch(&ledger.id, &dimes[500].id)
            .set(Entry::AMOUNT, dec("1.25"))
            .await
            .unwrap();
        assert_balance(&store, &ledger.id, "101.05").await;
        let mut replaced = dimes[600].clone();
        replaced.amount = dec("-3.33");
        entries.update(&ledger.id, &replaced).await.unwrap();
        assert_balance(&store, &ledger.id, "97.62").await;
        // Jobs by filter: fifty dimes gone, ten raised to 0.35.
        let early = doc! { "ledger_id": ledger.id, "date": { "$lt": DateTime::from_millis(50) } };
        entries.remove_where(early).await.unwrap();
        assert_balance(&store, &ledger.id, "92.62").await;
        let raised = doc! {
            "ledger_id": ledger.id,
            "date": { "$gte": DateTime::from_millis(900), "$lt": DateTime::from_millis(910) },
        };
        entries
            .patch_where(raised)
            .set(Entry::AMOUNT, dec("0.35"))
            .await
            .unwrap();
        assert_balance(&store, &ledger.id, "95.12").await;
        entries
            .move_child(&ledger.id, &dimes[700].id, &other.id)
            .await
            .unwrap();
        assert_balance(&store, &ledger.id, "95.02").await;
        assert_balance(&store, &other.id, "0.10").await;
        assert!(entries.check(&ledger.id).await.unwrap().is_clean());
        assert!(entries.check(&other.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drifted_decimal_sum_is_reported_and_reconciled_as_a_decimal() {
    for store in stores::<Ledger>().await {
        let (ledger, empty) = (Ledger::new(), Ledger::new());
        store.insert(&ledger).await.unwrap();
        store.insert(&empty).await.unwrap();
        let entries = store.children(Ledger::RECENT);
        let amounts = ["19.99", "0.01", "-5.50", "100.00"];
        let pushed: Vec<Entry> = (0..).zip(amounts).map(|(i, a)| entry(i, a)).collect();
        entries.push_many(&ledger.id, &pushed).await.unwrap();
        assert_balance(&store, &ledger.id, "114.50").await;
        // The same number spelled otherwise is no drift.
        let parents = store.database().collection::<Document>("decimal_ledgers");
        let set = |id: ObjectId, balance: &str| {
            parents.update_one(
                doc! { "_id": id },
                doc! { "$set": { "balance": dec(balance) } },
            )
        };
        set(ledger.id, "114.5000").await.unwrap();
        assert!(entries.check(&ledger.id).await.unwrap().is_clean());

        set(ledger.id, "114.49").await.unwrap();
        let drift = entries.check(&ledger.id).await.unwrap();
        assert_eq!(drift.sums.len(), 1, "{drift:?}");
        assert_eq!(drift.sums[0].field, "balance");
        assert_eq!(drift.sums[0].stored, Bson::Decimal128(dec("114.49")));
        assert_eq!(drift.sums[0].computed, Bson::Decimal128(dec("114.50")));
        assert!(entries.reconcile(&ledger.id).await.unwrap().fixed);
        assert_balance(&store, &ledger.id, "114.50").await;
        assert!(entries.check(&ledger.id).await.unwrap().is_clean());

        // No entries: the `$sum` is the integer 0, written as a decimal the struct reads.
        set(empty.id, "5.00").await.unwrap();
        let drift = entries.reconcile(&empty.id).await.unwrap();
        assert_eq!(
            drift.sums[0].computed,
            Bson::Decimal128(dec("0")),
            "{drift:?}"
        );
        assert_balance(&store, &empty.id, "0").await;
    }
}

/// The amount of `entry` as the child collection stores it and as the ledger's `recent` embeds it.
async fn stored_amounts(
    store: &Store<Ledger>,
    ledger: &ObjectId,
    entry: &ObjectId,
) -> (Bson, Bson) {
    let child = store
        .database()
        .collection::<Document>("ledger_entries")
        .find_one(doc! { "_id": entry })
        .await
        .unwrap()
        .expect("the entry is stored");
    let parent = store
        .get(ledger)
        .await
        .unwrap()
        .expect("the ledger is stored");
    let copy = parent
        .recent
        .iter()
        .find(|e| e.id == *entry)
        .expect("the entry is embedded");
    (
        child.get("amount").cloned().unwrap_or(Bson::Null),
        Bson::Decimal128(copy.amount),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decimal_field_is_incremented_exactly_and_its_sum_follows() {
    for store in stores::<Ledger>().await {
        let mode = store.mode().await.unwrap();
        let ledger = Ledger::new();
        store.insert(&ledger).await.unwrap();
        let entries = store.children(Ledger::RECENT);
        let (dime, fee) = (entry(1, "0.10"), entry(2, "2.50"));
        entries
            .push_many(&ledger.id, &[dime.clone(), fee.clone()])
            .await
            .unwrap();

        // Ten dimes added to a dime: exactly 1.10, where floats would drift.
        for _ in 0..10 {
            entries
                .patch(&ledger.id, &dime.id)
                .inc(Entry::AMOUNT, dec("0.10"))
                .await
                .unwrap();
        }
        let stored = Bson::Decimal128(dec("1.10"));
        assert_eq!(
            stored_amounts(&store, &ledger.id, &dime.id).await,
            (stored.clone(), stored),
            "{mode:?}"
        );
        assert_balance(&store, &ledger.id, "3.60").await;
        entries
            .patch(&ledger.id, &fee.id)
            .dec(Entry::AMOUNT, dec("0.75"))
            .await
            .unwrap();
        assert_balance(&store, &ledger.id, "2.85").await;

        // Past 34 digits a sum is rounded, to nearest and ties to even, by the server on the
        // child and by the engine on the balance alike. 1.10 + 1E-40 rounds to 1.10 itself,
        // which the server leaves as it is.
        let amount = |text: &str| Bson::Decimal128(dec(text));
        entries
            .patch(&ledger.id, &dime.id)
            .inc(Entry::AMOUNT, dec("1E-40"))
            .await
            .unwrap();
        assert_eq!(
            stored_amounts(&store, &ledger.id, &dime.id).await,
            (amount("1.10"), amount("1.10")),
            "{mode:?}"
        );
        assert_balance(&store, &ledger.id, "2.85").await;
        // 1.10 + 1.5E-33 ends in a half past ...001: it rounds to the even ...002.
        let even = "1.100000000000000000000000000000002";
        entries
            .patch(&ledger.id, &dime.id)
            .inc(Entry::AMOUNT, dec("1.5E-33"))
            .await
            .unwrap();
        assert_eq!(
            stored_amounts(&store, &ledger.id, &dime.id).await,
            (amount(even), amount(even)),
            "{mode:?}"
        );
        assert_balance(&store, &ledger.id, "2.850000000000000000000000000000002").await;
        // And a half past ...002 stays there.
        entries
            .patch(&ledger.id, &dime.id)
            .inc(Entry::AMOUNT, dec("5E-34"))
            .await
            .unwrap();
        assert_eq!(
            stored_amounts(&store, &ledger.id, &dime.id).await,
            (amount(even), amount(even)),
            "{mode:?}"
        );
        assert_balance(&store, &ledger.id, "2.850000000000000000000000000000002").await;

        // No increment by a value that is no number: refused, naming the field, nothing
        // written.
        for by in ["Infinity", "-Infinity", "NaN"] {
            let refused = entries
                .patch(&ledger.id, &fee.id)
                .inc(Entry::AMOUNT, dec(by))
                .await;
            assert!(
                matches!(&refused, Err(subset::Error::InvalidPatch { field, .. }) if field == "amount"),
                "{mode:?} {by}: {refused:?}"
            );
            let refused = entries
                .patch(&ledger.id, &fee.id)
                .dec(Entry::AMOUNT, dec(by))
                .await;
            assert!(
                matches!(&refused, Err(subset::Error::InvalidPatch { field, .. }) if field == "amount"),
                "{mode:?} {by}: {refused:?}"
            );
        }
        assert_balance(&store, &ledger.id, "2.850000000000000000000000000000002").await;
        assert!(entries.check(&ledger.id).await.unwrap().is_clean());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_follower_keeps_a_decimal_sum_exact() {
    let db = replica_db().await;
    let store = Store::<Ledger>::new(&db);
    let ledger = Ledger::new();
    store.insert(&ledger).await.unwrap();
    let follower = started_follower(&store, "decimal sums").await;

    // Another program writes entries with plain driver calls.
    let children = db.collection::<Document>("ledger_entries");
    let raw = |e: &Entry| {
        let mut d = subset::bson_compat::to_document(e).unwrap();
        d.insert("ledger_id", ledger.id);
        d
    };
    let written: Vec<Entry> = (0..200).map(|i| entry(i, "0.10")).collect();
    children.insert_many(written.iter().map(raw)).await.unwrap();
    children
        .update_one(
            doc! { "_id": written[0].id },
            doc! { "$set": { "amount": dec("2.35") } },
        )
        .await
        .unwrap();
    children
        .delete_one(doc! { "_id": written[1].id })
        .await
        .unwrap();

    // 198 dimes and 2.35.
    let expected = dec("22.15");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = store.get(&ledger.id).await.unwrap().unwrap();
        if (got.entries, got.balance) == (199, expected) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower left {:?}",
            (got.entries, got.balance.to_string())
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    follower.stop().await.unwrap();
    assert_balance(&store, &ledger.id, "22.15").await;
    assert!(store
        .children(Ledger::RECENT)
        .check(&ledger.id)
        .await
        .unwrap()
        .is_clean());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_adopted_without_entries_starts_with_a_decimal_zero() {
    for store in stores::<Ledger>().await {
        // Written by another program: no entries, and no balance field at all.
        let id = ObjectId::new();
        store
            .database()
            .collection::<Document>("decimal_ledgers")
            .insert_one(doc! { "_id": id, "recent": [] })
            .await
            .unwrap();
        let entries = store.children(Ledger::RECENT);
        entries.raw().adopt(&Bson::ObjectId(id)).await.unwrap();
        let stored = store
            .database()
            .collection::<Document>("decimal_ledgers")
            .find_one(doc! { "_id": id })
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(stored.get("balance"), Some(Bson::Decimal128(_))),
            "{stored}"
        );
        assert_eq!(store.get(&id).await.unwrap().unwrap().balance, dec("0"));
    }
}
