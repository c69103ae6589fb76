//! Watch history: a viewer's profile embeds the 5 videos they watched most recently and a
//! "continue watching" row of the 3 latest they did not finish (a filtered view), with counts.
//! Watching a video again moves it to the front by patching its `watched_at`: the video is one
//! child, re-ranked, never a duplicate. Finishing it takes it off "continue watching". Each
//! page is printed before and after, and checked against the child collection.
//!
//! `cargo run --example watch_history --features testkit` starts its own `mongod` unless
//! `MONGODB_URI` names a server.

use std::cmp::Reverse;
use std::collections::HashSet;

use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use subset::bson::oid::ObjectId;
use subset::bson::{doc, DateTime};
use subset::testkit::{MongoServer, Topology};
use subset::{Child, Store, Subset};

/// One video in one viewer's history: a single child per viewer and video, updated on every
/// watch, so that the history never lists a video twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Child)]
struct Watched {
    #[serde(rename = "_id")]
    id: ObjectId,
    title: String,
    watched_at: DateTime,
    /// Where the viewer stopped, in seconds.
    position: i32,
    length: i32,
    finished: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Subset)]
#[subset(collection = "viewers")]
struct Viewer {
    #[serde(rename = "_id")]
    id: ObjectId,
    name: String,
    #[subset(
        child = "watched",
        keep = 5,
        sort = "watched_at desc",
        count = "videos_watched"
    )]
    recently_watched: Vec<Watched>,
    #[subset(
        child = "watched",
        keep = 3,
        sort = "watched_at desc",
        filter = "!finished",
        count = "unfinished"
    )]
    continue_watching: Vec<Watched>,
    #[serde(default)]
    videos_watched: i64,
    #[serde(default)]
    unfinished: i64,
}

const TITLES: [&str; 9] = [
    "Knife skills",
    "Sourdough from scratch",
    "Tempering chocolate",
    "Fermented hot sauce",
    "Fresh pasta",
    "Perfect omelette",
    "Pho broth",
    "Laminated dough",
    "Wok hei at home",
];

fn print_page(title: &str, v: &Viewer) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n{title}: {} videos watched", v.videos_watched);
    println!("  recently watched:");
    for w in &v.recently_watched {
        let line = format!(
            "    {}  {:<24} {}",
            w.watched_at.try_to_rfc3339_string()?,
            w.title,
            if w.finished { "finished" } else { "" }
        );
        println!("{}", line.trim_end());
    }
    println!("  continue watching ({} unfinished):", v.unfinished);
    for w in &v.continue_watching {
        println!("    {:<24} at {:>4} of {} s", w.title, w.position, w.length);
    }
    Ok(())
}

/// Asserts the viewer's page against the child collection, sorted here: the 5 latest, the 3
/// latest unfinished, both counts, every video once; and `check` finds no drift.
async fn assert_page(store: &Store<Viewer>, v: &Viewer) -> Result<(), Box<dyn std::error::Error>> {
    let mut all: Vec<Watched> = store
        .database()
        .collection::<Watched>("watched")
        .find(doc! { "viewer_id": v.id })
        .await?
        .try_collect()
        .await?;
    all.sort_by_key(|w| Reverse((w.watched_at, w.id)));
    let titles: HashSet<&str> = all.iter().map(|w| &*w.title).collect();
    assert_eq!(titles.len(), all.len(), "each video once in the history");
    let unfinished: Vec<Watched> = all.iter().filter(|w| !w.finished).cloned().collect();
    assert_eq!(v.recently_watched, all[..5], "the 5 latest");
    assert_eq!(
        v.continue_watching,
        unfinished[..3],
        "the 3 latest unfinished"
    );
    assert_eq!(v.videos_watched, all.len() as i64);
    assert_eq!(v.unfinished, unfinished.len() as i64);
    for field in [Viewer::RECENTLY_WATCHED, Viewer::CONTINUE_WATCHING] {
        let drift = store.children(field).check(&v.id).await?;
        assert!(
            drift.is_clean(),
            "the viewer agrees with the history: {drift:?}"
        );
    }
    Ok(())
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
        .database("subset_example_watch_history");
    db.drop().await?;
    let store = Store::<Viewer>::new(&db);
    store.ensure_indexes().await?;
    println!("server {} ({:?} writes)", server.uri(), store.mode().await?);

    let viewer = Viewer {
        id: ObjectId::new(),
        name: "sam".into(),
        recently_watched: Vec::new(),
        continue_watching: Vec::new(),
        videos_watched: 0,
        unfinished: 0,
    };
    store.insert(&viewer).await?;

    // Nine videos over the last nine days, one a day; every other one left unfinished.
    let now = DateTime::now().timestamp_millis();
    let history = store.children(Viewer::RECENTLY_WATCHED);
    let mut ids = Vec::new();
    for (i, title) in TITLES.iter().enumerate() {
        let finished = i % 2 == 0;
        let watched = Watched {
            id: ObjectId::new(),
            title: (*title).into(),
            watched_at: DateTime::from_millis(now - (9 - i as i64) * 86_400_000),
            position: if finished { 600 } else { 60 * (i as i32 + 1) },
            length: 600,
            finished,
        };
        history.push(&viewer.id, &watched).await?;
        ids.push(watched.id);
    }
    let before = store.get(&viewer.id).await?.ok_or("viewer vanished")?;
    print_page("before", &before)?;
    assert_page(&store, &before).await?;

    // The viewer goes back to "Sourdough from scratch", watched 8 days ago and out of both
    // rows: its `watched_at` (and where they stopped) is patched in place. It comes to the
    // front of both rows, evicting the oldest of each; the count stays 9.
    let again = ids[1];
    history
        .patch(&viewer.id, &again)
        .set(Watched::WATCHED_AT, DateTime::now())
        .set(Watched::POSITION, 420)
        .await?;
    let after = store.get(&viewer.id).await?.ok_or("viewer vanished")?;
    print_page("after watching \"Sourdough from scratch\" again", &after)?;
    assert_page(&store, &after).await?;
    assert_eq!(after.recently_watched[0].id, again, "at the front");
    assert_eq!(
        after.continue_watching[0].id, again,
        "and first to continue"
    );
    assert_eq!(after.videos_watched, before.videos_watched, "no duplicate");

    // They watch it to the end: off "continue watching", the next unfinished video moves up,
    // and it stays first in "recently watched".
    history
        .patch(&viewer.id, &again)
        .set(Watched::POSITION, 600)
        .set(Watched::FINISHED, true)
        .await?;
    let done = store.get(&viewer.id).await?.ok_or("viewer vanished")?;
    print_page("after finishing it", &done)?;
    assert_page(&store, &done).await?;
    assert_eq!(done.recently_watched[0].id, again);
    assert!(done.continue_watching.iter().all(|w| w.id != again));
    assert_eq!(done.unfinished, after.unfinished - 1);
    println!(
        "\nre-ranked in place: {} videos, each once; {} left to continue",
        done.videos_watched, done.unfinished
    );
    db.drop().await?;
    Ok(())
}
