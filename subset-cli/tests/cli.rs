//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::Database;
use serde_json::Value;
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
use subset_testkit::{MongoServer, Topology};

mod support;
use support::*;

/// A fresh database on the shared replica set, and the URI to hand the binary.
async fn fresh() -> (Database, String) {
    let server = MongoServer::shared(Topology::ReplicaSet)
        .await
        .expect("start the test mongod");
    let db = server.database().await.expect("connect to the test mongod");
    (db, server.uri().to_owned())
}

/// `subset <args> --uri <uri> --db <db>`, run to completion.
async fn subset(uri: &str, db: &Database, args: &[&str]) -> Output {
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
const SUBSET: &[&str] = &[
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

fn with<'a>(command: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(SUBSET);
    args.extend_from_slice(extra);
    args
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every shop's document size.
async fn sizes(db: &Database) -> Vec<(Bson, usize, String)> {
    db.collection::<RawDocumentBuf>("shops")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .map(|raw| {
            let id = Bson::try_from(raw.get("_id").unwrap().unwrap()).unwrap();
            let name = raw.get_str("name").unwrap().to_owned();
            (id, raw.as_bytes().len(), name)
        })
        .collect()
}

/// Asserts the end state of a migration: every review of every shop exactly once in `reviews`,
/// the 10 latest embedded in order, the count right.
async fn assert_migrated(db: &Database, before: &[Document]) {
    let children = db.collection::<Document>("reviews");
    assert_eq!(
        children.count_documents(doc! {}).await.unwrap() as usize,
        LARGE * REVIEWS + SMALL * 3,
        "children in `reviews`"
    );
    for shop in before {
        let id = shop.get("_id").unwrap().clone();
        let embedded = shop.get_array("reviews").map(Vec::len).unwrap_or(0);
        let stored: Vec<Document> = children
            .find(doc! { "shop_id": id.clone() })
            .sort(doc! { "date": -1, "_id": -1 })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(stored.len(), embedded, "children of {id}");
        // The same reviews, no duplicate under another `_id`, none lost.
        let key = |d: &Document| {
            format!(
                "{}|{}|{}",
                d.get_str("user").unwrap(),
                d.get_str("text").unwrap(),
                d.get_datetime("date").unwrap()
            )
        };
        let mut want: Vec<String> = shop
            .get_array("reviews")
            .map(|a| a.iter().map(|r| key(r.as_document().unwrap())).collect())
            .unwrap_or_default();
        let mut got: Vec<String> = stored.iter().map(key).collect();
        want.sort();
        got.sort();
        assert_eq!(want, got, "reviews of {id}");
        let now = db
            .collection::<Document>("shops")
            .find_one(doc! { "_id": id.clone() })
            .await
            .unwrap()
            .unwrap();
        let top: Vec<Bson> = stored
            .iter()
            .take(10)
            .map(|d| d.get("_id").unwrap().clone())
            .collect();
        let kept: Vec<Bson> = now
            .get_array("reviews")
            .unwrap()
            .iter()
            .map(|r| r.as_document().unwrap().get("_id").unwrap().clone())
            .collect();
        assert_eq!(kept, top, "embedded reviews of {id}");
        assert_eq!(now.get_i64("total_reviews").unwrap(), embedded as i64);
    }
}

/// Every shop as stored, less the value each write in a transaction changes in its marker
/// (`_subset.w`, see the guide's page on what the library keeps), so that shops compare by
/// their data.
async fn all_shops(db: &Database) -> Vec<Document> {
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

fn untouched(mut shop: Document) -> Document {
    if let Ok(marker) = shop.get_document_mut("_subset") {
        marker.remove("w");
        if marker.is_empty() {
            shop.remove("_subset");
        }
    }
    shop
}

#[tokio::test(flavor = "multi_thread")]
async fn inspect_flags_the_embedded_reviews() {
    let (db, uri) = fresh().await;
    seed(&db).await;
    db.collection::<Document>("orders")
        .insert_one(doc! { "items": [1, 2, 3] })
        .await
        .unwrap();

    let out = subset(&uri, &db, &["inspect", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    let collections = report["collections"].as_array().unwrap();
    let shops = collections
        .iter()
        .find(|c| c["collection"] == "shops")
        .unwrap();
    assert_eq!(shops["count"], (LARGE + SMALL + 1) as u64);
    assert!(shops["sampled"].is_null());
    assert_eq!(shops["largest"].as_array().unwrap().len(), 5);
    assert!(shops["largest"][0]["bytes"].as_u64().unwrap() > 60_000);
    let reviews = &shops["arrays"][0];
    assert_eq!(reviews["path"], "reviews");
    assert_eq!(reviews["max"], REVIEWS as u64);
    assert_eq!(reviews["p50"], REVIEWS as u64);
    assert_eq!(reviews["flagged"], true);
    let estimate = &reviews["estimate"];
    assert_eq!(estimate["keep"], 10);
    assert!(estimate["avg_document_bytes"].as_u64().unwrap() < 1_500);
    let orders = collections
        .iter()
        .find(|c| c["collection"] == "orders")
        .unwrap();
    assert_eq!(orders["arrays"][0]["flagged"], false);
    assert_eq!(orders["arrays"][0]["elements_are_documents"], false);

    // The text form says so; a small sample is announced.
    let out = subset(
        &uri,
        &db,
        &["inspect", "--collection", "shops", "--sample", "20"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("sampled 20 of 45 documents ($sample)"),
        "{text}"
    );
    assert!(text.contains("unbounded?"), "{text}");
    assert!(text.contains("with only the top 10 embedded"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_check_corrupt_and_reconcile() {
    let (db, uri) = fresh().await;
    seed(&db).await;
    let before = all_shops(&db).await;
    let sizes_before = sizes(&db).await;

    // A dry run changes nothing and says what would happen.
    let out = subset(&uri, &db, &with("migrate", &["--dry-run", "--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(
        report["views"][0]["children_to_copy"],
        (LARGE * REVIEWS + SMALL * 3) as u64
    );
    assert_eq!(
        report["views"][0]["ids_to_assign"],
        (LARGE / 2 * REVIEWS) as u64
    );
    assert_eq!(all_shops(&db).await, before);
    assert!(!db
        .list_collection_names()
        .await
        .unwrap()
        .contains(&"reviews".to_owned()));

    // Before the migration, check sees every parent drifted (nothing in `reviews` yet).
    let out = subset(&uri, &db, &with("check", &["--json"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(json(&out)["index"]["present"], false);
    // And reconcile refuses to trim arrays whose children are nowhere else.
    let out = subset(&uri, &db, &with("reconcile", &[])).await;
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("it was never migrated"),
        "{}",
        stderr(&out)
    );
    assert_eq!(all_shops(&db).await, before);

    let out = subset(&uri, &db, &with("migrate", &["--json", "--batch", "7"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(
        report["views"][0]["children_copied"],
        (LARGE * REVIEWS + SMALL * 3) as u64
    );
    assert_eq!(
        report["views"][0]["ids_assigned"],
        (LARGE / 2 * REVIEWS) as u64
    );
    assert!(
        report["before"]["bytes"].as_u64().unwrap()
            > report["after"]["bytes"].as_u64().unwrap() * 20
    );

    // Ids were assigned in place, so `before` with those ids is what must have moved.
    let mut before = before;
    for shop in &mut before {
        if let Ok(reviews) = shop.get_array_mut("reviews") {
            reviews.clear();
        }
    }
    let stored: Vec<Document> = db
        .collection::<Document>("reviews")
        .find(doc! {})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    for child in stored {
        let parent = child.get("shop_id").unwrap();
        let shop = before
            .iter_mut()
            .find(|s| s.get("_id") == Some(parent))
            .unwrap();
        let mut child = child.clone();
        child.remove("shop_id");
        shop.get_array_mut("reviews")
            .unwrap()
            .push(Bson::Document(child));
    }
    assert_migrated(&db, &before).await;

    // Sizes per large shop: about 72 KB before, under 1.5 KB after.
    let sizes_after = sizes(&db).await;
    let mut large = 0;
    for (id, size, name) in &sizes_before {
        let Some(i) = name.strip_prefix("Noodle Bar ") else {
            continue;
        };
        large += 1;
        // Reviews with an `_id` make 72 KB, those without 58 KB.
        let about = if i.parse::<usize>().unwrap() % 2 == 0 {
            72_000
        } else {
            58_400
        };
        assert!(size.abs_diff(about) < 1_000, "{name} before: {size}");
        let after = sizes_after.iter().find(|(i, ..)| i == id).unwrap().1;
        assert!(after < 1_500, "{name} after: {after}");
    }
    assert_eq!(large, LARGE, "every large shop's size was checked");

    // Idempotent: a second run copies nothing and changes nothing.
    let shops = all_shops(&db).await;
    let out = subset(&uri, &db, &with("migrate", &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["views"][0]["children_copied"], 0);
    assert_eq!(all_shops(&db).await, shops);

    // No drift, and the index is there.
    let out = subset(&uri, &db, &with("check", &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["drifted"], 0);
    assert_eq!(report["checked"], (LARGE + SMALL + 1) as u64);
    assert_eq!(report["index"]["present"], true);

    // Corrupt three shops by hand: a dropped review, a wrong count, a stale extra.
    let shops_coll = db.collection::<Document>("shops");
    let ids: Vec<Bson> = shops
        .iter()
        .take(3)
        .map(|s| s.get("_id").unwrap().clone())
        .collect();
    shops_coll
        .update_one(
            doc! { "_id": ids[0].clone() },
            doc! { "$pop": { "reviews": -1 } },
        )
        .await
        .unwrap();
    shops_coll
        .update_one(
            doc! { "_id": ids[1].clone() },
            doc! { "$set": { "total_reviews": 3_i64 } },
        )
        .await
        .unwrap();
    shops_coll
        .update_one(
            doc! { "_id": ids[2].clone() },
            doc! { "$set": { "reviews.0": { "_id": ObjectId::new(), "user": "ghost", "stars": 1, "text": "gone", "date": DateTime::now() } } },
        )
        .await
        .unwrap();

    let out = subset(&uri, &db, &with("check", &[])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("drifted: 3"), "{text}");
    assert!(text.contains("1 missing"), "{text}");
    assert!(text.contains("count 3, children 800"), "{text}");
    assert!(text.contains("1 missing, 1 stale"), "{text}");

    let out = subset(&uri, &db, &with("reconcile", &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["drifted"], 3);
    assert_eq!(report["fixed"], 3);
    assert_eq!(all_shops(&db).await, shops);

    let out = subset(&uri, &db, &with("check", &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8(out.stdout).unwrap().contains("no drift"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_migration_resumes_without_duplicates_or_loss() {
    let (db, uri) = fresh().await;
    seed(&db).await;
    let children = db.collection::<Document>("reviews");
    let shops = db.collection::<Document>("shops");

    let mut child = Command::new(env!("CARGO_BIN_EXE_subset"))
        .args(with("migrate", &["--batch", "5"]))
        .args(["--uri", &uri, "--db", db.name()])
        .env_remove("MONGODB_URI")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once some shops are done and more reviews copied, well before all are.
    let untouched =
        || shops.count_documents(doc! { format!("reviews.{}", REVIEWS - 1): { "$exists": true } });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let copied = children.estimated_document_count().await.unwrap_or(0);
        if copied > (REVIEWS * 4) as u64 && untouched().await.unwrap() < LARGE as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "migrate made no progress in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let untouched = untouched().await.unwrap();
    assert!(untouched > 0, "the migration finished before it was killed");

    let out = subset(&uri, &db, &with("migrate", &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Every review of every shop once, ids stable, 10 embedded, counts right.
    let total = children.count_documents(doc! {}).await.unwrap();
    assert_eq!(total as usize, LARGE * REVIEWS + SMALL * 3);
    for shop in all_shops(&db).await {
        let id = shop.get("_id").unwrap().clone();
        let n = children
            .count_documents(doc! { "shop_id": id.clone() })
            .await
            .unwrap();
        let expected = if shop.get_str("name").unwrap().starts_with("Noodle") {
            REVIEWS
        } else if shop.get_str("name").unwrap().starts_with("Corner") {
            3
        } else {
            0
        };
        assert_eq!(n as usize, expected, "children of {id}");
        assert_eq!(shop.get_i64("total_reviews").unwrap() as usize, expected);
        assert_eq!(
            shop.get_array("reviews").unwrap().len(),
            expected.min(10),
            "embedded in {id}"
        );
        // The same review text never appears under two `_id`s.
        let texts: Vec<Document> = children
            .aggregate([
                doc! { "$match": { "shop_id": id.clone() } },
                doc! { "$group": { "_id": { "u": "$user", "t": "$text", "d": "$date" }, "n": { "$sum": 1 } } },
                doc! { "$match": { "n": { "$gt": 1 } } },
            ])
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert!(texts.is_empty(), "duplicated reviews in {id}: {texts:?}");
    }
    let out = subset(&uri, &db, &with("check", &[])).await;
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_shops_stop_the_migration_before_any_write_or_are_skipped() {
    let (db, uri) = fresh().await;
    let shops = db.collection::<Document>("shops");
    let good = |n: i64| doc! { "_id": n, "reviews": [{ "_id": n * 10, "date": n }, { "_id": n * 10 + 1, "date": n + 1 }] };
    shops
        .insert_many([
            good(1),
            doc! { "_id": 2, "reviews": "lots" },
            doc! { "_id": 3, "reviews": [{ "_id": 30, "date": 1 }, 42] },
            doc! { "_id": 4, "reviews": [{ "_id": 40, "date": 1 }, { "_id": 41, "stars": 5 }] },
            good(5),
        ])
        .await
        .unwrap();
    let before = all_shops(&db).await;

    let out = subset(&uri, &db, &with("migrate", &[])).await;
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("3 parent(s) of `shops`"), "{err}");
    assert!(
        err.contains("2: `reviews` is a string, not an array"),
        "{err}"
    );
    assert!(
        err.contains("3: `reviews.1` is an int32, not a document"),
        "{err}"
    );
    assert!(
        err.contains("4: sort field `date` is missing on 1 of 2 elements: `reviews.1`"),
        "{err}"
    );
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(all_shops(&db).await, before);
    assert_eq!(
        db.collection::<Document>("reviews")
            .count_documents(doc! {})
            .await
            .unwrap(),
        0
    );

    // With --skip-invalid the others move, and the skipped ones are listed by `_id`.
    let out = subset(&uri, &db, &with("migrate", &["--skip-invalid", "--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["views"][0]["parents_migrated"], 2);
    let skipped: Vec<i64> = report["views"][0]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["_id"].as_i64().unwrap())
        .collect();
    assert_eq!(skipped, [2, 3, 4]);
    assert_eq!(
        db.collection::<Document>("reviews")
            .count_documents(doc! {})
            .await
            .unwrap(),
        4
    );

    // check stops at a malformed parent, or counts it with --skip-invalid.
    let out = subset(&uri, &db, &with("check", &[])).await;
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("parent 2 in `shops`: field `reviews` is a string, not an array"),
        "{}",
        stderr(&out)
    );
    let out = subset(&uri, &db, &with("check", &["--skip-invalid", "--json"])).await;
    assert_eq!(code(&out), 1);
    let report = json(&out);
    assert_eq!(report["skipped"].as_array().unwrap().len(), 2);
    assert_eq!(report["drifted"], 1, "shop 4 still embeds both reviews");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_that_cannot_be_fixed_does_not_stop_the_sweep() {
    let (db, uri) = fresh().await;
    let shops = db.collection::<Document>("shops");
    let children = db.collection::<Document>("reviews");
    let review = |id: i32, shop: i32, text: String| {
        doc! { "_id": id, "shop_id": shop, "date": DateTime::from_millis(i64::from(id)), "text": text }
    };
    // Shop 2's ten latest reviews (800 KB each) and its 9 MB of other data cannot fit in one
    // document: the server refuses its reconcile. Shops 1 and 3 have drift to fix.
    shops
        .insert_many([
            doc! { "_id": 1, "reviews": [], "total_reviews": 0_i64 },
            doc! { "_id": 2, "reviews": [], "total_reviews": 0_i64, "blob": "b".repeat(9_000_000) },
            doc! { "_id": 3, "reviews": [review(30, 3, "c".into())], "total_reviews": 1_i64 },
        ])
        .await
        .unwrap();
    let mut stored = vec![
        review(10, 1, "a".into()),
        review(11, 1, "a".into()),
        review(30, 3, "c".into()),
        review(31, 3, "c".into()),
    ];
    stored.extend((20..30).map(|id| review(id, 2, "x".repeat(800_000))));
    children.insert_many(&stored).await.unwrap();
    let embedded = |id: i32| {
        let shops = shops.clone();
        async move {
            let shop = shops.find_one(doc! { "_id": id }).await.unwrap().unwrap();
            let n = shop.get_array("reviews").unwrap().len();
            (n, shop.get_i64("total_reviews").unwrap_or(-1))
        }
    };

    let out = subset(&uri, &db, &with("reconcile", &["--json", "--batch", "2"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["checked"], 2, "{report}");
    assert_eq!(report["fixed"], 2, "{report}");
    assert_eq!(report["failed"], 1, "{report}");
    assert_eq!(report["failures"][0]["_id"], 2, "{report}");
    let error = report["failures"][0]["error"].as_str().unwrap();
    // The engine's typed error: the parent, the field, and how large it would be.
    assert!(
        error.starts_with("parent 2 in `shops` would be about ")
            && error.contains("`reviews` subset, over MongoDB's document limit"),
        "{error}"
    );
    // The shop after it was fixed all the same.
    assert_eq!(embedded(1).await, (2, 2));
    assert_eq!(embedded(3).await, (2, 2));
    assert_eq!(embedded(2).await, (0, 0));

    // The text form names it; the exit code stays 1 while it cannot be fixed.
    let out = subset(&uri, &db, &with("reconcile", &[])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("failed: 1"), "{text}");
    assert!(
        text.contains("1 parent(s) could not be reconciled (the pass went on past them):\n    2: "),
        "{text}"
    );

    // A malformed parent in the middle, passed over with --skip-invalid: the later one is fixed,
    // and the exit code says that not everything is.
    shops
        .update_one(
            doc! { "_id": 2 },
            doc! { "$set": { "reviews": "lots" }, "$unset": { "blob": "" } },
        )
        .await
        .unwrap();
    shops
        .update_one(doc! { "_id": 3 }, doc! { "$pop": { "reviews": 1 } })
        .await
        .unwrap();
    let out = subset(&uri, &db, &with("reconcile", &["--skip-invalid", "--json"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["skipped"][0]["_id"], 2, "{report}");
    assert_eq!(report["fixed"], 1, "{report}");
    assert_eq!(embedded(3).await, (2, 2));
}

#[tokio::test(flavor = "multi_thread")]
async fn children_whose_sort_key_has_another_type_are_reported_and_refused() {
    let (db, uri) = fresh().await;
    seed(&db).await;
    // One review among 800 dates with `date: "not a date"`.
    let shops = db.collection::<Document>("shops");
    let odd = shops
        .find_one(doc! { "name": "Noodle Bar 3" })
        .await
        .unwrap()
        .unwrap();
    let odd_id = odd.get("_id").unwrap().clone();
    shops
        .update_one(
            doc! { "_id": odd_id.clone() },
            doc! { "$set": { "reviews.17.date": "not a date" } },
        )
        .await
        .unwrap();
    let odd_json = subset_runtime::bson_compat::to_relaxed_extjson(odd_id.clone());

    // inspect knows no sort key: it names the field, how many elements, and where.
    let out = subset(&uri, &db, &["inspect", "--collection", "shops", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    let mixed = &report["collections"][0]["arrays"][0]["mixed_types"];
    assert_eq!(mixed.as_array().unwrap().len(), 1, "{mixed}");
    assert_eq!(mixed[0]["field"], "date");
    assert_eq!(mixed[0]["elements"], 1);
    assert_eq!(mixed[0]["documents"], 1);
    assert_eq!(mixed[0]["examples"][0]["_id"], odd_json);
    assert_eq!(mixed[0]["examples"][0]["others"][0], "a string");
    let out = subset(&uri, &db, &["inspect", "--collection", "shops"]).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "`date`: 1 element(s) in 1 document(s) of another type than the rest of their array (as a --sort field: out of the order)\n        {odd_id}: 799 of 800 are a date; the others: a string"
        )),
        "{text}"
    );

    // The dry run counts the shop as invalid and says why.
    let out = subset(&uri, &db, &with("migrate", &["--dry-run", "--json"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(
        report["views"][0]["invalid"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    assert_eq!(report["views"][0]["invalid"][0]["_id"], odd_json);
    assert_eq!(
        report["views"][0]["invalid"][0]["problem"],
        "sort field `date` is a date on 799 of 800 elements and of another type on 1, which pages in this order never reach: `reviews.17` (a string)"
    );

    // migrate refuses before writing anything, or migrates the others with --skip-invalid.
    let before = all_shops(&db).await;
    let out = subset(&uri, &db, &with("migrate", &[])).await;
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains(&format!("{odd_id}: sort field `date` is a date on 799")),
        "{}",
        stderr(&out)
    );
    assert_eq!(all_shops(&db).await, before);
    let out = subset(&uri, &db, &with("migrate", &["--skip-invalid", "--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(
        report["views"][0]["parents_migrated"],
        (LARGE + SMALL) as u64
    );
    assert_eq!(report["views"][0]["skipped"][0]["_id"], odd_json);
    let kept = shops
        .find_one(doc! { "_id": odd_id })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.get_array("reviews").unwrap().len(), REVIEWS);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_id_under_two_parents_is_a_conflict_not_a_loss() {
    let (db, uri) = fresh().await;
    db.collection::<Document>("shops")
        .insert_many([
            doc! { "_id": 1, "reviews": [{ "_id": 7, "date": 1, "text": "one" }] },
            doc! { "_id": 2, "reviews": [{ "_id": 7, "date": 2, "text": "two" }] },
        ])
        .await
        .unwrap();
    let out = subset(&uri, &db, &with("migrate", &[])).await;
    assert_eq!(code(&out), 1);
    // Parents migrate a few at a time: either may copy child 7 first.
    let err = stderr(&out);
    let (owner, other) = if err.contains("child 7 is already in `reviews` under parent 1") {
        (1, 2)
    } else {
        assert!(
            err.contains("child 7 is already in `reviews` under parent 2"),
            "{err}"
        );
        (2, 1)
    };
    assert!(err.contains(&format!("\n  {other}: child 7")), "{err}");
    // The other shop keeps its review embedded: nothing lost.
    let shops = db.collection::<Document>("shops");
    let kept = shops
        .find_one(doc! { "_id": other })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.get_array("reviews").unwrap().len(), 1);
    let stored = db
        .collection::<Document>("reviews")
        .find_one(doc! { "_id": 7 })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.get_i32("shop_id").unwrap(), owner);
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_and_connection_errors_exit_2() {
    let (db, uri) = fresh().await;
    db.collection::<Document>("shops")
        .insert_one(doc! { "reviews": [] })
        .await
        .unwrap();

    let mut args = with("migrate", &[]);
    let sort = args.iter().position(|a| *a == "date desc").unwrap();
    args[sort] = "date sideways";
    let out = subset(&uri, &db, &args).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("unknown sort direction `sideways` for `date`"),
        "{}",
        stderr(&out)
    );

    args[sort] = "date desc";
    let keep = args.iter().position(|a| *a == "10").unwrap();
    args[keep] = "0";
    let out = subset(&uri, &db, &args).await;
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("`keep` must be an integer from 1 to 1000, not 0"));

    let out = subset(&uri, &db, &["check", "--parent", "shops"]).await;
    assert_eq!(code(&out), 2, "a missing flag is a usage error");

    let mut args = with("check", &["--json"]);
    args[2] = "shps";
    let out = subset(&uri, &db, &args).await;
    assert_eq!(code(&out), 2);
    assert!(json(&out)["error"]
        .as_str()
        .unwrap()
        .contains("collection `shps` does not exist"));

    let out = subset(
        "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=300",
        &db,
        &["inspect", "--json"],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("cannot connect to MongoDB"),
        "{}",
        stderr(&out)
    );
    assert_eq!(json(&out)["exit_code"], 2);
}

/// Shops for the views: `SHOPS` shops with `PER_SHOP` reviews each (every other shop's reviews
/// without `_id`), each review rated 1 to 5 and `verified` or not; a shop with no reviews, and
/// one without the array.
const SHOPS: usize = 6;
const PER_SHOP: usize = 25;

async fn seed_rated(db: &Database) {
    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let mut shops = Vec::new();
    for i in 0..SHOPS {
        let reviews: Vec<Document> = (0..PER_SHOP)
            .map(|_| {
                let mut r = review(&mut rng, i % 2 == 0, now);
                r.insert("rating", rand::Rng::random_range(&mut rng, 1..=5_i32));
                r.insert("verified", rand::Rng::random_bool(&mut rng, 0.4));
                r
            })
            .collect();
        shops.push(
            doc! { "_id": ObjectId::new(), "name": format!("Grill {i}"), "reviews": reviews },
        );
    }
    shops.push(doc! { "_id": ObjectId::new(), "name": "Empty Grill", "reviews": [] });
    shops.push(doc! { "_id": ObjectId::new(), "name": "New Grill" });
    db.collection::<Document>("shops")
        .insert_many(shops)
        .await
        .unwrap();
}

/// The flags of the first view: the 5 latest reviews as previews, with a count and a sum.
const PREVIEWS: &[&str] = &[
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

/// The flags of the second view: the 3 best verified reviews, whole, with their own count.
const VERIFIED: &[&str] = &[
    "--parent",
    "shops",
    "--field",
    "top_verified",
    "--child",
    "reviews",
    "--keep",
    "3",
    "--sort",
    "rating desc",
    "--key",
    "shop_id",
    "--filter",
    "verified",
    "--count",
    "verified_count",
];

fn view<'a>(command: &'a str, flags: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(flags);
    args.extend_from_slice(extra);
    args
}

/// A number as `f64`, whichever BSON number type holds it.
fn number(value: Option<&Bson>) -> f64 {
    match value {
        Some(Bson::Int32(n)) => f64::from(*n),
        Some(Bson::Int64(n)) => *n as f64,
        Some(Bson::Double(n)) => *n,
        other => panic!("not a number: {other:?}"),
    }
}

/// A shop's children in the child collection, in `sort` order (then `_id` in the same
/// direction as the last key, as the engine breaks ties).
async fn children_of(
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

fn ids(docs: &[Document]) -> Vec<Bson> {
    docs.iter().map(|d| d.get("_id").unwrap().clone()).collect()
}

/// The first view as it must be on `shops` shops with `reviews` reviews in all: the 5 latest as
/// previews (`_id`, the sort key, `user`, `rating`), whole children in the child collection,
/// count and sum over every child.
async fn assert_previews(db: &Database, shops: usize, reviews: usize) {
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

#[tokio::test(flavor = "multi_thread")]
async fn migrate_embeds_previews_and_sets_sums() {
    let (db, uri) = fresh().await;
    seed_rated(&db).await;

    let out = subset(&uri, &db, &view("migrate", PREVIEWS, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(
        report["views"][0]["children_copied"],
        (SHOPS * PER_SHOP) as u64
    );
    assert_eq!(
        report["views"][0]["subset"]["embed"],
        serde_json::json!(["_id", "date", "user", "rating"])
    );
    assert_eq!(
        report["views"][0]["subset"]["sums"][0]["field"],
        "rating_total"
    );
    assert_eq!(
        report["views"][0]["parents_built"], 1,
        "the shop without `reviews`"
    );
    assert_previews(&db, SHOPS + 2, SHOPS * PER_SHOP).await;
    // The shops with no reviews have a count and a sum of 0.
    for name in ["Empty Grill", "New Grill"] {
        let shop = db
            .collection::<Document>("shops")
            .find_one(doc! { "name": name })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(shop.get_array("reviews").unwrap().len(), 0, "{name}");
        assert_eq!(shop.get_i64("total_reviews").unwrap(), 0, "{name}");
        assert_eq!(number(shop.get("rating_total")), 0.0, "{name}");
    }

    let out = subset(&uri, &db, &view("check", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("no drift"), "{text}");
    assert!(text.contains("sums \"rating_total = rating\""), "{text}");
    assert!(
        text.contains("previews of _id, date, user, rating"),
        "{text}"
    );

    // Idempotent.
    let shops = all_shops(&db).await;
    let out = subset(&uri, &db, &view("migrate", PREVIEWS, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["views"][0]["children_copied"], 0);
    assert_eq!(all_shops(&db).await, shops);

    // A child deleted outside the library while its preview stays embedded: a rerun neither
    // copies the preview as a (partial) child nor drops it, and says which parent and why.
    let shop = shops
        .iter()
        .find(|s| s.get_array("reviews").is_ok_and(|a| !a.is_empty()))
        .unwrap();
    let preview = shop.get_array("reviews").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    let children = db.collection::<Document>("reviews");
    children
        .delete_one(doc! { "_id": preview.get("_id").unwrap().clone() })
        .await
        .unwrap();
    let out = subset(&uri, &db, &view("migrate", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("holds only the --embed fields and its child is not in `reviews`"),
        "{err}"
    );
    let partial = children
        .find_one(doc! { "_id": preview.get("_id").unwrap().clone() })
        .await
        .unwrap();
    assert!(
        partial.is_none(),
        "a preview was copied as a child: {partial:?}"
    );
    assert_eq!(all_shops(&db).await, shops, "the parent is left as it was");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_filtered_view_is_built_from_the_child_collection() {
    let (db, uri) = fresh().await;
    seed_rated(&db).await;
    let out = subset(&uri, &db, &view("migrate", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let first = all_shops(&db).await;
    let children = db.collection::<Document>("reviews");
    let stored = children.count_documents(doc! {}).await.unwrap();

    // What would be done, without doing it.
    let out = subset(
        &uri,
        &db,
        &view("migrate", VERIFIED, &["--dry-run", "--json"]),
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        json(&out)["views"][0]["parents_to_build"],
        (SHOPS + 2) as u64
    );
    assert_eq!(all_shops(&db).await, first);

    let out = subset(&uri, &db, &view("migrate", VERIFIED, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "parents without `top_verified`, built from the child collection `reviews`: {}",
            SHOPS + 2
        )),
        "{text}"
    );
    assert!(text.contains("children copied: 0"), "{text}");
    assert_eq!(children.count_documents(doc! {}).await.unwrap(), stored);

    // The new view holds the 3 best verified reviews, whole; nothing else changed.
    let now = all_shops(&db).await;
    for (before, shop) in first.iter().zip(&now) {
        let id = shop.get("_id").unwrap();
        assert_eq!(before.get("_id"), Some(id));
        let verified = children_of(
            &db,
            id,
            doc! { "verified": true },
            doc! { "rating": -1, "_id": -1 },
        )
        .await;
        let embedded: Vec<Document> = shop
            .get_array("top_verified")
            .unwrap()
            .iter()
            .map(|r| r.as_document().unwrap().clone())
            .collect();
        let mut top: Vec<Document> = verified.iter().take(3).cloned().collect();
        for child in &mut top {
            child.remove("shop_id");
        }
        assert_eq!(embedded, top, "{id}");
        assert_eq!(
            shop.get_i64("verified_count").unwrap(),
            verified.len() as i64,
            "{id}"
        );
        let mut rest = shop.clone();
        rest.remove("top_verified");
        rest.remove("verified_count");
        assert_eq!(&rest, before, "the first view of {id} is untouched");
    }
    assert!(
        now.iter()
            .any(|s| s.get_array("top_verified").unwrap().len() == 3),
        "some shop has 3 verified reviews"
    );

    // Idempotent.
    let out = subset(&uri, &db, &view("migrate", VERIFIED, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["views"][0]["children_copied"], 0);
    assert_eq!(json(&out)["views"][0]["parents_built"], 0);
    assert_eq!(all_shops(&db).await, now);

    // A third view, negated: the 2 latest unverified reviews; with the verified ones, every
    // review is counted once.
    const UNVERIFIED: &[&str] = &[
        "--parent",
        "shops",
        "--field",
        "latest_unverified",
        "--child",
        "reviews",
        "--keep",
        "2",
        "--sort",
        "date desc",
        "--key",
        "shop_id",
        "--filter",
        "!verified",
        "--count",
        "unverified_count",
    ];
    let out = subset(&uri, &db, &view("migrate", UNVERIFIED, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for shop in all_shops(&db).await {
        assert_eq!(
            shop.get_i64("verified_count").unwrap() + shop.get_i64("unverified_count").unwrap(),
            shop.get_i64("total_reviews").unwrap()
        );
        for review in shop.get_array("latest_unverified").unwrap() {
            let review = review.as_document().unwrap();
            assert!(!review.get_bool("verified").unwrap(), "{review}");
        }
    }

    // Every view checks clean.
    for flags in [PREVIEWS, VERIFIED, UNVERIFIED] {
        let out = subset(&uri, &db, &view("check", flags, &["--json"])).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let report = json(&out);
        assert_eq!(report["drifted"], 0);
        assert_eq!(report["checked"], (SHOPS + 2) as u64);
    }
    assert_previews(&db, SHOPS + 2, SHOPS * PER_SHOP).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_sum_and_a_whole_child_in_a_preview_are_reported_and_reconciled() {
    let (db, uri) = fresh().await;
    seed_rated(&db).await;
    let out = subset(&uri, &db, &view("migrate", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let shops = all_shops(&db).await;
    let (a, b) = (shops[0].clone(), shops[1].clone());
    let a_id = a.get("_id").unwrap().clone();
    let b_id = b.get("_id").unwrap().clone();
    let shops_coll = db.collection::<Document>("shops");
    shops_coll
        .update_one(
            doc! { "_id": a_id.clone() },
            doc! { "$set": { "rating_total": 999_i64 } },
        )
        .await
        .unwrap();
    // The whole child where its preview belongs.
    let first = b.get_array("reviews").unwrap()[0].as_document().unwrap();
    let mut whole = db
        .collection::<Document>("reviews")
        .find_one(doc! { "_id": first.get("_id").unwrap().clone() })
        .await
        .unwrap()
        .unwrap();
    whole.remove("shop_id");
    shops_coll
        .update_one(
            doc! { "_id": b_id.clone() },
            doc! { "$set": { "reviews.0": whole } },
        )
        .await
        .unwrap();

    let out = subset(&uri, &db, &view("check", PREVIEWS, &["--json"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["drifted"], 2);
    let drifts = report["drifts"].as_array().unwrap();
    let drift_of = |id: &Bson| {
        drifts
            .iter()
            .find(|d| d["_id"] == subset_runtime::bson_compat::to_relaxed_extjson(id.clone()))
            .unwrap_or_else(|| panic!("no drift for {id}: {report}"))
    };
    let sum = &drift_of(&a_id)["sums"][0];
    assert_eq!(sum["field"], "rating_total");
    assert_eq!(sum["stored"], 999);
    let computed = number(a.get("rating_total"));
    assert_eq!(sum["computed"].as_f64().unwrap(), computed);
    let b_drift = drift_of(&b_id);
    assert_eq!(b_drift["changed"].as_array().unwrap().len(), 1, "{b_drift}");
    assert_eq!(b_drift["sums"].as_array().unwrap().len(), 0);

    let out = subset(&uri, &db, &view("check", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 1);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("sum `rating_total` 999, children {computed}")),
        "{text}"
    );
    assert!(text.contains("1 changed"), "{text}");

    let out = subset(&uri, &db, &view("reconcile", PREVIEWS, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["fixed"], 2);
    assert_eq!(all_shops(&db).await, shops);

    let out = subset(&uri, &db, &view("check", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_previews(&db, SHOPS + 2, SHOPS * PER_SHOP).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_filter_sum_or_embed_is_a_usage_error() {
    let (db, uri) = fresh().await;
    seed_rated(&db).await;
    let before = all_shops(&db).await;
    let cases: [(&[&str], &[&str], &str); 5] = [
        (PREVIEWS, &["--filter", "a b"], "not `a b`"),
        (
            PREVIEWS,
            &["--sum", "rating_total rating"],
            "`rating_total rating` is not `parent_field = child_field`",
        ),
        (
            PREVIEWS,
            &["--sum", "total_reviews = rating"],
            "`total_reviews` cannot be both the count field and a sum field",
        ),
        (
            VERIFIED,
            &["--embed", "user,,rating"],
            "embedded field name is empty",
        ),
        (
            PREVIEWS,
            &["--filter", "shop_id"],
            "`shop_id` cannot be both the key field and the filter field",
        ),
    ];
    for (flags, extra, message) in cases {
        for command in ["migrate", "check", "reconcile", "follow"] {
            let out = subset(&uri, &db, &view(command, flags, extra)).await;
            assert_eq!(code(&out), 2, "{command} {extra:?}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(message),
                "{command} {extra:?}: {}",
                stderr(&out)
            );
            assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        }
    }
    // A new view over a child collection that does not exist (nothing migrated yet, or a
    // misspelt `--child`) would give every shop an empty one: refused.
    let out = subset(&uri, &db, &view("migrate", VERIFIED, &[])).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no parent of `shops` has `top_verified`, so every subset would be built from the child collection, and `reviews` does not exist"),
        "{}",
        stderr(&out)
    );
    assert_eq!(all_shops(&db).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn children_of_no_parent_are_reported_and_the_dry_run_counts_the_subsets_it_builds() {
    let (db, uri) = fresh().await;
    seed_rated(&db).await;
    let out = subset(&uri, &db, &view("migrate", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Written around the library: three reviews of shops that do not exist, one without a key.
    let children = db.collection::<Document>("reviews");
    let mut orphans: Vec<Document> = (0..3)
        .map(|i| doc! { "_id": ObjectId::new(), "shop_id": ObjectId::new(), "rating": i, "verified": true, "date": DateTime::now() })
        .collect();
    orphans.push(
        doc! { "_id": ObjectId::new(), "rating": 5, "verified": true, "date": DateTime::now() },
    );
    children.insert_many(&orphans).await.unwrap();
    let orphan_ids = ids(&orphans);
    let assert_orphans = |report: &Value| {
        assert_eq!(report["total"], 4, "{report}");
        assert_eq!(
            (&report["no_parent"], &report["keyless"]),
            (&Value::from(3), &Value::from(1))
        );
        for id in report["sample"].as_array().unwrap() {
            assert!(
                orphan_ids.iter().any(|o| id_matches(id, o)),
                "{id} is no orphan"
            );
        }
    };

    let out = subset(
        &uri,
        &db,
        &[
            "inspect",
            "--collection",
            "reviews",
            "--parent",
            "shops",
            "--key",
            "shop_id",
            "--json",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_orphans(&json(&out)["orphans"]);

    let out = subset(
        &uri,
        &db,
        &view("migrate", VERIFIED, &["--dry-run", "--json"]),
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let dry = json(&out);
    assert_orphans(&dry["views"][0]["orphans"]);
    let (before, estimated) = (
        dry["before"]["bytes"].as_u64().unwrap(),
        dry["estimated_after"]["bytes"].as_u64().unwrap(),
    );
    assert!(
        estimated > before,
        "building the view grows the parents: {dry}"
    );

    let out = subset(&uri, &db, &view("migrate", VERIFIED, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let done = json(&out);
    assert_orphans(&done["views"][0]["orphans"]);
    let after = done["after"]["bytes"].as_u64().unwrap();
    let (grown, estimated_growth) = (after - before, estimated - before);
    println!("dry run: parents {before} B, estimated {estimated} B after; migrated: {after} B");
    assert!(
        grown * 10 >= estimated_growth * 9 && grown * 10 <= estimated_growth * 11,
        "the estimate is within 10% of the growth: estimated {estimated_growth} B, grown {grown} B"
    );
    let out = subset(&uri, &db, &view("check", VERIFIED, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let per_child = json(&out)["orphans"].clone();
    assert_eq!(per_child.as_array().map(Vec::len), Some(1), "{per_child}");
    assert_eq!(per_child[0]["child"], "reviews", "{per_child}");
    assert_orphans(&per_child[0]);
    let text = String::from_utf8(
        subset(&uri, &db, &view("migrate", VERIFIED, &["--dry-run"]))
            .await
            .stdout,
    )
    .unwrap();
    assert!(text.contains("children of no parent in `reviews`: 4 (3 naming no parent, 1 without a key, 0 with an array key)"), "{text}");
}

/// Whether a JSON `_id` (as `--json` writes it) is `id`.
fn id_matches(json: &Value, id: &Bson) -> bool {
    json.to_string()
        .contains(&id.as_object_id().unwrap().to_hex())
}

/// Shops for the jobs by filter, migrated as the first view (`PREVIEWS`): `JOB_SHOPS` shops of
/// `JOB_REVIEWS` reviews, each with a `rating`, `verified` and an `email`; the first review of every shop but each fifth is by `spammer`, the
/// second of each third shop by `ann`.
const JOB_SHOPS: usize = 30;
const JOB_REVIEWS: usize = 8;

/// Seeds the shops of the jobs and migrates them; returns how many reviews `spammer` and `ann`
/// wrote.
async fn seed_authors(db: &Database, uri: &str) -> (usize, usize) {
    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let (mut spam, mut ann) = (0, 0);
    let shops: Vec<Document> = (0..JOB_SHOPS)
        .map(|i| {
            let reviews: Vec<Document> = (0..JOB_REVIEWS)
                .map(|j| {
                    let mut r = review(&mut rng, true, now);
                    r.insert("rating", rand::Rng::random_range(&mut rng, 1..=5_i32));
                    r.insert("verified", rand::Rng::random_bool(&mut rng, 0.5));
                    r.insert("email", format!("{}@example.com", word(&mut rng, 6)));
                    if j == 0 && i % 5 != 0 {
                        r.insert("user", "spammer");
                        spam += 1;
                    } else if j == 1 && i % 3 == 0 {
                        r.insert("user", "ann");
                        ann += 1;
                    }
                    r
                })
                .collect();
            doc! { "_id": ObjectId::new(), "name": format!("Deli {i}"), "reviews": reviews }
        })
        .collect();
    db.collection::<Document>("shops")
        .insert_many(shops)
        .await
        .unwrap();
    let out = subset(uri, db, &view("migrate", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    (spam, ann)
}

/// Every shop's subset as it must be with `reviews` reviews left, and `subset check` finds no
/// drift.
async fn assert_jobs_done(db: &Database, uri: &str, reviews: usize) {
    assert_previews(db, JOB_SHOPS, reviews).await;
    let out = subset(uri, db, &view("check", PREVIEWS, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no drift"));
}

/// Everything in the database, to show that a command wrote nothing.
async fn everything(db: &Database) -> Vec<(String, Vec<Document>)> {
    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    let mut all = Vec::new();
    for name in names {
        let docs: Vec<Document> = db
            .collection::<Document>(&name)
            .find(doc! {})
            .sort(doc! { "_id": 1 })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        all.push((name, docs));
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_where_takes_a_spammers_reviews_out_of_every_shop() {
    let (db, uri) = fresh().await;
    let (spam, _) = seed_authors(&db, &uri).await;
    let spam_shops = (0..JOB_SHOPS).filter(|i| i % 5 != 0).count();
    let filter = r#"{"user": "spammer"}"#;
    let reviews = db.collection::<Document>("reviews");
    let before = everything(&db).await;

    let out = subset(
        &uri,
        &db,
        &view(
            "remove",
            PREVIEWS,
            &["--where", filter, "--dry-run", "--json"],
        ),
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let dry = json(&out);
    assert_eq!(dry["command"], "remove");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["where"], serde_json::json!({ "user": "spammer" }));
    assert_eq!(dry["children_matching"], spam as u64);
    assert_eq!(dry["parents_matching"], spam_shops as u64);
    assert_eq!(everything(&db).await, before, "the dry run wrote nothing");
    let text = String::from_utf8(
        subset(
            &uri,
            &db,
            &view("remove", PREVIEWS, &["--where", filter, "--dry-run"]),
        )
        .await
        .stdout,
    )
    .unwrap();
    assert!(
        text.starts_with("dry run, nothing changed: remove `shops`:\n  shops.reviews → reviews"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  children matching: {spam}, under {spam_shops} parent(s)\n"
        )),
        "{text}"
    );

    // One shop whose array is not an array cannot be recomputed: it fails whole (its spam is
    // still there), the others are done, and the exit code says so.
    let shops = db.collection::<Document>("shops");
    let broken = all_shops(&db).await[1].get("_id").unwrap().clone();
    let array = shops
        .find_one(doc! { "_id": broken.clone() })
        .await
        .unwrap()
        .unwrap()
        .get_array("reviews")
        .unwrap()
        .clone();
    shops
        .update_one(
            doc! { "_id": broken.clone() },
            doc! { "$set": { "reviews": "lots" } },
        )
        .await
        .unwrap();
    let out = subset(
        &uri,
        &db,
        &view(
            "remove",
            PREVIEWS,
            &["--where", filter, "--json", "--batch", "7"],
        ),
    )
    .await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["children_removed"], (spam - 1) as u64, "{report}");
    assert_eq!(
        report["parents_touched"],
        (spam_shops - 1) as u64,
        "{report}"
    );
    assert_eq!(report["failed"], 1, "{report}");
    assert!(
        id_matches(&report["failures"][0]["_id"], &broken),
        "{report}"
    );
    let error = report["failures"][0]["error"].as_str().unwrap();
    assert!(
        error.ends_with("field `reviews` is a string, not an array"),
        "{error}"
    );
    assert_eq!(
        reviews
            .count_documents(doc! { "user": "spammer" })
            .await
            .unwrap(),
        1,
        "the failed shop's spam stays"
    );

    // Mended, the same command finishes the job.
    shops
        .update_one(
            doc! { "_id": broken.clone() },
            doc! { "$set": { "reviews": array } },
        )
        .await
        .unwrap();
    let out = subset(&uri, &db, &view("remove", PREVIEWS, &["--where", filter])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "  where {\"user\":\"spammer\"}\n  children removed: 1; parents touched: 1 ("
        ),
        "{text}"
    );
    assert_eq!(
        reviews
            .count_documents(doc! { "user": "spammer" })
            .await
            .unwrap(),
        0
    );
    assert_jobs_done(&db, &uri, JOB_SHOPS * JOB_REVIEWS - spam).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn patch_where_anonymises_an_author_in_children_and_copies() {
    let (db, uri) = fresh().await;
    let (_, ann) = seed_authors(&db, &uri).await;
    let reviews = db.collection::<Document>("reviews");
    let hers: Vec<Bson> = ids(&reviews
        .find(doc! { "user": "ann" })
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap());
    assert_eq!(hers.len(), ann);
    let embedded_ann = |shops: &[Document]| {
        shops
            .iter()
            .flat_map(|s| s.get_array("reviews").unwrap().clone())
            .filter(|r| hers.contains(r.as_document().unwrap().get("_id").unwrap()))
            .map(|r| r.as_document().unwrap().clone())
            .collect::<Vec<_>>()
    };
    let copies = embedded_ann(&all_shops(&db).await).len();
    assert!(
        copies > 0,
        "some of her reviews are among the 5 latest, as previews"
    );

    let change = [
        "--where",
        r#"{"user": "ann"}"#,
        "--set",
        r#"user="anonymous""#,
        "--unset",
        "email",
    ];
    let mut args = change.to_vec();
    args.extend(["--dry-run", "--json"]);
    let before = everything(&db).await;
    let out = subset(&uri, &db, &view("patch", PREVIEWS, &args)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let dry = json(&out);
    assert_eq!(dry["children_matching"], ann as u64);
    assert_eq!(
        dry["change"],
        serde_json::json!({ "set": { "user": "anonymous" }, "unset": ["email"] })
    );
    assert_eq!(everything(&db).await, before, "the dry run wrote nothing");

    let mut args = change.to_vec();
    args.push("--json");
    let out = subset(&uri, &db, &view("patch", PREVIEWS, &args)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["command"], "patch");
    assert_eq!(report["children_patched"], ann as u64, "{report}");
    assert_eq!(report["parents_touched"], ann as u64, "{report}");
    assert_eq!(report["failures"], serde_json::json!([]));
    assert_eq!(
        reviews
            .count_documents(doc! { "user": "ann" })
            .await
            .unwrap(),
        0
    );
    for child in reviews
        .find(doc! { "_id": { "$in": &hers } })
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
    {
        assert_eq!(child.get_str("user").unwrap(), "anonymous");
        assert!(!child.contains_key("email"), "{child}");
    }
    let now = embedded_ann(&all_shops(&db).await);
    assert_eq!(now.len(), copies, "the copies stay where they were");
    for copy in &now {
        assert_eq!(copy.get_str("user").unwrap(), "anonymous");
    }
    assert_jobs_done(&db, &uri, JOB_SHOPS * JOB_REVIEWS).await;

    // The text form, on a rerun that finds nothing left to do.
    let out = subset(&uri, &db, &view("patch", PREVIEWS, &change)).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("  where {\"user\":\"ann\"}; set user = \"anonymous\"; unset email\n  children patched: 0; parents touched: 0 ("),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_where_or_patch_is_refused_before_any_write() {
    let (db, uri) = fresh().await;
    db.collection::<Document>("shops")
        .insert_one(doc! { "_id": 1, "reviews": [], "total_reviews": 0_i64, "rating_total": 0 })
        .await
        .unwrap();
    db.collection::<Document>("reviews")
        .insert_one(
            doc! { "_id": 1, "shop_id": 7, "user": "ann", "date": DateTime::now(), "rating": 3 },
        )
        .await
        .unwrap();
    let before = everything(&db).await;
    let ann = r#"{"user": "ann"}"#;
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "remove",
            &["--where", "{user: ann}"],
            "error: --where is not valid JSON (key must be a string at line 1 column 2): {user: ann}",
        ),
        ("remove", &["--where", "[1, 2]"], "error: --where must be a JSON document"),
        (
            "remove",
            &["--where", r#"{"$oid": "0123456789abcdef01234567"}"#],
            "not an ObjectId",
        ),
        (
            "remove",
            &["--where", r#"{"user": {"$bogus": 1}}"#],
            "error: --where: the server refused the filter: server error 2 on `reviews`: unknown operator: $bogus",
        ),
        // The engine's rules for a patch, in its words, in a dry run too.
        (
            "patch",
            &["--where", ann, "--unset", "date"],
            "error: invalid patch of a child in `reviews`: field `date` is a sort key of `reviews`",
        ),
        ("patch", &["--where", ann, "--unset", "date", "--dry-run"], "field `date`"),
        ("patch", &["--where", ann, "--set", "_id=2"], "field `_id` is the child's `_id`"),
        ("patch", &["--where", ann, "--set", "user=anonymous"], "error: --set user is not valid JSON"),
        ("patch", &["--where", ann, "--set", "user"], "--set `user` must be FIELD=VALUE"),
        ("patch", &["--where", ann], "--set <FIELD=VALUE>|--unset <FIELD>"),
    ];
    for (command, extra, message) in cases {
        let out = subset(&uri, &db, &view(command, PREVIEWS, extra)).await;
        assert_eq!(code(&out), 2, "{extra:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(message),
            "{extra:?}: wanted {message:?} in {}",
            stderr(&out)
        );
    }
    let out = subset(
        &uri,
        &db,
        &view(
            "patch",
            PREVIEWS,
            &["--where", ann, "--set", "shop_id=2", "--json"],
        ),
    )
    .await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let error = json(&out);
    assert_eq!(error["exit_code"], 2);
    assert_eq!(
        error["error"],
        "invalid patch of a child in `reviews`: field `shop_id` is the parent key `shop_id`: move the child to another parent instead"
    );
    assert_eq!(everything(&db).await, before, "nothing was written");
}

/// The flags of a ledger: the 5 latest entries, their count and the balance, a sum of
/// `Decimal128` amounts.
const LEDGER: &[&str] = &[
    "--parent",
    "accounts",
    "--field",
    "recent",
    "--child",
    "ledger",
    "--keep",
    "5",
    "--sort",
    "at desc",
    "--key",
    "account_id",
    "--count",
    "entries",
    "--sum",
    "balance = amount",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_decimal_sum_follows_the_stored_decimals_exactly() {
    let (db, uri) = fresh().await;
    let dec = |text: &str| Bson::Decimal128(text.parse().unwrap());
    let (a, b) = (ObjectId::new(), ObjectId::new());
    db.collection::<Document>("accounts")
        .insert_many([doc! { "_id": a }, doc! { "_id": b }])
        .await
        .unwrap();
    let mut entries: Vec<Document> = (0..300)
        .map(|i| doc! { "account_id": a, "amount": dec("0.10"), "at": DateTime::from_millis(i) })
        .collect();
    for (i, amount) in ["19.99", "0.01", "-5.50"].into_iter().enumerate() {
        entries.push(
            doc! { "account_id": b, "amount": dec(amount), "at": DateTime::from_millis(i as i64) },
        );
    }
    db.collection::<Document>("ledger")
        .insert_many(entries)
        .await
        .unwrap();
    let balance = |id: ObjectId| {
        let accounts = db.collection::<Document>("accounts");
        async move {
            let account = accounts
                .find_one(doc! { "_id": id })
                .await
                .unwrap()
                .unwrap();
            account.get("balance").cloned()
        }
    };

    // The CLI knows no Rust types: a sum of stored decimals is a decimal, added exactly.
    let out = subset(&uri, &db, &view("migrate", LEDGER, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(balance(a).await, Some(dec("30.00")));
    assert_eq!(balance(b).await, Some(dec("14.50")));

    db.collection::<Document>("accounts")
        .update_one(
            doc! { "_id": a },
            doc! { "$set": { "balance": dec("30.01") } },
        )
        .await
        .unwrap();
    let out = subset(&uri, &db, &view("check", LEDGER, &["--json"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["drifted"], 1, "{report}");
    let sum = &report["drifts"][0]["sums"][0];
    assert_eq!(sum["field"], "balance");
    assert_eq!(sum["stored"]["$numberDecimal"], "30.01", "{sum}");
    assert_eq!(sum["computed"]["$numberDecimal"], "30.00", "{sum}");

    let out = subset(&uri, &db, &view("reconcile", LEDGER, &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["fixed"], 1);
    assert_eq!(balance(a).await, Some(dec("30.00")));
    let out = subset(&uri, &db, &view("check", LEDGER, &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A child another program wrote without its sort key, among the first `keep`: `subset check`
/// reports it as the application's store of the same field does (after the application's
/// reconcile noted it), and a first page through the library fails at it rather than serve
/// the two good ones as all there is.
#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_child_in_the_head_shows_alike_in_check_and_the_library() {
    use subset_runtime::raw;
    use subset_runtime::repair::SweepOptions;
    use subset_runtime::spec::{ParentSpec, SpecBuilder};
    use subset_runtime::PageRequest;

    let (db, uri) = fresh().await;
    let shop = ObjectId::new();
    db.collection::<Document>("shops")
        .insert_one(doc! { "_id": shop, "name": "Odd Shop", "reviews": [], "total_reviews": 0_i64 })
        .await
        .unwrap();
    let undated = ObjectId::new();
    db.collection::<Document>("reviews")
        .insert_many([
            doc! { "_id": ObjectId::new(), "shop_id": shop, "date": DateTime::from_millis(2_000) },
            doc! { "_id": ObjectId::new(), "shop_id": shop, "date": DateTime::from_millis(1_000) },
            doc! { "_id": undated, "shop_id": shop },
        ])
        .await
        .unwrap();
    // The application's own store of the field the flags describe.
    let spec = SpecBuilder::new("reviews", "reviews", "shop_id")
        .keep(10)
        .sort("date desc")
        .count("total_reviews")
        .build()
        .unwrap();
    let store = raw::Store::new(&db, ParentSpec::leak("shops", vec![*spec]));
    let options = SweepOptions::default();
    let reconciled = store.reconcile_all(&options, |_| {}).await.unwrap();
    assert_eq!(reconciled.progress.fixed, 1, "{reconciled:?}");
    let library = store.check_all(&options, |_| {}).await.unwrap();

    let out = subset(&uri, &db, &with("check", &["--json"])).await;
    assert_eq!(
        code(&out),
        1,
        "malformed children are a problem: {}",
        stderr(&out)
    );
    let report = json(&out);
    assert_eq!(
        (report["drifted"].as_u64(), report["malformed"].as_u64()),
        (
            Some(library.progress.drifted),
            Some(library.progress.malformed)
        ),
        "{report}"
    );
    assert_eq!(
        (library.progress.drifted, library.progress.malformed),
        (0, 1)
    );
    let (_, drift) = &library.drifts[0];
    let cli = &report["drifts"][0];
    let undated_json = subset_runtime::bson_compat::to_relaxed_extjson(Bson::ObjectId(undated));
    assert_eq!(drift.malformed_in_head, [Bson::ObjectId(undated)]);
    assert_eq!(cli["malformed_in_head"], serde_json::json!([undated_json]));
    assert_eq!(cli["malformed_note"], drift.malformed_note);
    assert!(!drift.malformed_note, "{drift:?}");
    assert_eq!(cli["malformed"][0]["field"], "date");
    let out = subset(&uri, &db, &with("check", &[])).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("1 malformed among the first `keep` (a first page fails at them)"),
        "{text}"
    );

    let reviews = store.children(spec);
    let parent = Bson::ObjectId(shop);
    let page = reviews.page(&parent, &PageRequest::first(10)).await;
    match page {
        Err(subset_runtime::Error::MalformedChild { id, field, .. }) => {
            assert_eq!((*id, field.as_str()), (Bson::ObjectId(undated), "date"))
        }
        other => panic!("the page reaches the undated review: {other:?}"),
    }
    let two = reviews.page(&parent, &PageRequest::first(2)).await.unwrap();
    assert_eq!(two.items.len(), 2);
    assert!(two.has_next(), "a third review follows");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bookkeeping_prefix_names_the_collections_the_tool_reads_and_writes() {
    let (db, uri) = fresh().await;
    let shops = db.collection::<Document>("shops");
    let mut ids = Vec::new();
    for s in 0..3_i64 {
        let id = ObjectId::new();
        let reviews: Vec<Document> = (0..3_i64)
            .map(|r| doc! { "_id": ObjectId::new(), "date": DateTime::from_millis(s * 10 + r), "stars": r })
            .collect();
        shops
            .insert_one(doc! { "_id": id, "reviews": reviews })
            .await
            .unwrap();
        ids.push(id);
    }
    let prefixed = |command: &'static str, extra: &[&'static str]| {
        let mut args = with(command, &["--bookkeeping-prefix", "shop_books"]);
        args.extend_from_slice(extra);
        args
    };

    // A prefix no collection name can start with is a usage error, naming the flag.
    let mut bad = with("check", &["--bookkeeping-prefix", "shop.books", "--json"]);
    let out = subset(&uri, &db, &bad).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let error = json(&out)["error"].as_str().unwrap().to_owned();
    assert!(error.contains("--bookkeeping-prefix"), "{error}");
    assert!(error.contains("holds a `.`"), "{error}");
    let prefix = bad.len() - 2;
    bad[prefix] = "";
    assert_eq!(code(&subset(&uri, &db, &bad).await), 2, "an empty prefix");

    let out = subset(&uri, &db, &prefixed("migrate", &[])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // A push queued under the prefix by a process that went away: the check of that prefix
    // finds it, the default prefix's does not look there.
    let lost = ObjectId::new();
    let child =
        doc! { "_id": lost, "date": DateTime::from_millis(99), "stars": 5, "shop_id": ids[0] };
    db.collection::<Document>("shop_books_folds")
        .insert_one(doc! {
            "_id": { "collection": "shops", "children": "reviews", "key": "shop_id", "parent": ids[0] },
            "queue": [{ "push": ObjectId::new(), "children": [child] }],
            "folds": 0_i64,
        })
        .await
        .unwrap();
    let out = subset(&uri, &db, &with("check", &["--json"])).await;
    assert_eq!(code(&out), 0, "default prefix: {}", stderr(&out));
    let out = subset(&uri, &db, &prefixed("check", &["--json"])).await;
    assert_eq!(code(&out), 1, "prefixed: {}", stderr(&out));
    assert_eq!(json(&out)["queued"], 1, "{}", json(&out));

    // The reconcile of that prefix writes it (transactions: a replica set).
    let out = subset(&uri, &db, &prefixed("reconcile", &["--json"])).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stored = db
        .collection::<Document>("reviews")
        .find_one(doc! { "_id": lost })
        .await
        .unwrap();
    assert!(stored.is_some(), "the queued review was not written");
    let shop = shops
        .find_one(doc! { "_id": ids[0] })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(number(shop.get("total_reviews")), 4.0, "{shop:?}");
    let out = subset(&uri, &db, &prefixed("check", &["--json"])).await;
    assert_eq!(code(&out), 0, "after the reconcile: {}", stderr(&out));

    let names = db.list_collection_names().await.unwrap();
    assert!(
        !names.iter().any(|n| n.starts_with("subset_")),
        "a default name written: {names:?}"
    );
}
