//! Children written around the library with a sort key missing or of another type, a filter
//! flag that is not a `bool`, or a summed field that is not a number: no check, reconcile or
//! follower embeds one (so `get` never fails on it); each reports it, naming the parent, the
//! child and the field, and keeps the rest of the parent true. A first page shows one the same
//! way whatever the parent's bookkeeping: built, outdated, rebuilt or unmarked.

use crate::common;

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::{replica_db, stores};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::follow::FollowOptions;
use subset::{Child, Error, PageRequest, Store, Subset};

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
        let parent = Bson::ObjectId(poll.id);
        assert!(
            drift.malformed.iter().all(|m| m.parent == parent),
            "each names its parent: {drift:?}"
        );
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "threads")]
struct Thread {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "comments",
        key = "thread_id",
        keep = 5,
        sort = "date desc",
        count = "n"
    )]
    comments: Vec<Comment>,
    #[serde(default)]
    n: i64,
}

/// The same collection under another definition of its view (no count): a rebuild by it leaves
/// `Thread`'s view outdated.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "threads")]
struct UncountedThread {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(child = "comments", key = "thread_id", keep = 5, sort = "date desc")]
    comments: Vec<Comment>,
}

/// A first page as compared across states: the `_id`s and `has_next`, or the malformed child
/// and field it failed at.
type FirstPage = std::result::Result<(Vec<ObjectId>, bool), (Bson, String)>;

async fn first(store: &Store<Thread>, id: &ObjectId, size: u32) -> FirstPage {
    let page = store
        .children(Thread::COMMENTS)
        .page(id, &PageRequest::first(size))
        .await;
    match page {
        Ok(page) => Ok((page.items.iter().map(|c| c.id).collect(), page.has_next())),
        Err(Error::MalformedChild { id, field, .. }) => Err((*id, field)),
        Err(other) => panic!("a page fails only at the malformed child: {other}"),
    }
}

/// The first pages of 5 (past the malformed child), 2 and 1.
async fn pages(store: &Store<Thread>, id: &ObjectId) -> [FirstPage; 3] {
    [
        first(store, id, 5).await,
        first(store, id, 2).await,
        first(store, id, 1).await,
    ]
}

/// The parent as stored: the embedded `_id`s and the note of malformed children in its head.
async fn stored(store: &Store<Thread>, id: &ObjectId) -> (Vec<Bson>, Option<Bson>) {
    let parent = store
        .database()
        .collection::<Document>("threads")
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .expect("the thread");
    let ids = parent
        .get_array("comments")
        .unwrap()
        .iter()
        .map(|c| c.as_document().unwrap().get("_id").unwrap().clone())
        .collect();
    let note = parent
        .get_document("_subset")
        .ok()
        .and_then(|m| m.get_document("v").ok())
        .and_then(|v| v.get_document("comments").ok())
        .and_then(|c| c.get("m").cloned());
    (ids, note)
}

/// A thread with two good comments and one whose `date` another program wrote as a string
/// (strings sort after dates, newest first: it is the third): (thread, good ids newest first,
/// the malformed id).
async fn string_dated(store: &Store<Thread>) -> (Thread, Vec<ObjectId>, Bson) {
    let thread = Thread {
        id: ObjectId::new(),
        comments: vec![],
        n: 0,
    };
    store.insert(&thread).await.unwrap();
    let good: Vec<Comment> = [2_000, 1_000]
        .into_iter()
        .map(|millis| Comment {
            id: ObjectId::new(),
            date: DateTime::from_millis(millis),
        })
        .collect();
    store
        .children(Thread::COMMENTS)
        .push_many(&thread.id, &good)
        .await
        .unwrap();
    let bad = ObjectId::new();
    store
        .database()
        .collection::<Document>("comments")
        .insert_one(doc! { "_id": bad, "thread_id": thread.id, "date": "2024-01-01" })
        .await
        .unwrap();
    let good = good.iter().map(|c| c.id).collect();
    (thread, good, Bson::ObjectId(bad))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_page_is_the_same_on_built_outdated_rebuilt_and_unmarked_parents() {
    for store in stores::<Thread>().await {
        let mode = store.mode().await.unwrap();
        let (thread, good, bad) = string_dated(&store).await;
        let comments = store.children(Thread::COMMENTS);
        let drift = comments.reconcile(&thread.id).await.unwrap();
        assert_eq!(
            drift.malformed_in_head,
            std::slice::from_ref(&bad),
            "{mode:?}: {drift:?}"
        );
        assert!(drift.malformed_note && drift.fixed, "{mode:?}: {drift:?}");
        let drift = comments.check(&thread.id).await.unwrap();
        assert!(
            drift.is_in_sync() && !drift.is_clean(),
            "{mode:?}: {drift:?}"
        );
        assert_eq!(drift.malformed_in_head, std::slice::from_ref(&bad));
        let good_ids: Vec<Bson> = good.iter().map(|g| Bson::ObjectId(*g)).collect();
        assert_eq!(
            stored(&store, &thread.id).await,
            (good_ids.clone(), Some(Bson::Int64(1))),
            "{mode:?}: nothing malformed embedded, and the head noted"
        );
        let report = store.check_all().await.unwrap();
        assert_eq!(
            (report.progress.drifted, report.progress.malformed),
            (0, 1),
            "{mode:?}: {report:?}"
        );

        // What the child collection says: the third child fails the page that reaches it,
        // and a page short of it says more follow.
        let failed: FirstPage = Err((bad.clone(), "date".to_owned()));
        let two: FirstPage = Ok((good.clone(), true));
        let one: FirstPage = Ok((good[..1].to_vec(), true));
        let expect = |state: &str, pages: [FirstPage; 3]| {
            assert_eq!(
                pages,
                [failed.clone(), two.clone(), one.clone()],
                "{mode:?}, {state}"
            );
        };
        expect("built", pages(&store, &thread.id).await);

        // Outdated: rebuilt under another definition of the view.
        let other = Store::<UncountedThread>::with_options(
            store.database(),
            subset::StoreOptions::new().mode(mode),
        );
        other.rebuild().await.unwrap();
        assert!(comments.check(&thread.id).await.unwrap().outdated);
        expect("outdated", pages(&store, &thread.id).await);

        // Rebuilt under this one again: the rebuild's marking notes the head.
        store.rebuild().await.unwrap();
        assert_eq!(
            stored(&store, &thread.id).await,
            (good_ids.clone(), Some(Bson::Int64(1))),
            "{mode:?}: rebuilt"
        );
        expect("rebuilt", pages(&store, &thread.id).await);

        // Unmarked (written before markers, or by another program): no note, but the count
        // says the two embedded are not all.
        store
            .database()
            .collection::<Document>("threads")
            .update_one(
                doc! { "_id": thread.id },
                doc! { "$unset": { "_subset": "" } },
            )
            .await
            .unwrap();
        assert_eq!(stored(&store, &thread.id).await.1, None);
        expect("unmarked", pages(&store, &thread.id).await);
        // A check finds the note missing; a reconcile writes it.
        assert!(comments.check(&thread.id).await.unwrap().malformed_note);
        comments.reconcile(&thread.id).await.unwrap();
        assert_eq!(stored(&store, &thread.id).await.1, Some(Bson::Int64(1)));
        expect("unmarked, noted", pages(&store, &thread.id).await);

        // Fixed in the child collection: the note is out of date until a reconcile clears it,
        // and the page reads the three either way.
        store
            .database()
            .collection::<Document>("comments")
            .update_one(
                doc! { "_id": bad.clone() },
                doc! { "$set": { "date": DateTime::from_millis(500) } },
            )
            .await
            .unwrap();
        let mut all = good.clone();
        all.push(bad.as_object_id().unwrap());
        assert_eq!(first(&store, &thread.id, 5).await, Ok((all.clone(), false)));
        let drift = comments.reconcile(&thread.id).await.unwrap();
        assert!(
            drift.malformed_note && drift.malformed_in_head.is_empty() && drift.fixed,
            "{mode:?}: {drift:?}"
        );
        assert_eq!(stored(&store, &thread.id).await.1, None);
        assert!(comments.check(&thread.id).await.unwrap().is_clean());
        assert_eq!(first(&store, &thread.id, 5).await, Ok((all, false)));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remove_notes_a_malformed_child_its_backfill_meets() {
    for store in stores::<Thread>().await {
        let mode = store.mode().await.unwrap();
        let (thread, good, bad) = string_dated(&store).await;
        let comments = store.children(Thread::COMMENTS);
        // Built, never reconciled: the remove's recompute finds the malformed one in the head.
        comments.remove(&thread.id, &good[0]).await.unwrap();
        let (embedded, note) = stored(&store, &thread.id).await;
        assert_eq!(embedded, [Bson::ObjectId(good[1])], "{mode:?}");
        assert_eq!(note, Some(Bson::Int64(1)), "{mode:?}");
        assert_eq!(
            first(&store, &thread.id, 5).await,
            Err((bad.clone(), "date".to_owned()))
        );
        assert_eq!(
            first(&store, &thread.id, 1).await,
            Ok((vec![good[1]], true)),
            "{mode:?}: more follow"
        );
    }
}
