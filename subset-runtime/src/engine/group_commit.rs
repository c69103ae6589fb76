//! Group commit for hot parents. Transactions on one parent conflict with each other: the
//! server aborts all but one, and the losers retry and collide again, so a popular parent
//! collapses to a few pushes a second. Within one process, pushes to a parent that has a
//! transaction in flight wait instead, and the next transaction carries all of them at once.
//!
//! The first push to an idle parent leads: it runs its own batch. Pushes arriving meanwhile
//! queue. When the leader is done it hands the queue to its first member, which runs every
//! queued batch as one `push_many`-shaped transaction and answers each member. When that
//! transaction fails, each batch is run again on its own, so a child that fails (a duplicate
//! owned by another parent, say) fails only its own caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::bson::Bson;
use tokio::sync::oneshot;

use crate::error::Result;

/// A key per (subset field, parent): the field's name and the parent `_id`'s BSON bytes.
pub(super) type Key = (&'static str, Vec<u8>);

/// The queues of parents with a transaction in flight (shared by the clones of a store).
#[derive(Default)]
pub(crate) struct Combiner<B> {
    queues: Arc<Mutex<HashMap<Key, Vec<Waiter<B>>>>>,
}

impl<B> Clone for Combiner<B> {
    fn clone(&self) -> Self {
        Combiner {
            queues: Arc::clone(&self.queues),
        }
    }
}

/// A queued push: its batch and where its result goes. One that is dropped unanswered (its
/// leader failed before answering) tells its caller to run the batch itself.
pub(crate) struct Waiter<B> {
    batch: Option<B>,
    reply: Option<oneshot::Sender<Turn<B>>>,
}

impl<B> Waiter<B> {
    /// The batch to write (taken once, by the leader).
    pub(crate) fn take_batch(&mut self) -> Option<B> {
        self.batch.take()
    }

    /// Tells the queued push its result.
    pub(crate) fn answer(mut self, result: Result<()>) {
        if let Some(reply) = self.reply.take() {
            // A push whose caller went away has nobody to tell.
            let _ = reply.send(Turn::Done(result));
        }
    }
}

impl<B> Drop for Waiter<B> {
    fn drop(&mut self) {
        if let (Some(reply), Some(batch)) = (self.reply.take(), self.batch.take()) {
            let alone = Waiter {
                batch: Some(batch),
                reply: None,
            };
            let _ = reply.send(Turn::Lead(vec![alone]));
        }
    }
}

/// What a queued push is told.
enum Turn<B> {
    /// Its batch was written, or failed, with this result.
    Done(Result<()>),
    /// It leads now: the queue, itself first (with its batch and no reply channel).
    Lead(Vec<Waiter<B>>),
}

/// What [`Combiner::join`] gives a push to do.
pub(crate) enum Role<B> {
    /// Run `batch` (the caller's own) together with the `others`' batches, then answer each of
    /// them. Dropping `leader` hands on the queue that built up meanwhile.
    Lead {
        batch: B,
        others: Vec<Waiter<B>>,
        leader: Leader<B>,
    },
    /// Another push ran this batch: its result.
    Done(Result<()>),
}

impl<B: Send> Combiner<B> {
    /// Queues `batch` behind the transaction in flight on `parent`, or leads if there is none.
    pub(crate) async fn join(&self, field: &'static str, parent: &Bson, batch: B) -> Role<B> {
        let key = (field, key_bytes(parent));
        let turn = {
            let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
            match queues.get_mut(&key) {
                Some(queue) => {
                    let (reply, turn) = oneshot::channel();
                    queue.push(Waiter {
                        batch: Some(batch),
                        reply: Some(reply),
                    });
                    turn
                }
                None => {
                    queues.insert(key.clone(), Vec::new());
                    return Role::Lead {
                        batch,
                        others: Vec::new(),
                        leader: self.leader(key),
                    };
                }
            }
        };
        match turn.await {
            Ok(Turn::Done(result)) => Role::Done(result),
            Ok(Turn::Lead(mut queue)) => match queue.first_mut().and_then(Waiter::take_batch) {
                Some(batch) => {
                    queue.remove(0);
                    Role::Lead {
                        batch,
                        others: queue,
                        leader: self.leader(key),
                    }
                }
                None => Role::Done(Ok(())),
            },
            // Senders are only dropped by `Waiter`'s drop, which sends first; a closed channel
            // means the runtime is shutting down.
            Err(_) => Role::Done(Ok(())),
        }
    }

    /// Runs `batch` as group commit does (see the module docs): queued behind the
    /// transaction in flight on `parent`, or leading one. A leader runs its batch together with
    /// the queued ones as `together` joins them (`None`: not together), and when that fails,
    /// or they do not go together, each on its own, so that each caller gets its own result.
    pub(crate) async fn run<F>(
        &self,
        field: &'static str,
        parent: &Bson,
        batch: B,
        together: impl FnOnce(&B, &[&B]) -> Option<B>,
        run: impl Fn(&B) -> F,
    ) -> Result<()>
    where
        F: std::future::Future<Output = Result<()>>,
    {
        let (batch, others, leader) = match self.join(field, parent, batch).await {
            Role::Done(result) => return result,
            Role::Lead {
                batch,
                others,
                leader,
            } => (batch, others, leader),
        };
        let theirs: Vec<(Waiter<B>, B)> = others
            .into_iter()
            .filter_map(|mut waiter| {
                let batch = waiter.take_batch()?;
                Some((waiter, batch))
            })
            .collect();
        if !theirs.is_empty() {
            let queued: Vec<&B> = theirs.iter().map(|(_, b)| b).collect();
            if let Some(all) = together(&batch, &queued) {
                if run(&all).await.is_ok() {
                    for (waiter, _) in theirs {
                        waiter.answer(Ok(()));
                    }
                    drop(leader);
                    return Ok(());
                }
            }
        }
        let mine = run(&batch).await;
        for (waiter, batch) in theirs {
            let result = run(&batch).await;
            waiter.answer(result);
        }
        drop(leader);
        mine
    }

    fn leader(&self, key: Key) -> Leader<B> {
        Leader {
            combiner: self.clone(),
            key: Some(key),
        }
    }
}

/// The push that runs the next transaction for a parent. On drop (done, failed or cancelled)
/// it hands the queue that built up meanwhile to its first member, or retires the queue.
pub(crate) struct Leader<B> {
    combiner: Combiner<B>,
    key: Option<Key>,
}

impl<B> Drop for Leader<B> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut queues = self
            .combiner
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(queue) = queues.get_mut(&key) else {
            return;
        };
        let mut queue = std::mem::take(queue);
        // Hand on to the first member still waiting; one whose caller went away is skipped,
        // and its batch is not written.
        while !queue.is_empty() {
            let mut first = queue.remove(0);
            let Some(reply) = first.reply.take() else {
                continue;
            };
            queue.insert(0, first);
            match reply.send(Turn::Lead(queue)) {
                Ok(()) => return,
                Err(Turn::Lead(mut back)) => {
                    // Its caller went away: its batch goes unwritten, as nobody waits for it.
                    back.remove(0);
                    queue = back;
                }
                Err(Turn::Done(_)) => return,
            }
        }
        queues.remove(&key);
    }
}

pub(super) fn key_bytes(parent: &Bson) -> Vec<u8> {
    let mut bytes = Vec::new();
    // A one-field document always serializes; equal `_id`s give equal bytes.
    let _ = crate::bson::doc! { "": parent.clone() }.to_writer(&mut bytes);
    bytes
}
