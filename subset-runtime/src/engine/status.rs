//! What the library keeps in a database, read in one go ([`Status::read`]): the definitions of
//! each model and how many parents are built under each, the fold queues, the journals of jobs
//! by filter, and the followers' saved places. Reads only.

use futures::TryStreamExt;
use mongodb::Database;
use serde::Serialize;

use super::model_change::Registered;
use crate::bookkeeping::Names;
use crate::bson::{doc, Bson, DateTime, Document};
use crate::error::{Error, Result};

/// Everything the library keeps in a database besides the documents, as [`Status::read`] finds
/// it; serializable (the command line's `subset status --json`).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Status {
    /// Per registered parent collection, its definitions.
    pub models: Vec<ModelStatus>,
    /// Per parent collection, the pushes queued for a fold.
    pub folds: Vec<FoldQueue>,
    /// The journals of jobs by filter run without transactions (a job under way, or cut off).
    pub jobs: Vec<JobJournal>,
    /// The followers' saved places in the collection of the names'
    /// [`followers`](Names::followers); [`FollowerPlace::read_from`] reads those saved in another
    /// ([`crate::follow::FollowOptions::token_collection`]).
    pub followers: Vec<FollowerPlace>,
}

/// One parent collection in the registry.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ModelStatus {
    /// The parent collection.
    pub collection: String,
    /// Every definition registered, oldest first.
    pub definitions: Vec<DefinitionStatus>,
    /// Parents marked as built under no definition (a write of older code, a lost lease):
    /// read from the child collections until a write of the current model or a rebuild.
    pub built_under_none: u64,
    /// Parents marked as built under a definition the registry does not list.
    pub built_under_unknown: u64,
}

/// One definition of a model.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct DefinitionStatus {
    /// Its digest, as parents built under it hold it.
    pub digest: String,
    /// Whether writes converge to it.
    pub current: bool,
    /// Whether parents without a marker count as built under it.
    pub legacy: bool,
    /// Its views (`field` and child collection), when the registry keeps it whole; `None`
    /// when only its digest is kept (dropped by a rebuild, or registered by an older version).
    pub views: Option<Vec<ViewName>>,
    /// Parents built under it (for the legacy one, those without a marker included).
    pub parents: u64,
}

/// A view of a definition.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ViewName {
    /// The parent's array field.
    pub field: String,
    /// The child collection.
    pub child: String,
}

/// The fold queues of one parent collection.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FoldQueue {
    /// The parent collection.
    pub collection: String,
    /// Parents with pushes queued.
    pub parents: u64,
    /// Pushes queued.
    pub queued: u64,
    /// When the oldest queued push was queued (RFC 3339).
    pub oldest: Option<String>,
}

/// The journal of a job by filter.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct JobJournal {
    /// The parent collection.
    pub parents: String,
    /// The child collection.
    pub collection: String,
    /// `remove` or `patch`.
    pub change: String,
    /// The job's filter, as text.
    pub filter: String,
    /// Parents a run left half done.
    pub pending: u64,
}

/// Where a follower stopped, on one child collection.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FollowerPlace {
    /// The follower's name.
    pub follower: String,
    /// The child collection it follows.
    pub collection: String,
    /// The parent collection.
    pub parent: String,
    /// When it saved its place (RFC 3339).
    pub saved_at: Option<String>,
    /// The collection its place is saved in.
    pub saved_in: String,
}

impl FollowerPlace {
    /// The places saved in `collection`, a followers' collection of `db` (the one a follower
    /// is given with [`crate::follow::FollowOptions::token_collection`]), by follower and child
    /// collection. Writes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] naming `collection` when it cannot be read.
    #[tracing::instrument(skip_all, fields(db = %db.name(), collection = %collection))]
    pub async fn read_from(db: &Database, collection: &str) -> Result<Vec<FollowerPlace>> {
        followers(db, collection).await
    }
}

impl Status {
    /// Reads what the library keeps in `db`. Writes nothing. Counting the parents under each
    /// definition reads every parent's marker (one aggregation per registered collection).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`] naming the collection that could not be read; [`Error::Registry`] for a
    /// stored definition that does not read back.
    #[tracing::instrument(skip_all, fields(db = %db.name()))]
    pub async fn read(db: &Database, names: &Names) -> Result<Status> {
        let mut models = Vec::new();
        for registered in Registered::read_all(db, names).await? {
            models.push(model(db, names, registered).await?);
        }
        Ok(Status {
            models,
            folds: folds(db, names).await?,
            jobs: jobs(db, names).await?,
            followers: followers(db, names.followers()).await?,
        })
    }
}

async fn aggregate(
    db: &Database,
    collection: &str,
    pipeline: Vec<Document>,
) -> Result<Vec<Document>> {
    let error = |e| Error::mongo(collection, e);
    db.collection::<Document>(collection)
        .aggregate(pipeline)
        .await
        .map_err(error)?
        .try_collect()
        .await
        .map_err(error)
}

fn number(d: &Document, key: &str) -> u64 {
    match d.get(key) {
        Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

fn date(d: DateTime) -> Option<String> {
    d.try_to_rfc3339_string().ok()
}

async fn model(db: &Database, names: &Names, registered: Registered) -> Result<ModelStatus> {
    let marker = format!("${}.d", names.marker());
    // `_id` null: no marker; "": built under none.
    let groups = aggregate(
        db,
        &registered.collection,
        vec![doc! { "$group": { "_id": marker, "n": { "$sum": 1 } } }],
    )
    .await?;
    let count = |digest: Option<&str>| {
        groups
            .iter()
            .filter(|g| match (g.get("_id"), digest) {
                (Some(Bson::String(d)), Some(want)) => d == want,
                (None | Some(Bson::Null), None) => true,
                _ => false,
            })
            .map(|g| number(g, "n"))
            .sum::<u64>()
    };
    let definitions: Vec<DefinitionStatus> = registered
        .definitions
        .iter()
        .map(|d| {
            let legacy = d.digest == registered.legacy;
            let unmarked = if legacy { count(None) } else { 0 };
            DefinitionStatus {
                digest: d.digest.clone(),
                current: d.digest == registered.current,
                legacy,
                views: d.model.map(|m| {
                    m.subsets
                        .iter()
                        .map(|s| ViewName {
                            field: s.field.to_owned(),
                            child: s.child_collection.to_owned(),
                        })
                        .collect()
                }),
                parents: count(Some(&d.digest)) + unmarked,
            }
        })
        .collect();
    let listed: u64 = definitions.iter().map(|d| d.parents).sum();
    let built_under_none = count(Some(""));
    let legacy_known = definitions.iter().any(|d| d.legacy);
    let all: u64 = groups.iter().map(|g| number(g, "n")).sum();
    let unmarked_unlisted = if legacy_known { 0 } else { count(None) };
    Ok(ModelStatus {
        collection: registered.collection,
        definitions,
        built_under_none,
        built_under_unknown: all.saturating_sub(listed + built_under_none + unmarked_unlisted),
    })
}

async fn folds(db: &Database, names: &Names) -> Result<Vec<FoldQueue>> {
    let found = aggregate(
        db,
        names.folds(),
        vec![
            doc! { "$match": { "queue.0": { "$exists": true } } },
            doc! { "$project": {
                "c": "$_id.collection",
                "n": { "$size": "$queue" },
                "oldest": { "$min": "$queue.push" },
            } },
            doc! { "$group": {
                "_id": "$c",
                "parents": { "$sum": 1 },
                "queued": { "$sum": "$n" },
                "oldest": { "$min": "$oldest" },
            } },
            doc! { "$sort": { "_id": 1 } },
        ],
    )
    .await?;
    Ok(found
        .iter()
        .map(|f| FoldQueue {
            collection: f.get_str("_id").unwrap_or_default().to_owned(),
            parents: number(f, "parents"),
            queued: number(f, "queued"),
            oldest: f
                .get_object_id("oldest")
                .ok()
                .and_then(|o| date(o.timestamp())),
        })
        .collect())
}

async fn jobs(db: &Database, names: &Names) -> Result<Vec<JobJournal>> {
    let found = aggregate(
        db,
        names.jobs(),
        vec![doc! { "$project": {
            "parents": 1, "collection": 1, "change": 1, "filter": 1,
            "pending": { "$size": { "$ifNull": ["$pending", []] } },
        } }],
    )
    .await?;
    let text = |d: &Document, key: &str| d.get_str(key).unwrap_or_default().to_owned();
    Ok(found
        .iter()
        .map(|j| JobJournal {
            parents: text(j, "parents"),
            collection: text(j, "collection"),
            change: text(j, "change"),
            filter: text(j, "filter"),
            pending: number(j, "pending"),
        })
        .collect())
}

async fn followers(db: &Database, collection: &str) -> Result<Vec<FollowerPlace>> {
    let found = aggregate(
        db,
        collection,
        vec![doc! { "$sort": { "_id.follower": 1, "_id.collection": 1 } }],
    )
    .await?;
    Ok(found
        .iter()
        .map(|f| {
            let id = f.get_document("_id").ok();
            let part = |key: &str| {
                id.and_then(|i| i.get_str(key).ok())
                    .unwrap_or_default()
                    .to_owned()
            };
            FollowerPlace {
                follower: part("follower"),
                collection: part("collection"),
                parent: f.get_str("parent").unwrap_or_default().to_owned(),
                saved_at: f.get_datetime("saved_at").ok().copied().and_then(date),
                saved_in: collection.to_owned(),
            }
        })
        .collect())
}
