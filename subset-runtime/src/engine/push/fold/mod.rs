//! Group commit across processes, for a parent that several processes push to at once.
//!
//! Group commit within a process (`exec::traffic`) cannot stop transactions from different
//! processes conflicting on one parent: the server aborts all but one, and the losers back off
//! and collide again, so pushes wait for hundreds of milliseconds. A parent whose push
//! transaction conflicted is *contended* in this process for [`CONTENDED_FOR`], and pushes to
//! it are *folded*, through one document per parent in the store's
//! [`Names::folds`](crate::bookkeeping::Names::folds) (`subset_folds`):
//!
//! 1. A push appends its children to the document's queue (outside any transaction). They are
//!    in no page, count or sum yet. The server holds that write while a fold of the parent is
//!    in flight, so it lands in the queue the next fold takes.
//! 2. The push that finds itself first in the queue runs the next fold: one transaction that
//!    takes the whole queue (emptying it and counting the fold in the same write), then writes
//!    every child taken as one push does. An acknowledged push is thus in the child collection
//!    and the subset, counted once, as a push in its own transaction is, and a fold cut off by a
//!    crash or a failover leaves the queue as it was.
//! 3. The other pushes wait to hear of the next fold from a change stream on the collection
//!    (one per store, see `watch.rs`): a fold counted after a push queued has taken it. A push
//!    that hears nothing for [`HEARD_WITHIN`] looks itself, with a write to the same document
//!    outside a transaction, which the server holds until the fold in flight ends; if no fold
//!    has taken it, it runs one. Two folds that meet conflict on the document's first write,
//!    and the loser waits the same way.
//!
//! So a hot parent sees one transaction at a time, each carrying every push that queued while
//! the last one ran, and a push costs one write of its own besides its share of a fold. A
//! fold that cannot write what it took (a duplicate child, a parent gone, a child a view
//! refuses) sets those pushes aside, and each writes its children alone, getting its own
//! result. Queue writes and looks use `w: majority`, and a change stream shows only
//! majority-committed changes: a push is not acknowledged on a fold that a failover can still
//! roll back. A set-aside is counted too, so that a push that hears of one looks.
//!
//! A push cut off after queueing (its process gone) is written by the next fold of its parent.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::bson::oid::ObjectId;
use crate::bson::{doc, Bson, Document};
use mongodb::options::{CollectionOptions, ReturnDocument, WriteConcern};
use mongodb::Collection;

use super::{Prepared, PushSteps, Pushes};
use crate::engine::exec::traffic::{Lapsing, ParentKey};
use crate::engine::exec::{self, backoff, is_transient, Ctx, Retry, Steps};

/// A key per (first view of the children, parent).
pub(crate) type Key = (&'static str, ParentKey);
use crate::engine::{RawChildren, RawStore};
use crate::error::{driver, Error, Result};
use crate::model::SubsetSpec;

mod watch;

// The fields of a parent's fold document (see the bookkeeping guide).
/// The pushes queued, in order: each `{ push, children }`.
const QUEUE: &str = "queue";
/// In a queued entry: the push's id.
const PUSH: &str = "push";
/// In a queued entry: the children it pushes, as stored.
const CHILDREN: &str = "children";
/// How many folds the parent has had.
const FOLDS: &str = "folds";
/// How many times pushes were set aside.
const ASIDES: &str = "asides";
/// The pushes set aside, each to write its children alone.
const ALONE: &str = "alone";
/// Bumped by every look (a write the server holds while a fold is in flight).
const LOOKS: &str = "looks";

/// The `_id` of the fold document of `parent` for the children of `spec` (and every view of
/// them) in `store`: the parent collection, the child collection and key, and the parent's
/// `_id`.
fn fold_id(store: &RawStore, spec: &SubsetSpec, parent: &Bson) -> Document {
    doc! {
        "collection": store.collection_name(),
        "children": spec.child_collection,
        "key": spec.key,
        "parent": parent.clone(),
    }
}

/// The `_id`s of the children queued in a fold document, in queue order.
fn queued_children(document: &Document) -> Vec<Bson> {
    entries(document)
        .into_iter()
        .flat_map(|(_, children)| children)
        .map(|child| match child {
            Bson::Document(child) => child.get("_id").cloned().unwrap_or(Bson::Null),
            other => other.clone(),
        })
        .collect()
}

impl RawStore {
    /// Deletes the fold documents of `parent`, one per child collection and key of the store,
    /// in the step's session: the parent is gone, and what they queue can never be written.
    pub(crate) async fn drop_folds(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<()> {
        let mut ids: Vec<Document> = Vec::new();
        for spec in self.spec().subsets {
            let id = fold_id(self, spec, parent);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if ids.is_empty() {
            return Ok(());
        }
        let name = self.bookkeeping().folds();
        let folds = self.database().collection::<Document>(name);
        ctx.run(folds.delete_many(doc! { "_id": { "$in": ids } }))
            .await
            .map_err(|e| Error::mongo(name, e))?;
        Ok(())
    }

    /// Deletes the fold documents of this collection's parents that are gone (deleted by
    /// another program, or before deletes cleaned them), and returns how many there were.
    pub(crate) async fn drop_orphan_folds(&self) -> Result<u64> {
        use futures::TryStreamExt;
        let name = self.bookkeeping().folds();
        let folds = self.database().collection::<Document>(name);
        let error = |e| Error::mongo(name, e);
        let found: Vec<Document> = folds
            .find(doc! { "_id.collection": self.collection_name() })
            .projection(doc! { "_id": 1 })
            .await
            .map_err(error)?
            .try_collect()
            .await
            .map_err(error)?;
        let mut dropped = 0;
        for chunk in found.chunks(1_000) {
            let parents: Vec<Bson> = chunk
                .iter()
                .filter_map(|d| d.get_document("_id").ok()?.get("parent").cloned())
                .collect();
            let present: Vec<Bson> = self
                .parents::<Document>()
                .find(doc! { "_id": { "$in": parents } })
                .projection(doc! { "_id": 1 })
                .await
                .map_err(|e| self.mongo(e))?
                .map_ok(|mut d| d.remove("_id").unwrap_or(Bson::Null))
                .try_collect()
                .await
                .map_err(|e| self.mongo(e))?;
            let gone: Vec<Bson> = chunk
                .iter()
                .filter_map(|d| d.get("_id"))
                .filter(|id| {
                    id.as_document()
                        .and_then(|id| id.get("parent"))
                        .is_some_and(|parent| !present.contains(parent))
                })
                .cloned()
                .collect();
            if gone.is_empty() {
                continue;
            }
            let deleted = folds
                .delete_many(doc! { "_id": { "$in": gone } })
                .await
                .map_err(error)?;
            dropped += deleted.deleted_count;
        }
        Ok(dropped)
    }
}

impl Pushes<'_> {
    /// The `_id`s of the children queued for `parent` in its fold document: pushes whose caller
    /// went away (or that wait for a fold right now). Read only.
    pub(crate) async fn queued(&self, parent: &Bson) -> Result<Vec<Bson>> {
        let name = self.store().bookkeeping().folds();
        let found = self
            .store()
            .collection::<Document>(name)
            .find_one(doc! { "_id": fold_id(self.store(), self.spec(), parent) })
            .projection(doc! { QUEUE: 1 })
            .await
            .map_err(|e| Error::mongo(name, e))?;
        Ok(found.as_ref().map(queued_children).unwrap_or_default())
    }

    /// Writes the pushes queued for `parent` with one fold (in a transaction, as a push's fold
    /// does), and returns the `_id`s of the children it found queued.
    ///
    /// # Errors
    ///
    /// The fold's error when it cannot write the queue (a child keyed to another parent, a
    /// child a view refuses): the queue is left as it was, so that a check still lists its
    /// children ([`crate::repair::Drift::queued`]). Its pushes' callers are gone, so none would
    /// write an entry set aside, as a push's own fold does: that would lose it silently.
    pub(crate) async fn fold_queued(&self, parent: &Bson) -> Result<Vec<Bson>> {
        let name = self.store().bookkeeping().folds();
        let found = self
            .store()
            .collection::<Document>(name)
            .find_one(doc! { "_id": fold_id(self.store(), self.spec(), parent) })
            .projection(doc! { QUEUE: 1, FOLDS: 1 })
            .await
            .map_err(|e| Error::mongo(name, e))?;
        let Some(found) = found else {
            return Ok(Vec::new());
        };
        let queued = queued_children(&found);
        if queued.is_empty() {
            return Ok(queued);
        }
        // A push of no one: it is never in the queue, so the fold writes every entry in it.
        let queue = Queue {
            subset: self,
            parent,
            mine: ObjectId::new(),
        };
        let since = Seen::of(Some(&found), queue.mine).folds;
        let steps = FoldSteps {
            queue: &queue,
            since,
            taken: Mutex::new(Vec::new()),
        };
        exec::execute(self.store(), None, &steps).await?;
        Ok(queued)
    }
}

/// The pushes queued in a fold document: each push's id and its children.
fn entries(document: &Document) -> Vec<(ObjectId, &Vec<Bson>)> {
    document
        .get_array(QUEUE)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|entry| {
            let entry = entry.as_document()?;
            Some((
                entry.get_object_id(PUSH).ok()?,
                entry.get_array(CHILDREN).ok()?,
            ))
        })
        .collect()
}

/// How long a parent stays contended after its last conflict.
const CONTENDED_FOR: Duration = Duration::from_secs(5);

/// How long a queued push waits to hear of a fold before it looks itself.
const HEARD_WITHIN: Duration = Duration::from_millis(50);

/// Pushes whose children take more than this (as BSON) are written alone: the queue of a
/// parent is one document.
pub(super) const LARGEST_ENTRY: i64 = 256 * 1024;

/// How many set-aside pushes a parent's document remembers (those whose push went away are
/// never forgotten otherwise).
const ALONE_KEPT: i32 = 1_000;

/// The contended parents of a store, and the folds heard of (shared by the clones of a store).
#[derive(Default)]
pub(crate) struct Folds {
    /// Whether the store folds at all ([`crate::StoreOptions::folding`]).
    enabled: bool,
    contended: Lapsing<Key>,
    /// The parents reported as contended once, and how many conflicts were seen.
    reported: Mutex<std::collections::HashSet<Key>>,
    conflicts: std::sync::atomic::AtomicU64,
    heard: Arc<watch::Heard>,
}

/// How often pushes of a store met other processes' transactions on a parent (see
/// [`crate::raw::Store::contention`]): what folding would save, when it is off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Contention {
    /// Conflicts of a group-committed push's transaction with another one on its parent, each
    /// followed by a retry (or, when folding is on, by a fold).
    pub conflicts: u64,
    /// Parents that had at least one.
    pub parents: u64,
}

impl Folds {
    /// A store's folds: none unless `enabled`.
    pub(crate) fn new(enabled: bool) -> Self {
        Folds {
            enabled,
            ..Folds::default()
        }
    }

    /// What [`Folds::contend`] has counted.
    pub(crate) fn contention(&self) -> Contention {
        let parents = self
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        Contention {
            conflicts: self.conflicts.load(std::sync::atomic::Ordering::Relaxed),
            parents: parents as u64,
        }
    }

    /// Whether pushes to `key` are folded: the store folds and the parent is contended.
    pub(crate) fn folding(&self, key: &Key) -> bool {
        self.enabled && self.contended(key)
    }

    /// Whether pushes to `key` met another process's recently.
    fn contended(&self, key: &Key) -> bool {
        self.contended.any([key])
    }

    /// Records a conflict on `key` (a parent of `collection`): counted, warned about once per
    /// parent when the store does not fold, and, when it does, pushes to it are folded for the
    /// next [`CONTENDED_FOR`].
    pub(crate) fn contend(&self, key: Key, collection: &str) {
        self.conflicts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first = self
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone());
        if first && !self.enabled {
            tracing::warn!(
                collection,
                "pushes to a parent conflicted with another transaction on it (another process's, or another store's over the same collection): they retry; `StoreOptions::folding(true)` folds such pushes instead (see the hot-parents guide)"
            );
        }
        if !self.enabled {
            return;
        }
        self.contended.mark([key], CONTENDED_FOR);
    }
}

/// What became of a folded push.
pub(super) enum Folded {
    /// Its children are written (by a fold it ran or another).
    Done,
    /// It was set aside: it writes its children alone.
    Alone,
}

impl Pushes<'_> {
    /// The key pushes to `parent` through this field are grouped and folded by.
    pub(super) fn group_key(&self, parent: &Bson) -> Key {
        // The first view: pushes through any view of these children go together.
        let group = self.view_specs().first().unwrap_or(self.spec()).field;
        (group, ParentKey::of(parent))
    }

    /// Writes `batch` through the folds of `parent` (see the module docs).
    pub(super) async fn push_folded(&self, parent: &Bson, batch: &[Prepared]) -> Result<()> {
        let children: Vec<Bson> = batch
            .iter()
            .map(|p| Bson::Document(p.stored.clone()))
            .collect();
        let queue = Queue {
            subset: self,
            parent,
            mine: ObjectId::new(),
        };
        let store = self.store();
        let heard = store.shared.folds.heard.listen(
            store.database(),
            store.bookkeeping().folds(),
            store.collection_name(),
            &queue.id(),
        );
        let queued = match queue.enqueue(children).await {
            Ok(queued) => queued,
            // The queue is full.
            Err(e) if driver::is_too_large(&e) => {
                return self
                    .pushes()
                    .push_alone(parent, batch, None, super::Strategy::Direct)
                    .await
            }
            // A write-concern error or a lost connection: it may be queued, and written by the
            // next fold.
            Err(e) => return Err(Error::mongo(queue.name(), e).into_unknown()),
        };
        match queue.wait(queued, heard).await.map_err(still_queued)? {
            Folded::Done => Ok(()),
            Folded::Alone => {
                let result = self
                    .pushes()
                    .push_alone(parent, batch, None, super::Strategy::Direct)
                    .await;
                queue.forget().await?;
                result
            }
        }
    }
}

/// An error of a push after it queued: the next fold of its parent may still write it.
fn still_queued(error: Error) -> Error {
    match error {
        Error::Mongo { collection, source }
        | Error::TransactionTimeout {
            collection, source, ..
        } => Error::OutcomeUnknown { collection, source },
        other => other,
    }
}

/// A parent's document as a push reads it.
struct Seen {
    /// Folds so far.
    folds: i64,
    /// Set-asides so far.
    asides: i64,
    /// Whether the push is first in the queue.
    first: bool,
    /// Whether the push is set aside.
    alone: bool,
}

impl Seen {
    fn of(document: Option<&Document>, mine: ObjectId) -> Seen {
        let Some(document) = document else {
            // Deleted by someone: whatever it held, writing alone is safe (a child already
            // stored is found, not stored again).
            return Seen {
                folds: 0,
                asides: 0,
                first: false,
                alone: true,
            };
        };
        let count = |name| match document.get(name) {
            Some(Bson::Int32(n)) => i64::from(*n),
            Some(Bson::Int64(n)) => *n,
            _ => 0,
        };
        let first = document
            .get_array(QUEUE)
            .ok()
            .and_then(|q| q.first())
            .and_then(Bson::as_document)
            .and_then(|entry| entry.get_object_id(PUSH).ok())
            == Some(mine);
        let alone = document
            .get_array(ALONE)
            .is_ok_and(|alone| alone.contains(&Bson::ObjectId(mine)));
        Seen {
            folds: count(FOLDS),
            asides: count(ASIDES),
            first,
            alone,
        }
    }

    /// What became of the push, seen after it queued when there had been `since` folds:
    /// `None` while it is queued.
    fn outcome(&self, since: i64) -> Option<Folded> {
        if self.alone {
            Some(Folded::Alone)
        } else if self.folds > since {
            Some(Folded::Done)
        } else {
            None
        }
    }
}

/// The queue of one parent, as one push (`mine`) uses it.
struct Queue<'s, 'a> {
    subset: &'s RawChildren<'a>,
    parent: &'s Bson,
    mine: ObjectId,
}

impl Queue<'_, '_> {
    /// The `_id` of the parent's document.
    fn id(&self) -> Document {
        fold_id(self.subset.store(), self.subset.spec(), self.parent)
    }

    /// The collection of fold documents.
    fn name(&self) -> &str {
        self.subset.store().bookkeeping().folds()
    }

    fn filter(&self) -> Document {
        doc! { "_id": self.id() }
    }

    /// The collection for writes outside a transaction: `w: majority`, whatever the store's
    /// concern (see the module docs).
    fn outside(&self) -> Collection<Document> {
        let options = CollectionOptions::builder()
            .write_concern(WriteConcern::majority())
            .build();
        self.subset
            .store()
            .database()
            .collection_with_options(self.name(), options)
    }

    /// Appends this push's children to the queue. With `w: majority`, although a fold's
    /// majority would cover this write: after a failover, a push that saw an entry of its own
    /// rolled back must not take a fold on the new primary for the fold of its children.
    async fn enqueue(&self, children: Vec<Bson>) -> mongodb::error::Result<Seen> {
        let update = doc! {
            "$push": { QUEUE: { PUSH: self.mine, CHILDREN: children } },
            "$setOnInsert": { FOLDS: 0_i64 },
        };
        let seen = self
            .outside()
            .find_one_and_update(self.filter(), update)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(doc! { FOLDS: 1, ASIDES: 1, format!("{QUEUE}.{PUSH}"): 1 })
            .await?;
        Ok(Seen::of(seen.as_ref(), self.mine))
    }

    /// Reads the parent's document with a write that the server holds until the fold in
    /// flight, if any, ends.
    async fn look(&self) -> Result<Seen> {
        let seen = self
            .outside()
            .find_one_and_update(self.filter(), doc! { "$inc": { LOOKS: 1 } })
            .return_document(ReturnDocument::After)
            .projection(doc! { FOLDS: 1, ALONE: { "$elemMatch": { "$eq": self.mine } } })
            .await
            .map_err(|e| Error::mongo(self.name(), e))?;
        Ok(Seen::of(seen.as_ref(), self.mine))
    }

    /// Waits until a fold has written this push, running folds when nobody else does.
    async fn wait(
        &self,
        queued: Seen,
        mut heard: tokio::sync::watch::Receiver<watch::Counts>,
    ) -> Result<Folded> {
        let since = queued.folds;
        if !queued.first {
            // The push first in the queue runs the next fold: hear of it, or look.
            let news = |(folds, asides): &watch::Counts| *folds > since || *asides > queued.asides;
            let heard = tokio::time::timeout(HEARD_WITHIN, heard.wait_for(news))
                .await
                .ok()
                .and_then(|counts| counts.ok().map(|counts| *counts));
            // A fold and no set-aside since it queued: taken.
            if heard.is_some_and(|(_, asides)| asides <= queued.asides) {
                return Ok(Folded::Done);
            }
            if let Some(folded) = self.look().await?.outcome(since) {
                return Ok(folded);
            }
        }
        self.fold(since).await
    }

    /// Runs folds until one has taken this push (or the queue, for a push of no one), when
    /// there had been `since` folds: the entries a fold cannot write together are set aside.
    async fn fold(&self, since: i64) -> Result<Folded> {
        let store = self.subset.store();
        loop {
            let steps = FoldSteps {
                queue: self,
                since,
                taken: Mutex::new(Vec::new()),
            };
            let error = match exec::execute(store, None, &steps).await {
                Ok(folded) => return Ok(folded),
                Err(e) => e,
            };
            let taken =
                std::mem::take(&mut *steps.taken.lock().unwrap_or_else(PoisonError::into_inner));
            if taken.is_empty() || is_transient(&error) {
                // Nothing was taken: the error is the server's.
                return Err(error);
            }
            // The fold could not write what it took together: each of those pushes writes its
            // own children, and gets its own result.
            tracing::debug!(%error, n = taken.len(), "fold failed, its pushes go alone");
            self.set_aside(&taken).await?;
            if let Some(folded) = self.look().await?.outcome(since) {
                return Ok(folded);
            }
        }
    }

    /// Moves queued pushes out of the queue, to be written alone by their pushes.
    async fn set_aside(&self, pushes: &[ObjectId]) -> Result<()> {
        let update = doc! {
            "$pull": { QUEUE: { PUSH: { "$in": pushes } } },
            "$push": { ALONE: { "$each": pushes, "$slice": -ALONE_KEPT } },
            "$inc": { ASIDES: 1_i64 },
        };
        self.outside()
            .update_one(self.filter(), update)
            .await
            .map_err(|e| Error::mongo(self.name(), e))?;
        Ok(())
    }

    /// Forgets this push once it was written alone.
    async fn forget(&self) -> Result<()> {
        self.outside()
            .update_one(self.filter(), doc! { "$pull": { ALONE: self.mine } })
            .await
            .map_err(|e| Error::mongo(self.name(), e))?;
        Ok(())
    }
}

/// One fold of a parent, run by a push that queued when there had been `since` folds.
struct FoldSteps<'q, 's, 'a> {
    queue: &'q Queue<'s, 'a>,
    since: i64,
    /// The pushes the last attempt took.
    taken: Mutex<Vec<ObjectId>>,
}

impl Steps for FoldSteps<'_, '_, '_> {
    type Output = Folded;

    fn parents(&self) -> Vec<&Bson> {
        vec![self.queue.parent]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<Folded> {
        let q = self.queue;
        let s = q.subset;
        // Takes the queue and counts the fold in the first write: a second fold of this
        // parent conflicts here, before any other work.
        let folds = s.store().database().collection::<Document>(q.name());
        let take = folds
            .find_one_and_update(
                q.filter(),
                doc! { "$set": { QUEUE: [] }, "$inc": { FOLDS: 1_i64 } },
            )
            .return_document(ReturnDocument::Before);
        let before = ctx.run(take).await.map_err(|e| Error::mongo(q.name(), e))?;
        let Some(before) = before else {
            return Ok(Folded::Alone);
        };
        let outcome = if Seen::of(Some(&before), q.mine).alone {
            Folded::Alone
        } else {
            // Taken now, or by a fold since it queued.
            Folded::Done
        };
        let entries = entries(&before);
        // What this library did not write is dropped from the queue: nobody waits for it.
        *self.taken.lock().unwrap_or_else(PoisonError::into_inner) =
            entries.iter().map(|(id, _)| *id).collect();
        if entries.is_empty() {
            return Ok(outcome);
        }
        // Every push taken is written, whoever's it is: the write above took it off the queue.
        let mut batch = Vec::new();
        for (id, children) in entries {
            for child in children {
                let Bson::Document(child) = child else {
                    return Err(Error::MalformedChild {
                        collection: q.name().to_owned(),
                        id: Box::new(Bson::ObjectId(id)),
                        parent: Some(Box::new(q.parent.clone())),
                        field: format!("{QUEUE}.{CHILDREN}"),
                        problem: "is not an array of documents".to_owned(),
                    });
                };
                batch.push(s.pushes().prepare(q.parent, child.clone())?);
            }
        }
        PushSteps::new(s, q.parent, &batch).run(ctx).await?;
        Ok(outcome)
    }

    async fn before_retry(&self, attempt: u32, error: Error) -> Result<Retry<Folded>> {
        let q = self.queue;
        let store = q.subset.store();
        store.shared.folds.contend(
            q.subset.pushes().group_key(q.parent),
            store.collection_name(),
        );
        // Waits for the fold in flight, if any; a failover's error leaves the waiting to the
        // backoff below.
        match q.look().await {
            Ok(seen) => {
                if let Some(folded) = seen.outcome(self.since) {
                    return Ok(Retry::Done(folded));
                }
                if attempt > 2 {
                    backoff(attempt - 2).await;
                }
            }
            Err(_) => backoff(attempt).await,
        }
        tracing::debug!(attempt, %error, "fold conflicted, retrying");
        Ok(Retry::Again)
    }
}
