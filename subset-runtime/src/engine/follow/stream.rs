//! One child collection's change stream: the follower of one collection and its loop, which
//! opens the stream where the saved place says, reads batches of events, has them applied
//! (`apply.rs`) or catches up (`catch_up.rs`), and saves the place.

use std::time::{Duration, Instant};

use crate::bson::Document;
use mongodb::change_stream::event::{OperationType, ResumeToken};
use mongodb::change_stream::ChangeStream;
use mongodb::options::{FullDocumentBeforeChangeType, FullDocumentType};

use super::event::{self, Event};
use super::stats::{CatchUp, Counters, FollowBatch, FollowUpdate};
use super::token::Tokens;
use super::{FollowOptions, Observer};
use crate::engine::RawStore;
use crate::error::{driver, Error, Result};
use crate::model::SubsetSpec;

/// Whether a stop was requested, as every collection follower sees it.
#[derive(Debug, Clone)]
pub(super) struct Stop(pub(super) tokio::sync::watch::Receiver<bool>);

impl Stop {
    pub(super) fn requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once a stop is requested.
    pub(super) async fn wait(&self) {
        let mut rx = self.0.clone();
        // An error means the sender is gone, and nothing can ask for a stop any more.
        if rx.wait_for(|stop| *stop).await.is_err() {
            futures::future::pending::<()>().await;
        }
    }
}

/// What applying a batch came to.
pub(super) enum Applied {
    /// Boxed: a batch report is large, and the other variant carries nothing.
    Batch(Box<FollowBatch>),
    /// Some event's parents are unknown: only a full pass covers it.
    MissingImages,
}

/// How often an idle follower saves the place its stream has reached without events (the
/// server's post-batch resume token), so that a quiet collection's place does not fall off the
/// oplog.
const IDLE_SAVE: Duration = Duration::from_secs(10);

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
    pub(super) fn notify(&self, update: FollowUpdate<'_>) {
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

pub(super) type Stream = ChangeStream<Event>;

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
                Err(e) if driver::is_history_lost(&e) => {
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
                Err(e) if driver::is_history_lost(&e) => {
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

    pub(super) fn mongo(&self, e: mongodb::error::Error) -> Error {
        Error::mongo(self.name, e)
    }

    /// A change stream on the collection, after `token` or from now, with the images the
    /// mapping reads, trimmed to the key fields.
    pub(super) async fn open(&self, token: Option<ResumeToken>) -> mongodb::error::Result<Stream> {
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
    pub(super) async fn save(&self, token: Option<ResumeToken>) -> Result<()> {
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
}

/// The shortest and longest wait of one read for events.
const MIN_AWAIT: Duration = Duration::from_millis(10);
const MAX_AWAIT: Duration = Duration::from_secs(1);
