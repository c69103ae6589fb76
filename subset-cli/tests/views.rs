//! Views beyond the plain subset, through `migrate`, `check` and `reconcile`: previews, sums,
//! a second filtered view built from the child collection, the usage errors of their flags, and
//! children of no parent.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use mongodb::Database;
use serde_json::Value;
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document};

mod support;
use support::*;

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
