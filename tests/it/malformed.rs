//! Children written around the library with a sort key missing or of another type, a filter
//! flag that is not a `bool`, or a summed field that is not a number: no check, reconcile or
//! follower embeds one (so `get` never fails on it); each reports it, naming the parent, the
//! child and the field, and keeps the rest of the parent true.

use crate::common;

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::{replica_db, stores};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::follow::FollowOptions;
use subset::{Child, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Vote {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
    verified: bool,
    stars: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "polls")]
struct Poll {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "votes",
        key = "poll_id",
        keep = 5,
        sort = "date desc",
        count = "n",
        sum = "total = stars"
    )]
    latest: Vec<Vote>,
    #[subset(
        child = "votes",
        key = "poll_id",
        keep = 3,
        sort = "date desc",
        filter = "verified",
        count = "verified_n"
    )]
    verified: Vec<Vote>,
    #[serde(default)]
    n: i64,
    #[serde(default)]
    total: i64,
    #[serde(default)]
    verified_n: i64,
}

fn vote(millis: i64) -> Vote {
    Vote {
        id: ObjectId::new(),
        date: DateTime::from_millis(millis),
        verified: true,
        stars: 2,
    }
}

/// A poll with 3 good votes, then four malformed ones written with the driver, each newer than
/// every good one (a missing date sorts last instead): (poll, malformed ids by field).
async fn seeded(store: &Store<Poll>) -> (Poll, Vec<(Bson, &'static str)>) {
    let poll = Poll {
        id: ObjectId::new(),
        latest: vec![],
        verified: vec![],
        n: 0,
        total: 0,
        verified_n: 0,
    };
    store.insert(&poll).await.unwrap();
    let good: Vec<Vote> = (1..=3).map(vote).collect();
    store
        .children(Poll::LATEST)
        .push_many(&poll.id, &good)
        .await
        .unwrap();
    let base = |millis: i64| {
        let id = ObjectId::new();
        let d = doc! { "_id": id, "poll_id": poll.id, "date": DateTime::from_millis(millis), "verified": true, "stars": 1_i64 };
        (id, d)
    };
    let (a, mut string_date) = base(10);
    string_date.insert("date", "2024-01-01");
    let (b, mut no_date) = base(11);
    no_date.remove("date");
    let (c, mut text_flag) = base(12);
    text_flag.insert("verified", "yes");
    let (d, mut text_stars) = base(13);
    text_stars.insert("stars", "5");
    store
        .database()
        .collection::<Document>("votes")
        .insert_many([string_date, no_date, text_flag, text_stars])
        .await
        .unwrap();
    let malformed = vec![
        (Bson::ObjectId(a), "date"),
        (Bson::ObjectId(b), "date"),
        (Bson::ObjectId(c), "verified"),
        (Bson::ObjectId(d), "stars"),
    ];
    (poll, malformed)
}

/// The poll, read through the library: the good votes only, newest first, with the count of
/// every stored vote (7) and the sum of every numeric `stars` (the string one adds nothing).
async fn assert_true(store: &Store<Poll>, poll: &Poll) {
    let got = store.get(&poll.id).await.unwrap().expect("the poll");
    let dates: Vec<i64> = got
        .latest
        .iter()
        .map(|v| v.date.timestamp_millis())
        .collect();
    assert_eq!(dates, [3, 2, 1], "only well-formed votes are embedded");
    assert_eq!(got.verified.len(), 3);
    // Counted: they are stored children; a page walk reaches and names them.
    assert_eq!((got.n, got.total), (7, 3 * 2 + 3), "{got:?}");
    // The non-bool flag is in no verified view, nor counted there.
    assert_eq!(got.verified_n, 6);
}

fn assert_reported(found: &[(Bson, String)], malformed: &[(Bson, &str)]) {
    for (id, field) in malformed {
        assert!(
            found.iter().any(|(i, f)| i == id && f == field),
            "{id} `{field}` reported in {found:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_leaves_malformed_children_out_and_reports_each() {
    for store in stores::<Poll>().await {
        let (poll, malformed) = seeded(&store).await;
        let latest = store.children(Poll::LATEST);
        let drift = latest.reconcile(&poll.id).await.unwrap();
        let found: Vec<(Bson, String)> = drift
            .malformed
            .iter()
            .map(|m| (m.child.clone(), m.field.clone()))
            .collect();
        assert_reported(&found, &malformed);
        assert!(drift.fixed, "the sum is rewritten: {drift:?}");
        let problem = &drift
            .malformed
            .iter()
            .find(|m| m.field == "date" && m.problem.contains("string"))
            .expect("the string date")
            .problem;
        assert!(problem.contains("date"), "{problem}");
        store
            .children(Poll::VERIFIED)
            .reconcile(&poll.id)
            .await
            .unwrap();
        assert_true(&store, &poll).await;
        // Checked again: in sync, and the malformed children still reported.
        let drift = latest.check(&poll.id).await.unwrap();
        assert!(drift.is_in_sync() && !drift.is_clean(), "{drift:?}");
        assert_eq!(drift.malformed.len(), 4, "{drift:?}");
        // A sweep counts them, and the parent is not "drifted" once its subsets are true.
        let report = store.check_all().await.unwrap();
        assert_eq!(
            (report.progress.drifted, report.progress.malformed),
            (0, 8),
            "both views report the four: {report:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remove_never_backfills_a_malformed_child() {
    for store in stores::<Poll>().await {
        let (poll, _) = seeded(&store).await;
        let latest = store.children(Poll::LATEST);
        latest.reconcile(&poll.id).await.unwrap();
        let got = store.get(&poll.id).await.unwrap().unwrap();
        // Removing a good vote backfills from the collection: the malformed ones stay out.
        latest.remove(&poll.id, &got.latest[0].id).await.unwrap();
        let got = store
            .get(&poll.id)
            .await
            .unwrap()
            .expect("get still reads the poll");
        assert_eq!(got.latest.len(), 2, "{got:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_follower_embeds_no_malformed_child_and_counts_them() {
    let store = Store::<Poll>::new(&replica_db().await);
    let (poll, _) = seeded(&store).await;
    let follower = store.follow(FollowOptions::new("malformed")).spawn();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A fifth one, written while the follower runs.
    store
        .database()
        .collection::<Document>("votes")
        .insert_one(doc! { "_id": ObjectId::new(), "poll_id": poll.id, "date": 42, "verified": true, "stars": 1_i64 })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = store.get(&poll.id).await.unwrap().expect("get never fails");
        if got.n == 8 || tokio::time::Instant::now() > deadline {
            assert_eq!(got.n, 8, "the follower recounted the poll");
            assert_eq!(got.latest.len(), 3, "{got:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats = follower.stop().await.unwrap();
    assert!(stats.malformed >= 5, "{stats:?}");
}
