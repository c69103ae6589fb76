//! Writers of one parent that race, in both write modes: the step between two writes of one
//! operation held open by the server (`failCommand` with `blockConnection`) while another
//! operation writes the same parent, and a storm of mixed writers; every copy, view, count and
//! sum must agree with the child collection afterwards, without a reconcile.

use crate::common;
use crate::mutations::{
    assert_true, hold_next_for, on_own_client, parent, product, release, review, seeded, stored,
    Product, Review,
};

use std::time::{Duration, Instant};

use futures::future::try_join_all;
use subset::bson::{doc, Document};
use subset::{Error, Store};

/// How long the server holds the one command.
const HELD: Duration = Duration::from_millis(600);

/// Holds the next `command` of the client named `app` for [`HELD`].
async fn hold_next(store: &Store<Product>, app: &str, command: &str) {
    hold_next_for(store, app, command, HELD).await;
}

/// A client of its own, named for the test, so that a fail point holds its commands alone.
async fn own(store: &Store<Product>, what: &str) -> (Store<Product>, String) {
    let app = format!("{what}-{}", subset::bson::oid::ObjectId::new().to_hex());
    (on_own_client(store, &app).await, app)
}

/// The sum of the children's `helpful` under `product`, as stored.
async fn helpful_total(store: &Store<Product>, product: i32) -> i64 {
    let children = store.database().collection::<Document>("patch_reviews");
    let mut total = 0;
    let mut cursor = children.find(doc! { "product_id": product }).await.unwrap();
    while cursor.advance().await.unwrap() {
        total += cursor
            .deserialize_current()
            .unwrap()
            .get_i64("helpful")
            .unwrap();
    }
    total
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vote_held_between_its_writes_while_a_view_is_recomputed_counts_once() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 1, 6).await;
        let (voter, app) = own(&store, "voter").await;
        // The vote's parent update is held: its child is changed already.
        hold_next(&store, &app, "update").await;
        let vote = tokio::spawn(async move {
            voter
                .children(Product::LATEST)
                .patch(&1, &6)
                .inc(Review::HELPFUL, 1)
                .await
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Meanwhile another review of the same parent is hidden and a third removed: each
        // recomputes a view that holds the voted review.
        let reviews = store.children(Product::LATEST);
        reviews
            .patch(&1, &2)
            .set(Review::HIDDEN, true)
            .await
            .unwrap();
        reviews.remove(&1, &3).await.unwrap();
        vote.await.unwrap().unwrap();
        release(&store).await;
        assert_eq!(stored(&store, 6).await.get_i64("helpful").unwrap(), 1);
        let p = parent(&store, 1).await;
        assert_eq!(p.votes, 1, "{mode:?}: the sum");
        let copy = p.visible.iter().find(|r| r.id == 6).expect("shown");
        assert_eq!(copy.helpful, 1, "{mode:?}: the copy in `visible`");
        assert_true(&store, 1, "a vote held across two recomputes").await;
        store.delete(&1).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removal_by_filter_held_before_its_delete_subtracts_what_it_deletes() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 1, 6).await;
        let spam = doc! { "author": "author 4" };
        let (remover, app) = own(&store, "remover").await;
        // The removal has read the matching children; its delete is held.
        hold_next(&store, &app, "delete").await;
        let removal =
            tokio::spawn(async move { remover.children(Product::LATEST).remove_where(spam).await });
        tokio::time::sleep(Duration::from_millis(150)).await;
        // A +5 vote on the review about to be removed: it lands before the removal (in a
        // transaction, whose delete then conflicts and starts over), or, waiting its turn,
        // after it and finds the review gone.
        let reviews = store.children(Product::LATEST);
        let vote = reviews.patch(&1, &4).inc(Review::HELPFUL, 5).await;
        assert!(
            matches!(vote, Ok(()) | Err(Error::ChildNotFound { .. })),
            "{mode:?}: {vote:?}"
        );
        println!(
            "{mode:?}: the vote {}",
            if vote.is_ok() {
                "went first"
            } else {
                "came after"
            }
        );
        let report = removal.await.unwrap().unwrap();
        release(&store).await;
        assert_eq!(report.progress.children, 1, "{mode:?}: {report:?}");
        let p = parent(&store, 1).await;
        assert_eq!(
            p.votes,
            helpful_total(&store, 1).await,
            "{mode:?}: the sum is the children's"
        );
        assert_eq!(p.total, 5, "{mode:?}");
        assert_true(&store, 1, "a removal by filter held across a vote").await;
        store.delete(&1).await.unwrap();
    }
}

/// How many tasks vote on one review while another review is hidden or removed.
const STORM: usize = 16;

#[tokio::test(flavor = "multi_thread")]
async fn a_removal_amid_a_vote_storm_finishes_in_bounded_time() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 1, 20).await;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let votes = (0..STORM).map(|_| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let reviews = store.children(Product::MOST_HELPFUL);
                let mut n = 0_u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    reviews.patch(&1, &20).inc(Review::HELPFUL, 1).await?;
                    n += 1;
                }
                Ok::<_, Error>(n)
            })
        });
        let votes: Vec<_> = votes.collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reviews = store.children(Product::LATEST);
        let mut took = Vec::new();
        for id in 1..=10 {
            let t = Instant::now();
            if id % 2 == 0 {
                reviews.remove(&1, &id).await.unwrap();
            } else {
                reviews
                    .patch(&1, &id)
                    .set(Review::HIDDEN, true)
                    .await
                    .unwrap();
            }
            took.push(t.elapsed());
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut voted = 0;
        for v in votes {
            voted += v.await.unwrap().unwrap();
        }
        took.sort();
        let longest = *took.last().unwrap();
        println!(
            "{mode:?}: 10 hides and removes amid {voted} votes from {STORM} tasks: median {:?}, longest {longest:?}",
            took[took.len() / 2]
        );
        // Bounded by the votes queued ahead, not by how many keep coming (27.7 s before turns).
        assert!(
            longest < Duration::from_secs(5),
            "{mode:?}: a removal took {longest:?}"
        );
        assert_eq!(
            stored(&store, 20).await.get_i64("helpful").unwrap() as u64,
            voted
        );
        assert_true(&store, 1, "after the storm").await;
        store.delete(&1).await.unwrap();
    }
}

/// Writers per run of [`mixed_writers_on_a_few_parents_leave_every_view_exact`].
const WRITERS: i32 = 32;
const PARENTS: i32 = 3;
/// Reviews each parent starts with.
const SEEDED: i32 = 8;

#[tokio::test(flavor = "multi_thread")]
async fn mixed_writers_on_a_few_parents_leave_every_view_exact() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        for p in 1..=PARENTS {
            store.insert(&product(p)).await.unwrap();
        }
        // Review ids are `parent * 1000 + n`, so that each writer can name its own.
        let reviews = store.children(Product::LATEST);
        for p in 1..=PARENTS {
            let seeded: Vec<Review> = (1..=SEEDED)
                .map(|n| crate::mutations::review(p * 1000 + n))
                .collect();
            reviews.push_many(&p, &seeded).await.unwrap();
        }
        let started = Instant::now();
        let writers = (0..WRITERS).map(|w| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::LATEST);
                let p = w % PARENTS + 1;
                let other = (w + 1) % PARENTS + 1;
                for round in 0..6 {
                    let target = p * 1000 + (w + round) % SEEDED + 1;
                    // Children that are gone (removed or moved by another writer) are part of
                    // the race: the call says so and writes nothing.
                    let result = match w % 8 {
                        0..=2 => {
                            reviews
                                .patch(&p, &target)
                                .inc(Review::HELPFUL, 1 + i64::from(round))
                                .await
                        }
                        3 => {
                            reviews
                                .patch(&p, &target)
                                .set(Review::HIDDEN, round % 2 == 0)
                                .await
                        }
                        4 => {
                            let fresh = 50_000 + w * 100 + round;
                            reviews.push(&p, &crate::mutations::review(fresh)).await
                        }
                        5 => reviews.remove(&p, &target).await,
                        6 => reviews.move_child(&p, &target, &other).await,
                        _ => {
                            reviews
                                .patch(&p, &target)
                                .set(Review::VERIFIED, round % 2 == 1)
                                .inc(Review::HELPFUL, -1)
                                .await
                        }
                    };
                    match result {
                        Ok(()) | Err(Error::ChildNotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok::<_, Error>(())
            }
        });
        let bulk = async {
            let store = store.clone();
            store
                .children(Product::LATEST)
                .remove_where(doc! { "author": "author 1003" })
                .await
                .map(|_| ())
        };
        let reconcile = async {
            let store = store.clone();
            for p in 1..=PARENTS {
                store
                    .children(Product::VISIBLE)
                    .reconcile(&p)
                    .await
                    .map(|_| ())?;
            }
            Ok::<_, Error>(())
        };
        let (writers, bulk, reconcile) = tokio::join!(try_join_all(writers), bulk, reconcile);
        writers.unwrap();
        bulk.unwrap();
        reconcile.unwrap();
        println!(
            "{mode:?}: {WRITERS} mixed writers in {:?}",
            started.elapsed()
        );
        for p in 1..=PARENTS {
            assert_true(&store, p, "after mixed writers, without a reconcile").await;
            let product = parent(&store, p).await;
            assert_eq!(
                product.votes,
                helpful_total(&store, p).await,
                "{mode:?}: parent {p}"
            );
        }
        // The leases are all given back.
        let leased = store
            .database()
            .collection::<Document>("patch_products")
            .count_documents(doc! { "_subset.l": { "$exists": true } })
            .await
            .unwrap();
        assert_eq!(leased, 0, "{mode:?}: leases left behind");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_whose_parent_update_is_held_past_its_lease_keeps_its_turn() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    // Ordered writes: the lease (1.5 s, renewed while its holder lives) must outlast a parent
    // update the server holds for 5 s, and the other process's writer wait for it. With
    // transactions, the second writer conflicts with the first until it commits.
    const LONG: Duration = Duration::from_secs(5);
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 1, 6).await;
        // Two processes: stores built apart share no turns, only the lease.
        let (first, app) = own(&store, "slow-holder").await;
        let (second, _) = own(&store, "next-writer").await;
        hold_next_for(&store, &app, "update", LONG).await;
        let started = Instant::now();
        let slow = tokio::spawn(async move {
            let done = first
                .children(Product::LATEST)
                .patch(&1, &6)
                .inc(Review::HELPFUL, 1)
                .await;
            (done, started.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        second
            .children(Product::LATEST)
            .patch(&1, &6)
            .inc(Review::HELPFUL, 1)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: the second writer: {e}"));
        let waited = started.elapsed();
        let (done, slow_took) = slow.await.unwrap();
        release(&store).await;
        done.unwrap_or_else(|e| panic!("{mode:?}: the held writer lost its turn: {e}"));
        assert!(
            slow_took >= LONG,
            "{mode:?}: the update was not held ({slow_took:.2?})"
        );
        assert!(
            waited >= slow_took,
            "{mode:?}: the second writer ended after {waited:.2?}, before the held one \
             ({slow_took:.2?})"
        );
        assert_eq!(
            stored(&store, 6).await.get_i64("helpful").unwrap(),
            2,
            "{mode:?}"
        );
        assert_eq!(helpful_total(&store, 1).await, 2, "{mode:?}");
        let p = parent(&store, 1).await;
        assert_eq!(p.votes, 2, "{mode:?}: the sum");
        let copy = p
            .latest
            .iter()
            .find(|r| r.id == 6)
            .expect("among the latest");
        assert_eq!(copy.helpful, 2, "{mode:?}: the copy in `latest`");
        assert_true(&store, 1, "a slow holder and a writer behind it").await;
        store.delete(&1).await.unwrap();
    }
}

/// The keys of `product`'s marker that hold a lease (exclusive `l`, or shared `l_…`).
async fn leases_left(store: &Store<Product>, product: i32) -> Vec<String> {
    let products = store.database().collection::<Document>("patch_products");
    let found = products
        .find_one(doc! { "_id": product })
        .await
        .unwrap()
        .expect("the product is stored");
    let marker = found.get_document("_subset").cloned().unwrap_or_default();
    marker
        .keys()
        .filter(|k| k.starts_with('l'))
        .cloned()
        .collect()
}

/// Pushes review `held` to `product` from a process of its own whose parent update the server
/// holds for [`HELD`], and meanwhile runs `then` from another process on its own store: when
/// `then` ended and when the held push did, counted from the push's start.
async fn beside_a_held_push<F, Fut>(
    store: &Store<Product>,
    product: i32,
    held: i32,
    then: F,
) -> (Duration, Duration)
where
    F: FnOnce(Store<Product>) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let mode = store.mode().await.unwrap();
    let (first, app) = own(store, "held-push").await;
    let (second, _) = own(store, "beside").await;
    hold_next(store, &app, "update").await;
    let started = Instant::now();
    let pushing = tokio::spawn(async move {
        let done = first
            .children(Product::LATEST)
            .push(&product, &review(held))
            .await;
        (done, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    then(second)
        .await
        .unwrap_or_else(|e| panic!("{mode:?}: beside the held push: {e}"));
    let then_took = started.elapsed();
    let (done, held_took) = pushing.await.unwrap();
    release(store).await;
    done.unwrap_or_else(|e| panic!("{mode:?}: the held push: {e}"));
    assert!(held_took >= HELD, "{mode:?}: not held ({held_took:.2?})");
    (then_took, held_took)
}

#[tokio::test(flavor = "multi_thread")]
async fn pushes_from_two_processes_write_one_parent_at_once() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    // Without transactions pushes share the parent's lease: a second process's push does not
    // wait for a first one whose parent update the server holds. With transactions the two
    // may conflict, and one starts over once the other commits. Both end in the parent, once.
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 40, 3).await;
        let (second_took, _) = beside_a_held_push(&store, 40, 4, |second| async move {
            second.children(Product::LATEST).push(&40, &review(5)).await
        })
        .await;
        if mode == subset::WriteMode::Ordered {
            assert!(
                second_took < HELD,
                "{mode:?}: the second push waited for the held one ({second_took:.2?})"
            );
        }
        let p = parent(&store, 40).await;
        assert_eq!(p.total, 5, "{mode:?}: the count");
        let latest: Vec<i32> = p.latest.iter().map(|r| r.id).collect();
        assert_eq!(latest, [5, 4, 3], "{mode:?}");
        assert_true(&store, 40, "two pushes from two processes at once").await;
        assert!(
            leases_left(&store, 40).await.is_empty(),
            "{mode:?}: {:?}",
            leases_left(&store, 40).await
        );
        store.delete(&40).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removal_from_another_process_waits_for_the_pushes_under_way() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    // A removal refills the views from the child collection: without transactions it takes
    // the lease alone, after the pushes that share it are done, so that it neither misses
    // their children nor counts them twice.
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 41, 6).await;
        let (removal_took, held_took) = beside_a_held_push(&store, 41, 7, |second| async move {
            second.children(Product::LATEST).remove(&41, &6).await
        })
        .await;
        if mode == subset::WriteMode::Ordered {
            assert!(
                removal_took >= held_took,
                "{mode:?}: the removal ended after {removal_took:.2?}, before the held push \
                 ({held_took:.2?})"
            );
        }
        let p = parent(&store, 41).await;
        assert_eq!(p.total, 6, "{mode:?}: six, one pushed, one removed");
        let latest: Vec<i32> = p.latest.iter().map(|r| r.id).collect();
        assert_eq!(latest, [7, 5, 4], "{mode:?}");
        assert_true(&store, 41, "a removal behind a push from another process").await;
        assert!(leases_left(&store, 41).await.is_empty(), "{mode:?}");
        store.delete(&41).await.unwrap();
    }
}

/// What a push of review `id` to `product` killed between its insert and its parent update
/// leaves: its child stored, not embedded nor counted, and its shared lease lapsed.
async fn stopped_push(db: &mongodb::Database, product: i32, id: i32) {
    let mut child = subset::bson_compat::to_document(&review(id)).unwrap();
    child.insert("product_id", product);
    db.collection::<Document>("patch_reviews")
        .insert_one(child)
        .await
        .unwrap();
    let lapsed = subset::bson::DateTime::from_millis(
        subset::bson::DateTime::now().timestamp_millis() - 1_000,
    );
    let key = format!("_subset.l_{}", subset::bson::oid::ObjectId::new().to_hex());
    db.collection::<Document>("patch_products")
        .update_one(doc! { "_id": product }, doc! { "$set": { key: lapsed } })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_stopped_between_its_writes_is_computed_by_reads_and_settled_by_the_next_push() {
    // Only writes without a transaction take leases: a transaction leaves nothing half done.
    let store = Store::<Product>::with_options(
        &common::replica_db().await,
        subset::StoreOptions::new().mode(subset::WriteMode::Ordered),
    );
    seeded(&store, 42, 3).await;
    stopped_push(store.database(), 42, 4).await;

    // Reads compute the parent from the child collection.
    let p = parent(&store, 42).await;
    let latest: Vec<i32> = p.latest.iter().map(|r| r.id).collect();
    assert_eq!(latest, [4, 3, 2], "a read of the stopped push's parent");
    assert_eq!(p.total, 4, "its count");

    // The next push cannot share a lapsed lease: it takes it alone, clears the lapsed one and
    // settles the parent after its own write.
    store
        .children(Product::LATEST)
        .push(&42, &review(5))
        .await
        .unwrap();
    assert!(
        leases_left(&store, 42).await.is_empty(),
        "{:?}",
        leases_left(&store, 42).await
    );
    let p = parent(&store, 42).await;
    assert_eq!(p.total, 5);
    let latest: Vec<i32> = p.latest.iter().map(|r| r.id).collect();
    assert_eq!(latest, [5, 4, 3]);
    assert_true(&store, 42, "after the next push settled a stopped one").await;
    store.delete(&42).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_pushes_that_meets_a_stopped_push_gives_its_leases_back_and_settles_it() {
    // Without transactions, pushes to several parents queued while another is in flight take
    // their shared leases in one `update`, which matches no parent with a lapsed shared lease
    // (a push stopped between its writes). The group then gives back every lease it took and
    // each push goes alone; the one that meets the stopped push settles its parent. Whether
    // pushes queue is timing: the scenario is repeated until a group's take was seen.
    let (db, log) = common::recorded_replica_db().await;
    let store = Store::<Product>::with_options(
        &db,
        subset::StoreOptions::new().mode(subset::WriteMode::Ordered),
    );
    let group_takes = || {
        log.lock()
            .unwrap()
            .iter()
            .filter(|(name, _, command)| {
                // One statement over several parents (`_id: {$in: …}`) that shares their leases.
                let over_several = command
                    .get_array("updates")
                    .is_ok_and(|u| u.iter().any(|statement| common::ids_named(statement) > 1));
                name == "update" && over_several && format!("{command:?}").contains("_subset.l_")
            })
            .count()
    };
    for attempt in 0..10 {
        let parents: Vec<i32> = (0..4).map(|p| 60 + attempt * 4 + p).collect();
        for &p in &parents {
            store.insert(&product(p)).await.unwrap();
            let reviews: Vec<Review> = (1..=3).map(|r| review(p * 100 + r)).collect();
            store
                .children(Product::LATEST)
                .push_many(&p, &reviews)
                .await
                .unwrap();
        }
        // Two stopped pushes, so that one is among the queued ones whichever goes first.
        for &p in &parents[1..3] {
            stopped_push(&db, p, p * 100 + 4).await;
        }
        let before = group_takes();
        let pushes = parents.iter().map(|&p| {
            let reviews = store.children(Product::LATEST);
            async move { reviews.push(&p, &review(p * 100 + 5)).await }
        });
        try_join_all(pushes).await.unwrap();
        for &p in &parents {
            let stopped = (1..3).contains(&(p - parents[0]));
            let product = parent(&store, p).await;
            assert_eq!(product.total, if stopped { 5 } else { 4 }, "product {p}");
            let latest: Vec<i32> = product.latest.iter().map(|r| r.id).collect();
            let newest: &[i32] = match stopped {
                true => &[5, 4, 3],
                false => &[5, 3, 2],
            };
            let newest: Vec<i32> = newest.iter().map(|r| p * 100 + r).collect();
            assert_eq!(latest, newest, "product {p}");
            assert_true(&store, p, "a group's pushes beside a stopped push").await;
            assert!(
                leases_left(&store, p).await.is_empty(),
                "product {p}: {:?}",
                leases_left(&store, p).await
            );
            store.delete(&p).await.unwrap();
        }
        if group_takes() > before {
            return;
        }
    }
    panic!("no pushes queued behind another in ten attempts: the group's take was never sent");
}

/// Two edits of one review's text from two processes, the first held at its product's update:
/// every copy ends as the review does, in both modes; without transactions the second waits
/// for the first's lease and lands after it.
#[tokio::test(flavor = "multi_thread")]
async fn two_edits_of_one_field_from_two_processes_leave_every_copy_as_the_child() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 1, 6).await;
        let (editor, app) = own(&store, "editor").await;
        hold_next(&store, &app, "update").await;
        let first = tokio::spawn(async move {
            let reviews = editor.children(Product::LATEST);
            reviews
                .patch(&1, &6)
                .set(Review::TEXT, "first".to_owned())
                .await
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let reviews = store.children(Product::LATEST);
        let second = reviews.patch(&1, &6).set(Review::TEXT, "second".to_owned());
        second.await.unwrap();
        first.await.unwrap().unwrap();
        release(&store).await;
        // Without transactions the second waited for the first's lease; in one, the first
        // had written nothing yet when it was held, and whichever commits last wins.
        let text = stored(&store, 6).await.get_str("text").unwrap().to_owned();
        if mode == subset::WriteMode::Ordered {
            assert_eq!(text, "second", "{mode:?}: the second edit lands last");
        }
        let p = parent(&store, 1).await;
        let copy = p
            .latest
            .iter()
            .find(|r| r.id == 6)
            .expect("the edited review is embedded");
        assert_eq!(copy.text, text, "{mode:?}: the copy");
        assert_true(&store, 1, "two edits of one field from two processes").await;
        store.delete(&1).await.unwrap();
    }
}
