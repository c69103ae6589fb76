//! The `subset` binary acting as the application's model: without view flags, `migrate`,
//! `check`, `reconcile`, `remove`, `rebuild` act on every view of the registered model with its
//! types, as the application (here a run-time store of the same model, which registers it)
//! would; `status` shows what is kept. Against the testkit's real mongod. `follow` without
//! flags is in `follow.rs`.

use serde_json::Value;
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document};
use subset_runtime::raw;
use subset_runtime::repair::{SweepOptions, SweepReport};
use subset_runtime::spec::{NumberType, ParentSpec, SortValues, SpecBuilder, SubsetSpec};
use subset_runtime::WriteMode;
use subset_testkit::Topology;

mod support;
use support::*;

/// A view of the application's movies: comments by date, typed as the application's Rust
/// field (a date) would type it.
fn view(field: &str, child: &str, keep: u32, sort: &str) -> SubsetSpec {
    let mut builder = SpecBuilder::new(field, child, "movie_id")
        .keep(keep)
        .sort(sort)
        .values("date", SortValues::DateTime);
    if field == "latest" {
        builder = builder.count("n");
    }
    *builder.build().unwrap()
}

/// The application's model: the latest comments and the first ones, both of `comments`.
fn movies() -> ParentSpec {
    ParentSpec::leak(
        "movies",
        vec![
            view("latest", "comments", 3, "date desc"),
            view("first", "comments", 2, "date asc"),
        ],
    )
}

fn comment(movie: &Bson, at: i64, author: &str) -> Document {
    doc! {
        "_id": ObjectId::new(),
        "movie_id": movie.clone(),
        "date": DateTime::from_millis(at * 60_000),
        "author": author,
        "text": format!("comment {at}"),
    }
}

/// Inserts `n` movies through `store`, each with five comments, the third by ann.
async fn seed(store: &raw::Store, n: usize, child: &str) -> Vec<Bson> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let id = Bson::ObjectId(ObjectId::new());
        let mut parent = doc! { "_id": id.clone(), "n": 0_i64 };
        for spec in store.spec().subsets {
            parent.insert(spec.field, Vec::<Bson>::new());
        }
        store.insert(parent).await.unwrap();
        let children: Vec<Document> = (0..5)
            .map(|i| comment(&id, i, if i == 2 { "ann" } else { "bob" }))
            .collect();
        let spec = store
            .spec()
            .subsets
            .iter()
            .find(|s| s.child_collection == child)
            .unwrap();
        store.children(spec).push(&id, children).await.unwrap();
        ids.push(id);
    }
    ids
}

/// What a check found, as kinds per parent and field: comparable between the library's report
/// and the command's JSON.
fn kinds_of_report(report: &SweepReport) -> Vec<String> {
    let mut kinds: Vec<String> = report
        .drifts
        .iter()
        .map(|(field, d)| {
            let malformed: Vec<String> = d.malformed.iter().map(|m| m.child.to_string()).collect();
            format!(
                "{} {field}: missing {} stale {} changed {} misordered {} count {} malformed [{}]",
                d.parent,
                d.missing.len(),
                d.stale.len(),
                d.changed.len(),
                d.misordered,
                d.count.is_some(),
                malformed.join(",")
            )
        })
        .collect();
    kinds.sort();
    kinds
}

fn kinds_of_json(report: &Value) -> Vec<String> {
    let len = |v: &Value| v.as_array().map_or(0, Vec::len);
    let id = |v: &Value| {
        let oid = v["$oid"].as_str().unwrap();
        Bson::ObjectId(ObjectId::parse_str(oid).unwrap()).to_string()
    };
    let mut kinds: Vec<String> = report["drifts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let malformed: Vec<String> = d["malformed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| id(&m["_id"]))
                .collect();
            format!(
                "{} {}: missing {} stale {} changed {} misordered {} count {} malformed [{}]",
                id(&d["_id"]),
                d["field"].as_str().unwrap(),
                len(&d["missing"]),
                len(&d["stale"]),
                len(&d["changed"]),
                d["misordered"],
                !d["count"].is_null(),
                malformed.join(",")
            )
        })
        .collect();
    kinds.sort();
    kinds
}

/// A comment with a string `date`, written by another program: `check` without flags reports it
/// malformed in every view, as the library's `check_all` does; `reconcile` embeds it nowhere,
/// and the application's `get` keeps working. With flags on data never registered, a typed or
/// untyped `--sort` calls it malformed too.
#[tokio::test(flavor = "multi_thread")]
async fn a_string_dated_comment_is_malformed_for_the_cli_as_for_the_application() {
    let (db, uri) = fresh().await;
    let app = raw::Store::new(&db, movies());
    let ids = seed(&app, 3, "comments").await;
    let bad = ObjectId::new();
    // Newer than every other comment as a string sorts: a view without types would embed it.
    db.collection::<Document>("comments")
        .insert_one(doc! {
            "_id": bad, "movie_id": ids[0].clone(), "date": "2030-01-01", "author": "eve",
        })
        .await
        .unwrap();

    let library = app
        .check_all(&SweepOptions::default(), |_| {})
        .await
        .unwrap();
    let expected = kinds_of_report(&library);
    assert!(
        expected
            .iter()
            .any(|k| k.contains(&Bson::ObjectId(bad).to_string())),
        "{expected:?}"
    );
    let out = subset(&uri, &db, &["check", "--parent", "movies", "--json"]).await;
    assert_eq!(
        code(&out),
        1,
        "malformed children are problems: {}",
        stderr(&out)
    );
    let report = json(&out);
    assert_eq!(report["registered"], true);
    assert_eq!(report["views"].as_array().unwrap().len(), 2);
    assert_eq!(kinds_of_json(&report), expected);
    assert!(report["drifts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["missing"].as_array().unwrap().is_empty()));

    let out = subset(&uri, &db, &["reconcile", "--parent", "movies", "--json"]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    for id in &ids {
        // The application's read of every view: it failed when a malformed child was embedded.
        let parent = app.get(id).await.unwrap().unwrap();
        for spec in app.spec().subsets {
            for child in parent.get_array(spec.field).unwrap() {
                let child = child.unwrap().as_document().unwrap();
                assert_ne!(
                    child.get_object_id("_id").unwrap(),
                    bad,
                    "{id} {}",
                    spec.field
                );
                assert!(child.get_datetime("date").is_ok(), "{id} {}", spec.field);
            }
        }
    }
    let after = app
        .check_all(&SweepOptions::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(after.progress.drifted, 0, "{:?}", after.drifts);
    assert!(
        after.progress.malformed > 0,
        "still reported, never embedded"
    );

    // The same data without a registry, as `migrate` leaves it: the flags' view.
    let (plain, _) = fresh().await;
    for collection in ["movies", "comments"] {
        let docs: Vec<Document> = {
            use futures::TryStreamExt;
            db.collection::<Document>(collection)
                .find(doc! {})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap()
        };
        let docs: Vec<Document> = docs
            .into_iter()
            .map(|mut d| {
                d.remove("_subset");
                d
            })
            .collect();
        plain
            .collection::<Document>(collection)
            .insert_many(docs)
            .await
            .unwrap();
    }
    for sort in ["date:date desc", "date desc"] {
        let flags = [
            "check", "--parent", "movies", "--field", "latest", "--child", "comments", "--key",
            "movie_id", "--keep", "3", "--count", "n", "--sort", sort, "--json",
        ];
        let out = subset(&uri, &plain, &flags).await;
        assert_eq!(code(&out), 1, "{sort}: {}", stderr(&out));
        let report = json(&out);
        assert_eq!(report["registered"], false);
        assert_eq!(report["malformed"], 1, "{sort}: {report}");
        assert_eq!(report["drifted"], 0, "{sort}: nothing missing: {report}");
    }
}

/// A right-to-be-forgotten removal without flags, on a model of two child collections (three
/// views): every view of every parent is exact afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_recount_past_a_sums_type_is_refused_by_the_cli_as_by_the_application() {
    let (db, uri) = fresh().await;
    // The application's `stars: i32` sum, as its store registers it.
    let i32_sum = NumberType::integer("i32", i32::MIN.into(), i32::MAX.into());
    let spec = SpecBuilder::new("latest", "ratings", "movie_id")
        .keep(3)
        .sort("date desc")
        .values("date", SortValues::DateTime)
        .sum("stars", "stars")
        .number_type("stars", i32_sum)
        .build()
        .unwrap();
    let store = raw::Store::new(&db, ParentSpec::leak("movies", vec![*spec]));
    let movie = Bson::ObjectId(ObjectId::new());
    store
        .insert(doc! { "_id": movie.clone(), "latest": [] })
        .await
        .unwrap();
    let rating = |at: i64, stars: i32| {
        doc! { "_id": ObjectId::new(), "movie_id": movie.clone(), "date": DateTime::from_millis(at), "stars": stars }
    };
    store
        .children(spec)
        .push(&movie, vec![rating(1, i32::MAX)])
        .await
        .unwrap();
    // Another program adds a rating the sum cannot take.
    db.collection::<Document>("ratings")
        .insert_one(rating(2, 1))
        .await
        .unwrap();

    let out = subset(&uri, &db, &["reconcile", "--parent", "movies", "--json"]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["failed"], 1, "{report}");
    let error = report["failures"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("`stars` is i32, which cannot hold"),
        "{error}"
    );
    let library = store
        .reconcile_all(&SweepOptions::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(library.progress.failed, 1, "{library:?}");
    // The movie still holds what its type can read.
    let stored = db
        .collection::<Document>("movies")
        .find_one(doc! { "_id": movie })
        .await
        .unwrap()
        .unwrap();
    let stars = match stored.get("stars") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("stars: {other:?}"),
    };
    assert_eq!(stars, i64::from(i32::MAX));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removal_without_flags_leaves_every_view_exact() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (db, uri) = fresh().await;
        let model = ParentSpec::leak(
            "movies",
            vec![
                view("latest", "comments", 3, "date desc"),
                view("first", "comments", 2, "date asc"),
                view("ratings", "ratings", 3, "date desc"),
            ],
        );
        let app =
            raw::Store::with_options(&db, model, subset_runtime::StoreOptions::new().mode(mode));
        let ids = seed(&app, 4, "comments").await;
        let rates = app.children(&model.subsets[2]);
        for id in &ids {
            let ratings: Vec<Document> = (0..4)
                .map(|i| comment(id, i, if i == 3 { "ann" } else { "bob" }))
                .collect();
            rates.push(id, ratings).await.unwrap();
        }
        let out = subset(
            &uri,
            &db,
            &[
                "remove",
                "--parent",
                "movies",
                "--where",
                r#"{"author": "ann"}"#,
                "--json",
            ],
        )
        .await;
        assert_eq!(code(&out), 0, "{mode:?}: {}", stderr(&out));
        let report = json(&out);
        assert_eq!(report["children_removed"], 8, "{mode:?}: {report}");
        assert_eq!(report["views"].as_array().unwrap().len(), 3);
        for child in ["comments", "ratings"] {
            let left = db
                .collection::<Document>(child)
                .count_documents(doc! { "author": "ann" })
                .await
                .unwrap();
            assert_eq!(left, 0, "{mode:?} {child}");
        }
        let check = app
            .check_all(&SweepOptions::default(), |_| {})
            .await
            .unwrap();
        assert_eq!(
            (
                check.progress.drifted,
                check.progress.malformed,
                check.progress.failed
            ),
            (0, 0, 0),
            "{mode:?}: {:?}",
            check.drifts
        );
        for id in &ids {
            let parent = app.get(id).await.unwrap().unwrap();
            for spec in model.subsets {
                let authors: Vec<&str> = parent
                    .get_array(spec.field)
                    .unwrap()
                    .into_iter()
                    .map(|c| c.unwrap().as_document().unwrap().get_str("author").unwrap())
                    .collect();
                assert!(!authors.contains(&"ann"), "{mode:?} {}", spec.field);
                assert_eq!(authors.len(), spec.keep as usize, "{mode:?} {}", spec.field);
            }
        }
    }
}

/// `subset status` before and after `subset rebuild`: the old definition is dropped once no
/// parent is built under it; and the usage errors of the model's flags.
#[tokio::test(flavor = "multi_thread")]
async fn rebuild_and_status_show_the_definitions() {
    let (db, uri) = fresh().await;
    let old = raw::Store::new(
        &db,
        ParentSpec::leak("movies", vec![view("latest", "comments", 3, "date desc")]),
    );
    let ids = seed(&old, 3, "comments").await;
    let new = raw::Store::new(&db, movies());
    new.insert(doc! { "_id": ObjectId::new(), "latest": [], "first": [], "n": 0_i64 })
        .await
        .unwrap();

    let out = subset(&uri, &db, &["status", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = json(&out);
    let definitions = status["models"][0]["definitions"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(status["models"][0]["collection"], "movies");
    assert_eq!(definitions.len(), 2, "{status}");
    assert_eq!(definitions[0]["parents"], 3);
    assert_eq!(definitions[0]["legacy"], true);
    assert_eq!(definitions[1]["current"], true);
    assert_eq!(definitions[1]["parents"], 1);
    assert_eq!(definitions[1]["views"].as_array().unwrap().len(), 2);
    assert_eq!(status["jobs"], serde_json::json!([]));
    let text = stdout(&subset(&uri, &db, &["status"]).await);
    assert!(
        text.contains("(current): 1 parent(s); latest → comments, first → comments"),
        "{text}"
    );

    let out = subset(&uri, &db, &["rebuild", "--parent", "movies"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("parents rebuilt: 3"), "{text}");
    assert!(text.contains("definitions kept whole: 1 of 2"), "{text}");
    let status = json(&subset(&uri, &db, &["status", "--json"]).await);
    let definitions = status["models"][0]["definitions"].as_array().unwrap();
    assert_eq!(definitions[0]["views"], Value::Null, "{status}");
    assert_eq!(definitions[0]["parents"], 0);
    assert_eq!(definitions[1]["parents"], 4);
    for id in &ids {
        assert!(new
            .get(id)
            .await
            .unwrap()
            .unwrap()
            .get_array("first")
            .is_ok());
    }

    // Flags the model does not take, and a collection never registered.
    let out = subset(
        &uri,
        &db,
        &[
            "rebuild",
            "--parent",
            "movies",
            "--field",
            "latest",
            "--child",
            "comments",
            "--key",
            "movie_id",
            "--sort",
            "date desc",
        ],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("registered model"),
        "{}",
        stderr(&out)
    );
    let out = subset(
        &uri,
        &db,
        &["check", "--parent", "movies", "--field", "latest"],
    )
    .await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--field given without"),
        "{}",
        stderr(&out)
    );
    db.collection::<Document>("shows")
        .insert_one(doc! {})
        .await
        .unwrap();
    let out = subset(&uri, &db, &["check", "--parent", "shows"]).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no registered model"),
        "{}",
        stderr(&out)
    );
}

/// After a rolling deploy: `gone`, whose last children code of the old model removed (its
/// views left as they were, marked as built under none), and `renamed`, written by the old code
/// and whose children then had their key renamed. `subset check`, `subset reconcile` and
/// `subset rebuild` refuse `renamed` alone, naming the key its children carry, and rebuild
/// `gone` empty, as the library's own passes do.
#[tokio::test(flavor = "multi_thread")]
async fn check_reconcile_and_rebuild_refuse_only_the_renamed_key() {
    use futures::TryStreamExt;

    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (db, uri) = fresh().await;
        let latest = view("latest", "comments", 3, "date desc");
        let old = raw::Store::with_options(
            &db,
            ParentSpec::leak("movies", vec![latest]),
            subset_runtime::StoreOptions::new().mode(mode),
        );
        let ids = seed(&old, 3, "comments").await;
        let new = raw::Store::with_options(
            &db,
            movies(),
            subset_runtime::StoreOptions::new().mode(mode),
        );
        let rebuilt = new.rebuild(&SweepOptions::default(), |_| {}).await.unwrap();
        assert_eq!(rebuilt.progress.fixed, 3, "{mode:?}");
        let (gone, renamed) = (&ids[0], &ids[1]);
        let comments = db.collection::<Document>("comments");
        let of_gone: Vec<Document> = comments
            .find(doc! { "movie_id": gone.clone() })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let old_latest = old.children(&old.spec().subsets[0]);
        for child in of_gone {
            old_latest
                .remove(gone, child.get("_id").unwrap())
                .await
                .unwrap();
        }
        old_latest
            .push(renamed, vec![comment(renamed, 9, "cy")])
            .await
            .unwrap();
        comments
            .update_many(
                doc! { "movie_id": renamed.clone() },
                doc! { "$rename": { "movie_id": "film_ref" } },
            )
            .await
            .unwrap();
        let refused_ids = |report: &Value| -> Vec<Value> {
            let failures = report["failures"].as_array().unwrap();
            for f in failures {
                let error = f["error"].as_str().unwrap();
                assert!(error.contains("`film_ref`"), "{mode:?}: {error}");
            }
            let mut ids: Vec<Value> = failures.iter().map(|f| f["_id"].clone()).collect();
            ids.dedup();
            ids
        };
        let renamed_json = serde_json::json!({ "$oid": renamed.as_object_id().unwrap().to_hex() });

        let out = subset(&uri, &db, &["check", "--parent", "movies", "--json"]).await;
        assert_eq!(code(&out), 1, "{mode:?}: {}", stderr(&out));
        let report = json(&out);
        assert_eq!(
            refused_ids(&report),
            std::slice::from_ref(&renamed_json),
            "{report}"
        );
        assert_eq!(report["outdated"], 1, "{mode:?}: {report}");

        let out = subset(&uri, &db, &["reconcile", "--parent", "movies", "--json"]).await;
        assert_eq!(code(&out), 1, "{mode:?}: {}", stderr(&out));
        let report = json(&out);
        assert_eq!(
            refused_ids(&report),
            std::slice::from_ref(&renamed_json),
            "{report}"
        );
        assert_eq!(report["fixed"], 1, "{mode:?}: {report}");
        let emptied = new.get(gone).await.unwrap().unwrap();
        assert!(emptied.get_array("latest").unwrap().is_empty(), "{mode:?}");
        assert!(emptied.get_array("first").unwrap().is_empty(), "{mode:?}");

        // The renamed parent is the only one left to rebuild: refused before anything is
        // written.
        let out = subset(&uri, &db, &["rebuild", "--parent", "movies", "--json"]).await;
        assert_ne!(code(&out), 0, "{mode:?}");
        let message = stderr(&out);
        assert!(message.contains("would empty"), "{mode:?}: {message}");
        assert!(message.contains("film_ref"), "{mode:?}: {message}");
        assert!(
            message.contains(&renamed.to_string()),
            "{mode:?}: {message}"
        );
    }
}

/// The application registered its model before its movies were migrated: `migrate` without
/// flags copies the comments embedded in `latest` into `comments` and then builds `first`
/// (declared first, built once `latest` filled the child collection), on a replica set
/// (transactions) and on a standalone server (ordered writes); a rerun copies nothing. With the
/// view flags it migrates the flags' one view.
#[tokio::test(flavor = "multi_thread")]
async fn migrate_without_flags_moves_every_view_of_the_registered_model() {
    for (topology, mode) in [
        (Topology::ReplicaSet, WriteMode::Transactional),
        (Topology::Standalone, WriteMode::Ordered),
    ] {
        let (db, uri) = fresh_on(topology).await;
        let model = ParentSpec::leak(
            "movies",
            vec![
                view("first", "comments", 2, "date asc"),
                view("latest", "comments", 3, "date desc"),
            ],
        );
        let app =
            raw::Store::with_options(&db, model, subset_runtime::StoreOptions::new().mode(mode));
        // The application's first write registers its model.
        app.insert(doc! { "_id": ObjectId::new(), "first": [], "latest": [], "n": 0_i64 })
            .await
            .unwrap();
        // Movies written before, embedding every comment in `latest`, without the parent key.
        let ids: Vec<Bson> = (0..4).map(|_| Bson::ObjectId(ObjectId::new())).collect();
        let movies: Vec<Document> = ids
            .iter()
            .map(|id| {
                let comments: Vec<Document> = (0..6)
                    .map(|at| {
                        let mut c = comment(id, at, "bob");
                        c.remove("movie_id");
                        c
                    })
                    .collect();
                doc! { "_id": id.clone(), "latest": comments }
            })
            .collect();
        db.collection::<Document>("movies")
            .insert_many(movies)
            .await
            .unwrap();

        let out = subset(
            &uri,
            &db,
            &["migrate", "--parent", "movies", "--dry-run", "--json"],
        )
        .await;
        assert_eq!(code(&out), 0, "{topology:?}: {}", stderr(&out));
        let dry = json(&out);
        assert_eq!(dry["registered"], true, "{dry}");
        let fields: Vec<&str> = dry["views"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["subset"]["field"].as_str().unwrap())
            .collect();
        assert_eq!(fields, ["latest", "first"], "{topology:?}: copied first");
        assert_eq!(dry["views"][0]["children_to_copy"], 24, "{dry}");
        assert_eq!(dry["views"][1]["parents_to_build"], 4, "{dry}");
        assert_eq!(
            db.collection::<Document>("comments")
                .count_documents(doc! {})
                .await
                .unwrap(),
            0,
            "{topology:?}: a dry run writes nothing"
        );

        let out = subset(&uri, &db, &["migrate", "--parent", "movies", "--json"]).await;
        assert_eq!(code(&out), 0, "{topology:?}: {}", stderr(&out));
        let report = json(&out);
        assert_eq!(report["registered"], true, "{report}");
        assert_eq!(report["views"][0]["children_copied"], 24, "{report}");
        assert_eq!(report["views"][1]["parents_built"], 4, "{report}");
        for id in &ids {
            let movie = app.get(id).await.unwrap().unwrap();
            let dates = |field: &str| -> Vec<i64> {
                movie
                    .get_array(field)
                    .unwrap()
                    .into_iter()
                    .map(|c| {
                        let c = c.unwrap().as_document().unwrap();
                        c.get_datetime("date").unwrap().timestamp_millis() / 60_000
                    })
                    .collect()
            };
            assert_eq!(dates("latest"), [5, 4, 3], "{topology:?} {id}");
            assert_eq!(dates("first"), [0, 1], "{topology:?} {id}");
            assert_eq!(movie.get_i64("n").unwrap(), 6, "{topology:?} {id}");
        }
        let check = app
            .check_all(&SweepOptions::default(), |_| {})
            .await
            .unwrap();
        assert_eq!(
            (check.progress.drifted, check.progress.failed),
            (0, 0),
            "{topology:?}: {:?}",
            check.drifts
        );

        // Idempotent.
        let out = subset(&uri, &db, &["migrate", "--parent", "movies", "--json"]).await;
        assert_eq!(code(&out), 0, "{topology:?}: {}", stderr(&out));
        let again = json(&out);
        for view in again["views"].as_array().unwrap() {
            assert_eq!(view["children_copied"], 0, "{again}");
        }

        // The view flags describe one view, whatever is registered.
        let flags = [
            "migrate",
            "--parent",
            "movies",
            "--field",
            "latest",
            "--child",
            "comments",
            "--key",
            "movie_id",
            "--keep",
            "3",
            "--count",
            "n",
            "--sort",
            "date desc",
            "--dry-run",
            "--json",
        ];
        let out = subset(&uri, &db, &flags).await;
        assert_eq!(code(&out), 0, "{topology:?}: {}", stderr(&out));
        let dry = json(&out);
        assert_eq!(dry["registered"], false, "{dry}");
        assert_eq!(dry["views"].as_array().unwrap().len(), 1, "{dry}");
    }
}
