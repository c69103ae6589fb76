//! The folds and set-asides of a store's parents as a change stream on the fold documents
//! ([`Names::folds`](crate::bookkeeping::Names::folds)) reports them, so that a queued push learns of the fold that took it without a write of its
//! own.
//!
//! A change stream returns majority-committed changes only: a fold seen here survives a
//! failover. The stream is a shortcut, never the only way: a push that hears nothing within
//! [`super::HEARD_WITHIN`] looks at the parent's document itself. It runs while pushes are
//! folded and stops after [`IDLE_FOR`] without any.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::bson::{doc, Bson, Document};
use mongodb::Database;
use tokio::sync::watch;

use super::{ASIDES, FOLDS};
use crate::engine::exec::traffic::ParentKey;

/// How long the stream runs without a folded push before it stops.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// The longest wait for changes in one round trip of the stream.
const AWAIT: Duration = Duration::from_millis(500);

/// How long the stream waits after an error before it opens again.
const REOPEN_AFTER: Duration = Duration::from_millis(200);

/// What the stream has seen of one parent document: its counts of folds and of set-asides.
pub(crate) type Counts = (i64, i64);

/// The counts the stream has seen, per parent document, and whether it runs.
#[derive(Default)]
pub(crate) struct Heard {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per parent document (its `_id`'s bytes): the latest counts seen.
    counts: HashMap<ParentKey, watch::Sender<Counts>>,
    running: bool,
    last_used: Option<Instant>,
}

impl Heard {
    /// The counts of the document `id` as they are heard, starting the stream over
    /// `collection`'s documents in `folds` if it does not run. Taken before the push queues,
    /// so that no fold after that is missed.
    pub(crate) fn listen(
        self: &Arc<Self>,
        db: &Database,
        folds: &str,
        collection: &'static str,
        id: &Document,
    ) -> watch::Receiver<Counts> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.last_used = Some(Instant::now());
        // Parents nobody listens to any more are forgotten.
        state.counts.retain(|_, sender| sender.receiver_count() > 0);
        let key = ParentKey::of(&Bson::Document(id.clone()));
        let receiver = state
            .counts
            .entry(key)
            .or_insert_with(|| watch::channel((i64::MIN, i64::MIN)).0)
            .subscribe();
        if !state.running {
            state.running = true;
            tokio::spawn(run(
                db.clone(),
                folds.to_owned(),
                collection,
                Arc::downgrade(self),
            ));
        }
        receiver
    }

    /// Takes in counts an event carried (each `None` when it did not change).
    fn heard(&self, id: &Bson, folds: Option<i64>, asides: Option<i64>) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = state.counts.get(&ParentKey::of(id)) {
            sender.send_if_modified(|(seen_folds, seen_asides)| {
                let mut newer = false;
                for (seen, now) in [(seen_folds, folds), (seen_asides, asides)] {
                    if let Some(now) = now.filter(|now| *now > *seen) {
                        *seen = now;
                        newer = true;
                    }
                }
                newer
            });
        }
    }

    /// Whether the stream should stop (the store is gone, or idle); if so it is marked stopped,
    /// under the same lock a push starts it with.
    fn stops(this: &Weak<Self>) -> bool {
        let Some(heard) = this.upgrade() else {
            return true;
        };
        let mut state = heard.state.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = state.last_used.is_none_or(|t| t.elapsed() > IDLE_FOR);
        if idle {
            state.running = false;
        }
        idle
    }
}

/// The stream: opened, read until an error or idleness, and opened again after an error.
async fn run(db: Database, folds: String, collection: &'static str, heard: Weak<Heard>) {
    let filter = doc! { "$match": {
        "operationType": "update",
        "documentKey._id.collection": collection,
        "$or": [
            { format!("updateDescription.updatedFields.{FOLDS}"): { "$exists": true } },
            { format!("updateDescription.updatedFields.{ASIDES}"): { "$exists": true } },
        ],
    } };
    loop {
        let opened = db
            .collection::<Document>(&folds)
            .watch()
            .pipeline([filter.clone()])
            .max_await_time(AWAIT)
            .await;
        match opened {
            Ok(mut stream) => loop {
                // Each call waits at most `AWAIT` for an event.
                let event = match stream.next_if_any().await {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::debug!(%error, "fold stream failed");
                        break;
                    }
                };
                if Heard::stops(&heard) {
                    return;
                }
                let Some(event) = event else { continue };
                let id = event.document_key.as_ref().and_then(|k| k.get("_id"));
                let fields = event.update_description.as_ref().map(|u| &u.updated_fields);
                let count = |name| match fields.and_then(|f| f.get(name)) {
                    Some(Bson::Int64(n)) => Some(*n),
                    Some(Bson::Int32(n)) => Some(i64::from(*n)),
                    _ => None,
                };
                if let (Some(id), Some(heard)) = (id, heard.upgrade()) {
                    heard.heard(id, count(FOLDS), count(ASIDES));
                }
            },
            Err(error) => tracing::debug!(%error, "fold stream could not open"),
        }
        if Heard::stops(&heard) {
            return;
        }
        tokio::time::sleep(REOPEN_AFTER).await;
    }
}
