//! Caller sessions: every write joins the caller's transaction with `.session(&mut s)`, and
//! the caller's commit or abort decides for all of it; every read in that session sees the
//! transaction's own writes.

use crate::common;

use bson::{doc, Bson, Document};
use common::{embedded_ids, replica_db, standalone_db, Product, Review};
use subset::bson;
use subset::{Error, Store, WriteMode};

/// What is stored for `product`: (children in the collection, embedded ids, stored count).
async fn stored(store: &Store<Product>, id: &bson::oid::ObjectId) -> (u64, Vec<Bson>, i64) {
    let db = store.database();
    let children = db
        .collection::<Document>("reviews")
        .count_documents(doc! { "product_id": id })
        .await
        .unwrap();
    let parent = db
        .collection::<Document>("products")
        .find_one(doc! { "_id": id })
        .await
        .unwrap();
    let Some(parent) = parent else {
        return (children, Vec::new(), -1);
    };
    let count = parent.get_i64("total_reviews").unwrap();
    let embedded = embedded_ids(store, "recent_reviews", &Bson::ObjectId(*id)).await;
    (children, embedded, count)
}

/// Both write paths on the replica set: a joined transaction does not depend on the mode.
async fn replica_stores() -> Vec<Store<Product>> {
    vec![
        Store::new(&replica_db().await),
        Store::with_options(
            &replica_db().await,
            subset::StoreOptions::new().mode(WriteMode::Ordered),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_in_an_aborted_caller_transaction_leaves_nothing() {
    for store in replica_stores().await {
        let product = Product::named("grinder");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let mut session = store.database().client().start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        reviews
            .push(&product.id, &Review::at(1))
            .session(&mut session)
            .await
            .unwrap();
        reviews
            .push_many(&product.id, &[Review::at(2), Review::at(3)])
            .session(&mut session)
            .await
            .unwrap();
        // Inside the transaction the caller sees its own writes…
        let inside = store
            .get(&product.id)
            .session(&mut session)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(inside.total_reviews, 3);
        // …and nobody else does.
        assert_eq!(stored(&store, &product.id).await, (0, vec![], 0));
        session.abort_transaction().await.unwrap();
        assert_eq!(stored(&store, &product.id).await, (0, vec![], 0));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_in_a_committed_caller_transaction_is_there_once() {
    for store in replica_stores().await {
        let product = Product::named("grinder");
        let review = Review::at(1);
        let reviews = store.children(Product::RECENT_REVIEWS);
        let mut session = store.database().client().start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        // The caller's own write, the parent and the push: all or nothing.
        store
            .database()
            .collection::<Document>("orders")
            .insert_one(doc! { "product": product.id })
            .session(&mut session)
            .await
            .unwrap();
        store.insert(&product).session(&mut session).await.unwrap();
        reviews
            .push(&product.id, &review)
            .session(&mut session)
            .await
            .unwrap();
        // A retry inside the same transaction is recognised, not stored or counted again, and
        // does not abort the caller's transaction with a duplicate key.
        reviews
            .push(&product.id, &review)
            .session(&mut session)
            .await
            .unwrap();
        session.commit_transaction().await.unwrap();
        let (children, embedded, count) = stored(&store, &product.id).await;
        assert_eq!(children, 1);
        assert_eq!(embedded, vec![Bson::ObjectId(review.id)]);
        assert_eq!(count, 1);
        let orders = store
            .database()
            .collection::<Document>("orders")
            .count_documents(doc! { "product": product.id })
            .await
            .unwrap();
        assert_eq!(orders, 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_update_reconcile_and_delete_follow_the_caller_transaction() {
    for store in replica_stores().await {
        let product = Product::named("grinder");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let all: Vec<Review> = (0..7).map(Review::at).collect();
        reviews.push_many(&product.id, &all).await.unwrap();
        let before = stored(&store, &product.id).await;
        assert_eq!(before.0, 7);

        let mut session = store.database().client().start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        reviews
            .remove(&product.id, &all[6].id)
            .session(&mut session)
            .await
            .unwrap();
        let mut edited = all[0].clone();
        edited.date = bson::DateTime::from_millis(100);
        reviews
            .update(&product.id, &edited)
            .session(&mut session)
            .await
            .unwrap();
        let drift = reviews
            .reconcile(&product.id)
            .session(&mut session)
            .await
            .unwrap();
        assert!(drift.is_clean(), "{drift:?}");
        session.abort_transaction().await.unwrap();
        assert_eq!(stored(&store, &product.id).await, before);

        session.start_transaction().await.unwrap();
        assert!(store
            .delete(&product.id)
            .session(&mut session)
            .await
            .unwrap());
        session.commit_transaction().await.unwrap();
        assert_eq!(stored(&store, &product.id).await, (0, vec![], -1));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_push_in_a_caller_transaction_is_the_callers_to_abort() {
    let store = Store::<Product>::new(&replica_db().await);
    let product = Product::named("grinder");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let mut session = store.database().client().start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    reviews
        .push(&product.id, &Review::at(1))
        .session(&mut session)
        .await
        .unwrap();
    let missing = bson::oid::ObjectId::new();
    let err = reviews
        .push(&missing, &Review::at(2))
        .session(&mut session)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ParentNotFound { .. }), "{err}");
    session.abort_transaction().await.unwrap();
    assert_eq!(stored(&store, &product.id).await, (0, vec![], 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_without_a_transaction_runs_each_write_as_it_would_alone() {
    // On a replica set: each write is still one transaction of its own, on the caller's session.
    // On a standalone server, which has no transactions: in order, on the caller's session.
    for store in [
        Store::<Product>::new(&replica_db().await),
        Store::<Product>::new(&standalone_db().await),
    ] {
        let product = Product::named("grinder");
        let reviews = store.children(Product::RECENT_REVIEWS);
        let mut session = store.database().client().start_session().await.unwrap();
        store.insert(&product).session(&mut session).await.unwrap();
        let review = Review::at(5);
        reviews
            .push(&product.id, &review)
            .session(&mut session)
            .await
            .unwrap();
        reviews
            .push(&product.id, &review)
            .session(&mut session)
            .await
            .unwrap();
        let (children, embedded, count) = stored(&store, &product.id).await;
        assert_eq!(
            (children, embedded, count),
            (1, vec![Bson::ObjectId(review.id)], 1)
        );
        // The session is usable for a transaction of the caller's afterwards, where there are
        // transactions.
        if store.mode().await.unwrap() == WriteMode::Transactional {
            session.start_transaction().await.unwrap();
            reviews
                .remove(&product.id, &review.id)
                .session(&mut session)
                .await
                .unwrap();
            session.commit_transaction().await.unwrap();
            assert_eq!(stored(&store, &product.id).await, (0, vec![], 0));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_in_the_callers_transaction_see_its_own_writes_and_nobody_else_does() {
    use futures::TryStreamExt;
    use subset::PageRequest;
    for store in replica_stores().await {
        let product = Product::named("grinder");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let pushed: Vec<Review> = (1..=8).map(Review::at).collect();
        let mut session = store.database().client().start_session().await.unwrap();
        session.start_transaction().await.unwrap();
        reviews
            .push_many(&product.id, &pushed)
            .session(&mut session)
            .await
            .unwrap();
        // Newest first: the first page comes from the embedded subset, the next by keyset from
        // the child collection, the stream and the count from the collection too.
        let mut newest: Vec<_> = pushed.iter().map(|r| r.id).collect();
        newest.reverse();
        let first = reviews
            .page(&product.id, &PageRequest::first(5))
            .session(&mut session)
            .await
            .unwrap();
        assert_eq!(ids(&first.items), newest[..5]);
        let next = first.next.clone().expect("3 more reviews follow");
        let second = reviews
            .page(&product.id, &PageRequest::after(next, 5))
            .session(&mut session)
            .await
            .unwrap();
        assert_eq!(ids(&second.items), newest[5..]);
        let count = reviews.count(&product.id).session(&mut session).await;
        assert_eq!(count.unwrap(), 8);
        let streamed: Vec<Review> = reviews
            .all(&product.id)
            .session(&mut session)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(ids(&streamed), newest);
        // Outside the transaction nothing is there yet.
        assert_eq!(reviews.count(&product.id).await.unwrap(), 0);
        let outside = reviews
            .page(&product.id, &PageRequest::first(5))
            .await
            .unwrap();
        assert!(outside.items.is_empty());
        session.abort_transaction().await.unwrap();
        assert_eq!(stored(&store, &product.id).await, (0, vec![], 0));
    }
}

fn ids(reviews: &[Review]) -> Vec<bson::oid::ObjectId> {
    reviews.iter().map(|r| r.id).collect()
}
