//! `subset inspect` against a real mongod: the delivery app's embedded reviews flagged as
//! unbounded, with the sizes a subset would leave.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use subset_runtime::bson::{doc, Document};

mod support;
use support::*;

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
