//! `bookkeeping::Status`: what the library keeps in a database, read in one go.

use crate::common;

use bson::oid::ObjectId;
use bson::{doc, DateTime, Document};
use subset::bookkeeping::{Names, Status};
use subset::bson;
use subset::raw;
use subset::spec::{ParentSpec, SpecBuilder};

/// The definitions and the parents under each, as stores write them; the fold queues, job
/// journals and follower places in the shapes the library writes them.
#[tokio::test]
async fn status_counts_parents_per_definition_and_reads_queues_jobs_and_followers() {
    let db = common::replica_db().await;
    let view = |keep: u32| {
        *SpecBuilder::new("latest", "comments", "movie_id")
            .keep(keep)
            .sort("date desc")
            .build()
            .unwrap()
    };
    let old = raw::Store::new(&db, ParentSpec::leak("movies", vec![view(3)]));
    for _ in 0..3 {
        old.insert(doc! { "_id": ObjectId::new(), "latest": [] })
            .await
            .unwrap();
    }
    let new = raw::Store::new(&db, ParentSpec::leak("movies", vec![view(5)]));
    new.insert(doc! { "_id": ObjectId::new(), "latest": [] })
        .await
        .unwrap();
    let names = Names::default();
    let movies = db.collection::<Document>("movies");
    // Written around the library (legacy), and marked as built under none.
    movies
        .insert_one(doc! { "_id": ObjectId::new(), "latest": [] })
        .await
        .unwrap();
    movies
        .insert_one(doc! { "_id": ObjectId::new(), "latest": [], names.marker(): { "d": "" } })
        .await
        .unwrap();

    let (first, second) = (ObjectId::new(), ObjectId::new());
    db.collection::<Document>(names.folds())
        .insert_one(doc! {
            "_id": {
                "collection": "movies", "children": "comments", "key": "movie_id",
                "parent": ObjectId::new(),
            },
            "folds": 2_i64,
            "queue": [{ "push": first, "children": [] }, { "push": second, "children": [] }],
        })
        .await
        .unwrap();
    db.collection::<Document>(names.jobs())
        .insert_one(doc! {
            "collection": "comments", "key": "movie_id", "parents": "movies",
            "change": "remove", "job": "x", "filter": "{ \"author\": \"ann\" }",
            "pending": [ObjectId::new()],
        })
        .await
        .unwrap();
    let saved = DateTime::now();
    db.collection::<Document>(names.followers())
        .insert_one(doc! {
            "_id": { "follower": "sync", "collection": "comments" },
            "token": { "_data": "82" }, "parent": "movies", "saved_at": saved,
        })
        .await
        .unwrap();

    let status = Status::read(&db, &names).await.unwrap();
    assert_eq!(status.models.len(), 1);
    let model = &status.models[0];
    assert_eq!(model.collection, "movies");
    let parents: Vec<(bool, bool, u64)> = model
        .definitions
        .iter()
        .map(|d| (d.current, d.legacy, d.parents))
        .collect();
    assert_eq!(
        parents,
        [(false, true, 4), (true, false, 1)],
        "the legacy one counts the unmarked parent"
    );
    assert_eq!(model.built_under_none, 1);
    assert_eq!(model.built_under_unknown, 0);
    assert!(model.definitions.iter().all(|d| d.views.is_some()));

    assert_eq!(status.folds.len(), 1);
    assert_eq!((status.folds[0].parents, status.folds[0].queued), (1, 2));
    assert_eq!(
        status.folds[0].oldest,
        first.timestamp().try_to_rfc3339_string().ok()
    );
    assert_eq!(status.jobs.len(), 1);
    assert_eq!(
        (status.jobs[0].change.as_str(), status.jobs[0].pending),
        ("remove", 1)
    );
    assert_eq!(status.followers.len(), 1);
    assert_eq!(status.followers[0].follower, "sync");
    assert_eq!(
        status.followers[0].saved_at,
        saved.try_to_rfc3339_string().ok()
    );
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["models"][0]["definitions"][1]["current"], true);
}
