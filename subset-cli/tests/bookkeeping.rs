//! `--bookkeeping-prefix`: the collections every command reads and writes are named by it.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, DateTime, Document};

mod support;
use support::*;

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
