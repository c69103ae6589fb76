//! `subset migrate` against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each) migrated, killed mid-migration and resumed, checked, corrupted and reconciled; malformed
//! shops refused or skipped.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use futures::TryStreamExt;
use mongodb::Database;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document, RawDocumentBuf};

mod support;
use support::*;

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
    // Shop 4, skipped, still embeds both reviews, which only its array holds: refused, not
    // counted as drift that a reconcile would drop.
    assert_eq!(report["drifted"], 0, "{report}");
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{report}");
    assert_eq!(failures[0]["_id"], 4, "{report}");
    let error = failures[0]["error"].as_str().unwrap();
    assert!(
        error.contains("2 child(ren) that `reviews` lacks") && error.contains("never migrated"),
        "{error}"
    );
    let out = subset(&uri, &db, &with("reconcile", &["--skip-invalid"])).await;
    assert_eq!(code(&out), 1);
    let shop = shops.find_one(doc! { "_id": 4 }).await.unwrap().unwrap();
    assert_eq!(shop.get_array("reviews").unwrap().len(), 2, "{shop}");
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
