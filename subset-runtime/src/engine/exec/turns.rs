//! Turns on a parent within one process: the operations of a store (and its clones) that write
//! one parent run one at a time, in the order they asked.
//!
//! Without turns, writers of one parent race each other: in a transaction the server aborts
//! all but one of the conflicting ones and the losers retry, so a long operation (a removal
//! that recomputes a view) keeps losing to a stream of short ones (votes) and can wait for
//! tens of seconds; without a transaction, the lease ([`super::lease`]) is taken by whoever
//! polls first. A first-come, first-served queue per parent bounds every writer's wait by the
//! work queued ahead of it, and leaves the server's conflicts and the lease to writers in other
//! processes. Group commit ([`crate::engine::group_commit`]) keeps the queue short: the pushes or
//! patches waiting on a parent are written together when their turn comes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::bson::Bson;
use tokio::sync::{Mutex as Queue, OwnedMutexGuard};

/// A parent's `_id` as its BSON bytes: equal ids, equal keys.
type Key = Vec<u8>;

/// The queues of the parents some operation of the store is writing (shared by its clones).
#[derive(Default, Clone)]
pub(crate) struct Turns {
    queues: Arc<Mutex<HashMap<Key, Arc<Queue<()>>>>>,
}

/// Turns held on some parents: each ends when this is dropped.
pub(crate) struct Held {
    turns: Turns,
    held: Vec<(Key, OwnedMutexGuard<()>)>,
}

impl Turns {
    /// Waits for a turn on each of `parents`, taken in the order of their keys, so that two
    /// operations that both need the same two parents (moves between them) cannot each hold one
    /// and wait for the other.
    pub(crate) async fn take(&self, parents: &[&Bson]) -> Held {
        let mut keys: Vec<Key> = parents.iter().map(|p| key(p)).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut held = Vec::with_capacity(keys.len());
        for key in keys {
            let queue = {
                let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
                Arc::clone(queues.entry(key.clone()).or_default())
            };
            // tokio's mutex is fair: waiters get it in the order they asked.
            held.push((key, queue.lock_owned().await));
        }
        Held {
            turns: self.clone(),
            held,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut queues = self
            .turns
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (key, guard) in self.held.drain(..) {
            drop(guard);
            // Nobody else holds or waits for this parent's queue: forget it, so that the table
            // holds only the parents being written.
            if queues.get(&key).is_some_and(|q| Arc::strong_count(q) == 1) {
                queues.remove(&key);
            }
        }
    }
}

pub(super) fn key(parent: &Bson) -> Key {
    crate::engine::group_commit::key_bytes(parent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn turns_come_in_the_order_asked_and_the_table_empties() {
        let turns = Turns::default();
        let a = Bson::Int32(1);
        let first = turns.take(&[&a]).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..4 {
            let (turns, order, a) = (turns.clone(), order.clone(), a.clone());
            tasks.push(tokio::spawn(async move {
                let _turn = turns.take(&[&a]).await;
                order.lock().unwrap().push(i);
            }));
            // Each asks after the one before.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        assert!(turns.queues.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn two_parents_are_taken_in_one_order_whatever_the_order_asked() {
        let turns = Turns::default();
        let (a, b) = (Bson::Int32(1), Bson::Int32(2));
        let mut tasks = Vec::new();
        for i in 0..50 {
            let (turns, a, b) = (turns.clone(), a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let parents = if i % 2 == 0 { [&a, &b] } else { [&b, &a] };
                let _turns = turns.take(&parents).await;
                tokio::task::yield_now().await;
            }));
        }
        let all = futures::future::join_all(tasks);
        tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("no deadlock");
    }
}
