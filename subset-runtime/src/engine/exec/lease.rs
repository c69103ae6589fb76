//! The lease: without a transaction, the writers of one parent take turns across processes.
//!
//! **Why.** An operation writes the child collection, then the parent. Without a transaction,
//! another writer's steps can land in between: a recompute that reads the already-changed child
//! and writes it into a view, before the first writer's `$inc` of the same copy counts it a
//! second time; a bulk removal that subtracts values it read before a vote changed them.
//! Versioned copies and exactly-once deltas could each close some of these windows, but every
//! pair of operations would need its own argument, and recomputes (which read many children)
//! have no version to compare. Taking turns closes all of them with one argument: while an
//! operation holds a parent's lease, no other writer of the library changes that parent or its
//! children, so the operation's steps run as they would alone, and each operation is exact
//! alone.
//!
//! **How.** The lease is `_subset.l: { o, u }` in the parent: `o` a token naming the holder,
//! `u` when it expires, both set by one conditional update that matches only a parent with no
//! lease or an expired one (the server's clock, `$$NOW`, decides). Every parent update of the
//! holder carries `_subset.l.o: <token>` in its filter (a fence, see
//! [`crate::engine::parent_write`]), and the executor removes the lease when the steps end, in
//! a last update conditional on the token.
//!
//! **Short, and renewed while the holder lives.** A lease lasts [`LEASE`], and a task tied to
//! the holder ([`Leases`]) moves its expiry forward every [`RENEW`], in an update conditional
//! on the token, for as long as the operation runs. A write that ends within [`RENEW`] (nearly
//! every one) sends no renewal at all: the task is aborted before its first tick. A slow holder
//! (a parent update the server holds for seconds) keeps its lease, since the renewals go out on
//! other connections of the pool; a crashed one stops renewing, and its lease lapses within
//! [`LEASE`] of its last renewal, which bounds what it costs the parent's next writer.
//!
//! **When a holder does not finish.** A process that crashes, or an operation that is dropped
//! or fails on the network between its writes, leaves the parent possibly wrong. A holder that
//! fails says so: its lease goes together with the marker's definition, so the parent counts as
//! built under none, readers compute its views from the child collection, and the next writer of
//! the current definition rebuilds it. A holder that vanishes leaves its lease to expire; an
//! expired lease is left only by an unfinished operation, so readers compute the parent's views
//! from the child collection ([`abandoned`]) and the next writer settles the parent after its
//! own steps. A holder whose renewals could not land for a whole [`LEASE`] (a server or network
//! that stalls them) may be overtaken: it then finds its fence gone, its parent update matches
//! nothing, and it marks the parent for a rebuild and reports [`crate::Error::Unsettled`]
//! rather than `Ok`.
//!
//! Within one process, the turns ([`super::traffic`]) decide who goes next, so the lease is only
//! contended between processes, where waiting writers poll it with a short jittered backoff.
//!
//! **Shared by pushes.** Pushes commute: each inserts its own children and sends one `$push`
//! (`$each`/`$sort`/`$slice`) and `$inc`, which the server applies atomically, and the top
//! `keep` of a set does not depend on the order its members arrived in. What they must not
//! meet is a recompute (a removal's refill, a rebuild), which reads the child collection and
//! writes views whole. So steps that say they commute ([`super::Steps::shares`]) take a
//! *shared* lease: a field of their own in the marker, `_subset.l_<token>: <expiry>`, set by
//! one conditional update that matches only while no exclusive lease is there and the parent
//! is not marked for a rebuild (and given back at once if a shared one there has lapsed),
//! fenced and renewed like the exclusive one, and unset by the holder's last parent update (so
//! that a parent's marker is as it was once its pushes are done).
//! Pushes from several processes then write one parent at once, each still marking the
//! parent before its insert. An exclusive taker sets `_subset.l.o` whatever shared entries
//! there are (which stops new ones), then waits for those to be pulled ([`drain`]); a lapsed
//! entry is a push that stopped between its writes, removed by the drain and settled like an
//! expired exclusive lease. A push that cannot share (an exclusive lease there, held or
//! lapsed, or a parent marked for a rebuild) takes the exclusive lease instead.
//!
//! **Why a third round trip** (the lease's, before the child insert): the consistency guide says
//! it once ("Why the third round trip").

use std::time::Duration;

use crate::bson::{doc, oid::ObjectId, Bson, DateTime, Document, RawDocument, RawDocumentBuf};
use mongodb::options::{Acknowledgment, ReturnDocument, WriteConcern};
use tokio::task::AbortHandle;

use super::Ctx;
use crate::engine::model_change::{unmarked, ADOPTING, MARKER};
use crate::engine::parent_write::{add, send_updates};
use crate::engine::RawStore;
use crate::error::Result;

/// How long a lease lasts past its last renewal: what a crashed holder costs the parent's
/// next writer, and how long a live holder's renewals may take to land before it can be
/// overtaken (less [`RENEW`]).
pub(crate) const LEASE: Duration = Duration::from_millis(1_500);

/// How often a holder renews its lease: a third of [`LEASE`], so that two renewals in a row may
/// be late or lost before the lease lapses.
pub(crate) const RENEW: Duration = Duration::from_millis(500);

/// The longest pause between two polls of a lease held by another process.
const POLL_CAP: Duration = Duration::from_millis(20);

/// How often a writer polling a held lease checks that the parent still exists.
const EXISTS_EVERY: u32 = 8;

/// A lease held on one parent: the token naming its holder, and whether it is shared with
/// other holders of steps that commute (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    token: ObjectId,
    shared: bool,
}

impl Lease {
    /// The key of a shared lease in the marker (see [`SHARED`]).
    fn key(self) -> String {
        format!("{SHARED}{}", self.token.to_hex())
    }

    /// Adds the fence to a parent update's `filter`: the update applies only while this lease
    /// is held.
    pub(crate) fn fence(self, filter: &mut Document) {
        match self.shared {
            true => filter.insert(format!("{MARKER}.{}", self.key()), doc! { "$exists": true }),
            false => filter.insert(format!("{MARKER}.l.o"), self.token),
        };
    }

    /// Adds to a holder's last parent update what gives this lease back.
    pub(crate) fn give_back_with(self, update: &mut Document) {
        let field = match self.shared {
            true => format!("{MARKER}.{}", self.key()),
            false => format!("{MARKER}.l"),
        };
        add(update, "$unset", field, Bson::String(String::new()));
    }

    /// Whether `marker` (a stored parent's `_subset`) still holds this lease.
    pub(crate) fn is_held_by(self, marker: Option<&RawDocument>) -> bool {
        let Some(marker) = marker else {
            return false;
        };
        match self.shared {
            true => matches!(marker.get(self.key()), Ok(Some(_))),
            false => {
                let lease = marker.get_document("l").ok();
                lease.and_then(|l| l.get_object_id("o").ok()) == Some(self.token)
            }
        }
    }
}

/// How the keys of shared leases in a marker begin: `l_` and the holder's token in hex, each
/// holding its expiry.
const SHARED: &str = "l_";

/// The expiries of the shared leases in `marker` (a stored parent's `_subset`).
fn shares(marker: &RawDocument) -> impl Iterator<Item = Option<DateTime>> + '_ {
    marker
        .into_iter()
        .flatten()
        .filter(|(key, _)| crate::bson_compat::raw_key(key).starts_with(SHARED))
        .map(|(_, until)| until.as_datetime())
}

/// The leases of one operation, on the parents its steps write, renewed while they are held.
pub(crate) struct Leases {
    store: RawStore,
    held: Vec<Held>,
    released: bool,
    /// How many times a lease was found held by another writer and polled again.
    waits: u32,
}

/// One lease held.
struct Held {
    parent: Bson,
    lease: Lease,
    /// Dropped with the lease's holder, or before the lease is given back.
    _renewal: Renewal,
}

/// The task renewing one lease, stopped when this is dropped (a renewal already sent and
/// landing after the lease is given back finds its token gone, and changes nothing).
struct Renewal(Option<AbortHandle>);

impl Renewal {
    /// Renews `parent`'s lease every [`RENEW`]. A spawn sends nothing: an operation that ends
    /// within [`RENEW`] costs no round trip.
    fn start(store: &RawStore, parent: &Bson, lease: Lease) -> Self {
        // Without a runtime to spawn on (the driver needs one, so never in practice) the lease
        // lasts [`LEASE`], and a longer holder finds its fence gone and reports it.
        let task = tokio::runtime::Handle::try_current()
            .ok()
            .map(|runtime| runtime.spawn(renewals(store.clone(), parent.clone(), lease)));
        Renewal(task.map(|t| t.abort_handle()))
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl Leases {
    /// None held yet, room for `parents` of them.
    fn none(store: &RawStore, parents: usize) -> Leases {
        Leases {
            store: store.clone(),
            held: Vec::with_capacity(parents),
            released: false,
            waits: 0,
        }
    }

    /// Takes a lease on each of `parents` (already in one order, see [`super::traffic`]), waiting
    /// while another process holds one: shared where `shared` and the parent allows it (see the
    /// module docs), else exclusive. A parent that does not exist gets none (the steps report
    /// it). A parent whose lease had lapsed was left unfinished by its holder: it goes into
    /// `ctx` as outdated, for the executor to settle after the steps.
    pub(crate) async fn take(
        store: &RawStore,
        ctx: &mut Ctx<'_>,
        parents: &[&Bson],
        shared: bool,
    ) -> Result<Leases> {
        let mut leases = Leases::none(store, parents.len());
        for parent in parents {
            if leases.held.iter().any(|h| h.parent == **parent) {
                continue;
            }
            leases.hold(ctx, parent, shared).await?;
        }
        ctx.leases = leases
            .held
            .iter()
            .map(|h| (h.parent.clone(), h.lease))
            .collect();
        Ok(leases)
    }

    /// Shared leases on every parent of `parents` in one command, where a lone push sends a
    /// `findAndModify` ([`take_shared`]): a group of pushes to cold parents then pays one round
    /// trip for its leases, not one per parent ([`crate::engine::abreast`]). `None` unless
    /// every one could be shared now (see [`Leases::take_group`]).
    ///
    /// The take matches as [`take_shared`]'s does, and besides only where no shared lease has
    /// lapsed on the server's clock, since the command's reply holds no marker to tell that
    /// by. A parent it misses for that is one a lone push settles.
    pub(crate) async fn share_all(
        store: &RawStore,
        parents: &[&Bson],
    ) -> Result<Option<Vec<(Ctx<'static>, Leases)>>> {
        // `ids`: the `_id` condition of the group's one statement.
        let taken = |ids: &Bson, lease: Lease| {
            let mut filter = shareable(ids);
            filter.insert("$expr", every_share(Share::Live));
            (filter, shared_take(lease))
        };
        Leases::take_group(store, parents, true, taken).await
    }

    /// Exclusive leases on every parent of `parents` in one command, for a group of patches
    /// ([`crate::engine::abreast`]), where a lone patch sends a `findAndModify` per parent
    /// ([`take_one`]). The take matches only a parent marked as built under a definition that
    /// `marked` (the store's condition, [`crate::engine::model_change`]) accepts, with no lease
    /// there at all, exclusive or shared, held or lapsed: a parent with nothing to wait for and
    /// nothing to settle. `None` unless every one was taken (see [`Leases::take_group`]).
    pub(crate) async fn take_all(
        store: &RawStore,
        parents: &[&Bson],
        marked: &Document,
    ) -> Result<Option<Vec<(Ctx<'static>, Leases)>>> {
        let definition = format!("{MARKER}.d");
        let taken = |ids: &Bson, lease: Lease| {
            let built = doc! { definition.as_str(): { "$type": "string" } };
            let filter = doc! {
                "_id": ids.clone(),
                format!("{MARKER}.l"): { "$exists": false },
                "$and": [marked.clone(), built],
                "$expr": { "$eq": [{ "$size": marker_fields(shared_key(true)) }, 0] },
            };
            (filter, exclusive_take(lease.token))
        };
        Leases::take_group(store, parents, false, taken).await
    }

    /// Leases (`shared` or not) on every parent of `parents`, one lease under one token, by
    /// one `update` statement over all of them: `take` gives its filter and update for an `_id`
    /// condition (here `$in` the parents) and the lease. One statement, not one per parent:
    /// the server parses and plans the take's filter once for the group. Each lease is then
    /// held in a [`Ctx`] of its own, with its renewal, and fenced by the parent's `_id` with
    /// the token. `None` unless it matched every parent, with those taken given back in one
    /// more command: each writer then goes its own way.
    async fn take_group(
        store: &RawStore,
        parents: &[&Bson],
        shared: bool,
        take: impl Fn(&Bson, Lease) -> (Document, Vec<Document>),
    ) -> Result<Option<Vec<(Ctx<'static>, Leases)>>> {
        let lease = Lease {
            token: ObjectId::new(),
            shared,
        };
        let ids: Vec<Bson> = parents.iter().map(|p| (*p).clone()).collect();
        let of_all = Bson::Document(doc! { "$in": ids });
        let (q, u) = take(&of_all, lease);
        let statements = vec![doc! { "q": q, "u": u, "multi": true }];
        let concern = acknowledged();
        let sent = send_updates(
            store,
            &mut Ctx::apart(),
            store.collection_name(),
            statements,
            Some(&concern),
        )
        .await;
        let all = matches!(sent, Ok(u) if !u.refused && u.matched == parents.len() as i64);
        if !all {
            // Perhaps applied where it failed: given back, so that nobody waits for one to
            // lapse (a parent whose lease this did not take is left as it was, by the fence).
            let mut u = Document::new();
            lease.give_back_with(&mut u);
            let back = vec![doc! { "q": fenced(&of_all, lease), "u": u, "multi": true }];
            let given = send_updates(
                store,
                &mut Ctx::apart(),
                store.collection_name(),
                back,
                Some(&concern),
            )
            .await;
            if let Err(e) = given {
                tracing::warn!(collection = store.collection_name(), error = %e, "could not give a group's leases back; they will expire");
            }
            return sent.map(|_| None);
        }
        let taken = parents
            .iter()
            .map(|parent| {
                let mut ctx = Ctx::apart();
                let mut held = Leases::none(store, 1);
                held.keep(parent, lease);
                ctx.leases = vec![((*parent).clone(), lease)];
                (ctx, held)
            })
            .collect();
        Ok(Some(taken))
    }

    /// Takes `parent`'s lease into `self.held` (see [`Leases::take`]).
    async fn hold(&mut self, ctx: &mut Ctx<'_>, parent: &Bson, shared: bool) -> Result<()> {
        let store = self.store.clone();
        if shared {
            if let Some(lease) = take_shared(&store, ctx, parent).await? {
                self.keep(parent, lease);
                return Ok(());
            }
        }
        loop {
            let Some((token, sharers)) = take_one(&store, ctx, parent, &mut self.waits).await?
            else {
                return Ok(());
            };
            let lease = Lease {
                token,
                shared: false,
            };
            // Renewed from here on: the shared holders may take a while to finish.
            self.keep(parent, lease);
            if !sharers {
                return Ok(());
            }
            match drain(&store, ctx, parent, lease, &mut self.waits).await {
                Ok(Drained::Done) => return Ok(()),
                Ok(Drained::Gone) => {
                    self.held.pop();
                    return Ok(());
                }
                // Overtaken while waiting (its renewals could not land): nothing was written,
                // so it takes the lease again.
                Ok(Drained::Lost) => {
                    self.held.pop();
                }
                Err(e) => {
                    self.held.pop();
                    give_back(&store, parent.clone(), lease, false).await;
                    return Err(e);
                }
            }
        }
    }

    /// Records `lease` on `parent` as held, and starts renewing it.
    fn keep(&mut self, parent: &Bson, lease: Lease) {
        self.held.push(Held {
            parent: parent.clone(),
            lease,
            _renewal: Renewal::start(&self.store, parent, lease),
        });
    }

    /// Turns the shared leases on `parents` exclusive: steps that found a parent outdated under
    /// a shared lease settle it (a recompute from the child collection), which must wait for
    /// the other holders and run alone. The shared lease is given back first (the steps wrote
    /// nothing more to the parent), then the exclusive one is taken as any writer takes it.
    pub(crate) async fn exclusive(&mut self, ctx: &mut Ctx<'_>, parents: &[Bson]) -> Result<()> {
        for parent in parents {
            let Some(i) = self
                .held
                .iter()
                .position(|h| h.parent == *parent && h.lease.shared)
            else {
                continue;
            };
            let held = self.held.remove(i);
            ctx.leases.retain(|(p, _)| p != parent);
            give_back(&self.store, parent.clone(), held.lease, false).await;
            drop(held);
            self.hold(ctx, parent, false).await?;
            if let Some(h) = self.held.iter().find(|h| h.parent == *parent) {
                ctx.leases.push((parent.clone(), h.lease));
            }
        }
        Ok(())
    }

    /// How many times the leases were found held by another writer, each a poll more: the
    /// contention across processes that the call's span reports (`subset.lease_waits`).
    pub(crate) fn waits(&self) -> u32 {
        self.waits
    }

    /// Gives the leases back: cleanly after steps that finished, or, after steps that failed
    /// between their writes (`unfinished`), with each parent marked as built under no
    /// definition, for readers to compute and the next writer to rebuild.
    /// `held`: the leases the steps still hold (a last write may have given some back).
    pub(crate) async fn release(mut self, held: &[(Bson, Lease)], unfinished: bool) {
        self.released = true;
        for h in std::mem::take(&mut self.held) {
            if held.iter().any(|(_, l)| *l == h.lease) {
                give_back(&self.store, h.parent, h.lease, unfinished).await;
            }
        }
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        if self.released || self.held.is_empty() {
            return;
        }
        // Dropped mid-way (the caller's future was cancelled): the steps may have stopped
        // between two writes. Give the leases back as unfinished rather than make the next
        // writer wait for them to expire.
        let store = self.store.clone();
        let held: Vec<(Bson, Lease)> = std::mem::take(&mut self.held)
            .into_iter()
            .map(|h| (h.parent, h.lease))
            .collect();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for (parent, lease) in held {
                    give_back(&store, parent, lease, true).await;
                }
            });
        }
    }
}

/// Renews `parent`'s lease every [`RENEW`], each time by an update conditional on its token,
/// until aborted or until the update no longer finds it (given back by the holder's last write,
/// or lost). A renewal that fails is tried again at the next tick, while the lease still runs.
async fn renewals(store: RawStore, parent: Bson, lease: Lease) {
    let start = tokio::time::Instant::now() + RENEW;
    let mut ticks = tokio::time::interval_at(start, RENEW);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !renew_one(&store, &parent, lease).await {
            return;
        }
    }
}

/// Moves the expiry of `parent`'s lease [`LEASE`] past the server's clock, if the lease is
/// still `token`'s. Whether to renew it again: not once the update finds it gone.
#[tracing::instrument(skip_all, fields(collection = store.collection_name(), parent = %parent))]
async fn renew_one(store: &RawStore, parent: &Bson, lease: Lease) -> bool {
    let filter = fenced(parent, lease);
    let until = doc! { "$add": ["$$NOW", lease_millis()] };
    let renew = match lease.shared {
        false => vec![doc! { "$set": { format!("{MARKER}.l.u"): until } }],
        true => vec![doc! { "$set": { format!("{MARKER}.{}", lease.key()): until } }],
    };
    // A `findAndModify`, as the take is: a fail point or a profile that singles out a parent's
    // `update`s (the steps' own) leaves the lease's commands alone.
    let parents = store.parents::<Document>();
    let renewal = parents
        .find_one_and_update(filter, renew)
        .write_concern(acknowledged())
        .projection(doc! { "_id": 1 });
    match renewal.await {
        Ok(renewed) => renewed.is_some(),
        Err(e) => {
            tracing::debug!(error = %e, "could not renew a lease; trying again");
            true
        }
    }
}

/// Whether `marker` (a stored parent's `_subset`) holds a lease past its expiry: one whose
/// holder stopped between its writes (crashed, or cut off for longer than [`LEASE`]), so that
/// its views may lag the child collection and readers compute them from it. A lease still
/// running is a write under way, whose holder renews it: its views are the parent before that
/// write, as a read that came first would see it.
///
/// The expiry was set on the server's clock and is compared with this process's: a clock
/// ahead of the server's computes a parent whose holder is alive (a query more, the same
/// answer); one behind trusts the views of a crashed holder's parent for that much longer.
pub(crate) fn abandoned(marker: &RawDocument) -> bool {
    let now = DateTime::now().timestamp_millis();
    let lapsed = |u: Option<DateTime>| u.is_some_and(|u| u.timestamp_millis() <= now);
    let exclusive = marker
        .get_document("l")
        .ok()
        .and_then(|lease| lease.get_datetime("u").ok());
    lapsed(exclusive) || shares(marker).any(lapsed)
}

/// [`LEASE`] in milliseconds, as the server's date arithmetic takes it.
fn lease_millis() -> i64 {
    i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// The aggregation expression of the marker's fields, as `{ k, v }` pairs, that `keep` (an
/// expression of `$$this.k`, the key) holds for: none where the marker is no document.
fn marker_fields(keep: Document) -> Document {
    let marker = format!("${MARKER}");
    let object = doc! { "$eq": [{ "$type": marker.as_str() }, "object"] };
    doc! { "$filter": {
        "input": { "$objectToArray": { "$cond": [object, marker.as_str(), {}] } },
        "cond": keep,
    } }
}

/// The condition on a marker key (`$$this.k`) of being a shared lease's, or (`shared` false)
/// of not being one.
fn shared_key(shared: bool) -> Document {
    let prefix = doc! { "$substrBytes": ["$$this.k", 0, SHARED.len() as i32] };
    match shared {
        true => doc! { "$eq": [prefix, SHARED] },
        false => doc! { "$ne": [prefix, SHARED] },
    }
}

/// What [`every_share`] asks of each shared lease.
#[derive(Clone, Copy)]
enum Share {
    /// Past its expiry.
    Lapsed,
    /// Not yet expired.
    Live,
}

/// The `$expr` that holds when every shared lease in a parent's marker is `share` on the
/// server's clock: true with none.
fn every_share(share: Share) -> Document {
    let compare = match share {
        Share::Lapsed => "$lte",
        Share::Live => "$gt",
    };
    doc! { "$allElementsTrue": [{ "$map": {
        "input": marker_fields(shared_key(true)),
        "in": { compare: ["$$this.v", "$$NOW"] },
    } }] }
}

/// The filter of a shared take of `parent` (an `_id`, or an `_id` condition for a group): not
/// marked for a rebuild, no exclusive lease there (held or lapsed), and a marker that is a
/// document or none.
fn shareable(parent: &Bson) -> Document {
    doc! {
        "_id": parent.clone(),
        format!("{MARKER}.d"): { "$ne": "" },
        format!("{MARKER}.l.o"): { "$exists": false },
        // Never onto a marker that is no document (malformed: reported, not overwritten).
        "$or": [{ MARKER: { "$exists": false } }, { MARKER: { "$type": "object" } }],
    }
}

/// The update that takes `lease` (shared), expiring [`LEASE`] from now on the server's clock.
fn shared_take(lease: Lease) -> Vec<Document> {
    let until = doc! { "$add": ["$$NOW", lease_millis()] };
    vec![doc! { "$set": { format!("{MARKER}.{}", lease.key()): until } }]
}

/// Takes a shared lease on `parent`: only where it is not marked for a rebuild and no exclusive
/// lease is there (held or lapsed); `None` otherwise, for the exclusive lease to be taken
/// instead. A shared lease found lapsed (on this process's clock, as readers tell, see
/// [`abandoned`]) is a push that did not finish: the lease just taken goes back, and the
/// exclusive one, which settles the parent, is taken instead. The lapse is told here rather
/// than in the update's filter, where the expression over the marker's keys cost the server
/// about a sixth of the take. On a parent without a marker the key creates one, left empty once
/// the holders are gone: a marker without a definition, which counts as none (as the touch of
/// a transaction does). A `findAndModify`, as every lease command is (see [`renew_one`]).
async fn take_shared(store: &RawStore, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Option<Lease>> {
    let lease = Lease {
        token: ObjectId::new(),
        shared: true,
    };
    let parents = store.parents::<RawDocumentBuf>();
    let taken = parents
        .find_one_and_update(shareable(parent), shared_take(lease))
        .write_concern(acknowledged())
        .projection(doc! { MARKER: 1 })
        .return_document(ReturnDocument::Before);
    match ctx.run(taken).await {
        Ok(None) => Ok(None),
        Ok(Some(before)) => match before.get_document(MARKER) {
            Ok(marker) if abandoned(marker) => {
                give_back(store, parent.clone(), lease, false).await;
                Ok(None)
            }
            _ => Ok(Some(lease)),
        },
        Err(e) => {
            // Perhaps applied: given back, so that nobody waits for it to lapse.
            give_back(store, parent.clone(), lease, false).await;
            Err(store.mongo(e))
        }
    }
}

/// What waiting for a parent's shared holders came to.
enum Drained {
    /// None is left: the exclusive holder's steps may run.
    Done,
    /// The parent is gone.
    Gone,
    /// The exclusive lease was lost meanwhile.
    Lost,
}

/// Waits, holding `parent`'s exclusive `lease`, until no shared holder is left but
/// lapsed ones, which only a push that stopped between its writes leaves: those are removed in
/// the same update (a slow holder's fence then fails, and it reports it), and the parent goes
/// into `ctx` as outdated, to be settled after the steps.
async fn drain(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    parent: &Bson,
    lease: Lease,
    waits: &mut u32,
) -> Result<Drained> {
    let mut filter = fenced(parent, lease);
    filter.insert("$expr", every_share(Share::Lapsed));
    // The marker without the lapsed shared leases.
    let rest = doc! { "$arrayToObject": marker_fields(shared_key(false)) };
    let strip = vec![doc! { "$set": { MARKER: rest } }];
    let parents = store.parents::<RawDocumentBuf>();
    let mut attempt = 0_u32;
    loop {
        let drained = parents
            .find_one_and_update(filter.clone(), strip.clone())
            .write_concern(acknowledged())
            .projection(doc! { MARKER: 1 })
            .return_document(ReturnDocument::Before);
        if let Some(before) = ctx.run(drained).await.map_err(|e| store.mongo(e))? {
            let lapsed = before
                .get_document(MARKER)
                .is_ok_and(|m| shares(m).next().is_some());
            if lapsed {
                tracing::debug!(parent = %parent, "a lapsed shared lease: a push did not finish");
                ctx.outdated(parent);
            }
            return Ok(Drained::Done);
        }
        attempt += 1;
        *waits += 1;
        if attempt.is_multiple_of(EXISTS_EVERY) {
            let holder = parents
                .find_one(doc! { "_id": parent.clone() })
                .projection(doc! { format!("{MARKER}.l.o"): 1 });
            let Some(found) = ctx.run(holder).await.map_err(|e| store.mongo(e))? else {
                return Ok(Drained::Gone);
            };
            if !lease.is_held_by(found.get_document(MARKER).ok()) {
                return Ok(Drained::Lost);
            }
        }
        poll(attempt).await;
    }
}

/// The pause before poll number `attempt` of a lease: full jitter under a ceiling that doubles
/// up to [`POLL_CAP`].
async fn poll(attempt: u32) {
    let ceiling = (1_u64 << attempt.min(5)).min(POLL_CAP.as_millis() as u64);
    tokio::time::sleep(Duration::from_millis(rand::random_range(1..=ceiling))).await;
}

/// Takes `parent`'s exclusive lease; `None` when there is no such parent. Counts in `waits`
/// each time it finds the lease held by another writer. With the token, whether shared holders
/// were there, for [`drain`] to wait for.
async fn take_one(
    store: &RawStore,
    ctx: &mut Ctx<'_>,
    parent: &Bson,
    waits: &mut u32,
) -> Result<Option<(ObjectId, bool)>> {
    let lease = format!("{MARKER}.l");
    let until = format!("${lease}.u");
    let free = doc! { "_id": parent.clone(), "$expr": { "$not": [{ "$gt": [until, "$$NOW"] }] } };
    let parents = store.parents::<Document>();
    let mut attempt = 0_u32;
    loop {
        let token = ObjectId::new();
        let taken = parents
            .find_one_and_update(free.clone(), exclusive_take(token))
            .write_concern(acknowledged())
            .projection(doc! { MARKER: 1 })
            .return_document(ReturnDocument::Before);
        let taken = match ctx.run(taken).await {
            Ok(taken) => taken,
            Err(e) => {
                // Perhaps applied (short of its write concern, or its reply lost): given back,
                // so that nobody waits for it to expire.
                let lease = Lease {
                    token,
                    shared: false,
                };
                give_back(store, (*parent).clone(), lease, false).await;
                return Err(store.mongo(e));
            }
        };
        if let Some(before) = taken {
            let marker = before.get_document(MARKER).ok();
            let expired = marker
                .and_then(|m| m.get_document("l").ok())
                .is_some_and(|l| l.contains_key("o"));
            if expired {
                tracing::debug!(parent = %parent, "an expired lease: the last writer did not finish");
                ctx.outdated(parent);
            }
            let sharers = marker.is_some_and(|m| m.keys().any(|k| k.starts_with(SHARED)));
            // No marker but leases: the `_subset` they create goes with the last.
            let bare = before.get(MARKER).is_none()
                || marker.is_some_and(|m| m.keys().all(|k| k == "l" || k.starts_with(SHARED)));
            if bare {
                ctx.bare.push((*parent).clone());
            }
            return Ok(Some((token, sharers)));
        }
        // Held, or no such parent: asked the first time, and every few polls after (a parent
        // deleted meanwhile), so that a poll is one command.
        if attempt.is_multiple_of(EXISTS_EVERY) {
            let exists = parents
                .find_one(doc! { "_id": parent.clone() })
                .projection(doc! { "_id": 1 });
            if ctx.run(exists).await.map_err(|e| store.mongo(e))?.is_none() {
                return Ok(None);
            }
        }
        if attempt == 0 {
            // Once per parent: the span (where the parent's `_id` is, when safe to log) counts
            // the polls that follow.
            tracing::debug!("a parent's lease is held by another writer; waiting for it");
        }
        attempt += 1;
        *waits += 1;
        poll(attempt).await;
    }
}

/// The update that takes the exclusive lease as `token`, expiring [`LEASE`] from now on the
/// server's clock.
fn exclusive_take(token: ObjectId) -> Vec<Document> {
    vec![doc! { "$set": {
        format!("{MARKER}.l.o"): token,
        format!("{MARKER}.l.u"): { "$add": ["$$NOW", lease_millis()] },
    } }]
}

/// The write concern of the lease's own writes (take, renewal, giving back): acknowledged by
/// the primary, neither journaled nor replicated first, which saves a push waiting on the
/// journal or the secondaries a third time. Nothing is lost by it:
///
/// - the step after a take is durable under the store's concern, and the journal and the oplog
///   are written in order, so that step's durability covers the take before it;
/// - a take a crash or a rollback loses before any step landed leaves a parent nobody changed;
/// - one lost after a step landed (a failover between the two) leaves the next step's fence
///   unmatched: the holder marks the parent for a rebuild and reports [`crate::Error::Unsettled`],
///   as a holder overtaken does;
/// - a renewal or a giving back that is lost leaves a lease that expires, which readers and the
///   next writer take for an unfinished write: they compute, and it rebuilds.
fn acknowledged() -> WriteConcern {
    WriteConcern::builder()
        .w(Acknowledgment::Nodes(1))
        .journal(false)
        .build()
}

/// The filter of an update that applies only while `lease` on `parent` is held.
fn fenced(parent: &Bson, lease: Lease) -> Document {
    let mut filter = doc! { "_id": parent.clone() };
    lease.fence(&mut filter);
    filter
}

/// The update that gives back the shared `lease`: its own entry alone (the other holders keep
/// theirs), with the marker's definition when the holder did not finish.
fn shared_give_back(lease: Lease, unfinished: bool) -> Document {
    let mut update = match unfinished {
        true => unmarked(ObjectId::new()),
        false => Document::new(),
    };
    lease.give_back_with(&mut update);
    update
}

/// Removes `parent`'s lease if it is still held: with the marker's definition when the holder
/// did not finish. A shared one takes only its own entry (the other holders keep theirs).
async fn give_back(store: &RawStore, parent: Bson, lease: Lease, unfinished: bool) {
    let filter = fenced(&parent, lease);
    let parents = store.parents::<Document>();
    let given = if lease.shared {
        parents
            .update_one(filter, shared_give_back(lease, unfinished))
            .write_concern(acknowledged())
    } else if unfinished {
        // The marker replaced, but for the marks of adoptions under way (`a_<field>`), which
        // keep a rebuild from dropping the children only the parent's array holds.
        let prefix = doc! { "$substrBytes": ["$$this.k", 0, ADOPTING.len() as i32] };
        let adoptions = marker_fields(doc! { "$eq": [prefix, ADOPTING] });
        let none = doc! { "d": "", "n": ObjectId::new() };
        let marker =
            doc! { "$mergeObjects": [{ "$arrayToObject": adoptions }, { "$literal": none }] };
        parents
            .update_one(filter, vec![doc! { "$set": { MARKER: marker } }])
            .write_concern(acknowledged())
    } else {
        // The lease goes, and with it a `_subset` that held nothing else (a parent the lease
        // found without a marker), so that the parent is left as it was found.
        let lease = format!("{MARKER}.l");
        let marker = format!("${MARKER}");
        let emptied = doc! { "$eq": [marker.as_str(), { "$literal": {} }] };
        let give_back = vec![
            doc! { "$unset": lease },
            doc! { "$set": { MARKER: { "$cond": [emptied, "$$REMOVE", marker.as_str()] } } },
        ];
        parents
            .update_one(filter, give_back)
            .write_concern(acknowledged())
    };
    if let Err(e) = given.await {
        // The lease expires by itself, and the next writer then settles the parent.
        tracing::warn!(collection = store.collection_name(), parent = %parent, error = %e, "could not give a lease back; it will expire");
    }
}
