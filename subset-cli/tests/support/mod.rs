//! What the tests of the `subset` binary share: a fresh database on the test kit's mongod, the
//! binary run to completion, its output read; the delivery-app data set (`delivery.rs`, also
//! seeded by the `seed_delivery` example) and the flags and checks of its subsets.

// Each test file uses some of these.
#![allow(dead_code)]

use std::process::{Command, Output};

use futures::TryStreamExt;
use mongodb::Database;
use serde_json::Value;
use subset_runtime::bson::{doc, Bson, Document};
use subset_testkit::{MongoServer, Topology};

mod delivery;
// Not every test file seeds the delivery app.
#[allow(unused_imports)]
pub use delivery::*;

/// A fresh database on the shared replica set, and the URI to hand the binary.
pub async fn fresh() -> (Database, String) {
    fresh_on(Topology::ReplicaSet).await
}

/// A fresh database on the shared server of `topology` (a standalone server makes the binary
/// write in order, without transactions), and the URI to hand the binary.
pub async fn fresh_on(topology: Topology) -> (Database, String) {
    let server = MongoServer::shared(topology)
        .await
        .expect("start the test mongod");
    let db = server.database().await.expect("connect to the test mongod");
    (db, server.uri().to_owned())
}

/// `subset <args> --uri <uri> --db <db>`, run to completion.
pub async fn subset(uri: &str, db: &Database, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_subset"));
    command
        .args(args)
        .args(["--uri", uri, "--db", db.name()])
        .env_remove("MONGODB_URI");
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// The migration flags of the delivery app.
pub const SUBSET: &[&str] = &[
    "--parent",
    "shops",
    "--field",
    "reviews",
    "--child",
    "reviews",
    "--keep",
    "10",
    "--sort",
    "date desc",
    "--key",
    "shop_id",
    "--count",
    "total_reviews",
];

pub fn with<'a>(command: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(SUBSET);
    args.extend_from_slice(extra);
    args
}

pub fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every shop as stored, less the value each write in a transaction changes in its marker
/// (`_subset.w`, see the guide's page on what the library keeps), so that shops compare by
/// their data.
pub async fn all_shops(db: &Database) -> Vec<Document> {
    let shops: Vec<Document> = db
        .collection::<Document>("shops")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    shops.into_iter().map(untouched).collect()
}

pub fn untouched(mut shop: Document) -> Document {
    if let Ok(marker) = shop.get_document_mut("_subset") {
        marker.remove("w");
        if marker.is_empty() {
            shop.remove("_subset");
        }
    }
    shop
}

/// The flags of the first view: the 5 latest reviews as previews, with a count and a sum.
pub const PREVIEWS: &[&str] = &[
    "--parent",
    "shops",
    "--field",
    "reviews",
    "--child",
    "reviews",
    "--keep",
    "5",
    "--sort",
    "date desc",
    "--key",
    "shop_id",
    "--count",
    "total_reviews",
    "--embed",
    "user, rating",
    "--sum",
    "rating_total = rating",
];

pub fn view<'a>(command: &'a str, flags: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(flags);
    args.extend_from_slice(extra);
    args
}

/// A number as `f64`, whichever BSON number type holds it.
pub fn number(value: Option<&Bson>) -> f64 {
    match value {
        Some(Bson::Int32(n)) => f64::from(*n),
        Some(Bson::Int64(n)) => *n as f64,
        Some(Bson::Double(n)) => *n,
        other => panic!("not a number: {other:?}"),
    }
}

/// A shop's children in the child collection, in `sort` order (then `_id` in the same
/// direction as the last key, as the engine breaks ties).
pub async fn children_of(
    db: &Database,
    shop: &Bson,
    filter: Document,
    sort: Document,
) -> Vec<Document> {
    let mut query = doc! { "shop_id": shop.clone() };
    query.extend(filter);
    db.collection::<Document>("reviews")
        .find(query)
        .sort(sort)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

pub fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter().map(|d| d.get("_id").unwrap().clone()).collect()
}

/// The first view as it must be on `shops` shops with `reviews` reviews in all: the 5 latest as
/// previews (`_id`, the sort key, `user`, `rating`), whole children in the child collection,
/// count and sum over every child.
pub async fn assert_previews(db: &Database, shops: usize, reviews: usize) {
    let shops_now = all_shops(db).await;
    assert_eq!(shops_now.len(), shops);
    let shops = shops_now;
    let mut total = 0;
    for shop in &shops {
        let id = shop.get("_id").unwrap();
        let children = children_of(db, id, doc! {}, doc! { "date": -1, "_id": -1 }).await;
        total += children.len();
        let embedded: Vec<Document> = shop
            .get_array("reviews")
            .unwrap()
            .iter()
            .map(|r| r.as_document().unwrap().clone())
            .collect();
        assert_eq!(
            ids(&embedded),
            ids(&children[..children.len().min(5)]),
            "{id}"
        );
        for (preview, child) in embedded.iter().zip(&children) {
            let mut keys: Vec<&str> = preview.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["_id", "date", "rating", "user"], "{id}");
            assert_eq!(preview.get("rating"), child.get("rating"));
            assert_eq!(preview.get("user"), child.get("user"));
            // The child collection keeps whole children.
            assert!(child.contains_key("text") && child.contains_key("verified"));
        }
        assert_eq!(
            shop.get_i64("total_reviews").unwrap(),
            children.len() as i64
        );
        let sum: i32 = children.iter().map(|c| c.get_i32("rating").unwrap()).sum();
        assert_eq!(number(shop.get("rating_total")), f64::from(sum), "{id}");
    }
    assert_eq!(total, reviews);
}

/// Whether a JSON `_id` (as `--json` writes it) is `id`.
pub fn id_matches(json: &Value, id: &Bson) -> bool {
    json.to_string()
        .contains(&id.as_object_id().unwrap().to_hex())
}
