//! A social feed: a user's profile embeds their 5 latest posts and their 5 most recently seen
//! active friends (a filtered view), each with a count; a friend who goes inactive leaves the
//! view and the next one moves up. Then a post goes viral: 8 writers, each on a client of its
//! own, push comments to its thread at once; the pushes' latencies are printed, and the thread
//! is checked exact against the comment collection (the count equals the pushes acknowledged,
//! the 10 latest are embedded).
//!
//! `cargo run --example social_feed --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use rand::Rng;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, DateTime};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Store, Subset};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Post {
    #[serde(rename = "_id")]
    id: ObjectId,
    text: String,
    posted_at: DateTime,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Friend {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    active: bool,
    last_seen: DateTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "users")]
struct User {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "posts",
        keep = 5,
        sort = "posted_at desc",
        count = "post_count"
    )]
    recent_posts: Vec<Post>,
    // Only friends whose `active` is true: the profile shows who is around, and counts them.
    #[subset(
        child = "friends",
        keep = 5,
        sort = "last_seen desc",
        filter = "active",
        count = "active_friends"
    )]
    friends_online: Vec<Friend>,
    #[serde(default)]
    post_count: i64,
    #[serde(default)]
    active_friends: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Comment {
    #[serde(rename = "_id")]
    id: ObjectId,
    author: String,
    at: DateTime,
}

/// A post's comment thread: its `_id` is the post's, and each comment names the post in
/// `post_id`.
#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "threads")]
struct Thread {
    #[serde(rename = "_id")]
    id: ObjectId,
    #[subset(
        child = "comments",
        key = "post_id",
        keep = 10,
        sort = "at desc",
        count = "comment_count"
    )]
    latest: Vec<Comment>,
    #[serde(default)]
    comment_count: i64,
}

/// Writers pushing comments to the viral post, each on a client of its own.
const WRITERS: usize = 8;
/// Comments each writer pushes.
const PUSHES: usize = 40;

/// The `q` quantile of sorted latencies.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// The active friends newest-seen first: the order of `friends_online`, written out here.
fn online(friends: &[Friend]) -> Vec<Friend> {
    let mut active: Vec<Friend> = friends.iter().filter(|f| f.active).cloned().collect();
    active.sort_by_key(|f| Reverse((f.last_seen, f.id)));
    active
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Returned from `main`, an error would print as its `Debug`, without the advice its `Display`
    // gives: print that, then each cause it does not already quote.
    let Err(error) = run().await else {
        return std::process::ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    let shown = error.to_string();
    std::iter::successors(error.source(), |e| e.source())
        .filter(|cause| !shown.contains(&cause.to_string()))
        .for_each(|cause| eprintln!("caused by: {cause}"));
    std::process::ExitCode::FAILURE
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let server = MongoServer::shared(Topology::ReplicaSet).await?;
    let db = server
        .client()
        .await?
        .database("subset_example_social_feed");
    db.drop().await?;
    let store = Store::<User>::new(&db);
    store.ensure_indexes().await?;
    println!("server {} ({:?} writes)", server.uri(), store.mode().await?);

    // A user with 12 posts, one an hour, and 20 friends of whom about half are active.
    let mut rng = rand::rng();
    let now = DateTime::now().timestamp_millis();
    let user = User {
        id: ObjectId::new(),
        name: "maya".into(),
        recent_posts: Vec::new(),
        friends_online: Vec::new(),
        post_count: 0,
        active_friends: 0,
    };
    store.insert(&user).await?;
    let posts: Vec<Post> = (0..12)
        .map(|i| Post {
            id: ObjectId::new(),
            text: format!("post {i}"),
            posted_at: DateTime::from_millis(now - (12 - i) * 3_600_000),
        })
        .collect();
    let mut friends: Vec<Friend> = (0..20)
        .map(|i| Friend {
            id: ObjectId::new(),
            name: format!("friend{i:02}"),
            active: rng.random_bool(0.5) || i == 0,
            last_seen: DateTime::from_millis(now - rng.random_range(0..86_400_000)),
        })
        .collect();
    let post_handle = store.children(User::RECENT_POSTS);
    let friend_handle = store.children(User::FRIENDS_ONLINE);
    post_handle.push_many(&user.id, &posts).await?;
    friend_handle.push_many(&user.id, &friends).await?;

    // The profile: one query.
    let profile = store.get(&user.id).await?.ok_or("user vanished")?;
    let latest: Vec<&str> = profile.recent_posts.iter().map(|p| &*p.text).collect();
    assert_eq!(latest, ["post 11", "post 10", "post 9", "post 8", "post 7"]);
    assert_eq!(profile.post_count, 12);
    let expected = online(&friends);
    assert_eq!(profile.friends_online, expected[..expected.len().min(5)]);
    assert_eq!(profile.active_friends, expected.len() as i64);
    let names = |u: &User| {
        u.friends_online
            .iter()
            .map(|f| f.name.clone())
            .collect::<Vec<_>>()
    };
    println!(
        "{}: {} posts, latest {:?}",
        profile.name, profile.post_count, latest
    );
    println!(
        "active friends: {} of {}, most recently seen {:?}",
        profile.active_friends,
        friends.len(),
        names(&profile)
    );

    // The most recently seen active friend logs off: a patch of the flag takes them out of the
    // view, the next active friend moves up and the count drops.
    let gone = profile.friends_online[0].id;
    friend_handle
        .patch(&user.id, &gone)
        .set(Friend::ACTIVE, false)
        .await?;
    for f in friends.iter_mut().filter(|f| f.id == gone) {
        f.active = false;
    }
    let profile = store.get(&user.id).await?.ok_or("user vanished")?;
    let expected = online(&friends);
    assert_eq!(profile.friends_online, expected[..expected.len().min(5)]);
    assert_eq!(profile.active_friends, expected.len() as i64);
    assert!(profile.friends_online.iter().all(|f| f.id != gone));
    println!(
        "one logged off: {} active, most recently seen {:?}",
        profile.active_friends,
        names(&profile)
    );
    for drift in [
        post_handle.check(&user.id).await?,
        friend_handle.check(&user.id).await?,
    ] {
        assert!(
            drift.is_clean(),
            "the profile agrees with its children: {drift:?}"
        );
    }

    // The latest post goes viral: its thread takes comments from 8 writers at once, each with a
    // client (its own connection pool) and a store of its own, as 8 app servers would.
    let post = posts.last().ok_or("no posts")?.id;
    let threads = Store::<Thread>::new(&db);
    threads
        .insert(&Thread {
            id: post,
            latest: Vec::new(),
            comment_count: 0,
        })
        .await?;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = server.client().await?;
        writers.push(tokio::spawn(async move {
            // Folding: the 8 processes' pushes to the one thread queue and are written one
            // transaction at a time, instead of conflicting (see the hot-parents guide).
            let store = Store::<Thread>::with_options(
                &client.database("subset_example_social_feed"),
                subset::StoreOptions::new().folding(true),
            );
            let comments = store.children(Thread::LATEST);
            let mut took = Vec::with_capacity(PUSHES);
            let mut acknowledged = Vec::with_capacity(PUSHES);
            for i in 0..PUSHES {
                let comment = Comment {
                    id: ObjectId::new(),
                    author: format!("writer{w}-{i}"),
                    at: DateTime::now(),
                };
                let start = Instant::now();
                comments.push(&post, &comment).await?;
                took.push(start.elapsed());
                acknowledged.push(comment.id);
            }
            Ok::<_, subset::Error>((took, acknowledged))
        }));
    }
    let start = Instant::now();
    let (mut took, mut acknowledged) = (Vec::new(), HashSet::new());
    for writer in writers {
        let (t, ids) = writer.await??;
        took.extend(t);
        acknowledged.extend(ids);
    }
    let elapsed = start.elapsed();
    took.sort_unstable();
    println!(
        "viral post: {} comments from {WRITERS} writers in {:.2} s, push latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        took.len(),
        elapsed.as_secs_f64(),
        ms(quantile(&took, 0.5)),
        ms(quantile(&took, 0.99)),
        ms(quantile(&took, 1.0)),
    );

    // Exact: every acknowledged comment is stored once, the count is theirs, and the thread
    // embeds the 10 latest of the comment collection, sorted here.
    let mut stored: Vec<Comment> = db
        .collection::<Comment>("comments")
        .find(doc! { "post_id": post })
        .await?
        .try_collect()
        .await?;
    let ids: HashSet<ObjectId> = stored.iter().map(|c| c.id).collect();
    assert_eq!(ids, acknowledged, "every acknowledged comment, stored once");
    assert_eq!(stored.len(), WRITERS * PUSHES);
    stored.sort_by_key(|c| Reverse((c.at, c.id)));
    let thread = threads.get(&post).await?.ok_or("thread vanished")?;
    assert_eq!(thread.comment_count, acknowledged.len() as i64);
    assert_eq!(thread.latest, stored[..10], "the 10 latest comments");
    let drift = threads.children(Thread::LATEST).check(&post).await?;
    assert!(
        drift.is_clean(),
        "the thread agrees with its comments: {drift:?}"
    );
    println!(
        "thread: {} comments counted, {} acknowledged, {} stored; the 10 latest embedded, no drift",
        thread.comment_count,
        acknowledged.len(),
        stored.len()
    );
    db.drop().await?;
    Ok(())
}
