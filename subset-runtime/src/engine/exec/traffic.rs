//! The traffic on each parent within one process: one first-come, first-served queue per
//! parent that every writer of it enters once, and whose turn holder takes along the work of
//! the same kind queued right behind it (group commit, as the holder of a log flush takes the
//! commits waiting behind it).
//!
//! Without turns, writers of one parent race each other: in a transaction the server aborts
//! all but one of the conflicting ones and the losers retry, so a long operation (a removal
//! that recomputes a view) keeps losing to a stream of short ones (votes) and can wait for
//! tens of seconds; without a transaction, the lease ([`super::lease`]) is taken by whoever
//! polls first. A queue per parent bounds every writer's wait by the work queued ahead of it,
//! and leaves the server's conflicts and the lease to writers in other processes.
//!
//! Group commit keeps the queue short: pushes (or patches) of one parent waiting behind a turn
//! are written by the next holder in one transaction (or one turn without transactions), and
//! each is told the result. Only work right behind the holder goes along, so the order across
//! kinds is kept: a remove queued between two pushes is never jumped.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::bson::Bson;
use crate::error::Result;

/// A parent's `_id` as its BSON bytes: equal ids, equal keys. The one way the engine keys
/// per-parent state (turns, group commit, folds).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ParentKey(Vec<u8>);

impl ParentKey {
    pub(crate) fn of(parent: &Bson) -> Self {
        let mut bytes = Vec::new();
        // A one-field document always serializes; equal `_id`s give equal bytes.
        let _ = crate::bson::doc! { "": parent.clone() }.to_writer(&mut bytes);
        ParentKey(bytes)
    }
}

/// Keys remembered for a while: each lapses a given time after it was last marked. The one way
/// the engine remembers that a parent met another process's writes lately (its turns here, its
/// folds in `push::fold`).
pub(crate) struct Lapsing<K> {
    marked: Mutex<HashMap<K, Instant>>,
}

impl<K> Default for Lapsing<K> {
    fn default() -> Self {
        Lapsing {
            marked: Mutex::default(),
        }
    }
}

impl<K: std::hash::Hash + Eq> Lapsing<K> {
    /// How many keys are kept before the lapsed ones are dropped.
    const PRUNED_AT: usize = 1024;

    /// Marks `keys` until `lasts` from now.
    pub(crate) fn mark(&self, keys: impl IntoIterator<Item = K>, lasts: Duration) {
        let now = Instant::now();
        let mut marked = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
        if marked.len() >= Self::PRUNED_AT {
            marked.retain(|_, lapses| *lapses > now);
        }
        marked.extend(keys.into_iter().map(|key| (key, now + lasts)));
    }

    /// Whether one of `keys` is marked and not lapsed. `keys` is not iterated while nothing is
    /// marked.
    pub(crate) fn any(&self, keys: impl IntoIterator<Item = impl std::borrow::Borrow<K>>) -> bool {
        let marked = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
        if marked.is_empty() {
            return false;
        }
        let now = Instant::now();
        keys.into_iter()
            .any(|key| marked.get(key.borrow()).is_some_and(|lapses| *lapses > now))
    }
}

/// What a writer brings to a parent's queue: work a turn holder can take along, or its own
/// turn alone.
pub(crate) trait Work: Send + Sized + 'static {
    /// A writer that goes alone (a remove, a move…): nothing joins it.
    fn alone() -> Self;

    /// Whether `other` can be written together with `self` (same kind, same children).
    fn joins(&self, other: &Self) -> bool;

    /// `self` and `others` as one piece of work, or `None` when they do not go together (the
    /// same child twice, say): each is then written on its own.
    fn together(&self, others: &[&Self]) -> Option<Self>;
}

tokio::task_local! {
    /// The parents whose turn the running task holds, with the queues they are held in (see
    /// [`Traffic::id`]): what it writes meanwhile (a group of pushes, then the pushes one by
    /// one, or a fold) takes no other turn on them.
    static HELD: Vec<(usize, ParentKey)>;
}

/// The queues of the parents some operation of the store is writing (shared by its clones): a
/// parent is in the table while a writer holds its turn, with the writers waiting for it.
pub(crate) struct Traffic<W> {
    lanes: Arc<Mutex<HashMap<ParentKey, VecDeque<Waiter<W>>>>>,
    /// The parents a transaction of this process lost to another's lately, with when that
    /// lapses (see [`Traffic::contend`]).
    contended: Arc<Lapsing<ParentKey>>,
}

impl<W> Default for Traffic<W> {
    fn default() -> Self {
        Traffic {
            lanes: Arc::default(),
            contended: Arc::default(),
        }
    }
}

impl<W> Clone for Traffic<W> {
    fn clone(&self) -> Self {
        Traffic {
            lanes: Arc::clone(&self.lanes),
            contended: Arc::clone(&self.contended),
        }
    }
}

/// How long a parent counts as contended across processes after a conflict on it.
const CONTENDED_FOR: Duration = Duration::from_millis(500);

impl<W> Traffic<W> {
    /// Records that a transaction writing `parents` lost to another process's (a write
    /// conflict): for [`CONTENDED_FOR`], a writer of this process that gets one of their turns
    /// lets the other processes' writers go first ([`super::execute`]).
    pub(crate) fn contend(&self, parents: &[&Bson]) {
        let keys = parents.iter().map(|parent| ParentKey::of(parent));
        self.contended.mark(keys, CONTENDED_FOR);
    }

    /// Whether one of `parents` was contended across processes lately (see
    /// [`Traffic::contend`]).
    pub(crate) fn contended(&self, parents: &[&Bson]) -> bool {
        let keys = parents.iter().map(|parent| ParentKey::of(parent));
        self.contended.any(keys)
    }
}

/// A writer waiting for its turn, with the work a turn holder ahead may take along.
struct Waiter<W> {
    work: W,
    grant: oneshot::Sender<Grant<W>>,
}

/// What a waiting writer is told.
enum Grant<W> {
    /// Its turn, with its work back.
    Turn(W),
    /// A turn holder wrote its work: the result.
    Done(Result<()>),
    /// A turn holder took its work and went away before writing it: it queues again.
    Back(W),
}

/// Turns held on some parents: each passes to the next writer when this is dropped.
pub(crate) struct Turn<W: Work> {
    traffic: Traffic<W>,
    keys: Vec<ParentKey>,
}

/// Work a turn holder took along: answered once written; dropped unanswered (its holder went
/// away), it goes back to its writer.
struct Follower<W> {
    work: Option<W>,
    grant: Option<oneshot::Sender<Grant<W>>>,
}

impl<W> Follower<W> {
    fn answer(mut self, result: Result<()>) {
        self.work = None;
        if let Some(grant) = self.grant.take() {
            // A writer that went away has nobody to tell.
            let _ = grant.send(Grant::Done(result));
        }
    }
}

impl<W> Drop for Follower<W> {
    fn drop(&mut self) {
        if let (Some(grant), Some(work)) = (self.grant.take(), self.work.take()) {
            let _ = grant.send(Grant::Back(work));
        }
    }
}

impl<W: Work> Traffic<W> {
    /// Which queues these are: the stores sharing them (a store and its clones) share turns.
    fn id(&self) -> usize {
        Arc::as_ptr(&self.lanes) as usize
    }

    /// Whether the running task holds the turn on `key` in these queues.
    fn holds(&self, key: &ParentKey) -> bool {
        let id = self.id();
        HELD.try_with(|held| held.iter().any(|(i, k)| *i == id && k == key))
            .unwrap_or(false)
    }

    /// Waits for a turn on each of `parents` (but those the running task holds already),
    /// taken in the order of their keys, so that two operations that both need the same two
    /// parents (moves between them) cannot each hold one and wait for the other.
    pub(crate) async fn take(&self, parents: &[&Bson]) -> Turn<W> {
        let mut keys: Vec<ParentKey> = parents.iter().map(|p| ParentKey::of(p)).collect();
        keys.sort_unstable();
        keys.dedup();
        keys.retain(|k| !self.holds(k));
        let mut turn = Turn {
            traffic: self.clone(),
            keys: Vec::with_capacity(keys.len()),
        };
        for key in keys {
            let mut work = W::alone();
            loop {
                match self.enter(&key, work).await {
                    Grant::Turn(_) => break,
                    // Nothing joins work that goes alone; were it ever taken, queue again.
                    Grant::Back(back) => work = back,
                    Grant::Done(_) => work = W::alone(),
                }
            }
            turn.keys.push(key);
        }
        turn
    }

    /// Writes `work` on `parent` with `run`, as group commit does (see the module docs):
    /// queued behind the writer holding the parent's turn, which may write it; or, holding the
    /// turn, together with the work of the same kind queued right behind (as
    /// [`Work::together`] joins them), and when that fails or they do not go together, each on
    /// its own, so that each writer gets its own result. `run` runs holding the turn.
    pub(crate) async fn together<F, Fut>(&self, parent: &Bson, work: W, run: F) -> Result<()>
    where
        F: Fn(&W) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        let key = ParentKey::of(parent);
        if self.holds(&key) {
            return run(&work).await;
        }
        let mut work = work;
        let mine = loop {
            match self.enter(&key, work).await {
                Grant::Turn(mine) => break mine,
                Grant::Done(result) => return result,
                Grant::Back(back) => work = back,
            }
        };
        let turn = Turn {
            traffic: self.clone(),
            keys: vec![key.clone()],
        };
        let followers = turn.followers(&mine);
        let mut held = HELD.try_with(Vec::clone).unwrap_or_default();
        held.push((self.id(), key));
        HELD.scope(held, async move {
            let _turn = turn;
            if !followers.is_empty() {
                let theirs: Vec<&W> = followers.iter().filter_map(|f| f.work.as_ref()).collect();
                if let Some(all) = mine.together(&theirs) {
                    if run(&all).await.is_ok() {
                        for follower in followers {
                            follower.answer(Ok(()));
                        }
                        return Ok(());
                    }
                }
            }
            let result = run(&mine).await;
            for follower in followers {
                if let Some(work) = &follower.work {
                    let theirs = run(work).await;
                    follower.answer(theirs);
                }
            }
            result
        })
        .await
    }

    /// Queues for the turn on `key` with `work` (or takes it, when nobody holds it).
    async fn enter(&self, key: &ParentKey, work: W) -> Grant<W> {
        let granted = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            match lanes.get_mut(key) {
                // Held: its holder's drop hands the turn on.
                Some(lane) => {
                    let (grant, granted) = oneshot::channel();
                    lane.push_back(Waiter { work, grant });
                    granted
                }
                None => {
                    lanes.insert(key.clone(), VecDeque::new());
                    return Grant::Turn(work);
                }
            }
        };
        // A sender is dropped unsent only with the runtime; then the turn is as good as any.
        granted.await.unwrap_or_else(|_| Grant::Done(Ok(())))
    }
}

impl<W: Work> Turn<W> {
    /// Takes the work queued right behind this turn that joins `mine` (the same kind, up to
    /// the first that is not), skipping writers that went away.
    fn followers(&self, mine: &W) -> Vec<Follower<W>> {
        let mut lanes = self
            .traffic
            .lanes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut followers = Vec::new();
        for key in &self.keys {
            let Some(lane) = lanes.get_mut(key) else {
                continue;
            };
            while lane.front().is_some_and(|w| mine.joins(&w.work)) {
                let Some(waiter) = lane.pop_front() else {
                    break;
                };
                // Its writer went away: its work goes unwritten, as nobody waits for it.
                if !waiter.grant.is_closed() {
                    followers.push(Follower {
                        work: Some(waiter.work),
                        grant: Some(waiter.grant),
                    });
                }
            }
        }
        followers
    }
}

impl<W: Work> Drop for Turn<W> {
    fn drop(&mut self) {
        let mut lanes = self
            .traffic
            .lanes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for key in self.keys.drain(..) {
            let Some(lane) = lanes.get_mut(&key) else {
                continue;
            };
            // Hand on to the first writer still waiting; one that went away is skipped, and
            // its work goes unwritten, as nobody waits for it.
            let handed = loop {
                let Some(waiter) = lane.pop_front() else {
                    break false;
                };
                if waiter.grant.send(Grant::Turn(waiter.work)).is_ok() {
                    break true;
                }
            };
            if !handed {
                lanes.remove(&key);
            }
        }
    }
}

/// Group commit across parents: work for different parents (each writer holding its own
/// parent's turn) written in one run, one transaction for several cold parents. At most
/// [`ABREAST`] runs go at once per store; work that comes meanwhile waits, and the next run
/// takes all of it. A writer alone with nothing in flight runs at once, as before: grouping
/// costs latency only to work that would have waited for the server anyway.
pub(crate) struct Across<T> {
    convoy: Arc<Mutex<Convoy<T>>>,
}

/// How many runs of [`Across`] go at once.
const ABREAST: usize = 1;

/// How long work waits for a run before its writer takes it back and writes it alone: a run
/// that takes longer (a parent update the server holds, a push that waits for a fold) would
/// otherwise hold up every parent's writers behind it.
const ESCAPE: Duration = Duration::from_millis(50);

impl<T> Default for Across<T> {
    fn default() -> Self {
        Across {
            convoy: Arc::new(Mutex::new(Convoy {
                running: 0,
                waiting: VecDeque::new(),
                next: 0,
            })),
        }
    }
}

/// The runs under way and the work waiting for the next.
struct Convoy<T> {
    running: usize,
    waiting: VecDeque<Rider<T>>,
    /// The number the next rider gets, to find it again (see [`ESCAPE`]).
    next: u64,
}

/// Work waiting for a run, with the way to tell its writer what came of it; dropped unanswered
/// (its run went away), it goes back to its writer, to be written alone.
struct Rider<T> {
    number: u64,
    item: Option<T>,
    told: Option<oneshot::Sender<Told<T>>>,
}

/// What a waiting writer of [`Across`] is told.
enum Told<T> {
    /// Its turn to lead the next run, with its work back.
    Lead(T),
    /// Its work was written in a run: the result.
    Done(Result<()>),
    /// The run that took its work failed or went away: it writes its work alone.
    Alone(T),
}

impl<T> Rider<T> {
    fn tell(mut self, told: impl FnOnce(T) -> Told<T>) {
        if let (Some(item), Some(sender)) = (self.item.take(), self.told.take()) {
            // A writer that went away has nobody to tell.
            let _ = sender.send(told(item));
        }
    }

    fn answer(mut self, result: Result<()>) {
        self.item = None;
        if let Some(sender) = self.told.take() {
            let _ = sender.send(Told::Done(result));
        }
    }
}

impl<T> Drop for Rider<T> {
    fn drop(&mut self) {
        if let (Some(item), Some(sender)) = (self.item.take(), self.told.take()) {
            let _ = sender.send(Told::Alone(item));
        }
    }
}

/// A run's place among the [`ABREAST`]: given up when dropped (the run ended or went away),
/// to the first writer still waiting, who leads the next run.
struct Place<T> {
    convoy: Arc<Mutex<Convoy<T>>>,
}

impl<T> Drop for Place<T> {
    fn drop(&mut self) {
        let mut convoy = self.convoy.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(mut rider) = convoy.waiting.pop_front() {
            let (Some(item), Some(sender)) = (rider.item.take(), rider.told.take()) else {
                continue;
            };
            // The place passes with the lead; a writer that went away passes it on.
            if sender.send(Told::Lead(item)).is_ok() {
                return;
            }
        }
        convoy.running -= 1;
    }
}

impl<T: Clone + Send> Across<T> {
    /// The work of rider `number`, taken out of the waiting line, unless a run took it.
    fn take_back(&self, number: u64) -> Option<T> {
        let mut convoy = self.convoy.lock().unwrap_or_else(PoisonError::into_inner);
        let at = convoy.waiting.iter().position(|r| r.number == number)?;
        let mut rider = convoy.waiting.remove(at)?;
        rider.told = None;
        rider.item.take()
    }

    /// Writes `item` (cheap to clone: shared): in a run of its own at once when fewer than
    /// [`ABREAST`] are under way, else waiting for the next run, which writes it with all the
    /// work waiting then (`together`), or, when that fails, has each writer write its own
    /// (`alone`), so that each gets its own result; when nobody knows whether the run wrote
    /// ([`crate::Error::OutcomeUnknown`]), each writer gets that instead. A writer writes alone
    /// under the turn it holds; a run never takes a turn its riders hold.
    pub(crate) async fn ride<G, GF, A, AF>(&self, item: T, together: G, alone: A) -> Result<()>
    where
        G: Fn(Vec<T>) -> GF,
        GF: Future<Output = Result<()>>,
        A: Fn(T) -> AF,
        AF: Future<Output = Result<()>>,
    {
        let waiting = {
            let mut convoy = self.convoy.lock().unwrap_or_else(PoisonError::into_inner);
            if convoy.running < ABREAST {
                convoy.running += 1;
                Ok(item)
            } else {
                let (sender, told) = oneshot::channel();
                let number = convoy.next;
                convoy.next += 1;
                convoy.waiting.push_back(Rider {
                    number,
                    item: Some(item),
                    told: Some(sender),
                });
                Err((number, told))
            }
        };
        let mine = match waiting {
            Ok(item) => item,
            Err((number, mut told)) => {
                let told = match tokio::time::timeout(ESCAPE, &mut told).await {
                    Ok(told) => told,
                    // Waited too long: the work comes back, unless a run took it meanwhile.
                    Err(_) => match self.take_back(number) {
                        Some(item) => return alone(item).await,
                        None => told.await,
                    },
                };
                match told {
                    Ok(Told::Lead(item)) => item,
                    Ok(Told::Done(result)) => return result,
                    Ok(Told::Alone(item)) => return alone(item).await,
                    // A sender is dropped unsent only with the runtime.
                    Err(_) => return Ok(()),
                }
            }
        };
        let place = Place {
            convoy: Arc::clone(&self.convoy),
        };
        let riders: Vec<Rider<T>> = {
            let mut convoy = self.convoy.lock().unwrap_or_else(PoisonError::into_inner);
            convoy
                .waiting
                .drain(..)
                .filter(|r| r.told.as_ref().is_some_and(|t| !t.is_closed()))
                .collect()
        };
        if riders.is_empty() {
            let result = alone(mine).await;
            drop(place);
            return result;
        }
        let all: Vec<T> = std::iter::once(&mine)
            .chain(riders.iter().filter_map(|r| r.item.as_ref()))
            .cloned()
            .collect();
        let written = together(all).await;
        match written {
            Ok(()) => {
                for rider in riders {
                    rider.answer(Ok(()));
                }
                // Writers just answered often come back with more work at once (a writer in a
                // loop): one yield lets them queue before the place passes on, so that the
                // next run carries them, not the one after it (without it, four writers
                // settle into runs of one and three).
                tokio::task::yield_now().await;
                drop(place);
                Ok(())
            }
            // Nobody knows whether the run wrote (its commit's reply was lost): each writer
            // is told so, as after a write of its own, rather than write again (a patch's
            // increment would count twice).
            Err(e) if e.is_outcome_unknown() => {
                drop(place);
                for rider in riders {
                    // (Always `Some` here; a rider dropped unanswered would write alone.)
                    if let Some(again) = e.unknown_again() {
                        rider.answer(Err(again));
                    }
                }
                Err(e)
            }
            Err(_) => {
                drop(place);
                for rider in riders {
                    rider.tell(Told::Alone);
                }
                alone(mine).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Numbers to add up; 0 goes alone.
    #[derive(Debug)]
    struct Add(u32);

    impl Work for Add {
        fn alone() -> Self {
            Add(0)
        }
        fn joins(&self, other: &Self) -> bool {
            self.0 > 0 && other.0 > 0
        }
        fn together(&self, others: &[&Self]) -> Option<Self> {
            Some(Add(self.0 + others.iter().map(|o| o.0).sum::<u32>()))
        }
    }

    #[test]
    fn a_parent_that_conflicted_is_contended_in_every_clone_until_it_lapses() {
        let traffic = Traffic::<Add>::default();
        let (hot, cold) = (Bson::Int32(1), Bson::Int32(2));
        assert!(!traffic.contended(&[&hot]));
        traffic.clone().contend(&[&hot]);
        assert!(traffic.contended(&[&hot]));
        assert!(traffic.contended(&[&cold, &hot]));
        assert!(!traffic.contended(&[&cold]));
        std::thread::sleep(CONTENDED_FOR + Duration::from_millis(20));
        assert!(!traffic.contended(&[&hot]), "lapsed");
    }

    #[tokio::test]
    async fn turns_come_in_the_order_asked_and_the_table_empties() {
        let traffic = Traffic::<Add>::default();
        let a = Bson::Int32(1);
        let first = traffic.take(&[&a]).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..4 {
            let (traffic, order, a) = (traffic.clone(), order.clone(), a.clone());
            tasks.push(tokio::spawn(async move {
                let _turn = traffic.take(&[&a]).await;
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
        assert!(traffic.lanes.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn two_parents_are_taken_in_one_order_whatever_the_order_asked() {
        let traffic = Traffic::<Add>::default();
        let (a, b) = (Bson::Int32(1), Bson::Int32(2));
        let mut tasks = Vec::new();
        for i in 0..50 {
            let (traffic, a, b) = (traffic.clone(), a.clone(), b.clone());
            tasks.push(tokio::spawn(async move {
                let parents = if i % 2 == 0 { [&a, &b] } else { [&b, &a] };
                let _turns = traffic.take(&parents).await;
                tokio::task::yield_now().await;
            }));
        }
        let all = futures::future::join_all(tasks);
        tokio::time::timeout(Duration::from_secs(10), all)
            .await
            .expect("no deadlock");
    }

    /// Writes `work` on parent 1, recording what each run wrote.
    async fn add(traffic: &Traffic<Add>, runs: &Mutex<Vec<u32>>, work: u32) -> Result<()> {
        let parent = Bson::Int32(1);
        traffic
            .together(&parent, Add(work), |w| {
                runs.lock().unwrap().push(w.0);
                async { Ok(()) }
            })
            .await
    }

    #[tokio::test]
    async fn the_turn_holder_takes_the_same_kind_behind_it_and_no_further() {
        let traffic = Traffic::<Add>::default();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let parent = Bson::Int32(1);
        let first = traffic.take(&[&parent]).await;
        let mut tasks = Vec::new();
        // Queued in this order: 1, 2, a writer alone, 4.
        for work in [1, 2, 0, 4] {
            let (traffic, runs) = (traffic.clone(), runs.clone());
            tasks.push(tokio::spawn(async move {
                match work {
                    0 => {
                        let _turn = traffic.take(&[&Bson::Int32(1)]).await;
                        runs.lock().unwrap().push(0);
                    }
                    work => add(&traffic, &runs, work).await.unwrap(),
                }
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        // 1 took 2 along; the writer alone was not jumped; 4 came after it.
        assert_eq!(*runs.lock().unwrap(), vec![3, 0, 4]);
        assert!(traffic.lanes.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn work_taken_by_a_holder_that_went_away_is_written_by_its_writer() {
        let traffic = Traffic::<Add>::default();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let parent = Bson::Int32(1);
        let first = traffic.take(&[&parent]).await;
        // The holder-to-be: it takes 2 along, then never finishes (it is cancelled).
        let stuck = {
            let traffic = traffic.clone();
            tokio::spawn(async move {
                let parent = Bson::Int32(1);
                traffic
                    .together(&parent, Add(1), |_| std::future::pending::<Result<()>>())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = {
            let (traffic, runs) = (traffic.clone(), runs.clone());
            tokio::spawn(async move { add(&traffic, &runs, 2).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        stuck.abort();
        let written = tokio::time::timeout(Duration::from_secs(5), second).await;
        written.expect("not lost").unwrap().unwrap();
        assert_eq!(*runs.lock().unwrap(), vec![2]);
    }

    /// Rides `n` on `across`, recording each run: `together` as the list it wrote (failing
    /// when it holds 0), `alone` as a list of one.
    async fn ride(across: &Across<u32>, runs: &Arc<Mutex<Vec<Vec<u32>>>>, n: u32) -> Result<()> {
        let together = |all: Vec<u32>| async move {
            if all.contains(&0) {
                return Err(crate::Error::PartialModel {
                    collection: "0 fails a run".into(),
                });
            }
            runs.lock().unwrap().push(all);
            Ok(())
        };
        let alone = |n: u32| async move {
            runs.lock().unwrap().push(vec![n]);
            Ok(())
        };
        across.ride(n, together, alone).await
    }

    /// Rides 1 on `across`, alone, its run holding its place until `gate` is notified.
    fn held_first(
        across: &Arc<Across<u32>>,
        gate: &Arc<tokio::sync::Notify>,
    ) -> tokio::task::JoinHandle<Result<()>> {
        let (across, gate) = (across.clone(), gate.clone());
        tokio::spawn(async move {
            let alone = |_| {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    Ok(())
                }
            };
            across.ride(1, |_| async { Ok(()) }, alone).await
        })
    }

    #[tokio::test]
    async fn work_that_comes_during_a_run_goes_in_the_next_run_together() {
        let across = Arc::new(Across::<u32>::default());
        let runs = Arc::new(Mutex::new(Vec::new()));
        // The first run holds its place until told.
        let gate = Arc::new(tokio::sync::Notify::new());
        let first = {
            let (across, runs, gate) = (across.clone(), runs.clone(), gate.clone());
            tokio::spawn(async move {
                let alone = |n: u32| {
                    let (runs, gate) = (runs.clone(), gate.clone());
                    async move {
                        gate.notified().await;
                        runs.lock().unwrap().push(vec![n]);
                        Ok(())
                    }
                };
                across.ride(1, |_| async { Ok(()) }, alone).await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let riders: Vec<_> = [2, 3, 4]
            .into_iter()
            .map(|n| {
                let (across, runs) = (across.clone(), runs.clone());
                tokio::spawn(async move { ride(&across, &runs, n).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.notify_one();
        first.await.unwrap().unwrap();
        for rider in riders {
            rider.await.unwrap().unwrap();
        }
        let mut runs = runs.lock().unwrap().clone();
        runs[1].sort_unstable();
        assert_eq!(runs, vec![vec![1], vec![2, 3, 4]]);
        assert_eq!(across.convoy.lock().unwrap().running, 0);
    }

    #[tokio::test]
    async fn writers_in_a_loop_ride_together_rather_than_alternate_alone() {
        // Four writers, each writing again as soon as it is answered, each run taking 1 ms:
        // once under way, the runs carry all four, not a lone one between runs of the rest.
        let across = Arc::new(Across::<u32>::default());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let writers: Vec<_> = (1..=4)
            .map(|n| {
                let (across, runs) = (across.clone(), runs.clone());
                tokio::spawn(async move {
                    for _ in 0..20 {
                        let together = |all: Vec<u32>| {
                            let runs = runs.clone();
                            async move {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                runs.lock().unwrap().push(all.len());
                                Ok(())
                            }
                        };
                        let alone = |_| {
                            let runs = runs.clone();
                            async move {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                runs.lock().unwrap().push(1);
                                Ok(())
                            }
                        };
                        across.ride(n, together, alone).await.unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs.iter().sum::<usize>(), 80);
        // Runs of one and four in turn would be 32; runs of four, 21 (the first goes alone).
        // The margin is for a writer that waited past `ESCAPE` on a stalled machine and went
        // alone.
        assert!(runs.len() <= 26, "{} runs: {runs:?}", runs.len());
    }

    #[tokio::test]
    async fn a_run_that_fails_has_each_writer_write_alone() {
        let across = Arc::new(Across::<u32>::default());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(tokio::sync::Notify::new());
        let first = held_first(&across, &gate);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let riders: Vec<_> = [0, 5, 6]
            .into_iter()
            .map(|n| {
                let (across, runs) = (across.clone(), runs.clone());
                tokio::spawn(async move { ride(&across, &runs, n).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.notify_one();
        first.await.unwrap().unwrap();
        for rider in riders {
            rider.await.unwrap().unwrap();
        }
        let mut runs = runs.lock().unwrap().clone();
        runs.sort_unstable();
        assert_eq!(runs, vec![vec![0], vec![5], vec![6]]);
    }

    #[tokio::test]
    async fn a_run_whose_outcome_is_unknown_tells_each_writer_so_and_writes_nothing_again() {
        let across = Arc::new(Across::<u32>::default());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(tokio::sync::Notify::new());
        let first = held_first(&across, &gate);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let riders: Vec<_> = [7, 8, 9]
            .into_iter()
            .map(|n| {
                let (across, runs) = (across.clone(), runs.clone());
                tokio::spawn(async move {
                    let together = |_: Vec<u32>| async {
                        Err(crate::Error::OutcomeUnknown {
                            collection: "lost".into(),
                            source: Box::new(mongodb::error::Error::custom("reply lost")),
                        })
                    };
                    let alone = |n: u32| {
                        let runs = runs.clone();
                        async move {
                            runs.lock().unwrap().push(vec![n]);
                            Ok(())
                        }
                    };
                    across.ride(n, together, alone).await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.notify_one();
        first.await.unwrap().unwrap();
        for rider in riders {
            let told = rider.await.unwrap();
            assert!(
                told.as_ref().is_err_and(crate::Error::is_outcome_unknown),
                "{told:?}"
            );
        }
        assert!(runs.lock().unwrap().is_empty(), "written again alone");
        assert_eq!(across.convoy.lock().unwrap().running, 0);
    }

    #[tokio::test]
    async fn work_waiting_behind_a_run_that_does_not_end_is_written_alone() {
        let across = Arc::new(Across::<u32>::default());
        let runs = Arc::new(Mutex::new(Vec::new()));
        let stuck = {
            let across = across.clone();
            tokio::spawn(async move {
                let alone = |_| std::future::pending::<Result<()>>();
                across.ride(1, |_| async { Ok(()) }, alone).await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let written = tokio::time::timeout(Duration::from_secs(5), ride(&across, &runs, 2)).await;
        written.expect("not held up").unwrap();
        assert_eq!(*runs.lock().unwrap(), vec![vec![2]]);
        assert!(across.convoy.lock().unwrap().waiting.is_empty());
        stuck.abort();
        let _ = stuck.await;
        assert_eq!(across.convoy.lock().unwrap().running, 0);
    }
}
