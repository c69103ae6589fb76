//! Usage and connection errors: exit code 2, with a message naming the flag or the server.

//! The `subset` binary against a real mongod: the delivery-app data (shops embedding 800 reviews
//! each), inspected, migrated, killed mid-migration and resumed, checked, corrupted and
//! reconciled; and the errors.

use subset_runtime::bson::{doc, Document};

mod support;
use support::*;

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
