//! Counts and sums within their Rust types: every write that would carry one past what the
//! parent's field holds is refused with `Error::NumberOverflow`, naming the parent, the field,
//! the type and the arithmetic, and leaves nothing behind, in both write modes; the parent
//! always decodes.

use crate::common;

use std::time::Duration;

use bson::oid::ObjectId;
use bson::{doc, DateTime, Document};
use common::stores;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Child, Error, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Vote {
    #[serde(rename = "_id")]
    id: ObjectId,
    small: i32,
    big: i64,
    date: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "tallies")]
struct Tally {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "tally_votes",
        keep = 3,
        sort = "date desc",
        count = "n",
        sum = "small_total = small, big_total = big"
    )]
    recent: Vec<Vote>,
    #[serde(default)]
    n: u32,
    #[serde(default)]
    small_total: i32,
    #[serde(default)]
    big_total: i64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            id: ObjectId::new(),
            recent: Vec::new(),
            n: 0,
            small_total: 0,
            big_total: 0,
        }
    }
}

fn vote(millis: i64, small: i32, big: i64) -> Vote {
    Vote {
        id: ObjectId::new(),
        small,
        big,
        date: DateTime::from_millis(millis),
    }
}

/// The parent as stored (it must decode) and the `_id`s of its children in the collection.
async fn state(store: &Store<Tally>, id: &ObjectId) -> (Tally, Vec<bson::Bson>) {
    let tally = store.get(id).await.unwrap().expect("the parent is there");
    let mut children: Vec<bson::Bson> = store
        .database()
        .collection::<Document>("tally_votes")
        .distinct("_id", doc! { "tally_id": id })
        .await
        .unwrap();
    children.sort_by_key(|b| b.to_string());
    (tally, children)
}

fn assert_overflow(err: &Error, id: &ObjectId, field: &str, ty: &str) {
    match err {
        Error::NumberOverflow {
            collection,
            id: parent,
            field: f,
            ty: t,
            arithmetic,
        } => {
            assert_eq!(collection, "tallies");
            assert_eq!(**parent, bson::Bson::ObjectId(*id));
            assert_eq!((f.as_str(), t.as_str()), (field, ty), "{err}");
            assert!(!arithmetic.is_empty());
        }
        other => panic!("expected NumberOverflow of `{field}`, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(field) && text.contains(ty), "{text}");
}

/// Asserts that `store`'s parent `id` is as `before`, decodes, and checks clean.
async fn assert_unchanged(store: &Store<Tally>, id: &ObjectId, before: &(Tally, Vec<bson::Bson>)) {
    let after = state(store, id).await;
    assert_eq!(after.1, before.1, "the children");
    assert_eq!(
        (after.0.n, after.0.small_total, after.0.big_total),
        (before.0.n, before.0.small_total, before.0.big_total)
    );
    let drift = store.children(Tally::RECENT).check(id).await.unwrap();
    assert!(drift.is_clean(), "{drift:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_past_an_i32_sum_is_refused_and_leaves_nothing() {
    for store in stores::<Tally>().await {
        let tally = Tally::new();
        store.insert(&tally).await.unwrap();
        let votes = store.children(Tally::RECENT);
        votes
            .push(&tally.id, &vote(1, i32::MAX - 10, 0))
            .await
            .unwrap();
        let before = state(&store, &tally.id).await;

        let err = votes.push(&tally.id, &vote(2, 100, 0)).await.unwrap_err();
        assert_overflow(&err, &tally.id, "small_total", "i32");
        assert!(err.to_string().contains("2147483637 + 100"), "{err}");
        assert_unchanged(&store, &tally.id, &before).await;
        // Within the type, pushes go on.
        votes.push(&tally.id, &vote(3, 10, 0)).await.unwrap();
        assert_eq!(state(&store, &tally.id).await.0.small_total, i32::MAX);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_whose_values_add_up_past_i64_is_refused_before_anything_is_written() {
    for store in stores::<Tally>().await {
        let tally = Tally::new();
        store.insert(&tally).await.unwrap();
        let votes = store.children(Tally::RECENT);
        let before = state(&store, &tally.id).await;
        let batch = [vote(1, 0, i64::MAX - 10), vote(2, 0, 100)];
        let err = votes.push_many(&tally.id, &batch).await.unwrap_err();
        assert_overflow(&err, &tally.id, "big_total", "i64");
        assert_unchanged(&store, &tally.id, &before).await;

        // One at a time: the server refuses the second's `$inc` past `i64` (the update carries
        // no condition of its own for it), and the refusal is named as the condition's was.
        votes.push(&tally.id, &batch[0]).await.unwrap();
        let before = state(&store, &tally.id).await;
        let err = votes.push(&tally.id, &batch[1]).await.unwrap_err();
        assert_overflow(&err, &tally.id, "big_total", "i64");
        assert_unchanged(&store, &tally.id, &before).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn patches_updates_and_removes_past_a_sum_are_refused() {
    for store in stores::<Tally>().await {
        let tally = Tally::new();
        store.insert(&tally).await.unwrap();
        let votes = store.children(Tally::RECENT);
        let (top, low, small) = (vote(1, i32::MAX, 0), vote(2, -100, 0), vote(3, 50, 0));
        votes
            .push_many(&tally.id, &[top, low.clone(), small.clone()])
            .await
            .unwrap();
        let before = state(&store, &tally.id).await;
        assert_eq!(before.0.small_total, i32::MAX - 50);

        // An inc and a set of a summed child field.
        let err = votes
            .patch(&tally.id, &small.id)
            .inc(Vote::SMALL, 100)
            .await
            .unwrap_err();
        assert_overflow(&err, &tally.id, "small_total", "i32");
        assert_unchanged(&store, &tally.id, &before).await;
        let err = votes
            .patch(&tally.id, &low.id)
            .set(Vote::SMALL, 0)
            .await
            .unwrap_err();
        assert_overflow(&err, &tally.id, "small_total", "i32");
        assert_unchanged(&store, &tally.id, &before).await;
        // A replacement.
        let mut bigger = small.clone();
        bigger.small = 1_000;
        let err = votes.update(&tally.id, &bigger).await.unwrap_err();
        assert_overflow(&err, &tally.id, "small_total", "i32");
        assert_unchanged(&store, &tally.id, &before).await;
        // Taking away a negative value adds it.
        let err = votes.remove(&tally.id, &low.id).await.unwrap_err();
        assert_overflow(&err, &tally.id, "small_total", "i32");
        assert_unchanged(&store, &tally.id, &before).await;
        // Across parents: the child stays where it was.
        let other = Tally::new();
        store.insert(&other).await.unwrap();
        votes
            .push(&other.id, &vote(9, i32::MAX - 1, 0))
            .await
            .unwrap();
        let elsewhere = state(&store, &other.id).await;
        let err = votes
            .move_child(&tally.id, &small.id, &other.id)
            .await
            .unwrap_err();
        assert_overflow(&err, &other.id, "small_total", "i32");
        assert_unchanged(&store, &tally.id, &before).await;
        assert_unchanged(&store, &other.id, &elsewhere).await;
        // In bulk: the parent fails, the others go on.
        let report = votes
            .patch_where(doc! { "_id": small.id })
            .set(Vote::SMALL, 1_000)
            .await
            .unwrap();
        assert_eq!(report.progress.failed, 1, "{report:?}");
        assert!(
            matches!(report.failures[0].error, Error::NumberOverflow { .. }),
            "{report:?}"
        );
        assert_unchanged(&store, &tally.id, &before).await;
        let report = votes.remove_where(doc! { "_id": low.id }).await.unwrap();
        assert_eq!(report.progress.failed, 1, "{report:?}");
        assert_unchanged(&store, &tally.id, &before).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recount_past_the_type_is_refused_and_the_parent_still_decodes() {
    for store in stores::<Tally>().await {
        let tally = Tally::new();
        store.insert(&tally).await.unwrap();
        let votes = store.children(Tally::RECENT);
        votes.push(&tally.id, &vote(1, i32::MAX, 0)).await.unwrap();
        // Another program adds a child whose value the sum cannot take.
        let mut raw = bson_compat::to_document(&vote(2, 1, 0)).unwrap();
        raw.insert("tally_id", tally.id);
        store
            .database()
            .collection::<Document>("tally_votes")
            .insert_one(raw)
            .await
            .unwrap();
        for _ in 0..2 {
            let err = votes.reconcile(&tally.id).await.unwrap_err();
            assert_overflow(&err, &tally.id, "small_total", "i32");
        }
        let (parent, children) = state(&store, &tally.id).await;
        assert_eq!((parent.small_total, children.len()), (i32::MAX, 2));
    }
}

/// Which sum a race test carries past its type: the `i32` one, kept in range by a condition of
/// the parent update, or the `i64` one, whose `$inc` past `i64` the server refuses itself.
#[derive(Clone, Copy)]
enum Sum {
    Small,
    Big,
}

impl Sum {
    /// A vote adding `by` to this sum only.
    fn vote(self, millis: i64, by: i64) -> Vote {
        match self {
            Sum::Small => vote(millis, by as i32, 0),
            Sum::Big => vote(millis, 0, by),
        }
    }

    /// The sum's maximum, its field and its type.
    fn of(self) -> (i64, &'static str, &'static str) {
        match self {
            Sum::Small => (i32::MAX.into(), "small_total", "i32"),
            Sum::Big => (i64::MAX, "big_total", "i64"),
        }
    }

    fn stored(self, tally: &Tally) -> i64 {
        match self {
            Sum::Small => tally.small_total.into(),
            Sum::Big => tally.big_total,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_pushes_that_fit_alone_but_not_together_end_with_one_refused() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for sum in [Sum::Small, Sum::Big] {
        let (max, field, ty) = sum.of();
        for store in stores::<Tally>().await {
            let tally = Tally::new();
            store.insert(&tally).await.unwrap();
            let votes = store.children(Tally::RECENT);
            votes
                .push(&tally.id, &sum.vote(1, max - 150))
                .await
                .unwrap();

            // The first push's parent update is held by the server while the second one runs.
            let app = format!("overflow-{}", ObjectId::new().to_hex());
            let held = crate::mutations::on_own_client(&store, &app).await;
            crate::mutations::hold_next_for(&store, &app, "update", Duration::from_millis(600))
                .await;
            let first = sum.vote(2, 100);
            let id = tally.id;
            let slow =
                tokio::spawn(async move { held.children(Tally::RECENT).push(&id, &first).await });
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            let fast = votes.push(&tally.id, &sum.vote(3, 100)).await;
            let slow = slow.await.unwrap();
            crate::mutations::release(&store).await;

            let refused: Vec<&Error> = [&slow, &fast]
                .into_iter()
                .filter_map(|r| r.as_ref().err())
                .collect();
            assert_eq!(refused.len(), 1, "slow {slow:?}, fast {fast:?}");
            assert_overflow(refused[0], &tally.id, field, ty);
            let (parent, children) = state(&store, &tally.id).await;
            assert_eq!(
                (sum.stored(&parent), parent.n, children.len()),
                (max - 50, 2, 2)
            );
            let drift = votes.check(&tally.id).await.unwrap();
            assert!(drift.is_clean(), "{drift:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_past_an_i64_sum_fails_alone_among_pushes_to_other_parents() {
    for store in stores::<Tally>().await {
        let tallies: Vec<Tally> = (0..8).map(|_| Tally::new()).collect();
        for tally in &tallies {
            store.insert(tally).await.unwrap();
        }
        let votes = store.children(Tally::RECENT);
        let full = tallies[0].id;
        votes.push(&full, &vote(1, 0, i64::MAX - 10)).await.unwrap();
        let before = state(&store, &full).await;

        // Concurrent pushes to eight parents, which transactions carry together where they can:
        // the refused one must not take the others with it.
        let pushes = tallies.iter().enumerate().map(|(i, tally)| {
            let votes = store.children(Tally::RECENT);
            let child = vote(2 + i as i64, 1, 100);
            async move { votes.push(&tally.id, &child).await }
        });
        let results = futures::future::join_all(pushes).await;
        assert_overflow(results[0].as_ref().unwrap_err(), &full, "big_total", "i64");
        assert_unchanged(&store, &full, &before).await;
        for (tally, result) in tallies.iter().zip(&results).skip(1) {
            result.as_ref().expect("a push within range");
            let (parent, children) = state(&store, &tally.id).await;
            assert_eq!(
                (
                    parent.n,
                    parent.small_total,
                    parent.big_total,
                    children.len()
                ),
                (1, 1, 100, 1)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_follower_passes_over_a_parent_whose_sum_its_type_cannot_hold() {
    let store = Store::<Tally>::new(&common::replica_db().await);
    let (full, other) = (Tally::new(), Tally::new());
    store.insert(&full).await.unwrap();
    store.insert(&other).await.unwrap();
    let votes = store.children(Tally::RECENT);
    votes.push(&full.id, &vote(1, i32::MAX, 0)).await.unwrap();
    let follower = crate::sums::started_follower(&store, "overflow").await;

    // Another program adds a vote the sum cannot take, then one to another parent.
    let children = store.database().collection::<Document>("tally_votes");
    let raw = |parent: &ObjectId, v: &Vote| {
        let mut d = bson_compat::to_document(v).unwrap();
        d.insert("tally_id", *parent);
        d
    };
    children
        .insert_one(raw(&full.id, &vote(2, 1, 0)))
        .await
        .unwrap();
    children
        .insert_one(raw(&other.id, &vote(3, 7, 0)))
        .await
        .unwrap();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while follower.stats().failed == 0 || state(&store, &other.id).await.0.small_total != 7 {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            follower.stats()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!follower.is_finished(), "the follower goes on");
    // The parent still decodes, with the sum it held.
    assert_eq!(state(&store, &full.id).await.0.small_total, i32::MAX);
    follower.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_inserted_with_children_past_a_sum_is_refused_whole() {
    for store in stores::<Tally>().await {
        let mut tally = Tally::new();
        tally.recent = vec![vote(1, i32::MAX, 0), vote(2, 1, 0)];
        let err = store.insert(&tally).await.unwrap_err();
        assert_overflow(&err, &tally.id, "small_total", "i32");
        assert!(store.get(&tally.id).await.unwrap().is_none());
        let left = store
            .database()
            .collection::<Document>("tally_votes")
            .count_documents(doc! { "tally_id": tally.id })
            .await
            .unwrap();
        assert_eq!(left, 0);
    }
}
