//! `raw::Children::adopt`: a parent that embeds all its children (the fully-embedded layout)
//! moved into the subset layout, in both write modes.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use futures::TryStreamExt;
use subset::bson;
use subset::raw::{Adopted, Refusal};
use subset::Store;

/// A review as a fully-embedded parent holds it, with or without an `_id`.
fn review(millis: i64, id: bool) -> Document {
    let mut review = doc! {
        "author": format!("author {millis}"),
        "rating": (millis % 5) as i32 + 1,
        "date": DateTime::from_millis(millis),
    };
    if id {
        review.insert("_id", ObjectId::new());
    }
    review
}

/// Stores a product that embeds `reviews` whole, as a program that knew nothing of subsets
/// would: no count, no marker. Returns its `_id`.
async fn embedding(store: &Store<Product>, reviews: Vec<Document>) -> Bson {
    let reviews = reviews.into_iter().map(Bson::Document).collect();
    embedding_any(store, reviews).await
}

/// [`embedding`] of elements that may not be documents.
async fn embedding_any(store: &Store<Product>, reviews: Vec<Bson>) -> Bson {
    let id = Bson::ObjectId(ObjectId::new());
    products(store)
        .insert_one(doc! { "_id": id.clone(), "name": "chair", "recent_reviews": reviews })
        .await
        .unwrap();
    id
}

fn products(store: &Store<Product>) -> mongodb::Collection<Document> {
    store.database().collection("products")
}

async fn parent(store: &Store<Product>, id: &Bson) -> Document {
    products(store)
        .find_one(doc! { "_id": id.clone() })
        .await
        .unwrap()
        .expect("the product is stored")
}

/// Every stored review, in `_id` order.
async fn stored(store: &Store<Product>) -> Vec<Document> {
    store
        .database()
        .collection::<Document>("reviews")
        .find(doc! {})
        .sort(doc! { "_id": 1 })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fully_embedded_parent_is_adopted_and_adopting_it_again_changes_nothing() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        let spec = reviews.spec();
        // Twelve reviews in no order; the subset keeps the five latest.
        let embedded: Vec<Document> = (0..12).map(|i| review((i * 5) % 12, true)).collect();
        let id = embedding(&store, embedded.clone()).await;

        let adopted = reviews.raw().adopt(&id).await.unwrap();
        assert_eq!(
            adopted,
            Adopted::Done {
                inserted: 12,
                already: 0,
                assigned: 0,
                built: false
            }
        );
        // Every review in the child collection, under the product, as it was embedded.
        let children = stored(&store).await;
        assert_eq!(children.len(), 12);
        for child in &children {
            assert_eq!(child.get(spec.key), Some(&id));
            let mut embedded_form = child.clone();
            embedded_form.remove(spec.key);
            assert!(embedded.contains(&embedded_form), "{child}");
        }
        // The subset is the five latest, in order, and the count is every review.
        assert_subset_true(&store, Product::RECENT_REVIEWS, &id).await;
        let Bson::ObjectId(oid) = id else {
            unreachable!()
        };
        let product = store.get(&oid).await.unwrap().unwrap();
        let dates: Vec<i64> = product
            .recent_reviews
            .iter()
            .map(|r| r.date.timestamp_millis())
            .collect();
        assert_eq!(dates, [11, 10, 9, 8, 7]);
        assert_eq!(product.total_reviews, 12);
        assert_eq!(reviews.count(&oid).await.unwrap(), 12);

        // Again: the embedded five are found stored, and nothing changes.
        let before = (parent(&store, &id).await, stored(&store).await);
        let again = reviews.raw().adopt(&id).await.unwrap();
        assert_eq!(
            again,
            Adopted::Done {
                inserted: 0,
                already: 5,
                assigned: 0,
                built: false
            }
        );
        assert_eq!((parent(&store, &id).await, stored(&store).await), before);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn children_without_an_id_are_given_one_first() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        // Three of seven reviews have no `_id`, one of them among the five latest.
        let embedded: Vec<Document> = (0..7).map(|i| review(i, i % 3 != 0)).collect();
        let id = embedding(&store, embedded).await;

        let adopted = reviews.raw().adopt(&id).await.unwrap();
        assert_eq!(
            adopted,
            Adopted::Done {
                inserted: 7,
                already: 0,
                assigned: 3,
                built: false
            }
        );
        let children = stored(&store).await;
        assert_eq!(children.len(), 7);
        assert!(
            children
                .iter()
                .all(|c| matches!(c.get("_id"), Some(Bson::ObjectId(_)))),
            "{children:?}"
        );
        assert_subset_true(&store, Product::RECENT_REVIEWS, &id).await;

        // The ids given are the ids kept: a second adoption copies nothing and gives none.
        let before = (parent(&store, &id).await, children);
        let again = reviews.raw().adopt(&id).await.unwrap();
        assert!(
            matches!(
                again,
                Adopted::Done {
                    inserted: 0,
                    assigned: 0,
                    ..
                }
            ),
            "{again:?}"
        );
        assert_eq!((parent(&store, &id).await, stored(&store).await), before);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_that_would_lose_a_child_is_left_as_it_is() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        let raw = reviews.raw();

        // An element that is not a document, and two elements with one `_id`.
        let not_a_document = embedding_any(
            &store,
            vec![Bson::Document(review(1, true)), Bson::Int32(42)],
        )
        .await;
        let twin = review(2, true);
        let twins = embedding(&store, vec![twin.clone(), twin]).await;
        for (id, field, problem) in [
            (
                &not_a_document,
                "recent_reviews.1",
                "is an int32, not a document",
            ),
            (
                &twins,
                "recent_reviews.1._id",
                "repeats `recent_reviews.0._id`",
            ),
        ] {
            let before = parent(&store, id).await;
            match raw.adopt(id).await.unwrap() {
                Adopted::Refused(Refusal::Malformed {
                    field: f,
                    problem: p,
                }) => {
                    assert_eq!(f, field);
                    assert!(p.starts_with(problem), "{p}");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(parent(&store, id).await, before);
        }
        assert!(stored(&store).await.is_empty());

        // A child stored under another parent: the others are copied, the array stays whole.
        let shared = review(3, true);
        let first = embedding(&store, vec![shared.clone()]).await;
        assert!(matches!(
            raw.adopt(&first).await.unwrap(),
            Adopted::Done { inserted: 1, .. }
        ));
        let second = embedding(&store, vec![review(4, true), shared.clone()]).await;
        let before = parent(&store, &second).await;
        assert_eq!(
            raw.adopt(&second).await.unwrap(),
            Adopted::Refused(Refusal::OwnedElsewhere {
                child: Box::new(shared.get("_id").unwrap().clone()),
                owner: Box::new(first),
            })
        );
        assert_eq!(parent(&store, &second).await, before);
        assert_eq!(stored(&store).await.len(), 2);

        // No such parent; a parent without the field gets its subset from the child collection.
        let nobody = Bson::ObjectId(ObjectId::new());
        assert_eq!(raw.adopt(&nobody).await.unwrap(), Adopted::Gone);
        products(&store)
            .update_one(
                doc! { "_id": second.clone() },
                doc! { "$unset": { "recent_reviews": "" } },
            )
            .await
            .unwrap();
        assert_eq!(
            raw.adopt(&second).await.unwrap(),
            Adopted::Done {
                inserted: 0,
                already: 0,
                assigned: 0,
                built: true
            }
        );
        assert_subset_true(&store, Product::RECENT_REVIEWS, &second).await;
    }
}

/// An element that already carries the parent key with another parent's `_id` is not
/// rewritten to this parent: the adoption is refused naming the parent, the child and the key,
/// before anything is written. One carrying this parent's own `_id` is adopted.
#[tokio::test(flavor = "multi_thread")]
async fn an_element_keyed_to_another_parent_is_refused_not_overwritten() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        let raw = reviews.raw();
        let elsewhere = Bson::ObjectId(ObjectId::new());
        let mut stray = review(2, true);
        stray.insert("product_id", elsewhere.clone());
        let id = embedding(&store, vec![review(1, true), stray.clone()]).await;
        let before = parent(&store, &id).await;
        assert_eq!(
            raw.adopt(&id).await.unwrap(),
            Adopted::Refused(Refusal::KeyMismatch {
                parent: Box::new(id.clone()),
                child: Box::new(stray.get("_id").unwrap().clone()),
                field: "recent_reviews.1.product_id".to_owned(),
                found: Box::new(elsewhere),
            })
        );
        assert_eq!(parent(&store, &id).await, before);
        assert!(stored(&store).await.is_empty());

        let kept = embedding(&store, vec![review(3, true)]).await;
        products(&store)
            .update_one(
                doc! { "_id": kept.clone() },
                doc! { "$set": { "recent_reviews.0.product_id": kept.clone() } },
            )
            .await
            .unwrap();
        assert!(matches!(
            raw.adopt(&kept).await.unwrap(),
            Adopted::Done { inserted: 1, .. }
        ));
    }
}

/// A parent left out of a migration (as `subset migrate --skip-invalid` leaves an invalid one)
/// still holds the only copy of its children: a reconcile, a check and a rebuild each refuse it
/// with `Error::NotMigrated`, naming it, and write nothing, while the migrated parents beside it
/// are rebuilt; allowed to empty, a rebuild drops them, as asked. Whether unmarked parents count
/// as built under the current model or under none, in both write modes.
#[tokio::test(flavor = "multi_thread")]
async fn a_parent_left_unmigrated_is_not_reconciled_or_rebuilt_away() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let migrated = embedding(&store, (0..12).map(|i| review(i, true)).collect()).await;
        assert!(matches!(
            reviews.raw().adopt(&migrated).await.unwrap(),
            Adopted::Done { inserted: 12, .. }
        ));
        let skipped = embedding(&store, (0..12).map(|i| review(100 + i, true)).collect()).await;
        let before = parent(&store, &skipped).await;
        let skipped_id = skipped.as_object_id().unwrap();
        let first = before.get_array("recent_reviews").unwrap()[0]
            .as_document()
            .unwrap()
            .get("_id")
            .unwrap()
            .clone();
        let not_migrated = |result: subset::Result<subset::repair::Drift>, what: &str| match result
        {
            Err(subset::Error::NotMigrated {
                id,
                field,
                child_collection,
                absent,
                first: named,
                ..
            }) => {
                assert_eq!(*id, skipped, "{mode:?}: {what}");
                assert_eq!(
                    (field.as_str(), child_collection.as_str(), absent),
                    ("recent_reviews", "reviews", 12),
                    "{mode:?}: {what}"
                );
                assert_eq!(*named, first, "{mode:?}: {what}");
            }
            other => panic!("{mode:?}: {what}: {other:?}"),
        };

        // Counted as built under this model (the registry's legacy definition).
        not_migrated(reviews.check(&skipped_id).await, "check");
        not_migrated(reviews.reconcile(&skipped_id).await, "reconcile");
        assert_eq!(parent(&store, &skipped).await, before, "{mode:?}");

        // Counted as built under none: every unmarked parent is rebuilt.
        store
            .database()
            .collection::<Document>(subset::bookkeeping::Names::default().definitions())
            .update_one(
                doc! { "_id": "products" },
                doc! { "$set": { "legacy": "" } },
            )
            .await
            .unwrap();
        let store = match mode {
            subset::WriteMode::Ordered => Store::<Product>::with_options(
                store.database(),
                subset::StoreOptions::new().mode(mode),
            ),
            _ => Store::<Product>::new(store.database()),
        };
        let reviews = store.children(Product::RECENT_REVIEWS);
        not_migrated(reviews.check(&skipped_id).await, "check, outdated");
        not_migrated(reviews.reconcile(&skipped_id).await, "reconcile, outdated");
        // Beside a parent to rebuild that keeps its children (unmarked), refused alone.
        products(&store)
            .update_one(
                doc! { "_id": migrated.clone() },
                doc! { "$unset": { "_subset": "" } },
            )
            .await
            .unwrap();
        let rebuilt = store.rebuild().await.unwrap();
        assert_eq!(rebuilt.progress.fixed, 1, "{mode:?}");
        let failed: Vec<&Bson> = rebuilt.failures.iter().map(|f| &f.parent).collect();
        assert_eq!(failed, [&skipped], "{mode:?}: {:?}", rebuilt.failures);
        assert!(
            matches!(rebuilt.failures[0].error, subset::Error::NotMigrated { .. }),
            "{mode:?}: {:?}",
            rebuilt.failures[0].error
        );
        assert_eq!(parent(&store, &skipped).await, before, "{mode:?}");
        assert_subset_true(&store, Product::RECENT_REVIEWS, &migrated).await;

        // Allowed to, a rebuild drops them.
        let options = subset::repair::SweepOptions::default().allow_emptying(true);
        let dropped = store.rebuild().options(options).await.unwrap();
        assert!(
            dropped.failures.is_empty(),
            "{mode:?}: {:?}",
            dropped.failures
        );
        assert_subset_true(&store, Product::RECENT_REVIEWS, &skipped).await;
    }
}

/// The keys of a parent's marker that mark an adoption under way (`a_<field>`).
async fn adoption_marks(store: &Store<Product>, id: &Bson) -> Vec<String> {
    let marker = parent(store, id).await.get_document("_subset").cloned();
    let keys = marker.map(|m| m.keys().cloned().collect::<Vec<_>>());
    let marks = keys.unwrap_or_default().into_iter();
    marks.filter(|k| k.starts_with("a_")).collect()
}

/// A migration cut off after it began to copy a parent's children (here four of twelve were
/// copied by an earlier run, and the server refuses this run's copy of the rest) leaves the
/// parent marked as being adopted, its whole array the only copy of the other eight: a check,
/// a reconcile and a rebuild each refuse it with `Error::NotMigrated`, naming it, its view and
/// the first child not stored, and write nothing, while reads see it as before. Adopting it
/// again finishes it and takes the mark away, as a whole adoption leaves none; allowed to, a
/// rebuild drops the children not copied. In both write modes.
#[tokio::test(flavor = "multi_thread")]
async fn an_adoption_cut_off_while_copying_is_refused_until_adopted_again() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let app = format!("adopt-cut-off-{mode:?}");
        let own = crate::mutations::on_own_client(&store, &app).await;
        let reviews = own.children(Product::RECENT_REVIEWS);
        let (raw, key) = (reviews.raw(), reviews.spec().key);
        let whole = embedding(&store, (0..12).map(|i| review(i, true)).collect()).await;
        assert!(matches!(
            raw.adopt(&whole).await.unwrap(),
            Adopted::Done { inserted: 12, .. }
        ));
        assert!(adoption_marks(&store, &whole).await.is_empty(), "{mode:?}");

        // Two parents of twelve reviews, the first four of each copied by an earlier run.
        let mut cut = Vec::new();
        for p in 1..=2 {
            let embedded: Vec<Document> = (0..12).map(|i| review(100 * p + i, true)).collect();
            let id = embedding(&store, embedded.clone()).await;
            let copied = embedded[..4].iter().map(|r| {
                let mut r = r.clone();
                r.insert(key, id.clone());
                r
            });
            let children = store.database().collection::<Document>("reviews");
            children.insert_many(copied).await.unwrap();
            cut.push((id, embedded));
        }
        let oid = |id: &Bson| id.as_object_id().unwrap();
        // What a read serves: the first `keep` of the array, as of an unmarked parent.
        let read = |id: Bson| {
            let store = &store;
            async move {
                let product = store.get(&oid(&id)).await.unwrap().unwrap();
                let ids = product.recent_reviews.iter().map(|r| r.id);
                (ids.collect::<Vec<_>>(), product.total_reviews)
            }
        };
        let read_before = read(cut[0].0.clone()).await;

        // This run marks each parent, and the server refuses its copy (interrupted, code
        // 11601, which the driver does not retry).
        let admin = store.database().client().database("admin");
        admin
            .run_command(doc! {
                "configureFailPoint": "failCommand",
                "mode": { "times": 2 },
                "data": { "failCommands": ["insert"], "appName": &app, "errorCode": 11601 },
            })
            .await
            .expect("failCommand (test commands on)");
        let results = [raw.adopt(&cut[0].0).await, raw.adopt(&cut[1].0).await];
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        admin.run_command(off).await.unwrap();
        for (result, (id, embedded)) in results.iter().zip(&cut) {
            assert!(result.is_err(), "{mode:?}: {result:?}");
            let array = parent(&store, id).await;
            let array = array.get_array("recent_reviews").unwrap();
            let held: Vec<&Document> = array.iter().filter_map(Bson::as_document).collect();
            assert_eq!(held, embedded.iter().collect::<Vec<_>>(), "{mode:?}");
        }
        assert_eq!(read(cut[0].0.clone()).await, read_before, "{mode:?}");

        let (first, embedded) = &cut[0];
        let befores = [parent(&store, first).await, parent(&store, &cut[1].0).await];
        let first_absent = embedded[4].get("_id").unwrap().clone();
        let not_migrated = |result: subset::Result<subset::repair::Drift>, what: &str| match result
        {
            Err(subset::Error::NotMigrated {
                id,
                field,
                child_collection,
                absent,
                first: named,
                ..
            }) => {
                assert_eq!(&*id, first, "{mode:?}: {what}");
                assert_eq!(
                    (field.as_str(), child_collection.as_str(), absent),
                    ("recent_reviews", "reviews", 8),
                    "{mode:?}: {what}"
                );
                assert_eq!(*named, first_absent, "{mode:?}: {what}");
            }
            other => panic!("{mode:?}: {what}: {other:?}"),
        };
        let typed = store.children(Product::RECENT_REVIEWS);
        not_migrated(typed.check(&oid(first)).await, "check");
        not_migrated(typed.reconcile(&oid(first)).await, "reconcile");
        let message = typed.reconcile(&oid(first)).await.unwrap_err().to_string();
        assert!(
            message.contains("`subset migrate` (or `Children::adopt`) for it again"),
            "{message}"
        );
        // Refused alone, beside a parent the rebuild rebuilds.
        products(&store)
            .update_one(
                doc! { "_id": whole.clone() },
                doc! { "$unset": { "_subset": "" } },
            )
            .await
            .unwrap();
        let rebuilt = store.rebuild().await.unwrap();
        assert_eq!(rebuilt.progress.fixed, 1, "{mode:?}");
        let mut failed: Vec<&Bson> = rebuilt.failures.iter().map(|f| &f.parent).collect();
        failed.sort_by_key(|id| id.to_string());
        let mut expected = vec![first, &cut[1].0];
        expected.sort_by_key(|id| id.to_string());
        assert_eq!(failed, expected, "{mode:?}: {:?}", rebuilt.failures);
        for failure in &rebuilt.failures {
            assert!(
                matches!(failure.error, subset::Error::NotMigrated { absent: 8, .. }),
                "{mode:?}: {:?}",
                failure.error
            );
        }
        let reconciled = store.reconcile_all().await.unwrap();
        assert_eq!(reconciled.failures.len(), 2, "{mode:?}: {reconciled:?}");
        let afters = [parent(&store, first).await, parent(&store, &cut[1].0).await];
        assert_eq!(afters, befores, "{mode:?}");
        for (id, _) in &cut {
            let marks = adoption_marks(&store, id).await;
            assert_eq!(marks, ["a_recent_reviews"], "{mode:?}");
        }
        assert_eq!(read(first.clone()).await, read_before, "{mode:?}");

        // Adopted again: the rest copied, the view built, the mark gone.
        assert_eq!(
            raw.adopt(first).await.unwrap(),
            Adopted::Done {
                inserted: 8,
                already: 4,
                assigned: 0,
                built: false
            },
            "{mode:?}"
        );
        assert!(adoption_marks(&store, first).await.is_empty(), "{mode:?}");
        assert_subset_true(&store, Product::RECENT_REVIEWS, first).await;
        assert!(
            typed.check(&oid(first)).await.unwrap().is_clean(),
            "{mode:?}"
        );

        // Allowed to, a rebuild drops the eight the other one's array alone held.
        let options = subset::repair::SweepOptions::default().allow_emptying(true);
        let dropped = store.rebuild().options(options).await.unwrap();
        assert!(
            dropped.failures.is_empty(),
            "{mode:?}: {:?}",
            dropped.failures
        );
        let other = &cut[1].0;
        assert!(adoption_marks(&store, other).await.is_empty(), "{mode:?}");
        assert_subset_true(&store, Product::RECENT_REVIEWS, other).await;
        assert_eq!(typed.count(&oid(other)).await.unwrap(), 4, "{mode:?}");
    }
}

/// Without a transaction, a reconcile of a parent whose adoption was cut off, itself cut off
/// between its writes (here the server closes the connection of its reads of the children),
/// marks the parent as built under none but keeps the adoption's mark: the children only its
/// array holds are still refused to a check, and adopting it again finishes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_reconcile_cut_off_keeps_the_mark_of_an_adoption_cut_off() {
    let _fail_point = crate::FAIL_POINT.lock().await;
    let store = Store::<Product>::with_options(
        &replica_db().await,
        subset::StoreOptions::new().mode(subset::WriteMode::Ordered),
    );
    let app = "adopt-reconcile-cut-off";
    let own = crate::mutations::on_own_client(&store, app).await;
    let reviews = own.children(Product::RECENT_REVIEWS);
    // A first adoption registers the model, which no fail point below then refuses.
    let whole = embedding(&store, vec![review(1, true)]).await;
    reviews.raw().adopt(&whole).await.unwrap();
    let embedded: Vec<Document> = (0..12).map(|i| review(100 + i, true)).collect();
    let id = embedding(&store, embedded.clone()).await;
    let copied = embedded[..4].iter().map(|r| {
        let mut r = r.clone();
        r.insert(reviews.spec().key, id.clone());
        r
    });
    let children = store.database().collection::<Document>("reviews");
    children.insert_many(copied).await.unwrap();
    let admin = store.database().client().database("admin");
    let fail = |command: &str, data: Document| {
        let mut with = doc! { "failCommands": [command], "appName": app };
        with.extend(data);
        doc! { "configureFailPoint": "failCommand", "mode": "alwaysOn", "data": with }
    };
    let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
    admin
        .run_command(fail("insert", doc! { "errorCode": 11601 }))
        .await
        .unwrap();
    let adopted = reviews.raw().adopt(&id).await;
    admin.run_command(off.clone()).await.unwrap();
    assert!(adopted.is_err(), "{adopted:?}");

    admin
        .run_command(fail("aggregate", doc! { "closeConnection": true }))
        .await
        .unwrap();
    let reconciled = reviews.raw().reconcile(&id).await;
    admin.run_command(off).await.unwrap();
    assert!(reconciled.is_err(), "{reconciled:?}");
    let marker = parent(&store, &id).await;
    let marker = marker.get_document("_subset").unwrap();
    assert_eq!(marker.get_str("d").ok(), Some(""), "{marker}");
    assert!(marker.contains_key("a_recent_reviews"), "{marker}");

    let oid = id.as_object_id().unwrap();
    let typed = store.children(Product::RECENT_REVIEWS);
    let checked = typed.check(&oid).await;
    assert!(
        matches!(checked, Err(subset::Error::NotMigrated { absent: 8, .. })),
        "{checked:?}"
    );
    assert!(matches!(
        reviews.raw().adopt(&id).await.unwrap(),
        Adopted::Done {
            inserted: 8,
            already: 4,
            ..
        }
    ));
    assert!(adoption_marks(&store, &id).await.is_empty());
    assert_subset_true(&store, Product::RECENT_REVIEWS, &id).await;
}

/// The follower sees the copies an adoption makes, and every child written afterwards. A parent
/// whose adoption was cut off after some copies holds in its array the only copies of the rest:
/// a child written under it must not have the follower trim the array to the children stored.
/// The follower passes it over (`NotMigrated`, counted as failed), and the array stays whole.
#[tokio::test(flavor = "multi_thread")]
async fn the_follower_passes_over_a_parent_whose_adoption_was_cut_off() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use subset::follow::{FollowOptions, FollowUpdate};

    let _fail_point = crate::FAIL_POINT.lock().await;
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let app = format!("adopt-followed-{mode:?}");
        let own = crate::mutations::on_own_client(&store, &app).await;
        let reviews = own.children(Product::RECENT_REVIEWS);
        let (raw, key) = (reviews.raw(), reviews.spec().key);
        // A first adoption registers the model, so that the refused insert below is the copy's.
        let whole = embedding(&store, vec![review(1, true)]).await;
        raw.adopt(&whole).await.unwrap();
        let embedded: Vec<Document> = (0..12).map(|i| review(1_000 + i, true)).collect();
        let id = embedding(&store, embedded.clone()).await;
        let children = store.database().collection::<Document>("reviews");
        let copied = embedded[..4].iter().map(|r| {
            let mut r = r.clone();
            r.insert(key, id.clone());
            r
        });
        children.insert_many(copied).await.unwrap();
        // The rest of the copy is refused: the parent is marked, four of twelve are stored.
        let admin = store.database().client().database("admin");
        admin
            .run_command(doc! {
                "configureFailPoint": "failCommand",
                "mode": { "times": 1 },
                "data": { "failCommands": ["insert"], "appName": &app, "errorCode": 11601 },
            })
            .await
            .expect("failCommand (test commands on)");
        let cut_off = raw.adopt(&id).await;
        let off = doc! { "configureFailPoint": "failCommand", "mode": "off" };
        admin.run_command(off).await.unwrap();
        assert!(cut_off.is_err(), "{mode:?}: {cut_off:?}");
        let before = parent(&store, &id).await;
        assert!(
            !adoption_marks(&store, &id).await.is_empty(),
            "{mode:?}: {before:?}"
        );

        let (started, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (s, f) = (Arc::clone(&started), Arc::clone(&failed));
        let follower = store
            .follow(FollowOptions::new(format!("adopt-{mode:?}")).window(Duration::from_millis(30)))
            .on_update(move |update| match update {
                FollowUpdate::Started { .. } => {
                    s.fetch_add(1, Ordering::SeqCst);
                }
                FollowUpdate::Batch(batch) => {
                    f.fetch_add(batch.failed, Ordering::SeqCst);
                }
                _ => {}
            })
            .spawn();
        let deadline = Instant::now() + Duration::from_secs(20);
        while started.load(Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < deadline,
                "{mode:?}: the follower did not start"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A new review under the parent, written around the library (another program's).
        let mut newest = review(10_000, true);
        newest.insert(key, id.clone());
        children.insert_one(newest).await.unwrap();
        while failed.load(Ordering::SeqCst) == 0 {
            assert!(
                Instant::now() < deadline,
                "{mode:?}: the follower did not pass the parent over: {:?}",
                parent(&store, &id).await
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let stats = follower.stop().await.unwrap();
        assert_eq!(stats.written, 0, "{mode:?}: {stats:?}");
        assert_eq!(parent(&store, &id).await, before, "{mode:?}");

        // Adopting again copies the rest, the new review among the children, and builds the view.
        assert!(
            matches!(
                raw.adopt(&id).await.unwrap(),
                Adopted::Done {
                    inserted: 8,
                    already: 4,
                    ..
                }
            ),
            "{mode:?}"
        );
        let typed = store.children(Product::RECENT_REVIEWS);
        let oid = id.as_object_id().unwrap();
        assert!(typed.check(&oid).await.unwrap().is_in_sync(), "{mode:?}");
        assert_eq!(typed.count(&oid).await.unwrap(), 13, "{mode:?}");
    }
}
