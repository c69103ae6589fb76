//! The change-stream follower: other programs write the child collection (raw driver calls, a
//! Python script), the follower keeps every subset and count exact; killed at random points it
//! misses nothing; the library's own writes cost no second write; a place that can no longer be
//! resumed is caught up with a full pass; a standalone server is refused.
//!
//! Every end state is checked against the child collection sorted here, in Rust, with the
//! order written out by hand (`date desc`, then `_id` desc), never with the engine's sort.

use crate::common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{
    bookkeeping::Names, follow::CatchUp, follow::FollowOptions, follow::FollowStats,
    follow::FollowUpdate, follow::Follower, Child, Children, Error, Store,
};

/// Parents written to in each test.
const PARENTS: usize = 12;

/// How long a follower may take to catch up once the writers stop.
const CATCH_UP: Duration = Duration::from_secs(20);

/// Follower options for tests: a short window, so that catching up is quick.
fn options(name: &str) -> FollowOptions {
    FollowOptions::new(name).window(Duration::from_millis(30))
}

/// `PARENTS` products made with the library, plus a sentinel one, each with a few reviews.
async fn seeded(store: &Store<Product>) -> (Vec<ObjectId>, ObjectId) {
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut ids = Vec::new();
    for i in 0..=PARENTS {
        let product = Product::named(&format!("product {i}"));
        store.insert(&product).await.unwrap();
        let children: Vec<Review> = (0..3).map(|k| Review::at(1_000 * k + i as i64)).collect();
        reviews.push_many(&product.id, &children).await.unwrap();
        ids.push(product.id);
    }
    let sentinel = ids.pop().unwrap();
    (ids, sentinel)
}

fn reviews_of(db: &Database) -> Collection<Document> {
    db.collection("reviews")
}

/// A review as another program writes it: the child document with its parent key.
fn raw_review(rng: &mut impl Rng, parent: ObjectId) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "product_id": parent,
        "author": format!("external {}", rng.random_range(0..1_000_000)),
        "rating": rng.random_range(1..=5_i32),
        "date": DateTime::from_millis(rng.random_range(0..100_000_i64)),
    }
}

/// What one external writer did.
#[derive(Debug, Default, Clone, Copy)]
struct Written {
    ops: u64,
    inserted: u64,
    updated: u64,
    deleted: u64,
}

/// Another program writing the child collection with the driver, never through the library:
/// inserts, bulk inserts, `updateMany` changing the sort key, edits of embedded children,
/// children moved to another parent, deletes of embedded children, deletes of all of a
/// parent's children. Runs until `until`.
async fn external_writer(
    db: Database,
    parents: Vec<ObjectId>,
    seed: u64,
    until: Instant,
) -> Written {
    let mut rng = StdRng::seed_from_u64(seed);
    let children = reviews_of(&db);
    let products = db.collection::<Document>("products");
    let mut w = Written::default();
    while Instant::now() < until {
        let parent = parents[rng.random_range(0..parents.len())];
        w.ops += 1;
        match rng.random_range(0..100) {
            0..=34 => {
                children
                    .insert_one(raw_review(&mut rng, parent))
                    .await
                    .unwrap();
                w.inserted += 1;
            }
            35..=49 => {
                let n = rng.random_range(2..=6);
                let batch: Vec<Document> = (0..n).map(|_| raw_review(&mut rng, parent)).collect();
                children.insert_many(batch).await.unwrap();
                w.inserted += n;
            }
            50..=64 => {
                // Re-dates every child of one rating: ties on `date`, broken by `_id`.
                let date = DateTime::from_millis(rng.random_range(0..100_000_i64));
                let r = children
                    .update_many(
                        doc! { "product_id": parent, "rating": rng.random_range(1..=5_i32) },
                        doc! { "$set": { "date": date } },
                    )
                    .await
                    .unwrap();
                w.updated += r.modified_count;
            }
            65..=67 => {
                // Votes around the library: an `$inc` on every child of one parent.
                let r = children
                    .update_many(
                        doc! { "product_id": parent },
                        doc! { "$inc": { "rating": 1 } },
                    )
                    .await
                    .unwrap();
                w.updated += r.modified_count;
            }
            68..=72 => {
                // Edits an embedded child's content, not its rank.
                if let Some(id) = embedded(&products, parent).await.first().cloned() {
                    let r = children
                        .update_one(
                            doc! { "_id": id },
                            doc! { "$set": { "author": format!("edited {}", rng.random::<u32>()) } },
                        )
                        .await
                        .unwrap();
                    w.updated += r.modified_count;
                }
            }
            73..=79 => {
                // Moves one child to another parent.
                let to = parents[rng.random_range(0..parents.len())];
                let r = children
                    .update_one(
                        doc! { "product_id": parent },
                        doc! { "$set": { "product_id": to } },
                    )
                    .await
                    .unwrap();
                w.updated += r.modified_count;
            }
            80..=94 => {
                // Deletes one or two of the embedded children.
                let ids = embedded(&products, parent).await;
                let n = rng.random_range(1..=2).min(ids.len());
                let r = children
                    .delete_many(doc! { "_id": { "$in": ids[..n].to_vec() } })
                    .await
                    .unwrap();
                w.deleted += r.deleted_count;
            }
            _ => {
                let r = children
                    .delete_many(doc! { "product_id": parent })
                    .await
                    .unwrap();
                w.deleted += r.deleted_count;
            }
        }
        if rng.random_range(0..4) == 0 {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
        }
    }
    w
}

/// The `_id`s embedded in a product, as stored.
async fn embedded(products: &Collection<Document>, parent: ObjectId) -> Vec<Bson> {
    let Some(product) = products.find_one(doc! { "_id": parent }).await.unwrap() else {
        return Vec::new();
    };
    product
        .get_array("recent_reviews")
        .map(|a| {
            a.iter()
                .filter_map(|c| c.as_document()?.get("_id").cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that every product's subset is exactly its first 5 reviews (`date desc`, `_id`
/// desc, sorted here), content and order, and its count the number of reviews.
async fn assert_exact(db: &Database, parents: &[ObjectId]) {
    let products = db.collection::<Product>("products");
    let children = db.collection::<Review>("reviews");
    for id in parents {
        let mut all: Vec<Review> = children
            .find(doc! { "product_id": id })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        all.sort_by_key(|r| std::cmp::Reverse((r.date, r.id)));
        let product = products
            .find_one(doc! { "_id": id })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            product.recent_reviews,
            all[..all.len().min(5)],
            "subset of product {id}"
        );
        assert_eq!(
            product.total_reviews,
            all.len() as i64,
            "count of product {id}"
        );
    }
}

/// Writes a review to the sentinel product behind the follower's back and waits until the
/// follower embedded it, twice: events of a collection are applied in order, batch after batch,
/// so once the second is embedded, the batch of the first, and every change written before it,
/// has been applied in full. Returns how long that took.
async fn caught_up(db: &Database, sentinel: ObjectId) -> Duration {
    let started = Instant::now();
    let products = db.collection::<Document>("products");
    for k in 0..2 {
        let id = ObjectId::new();
        reviews_of(db)
            .insert_one(doc! {
                "_id": id, "product_id": sentinel, "author": "sentinel", "rating": 1,
                "date": DateTime::from_millis(10_000_000 + k),
            })
            .await
            .unwrap();
        loop {
            let found = products
                .count_documents(doc! { "_id": sentinel, "recent_reviews._id": id })
                .await
                .unwrap();
            if found == 1 {
                break;
            }
            assert!(
                started.elapsed() < CATCH_UP,
                "the follower did not catch up within {CATCH_UP:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    started.elapsed()
}

/// [`caught_up`], watching the follower: one that ended (failed) is reported with its error
/// rather than as a timeout.
async fn caught_up_by(
    db: &Database,
    sentinel: ObjectId,
    follower: Follower,
) -> (Duration, Follower) {
    let waiting = caught_up(db, sentinel);
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            took = &mut waiting => return (took, follower),
            () = tokio::time::sleep(Duration::from_millis(50)) => {
                if follower.is_finished() {
                    panic!("the follower ended before catching up: {:?}", follower.stop().await);
                }
            }
        }
    }
}

/// Counts of what a follower reported, across restarts.
#[derive(Debug, Default)]
struct Seen {
    started: AtomicU64,
    resumed: AtomicU64,
    catch_ups: AtomicU64,
    history_lost: AtomicU64,
    missing_images: AtomicU64,
}

impl Seen {
    fn observer(self: &Arc<Self>) -> impl Fn(&FollowUpdate<'_>) + Send + Sync + 'static {
        let seen = Arc::clone(self);
        move |update| match update {
            FollowUpdate::Started { resumed, .. } => {
                seen.started.fetch_add(1, Ordering::SeqCst);
                if *resumed {
                    seen.resumed.fetch_add(1, Ordering::SeqCst);
                }
            }
            FollowUpdate::CatchingUp { reason, .. } => {
                seen.catch_ups.fetch_add(1, Ordering::SeqCst);
                match reason {
                    CatchUp::HistoryLost => seen.history_lost.fetch_add(1, Ordering::SeqCst),
                    CatchUp::MissingImages => seen.missing_images.fetch_add(1, Ordering::SeqCst),
                    _ => 0,
                };
            }
            _ => {}
        }
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }

    /// Waits until a follower has opened its stream (and so saved its first place).
    async fn wait_started(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Seen::get(&self.started) + Seen::get(&self.catch_ups) < n {
            assert!(Instant::now() < deadline, "the follower did not start");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn print_stats(test: &str, stats: &FollowStats) {
    println!(
        "{test}: {} events in {} batches; {} resyncs: {} written, {} skipped (in sync), {} orphaned, {} keyless, {} failed; {} catch-ups; max lag {:?}",
        stats.events,
        stats.batches,
        stats.resynced,
        stats.written,
        stats.skipped,
        stats.orphaned,
        stats.keyless,
        stats.failed,
        stats.catch_ups,
        stats.max_lag
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn external_writes_are_followed_to_an_exact_end_state() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("external"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;

    let started = Instant::now();
    let until = started + Duration::from_millis(2_500);
    let writers: Vec<_> = (0..2)
        .map(|w| tokio::spawn(external_writer(db.clone(), parents.clone(), 11 + w, until)))
        .collect();
    let mut written = Written::default();
    for writer in writers {
        let w = writer.await.unwrap();
        written.ops += w.ops;
        written.inserted += w.inserted;
        written.updated += w.updated;
        written.deleted += w.deleted;
    }
    let (catch_up, follower) = caught_up_by(&db, sentinel, follower).await;
    println!(
        "external writers: {written:?} in {:?}; follower caught up {catch_up:?} after they stopped",
        until - started
    );
    assert_exact(&db, &parents).await;

    let stats = follower.stop().await.unwrap();
    print_stats("external", &stats);
    // One event per document changed, plus the sentinels', each read once.
    assert_eq!(
        stats.events,
        written.inserted + written.updated + written.deleted + 2
    );
    assert!(stats.written > 0, "external writes leave drift to fix");
    assert_eq!(stats.catch_ups, 0);
    assert_eq!(stats.failed, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_killed_at_random_points_misses_no_change() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = || {
        tokio::spawn(
            store
                .follow(options("killed"))
                .on_update(seen.observer())
                .into_future(),
        )
    };
    // The first start saves the place that every restart resumes from.
    let mut task = follower();
    seen.wait_started(1).await;

    let seed = rand::random::<u64>();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let until = started + Duration::from_millis(3_000);
    let writer = tokio::spawn(external_writer(db.clone(), parents.clone(), seed, until));
    let mut kills = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(rng.random_range(10..300))).await;
        // Killed without a chance to save anything: the task is aborted at whatever await it
        // is in (reading events, resyncing, saving the place).
        task.abort();
        assert!(
            task.await.is_err_and(|e| e.is_cancelled()),
            "the follower failed"
        );
        kills += 1;
        if Instant::now() >= until {
            break;
        }
        task = follower();
    }
    let written = writer.await.unwrap();
    let last = store
        .follow(options("killed"))
        .on_update(seen.observer())
        .spawn();
    let (catch_up, last) = caught_up_by(&db, sentinel, last).await;
    println!(
        "{kills} kills during {written:?}; the last follower caught up in {catch_up:?}; {} starts, {} resumed",
        Seen::get(&seen.started),
        Seen::get(&seen.resumed)
    );
    assert_exact(&db, &parents).await;
    let stats = last.stop().await.unwrap();
    print_stats("killed", &stats);
    // Every restart resumed from a saved place; none fell back to a full pass, which would
    // have hidden a missed change.
    assert_eq!(Seen::get(&seen.catch_ups), 0);
    assert!(Seen::get(&seen.resumed) >= 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn library_writes_cost_no_second_write_and_interleave_with_external_ones() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("interleaved"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;

    // The library alone: every push is already right when its event arrives.
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut pushes = 0;
    for (i, parent) in parents.iter().enumerate() {
        for k in 0..4 {
            reviews
                .push(parent, &Review::at(50_000 + 10 * k + i as i64))
                .await
                .unwrap();
            pushes += 1;
        }
    }
    // One event per push; the follower counts a batch's events once it is applied.
    let deadline = Instant::now() + CATCH_UP;
    while follower.stats().events < pushes {
        assert!(Instant::now() < deadline, "the follower did not catch up");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let alone = follower.stats();
    print_stats("library alone", &alone);
    assert_eq!(alone.written, 0, "a library push was written a second time");
    assert!(alone.skipped >= parents.len() as u64);
    assert_eq!(alone.events, pushes);

    // Eight writers on the same parents: four through the library, four behind its back.
    let started = Instant::now();
    let until = started + Duration::from_millis(2_500);
    let library_pushes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let (store, parents, count) = (store.clone(), parents.clone(), library_pushes.clone());
        tasks.push(tokio::spawn(async move {
            let reviews: Children<'_, Product, Review> = store.children(Product::RECENT_REVIEWS);
            let mut rng = StdRng::seed_from_u64(100 + w);
            while Instant::now() < until {
                let parent = parents[rng.random_range(0..parents.len())];
                let review = Review::at(rng.random_range(0..100_000));
                match reviews.push(&parent, &review).await {
                    Ok(()) => count.fetch_add(1, Ordering::SeqCst),
                    Err(e) => panic!("library push failed: {e}"),
                };
            }
            Written::default()
        }));
    }
    for w in 0..4 {
        tasks.push(tokio::spawn(external_writer(
            db.clone(),
            parents.clone(),
            200 + w,
            until,
        )));
    }
    let mut external = Written::default();
    for task in tasks {
        let w = task.await.unwrap();
        external.ops += w.ops;
        external.inserted += w.inserted;
        external.updated += w.updated;
        external.deleted += w.deleted;
    }
    let external_events = external.inserted + external.updated + external.deleted;
    let (catch_up, follower) = caught_up_by(&db, sentinel, follower).await;
    assert_exact(&db, &parents).await;
    let stats = follower.stop().await.unwrap();
    let library = library_pushes.load(Ordering::SeqCst);
    println!(
        "8 writers: {library} library pushes, {} external operations ({external_events} changes); caught up {catch_up:?} after they stopped",
        external.ops
    );
    print_stats("interleaved", &stats);
    // Only external changes (and the sentinels) leave drift; the library's pushes, some
    // thousands, are found in sync.
    let during = stats.written - alone.written;
    assert!(
        during <= external_events + 2,
        "{during} rewrites for {external_events} external changes: library pushes were rewritten"
    );
    assert!(
        stats.skipped > alone.skipped,
        "no resync found a parent in sync"
    );
    assert_eq!(stats.catch_ups, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_place_that_cannot_be_resumed_is_caught_up_with_a_full_pass() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let first = store
        .follow(options("lost"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;
    first.stop().await.unwrap();

    // A place the server cannot resume from: the token of a real event, moved back to
    // Timestamp(1, 1). (A real loss needs the oplog to roll over past the place, 990 MB of
    // writes at the least; this token stands for it. The oplog of this server was never
    // truncated, so it answers `ChangeStreamFatalError`, "the resume token was not found",
    // where a rolled-over one answers `ChangeStreamHistoryLost`; both mean that the changes
    // since that place cannot be read, and the follower treats them alike.)
    let mut stream = reviews_of(&db).watch().await.unwrap();
    reviews_of(&db)
        .insert_one(raw_review(&mut StdRng::seed_from_u64(6), parents[0]))
        .await
        .unwrap();
    let event = stream.try_next().await.unwrap().expect("an event");
    let token = bson_compat::to_bson(&event.id).unwrap();
    let data = token.as_document().unwrap().get_str("_data").unwrap();
    assert!(
        data.starts_with("82"),
        "a resume token starts with its cluster time"
    );
    let forged = format!("82{}{}", "0000000100000001", &data[18..]);
    let tokens = db.collection::<Document>(Names::default().followers());
    let key = doc! { "_id": { "follower": "lost", "collection": "reviews" } };
    let replaced = tokens
        .update_one(key, doc! { "$set": { "token": { "_data": forged } } })
        .await
        .unwrap();
    assert_eq!(replaced.matched_count, 1, "a saved place");

    // Changes while no follower runs: only the full pass can see them.
    let mut rng = StdRng::seed_from_u64(7);
    for parent in &parents {
        for _ in 0..3 {
            reviews_of(&db)
                .insert_one(raw_review(&mut rng, *parent))
                .await
                .unwrap();
        }
    }
    reviews_of(&db)
        .delete_many(doc! { "product_id": parents[0] })
        .await
        .unwrap();

    let follower = store
        .follow(options("lost"))
        .on_update(seen.observer())
        .spawn();
    // And after the pass, the stream again.
    let until = Instant::now() + Duration::from_millis(800);
    let written = external_writer(db.clone(), parents.clone(), 8, until).await;
    let (catch_up, follower) = caught_up_by(&db, sentinel, follower).await;
    assert_exact(&db, &parents).await;
    let stats = follower.stop().await.unwrap();
    print_stats("history lost", &stats);
    println!("then {written:?}, caught up in {catch_up:?}");
    assert_eq!(Seen::get(&seen.history_lost), 1);
    assert_eq!(stats.catch_ups, 1);
    assert!(
        stats.written >= parents.len() as u64,
        "the pass fixed every parent"
    );
    assert!(stats.batches > 0, "the stream went on after the pass");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_saves_the_place_past_the_last_batch() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, _) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("stopped"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;
    let until = Instant::now() + Duration::from_millis(500);
    let written = external_writer(db.clone(), parents.clone(), 3, until).await;
    // No wait for the follower: the stop finishes the batch in hand and saves its place.
    let stats = follower.stop().await.unwrap();
    print_stats("before the stop", &stats);

    // Started again, it reads what the first one had not read yet, and nothing twice.
    let again = store.follow(options("stopped")).spawn();
    let changes = written.inserted + written.updated + written.deleted;
    let deadline = Instant::now() + CATCH_UP;
    while stats.events + again.stats().events < changes {
        assert!(
            Instant::now() < deadline,
            "the restarted follower did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let more = again.stop().await.unwrap();
    print_stats("after the restart", &more);
    assert_exact(&db, &parents).await;
    assert_eq!(
        stats.events + more.events,
        changes,
        "one event per change ({written:?}), across a graceful stop"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pre_images_turned_off_under_the_follower_cause_a_catch_up() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("images"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;
    db.run_command(
        doc! { "collMod": "reviews", "changeStreamPreAndPostImages": { "enabled": false } },
    )
    .await
    .unwrap();
    // A delete without a pre-image: its parent cannot be told.
    let victim = embedded(&db.collection("products"), parents[1]).await;
    reviews_of(&db)
        .delete_one(doc! { "_id": victim[0].clone() })
        .await
        .unwrap();
    let (_, follower) = caught_up_by(&db, sentinel, follower).await;
    assert_exact(&db, &parents).await;
    let stats = follower.stop().await.unwrap();
    print_stats("images", &stats);
    assert_eq!(Seen::get(&seen.missing_images), 1);
    // And the catch-up turned them on again.
    let listed = db
        .run_command(doc! { "listCollections": 1, "filter": { "name": "reviews" } })
        .await
        .unwrap();
    let spec = listed
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    let enabled = spec
        .get_document("options")
        .unwrap()
        .get_document("changeStreamPreAndPostImages")
        .unwrap()
        .get_bool("enabled")
        .unwrap();
    assert!(enabled);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_leave_to_enable_pre_images_the_follower_says_what_to_run() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    seeded(&store).await;
    let err = store
        .follow(options("asked").enable_pre_images(false))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::FollowUnsupported { .. }), "{err:?}");
    assert!(message.contains("collMod"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn children_of_no_parent_are_counted_and_passed_over() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("orphans"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;
    let mut rng = StdRng::seed_from_u64(4);
    let mut orphan = raw_review(&mut rng, ObjectId::new());
    reviews_of(&db).insert_one(orphan.clone()).await.unwrap();
    // A key no parent `_id` can be.
    orphan.insert("_id", ObjectId::new());
    orphan.insert("product_id", vec![Bson::Int32(1), Bson::Int32(2)]);
    reviews_of(&db).insert_one(orphan.clone()).await.unwrap();
    // No parent key at all, twice: inserted, and a keyed child whose key is unset.
    orphan.insert("_id", ObjectId::new());
    orphan.remove("product_id");
    reviews_of(&db).insert_one(orphan).await.unwrap();
    let unkeyed = raw_review(&mut rng, parents[1]);
    reviews_of(&db).insert_one(unkeyed.clone()).await.unwrap();
    reviews_of(&db)
        .update_one(
            doc! { "_id": unkeyed.get("_id").unwrap() },
            doc! { "$unset": { "product_id": "" } },
        )
        .await
        .unwrap();
    reviews_of(&db)
        .insert_one(raw_review(&mut rng, parents[0]))
        .await
        .unwrap();
    let (_, follower) = caught_up_by(&db, sentinel, follower).await;
    assert_exact(&db, &parents).await;
    let stats = follower.stop().await.unwrap();
    print_stats("orphans", &stats);
    assert_eq!((stats.orphaned, stats.keyless), (2, 2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_server_is_refused_with_the_reason() {
    let db = standalone_db().await;
    let store = Store::<Product>::new(&db);
    let started = Instant::now();
    let err = store.follow(options("standalone")).await.unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, Error::FollowUnsupported { collection, .. } if collection == "products"),
        "{err:?}"
    );
    assert!(message.contains("standalone"), "{message}");
    assert!(message.contains("replica set"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Score {
    #[serde(rename = "_id")]
    id: i64,
    points: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "players")]
struct Player {
    #[serde(rename = "_id")]
    id: String,
    // Two subsets in one child collection, under two keys.
    #[subset(child = "scores", keep = 3, sort = "points desc", count = "games")]
    best: Vec<Score>,
    #[subset(child = "scores", key = "coached_by", keep = 2, sort = "points asc")]
    coached: Vec<Score>,
    #[serde(default)]
    games: i64,
}

/// The player whose coached scores tell that the follower has caught up.
const SENTINEL: &str = "sentinel";

#[tokio::test(flavor = "multi_thread")]
async fn two_subsets_in_one_child_collection_share_one_stream() {
    let db = replica_db().await;
    let store = Store::<Player>::new(&db);
    let names = ["ann", "bob", "cid", "dee"];
    // A parent only the sentinels below name, and that is not checked.
    for name in names.into_iter().chain([SENTINEL]) {
        let player = Player {
            id: name.to_owned(),
            best: Vec::new(),
            coached: Vec::new(),
            games: 0,
        };
        store.insert(&player).await.unwrap();
    }
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("players"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;

    let scores = db.collection::<Document>("scores");
    let mut rng = StdRng::seed_from_u64(5);
    for id in 0..60_i64 {
        let player = names[rng.random_range(0..4)];
        let coach = names[rng.random_range(0..4)];
        let points = rng.random_range(0..50_i32);
        scores
            .insert_one(
                doc! { "_id": id, "player_id": player, "coached_by": coach, "points": points },
            )
            .await
            .unwrap();
    }
    scores
        .update_many(
            doc! { "points": { "$lt": 10 } },
            doc! { "$set": { "coached_by": "ann" } },
        )
        .await
        .unwrap();
    scores
        .delete_many(doc! { "player_id": "bob" })
        .await
        .unwrap();
    // Sentinels, as in `caught_up`: two, one after the other, on a parent no other score names
    // and in one field only (no `player_id`). The first can then be embedded only by the batch
    // holding its event, and the second only by a later batch, which starts once that one has
    // been applied in full. A checked parent will not do: the last batch resyncs each of its
    // fields in a task of its own, so the field waited on can be done before the one checked.
    let players = db.collection::<Player>("players");
    let deadline = Instant::now() + CATCH_UP;
    for (id, points) in [(1_000_i64, -1), (1_001, -2)] {
        scores
            .insert_one(doc! { "_id": id, "coached_by": SENTINEL, "points": points })
            .await
            .unwrap();
        loop {
            let sentinel = players
                .find_one(doc! { "_id": SENTINEL })
                .await
                .unwrap()
                .unwrap();
            if sentinel.coached.iter().any(|s| s.id == id) {
                break;
            }
            assert!(Instant::now() < deadline, "the follower did not catch up");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for name in names {
        let player = players
            .find_one(doc! { "_id": name })
            .await
            .unwrap()
            .unwrap();
        let of = |key: &str| {
            let scores = scores.clone();
            let filter = doc! { key: name };
            async move {
                let found: Vec<Document> = scores
                    .find(filter)
                    .await
                    .unwrap()
                    .try_collect()
                    .await
                    .unwrap();
                found
                    .into_iter()
                    .map(|d| Score {
                        id: d.get_i64("_id").unwrap(),
                        points: d.get_i32("points").unwrap(),
                    })
                    .collect::<Vec<_>>()
            }
        };
        let mut best = of("player_id").await;
        best.sort_by_key(|s| std::cmp::Reverse((s.points, s.id)));
        let mut coached = of("coached_by").await;
        coached.sort_by_key(|s| (s.points, s.id));
        assert_eq!(player.best, best[..best.len().min(3)], "best of {name}");
        assert_eq!(player.games, best.len() as i64, "games of {name}");
        assert_eq!(
            player.coached,
            coached[..coached.len().min(2)],
            "coached by {name}"
        );
    }
    let stats = follower.stop().await.unwrap();
    print_stats("players", &stats);
    assert_eq!(Seen::get(&seen.started), 1, "one stream for one collection");
}

/// The external writer as a Python program (`pymongo`), when Python has it or can get it.
const PYTHON_WRITER: &str = r#"
import random, sys
from bson import ObjectId
from datetime import datetime, timezone
from pymongo import MongoClient

uri, db_name, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
parents = [ObjectId(p) for p in sys.argv[4].split(",")]
rng = random.Random(seed)
reviews = MongoClient(uri)[db_name]["reviews"]
products = MongoClient(uri)[db_name]["products"]

def review(parent):
    return {"_id": ObjectId(), "product_id": parent, "author": "python %d" % rng.randrange(10**6),
            "rating": rng.randint(1, 5),
            "date": datetime.fromtimestamp(rng.randrange(100000) / 1000, tz=timezone.utc)}

ops = 0
for _ in range(300):
    parent = rng.choice(parents)
    roll = rng.randrange(100)
    if roll < 35:
        reviews.insert_one(review(parent))
    elif roll < 55:
        reviews.insert_many([review(parent) for _ in range(rng.randint(2, 6))])
    elif roll < 75:
        date = datetime.fromtimestamp(rng.randrange(100000) / 1000, tz=timezone.utc)
        reviews.update_many({"product_id": parent, "rating": rng.randint(1, 5)}, {"$set": {"date": date}})
    elif roll < 95:
        doc = products.find_one({"_id": parent}) or {}
        ids = [c["_id"] for c in doc.get("recent_reviews", [])][:rng.randint(1, 2)]
        reviews.delete_many({"_id": {"$in": ids}})
    else:
        reviews.delete_many({"product_id": parent})
    ops += 1
print(ops)
"#;

/// Whether `python3` can import `pymongo`, installing it for the user once if that is quick.
fn python_with_pymongo() -> Result<(), String> {
    let import = || {
        std::process::Command::new("python3")
            .args(["-c", "import pymongo"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if import() {
        return Ok(());
    }
    let install = std::process::Command::new("timeout")
        .args([
            "60", "python3", "-m", "pip", "install", "--quiet", "--user", "pymongo",
        ])
        .output();
    match install {
        Ok(_) if import() => Ok(()),
        Ok(o) => Err(format!(
            "pymongo is not installed and `pip install --user pymongo` did not work: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        )),
        Err(e) => Err(format!("python3 cannot run: {e}")),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_writer_is_followed() {
    if let Err(why) = tokio::task::spawn_blocking(python_with_pymongo)
        .await
        .unwrap()
    {
        return subset_testkit::skip(&why);
    }
    let server = subset_testkit::MongoServer::shared(subset_testkit::Topology::ReplicaSet)
        .await
        .unwrap();
    let db = server.database().await.unwrap();
    let store = Store::<Product>::new(&db);
    let (parents, sentinel) = seeded(&store).await;
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("python"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;

    let started = Instant::now();
    let ids: Vec<String> = parents.iter().map(|p| p.to_hex()).collect();
    let mut python = std::process::Command::new("python3");
    python.args([
        "-c",
        PYTHON_WRITER,
        server.uri(),
        db.name(),
        "42",
        &ids.join(","),
    ]);
    let out = tokio::task::spawn_blocking(move || python.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the Python writer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wrote = started.elapsed();
    let (catch_up, follower) = caught_up_by(&db, sentinel, follower).await;
    println!(
        "python wrote {} operations in {wrote:?}; the follower caught up {catch_up:?} after",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    assert_exact(&db, &parents).await;
    let stats = follower.stop().await.unwrap();
    print_stats("python", &stats);
    assert!(stats.written > 0);
}

/// The follower's figures, run by hand: `cargo test --release --test it follow -- --ignored
/// --nocapture follow_figures`. The follower runs on one thread (a current-thread runtime);
/// the server shares the machine.
///
/// 1. Throughput: 20,000 changes written across 1,000 parents while the follower is stopped,
///    then the time the follower takes to read and apply them all.
/// 2. Lag: a writer at a steady rate, the lag of every batch (from its oldest event to its
///    parents resynced), p50 and p99.
#[tokio::test(flavor = "current_thread")]
#[ignore = "measures; run by hand"]
async fn follow_figures() {
    let db = replica_db().await;
    let store = Store::<Product>::new(&db);
    store.ensure_indexes().await.unwrap();
    let products: Vec<Product> = (0..1_000)
        .map(|i| Product::named(&format!("p{i}")))
        .collect();
    for product in &products {
        store.insert(product).await.unwrap();
    }
    let mut parents: Vec<ObjectId> = products.iter().map(|p| p.id).collect();
    // Written to by `caught_up` only: a parent the backlog also touches could show the
    // sentinel embedded by a resync that read it early.
    let sentinel = parents.pop().unwrap();
    let first = store.follow(FollowOptions::new("figures")).spawn();
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.stop().await.unwrap();

    // 1. A backlog: 20,000 inserts, 100 per insert_many, each on one parent; then 20,000 on
    //    parents drawn at random, 1,000 per insert_many.
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..200 {
        let parent = parents[rng.random_range(0..parents.len())];
        let batch: Vec<Document> = (0..100).map(|_| raw_review(&mut rng, parent)).collect();
        reviews_of(&db).insert_many(batch).await.unwrap();
    }
    let mut scattered = Vec::new();
    for _ in 0..20_000 {
        let parent = parents[rng.random_range(0..parents.len())];
        scattered.push(raw_review(&mut rng, parent));
    }
    for chunk in scattered.chunks(1_000) {
        reviews_of(&db).insert_many(chunk.to_vec()).await.unwrap();
    }
    let started = Instant::now();
    let follower = store.follow(FollowOptions::new("figures")).spawn();
    caught_up(&db, sentinel).await;
    let took = started.elapsed();
    let stats = follower.stop().await.unwrap();
    print_stats("backlog", &stats);
    println!(
        "backlog: 20,000 changes on 200 parents + 20,000 on 999 parents: {:?}, {:.0} events/s",
        took,
        stats.events as f64 / took.as_secs_f64()
    );

    // 2. Lag at steady rates.
    for (rate, window) in [(200_u64, 100_u64), (1_000, 100), (1_000, 20), (3_000, 100)] {
        let lags = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&lags);
        let follower = store
            .follow(FollowOptions::new("figures").window(Duration::from_millis(window)))
            .on_update(move |u| {
                if let FollowUpdate::Batch(b) = u {
                    if let Some(lag) = b.lag {
                        seen.lock().unwrap().push(lag);
                    }
                }
            })
            .spawn();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let db2 = db.clone();
        let parents2 = parents.clone();
        // The writer on its own thread, so that it keeps its rate whatever the follower does.
        let writer = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut rng = StdRng::seed_from_u64(rate);
                let tick = Duration::from_micros(1_000_000 / rate * 10);
                let mut next = Instant::now();
                let end = next + Duration::from_secs(8);
                while next < end {
                    // 10 single-document inserts per tick, on random parents.
                    for _ in 0..10 {
                        let parent = parents2[rng.random_range(0..parents2.len())];
                        reviews_of(&db2)
                            .insert_one(raw_review(&mut rng, parent))
                            .await
                            .unwrap();
                    }
                    next += tick;
                    tokio::time::sleep_until(next.into()).await;
                }
            });
        });
        tokio::task::spawn_blocking(move || writer.join().unwrap())
            .await
            .unwrap();
        caught_up(&db, sentinel).await;
        let stats = follower.stop().await.unwrap();
        let mut lags = lags.lock().unwrap().clone();
        lags.sort();
        let at = |q: f64| lags[((lags.len() - 1) as f64 * q) as usize];
        println!(
            "{rate} inserts/s, window {window} ms: {} events in {} batches; batch lag p50 {:?}, p99 {:?}, max {:?}",
            stats.events,
            stats.batches,
            at(0.5),
            at(0.99),
            lags.last().unwrap()
        );
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Entry {
    #[serde(rename = "_id")]
    id: i64,
    points: i32,
    live: bool,
    note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Entry)]
struct EntryPreview {
    #[serde(rename = "_id")]
    id: i64,
    points: i32,
}

/// Two views of one collection and key: the best entries as previews, and the best live ones
/// with their own count and sum.
#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "tables")]
struct Table {
    #[serde(rename = "_id")]
    id: i32,
    #[subset(child = "entries", keep = 3, sort = "points desc", count = "entries")]
    best: Vec<EntryPreview>,
    #[subset(
        child = "entries",
        keep = 2,
        sort = "points desc",
        filter = "live",
        count = "live",
        sum = "live_points = points"
    )]
    best_live: Vec<EntryPreview>,
    #[serde(default)]
    entries: i64,
    #[serde(default)]
    live: i64,
    #[serde(default)]
    live_points: i64,
}

#[tokio::test(flavor = "multi_thread")]
async fn views_previews_and_filters_follow_external_writes() {
    let db = replica_db().await;
    let store = Store::<Table>::new(&db);
    for id in 0..4 {
        let table = Table {
            id,
            best: Vec::new(),
            best_live: Vec::new(),
            entries: 0,
            live: 0,
            live_points: 0,
        };
        store.insert(&table).await.unwrap();
    }
    let seen = Arc::new(Seen::default());
    let follower = store
        .follow(options("tables"))
        .on_update(seen.observer())
        .spawn();
    seen.wait_started(1).await;
    // Another program: inserts, flags flipped both ways, points changed and incremented, a
    // child moved, deletes.
    let entries = db.collection::<Document>("entries");
    let mut rng = StdRng::seed_from_u64(11);
    for id in 0..80_i64 {
        let entry = doc! {
            "_id": id,
            "table_id": rng.random_range(0..4_i32),
            "points": rng.random_range(0..100_i32),
            "live": rng.random_bool(0.5),
            "note": "not embedded",
        };
        entries.insert_one(entry).await.unwrap();
    }
    entries
        .update_many(
            doc! { "points": { "$gt": 70 } },
            doc! { "$set": { "live": false } },
        )
        .await
        .unwrap();
    entries
        .update_many(
            doc! { "points": { "$lt": 20 } },
            doc! { "$set": { "live": true, "points": 90 } },
        )
        .await
        .unwrap();
    // Votes around the library: `$inc` on the sort key and summed field, one child at a
    // time, and a parent key changed (a child moved).
    for id in 10..30_i64 {
        let inc = doc! { "$inc": { "points": rng.random_range(1..40_i32) } };
        entries.update_one(doc! { "_id": id }, inc).await.unwrap();
    }
    entries
        .update_one(doc! { "_id": 30 }, doc! { "$set": { "table_id": 3 } })
        .await
        .unwrap();
    entries
        .delete_many(doc! { "_id": { "$lt": 10 } })
        .await
        .unwrap();
    // Every view of every table, its counts and its sum, come right, and stay right.
    let deadline = Instant::now() + CATCH_UP;
    let options = subset::repair::SweepOptions::default();
    loop {
        let report = store.check_all().options(options.clone()).await.unwrap();
        if report.progress.drifted == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower did not catch up: {:?}",
            report.drifts
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in 0..4 {
        let table = store.get(&id).await.unwrap().unwrap();
        let mut live: Vec<Document> = entries
            .find(doc! { "table_id": id, "live": true })
            .sort(doc! { "points": -1, "_id": -1 })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let live_points: i64 = live
            .iter()
            .map(|e| i64::from(e.get_i32("points").unwrap()))
            .sum();
        assert_eq!(table.live, live.len() as i64, "table {id}");
        assert_eq!(table.live_points, live_points, "table {id}");
        live.truncate(2);
        let ids: Vec<i64> = table.best_live.iter().map(|p| p.id).collect();
        let want: Vec<i64> = live.iter().map(|e| e.get_i64("_id").unwrap()).collect();
        assert_eq!(ids, want, "table {id}");
    }
    let stats = follower.stop().await.unwrap();
    print_stats("views", &stats);
}
