//! Several views of one child collection and key, and filtered views: a board keeps the latest
//! posts, the best-scored, the latest verified ones (with their own count) and previews of the
//! latest visible ones. Every write goes to every view; each view is checked against a model
//! computed here from the child collection's contents, in both write modes.

use crate::common;

use std::sync::Arc;

use common::CommandLog;
use subset::bson::{doc, Bson, DateTime, Document};
use subset::{raw, spec::ParentSpec, spec::SpecBuilder, spec::SubsetSpec, WriteMode};

const PARENTS: &str = "view_boards";
const CHILDREN: &str = "view_posts";

/// The views, in declaration order, written out here too (`expected` below) rather than
/// derived from the descriptors.
fn views() -> Vec<SubsetSpec> {
    let view = |field: &str| SpecBuilder::new(field, CHILDREN, "board_id");
    vec![
        *view("latest")
            .keep(3)
            .sort("at desc")
            .count("total")
            .build()
            .unwrap(),
        *view("best")
            .keep(2)
            .sort("score desc, at desc")
            .sums("score_total = score")
            .unwrap()
            .build()
            .unwrap(),
        *view("verified")
            .keep(2)
            .sort("at desc")
            .filter("verified")
            .count("verified_total")
            .sums("verified_score = score")
            .unwrap()
            .build()
            .unwrap(),
        *view("visible")
            .keep(2)
            .sort("at desc")
            .filter("!hidden")
            .embed(["title"])
            .build()
            .unwrap(),
        // The order of `latest` with another `keep`: the two share one index.
        *view("newest").keep(2).sort("at desc").build().unwrap(),
    ]
}

#[derive(Debug, Clone)]
struct Post {
    id: i32,
    at: i64,
    score: i32,
    verified: bool,
    hidden: bool,
}

impl Post {
    fn new(id: i32) -> Post {
        Post {
            id,
            at: i64::from(id) * 10,
            score: (id * 7) % 11,
            verified: id % 2 == 0,
            hidden: id % 3 == 0,
        }
    }

    fn doc(&self) -> Document {
        doc! {
            "_id": self.id,
            "at": DateTime::from_millis(self.at),
            "score": self.score,
            "verified": self.verified,
            "hidden": self.hidden,
            "title": format!("post {}", self.id),
            "body": "a body ".repeat(10),
        }
    }
}

/// What each view must hold, from `posts`: (field, ids in order, keys of each element).
fn expected(posts: &[Post]) -> Vec<(&'static str, Vec<i32>, Vec<&'static str>)> {
    let whole = vec!["_id", "at", "score", "verified", "hidden", "title", "body"];
    let mut by_at = posts.to_vec();
    by_at.sort_by_key(|p| std::cmp::Reverse((p.at, p.id)));
    let mut by_score = posts.to_vec();
    by_score.sort_by_key(|p| std::cmp::Reverse((p.score, p.at, p.id)));
    let ids = |posts: Vec<&Post>, keep: usize| -> Vec<i32> {
        posts.into_iter().take(keep).map(|p| p.id).collect()
    };
    vec![
        ("latest", ids(by_at.iter().collect(), 3), whole.clone()),
        ("best", ids(by_score.iter().collect(), 2), whole.clone()),
        (
            "verified",
            ids(by_at.iter().filter(|p| p.verified).collect(), 2),
            whole.clone(),
        ),
        (
            "visible",
            ids(by_at.iter().filter(|p| !p.hidden).collect(), 2),
            vec!["_id", "at", "title"],
        ),
        ("newest", ids(by_at.iter().collect(), 2), whole.clone()),
    ]
}

async fn assert_views_true(store: &raw::Store, board: &Bson, posts: &[Post], when: &str) {
    let mode = store.mode().await.unwrap();
    let parent = store
        .database()
        .collection::<Document>(PARENTS)
        .find_one(doc! { "_id": board.clone() })
        .await
        .unwrap()
        .expect("the board exists");
    for (field, ids, keys) in expected(posts) {
        let array = parent.get_array(field).unwrap();
        let got: Vec<i32> = array
            .iter()
            .map(|e| e.as_document().unwrap().get_i32("_id").unwrap())
            .collect();
        assert_eq!(got, ids, "{mode:?} {when}: view `{field}`");
        for element in array {
            let mut got: Vec<&str> = element
                .as_document()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            got.sort_unstable();
            let mut want = keys.clone();
            want.sort_unstable();
            assert_eq!(got, want, "{mode:?} {when}: an element of `{field}`");
        }
    }
    let verified: Vec<&Post> = posts.iter().filter(|p| p.verified).collect();
    let numbers = [
        ("total", posts.len() as i64),
        (
            "score_total",
            posts.iter().map(|p| i64::from(p.score)).sum(),
        ),
        ("verified_total", verified.len() as i64),
        (
            "verified_score",
            verified.iter().map(|p| i64::from(p.score)).sum(),
        ),
    ];
    for (field, want) in numbers {
        let got = match parent.get(field) {
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            other => panic!("{mode:?} {when}: `{field}` is {other:?}"),
        };
        assert_eq!(got, want, "{mode:?} {when}: `{field}`");
    }
    for spec in store.spec().subsets {
        let drift = store.children(spec).check(board).await.unwrap();
        assert!(drift.is_clean(), "{mode:?} {when}: {drift:?}");
    }
}

/// A store over the board with every view, on a client that records each command.
async fn store(mode: WriteMode) -> (raw::Store, CommandLog) {
    let (db, log) = common::recorded_replica_db().await;
    let spec = ParentSpec::leak(PARENTS, views());
    let store = raw::Store::with_options(&db, spec, subset::StoreOptions::new().mode(mode));
    store.mode().await.unwrap();
    (store, log)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_write_keeps_every_view_true() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (store, log) = store(mode).await;
        store.ensure_indexes().await.unwrap();
        let board = Bson::Int32(1);
        // Inserted with posts in two views' fields: each post is stored once.
        let first: Vec<Post> = (1..=3).map(Post::new).collect();
        let mut parent = doc! { "_id": board.clone() };
        parent.insert("latest", first.iter().map(Post::doc).collect::<Vec<_>>());
        parent.insert("best", vec![first[0].doc()]);
        store.insert(parent).await.unwrap();
        let mut posts = first;
        assert_views_true(&store, &board, &posts, "after insert").await;

        // A push through any view is one update of the parent, whatever the views.
        let latest = store.children(&store.spec().subsets[0]);
        let verified = store.children(&store.spec().subsets[2]);
        log.lock().unwrap().clear();
        verified
            .push(&board, vec![Post::new(4).doc()])
            .await
            .unwrap();
        let updates = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(name, target, _)| name == "update" && target == PARENTS)
            .count();
        assert_eq!(updates, 1, "{mode:?}: one push, one parent update");
        posts.push(Post::new(4));
        assert_views_true(&store, &board, &posts, "after push").await;

        let many: Vec<Post> = (5..=12).map(Post::new).collect();
        latest
            .push(&board, many.iter().map(Post::doc).collect())
            .await
            .unwrap();
        posts.extend(many);
        assert_views_true(&store, &board, &posts, "after push_many").await;

        // Flags flip: the newest verified post stops being verified and leaves that view (the
        // next one backfills it); an unverified one becomes verified and enters it.
        for (id, change) in [(12, "unverify"), (11, "verify"), (10, "hide"), (9, "show")] {
            let post = posts.iter_mut().find(|p| p.id == id).unwrap();
            match change {
                "unverify" => post.verified = false,
                "verify" => post.verified = true,
                "hide" => post.hidden = true,
                _ => post.hidden = false,
            }
            let post = post.doc();
            latest.update(&board, post).await.unwrap();
            assert_views_true(&store, &board, &posts, change).await;
        }

        // A score change re-ranks the best view only.
        let post = posts.iter_mut().find(|p| p.id == 1).unwrap();
        post.score = 100;
        let post = post.doc();
        verified.update(&board, post).await.unwrap();
        assert_views_true(&store, &board, &posts, "after a score change").await;

        // Removing a post that several views hold backfills each of them.
        for id in [1, 11, 12] {
            latest.remove(&board, &Bson::Int32(id)).await.unwrap();
            posts.retain(|p| p.id != id);
            assert_views_true(&store, &board, &posts, &format!("after removing {id}")).await;
        }

        // A post no filtered view admits still counts in the others.
        let mut quiet = Post::new(13);
        quiet.verified = false;
        quiet.hidden = true;
        verified.push(&board, vec![quiet.doc()]).await.unwrap();
        posts.push(quiet);
        assert_views_true(&store, &board, &posts, "after an unadmitted push").await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_view_pages_its_own_children_in_its_own_order() {
    let (store, log) = store(WriteMode::Transactional).await;
    store.ensure_indexes().await.unwrap();
    let board = Bson::Int32(2);
    store.insert(doc! { "_id": board.clone() }).await.unwrap();
    let posts: Vec<Post> = (1..=20).map(Post::new).collect();
    let latest = store.children(&store.spec().subsets[0]);
    latest
        .push(&board, posts.iter().map(Post::doc).collect())
        .await
        .unwrap();
    for (i, (field, _, _)) in expected(&posts).into_iter().enumerate() {
        let view = store.children(&store.spec().subsets[i]);
        // The whole view, in its order: the model's with no cap.
        let mut want: Vec<&Post> = posts
            .iter()
            .filter(|p| match field {
                "verified" => p.verified,
                "visible" => !p.hidden,
                _ => true,
            })
            .collect();
        if field == "best" {
            want.sort_by_key(|p| std::cmp::Reverse((p.score, p.at, p.id)));
        } else {
            want.sort_by_key(|p| std::cmp::Reverse((p.at, p.id)));
        }
        let want: Vec<i32> = want.into_iter().map(|p| p.id).collect();
        let mut request = subset::PageRequest::first(2);
        let mut got = Vec::new();
        loop {
            let page = view.page(&board, &request).await.unwrap();
            for item in &page.items {
                got.push(item.get_i32("_id").unwrap());
                // A page holds whole children, in a preview view too.
                assert!(item.get_str("body").is_ok(), "{field}: {item:?}");
            }
            match page.next {
                Some(next) => request = subset::PageRequest::after(next, 3),
                None => break,
            }
        }
        assert_eq!(got, want, "view `{field}`");
        assert_eq!(
            view.count(&board).await.unwrap(),
            want.len() as u64,
            "{field}"
        );
    }
    // One index per distinct key pattern, 4 for 5 views: `latest` and `newest` share
    // `{board_id, at, _id}`; the filtered views each have their filter field in theirs.
    let indexes = store
        .database()
        .collection::<Document>(CHILDREN)
        .list_index_names()
        .await
        .unwrap();
    let ours: Vec<&String> = indexes
        .iter()
        .filter(|n| n.starts_with("subset_"))
        .collect();
    assert_eq!(ours.len(), 4, "{indexes:?}");
    for spec in store.spec().subsets {
        assert!(
            store.children(spec).has_index().await.unwrap(),
            "{}",
            spec.field
        );
    }

    // A later page of a filtered view is an index scan of its own index, in order: no sort
    // stage, and no document read that the page does not return.
    let verified = store.children(&store.spec().subsets[2]);
    let first = verified
        .page(&board, &subset::PageRequest::first(2))
        .await
        .unwrap();
    log.lock().unwrap().clear();
    let next = subset::PageRequest::after(first.next.unwrap(), 3);
    verified.page(&board, &next).await.unwrap();
    let find = log
        .lock()
        .unwrap()
        .iter()
        .find(|(name, target, _)| name == "find" && target == CHILDREN)
        .map(|(_, _, command)| command.clone())
        .expect("the page's find");
    let find: Document = find
        .into_iter()
        .filter(|(k, _)| {
            !k.starts_with('$') && !["lsid", "txnNumber", "readConcern"].contains(&k.as_str())
        })
        .collect();
    let explained = store
        .database()
        .run_command(doc! { "explain": find, "verbosity": "executionStats" })
        .await
        .unwrap();
    let plan = explained
        .get_document("queryPlanner")
        .unwrap()
        .get_document("winningPlan")
        .unwrap();
    let mut stages = Vec::new();
    plan_stages(plan, &mut stages);
    assert!(
        stages.iter().all(|s| s != "SORT"),
        "an in-memory sort: {stages:?}"
    );
    assert!(
        stages
            .iter()
            .any(|s| s == "IXSCAN subset_board_id_verified"),
        "not the view's index: {stages:?}"
    );
    let stats = explained.get_document("executionStats").unwrap();
    let number = |key: &str| match stats.get(key) {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        other => panic!("{key}: {other:?}"),
    };
    // Every document read is returned, but for the cursor's own child, which the bound on the
    // first sort key includes and the keyset's `$or` then drops: unverified posts are never read.
    assert!(
        number("totalDocsExamined") <= number("nReturned") + 1,
        "{stats}"
    );
}

/// Every stage of a query plan, an index scan with its index's name.
fn plan_stages(plan: &Document, stages: &mut Vec<String>) {
    if let Ok(stage) = plan.get_str("stage") {
        match plan.get_str("indexName") {
            Ok(index) => stages.push(format!("{stage} {index}")),
            Err(_) => stages.push(stage.to_owned()),
        }
    }
    for (_, value) in plan {
        match value {
            Bson::Document(child) => plan_stages(child, stages),
            Bson::Array(children) => {
                for child in children.iter().filter_map(Bson::as_document) {
                    plan_stages(child, stages);
                }
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_repairs_every_view_and_check_names_each() {
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (store, _) = store(mode).await;
        let board = Bson::Int32(3);
        store.insert(doc! { "_id": board.clone() }).await.unwrap();
        let posts: Vec<Post> = (1..=8).map(Post::new).collect();
        let latest = store.children(&store.spec().subsets[0]);
        latest
            .push(&board, posts.iter().map(Post::doc).collect())
            .await
            .unwrap();
        // Someone empties the views and zeroes the counts.
        store
            .database()
            .collection::<Document>(PARENTS)
            .update_one(
                doc! { "_id": board.clone() },
                doc! { "$set": { "latest": [], "verified": [], "visible": [], "verified_total": 0_i64, "verified_score": 0_i64 } },
            )
            .await
            .unwrap();
        for spec in store.spec().subsets {
            let drift = store.children(spec).check(&board).await.unwrap();
            assert_eq!(
                drift.is_clean(),
                matches!(spec.field, "best" | "newest"),
                "{mode:?} {}: {drift:?}",
                spec.field
            );
        }
        let report = store
            .reconcile_all(&subset::repair::SweepOptions::default(), |_| {})
            .await
            .unwrap();
        assert!(report.failures.is_empty(), "{report:?}");
        assert_views_true(&store, &board, &posts, "after reconcile_all").await;
    }
}

/// The posts of `board` as the child collection holds them: the truth the views must show.
async fn stored_posts(store: &raw::Store, board: &Bson) -> Vec<Post> {
    use futures::TryStreamExt;
    let docs: Vec<Document> = store
        .database()
        .collection::<Document>(CHILDREN)
        .find(doc! { "board_id": board.clone() })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    docs.iter()
        .map(|d| Post {
            id: d.get_i32("_id").unwrap(),
            at: d.get_datetime("at").unwrap().timestamp_millis(),
            score: d.get_i32("score").unwrap(),
            verified: d.get_bool("verified").unwrap(),
            hidden: d.get_bool("hidden").unwrap(),
        })
        .collect()
}

/// 8 writers push (through any view), remove, and update (flags and scores) on 3 boards for
/// 3 s; afterwards every view, count and sum is exact without a reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_writers_leave_every_view_exact() {
    use rand::Rng;
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    for mode in [WriteMode::Transactional, WriteMode::Ordered] {
        let (store, _) = store(mode).await;
        let boards: Vec<Bson> = (10..13).map(Bson::Int32).collect();
        for board in &boards {
            store.insert(doc! { "_id": board.clone() }).await.unwrap();
        }
        let next = Arc::new(AtomicI32::new(1));
        let (writes, lost) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let until = Instant::now() + Duration::from_secs(3);
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (store, boards, next) = (store.clone(), boards.clone(), next.clone());
            let (writes, lost) = (writes.clone(), lost.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    let (b, view, roll, pick, at) = {
                        let mut rng = rand::rng();
                        (
                            rng.random_range(0..boards.len()),
                            rng.random_range(0..store.spec().subsets.len()),
                            rng.random_range(0..100),
                            rng.random_range(1..next.load(Ordering::Relaxed).max(2)),
                            rng.random_range(0..30_i64),
                        )
                    };
                    let handle = store.children(&store.spec().subsets[view]);
                    let board = &boards[b];
                    let result = if roll < 50 {
                        let mut post = Post::new(next.fetch_add(1, Ordering::Relaxed));
                        post.at = at;
                        handle.push(board, vec![post.doc()]).await
                    } else if roll < 70 {
                        handle.remove(board, &Bson::Int32(pick)).await
                    } else {
                        // Another board's post, or one removed, is `ChildNotFound`.
                        let mut post = Post::new(pick);
                        post.at = at;
                        post.verified = roll % 2 == 0;
                        post.hidden = roll % 3 == 0;
                        handle.update(board, post.doc()).await
                    };
                    match result {
                        Ok(()) => writes.fetch_add(1, Ordering::Relaxed),
                        Err(subset::Error::ChildNotFound { .. }) => {
                            lost.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("{mode:?}: {e}"),
                    };
                }
            }));
        }
        for task in tasks {
            task.await.expect("a writer panicked");
        }
        eprintln!(
            "{mode:?}: {} writes, {} on a child not found",
            writes.load(Ordering::Relaxed),
            lost.load(Ordering::Relaxed)
        );
        assert!(writes.load(Ordering::Relaxed) > 50, "{mode:?}");
        for board in &boards {
            let posts = stored_posts(&store, board).await;
            assert_views_true(&store, board, &posts, "after 8 writers").await;
        }
    }
}
