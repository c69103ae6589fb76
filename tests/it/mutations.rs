//! Children that change after they are written: partial updates (`Children::patch`: votes, edits,
//! moderation flags) and moves to another parent, kept true in every view of the child (whole
//! copies, previews, an order by the voted field, filtered views, counts and sums), alone and
//! under concurrent writers, in both write modes.

use crate::common;

use std::time::{Duration, Instant};

use futures::future::{try_join_all, BoxFuture};
use futures::{FutureExt, StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use subset::bson::{doc, Bson, DateTime, Document};
use subset::repair::SweepOptions;
use subset::{Child, Error, Store, Subset, WriteMode};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
pub struct Review {
    #[serde(rename = "_id")]
    pub id: i32,
    pub author: String,
    pub text: String,
    pub rating: i32,
    pub date: DateTime,
    pub helpful: i64,
    pub verified: bool,
    pub hidden: bool,
    pub note: Option<String>,
    /// Times reported: no view orders, filters or sums by it. Reviews stored before it read as
    /// 0.
    #[serde(default)]
    pub reports: u16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
#[subset(preview_of = Review)]
pub struct ReviewPreview {
    #[serde(rename = "_id")]
    pub id: i32,
    pub author: String,
    pub date: DateTime,
    pub helpful: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "patch_products")]
pub struct Product {
    #[serde(rename = "_id")]
    pub id: i32,
    /// The latest, whole, with the count and the sums of every review.
    #[subset(
        child = "patch_reviews",
        key = "product_id",
        keep = 3,
        sort = "date desc",
        count = "total",
        sum = "stars = rating, votes = helpful"
    )]
    pub latest: Vec<Review>,
    /// The most helpful, as previews: ordered by the voted field.
    #[subset(
        child = "patch_reviews",
        key = "product_id",
        keep = 2,
        sort = "helpful desc, date desc"
    )]
    pub most_helpful: Vec<ReviewPreview>,
    /// The latest verified ones, with their own count and sum.
    #[subset(
        child = "patch_reviews",
        key = "product_id",
        keep = 2,
        sort = "date desc",
        filter = "verified",
        count = "verified_total",
        sum = "verified_stars = rating"
    )]
    pub verified: Vec<ReviewPreview>,
    /// The latest that a moderator has not hidden.
    #[subset(
        child = "patch_reviews",
        key = "product_id",
        keep = 3,
        sort = "date desc",
        filter = "!hidden"
    )]
    pub visible: Vec<ReviewPreview>,
    #[serde(default)]
    pub total: i64,
    #[serde(default)]
    pub stars: i64,
    #[serde(default)]
    pub votes: i64,
    #[serde(default)]
    pub verified_total: i64,
    #[serde(default)]
    pub verified_stars: i64,
}

pub(crate) fn review(id: i32) -> Review {
    Review {
        id,
        author: format!("author {id}"),
        text: format!("text {id}"),
        rating: id % 5 + 1,
        date: DateTime::from_millis(1_000 * i64::from(id)),
        helpful: 0,
        verified: id % 2 == 0,
        hidden: false,
        note: Some("first".into()),
        reports: 0,
    }
}

pub(crate) fn product(id: i32) -> Product {
    Product {
        id,
        latest: Vec::new(),
        most_helpful: Vec::new(),
        verified: Vec::new(),
        visible: Vec::new(),
        total: 0,
        stars: 0,
        votes: 0,
        verified_total: 0,
        verified_stars: 0,
    }
}

/// Every view of `product` agrees with the child collection (array, order, content of each
/// copy, count and sums), as a check recomputes it.
pub(crate) async fn assert_true(store: &Store<Product>, product: i32, when: &str) {
    let mode = store.mode().await.unwrap();
    for field in [
        Product::LATEST.spec(),
        Product::MOST_HELPFUL.spec(),
        Product::VERIFIED.spec(),
        Product::VISIBLE.spec(),
    ] {
        let drift = store
            .raw()
            .children(field)
            .check(&Bson::Int32(product))
            .await
            .unwrap();
        assert!(
            drift.is_clean(),
            "{mode:?}, {when}: `{}` of product {product} drifted: {drift:?}",
            field.field
        );
    }
}

/// A product with reviews 1..=n pushed.
pub(crate) async fn seeded(store: &Store<Product>, id: i32, n: i32) {
    store.insert(&product(id)).await.unwrap();
    let reviews: Vec<Review> = (1..=n).map(review).collect();
    store
        .children(Product::LATEST)
        .push_many(&id, &reviews)
        .await
        .unwrap();
}

pub(crate) async fn stored(store: &Store<Product>, id: i32) -> Document {
    store
        .database()
        .collection::<Document>("patch_reviews")
        .find_one(doc! { "_id": id })
        .await
        .unwrap()
        .expect("the review is stored")
}

pub(crate) async fn parent(store: &Store<Product>, id: i32) -> Product {
    store
        .get(&id)
        .await
        .unwrap()
        .expect("the product is stored")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vote_an_edit_and_a_flag_reach_every_copy() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 1, 6).await;
        let reviews = store.children(Product::LATEST);
        assert_true(&store, 1, "seeded").await;

        // A vote on an old review: it enters the "most helpful" view, and the sum moves by one.
        reviews.patch(&1, &2).inc(Review::HELPFUL, 3).await.unwrap();
        let p = parent(&store, 1).await;
        assert_eq!(
            p.most_helpful[0].id, 2,
            "{mode:?}: the voted review ranks first"
        );
        assert_eq!(p.most_helpful[0].helpful, 3);
        assert_eq!(p.votes, 3);
        assert_eq!(stored(&store, 2).await.get_i64("helpful").unwrap(), 3);
        assert_true(&store, 1, "after a vote").await;

        // A vote on an embedded review changes its whole copy in `latest` too.
        reviews.patch(&1, &6).inc(Review::HELPFUL, 1).await.unwrap();
        let p = parent(&store, 1).await;
        assert_eq!(p.latest[0].helpful, 1);
        assert_eq!(p.votes, 4);
        assert_true(&store, 1, "after a vote on an embedded review").await;

        // An edit of a field only whole copies hold, and of a preview field.
        reviews
            .patch(&1, &6)
            .set(Review::TEXT, "edited".to_owned())
            .set(Review::AUTHOR, "renamed".to_owned())
            .unset(Review::NOTE)
            .await
            .unwrap();
        let p = parent(&store, 1).await;
        assert_eq!(p.latest[0].text, "edited");
        assert_eq!(p.latest[0].note, None);
        assert_eq!(p.visible[0].author, "renamed");
        assert!(!stored(&store, 6).await.contains_key("note"));
        assert_true(&store, 1, "after an edit").await;

        // A moderator hides the newest: it leaves `visible`, which backfills.
        reviews
            .patch(&1, &6)
            .set(Review::HIDDEN, true)
            .await
            .unwrap();
        let p = parent(&store, 1).await;
        let visible: Vec<i32> = p.visible.iter().map(|r| r.id).collect();
        assert_eq!(visible, [5, 4, 3], "{mode:?}");
        // Verifying one moves it into `verified`, its count and its sum.
        let (count, sum) = (p.verified_total, p.verified_stars);
        reviews
            .patch(&1, &5)
            .set(Review::VERIFIED, true)
            .await
            .unwrap();
        let p = parent(&store, 1).await;
        assert_eq!(p.verified[0].id, 6);
        assert_eq!(p.verified[1].id, 5);
        assert_eq!(p.verified_total, count + 1);
        assert_eq!(p.verified_stars, sum + i64::from(review(5).rating));
        // A changed summed field moves the sums by the difference.
        let stars = p.stars;
        reviews.patch(&1, &5).set(Review::RATING, 5).await.unwrap();
        let p = parent(&store, 1).await;
        let diff = 5 - i64::from(review(5).rating);
        assert_eq!(p.stars, stars + diff);
        assert_eq!(p.verified_stars, sum + 5);
        // A changed sort key re-ranks: the oldest becomes the newest.
        reviews
            .patch(&1, &1)
            .set(Review::DATE, DateTime::from_millis(99_000))
            .await
            .unwrap();
        let p = parent(&store, 1).await;
        assert_eq!(p.latest[0].id, 1);
        assert_true(&store, 1, "after moderation, a new rating and a new date").await;
        store.delete(&1).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_patch_that_cannot_apply_writes_nothing() {
    for store in common::stores::<Product>().await {
        seeded(&store, 2, 3).await;
        let reviews = store.children(Product::VERIFIED);
        let before = stored(&store, 2).await;
        // Only the patch is wrong: a field twice.
        let twice = reviews
            .patch(&2, &2)
            .inc(Review::HELPFUL, 1)
            .set(Review::HELPFUL, 5)
            .await;
        assert!(
            matches!(&twice, Err(Error::InvalidPatch { field, .. }) if field == "helpful"),
            "{twice:?}"
        );
        assert_eq!(stored(&store, 2).await, before);
        // No such child under this parent.
        let missing = reviews.patch(&2, &99).inc(Review::HELPFUL, 1).await;
        assert!(
            matches!(missing, Err(Error::ChildNotFound { .. })),
            "{missing:?}"
        );
        // Under a product that does not exist: that is what the error names.
        let nowhere = reviews.patch(&3, &2).inc(Review::HELPFUL, 1).await;
        assert!(
            matches!(nowhere, Err(Error::ParentNotFound { .. })),
            "{nowhere:?}"
        );
        // An empty patch is a no-op.
        reviews.patch(&2, &2).await.unwrap();
        assert_eq!(stored(&store, 2).await, before);
        assert_true(&store, 2, "after refused patches").await;
        store.delete(&2).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_patch_no_view_shows_does_not_write_the_parent() {
    /// Only previews, none of which holds `text`, and no order, filter or sum by it.
    #[derive(Debug, Clone, Serialize, Deserialize, Subset)]
    #[subset(collection = "patch_previews_only")]
    struct Shelf {
        #[serde(rename = "_id")]
        id: i32,
        #[subset(
            child = "patch_shelf_reviews",
            key = "shelf_id",
            keep = 2,
            sort = "helpful desc"
        )]
        best: Vec<ReviewPreview>,
        #[subset(
            child = "patch_shelf_reviews",
            key = "shelf_id",
            keep = 2,
            sort = "date desc",
            filter = "!hidden"
        )]
        visible: Vec<ReviewPreview>,
    }

    let (db, log) = common::recorded_replica_db().await;
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let store = Store::<Shelf>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let shelf = Shelf {
            id: 1,
            best: Vec::new(),
            visible: Vec::new(),
        };
        store.insert(&shelf).await.unwrap();
        let reviews = store.children(Shelf::BEST);
        reviews
            .push_many(&1, &(1..=3).map(review).collect::<Vec<_>>())
            .await
            .unwrap();
        let parent_writes = |log: &common::CommandLog| {
            log.lock()
                .unwrap()
                .iter()
                .filter(|(name, target, _)| name == "update" && target == "patch_previews_only")
                .count()
        };
        log.lock().unwrap().clear();
        reviews
            .patch(&1, &3)
            .set(Review::TEXT, "no copy holds this".to_owned())
            .await
            .unwrap();
        // Nothing of the parent changes; in a transaction its marker is touched, so that a
        // rebuild under another model at the same moment conflicts with the patch; without one,
        // the lease on the parent is given back (it was taken by a `findAndModify`).
        let touches = 1;
        assert_eq!(
            parent_writes(&log),
            touches,
            "{mode:?}: {:?}",
            log.lock().unwrap()
        );
        // A preview field is written to the copies, in one parent update.
        log.lock().unwrap().clear();
        reviews
            .patch(&1, &3)
            .set(Review::AUTHOR, "shown".to_owned())
            .await
            .unwrap();
        assert_eq!(
            parent_writes(&log),
            1,
            "{mode:?}: {:?}",
            log.lock().unwrap()
        );
        for view in [Shelf::BEST.spec(), Shelf::VISIBLE.spec()] {
            let drift = store
                .raw()
                .children(view)
                .check(&Bson::Int32(1))
                .await
                .unwrap();
            assert!(drift.is_clean(), "{mode:?}: {drift:?}");
        }
        store.delete(&1).await.unwrap();
    }
}

/// Writers × votes each, spread over `hot` reviews of one product; how many reviews it has.
const WRITERS: i32 = 16;
const VOTES: i32 = 100;
const REVIEWS: i32 = 8;
const HOT: i32 = 3;

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_votes_all_count_and_leave_the_views_exact() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 3, REVIEWS).await;
        let started = Instant::now();
        let writers = (0..WRITERS).map(|w| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::MOST_HELPFUL);
                for v in 0..VOTES {
                    // Most votes go to the hot reviews (two of them old, so they climb into
                    // the view), some to the others; a few are taken back.
                    let id = match (w + v) % 4 {
                        3 => (w + v) % REVIEWS + 1,
                        n => n % HOT + 1,
                    };
                    let vote = reviews.patch(&3, &id);
                    if v % 10 == 9 {
                        vote.dec(Review::HELPFUL, 1).await?;
                    } else {
                        vote.inc(Review::HELPFUL, 1).await?;
                    }
                }
                Ok::<_, Error>(())
            }
        });
        try_join_all(writers).await.unwrap();
        let elapsed = started.elapsed();
        let votes = WRITERS * VOTES;
        println!(
            "{mode:?}: {votes} votes from {WRITERS} writers in {elapsed:.2?} ({:.0}/s)",
            f64::from(votes) / elapsed.as_secs_f64()
        );
        // Every vote counted: each review's total is what its voters gave it.
        let mut expected = vec![0_i64; REVIEWS as usize + 1];
        for w in 0..WRITERS {
            for v in 0..VOTES {
                let id = match (w + v) % 4 {
                    3 => (w + v) % REVIEWS + 1,
                    n => n % HOT + 1,
                };
                expected[id as usize] += if v % 10 == 9 { -1 } else { 1 };
            }
        }
        for id in 1..=REVIEWS {
            let helpful = stored(&store, id).await.get_i64("helpful").unwrap();
            assert_eq!(helpful, expected[id as usize], "{mode:?}: review {id}");
        }
        let p = parent(&store, 3).await;
        assert_eq!(p.votes, expected.iter().sum::<i64>(), "{mode:?}: the sum");
        let mut ranked: Vec<i32> = (1..=REVIEWS).collect();
        ranked.sort_by_key(|&id| std::cmp::Reverse((expected[id as usize], id)));
        let best: Vec<i32> = p.most_helpful.iter().map(|r| r.id).collect();
        assert_eq!(best, ranked[..2], "{mode:?}: the most helpful");
        assert_true(&store, 3, "after concurrent votes").await;
        store.delete(&3).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn flags_flip_under_concurrent_pushes_and_removes() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 4, 10).await;
        let pushers = (0..2).map(|w| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::LATEST);
                for n in 0..20 {
                    reviews.push(&4, &review(100 + w * 100 + n)).await?;
                }
                Ok::<_, Error>(())
            }
        });
        let removers = (0..2).map(|w| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::VISIBLE);
                for id in (1..=10).filter(|id| id % 4 == w) {
                    reviews.remove(&4, &id).await?;
                }
                Ok::<_, Error>(())
            }
        });
        let moderators = (0..2).map(|w| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::VERIFIED);
                for n in 0..20 {
                    // Flags on reviews no remover takes (ids 3 and 7 are 4k+3) and on the new.
                    let id = if n % 2 == 0 {
                        [3, 7][(n / 2 % 2) as usize]
                    } else {
                        100 + w * 100 + n / 2
                    };
                    let flip = reviews.patch(&4, &id);
                    let flip = if w == 0 {
                        flip.set(Review::HIDDEN, n % 4 < 2)
                    } else {
                        flip.set(Review::VERIFIED, n % 4 < 2)
                    };
                    match flip.await {
                        // A new review not pushed yet.
                        Ok(()) | Err(Error::ChildNotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok::<_, Error>(())
            }
        });
        let mut all: Vec<BoxFuture<'_, Result<(), Error>>> = Vec::new();
        all.extend(pushers.map(FutureExt::boxed));
        all.extend(removers.map(FutureExt::boxed));
        all.extend(moderators.map(FutureExt::boxed));
        try_join_all(all).await.unwrap();
        assert_true(&store, 4, "after flips, pushes and removes").await;
        let p = parent(&store, 4).await;
        let total = store.children(Product::LATEST).count(&4).await.unwrap();
        assert_eq!(p.total as u64, total, "{mode:?}");
        store.delete(&4).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn moves_keep_both_parents_true_under_concurrent_pushes() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 5, 8).await;
        store.insert(&product(6)).await.unwrap();
        let reviews = store.children(Product::LATEST);
        // The newest review, embedded everywhere, moves: the old parent backfills.
        reviews.move_child(&5, &8, &6).await.unwrap();
        let (old, new) = (parent(&store, 5).await, parent(&store, 6).await);
        assert_eq!(
            old.latest.iter().map(|r| r.id).collect::<Vec<_>>(),
            [7, 6, 5]
        );
        assert_eq!(new.latest.iter().map(|r| r.id).collect::<Vec<_>>(), [8]);
        assert_eq!((old.total, new.total), (7, 1), "{mode:?}");
        assert_eq!(new.stars, i64::from(review(8).rating));
        assert_eq!(new.verified_total, 1, "{mode:?}: review 8 is verified");
        assert_true(&store, 5, "after a move").await;
        assert_true(&store, 6, "after a move").await;
        // To a parent that does not exist: nothing changes. From the wrong parent: not found.
        let nowhere = reviews.move_child(&5, &7, &99).await;
        assert!(
            matches!(nowhere, Err(Error::ParentNotFound { .. })),
            "{nowhere:?}"
        );
        assert_eq!(stored(&store, 7).await.get_i32("product_id").unwrap(), 5);
        let wrong = reviews.move_child(&5, &8, &6).await;
        assert!(
            matches!(wrong, Err(Error::ChildNotFound { .. })),
            "{wrong:?}"
        );

        // Moves both ways while both parents get pushes.
        let pushers = [5, 6].map(|p| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::VISIBLE);
                for n in 0..15 {
                    reviews.push(&p, &review(1_000 * p + n)).await?;
                }
                Ok::<_, Error>(())
            }
        });
        let movers = [(5, 6), (6, 5)].map(|(from, to)| {
            let store = store.clone();
            async move {
                let reviews = store.children(Product::MOST_HELPFUL);
                for n in 0..8 {
                    // Reviews pushed to `from` above, moved once they are there.
                    let id = 1_000 * from + n;
                    loop {
                        match reviews.move_child(&from, &id, &to).await {
                            Ok(()) => break,
                            Err(Error::ChildNotFound { .. }) => tokio::task::yield_now().await,
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(())
            }
        });
        let mut all: Vec<BoxFuture<'_, Result<(), Error>>> = Vec::new();
        all.extend(pushers.into_iter().map(FutureExt::boxed));
        all.extend(movers.into_iter().map(FutureExt::boxed));
        try_join_all(all).await.unwrap();
        for id in [5, 6] {
            assert_true(&store, id, "after moves under pushes").await;
        }
        let (old, new) = (parent(&store, 5).await, parent(&store, 6).await);
        assert_eq!((old.total, new.total), (7 + 15, 1 + 15), "{mode:?}");
        store.delete(&5).await.unwrap();
        store.delete(&6).await.unwrap();
    }
}

/// How many products the jobs by filter run over, and the spammer's reviews among theirs.
const PRODUCTS: i32 = 200;

/// Products 1..=PRODUCTS, each with four reviews; the spammer wrote one of every product's
/// and a second one of every tenth.
async fn spammed(store: &Store<Product>) {
    let inserts = (1..=PRODUCTS).map(|p| {
        let mut product = product(p);
        product.latest = (0..4)
            .map(|n| {
                let mut r = review(p * 10 + n);
                if n == 0 || (n == 1 && p % 10 == 0) {
                    r.author = "spammer".into();
                }
                r
            })
            .collect();
        let store = store.clone();
        async move { store.insert(&product).await }
    });
    futures::stream::iter(inserts)
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

/// Every view of every product agrees with the child collection.
async fn assert_all_true(store: &Store<Product>, when: &str) {
    let mode = store.mode().await.unwrap();
    let report = store.check_all().await.unwrap();
    assert_eq!(report.progress.checked, PRODUCTS as u64, "{mode:?}, {when}");
    assert!(
        report.drifts.is_empty() && report.failures.is_empty(),
        "{mode:?}, {when}: {} drifted, e.g. {:?}; failures {:?}",
        report.drifts.len(),
        report.drifts.first(),
        report.failures.first()
    );
}

/// Starts `job` and kills it (drops it mid-flight) after a while, `times` times, each time a
/// little later; returns how many of the kills found it still running.
async fn kill_repeatedly<F, Fut>(times: u64, job: F) -> u64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut cut = 0;
    for n in 0..times {
        let running = tokio::spawn(job());
        tokio::time::sleep(std::time::Duration::from_millis(150 + 100 * n)).await;
        if !running.is_finished() {
            cut += 1;
        }
        running.abort();
        let _ = running.await;
    }
    // A command the killed job had sent may still be running on the server: let it end, so
    // that what is counted next is what the rerun finds.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    cut
}

#[tokio::test(flavor = "multi_thread")]
async fn removal_by_filter_killed_and_rerun_ends_as_one_run() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let t = Instant::now();
        spammed(&store).await;
        println!("{mode:?}: seeded in {:.2?}", t.elapsed());
        let spam = doc! { "author": "spammer" };
        let reviews = store.children(Product::VISIBLE);
        let before = reviews.count_where(spam.clone()).await.unwrap();
        let spam_count = u64::from(PRODUCTS as u32) + u64::from(PRODUCTS as u32) / 10;
        assert_eq!(
            (before.parents, before.children),
            (PRODUCTS as u64, spam_count)
        );

        let options = SweepOptions::default().batch_size(50);
        let cut = kill_repeatedly(3, || {
            let store = store.clone();
            let (spam, options) = (spam.clone(), options.clone());
            async move {
                let reviews = store.children(Product::VISIBLE);
                let _ = reviews.remove_where(spam).options(options).await;
            }
        })
        .await;
        let left = reviews.count_where(spam.clone()).await.unwrap();
        println!(
            "{mode:?}: {cut} of 3 runs killed mid-way, {} parents left",
            left.parents
        );
        assert!(
            cut > 0,
            "{mode:?}: no run was cut off: nothing shows resumption"
        );

        let mut batches = 0;
        let t = Instant::now();
        let report = reviews
            .remove_where(spam.clone())
            .options(options.clone())
            .progress(|_| batches += 1)
            .await
            .unwrap();
        println!(
            "{mode:?}: {} parents in {:.2?}",
            report.progress.parents,
            t.elapsed()
        );
        assert!(
            report.failures.is_empty(),
            "{mode:?}: {:?}",
            report.failures
        );
        assert_eq!(report.progress.children, left.children, "{mode:?}");
        assert!(batches > 0 || left.parents == 0);
        let gone = reviews.count_where(spam.clone()).await.unwrap();
        assert_eq!(gone.children, 0, "{mode:?}");
        let p = parent(&store, 10).await;
        assert_eq!(p.total, 2, "{mode:?}: product 10 lost two reviews");
        assert!(p.latest.iter().all(|r| r.author != "spammer"));
        let jobs = store
            .database()
            .collection::<Document>(store.bookkeeping().jobs())
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(
            jobs, 0,
            "{mode:?}: the journal is gone once the job is done"
        );

        // Anonymising by filter: the author changes in the children and in every copy.
        let ann = doc! { "author": "author 13" };
        let report = reviews
            .patch_where(ann.clone())
            .options(options.clone())
            .set(Review::AUTHOR, "anonymous".to_owned())
            .await
            .unwrap();
        assert_eq!((report.progress.parents, report.progress.children), (1, 1));
        let p = parent(&store, 1).await;
        assert!(
            p.visible.iter().any(|r| r.author == "anonymous"),
            "{mode:?}"
        );
        let t = Instant::now();
        assert_all_true(&store, "after the removal and anonymising").await;
        println!("{mode:?}: checked in {:.2?}", t.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_votes_no_view_ranks_by_are_exact_in_every_copy() {
    /// The latest reviews whole: a vote changes a copy in place, never the order.
    #[derive(Debug, Clone, Serialize, Deserialize, Subset)]
    #[subset(collection = "patch_latest_only")]
    struct Latest {
        #[serde(rename = "_id")]
        id: i32,
        #[subset(
            child = "patch_latest_reviews",
            key = "latest_id",
            keep = 5,
            sort = "date desc",
            count = "total"
        )]
        latest: Vec<Review>,
        #[serde(default)]
        total: i64,
    }

    for store in common::stores::<Latest>().await {
        let mode = store.mode().await.unwrap();
        let parent = Latest {
            id: 1,
            latest: (1..=REVIEWS).map(review).collect(),
            total: 0,
        };
        store.insert(&parent).await.unwrap();
        let started = Instant::now();
        let writers = (0..WRITERS).map(|w| {
            let store = store.clone();
            async move {
                let reviews = store.children(Latest::LATEST);
                for v in 0..VOTES {
                    let id = (w * 7 + v) % REVIEWS + 1;
                    reviews.patch(&1, &id).inc(Review::HELPFUL, 1).await?;
                }
                Ok::<_, Error>(())
            }
        });
        try_join_all(writers).await.unwrap();
        println!(
            "{mode:?}: {} in-place votes in {:.2?}",
            WRITERS * VOTES,
            started.elapsed()
        );
        let mut expected = vec![0_i64; REVIEWS as usize + 1];
        for w in 0..WRITERS {
            for v in 0..VOTES {
                expected[((w * 7 + v) % REVIEWS + 1) as usize] += 1;
            }
        }
        let stored = store
            .database()
            .collection::<Document>("patch_latest_reviews");
        for id in 1..=REVIEWS {
            let review = stored.find_one(doc! { "_id": id }).await.unwrap().unwrap();
            assert_eq!(
                review.get_i64("helpful").unwrap(),
                expected[id as usize],
                "{mode:?}"
            );
        }
        let got = store.get(&1).await.unwrap().unwrap();
        for copy in &got.latest {
            assert_eq!(
                copy.helpful, expected[copy.id as usize],
                "{mode:?}: copy {}",
                copy.id
            );
        }
        let drift = store.children(Latest::LATEST).check(&1).await.unwrap();
        assert!(drift.is_clean(), "{mode:?}: {drift:?}");
    }
}

/// `store` on a client of its own named `app`, so that a fail point can hold its commands
/// alone.
/// Has the server hold the next `command` of the client named `app` (see [`on_own_client`])
/// for `held` before running it: the step between two writes held open.
pub(crate) async fn hold_next_for<P: subset::Subset>(
    store: &Store<P>,
    app: &str,
    command: &str,
    held: Duration,
) {
    store
        .database()
        .client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": {
                "failCommands": [command],
                "appName": app,
                "blockConnection": true,
                "blockTimeMS": held.as_millis() as i64,
            },
        })
        .await
        .expect("failCommand (test commands on)");
}

/// Turns the fail point of [`hold_next_for`] off.
pub(crate) async fn release<P: subset::Subset>(store: &Store<P>) {
    store
        .database()
        .client()
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .unwrap();
}

pub(crate) async fn on_own_client<P: subset::Subset>(store: &Store<P>, app: &str) -> Store<P> {
    let server = subset_testkit::MongoServer::shared(subset_testkit::Topology::ReplicaSet)
        .await
        .unwrap();
    let mut options = mongodb::options::ClientOptions::parse(server.uri())
        .await
        .unwrap();
    options.app_name = Some(app.to_owned());
    let client = mongodb::Client::with_options(options).unwrap();
    let mode = store.mode().await.unwrap();
    let db = client.database(store.database().name());
    Store::with_options(&db, subset::StoreOptions::new().mode(mode))
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_by_child_id_read_the_parent_and_follow_a_move() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 11, 4).await;
        store.insert(&product(12)).await.unwrap();
        let reviews = store.children(Product::LATEST);

        reviews
            .patch_by_id(&3)
            .inc(Review::HELPFUL, 2)
            .await
            .unwrap();
        assert_eq!(stored(&store, 3).await.get_i64("helpful").unwrap(), 2);
        assert_eq!(parent(&store, 11).await.votes, 2, "{mode:?}");
        assert_true(&store, 11, "after a patch by id").await;

        reviews.move_by_id(&3, &12).await.unwrap();
        assert_eq!(stored(&store, 3).await.get_i32("product_id").unwrap(), 12);
        assert_eq!(
            (
                parent(&store, 11).await.total,
                parent(&store, 12).await.total
            ),
            (3, 1),
            "{mode:?}"
        );
        assert_true(&store, 11, "after a move by id").await;
        assert_true(&store, 12, "after a move by id").await;

        // The errors the docs list: no such child, no such parent, nothing written.
        let unknown = reviews.patch_by_id(&999).inc(Review::HELPFUL, 1).await;
        assert!(
            matches!(unknown, Err(Error::UnknownChild { .. })),
            "{mode:?}: {unknown:?}"
        );
        let unknown = reviews.move_by_id(&999, &11).await;
        assert!(
            matches!(unknown, Err(Error::UnknownChild { .. })),
            "{mode:?}: {unknown:?}"
        );
        let nowhere = reviews.move_by_id(&3, &99).await;
        assert!(
            matches!(nowhere, Err(Error::ParentNotFound { .. })),
            "{mode:?}: {nowhere:?}"
        );
        let no_parent = reviews.patch(&77, &3).set(Review::HIDDEN, true).await;
        assert!(
            matches!(&no_parent, Err(Error::ParentNotFound { id, .. }) if **id == Bson::Int32(77)),
            "{mode:?}: a patch under a missing parent: {no_parent:?}"
        );
        let no_child = reviews.patch(&11, &3).set(Review::HIDDEN, true).await;
        assert!(
            matches!(no_child, Err(Error::ChildNotFound { .. })),
            "{mode:?}: a patch of a child stored elsewhere: {no_child:?}"
        );
        let no_parent = reviews.move_child(&77, &3, &11).await;
        assert!(
            matches!(no_parent, Err(Error::ParentNotFound { .. })),
            "{mode:?}: a move from a missing parent: {no_parent:?}"
        );
        assert_eq!(stored(&store, 3).await.get_i32("product_id").unwrap(), 12);
        assert!(!stored(&store, 3).await.get_bool("hidden").unwrap());

        // The step between reading the parent and writing the child held open (the voter's
        // child write blocked by the server) while the child moves back: the vote follows it.
        let app = format!("by-id-{}", subset::bson::oid::ObjectId::new().to_hex());
        let voter = on_own_client(&store, &app).await;
        hold_next_for(&store, &app, "findAndModify", Duration::from_millis(2000)).await;
        let vote = tokio::spawn(async move {
            voter
                .children(Product::LATEST)
                .patch_by_id(&3)
                .inc(Review::HELPFUL, 1)
                .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        reviews.move_by_id(&3, &11).await.unwrap();
        assert!(
            !vote.is_finished(),
            "{mode:?}: the vote was not held across the move (the fail point did not fire)"
        );
        let voted = vote.await.unwrap();
        release(&store).await;
        voted.unwrap_or_else(|e| panic!("{mode:?}: the vote did not follow the move: {e}"));
        let review = stored(&store, 3).await;
        assert_eq!(review.get_i32("product_id").unwrap(), 11);
        assert_eq!(
            review.get_i64("helpful").unwrap(),
            3,
            "{mode:?}: counted once"
        );
        assert_eq!(
            (
                parent(&store, 11).await.votes,
                parent(&store, 12).await.votes
            ),
            (3, 0),
            "{mode:?}"
        );
        assert_true(&store, 11, "after a vote that followed a move").await;
        assert_true(&store, 12, "after a vote that followed a move").await;
        store.delete(&11).await.unwrap();
        store.delete(&12).await.unwrap();
    }
}

/// Every call across parents is a `Send` future with the same shape: usable in
/// `tokio::time::timeout`, `select!` and `tokio::spawn` as it is.
#[tokio::test(flavor = "multi_thread")]
async fn calls_across_parents_are_send_and_awaitable_as_they_are() {
    use std::time::Duration;
    let store = Store::<Product>::new(&common::replica_db().await);
    seeded(&store, 21, 3).await;
    let wait = Duration::from_secs(60);
    let reviews = store.children(Product::LATEST);
    let filter = doc! { "author": "author 2" };
    let dry = tokio::time::timeout(wait, reviews.count_where(filter.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((dry.parents, dry.children), (1, 1));
    let checked = tokio::time::timeout(wait, store.check_all()).await.unwrap();
    assert_eq!(checked.unwrap().progress.checked, 1);
    let mut batches = 0;
    tokio::select! {
        report = store.reconcile_all().progress(|_| batches += 1) => {
            assert!(report.unwrap().failures.is_empty());
        }
        () = tokio::time::sleep(wait) => panic!("reconcile_all did not end"),
    }
    assert_eq!(batches, 1);
    let rebuilt = tokio::time::timeout(wait, store.rebuild()).await.unwrap();
    assert!(rebuilt.unwrap().failures.is_empty());
    let spawned = {
        let store = store.clone();
        let filter = filter.clone();
        tokio::spawn(async move {
            let reviews = store.children(Product::LATEST);
            reviews
                .patch_where(filter)
                .set(Review::NOTE, None)
                .progress(|p| assert!(p.children <= 1))
                .await
        })
    };
    assert_eq!(spawned.await.unwrap().unwrap().progress.children, 1);
    let removed = tokio::spawn(async move {
        let reviews = store.children(Product::LATEST);
        reviews.remove_where(filter).await
    });
    assert_eq!(removed.await.unwrap().unwrap().progress.children, 1);
}

fn refused(result: &subset::Result<()>, name: &str) -> bool {
    matches!(result, Err(Error::InvalidPatch { field, .. }) if field == name)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_increment_past_its_type_is_refused_and_writes_nothing() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 30, 3).await;
        let reviews = store.children(Product::LATEST);
        let products = store.database().collection::<Document>("patch_products");
        let stored_parent = || async {
            products
                .find_one(doc! { "_id": 30 })
                .await
                .unwrap()
                .expect("the product is stored")
        };
        let (child, copies) = (stored(&store, 3).await, stored_parent().await);

        // Past `i32::MAX` the server would widen the rating to an int64.
        let wide = reviews.patch(&30, &3).inc(Review::RATING, i32::MAX).await;
        assert!(refused(&wide, "rating"), "{mode:?}: {wide:?}");
        let Err(Error::InvalidPatch { reason, .. }) = &wide else {
            unreachable!()
        };
        assert!(reason.contains("`i32`"), "{mode:?}: {reason}");
        // `-i64::MIN` is no `i64`.
        let negated = reviews.patch(&30, &3).dec(Review::HELPFUL, i64::MIN).await;
        assert!(refused(&negated, "helpful"), "{mode:?}: {negated:?}");
        // Both with a field that would have applied: nothing is written.
        let mixed = reviews
            .patch(&30, &3)
            .set(Review::TEXT, "edited".to_owned())
            .inc(Review::RATING, i32::MAX)
            .await;
        assert!(refused(&mixed, "rating"), "{mode:?}: {mixed:?}");
        assert_eq!(stored(&store, 3).await, child, "{mode:?}");
        assert_eq!(stored_parent().await, copies, "{mode:?}");
        assert_eq!(parent(&store, 30).await.latest[0].rating, review(3).rating);

        // Right up to the limit is fine, and stays an int32.
        let rating = review(3).rating;
        reviews
            .patch(&30, &3)
            .inc(Review::RATING, i32::MAX - rating)
            .await
            .unwrap();
        assert_eq!(
            stored(&store, 3).await.get("rating"),
            Some(&Bson::Int32(i32::MAX))
        );
        let p = parent(&store, 30).await;
        assert_eq!(p.latest[0].rating, i32::MAX, "{mode:?}");
        assert_eq!(
            p.stars,
            [1, 2]
                .map(|id| i64::from(review(id).rating))
                .iter()
                .sum::<i64>()
                + i64::from(i32::MAX)
        );
        let more = reviews.patch(&30, &3).inc(Review::RATING, 1).await;
        assert!(refused(&more, "rating"), "{mode:?}: {more:?}");
        // Down to `i64::MIN` and not one below.
        reviews
            .patch(&30, &3)
            .dec(Review::HELPFUL, i64::MAX)
            .dec(Review::RATING, i32::MAX)
            .await
            .unwrap();
        reviews
            .patch(&30, &3)
            .dec(Review::HELPFUL, 1)
            .await
            .unwrap();
        let below = reviews.patch(&30, &3).dec(Review::HELPFUL, 1).await;
        assert!(refused(&below, "helpful"), "{mode:?}: {below:?}");
        let stored_review = stored(&store, 3).await;
        assert_eq!(stored_review.get("helpful"), Some(&Bson::Int64(i64::MIN)));
        assert_eq!(stored_review.get("rating"), Some(&Bson::Int32(0)));
        assert_eq!(parent(&store, 30).await.latest[0].helpful, i64::MIN);
        assert_true(&store, 30, "after increments to the limits").await;

        // An unsigned field no view orders by (a patch that changes copies in place, by one
        // `update` of its children in a transaction): nothing below 0 or past `u16::MAX`.
        let under = reviews.patch(&30, &2).dec(Review::REPORTS, 1).await;
        assert!(refused(&under, "reports"), "{mode:?}: {under:?}");
        reviews
            .patch(&30, &2)
            .inc(Review::REPORTS, u16::MAX)
            .await
            .unwrap();
        let over = reviews.patch(&30, &2).inc(Review::REPORTS, 1).await;
        assert!(refused(&over, "reports"), "{mode:?}: {over:?}");
        assert_eq!(
            stored(&store, 2).await.get("reports"),
            Some(&Bson::Int32(i32::from(u16::MAX)))
        );
        let p = parent(&store, 30).await;
        assert_eq!(p.latest[1].reports, u16::MAX, "{mode:?}");
        assert_true(&store, 30, "after increments of an unsigned field").await;

        // A review stored without the field reads it as 0: an increment sets it, a decrement
        // would make it negative.
        let reviews_coll = store.database().collection::<Document>("patch_reviews");
        reviews_coll
            .update_one(doc! { "_id": 1 }, doc! { "$unset": { "reports": "" } })
            .await
            .unwrap();
        let negative = reviews.patch(&30, &1).dec(Review::REPORTS, 2).await;
        assert!(refused(&negative, "reports"), "{mode:?}: {negative:?}");
        assert!(!stored(&store, 1).await.contains_key("reports"));
        reviews
            .patch(&30, &1)
            .inc(Review::REPORTS, 2)
            .await
            .unwrap();
        assert_eq!(
            stored(&store, 1).await.get("reports"),
            Some(&Bson::Int32(2))
        );
        assert_eq!(parent(&store, 30).await.latest[2].reports, 2, "{mode:?}");
        assert_true(
            &store,
            30,
            "after an increment of a field the review lacked",
        )
        .await;
        store.delete(&30).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_patch_by_filter_with_nothing_to_do_or_a_refused_filter_leaves_nothing() {
    for store in common::stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        seeded(&store, 31, 3).await;
        let reviews = store.children(Product::LATEST);
        let before = stored(&store, 2).await;

        // Nothing to set or unset: no parent visited, none failed.
        let report = reviews
            .patch_where(doc! { "author": "author 2" })
            .await
            .unwrap();
        assert_eq!(
            (
                report.progress.parents,
                report.progress.children,
                report.progress.failed
            ),
            (0, 0, 0),
            "{mode:?}: {:?}",
            report.failures
        );
        assert_eq!(stored(&store, 2).await, before);

        // A filter the server refuses fails the job and leaves no journal.
        let removed = reviews.remove_where(doc! { "$bogus": 1 }).await;
        assert!(
            matches!(removed, Err(Error::Mongo { .. })),
            "{mode:?}: {removed:?}"
        );
        let patched = reviews
            .patch_where(doc! { "$bogus": 1 })
            .set(Review::HIDDEN, true)
            .await;
        assert!(
            matches!(patched, Err(Error::Mongo { .. })),
            "{mode:?}: {patched:?}"
        );
        let jobs = store
            .database()
            .collection::<Document>(store.bookkeeping().jobs())
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(jobs, 0, "{mode:?}: a refused job left its journal");
        assert_eq!(parent(&store, 31).await.total, 3);
        assert_true(&store, 31, "after refused jobs by filter").await;
        store.delete(&31).await.unwrap();
    }
}
