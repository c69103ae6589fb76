//! `subset follow` as a process: SIGKILLed during a burst of writes from another program and
//! started again, it misses no change; SIGINT stops it with its place saved and the totals
//! printed; without view flags it follows every view of the registered model; `subset status`
//! lists its place, in a collection given with `--token-collection` too; a standalone server
//! is refused with exit code 2.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use mongodb::Database;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use subset_runtime::bson::oid::ObjectId;
use subset_runtime::bson::{doc, Bson, DateTime, Document};
use subset_runtime::raw;
use subset_runtime::repair::SweepOptions;
use subset_runtime::spec::{ParentSpec, SortValues, SpecBuilder};
use subset_runtime::WriteMode;
use subset_testkit::{MongoServer, Topology};

mod support;
use support::{code, fresh, json, stderr, stdout, subset};

const SHOPS: usize = 10;

/// The subset: the 5 latest reviews of each shop, and their count.
const SUBSET: &[&str] = &[
    "--parent",
    "shops",
    "--field",
    "reviews",
    "--child",
    "reviews",
    "--keep",
    "5",
    "--sort",
    "date desc",
    "--key",
    "shop_id",
    "--count",
    "total_reviews",
];

/// A running `subset follow --json`, its stdout read line by line.
struct Follower {
    process: Child,
    lines: mpsc::Receiver<Value>,
}

impl Follower {
    /// `subset follow <args> --json`.
    fn start(uri: &str, db: &Database, args: &[&str]) -> Follower {
        let mut process = Command::new(env!("CARGO_BIN_EXE_subset"))
            .arg("follow")
            .args(args)
            .args([
                "--json",
                "--window-ms",
                "30",
                "--uri",
                uri,
                "--db",
                db.name(),
            ])
            .env_remove("MONGODB_URI")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = process.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Follower { process, lines }
    }

    /// Waits for a line with `"event": event`, returning it.
    fn wait_for(&self, event: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line["event"] == event => return line,
                Ok(_) => {}
                Err(e) => panic!("no `{event}` line from subset follow: {e}"),
            }
        }
    }
}

async fn external_burst(db: Database, shops: Vec<ObjectId>, until: Instant) -> u64 {
    let reviews = db.collection::<Document>("reviews");
    let mut rng = StdRng::seed_from_u64(9);
    let mut ops = 0;
    while Instant::now() < until {
        let shop = shops[rng.random_range(0..shops.len())];
        match rng.random_range(0..10) {
            0..=4 => {
                let n = rng.random_range(1..=4);
                let batch: Vec<Document> = (0..n)
                    .map(|_| {
                        doc! {
                            "_id": ObjectId::new(), "shop_id": shop,
                            "stars": rng.random_range(1..=5_i32),
                            "date": DateTime::from_millis(rng.random_range(0..100_000_i64)),
                        }
                    })
                    .collect();
                reviews.insert_many(batch).await.unwrap();
            }
            5..=6 => {
                let date = DateTime::from_millis(rng.random_range(0..100_000_i64));
                reviews
                    .update_many(
                        doc! { "shop_id": shop, "stars": rng.random_range(1..=5_i32) },
                        doc! { "$set": { "date": date } },
                    )
                    .await
                    .unwrap();
            }
            7..=8 => {
                reviews.delete_one(doc! { "shop_id": shop }).await.unwrap();
            }
            _ => {
                reviews.delete_many(doc! { "shop_id": shop }).await.unwrap();
            }
        }
        ops += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..3))).await;
    }
    ops
}

/// Waits until a sentinel review, written after everything else, is embedded, twice (see
/// `tests/follow.rs` at the workspace root). Up to 75 s: a process SIGKILLed while committing a
/// transaction leaves it open on the server, holding its parent, until the server aborts it
/// (the test server's `transactionLifetimeLimitSeconds` is 20, checked every 10 s: at most
/// 30 s); the restarted follower waits for that parent.
async fn caught_up(db: &Database, sentinel: ObjectId) -> Duration {
    let started = Instant::now();
    for k in 0..2 {
        let id = ObjectId::new();
        db.collection::<Document>("reviews")
            .insert_one(doc! { "_id": id, "shop_id": sentinel, "stars": 1, "date": DateTime::from_millis(1_000_000 + k) })
            .await
            .unwrap();
        while db
            .collection::<Document>("shops")
            .count_documents(doc! { "_id": sentinel, "reviews._id": id })
            .await
            .unwrap()
            == 0
        {
            assert!(started.elapsed() < Duration::from_secs(75), "no catch-up");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    started.elapsed()
}

/// Every shop's embedded reviews are its 5 latest (`date desc`, `_id` desc, sorted here) and
/// its count the number of its reviews.
async fn assert_exact(db: &Database, shops: &[ObjectId]) {
    for shop in shops {
        let mut all: Vec<Document> = db
            .collection::<Document>("reviews")
            .find(doc! { "shop_id": shop })
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        all.sort_by_key(|r| {
            std::cmp::Reverse((
                r.get_datetime("date").copied().unwrap(),
                r.get_object_id("_id").unwrap(),
            ))
        });
        let top: Vec<Bson> = all
            .iter()
            .take(5)
            .map(|r| r.get("_id").unwrap().clone())
            .collect();
        let stored = db
            .collection::<Document>("shops")
            .find_one(doc! { "_id": shop })
            .await
            .unwrap()
            .unwrap();
        let embedded: Vec<Bson> = stored
            .get_array("reviews")
            .unwrap()
            .iter()
            .map(|r| r.as_document().unwrap().get("_id").unwrap().clone())
            .collect();
        assert_eq!(embedded, top, "reviews of {shop}");
        assert_eq!(
            stored.get_i64("total_reviews").unwrap(),
            all.len() as i64,
            "count of {shop}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_follower_restarts_and_misses_no_change() {
    let server = MongoServer::shared(Topology::ReplicaSet).await.unwrap();
    let db = server.database().await.unwrap();
    let uri = server.uri().to_owned();
    let mut shops: Vec<ObjectId> = (0..=SHOPS).map(|_| ObjectId::new()).collect();
    let docs: Vec<Document> = shops
        .iter()
        .map(|id| doc! { "_id": id, "reviews": [], "total_reviews": 0_i64 })
        .collect();
    db.collection::<Document>("shops")
        .insert_many(docs)
        .await
        .unwrap();
    let sentinel = shops.pop().unwrap();

    let mut first = Follower::start(&uri, &db, SUBSET);
    let started = first.wait_for("started");
    assert_eq!(started["resumed"], false);

    let until = Instant::now() + Duration::from_millis(2_500);
    let burst = tokio::spawn(external_burst(db.clone(), shops.clone(), until));
    tokio::time::sleep(Duration::from_millis(rand::random_range(500..1_500))).await;
    first.process.kill().unwrap(); // SIGKILL: no chance to save anything
    first.process.wait().unwrap();
    let killed_at = Instant::now();

    let mut second = Follower::start(&uri, &db, SUBSET);
    let started = second.wait_for("started");
    assert_eq!(started["resumed"], true, "{started}");
    let ops = burst.await.unwrap();
    let catch_up = caught_up(&db, sentinel).await;
    println!(
        "{ops} external operations; killed {:?} before they ended; the restarted follower caught up {catch_up:?} after",
        until.saturating_duration_since(killed_at)
    );
    assert_exact(&db, &shops).await;

    // SIGINT: a graceful stop, the place saved, the totals printed.
    let pid = second.process.id().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(signalled.success());
    second.wait_for("stopped");
    let summary = second.wait_for("summary");
    let status = second.process.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{summary}");
    let totals = &summary["totals"];
    println!("summary after the restart: {totals}");
    assert_eq!(totals["catch_ups"], 0);
    assert!(totals["written"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_server_is_refused() {
    let server = MongoServer::shared(Topology::Standalone).await.unwrap();
    let db = server.database().await.unwrap();
    db.collection::<Document>("shops")
        .insert_one(doc! { "reviews": [] })
        .await
        .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_subset"));
    command
        .arg("follow")
        .args(SUBSET)
        .args(["--uri", server.uri(), "--db", db.name()])
        .env_remove("MONGODB_URI");
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("standalone"), "{stderr}");

    // Without flags, on the registered model, alike.
    let app = raw::Store::with_options(
        &db,
        shops_model(),
        subset_runtime::StoreOptions::new().mode(WriteMode::Ordered),
    );
    app.insert(doc! { "_id": ObjectId::new(), "reviews": [], "best": [], "total_reviews": 0_i64 })
        .await
        .unwrap();
    let out = subset(server.uri(), &db, &["follow", "--parent", "shops"]).await;
    let message = support::stderr(&out);
    assert_eq!(code(&out), 2, "{message}");
    assert!(message.contains("standalone"), "{message}");
}

/// The application's model of shops: the 5 latest reviews with their count, and the 2 best.
fn shops_model() -> ParentSpec {
    let date = |b: SpecBuilder| b.values("date", SortValues::DateTime);
    let latest = date(
        SpecBuilder::new("reviews", "reviews", "shop_id")
            .keep(5)
            .sort("date desc")
            .count("total_reviews"),
    );
    let best = date(
        SpecBuilder::new("best", "reviews", "shop_id")
            .keep(2)
            .sort("stars desc, date desc")
            .values("stars", SortValues::integer(1, 5)),
    );
    ParentSpec::leak(
        "shops",
        vec![*latest.build().unwrap(), *best.build().unwrap()],
    )
}

/// Registers [`shops_model`] as the application's first writes do, inserting `n` shops.
async fn registered_shops(db: &Database, n: usize) -> (raw::Store, Vec<ObjectId>) {
    let app = raw::Store::new(db, shops_model());
    let mut shops = Vec::new();
    for _ in 0..n {
        let id = ObjectId::new();
        app.insert(doc! { "_id": id, "reviews": [], "best": [], "total_reviews": 0_i64 })
            .await
            .unwrap();
        shops.push(id);
    }
    (app, shops)
}

/// Waits until every view of every shop is as the child collection says (up to 20 s).
async fn settled(app: &raw::Store) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let check = app
            .check_all(&SweepOptions::default(), |_| {})
            .await
            .unwrap();
        if check.progress.drifted == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still drifted: {:?}",
            check.drifts
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops `follower` with SIGINT and returns its summary, after a clean exit.
fn stop(mut follower: Follower) -> Value {
    let pid = follower.process.id().to_string();
    let signalled = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(signalled.success());
    follower.wait_for("stopped");
    let summary = follower.wait_for("summary");
    let status = follower.process.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{summary}");
    summary
}

/// Without view flags the follower keeps both views of the registered model true, as
/// `subset-cli:shops`, and `subset status` lists its place in `subset_followers`.
#[tokio::test(flavor = "multi_thread")]
async fn without_flags_the_follower_keeps_every_registered_view() {
    let (db, uri) = fresh().await;
    let (app, shops) = registered_shops(&db, 4).await;
    let follower = Follower::start(&uri, &db, &["--parent", "shops"]);
    follower.wait_for("started");
    let reviews: Vec<Document> = shops
        .iter()
        .flat_map(|shop| {
            (0..6).map(move |i| {
                doc! {
                    "_id": ObjectId::new(), "shop_id": shop, "stars": (i % 5) + 1,
                    "date": DateTime::from_millis(i64::from(i) * 1_000),
                }
            })
        })
        .collect();
    db.collection::<Document>("reviews")
        .insert_many(reviews)
        .await
        .unwrap();
    settled(&app).await;
    for shop in &shops {
        let stored = app.get(&Bson::ObjectId(*shop)).await.unwrap().unwrap();
        let stars: Vec<i32> = stored
            .get_array("best")
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().as_document().unwrap().get_i32("stars").unwrap())
            .collect();
        assert_eq!(stars, [5, 4], "{shop}");
        assert_eq!(
            stored.get_array("reviews").unwrap().into_iter().count(),
            5,
            "{shop}"
        );
        assert_eq!(stored.get_i64("total_reviews").unwrap(), 6, "{shop}");
    }
    let summary = stop(follower);
    assert_eq!(summary["registered"], true, "{summary}");
    assert_eq!(summary["name"], "subset-cli:shops", "{summary}");
    assert_eq!(summary["views"].as_array().unwrap().len(), 2, "{summary}");
    assert!(
        summary["totals"]["written"].as_u64().unwrap() > 0,
        "{summary}"
    );

    let out = subset(&uri, &db, &["status", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = json(&out);
    assert_eq!(
        status["followers"],
        serde_json::json!([{
            "follower": "subset-cli:shops", "collection": "reviews", "parent": "shops",
            "saved_at": status["followers"][0]["saved_at"], "saved_in": "subset_followers",
        }]),
        "{status}"
    );
    assert!(status["followers"][0]["saved_at"].is_string(), "{status}");
}

/// A follower saving its place in a collection of its own: `subset status` lists it only when
/// given that collection with `--token-collection`, and refuses a collection that does not
/// exist.
#[tokio::test(flavor = "multi_thread")]
async fn status_lists_the_followers_of_a_token_collection_it_is_given() {
    let (db, uri) = fresh().await;
    registered_shops(&db, 2).await;
    let follower = Follower::start(
        &uri,
        &db,
        &["--parent", "shops", "--token-collection", "shop_places"],
    );
    follower.wait_for("started");
    stop(follower);

    let out = subset(&uri, &db, &["status", "--json"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["followers"], serde_json::json!([]));

    let out = subset(
        &uri,
        &db,
        &["status", "--token-collection", "shop_places", "--json"],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = json(&out);
    let followers = status["followers"].as_array().unwrap();
    assert_eq!(followers.len(), 1, "{status}");
    assert_eq!(followers[0]["follower"], "subset-cli:shops");
    assert_eq!(followers[0]["collection"], "reviews");
    assert_eq!(followers[0]["saved_in"], "shop_places");
    // The default collection once, however often it is named.
    let out = subset(
        &uri,
        &db,
        &[
            "status",
            "--token-collection",
            "shop_places",
            "--token-collection",
            "subset_followers",
        ],
    )
    .await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("subset-cli:shops on reviews (parents shops): saved at "),
        "{text}"
    );
    assert!(text.contains(" in shop_places\n"), "{text}");
    assert_eq!(text.matches("subset-cli:shops").count(), 1, "{text}");

    let out = subset(&uri, &db, &["status", "--token-collection", "shop_place"]).await;
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--token-collection: collection `shop_place` does not exist"),
        "{}",
        stderr(&out)
    );
}
