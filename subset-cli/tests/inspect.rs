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

#[tokio::test(flavor = "multi_thread")]
async fn inspect_names_elements_without_a_sort_value_as_the_dry_run_does() {
    let (db, uri) = fresh().await;
    seed(&db).await;
    // One review without a date, in one shop; one with a null date, in another.
    let shops = db.collection::<Document>("shops");
    let mut ids = Vec::new();
    for (name, change) in [
        ("Noodle Bar 3", doc! { "$unset": { "reviews.17.date": "" } }),
        ("Noodle Bar 5", doc! { "$set": { "reviews.4.date": null } }),
    ] {
        let shop = shops
            .find_one(doc! { "name": name })
            .await
            .unwrap()
            .unwrap();
        let id = shop.get("_id").unwrap().clone();
        shops
            .update_one(doc! { "_id": id.clone() }, change)
            .await
            .unwrap();
        ids.push(id);
    }

    // inspect knows no sort key: it names the field, how many elements, and where, in the dry
    // run's words.
    let out = subset(&uri, &db, &["inspect", "--collection", "shops", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report = json(&out);
    let reviews = &report["collections"][0]["arrays"][0];
    assert_eq!(reviews["path"], "reviews");
    let placeless = reviews["placeless"].as_array().unwrap();
    assert_eq!(placeless.len(), 1, "{placeless:?}");
    assert_eq!(placeless[0]["field"], "date");
    assert_eq!(placeless[0]["elements"], 2);
    assert_eq!(placeless[0]["documents"], 2);
    let missing = "sort field `date` is missing on 1 of 800 elements: `reviews.17`";
    let null = "sort field `date` is null on 1 of 800 elements, which gives them no place in the order: `reviews.4`";
    let examples = placeless[0]["examples"].as_array().unwrap();
    let problem = |id: &subset_runtime::bson::Bson| {
        let id = subset_runtime::bson_compat::to_relaxed_extjson(id.clone());
        examples
            .iter()
            .find(|e| e["_id"] == id)
            .map(|e| e["problem"].as_str().unwrap().to_owned())
    };
    assert_eq!(problem(&ids[0]).as_deref(), Some(missing));
    assert_eq!(problem(&ids[1]).as_deref(), Some(null));
    assert!(reviews["mixed_types"].as_array().unwrap().is_empty());

    let out = subset(&uri, &db, &["inspect", "--collection", "shops"]).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("`date`: 2 element(s) in 2 document(s) without a sortable value (as a --sort field: no place in the order)"),
        "{text}"
    );
    assert!(text.contains(&format!("{}: {missing}", ids[0])), "{text}");

    // The dry run refuses the same two shops, for the same reasons.
    let out = subset(&uri, &db, &with("migrate", &["--dry-run", "--json"])).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    let mut invalid: Vec<String> = report["views"][0]["invalid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["problem"].as_str().unwrap().to_owned())
        .collect();
    invalid.sort();
    let mut expected = [missing.to_owned(), null.to_owned()];
    expected.sort();
    assert_eq!(invalid, expected, "{report}");
}
