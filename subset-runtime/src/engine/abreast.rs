//! Writes to several parents together (group commit across parents, see
//! [`super::exec::traffic::Across`]): the pushes and the patches queued on each parent in this
//! process. In a transaction: one update for every parent, one update per child collection for
//! the patches' children (after one `find` of them, for patches whose views re-rank in place),
//! one insert per child collection for the pushes' and the commit,
//! whatever the number of parents. Without transactions, pushes in three round trips for all
//! (every shared lease in one update, one insert, one update), patches in four (every exclusive
//! lease in one update, one `find` of their children, one update per equal patch, one update of
//! the parents); see [`exec::lease`].

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use crate::bson::{doc, Bson, Document, RawDocumentBuf};

use super::batch::Prepared;
use super::exec::lease::{Lease, Leases};
use super::exec::{self, Ctx, Retry, Steps};
use super::model_change::MARKER;
use super::parent_write::{parent_statement, send_updates, ParentUpdate};
use super::patch::{apply_all, as_found, put_back, read_all, ChildPatch, GroupWrites};
use super::push::PushSteps;
use super::query;
use super::{RawChildren, RawStore, WriteMode};
use crate::error::driver::{self, InsertFailure};
use crate::error::{Error, Result};
use futures::future::join_all;

/// The work queued on one parent, through the field `field`, as it waits to be written with
/// other parents'.
pub(super) struct Aboard {
    pub(super) field: &'static str,
    pub(super) parent: Bson,
    pub(super) cargo: Cargo,
    /// Its result, when a group that then failed for others wrote it, or left it where only
    /// this answer is right: its writer returns that rather than write it alone (a patch
    /// would apply twice).
    settled: Mutex<Option<Result<()>>>,
}

/// What one writer of a group brings.
pub(super) enum Cargo {
    /// Pushes: their children.
    Pushes(Arc<[Prepared]>),
    /// Patches of children that no view needs as they were, or needs only to re-rank in
    /// place ([`GroupWrites`]).
    Patches(Vec<(Bson, ChildPatch)>),
}

impl Aboard {
    /// `cargo` for `parent`, through the field `field`.
    pub(super) fn new(field: &'static str, parent: Bson, cargo: Cargo) -> Self {
        Aboard {
            field,
            parent,
            cargo,
            settled: Mutex::new(None),
        }
    }

    /// Records what came of its work in a group that fails for others (see [`Aboard::settled`]).
    fn settle(&self, result: Result<()>) {
        *self.settled.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
    }

    /// What a group recorded of its work, once.
    fn settled(&self) -> Option<Result<()>> {
        self.settled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The children it pushes: none for patches.
    fn pushes(&self) -> &[Prepared] {
        match &self.cargo {
            Cargo::Pushes(children) => children,
            Cargo::Patches(_) => &[],
        }
    }
}

impl RawStore {
    /// Writes `aboard` with the work queued for other parents while another group is in flight
    /// ([`super::exec::traffic::Across`]): in one transaction, or without transactions in three
    /// round trips ([`write_ordered`]); alone (and when that group fails) with `alone`, under
    /// the writer's own turn.
    pub(super) async fn ride<A, AF>(&self, aboard: Aboard, alone: A) -> Result<()>
    where
        A: Fn(Arc<Aboard>) -> AF,
        AF: Future<Output = Result<()>>,
    {
        let aboard = Arc::new(aboard);
        let ordered = self.mode().await? == WriteMode::Ordered;
        let together = |all: Vec<Arc<Aboard>>| async move {
            match ordered {
                true => write_ordered(self, &all).await,
                false => self.write_abreast(&all).await,
            }
        };
        let alone = &alone;
        let alone = |aboard: Arc<Aboard>| async move {
            match aboard.settled() {
                Some(result) => result,
                None => alone(aboard).await,
            }
        };
        self.shared.across.ride(aboard, together, alone).await
    }

    /// The work of `all` (each for another parent, whose turn its writer holds) in one
    /// transaction of ours, tried again on a write conflict ([`GROUP_ATTEMPTS`]). Any other
    /// error ends it, and the caller has each writer write alone, for its own result.
    async fn write_abreast(&self, all: &[Arc<Aboard>]) -> Result<()> {
        let subsets = aboard(self, all)?;
        let abreast = Abreast {
            store: self,
            subsets: &subsets,
        };
        exec::execute(self, None, &abreast).await
    }
}

/// The subsets `all` push through (fields of `store`), each with its work.
fn aboard<'s>(
    store: &'s RawStore,
    all: &'s [Arc<Aboard>],
) -> Result<Vec<(RawChildren<'s>, &'s Aboard)>> {
    let specs = &store.spec().subsets;
    let subsets: Vec<(RawChildren<'_>, &Aboard)> = all
        .iter()
        .filter_map(|a| {
            let spec = specs.iter().find(|s| s.field == a.field)?;
            Some((store.children(spec), &**a))
        })
        .collect();
    if subsets.len() < all.len() {
        // Work through a field this store does not have (never: each writer's field is
        // one of the store's): each writer writes its own, and gets its own answer.
        return Err(Error::PartialModel {
            collection: store.collection_name().to_owned(),
        });
    }
    Ok(subsets)
}

/// The work of `all` without a transaction, in three round trips whatever their number:
/// every parent's shared lease in one update ([`Leases::share_all`]), one insert of every
/// child per child collection, then one update of every parent. The pushes commute
/// (see [`exec::lease`]), so the group is as exact as each push alone. Where anything does
/// not go as a lone push's first try would (a lease that cannot be shared now, an insert or
/// an update refused, missing or cut off), it leaves each parent as a lone push would
/// leave it after that failure and returns an error: each writer then writes alone, for
/// its own answer (a push already written finds its children stored and embedded, and
/// changes nothing).
async fn write_ordered(store: &RawStore, all: &[Arc<Aboard>]) -> Result<()> {
    let subsets = aboard(store, all)?;
    let patches = all
        .iter()
        .filter(|a| matches!(a.cargo, Cargo::Patches(_)))
        .count();
    if patches == all.len() {
        return patch_ordered(store, &subsets).await;
    }
    if patches > 0 {
        // Pushes share their leases, patches take them alone: each writer goes its own way.
        return Err(together(store));
    }
    let parents: Vec<&Bson> = subsets.iter().map(|(_, a)| &a.parent).collect();
    let Ok(Some(taken)) = Leases::share_all(store, &parents).await else {
        return Err(together(store));
    };
    let mut riders: Vec<Rider<'_, '_>> = taken
        .into_iter()
        .zip(&subsets)
        .map(|((ctx, leases), (subset, aboard))| Rider {
            ctx,
            leases,
            subset,
            aboard,
            unfinished: false,
        })
        .collect();
    if let Err(unknown) = insert_all(&riders).await {
        // What the insert wrote is unknown: the parents are marked for a rebuild, which
        // each writer's own push then settles.
        release_all(riders, |_| unknown).await;
        return Err(together(store));
    }
    let written = update_all(store, &mut riders).await;
    if written.iter().all(|w| *w == Fate::Written) {
        release_all(riders, |_| false).await;
        return Ok(());
    }
    for (r, fate) in riders.iter_mut().zip(&written) {
        if *fate == Fate::TakenBack {
            let ids = r.aboard.pushes().iter().map(|p| p.id.clone()).collect();
            let owned = query::owned(r.subset.spec(), &r.aboard.parent, ids);
            let children = r.subset.children::<crate::bson::Document>();
            if r.ctx.run(children.delete_many(owned)).await.is_err() {
                r.unfinished = true;
            }
        }
        r.unfinished |= *fate == Fate::Unfinished;
    }
    // A parent whose lease another writer took (its update wrote nothing, its children are
    // stored) is marked whatever holds its lease now, as a lone push marks it.
    let lost: Vec<Bson> = riders
        .iter()
        .filter(|r| r.ctx.is_lost(&r.aboard.parent))
        .map(|r| r.aboard.parent.clone())
        .collect();
    release_all(riders, |r| r.unfinished).await;
    for parent in &lost {
        store.model().mark_unsettled(parent).await;
    }
    Err(together(store))
}

/// The patches of `subsets` without a transaction, in four round trips whatever the number of
/// parents: every parent's exclusive lease in one update ([`Leases::take_all`]), every child as
/// it is in one `find`, each equal patch applied to all its children in one update, then every
/// parent in one update that gives its lease back. Under the leases nobody else changes those
/// children, so the `find` tells what each patch moves, as a `findAndModify` would.
///
/// Each writer ends with the answer a lone run would give, and no patch applies twice:
///
/// - a lease that cannot be taken now, a child collection of its own, or a `find` that fails:
///   nothing is written, and each writer goes alone;
/// - a writer whose child is missing: it goes alone, for its own error, and the others go on;
/// - an increment out of range, or a child update that fails: every child goes back as it was,
///   and each writer goes alone;
/// - a parent its update missed: its children are put back, and its writer goes alone (a
///   refusal is then its own answer);
/// - a parent update cut off (its reply lost): its children are changed, its parent marked for
///   a rebuild where the update did not land (reads compute its views, its next writer rebuilds
///   them), and its writer gets [`Error::OutcomeUnknown`], as after a lone run cut off;
/// - a parent whose lease lapsed and was taken by another writer (which settles it): its
///   writer gets [`Error::Unsettled`], as a lone run overtaken;
/// - children changed that cannot be put back: nobody knows which patches applied, and the
///   writer gets [`Error::OutcomeUnknown`], its parent marked for a rebuild.
///
/// A writer whose answer is known is told it through its [`Aboard`] when the group as a whole
/// returns an error, which sends the others alone.
async fn patch_ordered(store: &RawStore, subsets: &[(RawChildren<'_>, &Aboard)]) -> Result<()> {
    let Some((first, _)) = subsets.first() else {
        return Ok(());
    };
    let collection = first.spec().child_collection;
    let mut writes = Vec::with_capacity(subsets.len());
    let ranks = store.sorts_arrays_known();
    for (subset, aboard) in subsets {
        let blind = match &aboard.cargo {
            Cargo::Patches(patches) if subset.spec().child_collection == collection => {
                GroupWrites::of(subset, &aboard.parent, patches, ranks)
            }
            _ => None,
        };
        let Some(blind) = blind else {
            return Err(together(store));
        };
        writes.push(blind);
    }
    let marked = store.model().marked(&*store.model().registry().await?);
    let parents: Vec<&Bson> = subsets.iter().map(|(_, a)| &a.parent).collect();
    let Ok(Some(taken)) = Leases::take_all(store, &parents, &marked).await else {
        return Err(together(store));
    };
    let of_parents: Vec<Document> = subsets
        .iter()
        .zip(&writes)
        .map(|((subset, aboard), write)| write.owned(subset, &aboard.parent))
        .collect();
    let found = read_all(first, &mut Ctx::apart(), doc! { "$or": of_parents }).await;
    let mut riders = Vec::with_capacity(subsets.len());
    let mut done = Vec::new();
    for (((ctx, leases), write), (subset, aboard)) in taken.into_iter().zip(writes).zip(subsets) {
        let Ok(found) = &found else {
            done.push((ctx, leases, false));
            continue;
        };
        let changed = as_found(&write.each, found).ok();
        // A view re-ranked from the children as they were.
        let update = match (write.reranks, &changed) {
            (true, Some(changed)) => write.rerank(subset, &aboard.parent, changed),
            (true, None) => None,
            (false, _) => Some(write.parent),
        };
        match (changed, update) {
            (Some(changed), Some(update)) => riders.push(PatchRider {
                ctx,
                leases,
                changed,
                update,
                each: write.each,
                subset,
                aboard,
            }),
            // A child missing, or a patch that does not raise its child where a view
            // re-ranks: alone, for its own error or its own recompute.
            _ => done.push((ctx, leases, false)),
        }
    }
    let changes: Vec<(&Bson, &Document, &ChildPatch)> = riders
        .iter()
        .flat_map(|r| r.changed.iter().zip(&r.each).map(|c| (&r.aboard.parent, c)))
        .map(|(parent, ((_, before), (_, patch)))| (parent, before, patch))
        .collect();
    let applied = match changes.is_empty() {
        true => Ok(Err(together(store))),
        false => apply_all(first, &changes).await,
    };
    match applied {
        Ok(Ok(())) => {}
        // Nothing written: every child is as it was.
        Ok(Err(_)) => {
            done.extend(riders.into_iter().map(|r| (r.ctx, r.leases, false)));
            release_done(done).await;
            return Err(together(store));
        }
        // A put-back failed: nobody knows which patches applied.
        Err(e) => {
            for r in riders {
                r.aboard.settle(Err(unknown(store, &e)));
                done.push((r.ctx, r.leases, true));
            }
            release_done(done).await;
            return Err(together(store));
        }
    }
    // Each parent update as one statement; a parent with nothing to write (no view shows what
    // changed) only gives its lease back, and one whose statement cannot be sent is written
    // alone, where its failure is its own answer.
    let mut fates = vec![Parent::Unwritten; riders.len()];
    let mut statements = Vec::with_capacity(riders.len());
    let mut sent = Vec::with_capacity(riders.len());
    for (i, r) in riders.iter_mut().enumerate() {
        let update = ParentUpdate {
            last: true,
            ..std::mem::take(&mut r.update)
        };
        match parent_statement(store, &r.ctx, &r.aboard.parent, update).await {
            Ok(Some(statement)) if statement.release => {
                sent.push(i);
                statements.push(statement.command());
            }
            Ok(None) => fates[i] = Parent::Written,
            _ => {}
        }
    }
    // The error of an update of the parents cut off: nobody knows what it wrote.
    let mut cut = None;
    if !statements.is_empty() {
        let parents = store.collection_name();
        let written = send_updates(store, &mut Ctx::apart(), parents, statements, None).await;
        match written {
            Ok(u) if u.matched == sent.len() as i64 => {
                for &i in &sent {
                    let r = &mut riders[i];
                    r.ctx.released(&r.aboard.parent);
                    fates[i] = Parent::Written;
                }
            }
            // Those still holding their lease were not written. The others were, unless more
            // lost their lease than were written (taken over once lapsed): then nobody knows
            // which, and those are each reported as overtaken.
            Ok(u) => {
                let sent_riders = sent.iter().map(|&i| (&riders[i].ctx, riders[i].aboard));
                let held = still_held(store, sent_riders).await;
                let gone = held.iter().filter(|h| !**h).count() as i64;
                for (&i, held) in sent.iter().zip(held) {
                    fates[i] = match (held, gone == u.matched) {
                        (true, _) => Parent::Unwritten,
                        (false, true) => Parent::Written,
                        (false, false) => Parent::Overtaken,
                    };
                }
            }
            Err(e) if e.mongo_error().is_some_and(driver::is_unknown) => {
                for &i in &sent {
                    fates[i] = Parent::Unknown;
                }
                cut = Some(e);
            }
            // Refused as a whole: nothing written.
            Err(_) => {}
        }
    }
    // Each writer's answer, where the group has one for it (the others write alone).
    let mut answers = Vec::with_capacity(riders.len());
    for (r, fate) in riders.into_iter().zip(fates) {
        let parent = &r.aboard.parent;
        let (answer, unfinished) = match fate {
            Parent::Written => (Some(Ok(())), false),
            // As a lone run's parent update cut off: marked for a rebuild where the update did
            // not land (the give-back is fenced by the lease), and the writer told so.
            Parent::Unknown => {
                let e = cut
                    .as_ref()
                    .map_or_else(|| together(store), |e| unknown(store, e));
                (Some(Err(e)), true)
            }
            // As a lone run overtaken: its children changed, the parent left to its taker.
            Parent::Overtaken => {
                store.model().mark_unsettled(parent).await;
                let e = Error::Unsettled {
                    collection: store.collection_name().to_owned(),
                    id: Box::new(parent.clone()),
                };
                (Some(Err(e)), true)
            }
            // Its children go back as they were, and its writer writes alone.
            Parent::Unwritten => match put_back(r.subset, &mut Ctx::apart(), r.mine()).await {
                Ok(()) => (None, false),
                Err(e) => (Some(Err(unknown(store, &e))), true),
            },
        };
        if let Some(answer) = answer {
            answers.push((r.aboard, answer));
        }
        done.push((r.ctx, r.leases, unfinished));
    }
    release_done(done).await;
    // Every writer written: the group's `Ok` answers them all.
    if answers.len() == subsets.len() && answers.iter().all(|(_, a)| a.is_ok()) {
        return Ok(());
    }
    for (aboard, answer) in answers {
        aboard.settle(answer);
    }
    Err(together(store))
}

/// One writer of [`patch_ordered`] whose children are all there, with its parent's lease.
struct PatchRider<'s, 'a> {
    ctx: Ctx<'static>,
    leases: Leases,
    /// Each child as it was before the group changed it.
    changed: Vec<(Bson, Document)>,
    /// Its parent's update, until it is sent.
    update: ParentUpdate,
    /// Each child with its patch, in the order of `changed`.
    each: Vec<(Bson, ChildPatch)>,
    subset: &'s RawChildren<'a>,
    aboard: &'s Aboard,
}

impl PatchRider<'_, '_> {
    /// Each child it changed, as it was, with its parent, for [`put_back`].
    fn mine(&self) -> impl Iterator<Item = (&Bson, &Document)> {
        self.changed
            .iter()
            .map(|(_, before)| (&self.aboard.parent, before))
    }
}

/// Gives back each lease of `done`, as unfinished where it says so.
async fn release_done(done: Vec<(Ctx<'static>, Leases, bool)>) {
    join_all(
        done.into_iter()
            .map(|(ctx, leases, unfinished)| async move {
                leases.release(ctx.held(), unfinished).await
            }),
    )
    .await;
}

/// What became of one parent update of [`patch_ordered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parent {
    /// Written (or nothing to write), its lease given back or to give back.
    Written,
    /// Written or not: the update's reply was lost.
    Unknown,
    /// Perhaps not written: its lease lapsed and was taken by another writer.
    Overtaken,
    /// Not written: its lease still held.
    Unwritten,
}

/// `e`, met putting children back, as the writers of the group see it: nobody knows which of
/// their patches applied.
fn unknown(store: &RawStore, e: &Error) -> Error {
    match e.mongo_error() {
        Some(source) => Error::OutcomeUnknown {
            collection: store.collection_name().to_owned(),
            source: Box::new(source.clone()),
        },
        // Never: a put-back's and an update's errors are the driver's.
        None => together(store),
    }
}

/// The error that ends a group: each of its writers then writes alone, for its own answer.
fn together(store: &RawStore) -> Error {
    Error::PartialModel {
        collection: store.collection_name().to_owned(),
    }
}

/// [`write_ordered`]'s parent updates: every parent in one `update` command. A parent it may
/// have missed (it still holds its lease, which its update gives back), or whose update would
/// not give the lease back, has its update sent alone, as a lone push's, for its fate.
async fn update_all(store: &RawStore, riders: &mut [Rider<'_, '_>]) -> Vec<Fate> {
    let mut fates: Vec<Option<Fate>> = vec![None; riders.len()];
    let mut sent = Vec::new();
    let mut statements = Vec::new();
    for (i, r) in riders.iter().enumerate() {
        let steps = PushSteps::new(r.subset, &r.aboard.parent, r.aboard.pushes());
        let Some(write) = steps.parent_write(true) else {
            continue;
        };
        if let Ok(Some(statement)) = parent_statement(store, &r.ctx, &r.aboard.parent, write).await
        {
            // One that keeps its lease could not be told apart from one that missed.
            if statement.release {
                sent.push(i);
                statements.push(statement.command());
            }
        }
    }
    if !statements.is_empty() {
        match send_updates(
            store,
            &mut Ctx::apart(),
            store.collection_name(),
            statements,
            None,
        )
        .await
        {
            Ok(u) if !u.refused && u.matched == sent.len() as i64 => {
                for &i in &sent {
                    let r = &mut riders[i];
                    r.ctx.released(&r.aboard.parent);
                    fates[i] = Some(Fate::Written);
                }
            }
            Ok(_) => {
                let sent_riders = sent.iter().map(|&i| (&riders[i].ctx, riders[i].aboard));
                let held = still_held(store, sent_riders).await;
                for (&i, held) in sent.iter().zip(held) {
                    // Not held: written, or its lease lapsed and was taken, and the taker
                    // settles the parent; either way its writer's own push finds out.
                    fates[i] = (!held).then_some(Fate::Unfinished);
                }
            }
            // Nobody knows what it wrote: the parents are marked for a rebuild.
            Err(_) => {
                for &i in &sent {
                    fates[i] = Some(Fate::Unfinished);
                }
            }
        }
    }
    let alone = riders
        .iter_mut()
        .zip(&fates)
        .filter(|(_, fate)| fate.is_none())
        .map(|(r, _)| async move {
            let fresh: Vec<&Prepared> = r.aboard.pushes().iter().collect();
            let steps = PushSteps::new(r.subset, &r.aboard.parent, r.aboard.pushes());
            let pushed = steps.push_to_parent(&mut r.ctx, &fresh, true).await;
            let parent = &r.aboard.parent;
            match pushed {
                Ok(true) if !r.ctx.is_outdated(parent) && !r.ctx.is_lost(parent) => Fate::Written,
                // Missing, or refused: its children come out again, as a lone push's would.
                Ok(false) => Fate::TakenBack,
                Err(e) if driver::was_refused(&e) => Fate::TakenBack,
                // Outdated, overtaken or cut off: marked for a rebuild.
                _ => Fate::Unfinished,
            }
        });
    let mut alone = join_all(alone).await.into_iter();
    fates
        .into_iter()
        .map(|fate| fate.or_else(|| alone.next()).unwrap_or(Fate::Unfinished))
        .collect()
}

/// Whether each of `riders` (a writer's context, holding its lease, and its work) still holds
/// its parent's lease: one read. Not held when the read fails.
async fn still_held<'r>(
    store: &RawStore,
    riders: impl Iterator<Item = (&'r Ctx<'static>, &'r Aboard)>,
) -> Vec<bool> {
    let leases: Vec<(&Bson, Option<Lease>)> = riders
        .map(|(ctx, aboard)| (&aboard.parent, ctx.lease(&aboard.parent)))
        .collect();
    let ids: Vec<Bson> = leases.iter().map(|(p, _)| (*p).clone()).collect();
    let parents = store.parents::<Document>();
    let find = parents
        .find(doc! { "_id": { "$in": ids } })
        .projection(doc! { MARKER: 1 });
    let found = match Ctx::apart().collect(find).await {
        Ok(found) => found,
        Err(_) => return vec![false; leases.len()],
    };
    leases
        .iter()
        .map(|(parent, lease)| {
            let Some(lease) = lease else {
                return false;
            };
            let marker = found
                .iter()
                .find(|p| p.get("_id") == Some(*parent))
                .and_then(|p| p.get_document(MARKER).ok())
                .and_then(|m| RawDocumentBuf::try_from(m).ok());
            lease.is_held_by(marker.as_deref())
        })
        .collect()
}

/// [`write_ordered`]'s insert: every child of `riders`, one `insertMany`
/// per child collection. `Err(unknown)` when it failed, having taken out again what it
/// wrote (`false`), or not knowing what it wrote (`true`).
async fn insert_all(riders: &[Rider<'_, '_>]) -> std::result::Result<(), bool> {
    let collections = by_collection(riders.iter().map(|r| (r.subset, r.aboard.pushes())));
    for (i, (subset, children)) in collections.iter().enumerate() {
        let stored = subset.children::<Document>();
        let inserted = stored
            .insert_many(children.iter().map(|p| &p.stored))
            .ordered(false)
            .await;
        let Err(e) = inserted else {
            continue;
        };
        let Some(failed) = InsertFailure::of(&e).filter(|f| !f.write_concern) else {
            return Err(true);
        };
        // Out again: what this insert wrote (all but the refused), and every earlier one.
        let collection = subset.spec().child_collection;
        let mut position = 0;
        for r in riders {
            let own = r.subset.spec().child_collection;
            let earlier = collections[..i]
                .iter()
                .any(|(s, _)| s.spec().child_collection == own);
            let this = own == collection;
            let mut ids = Vec::new();
            for p in r.aboard.pushes().iter() {
                if this {
                    let kept = !failed.duplicates.contains(&position)
                        && !failed.refused.iter().any(|(k, _)| *k == position);
                    position += 1;
                    if kept {
                        ids.push(p.id.clone());
                    }
                } else if earlier {
                    ids.push(p.id.clone());
                }
            }
            if ids.is_empty() {
                continue;
            }
            let owned = query::owned(r.subset.spec(), &r.aboard.parent, ids);
            let stored = r.subset.children::<Document>();
            if stored.delete_many(owned).await.is_err() {
                return Err(true);
            }
        }
        return Err(false);
    }
    Ok(())
}

/// The children of `pushes` by child collection, each in the order of `pushes`: one insert
/// each.
fn by_collection<'s, 'a, T: 's>(
    items: impl Iterator<Item = (&'s RawChildren<'a>, &'s [T])>,
) -> Vec<(&'s RawChildren<'a>, Vec<&'s T>)> {
    let mut all: Vec<(&RawChildren<'a>, Vec<&T>)> = Vec::new();
    for (subset, items) in items {
        let collection = subset.spec().child_collection;
        match all
            .iter_mut()
            .find(|(s, _)| s.spec().child_collection == collection)
        {
            Some((_, all)) => all.extend(items.iter()),
            None => all.push((subset, items.iter().collect())),
        }
    }
    all
}

/// One writer of a group written without a transaction, with its parent's shared lease.
struct Rider<'s, 'a> {
    ctx: Ctx<'static>,
    leases: Leases,
    subset: &'s RawChildren<'a>,
    aboard: &'s Aboard,
    /// Whether its parent is left for a rebuild: its lease is given back as unfinished.
    unfinished: bool,
}

/// What became of one rider's parent update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Written, and its lease given back with it.
    Written,
    /// Not written, and its children to be taken out again.
    TakenBack,
    /// Not written for sure: its parent is marked for a rebuild.
    Unfinished,
}

/// Gives back each rider's lease, as unfinished where `unfinished` says so.
async fn release_all(riders: Vec<Rider<'_, '_>>, unfinished: impl Fn(&Rider<'_, '_>) -> bool) {
    join_all(riders.into_iter().map(|r| {
        let unfinished = unfinished(&r);
        async move { r.leases.release(r.ctx.held(), unfinished).await }
    }))
    .await;
}

/// Makes the parent update of each of `writes` that re-ranks (see [`GroupWrites::rerank`]),
/// from its children read in `ctx`'s transaction: one `find` per child collection, which the
/// group's updates of them then conflict with any write since. A writer whose children do not
/// allow it ends the group, and each writer goes alone.
async fn rerank_all(
    ctx: &mut Ctx<'_>,
    store: &RawStore,
    subsets: &[(RawChildren<'_>, &Aboard)],
    writes: &mut [Option<GroupWrites>],
) -> Result<()> {
    let filters: Vec<(&RawChildren<'_>, [Document; 1])> = subsets
        .iter()
        .zip(writes.iter())
        .filter_map(|((subset, aboard), write)| {
            let write = write.as_ref().filter(|w| w.reranks)?;
            Some((subset, [write.owned(subset, &aboard.parent)]))
        })
        .collect();
    let mut found: Vec<(&str, Vec<Document>)> = Vec::new();
    for (subset, of_parents) in by_collection(filters.iter().map(|(s, f)| (*s, &f[..]))) {
        let children = read_all(subset, ctx, doc! { "$or": of_parents }).await?;
        found.push((subset.spec().child_collection, children));
    }
    for ((subset, aboard), write) in subsets.iter().zip(writes.iter_mut()) {
        let Some(write) = write.as_mut().filter(|w| w.reranks) else {
            continue;
        };
        let collection = subset.spec().child_collection;
        let children = found.iter().find(|(c, _)| *c == collection);
        let children = children.map_or(&[][..], |(_, found)| found);
        let changed = as_found(&write.each, children).ok();
        match changed.and_then(|changed| write.rerank(subset, &aboard.parent, &changed)) {
            Some(update) => write.parent = update,
            None => return Err(together(store)),
        }
    }
    Ok(())
}

/// How many times a group conflicting with other processes' transactions is tried before its
/// pushes go alone.
const GROUP_ATTEMPTS: u32 = 3;

/// The writes of [`RawStore::write_abreast`].
struct Abreast<'s, 'a> {
    store: &'s RawStore,
    subsets: &'s [(RawChildren<'a>, &'s Aboard)],
}

impl Steps for Abreast<'_, '_> {
    type Output = ();

    // No parents: each writer holds its parent's turn already, and the executor would wait for
    // those turns.

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        // Every parent in one update, every patched child in one update per child collection,
        // then every pushed child in one insert per child collection: whatever the group's
        // size, a few round trips and the commit. A parent that the update misses (missing,
        // outdated, or a head push behind the head), a child that a patch misses (missing, or
        // out of range), anything the server refuses, and work with nothing for its parent
        // end the group: each writer then writes alone, for its own answer.
        let store = self.store;
        let mut statements = Vec::with_capacity(self.subsets.len());
        let mut patched: Vec<(&RawChildren<'_>, &[Document])> = Vec::new();
        let mut matches: Vec<(&str, usize)> = Vec::new();
        let ranks = store.sorts_arrays_known();
        let mut blind: Vec<Option<GroupWrites>> = self
            .subsets
            .iter()
            .map(|(subset, aboard)| match &aboard.cargo {
                Cargo::Patches(patches) => GroupWrites::of(subset, &aboard.parent, patches, ranks),
                Cargo::Pushes(_) => None,
            })
            .collect();
        rerank_all(ctx, store, self.subsets, &mut blind).await?;
        for ((subset, aboard), blind) in self.subsets.iter().zip(&mut blind) {
            let write = match (&aboard.cargo, blind) {
                (Cargo::Pushes(children), _) => {
                    PushSteps::new(subset, &aboard.parent, children).parent_write(false)
                }
                (Cargo::Patches(_), Some(blind)) => {
                    let GroupWrites {
                        children,
                        matches: n,
                        parent,
                        ..
                    } = blind;
                    let children: &[Document] = children;
                    patched.push((subset, children));
                    let collection = subset.spec().child_collection;
                    match matches.iter_mut().find(|(c, _)| *c == collection) {
                        Some((_, all)) => *all += *n,
                        None => matches.push((collection, *n)),
                    }
                    Some(std::mem::take(parent))
                }
                (Cargo::Patches(_), None) => None,
            };
            let statement = match write {
                Some(write) => parent_statement(store, ctx, &aboard.parent, write).await?,
                None => None,
            };
            let Some(statement) = statement else {
                return Err(together(store));
            };
            statements.push(statement.command());
        }
        let parents = store.collection_name();
        let updated = send_updates(store, ctx, parents, statements, None).await?;
        if updated.refused || updated.matched < self.subsets.len() as i64 {
            return Err(together(store));
        }
        for (subset, changes) in by_collection(patched.into_iter()) {
            let collection = subset.spec().child_collection;
            let changes = changes.into_iter().cloned().collect();
            let updated = send_updates(store, ctx, collection, changes, None).await?;
            let expected = matches.iter().find(|(c, _)| *c == collection);
            let expected = expected.map_or(0, |(_, n)| *n as i64);
            if updated.refused || updated.matched != expected {
                return Err(together(store));
            }
        }
        let pushes = self.subsets.iter().map(|(s, a)| (s, a.pushes()));
        for (subset, children) in by_collection(pushes) {
            if children.is_empty() {
                continue;
            }
            let stored = subset.children::<Document>();
            let insert = stored.insert_many(children.iter().map(|p| &p.stored));
            ctx.run(insert).await.map_err(|e| subset.mongo_child(e))?;
        }
        Ok(())
    }

    async fn before_retry(&self, attempt: u32, error: Error) -> Result<Retry<()>> {
        // A conflict with another process's transaction on one of the parents: the group again,
        // as a push alone would retry (split, every push would pay a commit of its own). Then
        // each push goes alone, where a contended parent is noticed (and folded, when the
        // store folds).
        match attempt < GROUP_ATTEMPTS && driver::is_write_conflict(&error) {
            true => exec::again_after_backoff(attempt, &error).await,
            false => Err(error),
        }
    }
}
