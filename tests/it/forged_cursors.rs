//! Forged cursors: a base64-valid token whose position holds values no child of the field can
//! have is `InvalidCursor`, decided before any query for the derive's typed descriptors, and at
//! the latest at the end of the walk for descriptors built at run time; never a `MalformedChild`
//! blaming a healthy stored child, never a server error. A really malformed child is still named.

use crate::common;

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bson::oid::ObjectId;
use bson::{doc, Bson, DateTime, Document};
use common::*;
use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;
use mongodb::options::ClientOptions;
use serde::{Deserialize, Serialize};
use subset::bson;
use subset::{
    raw, spec::ParentSpec, spec::SortValues, spec::SpecBuilder, spec::SubsetSpec, Child, Cursor,
    Error, PageRequest, Store, Subset,
};
use subset_testkit::{MongoServer, Topology};

/// A token for `recent_reviews` of `parent` at `position`, as a client could forge it.
fn forge(parent: ObjectId, position: Vec<Bson>) -> String {
    let token = doc! { "v": 1, "f": "recent_reviews", "p": parent, "k": position };
    let mut bytes = Vec::new();
    token.to_writer(&mut bytes).unwrap();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Values a forged cursor may put where the children hold a date, with the type a message
/// names.
fn forged_dates() -> Vec<(Bson, &'static str)> {
    vec![
        (Bson::Int32(6), "an int32"),
        (Bson::Int64(6), "an int64"),
        (Bson::Double(f64::NAN), "NaN"),
        (Bson::String("1970-01-01".into()), "a string"),
        (Bson::Boolean(true), "a boolean"),
        (Bson::ObjectId(ObjectId::new()), "an ObjectId"),
        (Bson::Undefined, "undefined"),
        (Bson::Null, "null"),
        (Bson::MinKey, "MinKey"),
        (Bson::MaxKey, "MaxKey"),
        (Bson::Document(doc! { "$ne": null }), "a document"),
        (
            Bson::Array(vec![Bson::DateTime(DateTime::from_millis(6))]),
            "an array",
        ),
    ]
}

/// Values a forged cursor may put where the children's `_id` is an ObjectId. The first three
/// are values some `_id` could hold (a run-time descriptor cannot refuse them before the query).
fn forged_ids(real: ObjectId) -> Vec<(Bson, &'static str)> {
    vec![
        (Bson::String(real.to_hex()), "a string"),
        (Bson::Int32(1), "an int32"),
        (Bson::Document(doc! { "a": 1 }), "a document"),
        (Bson::Undefined, "undefined"),
        (Bson::Null, "null"),
        (Bson::MinKey, "MinKey"),
        (Bson::MaxKey, "MaxKey"),
        (Bson::Array(vec![Bson::ObjectId(real)]), "an array"),
        (
            Bson::RegularExpression(subset::bson_compat::regex(".", "").unwrap()),
            "a regular expression",
        ),
        (Bson::JavaScriptCode("1".into()), "JavaScript code"),
    ]
}

/// Every forged position: `(position, the key it forges, the type a message names)`.
fn forged_positions(real: ObjectId) -> Vec<(Vec<Bson>, &'static str, &'static str)> {
    let date = || Bson::DateTime(DateTime::from_millis(6));
    let mut all = Vec::new();
    for (value, named) in forged_dates() {
        all.push((
            vec![value.clone(), Bson::ObjectId(ObjectId::new())],
            "date",
            named,
        ));
        // With the `_id` of a real child, so that the forged child cannot be found by `_id`.
        all.push((vec![value, Bson::ObjectId(real)], "date", named));
    }
    for (value, named) in forged_ids(real) {
        all.push((vec![date(), value], "_id", named));
    }
    all
}

/// Asserts `outcome` is `InvalidCursor` naming `key`, never a stored-data or server error.
fn assert_invalid<T: std::fmt::Debug>(outcome: Result<T, Error>, key: &str, named: &str) {
    match outcome {
        Err(Error::InvalidCursor { reason }) => {
            // Values refused while decoding the token (non-scalar sort values) name no key.
            let decoded = reason.contains("not a scalar");
            assert!(
                decoded || reason.contains(&format!("`{key}`")),
                "{key} {named}: {reason}"
            );
        }
        other => panic!("{key} {named}: expected InvalidCursor, got {other:?}"),
    }
}

/// The products collection, with no subset field of its own: these tests page through it with
/// one descriptor or another.
fn products(store: &Store<Product>) -> raw::Store {
    raw::Store::new(store.database(), ParentSpec::leak("products", Vec::new()))
}

/// The same product's reviews, described at run time: no Rust types.
fn runtime_spec() -> &'static SubsetSpec {
    SpecBuilder::new("recent_reviews", "reviews", "product_id")
        .keep(5)
        .sort("date desc")
        .count("total_reviews")
        .build()
        .unwrap()
}

/// A store on a fresh database whose client records every command but `hello`, and a product
/// with 12 reviews dated 0..12.
async fn setup() -> (
    Store<Product>,
    Product,
    Vec<Review>,
    Arc<Mutex<Vec<String>>>,
) {
    let server = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod");
    let name = server.database().await.unwrap().name().to_owned();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut options = ClientOptions::parse(server.uri()).await.unwrap();
    let sink = log.clone();
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            if !matches!(started.command_name.as_str(), "hello" | "isMaster") {
                sink.lock().unwrap().push(started.command_name);
            }
        }
    }));
    let db = mongodb::Client::with_options(options)
        .unwrap()
        .database(&name);
    let store = Store::<Product>::new(&db);
    store.ensure_indexes().await.unwrap();
    let product = Product::named("forged");
    store.insert(&product).await.unwrap();
    let batch: Vec<Review> = (0..12).map(Review::at).collect();
    store
        .children(Product::RECENT_REVIEWS)
        .push_many(&product.id, &batch)
        .await
        .unwrap();
    log.lock().unwrap().clear();
    (store, product, batch, log)
}

#[test]
fn the_derive_records_each_keys_values() {
    let spec = Product::RECENT_REVIEWS.spec();
    assert_eq!(spec.sort[0].values, SortValues::DateTime);
    assert_eq!(spec.id_values, SortValues::ObjectId);
    assert_eq!(runtime_spec().sort[0].values, SortValues::Scalar);
    assert_eq!(runtime_spec().id_values, SortValues::Id);

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Key {
        shard: i32,
        n: i64,
    }
    #[derive(Serialize, Deserialize, Child)]
    struct Vote {
        #[serde(rename = "_id")]
        id: Key,
        #[serde(rename = "s")]
        score: u8,
        label: String,
    }
    #[derive(Serialize, Deserialize, Subset)]
    #[subset(collection = "polls")]
    struct Poll {
        #[serde(rename = "_id")]
        id: u32,
        #[subset(child = "votes", keep = 3, sort = "score desc, label asc")]
        votes: Vec<Vote>,
    }
    let spec = Poll::VOTES.spec();
    assert_eq!(spec.sort[0].field, "s");
    assert_eq!(
        spec.sort[0].values,
        SortValues::Integer { min: 0, max: 255 }
    );
    assert_eq!(spec.sort[1].values, SortValues::String);
    // A compound `_id` is not a `SortableField`: any `_id` but the unsortable.
    assert_eq!(<Vote as Child>::ID_VALUES, SortValues::Id);
    assert_eq!(spec.id_values, SortValues::Id);
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_positions_are_invalid_cursors_before_any_query() {
    let (store, product, batch, log) = setup().await;
    let reviews = store.children(Product::RECENT_REVIEWS);
    for (position, key, named) in forged_positions(batch[3].id) {
        let outcome = match forge(product.id, position.clone()).parse::<Cursor>() {
            Ok(cursor) => {
                let outcome = reviews
                    .page(&product.id, &PageRequest::after(cursor, 5))
                    .await;
                if let Err(Error::InvalidCursor { reason }) = &outcome {
                    assert!(reason.contains(named), "{position:?}: {reason}");
                }
                outcome
            }
            Err(e) => Err(e),
        };
        assert_invalid(outcome, key, named);
        assert_eq!(*log.lock().unwrap(), Vec::<String>::new(), "{position:?}");
    }
    // The real types are still a position: the children after it.
    let cursor = forge(
        product.id,
        vec![
            Bson::DateTime(DateTime::from_millis(6)),
            Bson::ObjectId(ObjectId::new()),
        ],
    );
    let page = reviews
        .page(
            &product.id,
            &PageRequest::after(cursor.parse().unwrap(), 20),
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 7);
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_positions_are_invalid_cursors_for_a_runtime_descriptor() {
    let (store, product, batch, _) = setup().await;
    let raw = products(&store);
    let reviews = raw.children(runtime_spec());
    let parent = Bson::ObjectId(product.id);
    for (position, key, named) in forged_positions(batch[3].id) {
        let outcome = match forge(product.id, position.clone()).parse::<Cursor>() {
            Ok(cursor) => reviews.page(&parent, &PageRequest::after(cursor, 5)).await,
            Err(e) => Err(e),
        };
        assert_invalid(outcome, key, named);
    }
    // A genuine walk still serves every child once.
    let mut request = PageRequest::first(5);
    let mut served = 0;
    loop {
        let page = reviews.page(&parent, &request).await.unwrap();
        served += page.items.len();
        match page.next {
            Some(next) => request = PageRequest::after(next, 5),
            None => break,
        }
    }
    assert_eq!(served, 12);
}

/// Inserts, past the library, a review of `product` whose date is a string.
async fn insert_string_date(store: &Store<Product>, product: &Product) -> ObjectId {
    let bad = ObjectId::new();
    store
        .database()
        .collection::<Document>("reviews")
        .insert_one(doc! {
            "_id": bad, "product_id": product.id, "author": "x", "rating": 1, "date": "1970"
        })
        .await
        .unwrap();
    bad
}

/// Asserts `err` is `MalformedChild` naming the `date` of child `id`.
fn assert_names(err: &Error, id: ObjectId) {
    match err {
        Error::MalformedChild {
            collection,
            id: got,
            field,
            problem,
            ..
        } => {
            assert_eq!(collection, "reviews");
            assert_eq!(**got, Bson::ObjectId(id), "{err}");
            assert_eq!(field, "date");
            assert!(problem.contains("a string"), "{problem}");
        }
        other => panic!("expected MalformedChild of {id}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_string_date_is_still_named_by_both_descriptors() {
    let (store, product, _, _) = setup().await;
    let bad = insert_string_date(&store, &product).await;
    let raw = products(&store);
    let runtime = raw.children(runtime_spec());
    let typed = raw.children(Product::RECENT_REVIEWS.spec());
    let parent = Bson::ObjectId(product.id);
    for reviews in [typed, runtime] {
        let mut request = PageRequest::first(5);
        let err = loop {
            match reviews.page(&parent, &request).await {
                Ok(page) => match page.next {
                    Some(next) => request = PageRequest::after(next, 5),
                    None => panic!("the walk ended without naming {bad}"),
                },
                Err(e) => break e,
            }
        };
        assert_names(&err, bad);
    }
    // A healthy forged position over the same children names the malformed child too: it is
    // found from the descriptor's types, or from a stored child, not from the cursor.
    let cursor = forge(
        product.id,
        vec![
            Bson::DateTime(DateTime::from_millis(-1)),
            Bson::ObjectId(ObjectId::new()),
        ],
    );
    let err = store
        .children(Product::RECENT_REVIEWS)
        .page(&product.id, &PageRequest::after(cursor.parse().unwrap(), 5))
        .await
        .unwrap_err();
    assert_names(&err, bad);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_last_page_takes_its_reference_from_the_cursors_own_child() {
    let (store, product, _, _) = setup().await;
    let bad = insert_string_date(&store, &product).await;
    // In ascending order the string sorts before every date: the parent's first child in order
    // is the malformed one, and must not be the type reference that blames the dates.
    let spec = SpecBuilder::new("recent_reviews", "reviews", "product_id")
        .keep(5)
        .sort("date asc")
        .build()
        .unwrap();
    let raw = products(&store);
    let reviews = raw.children(spec);
    let parent = Bson::ObjectId(product.id);
    // Larger than `keep`: from the child collection, the string first, then dates 0..=4.
    let first = reviews.page(&parent, &PageRequest::first(6)).await.unwrap();
    assert_eq!(first.items[0].get_object_id("_id").unwrap(), bad);
    // The children after the cursor go, so the next page is empty.
    store
        .database()
        .collection::<Document>("reviews")
        .delete_many(doc! { "date": { "$gt": DateTime::from_millis(4) } })
        .await
        .unwrap();
    let err = reviews
        .page(&parent, &PageRequest::after(first.next.unwrap(), 6))
        .await
        .unwrap_err();
    assert_names(&err, bad);
}
