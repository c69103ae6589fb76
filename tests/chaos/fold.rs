//! Pushes to one parent from several processes at once: with folding on, a parent whose push
//! transaction conflicted is folded (its pushes queue in its document of `subset_folds`, and one
//! transaction at a time writes every push queued); with it off (the default), the conflict is
//! retried and counted, and nothing is created.
//! Each `Store::new` stands for a process here: stores built apart share no group commit.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use common::*;
use subset::bson;
use subset::{Error, Store};

/// Stores over one database that share nothing, as the stores of separate processes.
async fn fleet(n: usize) -> Vec<Store<Product>> {
    let db = replica_db().await;
    (0..n)
        .map(|_| Store::with_options(&db, subset::StoreOptions::new().folding(true)))
        .collect()
}

async fn stored_ids(store: &Store<Product>, parent: &ObjectId) -> Vec<Bson> {
    let reviews = store.database().collection::<Document>("reviews");
    let mut ids = Vec::new();
    let mut cursor = reviews.find(doc! { "product_id": parent }).await.unwrap();
    while cursor.advance().await.unwrap() {
        ids.push(
            cursor
                .current()
                .get("_id")
                .unwrap()
                .unwrap()
                .try_into()
                .unwrap(),
        );
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_from_many_processes_to_one_parent_each_land_once() {
    const STORES: usize = 4;
    const TASKS: usize = 4;
    const PUSHES: usize = 30;
    let stores = fleet(STORES).await;
    let product = Product::named("viral");
    stores[0].insert(&product).await.unwrap();
    let mut tasks = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        for t in 0..TASKS {
            let (store, id) = (store.clone(), product.id);
            tasks.push(tokio::spawn(async move {
                let reviews = store.children(Product::RECENT_REVIEWS);
                let mut pushed = Vec::new();
                for n in 0..PUSHES {
                    let review = Review::at(((s * TASKS + t) * PUSHES + n) as i64);
                    reviews.push(&id, &review).await.unwrap();
                    pushed.push(Bson::ObjectId(review.id));
                }
                pushed
            }));
        }
    }
    let mut acknowledged = Vec::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    let store = &stores[0];
    let mut stored = stored_ids(store, &product.id).await;
    acknowledged.sort_by_key(Bson::to_string);
    stored.sort_by_key(Bson::to_string);
    assert_eq!(stored, acknowledged, "every acknowledged push stored once");
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
    assert!(
        queued(store, &product.id).await.is_empty(),
        "nothing left queued"
    );
    // The parent was contended, and folded: its document counts the folds.
    let document = folds(store, &product.id).await;
    let n = document.as_ref().and_then(|d| d.get_i64("folds").ok());
    assert!(n.is_some_and(|n| n > 0), "never folded: {document:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_folding_a_conflict_is_retried_counted_and_creates_nothing() {
    let store = Store::<Product>::new(&replica_db().await);
    let product = Product::named("held, not folded");
    store.insert(&product).await.unwrap();
    assert_eq!(store.contention(), Default::default());
    // Another process's transaction holds the parent while the push runs.
    let mut holder = hold(&store, &product.id).await;
    let (pusher, id, review) = (store.clone(), product.id, Review::at(3));
    let push = tokio::spawn(async move {
        pusher
            .children(Product::RECENT_REVIEWS)
            .push(&id, &review)
            .await
    });
    wait_for(|| async { store.contention().conflicts > 0 }).await;
    holder.commit_transaction().await.unwrap();
    push.await.unwrap().unwrap();
    let contention = store.contention();
    assert_eq!(contention.parents, 1, "{contention:?}");
    assert_eq!(stored_ids(&store, &product.id).await.len(), 1);
    assert_subset_true(&store, Product::RECENT_REVIEWS, &product.id.into()).await;
    let names = store.database().list_collection_names().await.unwrap();
    assert!(
        !names.iter().any(|n| n == store.bookkeeping().folds()),
        "folding off created the fold documents' collection: {names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_that_conflicted_is_folded_once_the_parent_is_free() {
    let stores = fleet(1).await;
    let store = &stores[0];
    let product = Product::named("held");
    store.insert(&product).await.unwrap();
    let review = Review::at(7);
    folded(store, &product.id, &review).await.unwrap();
    assert_eq!(
        stored_ids(store, &product.id).await,
        [Bson::ObjectId(review.id)]
    );
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
    assert!(queued(store, &product.id).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_cut_off_after_queueing_is_written_by_the_next_fold() {
    let stores = fleet(1).await;
    let store = &stores[0];
    let product = Product::named("cut off");
    store.insert(&product).await.unwrap();
    // A push that queues behind a transaction holding the parent, then is cut off (its future
    // dropped, as when its process dies) before the parent is free.
    let mut holder = hold(store, &product.id).await;
    let lost = Review::at(1);
    let (pusher, id, r) = (store.clone(), product.id, lost.clone());
    let push =
        tokio::spawn(async move { pusher.children(Product::RECENT_REVIEWS).push(&id, &r).await });
    wait_for(|| async { !queued(store, &product.id).await.is_empty() }).await;
    push.abort();
    let _ = push.await;
    holder.commit_transaction().await.unwrap();
    assert!(
        stored_ids(store, &product.id).await.is_empty(),
        "not written yet"
    );
    // Nothing of it shows: it is only queued.
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(got.total_reviews, 0);

    let next = Review::at(2);
    folded(store, &product.id, &next).await.unwrap();
    let mut stored = stored_ids(store, &product.id).await;
    stored.sort_by_key(Bson::to_string);
    let mut expected = vec![Bson::ObjectId(lost.id), Bson::ObjectId(next.id)];
    expected.sort_by_key(Bson::to_string);
    assert_eq!(stored, expected);
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
    assert!(queued(store, &product.id).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_caller_went_away_is_found_by_check_and_written_by_reconcile() {
    let stores = fleet(1).await;
    let store = &stores[0];
    let reviews = store.children(Product::RECENT_REVIEWS);
    let product = Product::named("abandoned");
    store.insert(&product).await.unwrap();
    let lost = cut_off_after_queueing(store, &product.id).await;
    let id = Bson::ObjectId(lost.id);

    // A check finds it, and writes nothing.
    let drift = reviews.check(&product.id).await.unwrap();
    assert_eq!(drift.queued, std::slice::from_ref(&id), "{drift:?}");
    assert!(!drift.is_in_sync() && !drift.fixed, "{drift:?}");
    let report = store.check_all().await.unwrap();
    assert_eq!(report.progress.queued, 1, "{:?}", report.progress);
    assert_eq!(report.progress.drifted, 1, "{:?}", report.progress);
    assert!(stored_ids(store, &product.id).await.is_empty());

    // Without a transaction a reconcile reports it and leaves it queued.
    let options = subset::StoreOptions::new().mode(subset::WriteMode::Ordered);
    let ordered = Store::<Product>::with_options(store.database(), options);
    let drift = ordered
        .children(Product::RECENT_REVIEWS)
        .reconcile(&product.id)
        .await
        .unwrap();
    assert_eq!(drift.queued, std::slice::from_ref(&id), "{drift:?}");
    assert!(stored_ids(store, &product.id).await.is_empty());
    assert_eq!(queued(store, &product.id).await.len(), 1);

    // In transactions it writes it: into the child collection, the subset and the count.
    let drift = reviews.reconcile(&product.id).await.unwrap();
    assert_eq!(drift.queued, std::slice::from_ref(&id), "{drift:?}");
    assert!(drift.fixed, "{drift:?}");
    assert_eq!(
        stored_ids(store, &product.id).await,
        std::slice::from_ref(&id)
    );
    assert!(queued(store, &product.id).await.is_empty());
    let got = store.get(&product.id).await.unwrap().unwrap();
    assert_eq!(got.total_reviews, 1);
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
    let drift = reviews.check(&product.id).await.unwrap();
    assert!(drift.is_clean(), "{drift:?}");

    // The same through the sweep, which counts what it wrote.
    let again = cut_off_after_queueing(store, &product.id).await;
    let report = store.reconcile_all().await.unwrap();
    assert_eq!(report.progress.queued, 1, "{:?}", report.progress);
    assert_eq!(report.progress.fixed, 1, "{:?}", report.progress);
    assert!(stored_ids(store, &product.id)
        .await
        .contains(&Bson::ObjectId(again.id)));
    assert!(queued(store, &product.id).await.is_empty());
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
}

/// Pushes a review that queues behind a transaction holding `parent`, then is cut off (its
/// future dropped, as when its process dies) before the parent is free; returns it.
async fn cut_off_after_queueing(store: &Store<Product>, parent: &ObjectId) -> Review {
    let before = queued(store, parent).await.len();
    let mut holder = hold(store, parent).await;
    let lost = Review::at(1_000 + before as i64);
    let (pusher, id, r) = (store.clone(), *parent, lost.clone());
    let push =
        tokio::spawn(async move { pusher.children(Product::RECENT_REVIEWS).push(&id, &r).await });
    wait_for(|| async { queued(store, parent).await.len() > before }).await;
    push.abort();
    let _ = push.await;
    holder.commit_transaction().await.unwrap();
    lost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_that_cannot_write_an_entry_writes_each_push_alone() {
    let stores = fleet(1).await;
    let store = &stores[0];
    let (product, other) = (Product::named("folded"), Product::named("owner"));
    store.insert(&product).await.unwrap();
    store.insert(&other).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    // A queued push nobody can write, as another program might leave in the queue.
    let garbage = ObjectId::new();
    store
        .database()
        .collection::<Document>(store.bookkeeping().folds())
        .update_one(
            doc! { "_id": {
                "collection": "products", "children": "reviews", "key": "product_id",
                "parent": product.id,
            } },
            doc! { "$push": { "queue": { "push": garbage, "children": [5] } } },
        )
        .upsert(true)
        .await
        .unwrap();
    let review = Review::at(3);
    folded(store, &product.id, &review).await.unwrap();
    assert_eq!(
        stored_ids(store, &product.id).await,
        [Bson::ObjectId(review.id)]
    );
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
    // Set aside, not folded again.
    let document = folds(store, &product.id).await.unwrap();
    assert_eq!(document.get_array("queue").unwrap(), &Vec::<Bson>::new());
    let alone = document.get_array("alone").unwrap();
    assert_eq!(alone, &vec![Bson::ObjectId(garbage)]);

    // A push that fails in a fold gets its own error, as it would alone.
    let owned = Review::at(4);
    reviews.push(&other.id, &owned).await.unwrap();
    let err = folded(store, &product.id, &owned).await.unwrap_err();
    assert!(matches!(err, Error::ChildOwnedElsewhere { .. }), "{err}");
    let document = folds(store, &product.id).await.unwrap();
    assert_eq!(document.get_array("queue").unwrap(), &Vec::<Bson>::new());
    let alone = document.get_array("alone").unwrap();
    assert_eq!(
        alone,
        &vec![Bson::ObjectId(garbage)],
        "forgotten once written alone"
    );
    assert_subset_true(store, Product::RECENT_REVIEWS, &product.id.into()).await;
    assert_subset_true(store, Product::RECENT_REVIEWS, &other.id.into()).await;
}
