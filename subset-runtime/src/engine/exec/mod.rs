//! The executor: every engine operation is a [`Steps`] value, and this module alone decides how
//! its steps run.
//!
//! - In [`WriteMode::Transactional`] the steps run in a transaction of ours, retried the way the
//!   driver specification prescribes: the whole transaction on `TransientTransactionError`, the
//!   commit alone on `UnknownTransactionCommitResult`, both until a deadline.
//! - In [`WriteMode::Ordered`] they run one after the other, without a transaction.
//! - When the caller passes a session that is already in a transaction, the steps join it: the
//!   caller owns that transaction, so we neither commit nor retry it.
//!
//! Steps never look at sessions themselves: they hand each driver action to [`Ctx::run`] (or a
//! `find` to [`Ctx::collect`]), which attaches the session when there is one.
//!
//! What every write of a parent needs is applied here too, around the steps, from the parents
//! the steps declare ([`Steps::parents`]):
//!
//! - a turn on each parent within this process ([`traffic`]), so that writers of one parent go
//!   first come, first served and a long one is not starved by a stream of short ones;
//! - without a transaction, a lease on each parent across processes ([`lease`]), so that no
//!   other writer's steps land between two of these steps (pushes share it: theirs commute);
//! - after the steps, the parents they found built under another definition of the model (or
//!   left unfinished by a writer before them) are settled ([`crate::engine::model_change`]),
//!   in the same transaction when there is one. Steps only record them ([`Ctx::outdated`]).

pub(crate) mod lease;
pub(crate) mod traffic;

use std::future::{Future, IntoFuture};
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use mongodb::action::{
    Aggregate, CountDocuments, Delete, Find, FindOne, FindOneAndDelete, FindOneAndReplace,
    FindOneAndUpdate, ImplicitSession, InsertMany, InsertOne, ReplaceOne, RunCommand, Update,
};
use mongodb::error::{ErrorKind, TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::options::ReadConcern;
use mongodb::ClientSession;
use serde::de::DeserializeOwned;

use super::{RawStore, WriteMode};
use crate::bson::Bson;
use crate::error::{Error, Result};
use lease::Lease;

/// How long a transaction keeps retrying; the same 120 s the drivers' callback API uses.
const DEADLINE: Duration = Duration::from_secs(120);

/// The steps of one engine operation.
pub(crate) trait Steps: Sync {
    type Output: Send;

    /// Runs the steps in `ctx`. In a transaction of ours this may be called again after a
    /// transient error, so it must not consume anything it needs again.
    fn run(&self, ctx: &mut Ctx<'_>) -> impl Future<Output = Result<Self::Output>> + Send;

    /// The parents the steps write, for the executor to give them a turn on each (and a lease
    /// without a transaction). None by default: steps that only read, or that create their
    /// parent.
    fn parents(&self) -> Vec<&Bson> {
        Vec::new()
    }

    /// Whether, without a transaction, these steps may write a parent while other steps that
    /// say so write it from other processes ([`lease`]'s shared lease): only steps whose
    /// writes commute with each other's, and that recompute nothing from the child collection
    /// (a push). No by default.
    fn shares(&self) -> bool {
        false
    }

    /// Without a transaction, after settling their parent was refused (a child of theirs too
    /// large to embed, see [`Ctx::storing`], or a sum past its type), takes the children the
    /// steps stored out again, so that the steps leave nothing, as a transaction would. Nothing
    /// by default.
    fn take_back(&self, ctx: &mut Ctx<'_>) -> impl Future<Output = Result<()>> + Send {
        let _ = ctx;
        async { Ok(()) }
    }

    /// Between two attempts of a transaction of ours, after `error` (transient) ended attempt
    /// number `attempt`: by default a jittered backoff, then another attempt. Steps may instead
    /// end the retries, with an output (another writer did their work meanwhile) or with the
    /// error (their caller takes another path).
    fn before_retry(
        &self,
        attempt: u32,
        error: Error,
    ) -> impl Future<Output = Result<Retry<Self::Output>>> + Send {
        async move { again_after_backoff(attempt, &error).await }
    }
}

/// [`Steps::before_retry`]'s default: a jittered backoff after `error` ended attempt number
/// `attempt`, then another attempt.
pub(super) async fn again_after_backoff<T>(attempt: u32, error: &Error) -> Result<Retry<T>> {
    match crate::error::driver::is_write_conflict(error) {
        true => conflict_backoff(attempt).await,
        false => backoff(attempt).await,
    }
    Ok(Retry::Again)
}

/// What a transaction of ours does after a transient error (see [`Steps::before_retry`]).
pub(crate) enum Retry<T> {
    /// Another attempt.
    Again,
    /// No other attempt: the steps' work is done, with this output.
    Done(T),
}

/// Where steps run: in a transaction (ours or the caller's), or in order, with or without the
/// caller's session.
pub(crate) struct Ctx<'s> {
    session: Option<&'s mut ClientSession>,
    atomic: bool,
    joined: bool,
    /// Without a transaction, the parents whose lease the steps hold, with the lease.
    leases: Vec<(Bson, Lease)>,
    /// The parents to settle after the steps (see [`Ctx::outdated`]).
    outdated: Vec<Bson>,
    /// The parents whose lease the steps found taken by another writer.
    lost: Vec<Bson>,
    /// The leased parents that had no marker of their own (see [`Ctx::is_bare`]).
    bare: Vec<Bson>,
    /// The children the steps store (see [`Ctx::storing`]).
    own: Vec<Bson>,
}

impl<'s> Ctx<'s> {
    fn new(session: Option<&'s mut ClientSession>, atomic: bool, joined: bool) -> Self {
        Ctx {
            session,
            atomic,
            joined,
            leases: Vec::new(),
            outdated: Vec::new(),
            lost: Vec::new(),
            bare: Vec::new(),
            own: Vec::new(),
        }
    }

    /// Records that the steps store `children` in the child collection: a recompute that
    /// cannot embed one of them where it ranks (too large for any subset of its parent) refuses
    /// it, as the server refuses a push into a parent built here, rather than leave it out as
    /// it leaves out a child another program stored.
    pub(crate) fn storing(&mut self, children: impl IntoIterator<Item = Bson>) {
        self.own.extend(children);
    }

    /// Whether the steps store `child` (see [`Ctx::storing`]).
    pub(crate) fn stores(&self, child: &Bson) -> bool {
        self.own.contains(child)
    }

    /// Records `parent` as built under another definition of the model (a parent update found
    /// it so), for the executor to settle once the steps are done: rebuilt under this one, or
    /// marked for a rebuild.
    pub(crate) fn outdated(&mut self, parent: &Bson) {
        if !self.outdated.contains(parent) {
            self.outdated.push(parent.clone());
        }
    }

    /// Whether `parent` was recorded as outdated: the steps need not write it further, since
    /// settling it rebuilds every view from the child collection.
    pub(crate) fn is_outdated(&self, parent: &Bson) -> bool {
        self.outdated.contains(parent)
    }

    /// The lease the steps hold on `parent`, without a transaction.
    pub(crate) fn lease(&self, parent: &Bson) -> Option<Lease> {
        self.leases
            .iter()
            .find_map(|(p, lease)| (p == parent).then_some(*lease))
    }

    /// Whether `parent` had no marker of its own when its lease was taken (written by other
    /// programs, or by a store of some fields): its lease is given back by the executor, which
    /// removes the `_subset` the lease created, rather than by the steps' last write.
    pub(crate) fn is_bare(&self, parent: &Bson) -> bool {
        self.bare.contains(parent)
    }

    /// Records that a write gave `parent`'s lease back (see [`ParentUpdate::last`]).
    ///
    /// [`ParentUpdate::last`]: crate::engine::parent_write::ParentUpdate
    pub(crate) fn released(&mut self, parent: &Bson) {
        self.leases.retain(|(p, _)| p != parent);
    }

    /// The leases the steps still hold (a last write gives its own back), for
    /// [`lease::Leases::release`].
    pub(crate) fn held(&self) -> &[(Bson, Lease)] {
        &self.leases
    }

    /// Whether the steps found `parent`'s lease taken by another writer (see [`Ctx::lost`]).
    pub(crate) fn is_lost(&self, parent: &Bson) -> bool {
        self.lost.contains(parent)
    }

    /// Records that `parent`'s lease was taken by another writer before the steps wrote it
    /// (they were slower than the lease): the executor marks it for a rebuild and reports
    /// [`Error::Unsettled`].
    pub(crate) fn lost(&mut self, parent: &Bson) {
        if !self.lost.contains(parent) {
            self.lost.push(parent.clone());
        }
    }

    /// The context of a read outside any [`Steps`]: in the caller's session, if given.
    pub(crate) fn read(caller: Option<&'s mut ClientSession>) -> Self {
        Ctx::new(caller, false, false)
    }

    /// A context of its own for one of several writes that go out at once, each on a
    /// connection of its own: only where the steps' context has neither a transaction nor a
    /// session (see [`Ctx::has_session`]).
    pub(crate) fn apart() -> Ctx<'static> {
        Ctx::new(None, false, false)
    }

    /// Whether the steps run inside one transaction, so that they all apply or none does.
    pub(crate) fn atomic(&self) -> bool {
        self.atomic
    }

    /// Whether the steps run in a session (ours or the caller's): without one, and without a
    /// transaction, independent writes may go out at once, each on a connection of its own.
    pub(crate) fn has_session(&self) -> bool {
        self.session.is_some()
    }

    /// Whether that transaction is the caller's: a failed write aborts it for the caller too, so
    /// steps must avoid errors they would otherwise recover from by retrying.
    pub(crate) fn joined(&self) -> bool {
        self.joined
    }

    /// Awaits a driver action, in this context's session when there is one.
    pub(crate) async fn run<'a, A: Step<'a>>(&'a mut self, action: A) -> A::Output {
        match self.session.as_deref_mut() {
            Some(session) => action.in_session(session).await,
            None => action.await,
        }
    }

    /// Runs a `find` and collects every document, in this context's session when there is one.
    pub(crate) async fn collect<T>(&mut self, find: Find<'_, T>) -> mongodb::error::Result<Vec<T>>
    where
        T: DeserializeOwned + Send + Sync,
    {
        match self.session.as_deref_mut() {
            Some(session) => {
                let mut cursor = find.session(&mut *session).await?;
                cursor.stream(session).try_collect().await
            }
            None => find.await?.try_collect().await,
        }
    }

    /// Runs a `find` and streams its documents, each driver error turned into ours by `error`.
    /// With a session, the stream holds it until the stream is dropped, since every batch after
    /// the first is fetched in it.
    pub(crate) async fn stream<T>(
        self,
        find: Find<'_, T>,
        error: impl Fn(mongodb::error::Error) -> Error + Send + Copy + 's,
    ) -> Result<BoxStream<'s, Result<T>>>
    where
        T: DeserializeOwned + Send + Sync + 's,
    {
        Ok(match self.session {
            Some(session) => {
                let cursor = find.session(&mut *session).await.map_err(error)?;
                futures::stream::unfold(
                    (cursor, session),
                    move |(mut cursor, session)| async move {
                        let next = cursor.next(session).await?;
                        Some((next.map_err(error), (cursor, session)))
                    },
                )
                .boxed()
            }
            None => find.await.map_err(error)?.map_err(error).boxed(),
        })
    }

    /// Runs an `aggregate` and collects every document, in this context's session when there
    /// is one.
    pub(crate) async fn aggregate<T>(
        &mut self,
        aggregate: Aggregate<'_, ImplicitSession, T>,
    ) -> mongodb::error::Result<Vec<T>>
    where
        T: DeserializeOwned + Send + Sync,
    {
        match self.session.as_deref_mut() {
            Some(session) => {
                let mut cursor = aggregate.session(&mut *session).await?;
                cursor.stream(session).try_collect().await
            }
            None => aggregate.await?.try_collect().await,
        }
    }
}

/// A driver action that can be attached to a session (`.session(s)` returning the same action).
pub(crate) trait Step<'a>: IntoFuture + Sized {
    fn in_session(self, session: &'a mut ClientSession) -> Self;
}

macro_rules! steps {
    ($($action:ty),* $(,)?) => {$(
        impl<'a> Step<'a> for $action {
            fn in_session(self, session: &'a mut ClientSession) -> Self {
                self.session(session)
            }
        }
    )*};
}

steps!(
    Update<'a>,
    InsertOne<'a>,
    InsertMany<'a>,
    Delete<'a>,
    ReplaceOne<'a>,
    CountDocuments<'a>,
    RunCommand<'a>,
);

macro_rules! typed_steps {
    ($($action:ident),* $(,)?) => {$(
        impl<'a, T: DeserializeOwned + Send + Sync> Step<'a> for $action<'a, T> {
            fn in_session(self, session: &'a mut ClientSession) -> Self {
                self.session(session)
            }
        }
    )*};
}

typed_steps!(
    FindOne,
    FindOneAndDelete,
    FindOneAndReplace,
    FindOneAndUpdate
);

/// Runs `steps` for `store`, in `caller`'s session if given (see the module docs).
pub(crate) async fn execute<S: Steps>(
    store: &RawStore,
    mut caller: Option<&mut ClientSession>,
    steps: &S,
) -> Result<S::Output> {
    if let Some(session) = caller.as_deref_mut() {
        if in_transaction(session).await {
            // The caller's transaction: its snapshot and its conflicts keep the steps apart
            // from other writers, and it commits or aborts them all.
            return run_and_settle(store, &mut Ctx::new(caller, true, true), steps, None).await;
        }
    }
    let parents = steps.parents();
    let _turns = store.traffic().take(&parents).await;
    match store.mode().await? {
        WriteMode::Ordered => ordered(store, caller, steps, &parents).await,
        WriteMode::Transactional => {
            if store.traffic().contended(&parents) {
                // Hot across processes: a writer that starts the moment the last one
                // committed would win again and again while the losers' retries wait. This
                // one waits a little first, and the writers queued behind it join it.
                polite().await;
            }
            match caller {
                Some(session) => transaction(store, session, steps, &parents).await,
                None => {
                    let client = store.database().client();
                    let mut own = client.start_session().await.map_err(|e| store.mongo(e))?;
                    transaction(store, &mut own, steps, &parents).await
                }
            }
        }
    }
}

/// Runs `steps`, then settles the parents they found outdated, in the same context. Without a
/// transaction, also after steps that failed having written a parent they could not finish (a
/// group commit whose later patch failed, say): they record it as outdated, and settling it
/// from the child collection leaves it exact.
async fn run_and_settle<S: Steps>(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    steps: &S,
    leases: Option<&mut lease::Leases>,
) -> Result<S::Output> {
    let output = steps.run(ctx).await;
    if output.is_err() && ctx.atomic() {
        // The transaction is aborted: nothing of it stays to settle.
        return output;
    }
    if let Some(leases) = leases {
        // Settling recomputes from the child collection: alone, under an exclusive lease.
        let outdated: Vec<Bson> = ctx
            .outdated
            .iter()
            .filter(|p| !ctx.lost.contains(p))
            .cloned()
            .collect();
        if let Err(e) = leases.exclusive(ctx, &outdated).await {
            for parent in &outdated {
                store.model().mark_unsettled(parent).await;
            }
            return output.and(Err(e));
        }
    }
    for parent in std::mem::take(&mut ctx.outdated) {
        if ctx.lost.contains(&parent) {
            continue;
        }
        let settled = store.model().settle(ctx, &parent).await;
        match (&output, settled) {
            (_, Ok(_)) => {}
            // What the steps wrote is what the parent cannot take: without a transaction it
            // goes again, and the parent is settled without it (a transaction just aborts).
            (Ok(_), Err(e)) if !ctx.atomic() && crate::error::driver::was_refused(&e) => {
                steps.take_back(ctx).await?;
                ctx.own.clear();
                if store.model().settle(ctx, &parent).await.is_err() {
                    store.model().mark_unsettled(&parent).await;
                }
                return Err(e);
            }
            (Ok(_), Err(e)) => return Err(e),
            // The steps' own error is what the caller needs to see; the parent is left for
            // the next write or reconcile to rebuild.
            (Err(_), Err(_)) => store.model().mark_unsettled(&parent).await,
        }
    }
    output
}

/// Runs `steps` without a transaction, each declared parent under a lease (see [`lease`]).
async fn ordered<S: Steps>(
    store: &RawStore,
    caller: Option<&mut ClientSession>,
    steps: &S,
    parents: &[&Bson],
) -> Result<S::Output> {
    let mut ctx = Ctx::new(caller, false, false);
    // A lease taken short of its write concern may be held or not: an unknown outcome, as a
    // step's write would be (a retry is safe, and finds the lease given back).
    let mut leases = lease::Leases::take(store, &mut ctx, &ordered_keys(parents), steps.shares())
        .await
        .map_err(Error::into_unknown)?;
    let result = run_and_settle(store, &mut ctx, steps, Some(&mut leases)).await;
    if !parents.is_empty() {
        tracing::Span::current().record("subset.lease_waits", leases.waits());
    }
    // Steps cut off between two writes (a lost connection, a server that went away) may have
    // left a parent behind its children; refusals and the errors steps report before writing
    // leave it as it was.
    let unfinished = result
        .as_ref()
        .err()
        .is_some_and(|e| e.mongo_error().is_some() && !crate::error::driver::was_refused(e));
    leases.release(&ctx.leases, unfinished).await;
    if let Some(parent) = ctx.lost.first() {
        for lost in &ctx.lost {
            store.model().mark_unsettled(lost).await;
        }
        result?;
        return Err(Error::Unsettled {
            collection: store.collection_name().to_owned(),
            id: Box::new(parent.clone()),
        });
    }
    // Without a transaction, a step cut off may have happened: the error says so.
    result.map_err(Error::into_unknown)
}

/// `parents` in the order turns take them (see [`traffic`]), so that leases are taken in it too.
fn ordered_keys<'p>(parents: &[&'p Bson]) -> Vec<&'p Bson> {
    let mut sorted = parents.to_vec();
    sorted.sort_by_cached_key(|p| traffic::ParentKey::of(p));
    sorted.dedup();
    sorted
}

/// Whether the caller's session is in a transaction. The driver keeps that to itself, but
/// `start_transaction` refuses a session that is in one before anything else; when it succeeds
/// instead, the transaction it began exists only on the client (nothing was sent), and
/// aborting it is a client-side reset as well. Any other refusal (a standalone server, a
/// snapshot session, an unacknowledged write concern) means there is no transaction to join.
async fn in_transaction(session: &mut ClientSession) -> bool {
    match session.start_transaction().await {
        Ok(()) => {
            let _ = session.abort_transaction().await;
            false
        }
        Err(e) => matches!(
            e.kind.as_ref(),
            ErrorKind::Transaction { message, .. } if message == "transaction already in progress"
        ),
    }
}

/// Runs `steps` in a transaction of ours on `session`, with the retry loop, and records how
/// many attempts it took on the call's span (`subset.attempts`), whatever the outcome.
async fn transaction<S: Steps>(
    store: &RawStore,
    session: &mut ClientSession,
    steps: &S,
    parents: &[&Bson],
) -> Result<S::Output> {
    let mut attempts = 0;
    let result = attempt_transaction(store, session, steps, parents, &mut attempts).await;
    tracing::Span::current().record("subset.attempts", attempts);
    result
}

/// [`transaction`]'s retry loop; `attempts` counts the transactions started.
async fn attempt_transaction<S: Steps>(
    store: &RawStore,
    session: &mut ClientSession,
    steps: &S,
    parents: &[&Bson],
    attempts: &mut u32,
) -> Result<S::Output> {
    let mongo = |e| store.mongo(e);
    let started = Instant::now();
    'transaction: loop {
        *attempts += 1;
        let attempt = *attempts;
        // The transaction's concerns are ours, not the client's: a snapshot, so that every read
        // of the steps sees one state, and the store's write concern (majority by default).
        session
            .start_transaction()
            .read_concern(ReadConcern::snapshot())
            .write_concern(store.transaction_write_concern().clone())
            .await
            .map_err(mongo)?;
        let output = match run_and_settle(
            store,
            &mut Ctx::new(Some(&mut *session), true, false),
            steps,
            None,
        )
        .await
        {
            Ok(output) => output,
            Err(error) => {
                // Aborting can fail only if the server is gone; the transaction then dies with
                // the session, so the error is still the right thing to report.
                let _ = session.abort_transaction().await;
                if !is_transient(&error) {
                    return Err(error);
                }
                if started.elapsed() >= DEADLINE {
                    return Err(error.into_timeout(DEADLINE));
                }
                if crate::error::driver::is_write_conflict(&error) {
                    store.traffic().contend(parents);
                }
                tracing::debug!(attempt, %error, "transient transaction error, retrying");
                match steps.before_retry(attempt, error).await? {
                    Retry::Again => continue 'transaction,
                    Retry::Done(output) => return Ok(output),
                }
            }
        };
        loop {
            match session.commit_transaction().await {
                Ok(()) => return Ok(output),
                // A commit whose result stayed unknown may have landed.
                Err(e)
                    if started.elapsed() >= DEADLINE
                        && e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) =>
                {
                    return Err(Error::OutcomeUnknown {
                        collection: store.collection_name().to_owned(),
                        source: Box::new(e),
                    })
                }
                Err(e) if started.elapsed() >= DEADLINE => {
                    end_refused(store, session).await;
                    return Err(mongo(e).into_timeout(DEADLINE));
                }
                Err(e) if e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT) => {
                    tracing::debug!(error = %e, "unknown commit result, retrying the commit");
                    backoff(attempt).await;
                }
                Err(e) if e.contains_label(TRANSIENT_TRANSACTION_ERROR) => {
                    tracing::debug!(attempt, error = %e, "transient commit error, retrying");
                    match steps.before_retry(attempt, mongo(e)).await? {
                        Retry::Again => continue 'transaction,
                        Retry::Done(output) => return Ok(output),
                    }
                }
                Err(e) => {
                    end_refused(store, session).await;
                    return Err(mongo(e));
                }
            }
        }
    }
}

/// Ends on the server a transaction of ours whose commit was refused. The driver counts it
/// committed and will not abort it, and left open it holds every document it wrote (every
/// other writer of its parents conflicts with it) until the server's transaction lifetime
/// reaps it (60 s by default). The server aborts a session's open transaction when the session
/// starts the next one, so one read that matches nothing starts it, and an abort ends that.
/// Best effort: if the server cannot be reached, the lifetime still ends it.
async fn end_refused(store: &RawStore, session: &mut ClientSession) {
    if session.start_transaction().await.is_err() {
        return;
    }
    let parents = store.parents::<crate::bson::Document>();
    let nothing = crate::bson::doc! { "_id": { "$in": [] } };
    let _ = parents.find_one(nothing).session(&mut *session).await;
    let _ = session.abort_transaction().await;
}

/// Whether `error` ended a transaction that another attempt may commit.
pub(super) fn is_transient(error: &Error) -> bool {
    error
        .mongo_error()
        .is_some_and(|e| e.contains_label(TRANSIENT_TRANSACTION_ERROR))
}

/// The first backoff's ceiling, and the largest.
const BACKOFF_BASE_MS: u64 = 2;
const BACKOFF_CAP_MS: u64 = 1_000;

/// The longest wait after a write conflict while writers take turns ([`conflict_ceiling_ms`]).
const CONFLICT_CAP_MS: u64 = 16;

/// Conflicts in a row after which a writer is not taking turns with other writers but waiting
/// out a long transaction (a caller's, say): it then backs off as after any transient error.
const TAKING_TURNS: u32 = 64;

/// The longest wait of a writer that lets other processes' writers go first ([`polite`]).
const POLITE_MS: u64 = 4;

/// The ceiling of the wait after a write conflict ended attempt number `attempt`, in ms: it
/// grows for the first attempts (4, 8, 16), so that writers that met spread out, then shrinks
/// (8, 4, 2, 1, then none), so that a writer that kept losing retries before the newer ones,
/// which wait [`polite`]ly, instead of waiting ever longer while they pass it (writers of one
/// parent in several processes then go roughly by age). After [`TAKING_TURNS`] conflicts it
/// grows again, as [`backoff`]'s does.
fn conflict_ceiling_ms(attempt: u32) -> u64 {
    match attempt {
        0..=3 => BACKOFF_BASE_MS << attempt,
        4..=TAKING_TURNS => CONFLICT_CAP_MS >> (attempt - 3).min(63),
        later => backoff_ceiling_ms(later - TAKING_TURNS),
    }
}

/// The wait after a write conflict ended attempt number `attempt` ([`conflict_ceiling_ms`]).
async fn conflict_backoff(attempt: u32) {
    jittered(conflict_ceiling_ms(attempt)).await;
}

/// The wait of a writer whose parent is contended across processes
/// ([`traffic::Traffic::contended`]): long enough for a writer that lost to retry first.
async fn polite() {
    let millis = rand::random_range(1..=POLITE_MS);
    tokio::time::sleep(Duration::from_millis(millis)).await;
}

/// A wait drawn uniformly from zero to `ceiling` ms (full jitter).
async fn jittered(ceiling: u64) {
    let millis = rand::random_range(0..=ceiling);
    tokio::time::sleep(Duration::from_millis(millis)).await;
}

/// [`backoff`]'s ceiling after attempt number `attempt`, in ms.
fn backoff_ceiling_ms(attempt: u32) -> u64 {
    (BACKOFF_BASE_MS << attempt.min(16)).min(BACKOFF_CAP_MS)
}

/// Exponential backoff with full jitter: a wait drawn uniformly from zero to a ceiling that
/// doubles with each attempt. Writers that conflicted on one parent then spread out instead of
/// colliding again, and the ones that drew short waits go first.
pub(super) async fn backoff(attempt: u32) {
    jittered(backoff_ceiling_ms(attempt)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_that_keeps_losing_a_conflict_retries_sooner_until_it_meets_a_long_transaction() {
        let ceilings: Vec<u64> = (1..=TAKING_TURNS + 12).map(conflict_ceiling_ms).collect();
        assert_eq!(ceilings[..8], [4, 8, 16, 8, 4, 2, 1, 0]);
        // Taking turns: retries at once for as long as other writers may be ahead of it.
        let turns = &ceilings[7..TAKING_TURNS as usize];
        assert!(turns.iter().all(|c| *c == 0), "{turns:?}");
        // Then a long transaction in the way: the ordinary backoff, up to its cap.
        let after = &ceilings[TAKING_TURNS as usize..];
        assert_eq!(after[..3], [4, 8, 16]);
        assert!(after.windows(2).all(|w| w[0] <= w[1]), "{after:?}");
        assert_eq!(*after.last().unwrap(), BACKOFF_CAP_MS);
        assert!(ceilings.iter().all(|c| *c <= BACKOFF_CAP_MS));
    }
}
