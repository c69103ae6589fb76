//! What the library keeps in the database besides the documents: every name under one prefix,
//! a bad prefix refused with its reason, and bookkeeping cleaned when its subject goes (a
//! deleted parent's fold document, a refused or finished job's journal).

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use common::*;
use subset::bookkeeping::{Names, PrefixProblem, Registered, MAX_PREFIX_LEN};
use subset::bson;
use subset::raw::ChildPatch;
use subset::{Error, Store, WriteMode};

/// The collections of `db`, sorted.
async fn collections(db: &mongodb::Database) -> Vec<String> {
    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    names
}

/// A fold document for `parent`, as a push queued and cut off would leave it.
async fn plant_fold(store: &Store<Product>, parent: &ObjectId) {
    store
        .database()
        .collection::<Document>(store.bookkeeping().folds())
        .update_one(
            doc! { "_id": {
                "collection": "products", "children": "reviews", "key": "product_id",
                "parent": parent,
            } },
            doc! { "$push": { "queue": { "push": ObjectId::new(), "children": [] } } },
        )
        .upsert(true)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_store_with_a_prefix_writes_only_under_it() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = replica_db().await;
        let store = Store::<Product>::with_options(
            &db,
            subset::StoreOptions::new()
                .mode(mode)
                .bookkeeping_prefix("shop_books")
                .unwrap(),
        );
        assert_eq!(store.bookkeeping().prefix(), "shop_books");
        assert_eq!(store.bookkeeping().marker(), "_subset");
        assert!(
            collections(&db).await.is_empty(),
            "{mode:?}: a fresh database"
        );

        let product = Product::named("prefixed");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        for n in 0..3 {
            reviews.push(&product.id, &Review::at(n)).await.unwrap();
        }
        reviews.reconcile(&product.id).await.unwrap();
        store.reconcile_all().await.unwrap();
        // A job by filter: without transactions it keeps a journal while it runs.
        let report = reviews.remove_where(doc! { "rating": 1 }).await.unwrap();
        assert!(
            report.failures.is_empty(),
            "{mode:?}: {:?}",
            report.failures
        );

        let names = collections(&db).await;
        let ours: Vec<&String> = names
            .iter()
            .filter(|n| !["products", "reviews"].contains(&n.as_str()))
            .collect();
        assert!(
            !ours.is_empty(),
            "{mode:?}: the registry at least: {names:?}"
        );
        for name in &ours {
            assert!(
                store.bookkeeping().collections().contains(&name.as_str()),
                "{mode:?}: {name} is not one of the store's names: {names:?}"
            );
        }
        assert!(
            !names.iter().any(|n| n.starts_with("subset_")),
            "{mode:?}: a default name written: {names:?}"
        );
        // The registry is the prefixed one, and reads back through the store's names.
        let registered = Registered::read(&db, store.bookkeeping(), "products")
            .await
            .unwrap();
        assert!(
            registered.is_some(),
            "{mode:?}: registered under the prefix"
        );
        let default = Registered::read(&db, &Names::default(), "products")
            .await
            .unwrap();
        assert!(default.is_none(), "{mode:?}: nothing under `subset_`");
        assert_subset_true(&store, Product::RECENT_REVIEWS, &product.id.into()).await;
    }
}

#[tokio::test]
async fn a_bad_prefix_is_a_typed_error_naming_it() {
    let db = replica_db().await;
    let long = "p".repeat(MAX_PREFIX_LEN + 1);
    let cases = [
        ("", PrefixProblem::Empty),
        ("shop.subset", PrefixProblem::Dot),
        ("$shop", PrefixProblem::Dollar),
        ("shop\0", PrefixProblem::Nul),
        (long.as_str(), PrefixProblem::TooLong { len: long.len() }),
    ];
    for (prefix, problem) in cases {
        let err = subset::StoreOptions::new()
            .bookkeeping_prefix(prefix)
            .unwrap_err();
        assert_eq!(err.problem, problem, "{prefix:?}");
        assert_eq!(err.prefix, prefix);
        assert!(err.to_string().contains("bookkeeping prefix"), "{err}");
    }
    // The longest one allowed, and the names it makes.
    let longest = "p".repeat(MAX_PREFIX_LEN);
    let store = Store::<Product>::with_options(
        &db,
        subset::StoreOptions::new()
            .bookkeeping_prefix(&longest)
            .unwrap(),
    );
    assert_eq!(
        store.bookkeeping().jobs(),
        format!("{longest}_jobs").as_str()
    );
    assert!(collections(&db).await.is_empty(), "refusing writes nothing");
}

#[tokio::test]
async fn a_deleted_parent_takes_its_fold_document_with_it() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let (gone, kept) = (Product::named("deleted"), Product::named("kept"));
        store.insert(&gone).await.unwrap();
        store.insert(&kept).await.unwrap();
        plant_fold(&store, &gone.id).await;
        plant_fold(&store, &kept.id).await;
        assert!(folds(&store, &gone.id).await.is_some());

        assert!(store.delete(&gone.id).await.unwrap());
        assert!(
            folds(&store, &gone.id).await.is_none(),
            "{mode:?}: the deleted parent's fold document stayed"
        );
        assert!(
            folds(&store, &kept.id).await.is_some(),
            "{mode:?}: another parent's went too"
        );
    }
}

#[tokio::test]
async fn reconciles_drop_the_fold_documents_of_parents_that_are_gone() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let kept = Product::named("kept");
        store.insert(&kept).await.unwrap();
        plant_fold(&store, &kept.id).await;

        // A parent deleted by another program: its reconcile fails, and takes the queue.
        let gone = ObjectId::new();
        plant_fold(&store, &gone).await;
        let err = reviews.reconcile(&gone).await.unwrap_err();
        assert!(
            matches!(err, Error::ParentNotFound { .. }),
            "{mode:?}: {err}"
        );
        assert!(folds(&store, &gone).await.is_none(), "{mode:?}: reconcile");
        // A check writes nothing.
        plant_fold(&store, &gone).await;
        let err = reviews.check(&gone).await.unwrap_err();
        assert!(
            matches!(err, Error::ParentNotFound { .. }),
            "{mode:?}: {err}"
        );
        assert!(
            folds(&store, &gone).await.is_some(),
            "{mode:?}: check wrote"
        );

        // The sweep drops every such document, and keeps those of parents that are there.
        let others: Vec<ObjectId> = (0..3).map(|_| ObjectId::new()).collect();
        for other in &others {
            plant_fold(&store, other).await;
        }
        store.check_all().await.unwrap();
        assert!(
            folds(&store, &others[0]).await.is_some(),
            "{mode:?}: check_all"
        );
        store.reconcile_all().await.unwrap();
        for id in others.iter().chain([&gone]) {
            assert!(folds(&store, id).await.is_none(), "{mode:?}: reconcile_all");
        }
        assert!(folds(&store, &kept.id).await.is_some(), "{mode:?}: kept");
    }
}

#[tokio::test]
async fn a_job_leaves_no_journal_when_it_ends_or_is_refused() {
    // The journal exists only without transactions.
    let db = replica_db().await;
    let store = Store::<Product>::with_options(
        &db,
        subset::StoreOptions::new()
            .mode(WriteMode::Ordered)
            .bookkeeping_prefix("jobs_here")
            .unwrap(),
    );
    let product = Product::named("journaled");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    for n in 0..4 {
        reviews.push(&product.id, &Review::at(n)).await.unwrap();
    }
    let journals = || async {
        db.collection::<Document>(store.bookkeeping().jobs())
            .count_documents(doc! {})
            .await
            .unwrap()
    };
    let refused = reviews.remove_where(doc! { "$bogus": 1 }).await;
    assert!(matches!(refused, Err(Error::Mongo { .. })), "{refused:?}");
    assert_eq!(journals().await, 0, "a refused job left its journal");

    let report = reviews
        .remove_where(doc! { "rating": { "$gte": 3 } })
        .await
        .unwrap();
    assert_eq!(report.progress.children, 2);
    assert_eq!(journals().await, 0, "a finished job left its journal");
    assert_subset_true(&store, Product::RECENT_REVIEWS, &product.id.into()).await;
}

/// A job whose change the server refuses on one parent's children (a path through a string)
/// fails that parent, recomputes its views from what the refused change left, and leaves no
/// journal behind; the other parents are done.
#[tokio::test]
async fn a_job_refused_on_one_parent_leaves_no_journal() {
    let db = replica_db().await;
    let store = Store::<Product>::with_options(
        &db,
        subset::StoreOptions::new()
            .mode(WriteMode::Ordered)
            .bookkeeping_prefix("jobs_refused")
            .unwrap(),
    );
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (fine, refused) = (Product::named("fine"), Product::named("refused"));
    for product in [&fine, &refused] {
        store.insert(product).await.unwrap();
        for n in 0..3 {
            reviews.push(&product.id, &Review::at(n)).await.unwrap();
        }
    }
    // A child whose `meta` is a string: `meta.note` cannot be set in it.
    db.collection::<Document>("reviews")
        .update_one(
            doc! { "product_id": refused.id },
            doc! { "$set": { "meta": "text" } },
        )
        .await
        .unwrap();
    let patch = ChildPatch::new().set("meta.note", "checked");
    let filter = doc! { "rating": { "$gte": 0 } };
    let options = subset::repair::SweepOptions::default();
    let report = reviews
        .raw()
        .patch_where(&filter, &patch, &options, |_| {})
        .await
        .unwrap();
    assert_eq!(report.progress.failed, 1, "{report:?}");
    assert_eq!(report.failures[0].parent, Bson::ObjectId(refused.id));
    let journals = db
        .collection::<Document>(store.bookkeeping().jobs())
        .count_documents(doc! {})
        .await
        .unwrap();
    assert_eq!(journals, 0, "a job refused on one parent left its journal");
    for product in [&fine, &refused] {
        assert_subset_true(&store, Product::RECENT_REVIEWS, &product.id.into()).await;
    }
}

/// A queued push whose caller went away and whose child cannot be written (keyed to another
/// parent): a reconcile does not drop it. In transactions its fold fails with the child's
/// error and leaves the queue as it was; without, the queue is only reported. Either way a
/// check lists the child as queued.
#[tokio::test]
async fn a_queued_push_a_reconcile_cannot_write_stays_queued_and_is_reported() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let db = replica_db().await;
        let store = Store::<Product>::with_options(&db, subset::StoreOptions::new().mode(mode));
        let product = Product::named("queued");
        store.insert(&product).await.unwrap();
        let stray = ObjectId::new();
        let mut child = subset::bson_compat::to_document(&Review::at(1)).unwrap();
        child.insert("_id", stray);
        child.insert("product_id", ObjectId::new());
        store
            .database()
            .collection::<Document>(store.bookkeeping().folds())
            .update_one(
                doc! { "_id": {
                    "collection": "products", "children": "reviews", "key": "product_id",
                    "parent": product.id,
                } },
                doc! { "$push": { "queue": { "push": ObjectId::new(), "children": [child] } } },
            )
            .upsert(true)
            .await
            .unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let reconciled = reviews.reconcile(&product.id).await;
        match mode {
            WriteMode::Transactional => assert!(
                matches!(&reconciled, Err(Error::ParentKeyMismatch { child, .. }) if **child == Bson::ObjectId(stray)),
                "{reconciled:?}"
            ),
            _ => assert_eq!(reconciled.unwrap().queued, [Bson::ObjectId(stray)]),
        }
        assert_eq!(queued(&store, &product.id).await.len(), 1, "{mode:?}: kept");
        let drift = reviews.check(&product.id).await.unwrap();
        assert_eq!(drift.queued, [Bson::ObjectId(stray)], "{mode:?}");
        let report = store.check_all().await.unwrap();
        assert_eq!(report.progress.queued, 1, "{mode:?}");
    }
}
