//! Bad input: stored documents of the wrong shape on every read path (`get`, `page`, `all`,
//! `reconcile`, `check`), strings that look like operators or paths, unicode and very long
//! text, and parent ids of the wrong type. Typed errors naming the collection, the `_id` and the
//! field; never a panic. (`tests/it/store.rs` covers `get` and `page` of malformed parents and
//! `page`/`all` of a child of the wrong type.)

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::bson_compat;
use subset::{Child, Error, PageRequest, Store};

/// Writes `doc` straight through the driver into `collection`.
async fn raw_insert(store: &Store<Product>, collection: &str, doc: Document) {
    store
        .database()
        .collection::<Document>(collection)
        .insert_one(doc)
        .await
        .unwrap();
}

/// A product with `n` reviews dated 1..=n, pushed through the library.
async fn product_with(store: &Store<Product>, n: i64) -> Product {
    let product = Product::named("bad input");
    store.insert(&product).await.unwrap();
    let batch: Vec<Review> = (1..=n).map(Review::at).collect();
    store
        .children(Product::RECENT_REVIEWS)
        .push_many(&product.id, &batch)
        .await
        .unwrap();
    product
}

/// Asserts `err` is `MalformedParent` naming `products`, `id` and `field`, and its message too.
fn assert_malformed_parent(err: &Error, id: ObjectId, field: &str, problem: &str) {
    match err {
        Error::MalformedParent {
            collection,
            id: got,
            field: got_field,
            problem: got_problem,
        } => {
            assert_eq!(collection, "products", "{err}");
            assert_eq!(**got, Bson::ObjectId(id), "{err}");
            assert_eq!(got_field, field, "{err}");
            assert!(got_problem.contains(problem), "{err}");
        }
        other => panic!("expected MalformedParent of {field}, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("products") && text.contains(&id.to_hex()) && text.contains(field),
        "{text}"
    );
}

/// Asserts `err` is `MalformedChild` naming `collection`, `id` and `field`.
fn assert_malformed_child(err: &Error, collection: &str, id: &Bson, field: &str) {
    match err {
        Error::MalformedChild {
            collection: got,
            id: got_id,
            field: got_field,
            ..
        } => {
            assert_eq!(got, collection, "{err}");
            assert_eq!(**got_id, *id, "{err}");
            assert_eq!(got_field, field, "{err}");
        }
        other => panic!("expected MalformedChild of {field}, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(collection) && text.contains(field), "{text}");
}

/// Asserts `err` is a `MalformedChild` naming `parent`, in its fields and its message.
fn assert_names_parent(err: &Error, parent: &Bson) {
    match err {
        Error::MalformedChild { parent: got, .. } => {
            assert_eq!(got.as_deref(), Some(parent), "{err}");
        }
        other => panic!("expected MalformedChild of parent {parent}, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&format!("of parent {parent}")), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subset_field_of_the_wrong_shape_fails_reconcile_check_and_the_sweeps() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        let cases = [
            (
                Bson::String("oops".into()),
                "recent_reviews",
                "not an array",
            ),
            (Bson::Int32(5), "recent_reviews", "not an array"),
            (
                Bson::Array(vec![Bson::Int32(1)]),
                "recent_reviews.0",
                "not an embedded child",
            ),
            (
                Bson::Array(vec![Bson::Document(doc! {}), Bson::Null]),
                "recent_reviews.1",
                "not an embedded child",
            ),
        ];
        for (value, field, problem) in cases {
            let product = product_with(&store, 3).await;
            store
                .database()
                .collection::<Document>("products")
                .update_one(
                    doc! { "_id": product.id },
                    doc! { "$set": { "recent_reviews": value.clone() } },
                )
                .await
                .unwrap();
            let from_get = store.get(&product.id).await.unwrap_err();
            assert_malformed_parent(&from_get, product.id, field, problem);
            let from_page = reviews
                .page(&product.id, &PageRequest::first(2))
                .await
                .unwrap_err();
            assert_malformed_parent(&from_page, product.id, field, problem);
            let from_check = reviews.check(&product.id).await.unwrap_err();
            assert_malformed_parent(&from_check, product.id, field, problem);
            let from_reconcile = reviews.reconcile(&product.id).await.unwrap_err();
            assert_malformed_parent(&from_reconcile, product.id, field, problem);
            // The sweeps go past it and report it, naming it.
            for sweep in [store.check_all().await, store.reconcile_all().await] {
                let report = sweep.unwrap();
                assert_eq!(report.progress.failed, 1);
                let [failure] = report.failures.as_slice() else {
                    panic!("one failure: {:?}", report.failures);
                };
                assert_eq!(failure.parent, Bson::ObjectId(product.id));
                assert_eq!(failure.field, "recent_reviews");
                assert_malformed_parent(&failure.error, product.id, field, problem);
            }
            // Nothing was rewritten; the children are all still readable from the collection.
            let stored = store
                .database()
                .collection::<Document>("products")
                .find_one(doc! { "_id": product.id })
                .await
                .unwrap()
                .unwrap();
            assert_eq!(stored.get("recent_reviews"), Some(&value));
            let all: Vec<Review> = reviews
                .all(&product.id)
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            assert_eq!(all.len(), 3);
            store.delete(&product.id).await.unwrap();
        }
    }
}

/// A push into a parent edited out of shape behind the library's back (its subset not an
/// array, its count not a number), which the server refuses, is `MalformedParent` naming the
/// field, as a read of it is, and leaves the parent and the child collection as they were.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_into_a_parent_out_of_shape_is_malformed_parent_and_writes_nothing() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let cases = [
            (
                "recent_reviews",
                Bson::String("oops".into()),
                "is a string, not an array",
            ),
            (
                "total_reviews",
                Bson::String("ten".into()),
                "is a string, not a number",
            ),
        ];
        for (field, value, problem) in cases {
            let product = product_with(&store, 3).await;
            let parents = store.database().collection::<Document>("products");
            parents
                .update_one(
                    doc! { "_id": product.id },
                    doc! { "$set": { field: value.clone() } },
                )
                .await
                .unwrap();
            let before = parents.find_one(doc! { "_id": product.id }).await.unwrap();
            let pushed = reviews.push(&product.id, &Review::at(10)).await;
            let err = pushed.expect_err("a push into a parent out of shape");
            assert_malformed_parent(&err, product.id, field, problem);
            let after = parents.find_one(doc! { "_id": product.id }).await.unwrap();
            assert_eq!(after, before, "{mode:?}: {field}");
            let stored = store
                .database()
                .collection::<Document>("reviews")
                .count_documents(doc! { "product_id": product.id })
                .await
                .unwrap();
            assert_eq!(stored, 3, "{mode:?}: {field}");
        }
    }
}

/// An increment of a child field edited into a string behind the library's back, which the
/// server refuses, is `MalformedChild` naming the child, its parent and the field, and changes
/// nothing: neither the child nor its embedded copy.
#[tokio::test(flavor = "multi_thread")]
async fn an_increment_of_a_child_field_that_is_not_a_number_is_malformed_child() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = product_with(&store, 3).await;
        let children = store.database().collection::<Document>("reviews");
        let child = children
            .find_one(doc! { "product_id": product.id })
            .await
            .unwrap()
            .unwrap();
        let id = child.get_object_id("_id").unwrap();
        children
            .update_one(doc! { "_id": id }, doc! { "$set": { "rating": "five" } })
            .await
            .unwrap();
        let parents = store.database().collection::<Document>("products");
        let before = (
            children.find_one(doc! { "_id": id }).await.unwrap(),
            parents.find_one(doc! { "_id": product.id }).await.unwrap(),
        );
        let err = reviews
            .patch(&product.id, &id)
            .inc(Review::RATING, 1)
            .await
            .expect_err("an increment of a string");
        assert_malformed_child(&err, "reviews", &Bson::ObjectId(id), "rating");
        assert_names_parent(&err, &Bson::ObjectId(product.id));
        assert!(
            err.to_string().contains("is a string, not a number"),
            "{err}"
        );
        let after = (
            children.find_one(doc! { "_id": id }).await.unwrap(),
            parents.find_one(doc! { "_id": product.id }).await.unwrap(),
        );
        assert_eq!(after, before, "{mode:?}");
    }
}

/// One `push_many` given the same child twice is refused before any write, alike in both
/// modes (the server's unique index would refuse it in a transaction only).
#[tokio::test(flavor = "multi_thread")]
async fn a_push_many_holding_one_child_twice_is_refused_before_any_write() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = product_with(&store, 3).await;
        let twice = Review::at(10);
        let err = reviews
            .push_many(&product.id, &[Review::at(11), twice.clone(), twice.clone()])
            .await
            .expect_err("a child twice");
        match &err {
            Error::RepeatedChild {
                collection,
                parent,
                id,
            } => {
                assert_eq!(collection, "reviews");
                assert_eq!(**parent, Bson::ObjectId(product.id));
                assert_eq!(**id, Bson::ObjectId(twice.id));
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        assert_eq!(reviews.count(&product.id).await.unwrap(), 3, "{mode:?}");
        let stored = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!(stored.total_reviews, 3, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_subset_field_is_an_error_to_read_and_drift_to_reconcile() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = product_with(&store, 7).await;
        let parents = store.database().collection::<Document>("products");
        parents
            .update_one(
                doc! { "_id": product.id },
                doc! { "$unset": { "recent_reviews": "" } },
            )
            .await
            .unwrap();
        let err = store.get(&product.id).await.unwrap_err();
        assert_malformed_parent(&err, product.id, "recent_reviews", "is missing");
        let err = reviews
            .page(&product.id, &PageRequest::first(5))
            .await
            .unwrap_err();
        assert_malformed_parent(&err, product.id, "recent_reviews", "is missing");
        // Reconcile's job is to rebuild the subset from the collection: the field comes back.
        let drift = reviews.check(&product.id).await.unwrap();
        assert_eq!(drift.missing.len(), 5, "{drift:?}");
        assert!(!drift.fixed);
        let drift = reviews.reconcile(&product.id).await.unwrap();
        assert!(drift.fixed, "{drift:?}");
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
        assert_eq!(
            store
                .get(&product.id)
                .await
                .unwrap()
                .unwrap()
                .recent_reviews
                .len(),
            5
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_count_of_the_wrong_type_is_named_refused_by_push_and_recounted_by_reconcile() {
    for store in stores::<Product>().await {
        let mode = store.mode().await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = product_with(&store, 3).await;
        let parents = store.database().collection::<Document>("products");
        parents
            .update_one(
                doc! { "_id": product.id },
                doc! { "$set": { "total_reviews": "three" } },
            )
            .await
            .unwrap();
        let err = store.get(&product.id).await.unwrap_err();
        assert_malformed_parent(&err, product.id, "total_reviews", "does not decode");
        // The server refuses `$inc` on a string: named as a read names it.
        let late = Review::at(10);
        let err = reviews.push(&product.id, &late).await.unwrap_err();
        assert_malformed_parent(&err, product.id, "total_reviews", "not a number");
        // Nothing of the push is left, in either mode: the server refused the parent update, so
        // an ordered push takes its child out again.
        let stored = reviews.count(&product.id).await.unwrap();
        assert_eq!(stored, 3, "{mode:?}");
        let drift = reviews.reconcile(&product.id).await.unwrap();
        assert_eq!(drift.count, Some((0, stored)), "{drift:?}");
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
        assert_eq!(
            store.get(&product.id).await.unwrap().unwrap().total_reviews,
            stored as i64
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_children_are_named_on_every_read_path() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let product = product_with(&store, 8).await;
    let date = DateTime::from_millis(100);
    // Newer than every good child, so they rank first; each wrong in one way.
    let (no_author, bad_rating) = (ObjectId::new(), ObjectId::new());
    raw_insert(
        &store,
        "reviews",
        doc! { "_id": no_author, "product_id": product.id, "rating": 1, "date": date },
    )
    .await;
    raw_insert(
        &store,
        "reviews",
        doc! { "_id": bad_rating, "product_id": product.id, "author": "x", "rating": [1], "date": date },
    )
    .await;
    // Pages from the collection and the stream name the child collection, `_id` and field
    // (`_id` descending breaks the tie on date: the later ObjectId first).
    let err = reviews
        .page(&product.id, &PageRequest::first(20))
        .await
        .unwrap_err();
    assert_malformed_child(&err, "reviews", &Bson::ObjectId(bad_rating), "rating");
    assert_names_parent(&err, &Bson::ObjectId(product.id));
    let results: Vec<_> = reviews.all(&product.id).await.unwrap().collect().await;
    assert_eq!(results.len(), 10);
    let err = results[0].as_ref().unwrap_err();
    assert_malformed_child(err, "reviews", &Bson::ObjectId(bad_rating), "rating");
    assert_names_parent(err, &Bson::ObjectId(product.id));
    // A missing field is named as the field.
    let err = results[1].as_ref().unwrap_err();
    match err {
        Error::MalformedChild { field, problem, .. } => {
            assert_eq!(field, "author");
            assert!(problem.contains("missing field"), "{problem}");
        }
        other => panic!("expected MalformedChild, got {other}"),
    }
    assert!(results[2..].iter().all(Result::is_ok));

    // Reconcile works on documents and does not judge their shape: it embeds what ranks
    // first. The parent is then malformed, and reading it names the embedded element.
    let drift = reviews.reconcile(&product.id).await.unwrap();
    assert_eq!(drift.missing.len(), 2, "{drift:?}");
    assert_eq!(drift.count, Some((8, 10)));
    let err = store.get(&product.id).await.unwrap_err();
    assert_malformed_child(
        &err,
        "products",
        &Bson::ObjectId(bad_rating),
        "recent_reviews.0.rating",
    );
    assert_names_parent(&err, &Bson::ObjectId(product.id));
    let err = reviews
        .page(&product.id, &PageRequest::first(5))
        .await
        .unwrap_err();
    assert_malformed_child(
        &err,
        "products",
        &Bson::ObjectId(bad_rating),
        "recent_reviews.0.rating",
    );
    // Removing the bad children through the library heals everything.
    for id in [bad_rating, no_author] {
        reviews.remove(&product.id, &id).await.unwrap();
    }
    assert_eq!(
        store.get(&product.id).await.unwrap().unwrap().total_reviews,
        8
    );
    assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sort_key_of_the_wrong_type_is_named_by_all_and_by_a_collection_page() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let product = product_with(&store, 12).await;
    // A date stored as a string by some other writer. MongoDB sorts every string before every
    // date, so in `date desc` order it comes last.
    let odd = ObjectId::new();
    raw_insert(
        &store,
        "reviews",
        doc! { "_id": odd, "product_id": product.id, "author": "x", "rating": 1, "date": "2024-01-01" },
    )
    .await;
    let results: Vec<_> = reviews.all(&product.id).await.unwrap().collect().await;
    assert_eq!(results.len(), 13);
    assert!(results[..12].iter().all(Result::is_ok));
    assert_malformed_child(
        results[12].as_ref().unwrap_err(),
        "reviews",
        &Bson::ObjectId(odd),
        "date",
    );
    // One page from the collection large enough to reach it.
    let err = reviews
        .page(&product.id, &PageRequest::first(50))
        .await
        .unwrap_err();
    assert_malformed_child(&err, "reviews", &Bson::ObjectId(odd), "date");
    // Reconcile ranks it where the server does, outside the top `keep`: nothing to fix but
    // the count.
    let drift = reviews.reconcile(&product.id).await.unwrap();
    assert!(
        drift.missing.is_empty() && drift.stale.is_empty(),
        "{drift:?}"
    );
    assert_eq!(drift.count, Some((12, 13)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_without_its_parent_key_is_invisible_and_its_id_is_refused() {
    for store in stores::<Product>().await {
        let reviews = store.children(Product::RECENT_REVIEWS);
        let product = product_with(&store, 2).await;
        // No parent key at all, and the parent's id as a string rather than an ObjectId.
        let orphan = Review::at(50);
        let mut doc = bson_compat::to_document(&orphan).unwrap();
        raw_insert(&store, "reviews", doc.clone()).await;
        let stray = Review::at(60);
        doc = bson_compat::to_document(&stray).unwrap();
        doc.insert("product_id", product.id.to_hex());
        raw_insert(&store, "reviews", doc).await;

        // Neither is the parent's child on any read path.
        let page = reviews
            .page(&product.id, &PageRequest::first(50))
            .await
            .unwrap();
        assert_eq!(page.items.len(), 2);
        assert_eq!(reviews.all(&product.id).await.unwrap().count().await, 2);
        assert_eq!(reviews.count(&product.id).await.unwrap(), 2);
        assert!(reviews.check(&product.id).await.unwrap().is_clean());
        // Pushing either id is refused, naming who holds it; nothing changes.
        for (child, owner) in [
            (&orphan, Bson::Null),
            (&stray, Bson::String(product.id.to_hex())),
        ] {
            match reviews.push(&product.id, child).await.unwrap_err() {
                Error::ChildOwnedElsewhere {
                    collection,
                    id,
                    owner: got,
                    ..
                } => {
                    assert_eq!(collection, "reviews");
                    assert_eq!(*id, Bson::ObjectId(child.id));
                    assert_eq!(*got, owner);
                }
                other => panic!("{other:?}"),
            }
            // Nor can it be removed or updated through this parent.
            let err = reviews.remove(&product.id, &child.id).await.unwrap_err();
            assert!(matches!(err, Error::ChildNotFound { .. }), "{err}");
            let err = reviews.update(&product.id, child).await.unwrap_err();
            assert!(matches!(err, Error::ChildNotFound { .. }), "{err}");
        }
        let got = store.get(&product.id).await.unwrap().unwrap();
        assert_eq!((got.recent_reviews.len(), got.total_reviews), (2, 2));
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Tag {
    #[serde(rename = "_id")]
    id: String,
    label: String,
    note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "boards")]
struct Board {
    #[serde(rename = "_id")]
    id: String,
    title: String,
    // Sorted by a string, so hostile strings also travel in keyset filters and cursors.
    #[subset(child = "tags", keep = 3, sort = "label asc", count = "tag_count")]
    tags: Vec<Tag>,
    #[serde(default)]
    tag_count: i64,
}

/// Strings that are operators, paths, or unusual text.
fn hostile() -> Vec<String> {
    let mut strings: Vec<String> = [
        "$set",
        "$inc",
        "$where",
        "$$ROOT",
        "$",
        "{ \"$gt\": \"\" }",
        "{\"$ne\": null}",
        "a.b.c",
        ".",
        "..",
        "tags.$[]",
        "tags.0",
        "",
        " ",
        "日本語のレビュー",
        "🦀 crab 👩‍👩‍👧 family",
        "עברית RTL",
        "e\u{301} combining",
        "\u{200B}zero width\u{FEFF}",
        "tab\tnew\nline\r",
        "quote \" backslash \\",
        "\u{10FFFF}",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    strings.push("x".repeat(300_000));
    strings.push("ü$.".repeat(100_000));
    strings
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_strings_round_trip_verbatim() {
    for store in stores::<Board>().await {
        store.ensure_indexes().await.unwrap();
        let strings = hostile();
        let board = Board {
            id: "$set.board.日本".to_owned(),
            title: "{ \"$inc\": { \"tag_count\": 100 } }".to_owned(),
            tags: Vec::new(),
            tag_count: 0,
        };
        store.insert(&board).await.unwrap();
        let tags = store.children(Board::TAGS);
        let all_tags: Vec<Tag> = strings
            .iter()
            .enumerate()
            .map(|(i, s)| Tag {
                id: format!("{s}#{i}").chars().take(200).collect(),
                label: s.clone(),
                note: s.clone(),
            })
            .collect();
        let (one_by_one, batch) = all_tags.split_at(all_tags.len() / 2);
        for tag in one_by_one {
            tags.push(&board.id, tag).await.unwrap();
        }
        tags.push_many(&board.id, batch).await.unwrap();

        let mut expected = all_tags.clone();
        expected.sort_by(|a, b| (a.label.as_bytes(), &a.id).cmp(&(b.label.as_bytes(), &b.id)));
        // The parent, verbatim, with the first three in order and the exact count.
        let got = store.get(&board.id).await.unwrap().unwrap();
        assert_eq!(got.title, board.title);
        assert_eq!(got.tags, expected[..3]);
        assert_eq!(got.tag_count, strings.len() as i64);
        // Every page, through encoded cursors, in order, verbatim.
        for size in [1, 2, 3, 7] {
            let mut request = PageRequest::first(size);
            let mut paged = Vec::new();
            loop {
                let page = tags.page(&board.id, &request).await.unwrap();
                paged.extend(page.items);
                match page.next {
                    Some(next) => {
                        let token = next.encode();
                        assert!(
                            token
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                            "URL-safe token"
                        );
                        request = PageRequest::after(token.parse().unwrap(), size);
                    }
                    None => break,
                }
            }
            assert!(
                paged == expected,
                "page size {size}: order or content differs"
            );
        }
        let streamed: Vec<Tag> = tags
            .all(&board.id)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert!(streamed == expected);
        // Stored as given: no operator ran, no path was followed.
        let raw = store
            .database()
            .collection::<Document>("tags")
            .find_one(doc! { "_id": &expected[0].id })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(raw.get_str("label").unwrap(), expected[0].label);
        assert_eq!(raw.get_str("board_id").unwrap(), board.id);
        // And the lifecycle works on them.
        let mut edited = expected[1].clone();
        edited.note = "$unset".to_owned();
        tags.update(&board.id, &edited).await.unwrap();
        tags.remove(&board.id, &expected[0].id).await.unwrap();
        let got = store.get(&board.id).await.unwrap().unwrap();
        assert_eq!(got.tags[0], edited);
        assert_eq!(got.tags[1..], expected[2..4]);
        assert!(tags.reconcile(&board.id).await.unwrap().is_clean());
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, subset::Subset)]
#[subset(collection = "accounts")]
struct Account {
    #[serde(rename = "_id")]
    id: u64,
    #[subset(child = "entries", keep = 2, sort = "date desc")]
    recent: Vec<Review>,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_id_that_cannot_be_bson_is_a_typed_error() {
    let store = Store::<Account>::new(&replica_db().await);
    let entries = store.children(Account::RECENT);
    // BSON has no unsigned 64-bit integer; this one does not fit an int64.
    let id = u64::MAX;
    let is_id_error =
        |e: &Error| matches!(e, Error::Serialize { what, .. } if what.contains("_id"));
    let errors = [
        store.get(&id).await.unwrap_err(),
        store.delete(&id).await.unwrap_err(),
        entries.push(&id, &Review::at(1)).await.unwrap_err(),
        entries.push_many(&id, &[Review::at(1)]).await.unwrap_err(),
        entries.page(&id, &PageRequest::first(2)).await.unwrap_err(),
        entries.count(&id).await.unwrap_err(),
        entries.remove(&id, &ObjectId::new()).await.unwrap_err(),
        entries.update(&id, &Review::at(1)).await.unwrap_err(),
        entries.reconcile(&id).await.unwrap_err(),
        entries.check(&id).await.unwrap_err(),
    ];
    for err in &errors {
        assert!(is_id_error(err), "{err:?}");
    }
    assert!(is_id_error(&entries.all(&id).await.err().unwrap()));
    // Nothing was written anywhere.
    for name in ["accounts", "entries"] {
        let n = store
            .database()
            .collection::<Document>(name)
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(n, 0, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_id_of_the_wrong_bson_type_finds_no_parent() {
    for store in stores::<Product>().await {
        let product = product_with(&store, 2).await;
        let raw = store.raw().children(Product::RECENT_REVIEWS.spec());
        // The right hex, the wrong type: a string is not the ObjectId.
        let wrong = Bson::String(product.id.to_hex());
        let child = bson_compat::to_document(&Review::at(5)).unwrap();
        for err in [
            raw.push(&wrong, vec![child.clone()]).await.unwrap_err(),
            raw.page(&wrong, &PageRequest::first(2)).await.unwrap_err(),
            raw.page(&wrong, &PageRequest::first(20)).await.unwrap_err(),
            raw.reconcile(&wrong).await.unwrap_err(),
            raw.check(&wrong).await.unwrap_err(),
        ] {
            match err {
                Error::ParentNotFound { collection, id } => {
                    assert_eq!(collection, "products");
                    assert_eq!(*id, wrong);
                }
                other => panic!("{other:?}"),
            }
        }
        let err = raw
            .remove(&wrong, child.get("_id").unwrap())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ChildNotFound { .. }), "{err}");
        assert_eq!(raw.count(&wrong).await.unwrap(), 0);
        assert!(store.raw().get(&wrong).await.unwrap().is_none());
        // Nothing was left in the child collection, and the real parent is untouched.
        assert_eq!(
            store
                .children(Product::RECENT_REVIEWS)
                .count(&product.id)
                .await
                .unwrap(),
            2
        );
        let n = store
            .database()
            .collection::<Document>("reviews")
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(n, 2);
        assert_subset_true(&store, Product::RECENT_REVIEWS, &Bson::ObjectId(product.id)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sort_key_of_the_wrong_type_is_reported_by_keyset_pages_not_skipped() {
    for store in stores::<Product>().await {
        store.ensure_indexes().await.unwrap();
        let product = Product::named("mistyped");
        store.insert(&product).await.unwrap();
        let reviews = store.children(Product::RECENT_REVIEWS);
        let batch: Vec<Review> = (0..12).map(Review::at).collect();
        reviews.push_many(&product.id, &batch).await.unwrap();
        // Written by someone else, with the date as a string: `$lt: <date>` never matches it.
        let bad = ObjectId::new();
        store
            .database()
            .collection::<Document>("reviews")
            .insert_one(doc! { "_id": bad, "product_id": product.id, "author": "x", "rating": 1, "date": "2024-01-01" })
            .await
            .unwrap();
        let mut request = PageRequest::first(5);
        let mut served = 0;
        let err = loop {
            match reviews.page(&product.id, &request).await {
                Ok(page) => {
                    served += page.items.len();
                    match page.next {
                        Some(next) => request = PageRequest::after(next, 5),
                        None => panic!("the walk ended after {served} children without an error"),
                    }
                }
                Err(e) => break e,
            }
        };
        assert_eq!(
            served, 10,
            "the well-typed children before the end are served"
        );
        match &err {
            Error::MalformedChild {
                collection,
                id,
                parent,
                field,
                problem,
            } => {
                assert_eq!(collection, "reviews");
                assert_eq!(**id, Bson::ObjectId(bad));
                // The parent is named too, in the error and its message.
                let of = Bson::ObjectId(product.id);
                assert_eq!(parent.as_deref(), Some(&of), "{err}");
                assert!(
                    err.to_string().contains(&format!("of parent {of}")),
                    "{err}"
                );
                assert_eq!(field, "date");
                assert!(
                    problem.contains("a string") && problem.contains("a date"),
                    "{problem}"
                );
            }
            other => panic!("expected MalformedChild, got {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_cursor_value_is_a_value_not_an_operator() {
    use base64::Engine as _;
    let store = Store::<Product>::new(&replica_db().await);
    let product = Product::named("forged");
    store.insert(&product).await.unwrap();
    let reviews = store.children(Product::RECENT_REVIEWS);
    let batch: Vec<Review> = (0..12).map(Review::at).collect();
    reviews.push_many(&product.id, &batch).await.unwrap();
    // A cursor whose date is `{"$ne": null}`: read as an operator it would match every child.
    let forged = doc! {
        "v": 1,
        "f": "recent_reviews",
        "p": product.id,
        "k": [{ "$ne": null }, ObjectId::new()],
    };
    let mut bytes = Vec::new();
    forged.to_writer(&mut bytes).unwrap();
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    match token.parse::<subset::Cursor>() {
        Err(Error::InvalidCursor { reason }) => assert!(reason.contains("scalar"), "{reason}"),
        other => panic!("expected InvalidCursor, got {other:?}"),
    }
    // A forged scalar is only a position: the children after it, no more.
    let forged = doc! {
        "v": 1,
        "f": "recent_reviews",
        "p": product.id,
        "k": [DateTime::from_millis(6), ObjectId::new()],
    };
    let mut bytes = Vec::new();
    forged.to_writer(&mut bytes).unwrap();
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let page = reviews
        .page(&product.id, &PageRequest::after(token.parse().unwrap(), 20))
        .await
        .unwrap();
    let dates: Vec<i64> = page
        .items
        .iter()
        .map(|r| r.date.timestamp_millis())
        .collect();
    assert_eq!(dates, [6, 5, 4, 3, 2, 1, 0]);
}

/// Every single-byte corruption of a token is refused as `InvalidCursor`, or decodes to a cursor
/// that encodes and decodes to itself: never another error, never a panic.
#[test]
fn every_single_byte_flip_of_a_token_is_rejected_or_a_whole_cursor() {
    use base64::Engine as _;
    let base64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let token = doc! { "v": 1, "f": "recent_reviews", "p": 7, "k": ["a/b+c", -3_i64] };
    let mut bytes = Vec::new();
    token.to_writer(&mut bytes).unwrap();
    base64
        .encode(&bytes)
        .parse::<subset::Cursor>()
        .expect("the token before any flip is a cursor");
    let mut rejected = Vec::new();
    for i in 0..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[i] ^= 0xff;
        match base64.encode(&flipped).parse::<subset::Cursor>() {
            Err(Error::InvalidCursor { .. }) => rejected.push(i),
            Err(other) => panic!("byte {i}: expected InvalidCursor, got {other:?}"),
            Ok(cursor) => assert_eq!(
                cursor.encode().parse::<subset::Cursor>().ok(),
                Some(cursor.clone()),
                "byte {i}: a flipped token decoded to a cursor that does not round-trip"
            ),
        }
    }
    // The document's length prefix is structure: a flip there can only be refused.
    assert!((0..4).all(|i| rejected.contains(&i)), "{rejected:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_id_that_would_act_as_an_operator_is_refused_before_any_query() {
    let store = Store::<Product>::new(&replica_db().await);
    let reviews = store.children(Product::RECENT_REVIEWS);
    let (victim, other) = (product_with(&store, 3).await, product_with(&store, 2).await);
    let raw = store.raw().children(Product::RECENT_REVIEWS.spec());
    let hostile = [
        Bson::Document(doc! { "$ne": null }),
        Bson::Document(doc! { "$exists": true }),
        Bson::Array(vec![Bson::ObjectId(victim.id)]),
        Bson::Undefined,
    ];
    let is_invalid = |e: &Error, what: &str| {
        matches!(e, Error::InvalidId { what: w, .. } if *w == what) || panic!("{what}: {e:?}")
    };
    for id in &hostile {
        is_invalid(&raw.count(id).await.unwrap_err(), "parent");
        let page = raw.page(id, &PageRequest::first(50)).await;
        is_invalid(&page.unwrap_err(), "parent");
        is_invalid(&raw.all(id).await.err().unwrap(), "parent");
        is_invalid(&store.raw().get(id).await.unwrap_err(), "parent");
        is_invalid(&store.raw().delete(id).await.unwrap_err(), "parent");
        is_invalid(&raw.reconcile(id).await.unwrap_err(), "parent");
        let review = bson_compat::to_document(&Review::at(1)).unwrap();
        is_invalid(&raw.push(id, vec![review]).await.unwrap_err(), "parent");
        let parent = Bson::ObjectId(victim.id);
        is_invalid(&raw.remove(&parent, id).await.unwrap_err(), "child");
        let mut forged = bson_compat::to_document(&Review::at(2)).unwrap();
        forged.insert("_id", id.clone());
        is_invalid(&raw.push(&parent, vec![forged]).await.unwrap_err(), "child");
    }
    // Nothing was touched: both parents keep every child.
    for (product, n) in [(&victim, 3), (&other, 2)] {
        assert_eq!(reviews.count(&product.id).await.unwrap(), n);
        assert!(store.get(&product.id).await.unwrap().is_some());
    }
}
