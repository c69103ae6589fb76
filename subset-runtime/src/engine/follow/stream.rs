//! One child collection's change stream: read a batch of events, resync the parents they
//! concern, save the place; and when the changes cannot be read one by one, catch up with a
//! full pass before streaming again.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::bson::{doc, Bson, DateTime, Document};
use futures::future::Either;
use futures::StreamExt;
use mongodb::change_stream::event::{OperationType, ResumeToken};
use mongodb::change_stream::ChangeStream;
use mongodb::options::{FullDocumentBeforeChangeType, FullDocumentType};

use super::event::{self, Event, Meaning};
use super::stats::{CatchUp, Counters, FollowBatch, FollowUpdate};
use super::token::Tokens;
use super::{FollowOptions, Observer, Stop};
use crate::engine::driver_error::{self, NAMESPACE_EXISTS};
use crate::engine::{exec, RawStore};
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// How often an idle follower saves the place its stream has reached without events (the
/// server's post-batch resume token), so that a quiet collection's place does not fall off the
/// oplog.
const IDLE_SAVE: Duration = Duration::from_secs(10);

/// How many times a batch's failed resyncs are tried before the follower gives up (without
/// saving the batch's place, so that a restart redoes it).
const ATTEMPTS: u32 = 6;

/// What every collection follower of one follower shares.
pub(super) struct Shared<'a> {
    pub(super) store: &'a RawStore,
    pub(super) options: &'a FollowOptions,
    pub(super) tokens: Tokens,
    pub(super) counters: &'a Counters,
    pub(super) observer: Option<&'a Observer>,
    pub(super) stop: Stop,
}

impl Shared<'_> {
    fn notify(&self, update: FollowUpdate<'_>) {
        if let Some(observer) = self.observer {
            observer(&update);
        }
    }
}

/// The follower of one child collection, for every subset field stored in it.
pub(super) struct CollectionFollower<'a> {
    pub(super) shared: &'a Shared<'a>,
    pub(super) name: &'static str,
    pub(super) fields: Vec<SubsetSpec>,
}

/// A batch as read from the stream.
#[derive(Default)]
struct Read {
    events: Vec<Event>,
    /// The stream ended after these events (the collection was dropped or renamed).
    ended: bool,
}

/// What applying a batch came to.
enum Applied {
    Batch(FollowBatch),
    /// Some event's parents are unknown: only a full pass covers it.
    MissingImages,
}

/// What resyncing a batch's parents found.
#[derive(Default)]
struct Tally {
    written: u64,
    skipped: u64,
    orphaned: u64,
    failed: u64,
}

type Stream = ChangeStream<Event>;

impl CollectionFollower<'_> {
    /// Follows the collection until a stop is requested (`Ok`) or an error the follower cannot
    /// get past.
    #[tracing::instrument(skip_all, fields(follower = %self.shared.options.name, collection = self.name))]
    pub(super) async fn run(&self) -> Result<()> {
        let Some(mut stream) = self.start().await? else {
            return Ok(());
        };
        let mut saved = (stream.resume_token(), Instant::now());
        loop {
            if self.shared.stop.requested() {
                self.save_moved(stream.resume_token(), &mut saved).await?;
                tracing::info!("stopped; place saved");
                self.shared.notify(FollowUpdate::Stopped {
                    collection: self.name,
                });
                return Ok(());
            }
            let read = match self.read(&mut stream).await {
                Ok(read) => read,
                Err(e) if driver_error::is_history_lost(&e) => {
                    tracing::warn!(error = %e, "the change stream cannot resume: catching up with a full reconcile");
                    match self.catch_up(CatchUp::HistoryLost).await? {
                        Some(fresh) => stream = fresh,
                        None => return Ok(()),
                    }
                    saved = (stream.resume_token(), Instant::now());
                    continue;
                }
                Err(e) => return Err(self.mongo(e)),
            };
            if !read.events.is_empty() {
                let n = read.events.len() as u64;
                match self.apply(&read.events).await? {
                    Applied::Batch(mut batch) => {
                        self.save(stream.resume_token()).await?;
                        saved = (stream.resume_token(), Instant::now());
                        self.shared.counters.add(&batch);
                        batch.totals = self.shared.counters.snapshot();
                        tracing::debug!(
                            events = batch.events,
                            resynced = batch.resynced,
                            written = batch.written,
                            skipped = batch.skipped,
                            lag_ms = batch.lag.map(|l| l.as_millis() as u64),
                            "batch applied"
                        );
                        self.shared.notify(FollowUpdate::Batch(&batch));
                    }
                    Applied::MissingImages => {
                        self.shared.counters.add_events(n);
                        tracing::warn!(
                            "events without the pre- or post-image their parents need: catching up with a full reconcile"
                        );
                        match self.catch_up(CatchUp::MissingImages).await? {
                            Some(fresh) => stream = fresh,
                            None => return Ok(()),
                        }
                        saved = (stream.resume_token(), Instant::now());
                        continue;
                    }
                }
            }
            if read.ended || !stream.is_alive() {
                tracing::warn!(
                    "the collection was dropped or renamed: catching up with a full reconcile"
                );
                match self.catch_up(CatchUp::Dropped).await? {
                    Some(fresh) => stream = fresh,
                    None => return Ok(()),
                }
                saved = (stream.resume_token(), Instant::now());
            } else if read.events.is_empty() && saved.1.elapsed() >= IDLE_SAVE {
                self.save_moved(stream.resume_token(), &mut saved).await?;
            }
        }
    }

    /// Opens the stream where the saved place says, or from now; catches up first when the
    /// place cannot be resumed (or on a first start with `catch_up`). `None` when a stop came
    /// during the catch-up.
    async fn start(&self) -> Result<Option<Stream>> {
        let options = self.shared.options;
        match self.shared.tokens.load(self.name).await? {
            Some(token) => match self.open(Some(token)).await {
                Ok(stream) => {
                    tracing::info!("resumed from the saved place");
                    self.shared.notify(FollowUpdate::Started {
                        collection: self.name,
                        resumed: true,
                    });
                    Ok(Some(stream))
                }
                Err(e) if driver_error::is_history_lost(&e) => {
                    tracing::warn!(error = %e, "the saved place cannot be resumed (ChangeStreamHistoryLost or not found): catching up with a full reconcile");
                    self.catch_up(CatchUp::HistoryLost).await
                }
                Err(e) => Err(self.mongo(e)),
            },
            None if options.catch_up => self.catch_up(CatchUp::FirstStart).await,
            None => {
                let stream = self.open(None).await.map_err(|e| self.mongo(e))?;
                self.save(stream.resume_token()).await?;
                tracing::info!("started from now (no saved place)");
                self.shared.notify(FollowUpdate::Started {
                    collection: self.name,
                    resumed: false,
                });
                Ok(Some(stream))
            }
        }
    }

    fn mongo(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.name, e)
    }

    /// A change stream on the collection, after `token` or from now, with the images the
    /// mapping reads, trimmed to the key fields.
    async fn open(&self, token: Option<ResumeToken>) -> mongodb::error::Result<Stream> {
        let options = self.shared.options;
        self.shared
            .store
            .database()
            .collection::<Document>(self.name)
            .watch()
            .pipeline([event::trim(&self.fields)])
            .full_document(FullDocumentType::WhenAvailable)
            .full_document_before_change(FullDocumentBeforeChangeType::WhenAvailable)
            // Each wait for events lasts at most this long, which bounds both how far a batch
            // overruns its window and how long a stop waits.
            .max_await_time(options.window.clamp(MIN_AWAIT, MAX_AWAIT))
            .resume_after(token)
            .await
    }

    /// Saves the stream's place (`stream.resume_token()`: a `ChangeStream` is not `Sync`, so
    /// the token is taken before any await).
    async fn save(&self, token: Option<ResumeToken>) -> Result<()> {
        match token {
            Some(token) => self.shared.tokens.save(self.name, &token).await,
            None => Ok(()),
        }
    }

    /// Saves the stream's place `now` if it moved since `saved`.
    async fn save_moved(
        &self,
        now: Option<ResumeToken>,
        saved: &mut (Option<ResumeToken>, Instant),
    ) -> Result<()> {
        if now != saved.0 {
            self.save(now.clone()).await?;
        }
        *saved = (now, Instant::now());
        Ok(())
    }

    /// Reads the next batch: the first event (waiting up to one await period), then whatever
    /// follows within the window, up to `max_batch` events. Empty when nothing came.
    async fn read(&self, stream: &mut Stream) -> mongodb::error::Result<Read> {
        let options = self.shared.options;
        let mut read = Read::default();
        let Some(first) = stream.next_if_any().await? else {
            return Ok(read);
        };
        let deadline = Instant::now() + options.window;
        read.ended = first.operation_type == OperationType::Invalidate;
        read.events.push(first);
        while !read.ended
            && read.events.len() < options.max_batch
            && Instant::now() < deadline
            && !self.shared.stop.requested()
        {
            let Some(next) = stream.next_if_any().await? else {
                break;
            };
            read.ended = next.operation_type == OperationType::Invalidate;
            read.events.push(next);
        }
        Ok(read)
    }

    /// Resyncs every parent the events concern, each once.
    async fn apply(&self, events: &[Event]) -> Result<Applied> {
        let started = Instant::now();
        let mut parents = Vec::new();
        for e in events {
            if event::map(e, &self.fields, &mut parents) == Meaning::MissingImage {
                return Ok(Applied::MissingImages);
            }
        }
        // A burst on one parent costs one resync. Debug output names the BSON type and the
        // value, which is what tells two parent keys apart.
        let mut seen = HashSet::new();
        parents.retain(|(field, parent)| seen.insert((*field, format!("{parent:?}"))));
        let resynced = parents.len() as u64;
        let tally = self.resync(parents).await?;
        let now = DateTime::now().timestamp_millis();
        let oldest = events.iter().filter_map(wall_millis).min();
        let lag = oldest.map(|t| Duration::from_millis(u64::try_from(now - t).unwrap_or(0)));
        Ok(Applied::Batch(FollowBatch {
            collection: self.name,
            events: events.len() as u64,
            resynced,
            written: tally.written,
            skipped: tally.skipped,
            orphaned: tally.orphaned,
            failed: tally.failed,
            lag,
            took: started.elapsed(),
            totals: Default::default(),
        }))
    }

    /// Reconciles each (field, parent), `concurrency` at once. A parent that failed for a reason
    /// that may pass (the server, the network) or that kept changing under the resync is tried
    /// again; one that failed for a reason of its own is logged and passed over, as
    /// `reconcile_all` does.
    async fn resync(&self, parents: Vec<(usize, Bson)>) -> Result<Tally> {
        let store = self.shared.store;
        let mut tally = Tally::default();
        let mut pending = parents;
        for attempt in 1..=ATTEMPTS {
            let results: Vec<_> = futures::stream::iter(pending.drain(..))
                .map(|(field, parent)| {
                    // Each reconcile runs in a task of its own, so that a follower whose task is
                    // aborted never leaves a transaction half-done: the driver marks a
                    // transaction committed before it sends `commitTransaction`, so one cut off
                    // there would not be aborted, and would hold its parent until the server's
                    // transaction lifetime (60 s) ran out. The reconcile finishes; the place is
                    // not saved, so the next start redoes it.
                    let (store, spec, key) = (store.clone(), self.fields[field], parent.clone());
                    let task = tokio::spawn(async move {
                        store.subset(&spec).resync_in(&key, true, None).await
                    });
                    async move {
                        match task.await {
                            Ok(result) => (field, parent, Some(result)),
                            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                            // Cancelled: the runtime is shutting down, and this follower with it.
                            Err(_) => (field, parent, None),
                        }
                    }
                })
                .buffer_unordered(self.shared.options.concurrency)
                .collect()
                .await;
            let mut error = None;
            for (field, parent, result) in results {
                let Some(result) = result else {
                    pending.push((field, parent));
                    continue;
                };
                match result {
                    Ok(drift) if drift.is_clean() => tally.skipped += 1,
                    Ok(drift) if drift.fixed => tally.written += 1,
                    // Drift the conditional rewrite could not fix: the parent kept changing.
                    Ok(_) => pending.push((field, parent)),
                    // A key no parent has, or none can have (an array, say): no subset to keep.
                    Err(Error::ParentNotFound { .. } | Error::InvalidId { .. }) => {
                        tally.orphaned += 1
                    }
                    Err(
                        e @ (Error::MalformedParent { .. }
                        | Error::MalformedChild { .. }
                        | Error::SubsetTooLarge { .. }),
                    ) => {
                        tracing::warn!(parent = %parent, field = self.fields[field].field, error = %e, "parent passed over");
                        tally.failed += 1;
                    }
                    Err(e) => {
                        tracing::debug!(parent = %parent, attempt, error = %e, "resync failed; trying again");
                        pending.push((field, parent));
                        error = Some(e);
                    }
                }
            }
            if pending.is_empty() {
                break;
            }
            if attempt == ATTEMPTS {
                if let Some(e) = error {
                    return Err(e);
                }
                tracing::warn!(
                    parents = pending.len(),
                    "parents kept changing under every resync; passed over"
                );
                tally.failed += pending.len() as u64;
                break;
            }
            exec::backoff(attempt).await;
        }
        Ok(tally)
    }

    /// Catches up on every change the stream cannot deliver: opens a stream from now, then
    /// reconciles every parent of the collection's fields, then saves the new stream's place.
    /// Changes after the stream opened come through it; the ones before, the pass reads. `None`
    /// when a stop came during the pass: the old place stays saved, so the next start catches
    /// up again.
    async fn catch_up(&self, reason: CatchUp) -> Result<Option<Stream>> {
        let shared = self.shared;
        tracing::warn!(?reason, "catching up: reconciling every parent");
        shared.notify(FollowUpdate::CatchingUp {
            collection: self.name,
            reason,
        });
        // A dropped collection comes back without its pre-images.
        ensure_pre_images(shared.store, self.name, shared.options.enable_pre_images).await?;
        let stream = self.open(None).await.map_err(|e| self.mongo(e))?;
        let pass = shared
            .store
            .reconcile_fields(&self.fields, &shared.options.sweep, |_| {});
        let stop = shared.stop.wait();
        futures::pin_mut!(pass, stop);
        let mut report = match futures::future::select(pass, stop).await {
            Either::Left((report, _)) => report?,
            Either::Right(_) => {
                tracing::info!("stopped during the catch-up; it starts over on the next start");
                shared.notify(FollowUpdate::Stopped {
                    collection: self.name,
                });
                return Ok(None);
            }
        };
        // A parent the pass could not reach for a reason that may pass is not caught up: the
        // place must not move past it.
        if let Some(i) = report
            .failures
            .iter()
            .position(|f| f.error.mongo_error().is_some())
        {
            return Err(report.failures.swap_remove(i).error);
        }
        shared.counters.add_catch_up(&report);
        self.save(stream.resume_token()).await?;
        tracing::info!(
            parents = report.progress.checked,
            fixed = report.progress.fixed,
            "caught up"
        );
        shared.notify(FollowUpdate::CaughtUp {
            collection: self.name,
            report: &report,
        });
        Ok(Some(stream))
    }
}

/// The shortest and longest wait of one read for events.
const MIN_AWAIT: Duration = Duration::from_millis(10);
const MAX_AWAIT: Duration = Duration::from_secs(1);

/// When the event happened, by the server's wall clock (6.0+), else its cluster time (whole
/// seconds).
fn wall_millis(e: &Event) -> Option<i64> {
    e.wall_time
        .map(|t| t.timestamp_millis())
        .or_else(|| e.cluster_time.map(|t| i64::from(t.time) * 1000))
}

/// Makes sure the server records pre-images (and so post-images) of `collection`'s changes,
/// which tell the parent of a deleted or moved child; creates the collection with them when it
/// does not exist. With `enable` false, only checks.
///
/// # Errors
///
/// [`Error::FollowUnsupported`] when they are off and cannot (or may not) be turned on.
pub(super) async fn ensure_pre_images(
    store: &RawStore,
    collection: &str,
    enable: bool,
) -> Result<()> {
    let db = store.database();
    let mongo = |e| Error::mongo(collection, e);
    let unsupported =
        |reason: String, source: Option<mongodb::error::Error>| Error::FollowUnsupported {
            collection: collection.to_owned(),
            reason,
            source: source.map(Box::new),
        };
    let listed = db
        .run_command(doc! { "listCollections": 1, "filter": { "name": collection } })
        .await
        .map_err(mongo)?;
    let spec = listed
        .get_document("cursor")
        .ok()
        .and_then(|c| c.get_array("firstBatch").ok())
        .and_then(|b| b.first())
        .and_then(Bson::as_document);
    if let Some(spec) = spec {
        if spec.get_str("type").is_ok_and(|t| t != "collection") {
            return Err(unsupported(
                "it is a view, not a collection: change streams and pre-images need a collection"
                    .to_owned(),
                None,
            ));
        }
        let enabled = spec
            .get_document("options")
            .and_then(|o| o.get_document("changeStreamPreAndPostImages"))
            .and_then(|p| p.get_bool("enabled"))
            .unwrap_or(false);
        if enabled {
            return Ok(());
        }
    }
    if !enable {
        return Err(unsupported(
            format!("`changeStreamPreAndPostImages` is off on it, and the follower needs the pre-image of a deleted child to find its parent: run `db.runCommand({{collMod: \"{collection}\", changeStreamPreAndPostImages: {{enabled: true}}}})` (MongoDB 6.0 or later), or let the follower do it"),
            None,
        ));
    }
    let option = doc! { "enabled": true };
    let created = if spec.is_none() {
        let create = doc! { "create": collection, "changeStreamPreAndPostImages": option.clone() };
        match db.run_command(create).await {
            Ok(_) => true,
            // Created meanwhile, by a writer: turn them on below.
            Err(e) if driver_error::has_code(&e, NAMESPACE_EXISTS) => false,
            Err(e) => return Err(refused(collection, e)),
        }
    } else {
        false
    };
    if !created {
        let coll_mod = doc! { "collMod": collection, "changeStreamPreAndPostImages": option };
        db.run_command(coll_mod)
            .await
            .map_err(|e| refused(collection, e))?;
    }
    tracing::info!(collection, "enabled changeStreamPreAndPostImages");
    Ok(())
}

/// The error of a server that would not turn pre-images on.
fn refused(collection: &str, e: mongodb::error::Error) -> Error {
    Error::FollowUnsupported {
        collection: collection.to_owned(),
        reason: format!("cannot enable `changeStreamPreAndPostImages`, which the follower needs to find the parent of a deleted child (MongoDB 6.0 or later, and the `collMod` privilege): {e}"),
        source: Some(Box::new(e)),
    }
}
