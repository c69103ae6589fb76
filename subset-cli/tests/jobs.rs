//! `subset remove --where` and `subset patch --where`: jobs by filter across every shop, their
//! dry runs, and the refusals before any write.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use futures::TryStreamExt;
use mongodb::Database;
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document};

mod support;
use support::*;

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
