//! `subset check` and `subset reconcile` against a real mongod: a parent that cannot be fixed,
//! decimal sums, and a malformed child among the first `keep`.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document};

mod support;
use support::*;

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
