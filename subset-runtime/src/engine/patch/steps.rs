//! The writes of one run of patches of one parent's children (one caller's, or a group
//! commit's), and which view gets which.

use crate::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::options::ReturnDocument;

use super::child_patch::{holds, moves_in, shows_in, ChildPatch, Update};
use crate::engine::exec::{Ctx, Steps};
use crate::engine::parent_write::{ParentUpdate, Written};
use crate::engine::resync::{carried, embeddable, fits, CountFix, Resync};
use crate::engine::sums::Num;
use crate::engine::{query, RawChildren};
use crate::error::{driver, Error, Result};
use crate::model::SubsetSpec;

/// [`RawChildren::patch`]: one or more patches of one parent's children, in order.
///
/// Every child is changed first, then the views follow all of them at once: one parent update
/// for every copy the patches change in place (and every sum they move), then one recompute
/// per view whose order or filter some patch touched, with the counts and sums those patches
/// moved. A group commit of eight votes on one hot review is then one `findAndModify` (the
/// votes composed into one `$inc`), one parent update and one commit.
pub(super) struct PatchSteps<'s, 'a> {
    pub(super) subset: &'s RawChildren<'a>,
    pub(super) parent: &'s Bson,
    pub(super) patches: &'s [(Bson, ChildPatch)],
}

/// What the patches of one run do to the parent, gathered before it is written.
#[derive(Default)]
struct ParentWrite {
    /// The operators on copies in place, and the sums they move.
    update: Update,
    /// One array filter per (view, child) changed in place.
    filters: Vec<Document>,
    /// The children changed in place, to write the update before one comes again (two
    /// filters on one element would conflict).
    copies: Vec<Bson>,
    /// Per view (by index in [`RawChildren::views`]): the `$inc` of counts and sums of the
    /// patches that move a child in it, when one does.
    moved: Vec<Option<Document>>,
    /// Per view: the children a patch raised in its order (or kept), with their copies as
    /// they are now, to re-rank in place ([`rerank`]) rather than recompute.
    raised: Vec<Vec<Raised>>,
    /// Whether the server can re-rank a view in place (`$sortArray`).
    ranks: bool,
    /// Whether any parent update was sent (and applied).
    wrote: bool,
}

impl Steps for PatchSteps<'_, '_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![self.parent]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let s = self.subset;
        let views = s.view_specs().len();
        let mut write = ParentWrite {
            moved: vec![None; views],
            raised: vec![Vec::new(); views],
            ranks: ranks(s, self.patches).await?,
            ..ParentWrite::default()
        };
        let mut changed = Vec::with_capacity(self.patches.len());
        let mut composed = compose(self.patches);
        // In a transaction, patches that need not know the child as it was go first, a group
        // of equal ones (votes on different reviews) as one `update` of all their children.
        if ctx.atomic() {
            for (patch, children) in blind(&mut composed, s.view_specs()) {
                if children.iter().any(|c| write.copies.contains(c)) {
                    self.write(ctx, &mut write, false).await?;
                }
                self.change_all(ctx, &children, &patch).await?;
                for (i, view) in s.view_specs().iter().enumerate() {
                    in_place(&mut write, i, view, &children, &patch);
                }
            }
        }
        // One `find` reads the children as they are, and each equal patch changes all its
        // children in one `update` (votes on different reviews: one): in a transaction, whose
        // update conflicts with any write since its read; without one or a session, under
        // the lease, where no other writer touches these children.
        if (ctx.atomic() || !ctx.has_session()) && composed.len() > 1 && distinct(&composed) {
            changed = match ctx.atomic() {
                true => self.change_together(ctx, &composed).await?,
                // As one at a time: a run that fails leaves nothing, and its first error is
                // returned.
                false => self.change_each(&composed).await??,
            };
            for ((child, patch), (_, before)) in composed.iter().zip(&changed) {
                let after = patch.apply(before);
                self.plan(&mut write, child, patch, before, &after);
            }
            composed.clear();
        }
        for (child, patch) in composed {
            if write.copies.contains(&child) {
                self.write(ctx, &mut write, false).await?;
            }
            let before = match self.change(ctx, &child, &patch).await {
                Ok(before) => before,
                // Outside a transaction, the children changed before this one go back as they
                // were, so that the run leaves nothing: a group commit of several callers'
                // patches then runs each again alone, and none is applied twice.
                Err(e) if !ctx.atomic() => {
                    put_back(s, ctx, self.mine(&changed).rev()).await?;
                    if write.wrote {
                        // Copies of children now put back were written (a child twice in one
                        // run): the parent is rebuilt from the child collection.
                        ctx.outdated(self.parent);
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let after = patch.apply(&before);
            self.plan(&mut write, &child, &patch, &before, &after);
            changed.push((child, before));
        }
        match self.follow(ctx, write).await {
            // Refused by the server (the copy would not fit, say) outside a transaction: the
            // children go back as they were, so the write leaves nothing, as a transaction
            // would.
            Err(e) if !ctx.atomic() && driver::was_refused(&e) => {
                put_back(s, ctx, self.mine(&changed).rev()).await?;
                // Views written before the refusal are rebuilt from the children put back.
                ctx.outdated(self.parent);
                Err(e)
            }
            other => other,
        }
    }
}

impl PatchSteps<'_, '_> {
    /// Each of `changed` (a child of this parent, as it was) with the parent, for [`put_back`].
    fn mine<'c>(
        &'c self,
        changed: &'c [(Bson, Document)],
    ) -> impl DoubleEndedIterator<Item = (&'c Bson, &'c Document)> + 'c {
        changed.iter().map(|(_, before)| (self.parent, before))
    }

    /// Applies `composed` (patches of distinct children of this parent) without a transaction
    /// and under the lease, in a few commands whatever their number ([`read_all`], then
    /// [`apply_all`]): each child as it was, in the order of `composed`. The inner error leaves
    /// nothing written: a child missing (nothing is written then) or an increment out of range
    /// (what was changed is put back). The outer error is a read's, or a put-back's, which
    /// leaves some children changed.
    async fn change_each(
        &self,
        composed: &[(Bson, ChildPatch)],
    ) -> Result<Result<Vec<(Bson, Document)>>> {
        let s = self.subset;
        let owned = owned_by(s, self.parent, composed);
        let found = read_all(s, &mut Ctx::apart(), owned).await?;
        let changed = match as_found(composed, &found) {
            Ok(changed) => changed,
            Err(child) => {
                let ctx = &mut Ctx::apart();
                return Ok(Err(query::child_not_found(s, ctx, self.parent, child).await));
            }
        };
        let changes: Vec<(&Bson, &Document, &ChildPatch)> = changed
            .iter()
            .zip(composed)
            .map(|((_, before), (_, patch))| (self.parent, before, patch))
            .collect();
        Ok(apply_all(s, &changes).await?.map(|()| changed))
    }

    /// Applies `composed` (patches of distinct children of this parent) in a transaction, in
    /// a few commands whatever their number: one `find`, then [`PatchSteps::change_all`] of
    /// each equal patch. Each child as it was, in the order of `composed`.
    async fn change_together(
        &self,
        ctx: &mut Ctx<'_>,
        composed: &[(Bson, ChildPatch)],
    ) -> Result<Vec<(Bson, Document)>> {
        let s = self.subset;
        let found = read_all(s, ctx, owned_by(s, self.parent, composed)).await?;
        let changed = match as_found(composed, &found) {
            Ok(changed) => changed,
            Err(child) => return Err(query::child_not_found(s, ctx, self.parent, child).await),
        };
        for (patch, children) in by_patch(composed.iter().map(|(c, p)| (p, c.clone()))) {
            self.change_all(ctx, &children, patch).await?;
        }
        Ok(changed)
    }

    /// Applies `patch` to the child in the child collection: the child as it was. The update
    /// matches only while each increment stays within its field's range (see
    /// [`ChildPatch::guard`]); a child there that misses it is [`Error::InvalidPatch`], with
    /// nothing written.
    async fn change(
        &self,
        ctx: &mut Ctx<'_>,
        child: &Bson,
        patch: &ChildPatch,
    ) -> Result<Document> {
        let s = self.subset;
        let spec = s.spec();
        let filter = doc! { "_id": child.clone(), spec.key: self.parent.clone() };
        let guard = patch.guard();
        let guarded = !guard.is_empty();
        let mut within = filter.clone();
        within.extend(guard);
        let children = s.children::<Document>();
        let change = children
            .find_one_and_update(within, patch.update())
            .return_document(ReturnDocument::Before);
        let changed = match ctx.run(change).await {
            Ok(changed) => changed,
            Err(e) => {
                return Err(refused(s, self.parent, std::slice::from_ref(child), patch, e).await)
            }
        };
        if let Some(before) = changed {
            return Ok(before);
        }
        if guarded {
            let found = children.find_one(filter);
            if let Some(current) = ctx.run(found).await.map_err(|e| s.mongo_child(e))? {
                return Err(out_of_range(s, patch, std::slice::from_ref(&current)));
            }
        }
        Err(query::child_not_found(s, ctx, self.parent, child).await)
    }

    /// Applies `patch` to each of `children` in the child collection, in one write: each must
    /// be there (else `ChildNotFound`, naming one that is not) and stay in range (else
    /// `InvalidPatch`, as [`PatchSteps::change`]), which aborts the transaction.
    async fn change_all(
        &self,
        ctx: &mut Ctx<'_>,
        children: &[Bson],
        patch: &ChildPatch,
    ) -> Result<()> {
        let s = self.subset;
        let spec = s.spec();
        let coll = s.children::<Document>();
        let filter = query::owned(spec, self.parent, children.to_vec());
        let mut within = filter.clone();
        within.extend(patch.guard());
        let changed = match ctx.run(coll.update_many(within, patch.update())).await {
            Ok(changed) => changed,
            Err(e) => return Err(refused(s, self.parent, children, patch, e).await),
        };
        if changed.matched_count == children.len() as u64 {
            return Ok(());
        }
        let found = ctx
            .collect(coll.find(filter))
            .await
            .map_err(|e| s.mongo_child(e))?;
        let missing = children
            .iter()
            .find(|c| !found.iter().any(|f| f.get("_id") == Some(c)));
        match missing {
            // Every child is there: an increment would leave its range in one (those that
            // stay in it were changed, which the aborted transaction undoes).
            None if !found.is_empty() => Err(out_of_range(s, patch, &found)),
            _ => Err(
                query::child_not_found(s, ctx, self.parent, missing.unwrap_or(&children[0])).await,
            ),
        }
    }

    /// Adds to `write` what every view needs after `patch` changed `child` from `before` to
    /// `after`.
    fn plan(
        &self,
        write: &mut ParentWrite,
        child: &Bson,
        patch: &ChildPatch,
        before: &Document,
        after: &Document,
    ) {
        let views = self.subset.view_specs();
        for (i, view) in views.iter().enumerate() {
            let (was, is) = (view.admits(before), view.admits(after));
            if !was && !is {
                continue;
            }
            let moves = crate::engine::sums::inc(view, &[after], &[before]);
            // Only a copy made here that is the child as stored, of a child a recompute would
            // embed (not one with a sort key of the wrong type that another program stored,
            // say, which the view leaves out), and small enough to carry in an update (a
            // large one is left to the recompute, which leaves out what the parent cannot
            // hold, and to the operators).
            let raising = || {
                let exact = patch.reproduces(before) && embeddable(view, views, after);
                let copy = exact.then(|| query::embedded(view, after.clone()))?;
                let bytes = carried(&copy)?;
                Some(Raised {
                    child: child.clone(),
                    copy,
                    bytes,
                })
            };
            let rerank =
                was && is && write.ranks && write.moved[i].is_none() && raised(view, before, after);
            if let Some(raising) = rerank.then(raising).flatten() {
                // The copies of the others keep their order, and no child this patch does not
                // touch can enter the view: re-ranked in place, the count and sums moved by
                // the update in place. Once a view of the run re-ranks, so does every view the
                // child stays in, its copy replaced: one pipeline update for all, where copies
                // changed by operators would take one update more.
                add_inc(&mut write.update.inc, moves);
                let raised = &mut write.raised[i];
                raised.retain(|r| r.child != *child);
                raised.push(raising);
                continue;
            }
            // A copy of this child that an earlier patch of the run re-ranks in would undo
            // this one, written after it: the view is recomputed instead.
            let copied = write.raised[i].iter().any(|r| r.child == *child);
            if was != is || moves_in(patch, view) || copied {
                let inc = write.moved[i].get_or_insert_with(Document::new);
                add_inc(inc, moves);
                continue;
            }
            add_inc(&mut write.update.inc, moves);
            in_place(write, i, view, std::slice::from_ref(child), patch);
        }
    }

    /// Writes the gathered in-place changes, if any, and starts a new gathering of them.
    /// `last`: no recompute follows (see [`ParentUpdate::last`]).
    async fn write(&self, ctx: &mut Ctx<'_>, write: &mut ParentWrite, last: bool) -> Result<()> {
        let update = std::mem::take(&mut write.update);
        let filters = std::mem::take(&mut write.filters);
        write.copies.clear();
        if update.is_empty() {
            return Ok(());
        }
        let s = self.subset;
        write.wrote = true;
        let write = ParentUpdate {
            array_filters: filters,
            last,
            ..ParentUpdate::of(update.into_document())
        };
        let written = match s.store().write_parent(ctx, self.parent, write).await {
            Ok(written) => written,
            // The copies grow by what the patches set: unknown here, so the message says the
            // parent's size as stored.
            Err(e) => return Err(query::parent_write_error(s, e, self.parent, 0).await),
        };
        match written {
            Written::Missing => Err(s.parent_not_found(self.parent)),
            // Of another definition: settled after the steps, which recounts what the moves
            // gathered since would do.
            Written::Applied | Written::Missed | Written::Outdated => Ok(()),
        }
    }

    /// The in-place changes, then the views re-ranked in place, then a recompute of each view
    /// a patch moved a child in otherwise.
    async fn follow(&self, ctx: &mut Ctx<'_>, mut write: ParentWrite) -> Result<()> {
        // A view recomputed takes every patch of the run from the child collection.
        for (raised, moved) in write.raised.iter_mut().zip(&write.moved) {
            if moved.is_some() {
                raised.clear();
            }
        }
        let recomputes = write.moved.iter().all(Option::is_none);
        let reranks = write.raised.iter().all(Vec::is_empty);
        self.write(ctx, &mut write, recomputes && reranks).await?;
        if ctx.is_outdated(self.parent) {
            return Ok(());
        }
        if !reranks {
            self.rerank(ctx, &mut write, recomputes).await?;
            if ctx.is_outdated(self.parent) {
                return Ok(());
            }
        }
        if !write.wrote && write.moved.iter().all(Option::is_none) {
            // No view of this model shows what changed (see `ParentUpdate::touch_only`).
            let touch = ParentUpdate::touch_only();
            self.subset
                .store()
                .write_parent(ctx, self.parent, touch)
                .await?;
            return Ok(());
        }
        for (view, moves) in self.subset.views().zip(write.moved) {
            if let Some(moves) = moves {
                let drift = view
                    .recompute()
                    .resync(ctx, self.parent, &CountFix::Inc(moves), Resync::Fix)
                    .await?;
                // Settled as built under another definition: every view is done.
                if drift.outdated {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl PatchSteps<'_, '_> {
    /// Re-ranks each view in `write.raised` in place, in one parent update: `last` when no
    /// recompute follows. A parent whose views do not hold what re-ranking needs (a copy of
    /// each raised child, or a full view) is recomputed instead, by the views' recomputes.
    async fn rerank(&self, ctx: &mut Ctx<'_>, write: &mut ParentWrite, last: bool) -> Result<()> {
        let s = self.subset;
        let written = match reranking(s.view_specs(), &write.raised) {
            Some(update) => {
                let update = ParentUpdate { last, ..update };
                write.wrote = true;
                match s.store().write_parent(ctx, self.parent, update).await {
                    Ok(written) => written,
                    Err(e) => return Err(query::parent_write_error(s, e, self.parent, 0).await),
                }
            }
            None => Written::Missed,
        };
        match written {
            Written::Missing => Err(s.parent_not_found(self.parent)),
            Written::Applied | Written::Outdated => Ok(()),
            // Its counts and sums were moved in place already.
            Written::Missed => {
                for (raised, moved) in write.raised.iter_mut().zip(&mut write.moved) {
                    if !std::mem::take(raised).is_empty() {
                        *moved = Some(Document::new());
                    }
                }
                Ok(())
            }
        }
    }
}

/// A child a patch raised in a view's order (or kept there), with its copy as it is now and
/// the copy's size as an array element.
#[derive(Debug, Clone)]
struct Raised {
    child: Bson,
    copy: Document,
    bytes: i64,
}

/// The parent update that re-ranks each of `views` in place with its `raised` children (see
/// [`rerank`]).
///
/// A parent that could not take every copy anew misses it, and is recomputed, which leaves
/// out a child too large to embed (a refusal would fail every later vote on it); `None` when
/// no parent could (the update would itself be over the limit), and so is recomputed.
fn reranking(views: &[SubsetSpec], raised: &[Vec<Raised>]) -> Option<ParentUpdate> {
    let (stages, mut holds): (Vec<Document>, Vec<Document>) = views
        .iter()
        .zip(raised)
        .filter_map(|(view, raised)| rerank(view, raised))
        .unzip();
    // A run whose every view declined (a child in none, before and after) only touches.
    if holds.is_empty() {
        return Some(ParentUpdate::default());
    }
    holds.push(fits(raised.iter().flatten().map(|r| r.bytes).sum())?);
    Some(ParentUpdate {
        filter: doc! { "$and": holds },
        stages,
        ..ParentUpdate::default()
    })
}

/// Whether the server can re-rank the views `patches` reorder in place (asked of it once per
/// store, and only when one does).
pub(in crate::engine) async fn ranks(
    subset: &RawChildren<'_>,
    patches: &[(Bson, ChildPatch)],
) -> Result<bool> {
    let reorders = |v| patches.iter().any(|(_, p)| moves_in(p, v));
    match subset.view_specs().iter().any(reorders) {
        true => subset.store().sorts_arrays().await,
        false => Ok(false),
    }
}

/// Whether `patches` are of distinct children.
fn distinct(patches: &[(Bson, ChildPatch)]) -> bool {
    patches
        .iter()
        .enumerate()
        .all(|(i, (c, _))| patches[..i].iter().all(|(d, _)| d != c))
}

/// Whether each of `views` follows each of `patches` (of distinct children) by nothing or, as
/// their children's values will say, by a re-rank in place: a patch of a field a view orders
/// by, and of none it filters or sums by.
fn rerankable(patches: &[(Bson, ChildPatch)], views: &[SubsetSpec]) -> bool {
    distinct(patches)
        && patches.iter().all(|(_, patch)| {
            views.iter().all(|v| {
                let sums = v.sums.iter().any(|s| patch.touches(s.child));
                let filter = v.filter.is_some_and(|f| patch.touches(f.field));
                !sums && !filter && (moves_in(patch, v) || !shows_in(patch, v))
            })
        })
}

/// Whether `after` ranks no lower than `before` in `view`'s order (both as stored), known
/// here: a vote on a view of the most voted, say. Then no child but this one can enter or
/// leave the view, and the view is re-ranked in place.
fn raised(view: &SubsetSpec, before: &Document, after: &Document) -> bool {
    if view.keep == 0 {
        return false;
    }
    let at = |d: &Document| -> Vec<Bson> {
        view.order()
            .map(|k| d.get(k.field).cloned().unwrap_or(Bson::Null))
            .collect()
    };
    matches!(
        crate::order::compare(view, &at(after), &at(before)),
        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
    )
}

/// The stage that re-ranks `view` in place, with `raised` (children that rose in its order,
/// with their copies as they are now): the others' copies, then these, sorted in the view's
/// order, the first `keep` of them; and the condition under which that is the view, for the
/// parent update's filter: each raised child has a copy there, or the view is full (the
/// children without a copy rank below every copy, and no other child moved). `None` for no
/// child.
fn rerank(view: &SubsetSpec, raised: &[Raised]) -> Option<(Document, Document)> {
    if raised.is_empty() {
        return None;
    }
    let ids: Vec<Bson> = raised.iter().map(|r| r.child.clone()).collect();
    let copies: Vec<Bson> = raised
        .iter()
        .map(|r| Bson::Document(r.copy.clone()))
        .collect();
    let field = view.field;
    let others = doc! { "$filter": {
        "input": format!("${field}"),
        "cond": { "$not": [{ "$in": ["$$this._id", { "$literal": ids.clone() }] }] },
    } };
    let all = doc! { "$concatArrays": [others, { "$literal": copies }] };
    let sorted = doc! { "$sortArray": { "input": all, "sortBy": crate::order::sort_doc(view) } };
    let keep = i64::from(view.keep);
    let stage = doc! { "$set": { field: { "$slice": [sorted, keep] } } };
    let full = doc! { format!("{field}.{}", keep - 1): { "$exists": true } };
    let held = doc! { format!("{field}._id"): { "$all": ids } };
    Some((stage, doc! { "$or": [full, held] }))
}

/// The filter of `parent`'s children that `patches` change.
fn owned_by(subset: &RawChildren<'_>, parent: &Bson, patches: &[(Bson, ChildPatch)]) -> Document {
    let ids = patches.iter().map(|(child, _)| child.clone()).collect();
    query::owned(subset.spec(), parent, ids)
}

/// Each child of `patches` as `found` (a read of them) holds it, in the order of `patches`;
/// `Err` names the first that `found` lacks.
pub(in crate::engine) fn as_found<'p>(
    patches: &'p [(Bson, ChildPatch)],
    found: &[Document],
) -> std::result::Result<Vec<(Bson, Document)>, &'p Bson> {
    patches
        .iter()
        .map(
            |(child, _)| match found.iter().find(|f| f.get("_id") == Some(child)) {
                Some(before) => Ok((child.clone(), before.clone())),
                None => Err(child),
            },
        )
        .collect()
}

/// The children `filter` selects, read as they are, in one `find`: in `ctx`'s transaction,
/// whose writes of them then conflict with any write since; or, outside one, under the lease
/// of each one's parent, so that they stay so until the lease's holder changes them.
pub(in crate::engine) async fn read_all(
    s: &RawChildren<'_>,
    ctx: &mut Ctx<'_>,
    filter: Document,
) -> Result<Vec<Document>> {
    let children = s.children::<Document>();
    ctx.collect(children.find(filter))
        .await
        .map_err(|e| s.mongo_child(e))
}

/// Puts each of `changed` (a parent, and one of its children as it was) back as it was,
/// without a transaction: under the lease, no other writer has touched them since. Matched by
/// `_id` and key, as every write of one child is.
pub(in crate::engine) async fn put_back<'c>(
    s: &RawChildren<'_>,
    ctx: &mut Ctx<'_>,
    changed: impl Iterator<Item = (&'c Bson, &'c Document)>,
) -> Result<()> {
    let children = s.children::<Document>();
    for (parent, before) in changed {
        let id = before.get("_id").cloned().unwrap_or(Bson::Null);
        let filter = doc! { "_id": id, s.spec().key: parent.clone() };
        let put_back = children.replace_one(filter, before);
        ctx.run(put_back).await.map_err(|e| s.mongo_child(e))?;
    }
    Ok(())
}

/// Applies each of `changes` (a parent, one of its children as it is stored under the
/// parent's lease, and its patch) without a transaction: equal patches as one `update` of all
/// their children, each matched by `_id` and by the patch's range guard
/// ([`ChildPatch::guard`]). When one matches fewer than its children (an increment out of
/// range) or fails, every child of `changes` goes back as it was ([`put_back`]), which its
/// image restores whether or not the update reached it: the inner error is then the refusal,
/// or the failure. The outer error is a put-back's, which leaves some children changed.
pub(in crate::engine) async fn apply_all(
    s: &RawChildren<'_>,
    changes: &[(&Bson, &Document, &ChildPatch)],
) -> Result<Result<()>> {
    let groups = by_patch(changes.iter().map(|(_, before, patch)| (*patch, *before)));
    let children = s.children::<Document>();
    for (patch, befores) in &groups {
        let ids: Vec<Bson> = befores
            .iter()
            .map(|b| b.get("_id").cloned().unwrap_or(Bson::Null))
            .collect();
        let mut filter = doc! { "_id": { "$in": ids.clone() } };
        filter.extend(patch.guard());
        let updated = Ctx::apart()
            .run(children.update_many(filter, patch.update()))
            .await;
        let failed = match updated {
            Ok(u) if u.matched_count == ids.len() as u64 => continue,
            Ok(_) => {
                let images: Vec<Document> = befores.iter().map(|b| (*b).clone()).collect();
                out_of_range(s, patch, &images)
            }
            Err(e) => {
                let parent = changes
                    .first()
                    .map_or(&Bson::Null, |(parent, _, _)| *parent);
                refused(s, parent, &ids, patch, e).await
            }
        };
        let all = changes.iter().map(|(parent, before, _)| (*parent, *before));
        put_back(s, &mut Ctx::apart(), all).await?;
        return Ok(Err(failed));
    }
    Ok(Ok(()))
}

/// The writes of `patches` (of `parent`'s children) in a group across parents
/// ([`crate::engine::abreast`]), when no view needs any child as it was for them
/// (see [`blind`]), or when each view needs them only to re-rank in place (see
/// [`rerankable`]); `None` otherwise, and they go alone.
pub(in crate::engine) struct GroupWrites {
    /// The child collection's `update` statements: one per equal patch, of all its children.
    pub(in crate::engine) children: Vec<Document>,
    /// How many children those statements must match, each once: fewer is a child missing or
    /// an increment out of range, which the patches alone then report.
    pub(in crate::engine) matches: usize,
    /// The parent update of every copy changed in place; empty until the children are read
    /// when it re-ranks.
    pub(in crate::engine) parent: ParentUpdate,
    /// Each child with its patch (the queued ones composed), for a group without a
    /// transaction, which reads every child first ([`apply_all`]).
    pub(in crate::engine) each: Vec<(Bson, ChildPatch)>,
    /// Whether the parent update re-ranks views, and is made from the children as they were
    /// ([`GroupWrites::rerank`]).
    pub(in crate::engine) reranks: bool,
}

impl GroupWrites {
    /// `patches` of `parent`'s children through `subset`, as [`PatchSteps::run`] writes them
    /// in a transaction when they are all blind: each equal patch's children in one statement,
    /// then every copy in one parent update. `ranks`: whether the server can re-rank views in
    /// place ([`ranks`]).
    pub(in crate::engine) fn of(
        subset: &RawChildren<'_>,
        parent: &Bson,
        patches: &[(Bson, ChildPatch)],
        ranks: bool,
    ) -> Option<Self> {
        let mut composed = compose(patches);
        let all = composed.clone();
        let mut groups = blind(&mut composed, subset.view_specs());
        let reranks = !composed.is_empty();
        if reranks {
            if !ranks || !rerankable(&all, subset.view_specs()) {
                return None;
            }
            groups = by_patch(all.iter().map(|(child, patch)| (patch, child.clone())))
                .into_iter()
                .map(|(patch, children)| (patch.clone(), children))
                .collect();
        }
        let mut write = ParentWrite::default();
        let mut children = Vec::with_capacity(groups.len());
        let mut matches = 0;
        let mut each = Vec::new();
        for (patch, ids) in groups {
            each.extend(ids.iter().map(|id| (id.clone(), patch.clone())));
            let mut q = query::owned(subset.spec(), parent, ids.clone());
            q.extend(patch.guard());
            children.push(doc! { "q": q, "u": patch.update(), "multi": true });
            matches += ids.len();
            // Where views re-rank, no view follows a patch in place (see `rerankable`).
            if !reranks {
                for (i, view) in subset.view_specs().iter().enumerate() {
                    in_place(&mut write, i, view, &ids, &patch);
                }
            }
        }
        let parent = ParentUpdate {
            array_filters: write.filters,
            ..ParentUpdate::of(write.update.into_document())
        };
        Some(GroupWrites {
            children,
            matches,
            parent,
            each,
            reranks,
        })
    }

    /// The filter of its children, for the group's `find` of them.
    pub(in crate::engine) fn owned(&self, subset: &RawChildren<'_>, parent: &Bson) -> Document {
        owned_by(subset, parent, &self.each)
    }

    /// The parent update of writes that re-rank, from `changed`, each of their children as it
    /// was (read in the group's transaction, or under its leases, see [`as_found`]), as
    /// [`PatchSteps::run`] plans it. `None` when a patch does not raise its child in a view
    /// that re-ranks (a vote taken back, say): its writer then goes alone.
    pub(in crate::engine) fn rerank(
        &self,
        subset: &RawChildren<'_>,
        parent: &Bson,
        changed: &[(Bson, Document)],
    ) -> Option<ParentUpdate> {
        let steps = PatchSteps {
            subset,
            parent,
            patches: &self.each,
        };
        let views = subset.view_specs().len();
        let mut write = ParentWrite {
            moved: vec![None; views],
            raised: vec![Vec::new(); views],
            ranks: true,
            ..ParentWrite::default()
        };
        for ((child, patch), (_, before)) in self.each.iter().zip(changed) {
            steps.plan(&mut write, child, patch, before, &patch.apply(before));
        }
        let raised_only = write.update.is_empty() && write.moved.iter().all(Option::is_none);
        raised_only
            .then(|| reranking(subset.view_specs(), &write.raised))
            .flatten()
    }
}

/// The error of a patch whose increment would take one of `children` (as stored) out of its
/// field's range.
fn out_of_range(s: &RawChildren<'_>, patch: &ChildPatch, children: &[Document]) -> Error {
    let (field, reason) = patch.refusal(children);
    Error::InvalidPatch {
        collection: s.spec().child_collection.to_owned(),
        field,
        reason,
    }
}

/// Adds to `write` the operators of `patch` on the copies of `children` in view `i`, where
/// its copies hold a field the patch changes (the array filter matches none of a child that
/// is not embedded there).
fn in_place(
    write: &mut ParentWrite,
    i: usize,
    view: &SubsetSpec,
    children: &[Bson],
    patch: &ChildPatch,
) {
    if !shows_in(patch, view) {
        return;
    }
    let copy = format!("c{i}x{}", write.filters.len());
    let prefix = format!("{}.$[{copy}].", view.field);
    patch.add_to(&mut write.update, &prefix, |path| holds(view, path));
    let ids = match children {
        [one] => one.clone(),
        many => Bson::Document(doc! { "$in": many.to_vec() }),
    };
    write.filters.push(doc! { format!("{copy}._id"): ids });
    for child in children {
        if !write.copies.contains(child) {
            write.copies.push(child.clone());
        }
    }
}

/// Takes out of `patches` those no view needs the child as it was for (they change no field
/// any view orders, filters or sums by: the copies take the same operators wherever they
/// are), grouped by equal patch: (patch, its children). A child with more than one patch
/// (ones that do not compose) keeps them all, in order.
fn blind(
    patches: &mut Vec<(Bson, ChildPatch)>,
    views: &[SubsetSpec],
) -> Vec<(ChildPatch, Vec<Bson>)> {
    let sees = |patch: &ChildPatch| {
        views
            .iter()
            .any(|v| moves_in(patch, v) || v.sums.iter().any(|s| patch.touches(s.child)))
    };
    let once: Vec<bool> = patches
        .iter()
        .map(|(child, _)| patches.iter().filter(|(c, _)| c == child).count() == 1)
        .collect();
    let mut once = once.into_iter();
    let mut taken = Vec::new();
    patches.retain(|(child, patch)| {
        if !once.next().unwrap_or(false) || sees(patch) {
            return true;
        }
        taken.push((child.clone(), patch.clone()));
        false
    });
    by_patch(taken.iter().map(|(child, patch)| (patch, child.clone())))
        .into_iter()
        .map(|(patch, children)| (patch.clone(), children))
        .collect()
}

/// `items` (a patch, and what it applies to) grouped by equal patch, in the order each patch
/// first comes.
fn by_patch<'p, T>(
    items: impl Iterator<Item = (&'p ChildPatch, T)>,
) -> Vec<(&'p ChildPatch, Vec<T>)> {
    let mut groups: Vec<(&ChildPatch, Vec<T>)> = Vec::new();
    for (patch, item) in items {
        match groups.iter_mut().find(|(p, _)| *p == patch) {
            Some((_, of)) => of.push(item),
            None => groups.push((patch, vec![item])),
        }
    }
    groups
}

/// Adds each number of `moves` to the same field of `inc`.
fn add_inc(inc: &mut Document, moves: Document) {
    for (field, by) in moves {
        let sum = match (inc.get(&field).and_then(Num::of), Num::of(&by)) {
            (Some(a), Some(b)) => a.add(b).into_bson(),
            _ => by,
        };
        inc.insert(field, sum);
    }
}

/// The patches as fewer: each child's patches composed into one where they compose (see
/// [`ChildPatch::then`]), so that votes queued on one hot child are one write. Patches of
/// different children commute, so a child's patch joins its last one wherever that stands.
fn compose(patches: &[(Bson, ChildPatch)]) -> Vec<(Bson, ChildPatch)> {
    let mut composed: Vec<(Bson, ChildPatch)> = Vec::with_capacity(patches.len());
    for (child, patch) in patches {
        let last = composed.iter_mut().rev().find(|(c, _)| c == child);
        if let Some((_, before)) = last {
            if let Some(both) = before.then(patch) {
                *before = both;
                continue;
            }
        }
        composed.push((child.clone(), patch.clone()));
    }
    composed
}

/// The error of a patch of `children` (of `parent`) that the server refused, read outside any
/// transaction (the refusal has aborted ours): [`Error::MalformedChild`] naming the first child
/// whose field an increment of `patch` finds not a number (stored behind the library's back),
/// as a read of it says; else the server's own error.
async fn refused(
    s: &RawChildren<'_>,
    parent: &Bson,
    children: &[Bson],
    patch: &ChildPatch,
    e: mongodb::error::Error,
) -> Error {
    let update = patch.update();
    let increments: Vec<&String> = match update.get_document("$inc") {
        Ok(inc) if driver::is_bad_type(&e) => inc.keys().collect(),
        _ => return s.mongo_child(e),
    };
    let stored = s.children::<RawDocumentBuf>();
    let find = stored.find(doc! { "_id": { "$in": children.to_vec() } });
    let Ok(found) = Ctx::apart().collect(find).await else {
        return s.mongo_child(e);
    };
    for child in &found {
        for field in &increments {
            let value = match child.get(field.as_str()) {
                Ok(Some(value)) if !crate::values::is_number(value.element_type()) => value,
                _ => continue,
            };
            return Error::MalformedChild {
                collection: s.spec().child_collection.to_owned(),
                id: Box::new(crate::decode::id_of(child)),
                parent: Some(Box::new(parent.clone())),
                field: (*field).clone(),
                problem: format!(
                    "is {}, not a number",
                    crate::values::type_name(value.element_type())
                ),
            };
        }
    }
    s.mongo_child(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FilterSpec, SumSpec, TEST_SPEC};

    const SPEC: SubsetSpec = SubsetSpec {
        count: Some("n"),
        sums: &[SumSpec {
            parent: "stars",
            child: "stars",
            ty: crate::model::NumberType::Unknown,
        }],
        filter: Some(FilterSpec {
            field: "verified",
            equals: true,
        }),
        ..TEST_SPEC
    };

    #[test]
    fn queued_patches_of_one_child_go_as_one() {
        let vote = ChildPatch::new().inc("helpful", 1);
        let (a, b) = (Bson::Int32(1), Bson::Int32(2));
        let queued = [
            (a.clone(), vote.clone()),
            (a.clone(), vote.clone()),
            (b.clone(), vote.clone()),
            (a.clone(), vote.clone()),
        ];
        let composed = compose(&queued);
        let children: Vec<&Bson> = composed.iter().map(|(c, _)| c).collect();
        assert_eq!(children, [&a, &b]);
        assert_eq!(composed[0].1, ChildPatch::new().inc("helpful", 3));
    }

    #[test]
    fn equal_patches_no_view_needs_the_child_for_go_together() {
        let vote = ChildPatch::new().inc("helpful", 1);
        let rated = ChildPatch::new().inc("stars", 1);
        let (a, b, c) = (Bson::Int32(1), Bson::Int32(2), Bson::Int32(3));
        let mut patches = vec![
            (a.clone(), vote.clone()),
            (b.clone(), rated.clone()),
            (c.clone(), vote.clone()),
            (Bson::Int32(4), ChildPatch::new().set("meta", 1)),
            (Bson::Int32(4), ChildPatch::new().set("meta.x", 1)),
        ];
        let groups = blind(&mut patches, &[SPEC]);
        assert_eq!(groups, [(vote, vec![a, c])]);
        // A summed field needs the child as it was; a child patched twice keeps its order.
        let left: Vec<&Bson> = patches.iter().map(|(child, _)| child).collect();
        assert_eq!(left, [&b, &Bson::Int32(4), &Bson::Int32(4)]);
    }
}
