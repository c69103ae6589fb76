//! Group commit across processes, for a parent that several processes push to at once.
//!
//! Group commit within a process (`combine.rs`) cannot stop transactions from different
//! processes conflicting on one parent: the server aborts all but one, and the losers back off
//! and collide again, so pushes wait for hundreds of milliseconds. A parent whose push
//! transaction conflicted is *contended* in this process for [`CONTENDED_FOR`]; pushes to it
//! are then folded:
//!
//! 1. The push queues its children in [`PENDING_COLLECTION`] (`w: majority`, outside any
//!    transaction). They are in no page, count or sum yet.
//! 2. It runs the *fold*: one transaction that first writes the parent's turn document in
//!    [`TURNS_COLLECTION`], then takes every child queued for the parent (its own and other
//!    processes'), writes them as one push does, and deletes their queue entries. So an
//!    acknowledged push is in the child collection and the subset, counted once, exactly as a
//!    push in its own transaction is, and a fold cut off by a crash or a failover leaves the
//!    entries queued for the next.
//! 3. A second fold of the same parent conflicts on the turn document, at its first write. It
//!    then writes the turn document outside a transaction: the server holds that write until
//!    the fold in flight ends, so the waiting costs no retries and ends when it should. If that
//!    fold took its children, the push is done; if not, it runs the next fold.
//!
//! So a hot parent sees one transaction at a time, each carrying every push that queued while
//! the last one ran. A batch the fold cannot write (a duplicate child, a parent gone, a child a
//! view refuses) is marked for its own push to write alone, which then gets its own error.
//!
//! A push cut off after queueing (its process gone) is written by the next fold of its parent.
//! Entries marked to go alone whose push went away are dropped after a day.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::bson::oid::ObjectId;
use crate::bson::{doc, Bson, DateTime, Document};
use mongodb::options::{IndexOptions, ReadConcern, WriteConcern};
use mongodb::{Collection, IndexModel};
use tokio::sync::OnceCell;

use super::combine::{key_bytes, Key};
use super::exec::{self, backoff, Ctx, Retry, Steps};
use super::push::{Batch, PushSteps};
use super::{driver_error, RawSubset};
use crate::error::{Error, Result};

/// The queue of children waiting to be folded into their parent, one entry per push.
pub const PENDING_COLLECTION: &str = "subset_pending";

/// One document per folded parent, written first by each fold.
pub const TURNS_COLLECTION: &str = "subset_turns";

/// How long a parent stays contended after its last conflict.
const CONTENDED_FOR: Duration = Duration::from_secs(2);

/// The most queue entries one fold takes (the rest go in the next).
const MOST_ENTRIES: i64 = 256;

/// Pushes whose children take more than this (as BSON) run on their own instead: a queue entry
/// holds them in one document.
const LARGEST_ENTRY: i64 = 4 * 1024 * 1024;

/// How long an entry marked to go alone waits for its push before it is dropped.
const ALONE_EXPIRES: Duration = Duration::from_secs(24 * 60 * 60);

/// The contended parents of a store and whether its queue collections are ready (shared by
/// the clones of a store).
#[derive(Default)]
pub(crate) struct Folds {
    contended: Mutex<HashMap<Key, Instant>>,
    ready: OnceCell<()>,
}

impl Folds {
    /// Whether pushes to `key` are folded.
    pub(crate) fn contended(&self, key: &Key) -> bool {
        let mut contended = self
            .contended
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match contended.get(key) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                contended.remove(key);
                false
            }
            None => false,
        }
    }

    /// Folds pushes to `key` for the next [`CONTENDED_FOR`].
    pub(crate) fn contend(&self, key: Key) {
        let until = Instant::now() + CONTENDED_FOR;
        self.contended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, until);
    }
}

/// What a fold did for the push that ran it.
pub(super) enum Folded {
    /// Its children are written (by this fold or another).
    Done,
    /// Its batch is marked to be written alone.
    Alone,
    /// Its entry is still queued, behind [`MOST_ENTRIES`] others: the next fold takes it.
    Queued,
}

impl<'a> RawSubset<'a> {
    /// The key pushes to `parent` through this field are grouped and folded by.
    pub(super) fn group_key(&self, parent: &Bson) -> Key {
        // The first view: pushes through any view of these children go together.
        let group = self.view_specs().first().unwrap_or(self.spec()).field;
        (group, key_bytes(parent))
    }

    /// Writes `batch` through the fold of `parent` (see the module docs).
    pub(super) async fn push_folded(&self, parent: &Bson, batch: &Batch) -> Result<()> {
        let stored: Vec<&Document> = batch.iter().map(|p| &p.stored).collect();
        if super::bson_len(stored.iter().copied()) > LARGEST_ENTRY {
            return self.push_alone(parent, batch, None, false).await;
        }
        self.fold_ready().await?;
        let mine = ObjectId::new();
        let (group, _) = self.group_key(parent);
        let entry = doc! {
            "_id": mine,
            "c": self.store().collection_name(),
            "f": group,
            "p": parent.clone(),
            "children": stored.into_iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
            "t": DateTime::now(),
        };
        // Majority, whatever the store's concern: a fold's snapshot must show the entry, and
        // an entry that a failover rolls back is a push never acknowledged.
        self.pending()
            .insert_one(entry)
            .write_concern(WriteConcern::majority())
            .await
            .map_err(|e| Error::mongo(PENDING_COLLECTION, e))?;
        let steps = FoldSteps {
            subset: self,
            parent,
            group,
            mine,
            taken: Mutex::new(Vec::new()),
        };
        loop {
            let folded = match exec::execute(self.store(), None, &steps).await {
                Ok(folded) => folded,
                Err(e) => {
                    let taken = std::mem::take(
                        &mut *steps.taken.lock().unwrap_or_else(PoisonError::into_inner),
                    );
                    if taken.is_empty() {
                        // Nothing was taken: the error is the queue's or the server's.
                        return Err(e);
                    }
                    // The fold could not write these entries together: each goes alone, so
                    // that each push gets its own result.
                    tracing::debug!(error = %e, n = taken.len(), "fold failed, its pushes go alone");
                    self.mark_alone(&taken).await?;
                    match steps.look().await? {
                        Some(folded) => folded,
                        None => Folded::Queued,
                    }
                }
            };
            match folded {
                Folded::Done => return Ok(()),
                Folded::Queued => continue,
                Folded::Alone => {
                    let result = self.push_alone(parent, batch, None, false).await;
                    // Written or failed, the entry is done with: no fold takes an entry marked
                    // to go alone.
                    self.pending()
                        .delete_one(doc! { "_id": mine })
                        .await
                        .map_err(|e| Error::mongo(PENDING_COLLECTION, e))?;
                    return result;
                }
            }
        }
    }

    fn pending(&self) -> Collection<Document> {
        self.store().database().collection(PENDING_COLLECTION)
    }

    fn turns(&self) -> Collection<Document> {
        self.store().database().collection(TURNS_COLLECTION)
    }

    /// Creates the queue collections and the queue's index, once per store: a fold's
    /// transaction would otherwise create them, and conflict with every other fold doing so.
    async fn fold_ready(&self) -> Result<()> {
        let db = self.store().database();
        self.store()
            .folds
            .ready
            .get_or_try_init(|| async {
                for name in [PENDING_COLLECTION, TURNS_COLLECTION] {
                    match db.create_collection(name).await {
                        Err(e) if !driver_error::has_code(&e, NAMESPACE_EXISTS) => {
                            return Err(Error::mongo(name, e))
                        }
                        _ => {}
                    }
                }
                let queue = IndexModel::builder()
                    .keys(doc! { "c": 1, "f": 1, "p": 1, "_id": 1 })
                    .build();
                let expiry = IndexModel::builder()
                    .keys(doc! { "t": 1 })
                    .options(
                        IndexOptions::builder()
                            .expire_after(ALONE_EXPIRES)
                            .partial_filter_expression(doc! { "alone": true })
                            .build(),
                    )
                    .build();
                self.pending()
                    .create_indexes([queue, expiry])
                    .await
                    .map_err(|e| Error::mongo(PENDING_COLLECTION, e))?;
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Marks queue entries to be written alone by their pushes.
    async fn mark_alone(&self, entries: &[ObjectId]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.pending()
            .update_many(
                doc! { "_id": { "$in": entries } },
                doc! { "$set": { "alone": true } },
            )
            .await
            .map_err(|e| Error::mongo(PENDING_COLLECTION, e))?;
        Ok(())
    }
}

/// `NamespaceExists`: a collection created twice.
const NAMESPACE_EXISTS: i32 = 48;

/// One fold of a parent, run by the push whose entry is `mine`.
struct FoldSteps<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    group: &'static str,
    mine: ObjectId,
    /// The entries the last attempt took.
    taken: Mutex<Vec<ObjectId>>,
}

impl FoldSteps<'_, '_> {
    fn turn(&self) -> Document {
        doc! { "_id": {
            "c": self.subset.store().collection_name(),
            "f": self.group,
            "p": self.parent.clone(),
        } }
    }

    /// What became of this push's entry, read from the majority-committed state (a fold that
    /// a failover can still roll back has not written it); `None` while it is queued.
    async fn look(&self) -> Result<Option<Folded>> {
        let entry = self
            .subset
            .pending()
            .find_one(doc! { "_id": self.mine })
            .projection(doc! { "alone": 1 })
            .read_concern(ReadConcern::majority())
            .await
            .map_err(|e| Error::mongo(PENDING_COLLECTION, e))?;
        Ok(standing(entry.as_ref()))
    }
}

/// What became of a push, from its entry as read: `None` while it is queued.
fn standing(entry: Option<&Document>) -> Option<Folded> {
    match entry {
        None => Some(Folded::Done),
        Some(entry) if entry.get_bool("alone").unwrap_or(false) => Some(Folded::Alone),
        Some(_) => None,
    }
}

impl Steps for FoldSteps<'_, '_> {
    type Output = Folded;

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<Folded> {
        let s = self.subset;
        let pending_error = |e| Error::mongo(PENDING_COLLECTION, e);
        self.taken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // The turn first: a second fold of this parent conflicts here, before any other work.
        ctx.run(
            s.turns()
                .update_one(self.turn(), doc! { "$inc": { "n": 1 } })
                .upsert(true),
        )
        .await
        .map_err(|e| Error::mongo(TURNS_COLLECTION, e))?;
        let (collection, parent) = (s.store().collection_name(), self.parent.clone());
        let pending = s.pending();
        let queued = pending
            .find(doc! { "c": collection, "f": self.group, "p": parent, "alone": { "$exists": false } })
            .sort(doc! { "_id": 1 })
            .limit(MOST_ENTRIES);
        let entries = ctx.collect(queued).await.map_err(pending_error)?;
        let ids: Vec<ObjectId> = entries
            .iter()
            .filter_map(|e| e.get_object_id("_id").ok())
            .collect();
        *self.taken.lock().unwrap_or_else(PoisonError::into_inner) = ids.clone();
        if !ids.contains(&self.mine) {
            // Taken by a fold that committed after this push looked, or marked to go alone.
            let mine = pending
                .find_one(doc! { "_id": self.mine })
                .projection(doc! { "alone": 1 });
            let mine = ctx.run(mine).await.map_err(pending_error)?;
            if let Some(folded) = standing(mine.as_ref()) {
                return Ok(folded);
            }
        }
        if ids.is_empty() {
            return Ok(Folded::Queued);
        }
        let batch = self.batch_of(&entries)?;
        PushSteps::new(s, self.parent, &batch).run(ctx).await?;
        let taken = pending.delete_many(doc! { "_id": { "$in": &ids } });
        ctx.run(taken).await.map_err(pending_error)?;
        Ok(if ids.contains(&self.mine) {
            Folded::Done
        } else {
            Folded::Queued
        })
    }

    async fn before_retry(&self, attempt: u32, error: Error) -> Result<Retry<Folded>> {
        let s = self.subset;
        s.store().folds.contend(s.group_key(self.parent));
        // Outside a transaction, a write to a document that a transaction has written waits
        // for that transaction to end: this waits for the fold in flight, if any. Any error
        // (a failover) leaves the waiting to the backoff below.
        let waited = s
            .turns()
            .update_one(self.turn(), doc! { "$inc": { "w": 1 } })
            .upsert(true)
            .await;
        if waited.is_ok() {
            if let Ok(Some(folded)) = self.look().await {
                return Ok(Retry::Done(folded));
            }
        }
        tracing::debug!(attempt, %error, "fold conflicted, retrying");
        if attempt > 2 || waited.is_err() {
            backoff(attempt.saturating_sub(2)).await;
        }
        Ok(Retry::Again)
    }
}

impl FoldSteps<'_, '_> {
    /// The children of `entries`, prepared as this store writes them. An entry this store
    /// cannot write, or that pushes a child another entry pushes too, fails the fold (its
    /// entries then go alone).
    fn batch_of(&self, entries: &[Document]) -> Result<Batch> {
        let s = self.subset;
        let mut batch = Batch::new();
        for entry in entries {
            let malformed = || Error::MalformedChild {
                collection: PENDING_COLLECTION.to_owned(),
                id: Box::new(entry.get("_id").cloned().unwrap_or(Bson::Null)),
                field: "children".to_owned(),
                problem: "is not an array of documents".to_owned(),
            };
            for child in entry.get_array("children").map_err(|_| malformed())? {
                let Bson::Document(child) = child else {
                    return Err(malformed());
                };
                batch.push(s.prepare(self.parent, child.clone())?);
            }
        }
        Ok(batch)
    }
}
