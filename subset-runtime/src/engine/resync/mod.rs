//! Keeping the copy true: recomputing a subset from the child collection, the one primitive
//! behind backfill, re-ranking, `reconcile` and `check`.
//!
//! This file reads and writes; what it reads is compared and turned into a write by code that
//! needs no server:
//!
//! | file | holds |
//! |---|---|
//! | `state.rs` | the field as stored ([`state::Stored`]) and as it should be ([`state::Expected`]) |
//! | `drift.rs` | [`Drift`]: how the two differ |
//! | `fix.rs` | the conditional update that makes the stored field right |
//! | `totals.rs` | the count and sums of a parent's children, in one `$group` |
//! | `computed.rs` | the views a read computes for a parent built under another definition |
//! | `rebuilt.rs` | every view of many parents recomputed from one read, for a rebuild's batch |
//! | `malformed.rs` | the children no subset may embed, and why |
//! | `size.rs` | the children too large for any subset of their parent |

use crate::bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::model_change::{self, MARKER};
use super::parent_write::{Guard, ParentUpdate, Written};
use super::{query, RawChildren};
use crate::action::{span, Action, Operation};
use crate::engine::WriteMode;
use crate::error::{Error, Result};

mod computed;
mod drift;
mod fix;
#[cfg(test)]
mod fixtures;
mod malformed;
mod rebuilt;
mod size;
mod state;
mod totals;

pub use drift::{Drift, SumDrift};
use fix::Fix;
pub(in crate::engine) use malformed::embeddable;
pub use malformed::MalformedChild;
use malformed::Rules;
pub(crate) use rebuilt::Rebuilt;
pub(in crate::engine) use size::{carried, fits};
use state::{Expected, Stored};

/// How many times an ordered (non-transactional) resync re-reads and retries when a concurrent
/// writer changed the subset between its reads and its conditional write.
const ORDERED_ATTEMPTS: usize = 16;

/// What one resync should do besides making the array right.
#[derive(Debug, Clone)]
pub(crate) enum CountFix {
    /// Apply this `$inc` to the count and the sums (a removal: count `-1`, each sum minus the
    /// child's value), exactly once; empty to leave them as they are.
    Inc(Document),
    /// Set the count and the sums to the child collection's (reconcile).
    Recount,
}

/// Whether a resync writes what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resync {
    /// [`RawChildren::check`]: reports only.
    Check,
    /// [`RawChildren::reconcile`]: writes the parent to agree with its children.
    Fix,
}

/// Which definition a parent a resync reads must have been built under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Built {
    /// This store's (every resync but a rebuild's): a parent built under another is settled.
    Here,
    /// As `Here`, but a parent built under another is first put to the rebuild's guard (a
    /// reconcile's or check's, not a write's).
    HereGuarded,
    /// As `Here`, but a parent whose adoption is under way (see
    /// [`crate::engine::model_change::ADOPTING`]) is put to the rebuild's guard: the follower's,
    /// which settles a parent of another definition as the writes it follows do, but must not
    /// drop the children of an adoption cut off that only its array holds.
    HereFollowing,
    /// Any (a rebuild's, which marks the parent after every view).
    Anywhere,
}

/// Whether a resync may empty a parent built under another definition that a rebuild would
/// refuse ([`RawStore::would_empty`]): a reconcile or check reaches the verdict a rebuild does,
/// unless it follows child writes (the follower), which settle such a parent as those writes do,
/// or is told to.
///
/// [`RawStore::would_empty`]: crate::engine::RawStore::would_empty
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Emptying {
    Refused,
    /// Asked for (`allow_emptying`): the children only the parent holds are dropped.
    Allowed,
    /// The follower's: allowed, but for a parent whose adoption is under way, whose array may
    /// hold the only copies of children an adoption cut off did not copy (the follower sees
    /// the copies it made).
    Following,
}

/// [`RawChildren::reconcile`] or [`RawChildren::check`] of one parent.
pub(crate) struct ResyncOf<'a> {
    subset: RawChildren<'a>,
    parent: Bson,
    resync: Resync,
    emptying: Emptying,
}

impl<'s, 'a: 's> Operation<'s> for ResyncOf<'a> {
    type Output = Drift;

    fn span(&self) -> tracing::Span {
        let (store, field, parent) = (
            self.subset.store(),
            Some(self.subset.spec().field),
            Some(&self.parent),
        );
        match self.resync {
            Resync::Check => span!("subset.check", store, field, parent),
            Resync::Fix => span!("subset.reconcile", store, field, parent),
        }
    }

    fn check(&self) -> Result<()> {
        self.subset.store().check_parent_id(&self.parent)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Drift> {
        let (s, parent) = (self.subset, &self.parent);
        let write = self.resync == Resync::Fix;
        // Pushes queued by callers that went away: written first where a fold can run (a
        // transaction of its own), so that the resync sees their children.
        let store = s.store();
        let fold = write && caller.is_none() && store.mode().await? == WriteMode::Transactional;
        let queued = match fold {
            true => s.pushes().fold_queued(parent).await?,
            false => s.pushes().queued(parent).await?,
        };
        let steps = ResyncSteps {
            subset: &s,
            parent,
            resync: self.resync,
            built: match self.emptying {
                Emptying::Refused => Built::HereGuarded,
                Emptying::Allowed => Built::Here,
                Emptying::Following => Built::HereFollowing,
            },
        };
        match exec::execute(store, caller, &steps).await {
            Ok(mut drift) => {
                drift.fixed |= fold && !queued.is_empty();
                drift.queued = queued;
                Ok(drift)
            }
            Err(Error::ParentNotFound { collection, id }) => {
                // Its fold documents have no subject any more.
                if write {
                    store.drop_folds(&mut Ctx::apart(), parent).await?;
                }
                Err(Error::ParentNotFound { collection, id })
            }
            Err(e) => Err(e),
        }
    }
}

impl RawChildren<'_> {
    /// Recomputes the subset (the top `keep` of the child collection), the count and the running
    /// sums, writes them if they differ, and reports what differed.
    ///
    /// Safe while writers run: the write is conditional on the subset and count being as read,
    /// and is retried otherwise, so it never overwrites a child pushed after it read. In
    /// [`crate::WriteMode::Ordered`] a push whose child is stored but whose parent update is
    /// still in flight can leave the count one high; the next reconcile corrects it.
    ///
    /// # Errors
    ///
    /// [`Error::ParentNotFound`] (and the parent's fold documents, if any, are deleted),
    /// [`Error::MalformedParent`] when the stored subset field is not an array, [`Error::MalformedChild`] when a stored child's summed field is not a number,
    /// [`Error::Mongo`]; [`Error::RebuildWouldEmpty`] for a parent built under another
    /// definition that a rebuild would refuse.
    pub fn reconcile<'r>(&'r self, parent: &Bson) -> Action<'r, Drift> {
        Action::of(self.resync_of(parent, Resync::Fix, Emptying::Refused))
    }

    /// What [`RawChildren::reconcile`] would find, without writing anything.
    ///
    /// In a transaction on a replica set, so that its reads see one snapshot and a push landing
    /// between them is not reported as drift.
    ///
    /// # Errors
    ///
    /// As [`RawChildren::reconcile`].
    pub fn check<'r>(&'r self, parent: &Bson) -> Action<'r, Drift> {
        Action::of(self.resync_of(parent, Resync::Check, Emptying::Refused))
    }

    /// The operation of [`RawChildren::reconcile`] or [`RawChildren::check`].
    pub(crate) fn resync_of(
        &self,
        parent: &Bson,
        resync: Resync,
        emptying: Emptying,
    ) -> ResyncOf<'_> {
        ResyncOf {
            subset: *self,
            parent: parent.clone(),
            resync,
            emptying,
        }
    }
}

/// The recomputing subsystem of one subset field: a subset, its count and its sums recomputed
/// from the child collection (see the module docs), for the reconcile, the writes that re-rank
/// (remove, update, patch, move) and the rebuild of another definition's parent.
#[derive(Clone, Copy)]
pub(crate) struct Recompute<'a> {
    subset: RawChildren<'a>,
}

impl<'a> std::ops::Deref for Recompute<'a> {
    type Target = RawChildren<'a>;

    fn deref(&self) -> &RawChildren<'a> {
        &self.subset
    }
}

impl<'a> RawChildren<'a> {
    /// The recomputing subsystem of this field.
    pub(crate) fn recompute(&self) -> Recompute<'a> {
        Recompute { subset: *self }
    }
}

impl Recompute<'_> {
    /// Reads the subset and the count, then the child collection's top `keep` (and count), and,
    /// when `write`, makes the parent agree with them in one conditional update.
    ///
    /// The parent is read first: a push whose parent update lands after that read changes the
    /// array or the count, so the conditional update misses and we read again; a push whose
    /// child we counted but whose update comes after ours finds its child embedded and skips
    /// (see `RawChildren::push_filter`).
    ///
    /// A parent built under another definition of the model is settled instead (see
    /// [`crate::engine::definition`]): every view rebuilt, or the parent marked for a rebuild,
    /// and the drift says [`Drift::outdated`]. A caller resyncing several views stops there,
    /// as the settling has done them all, counts and sums included.
    pub(crate) async fn resync(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        count_fix: &CountFix,
        resync: Resync,
    ) -> Result<Drift> {
        self.resync_as(ctx, parent, count_fix, resync, Built::Here)
            .await
    }

    /// Resyncs every view of this field's children on `parent`, each with the count fix
    /// `fix` gives it, stopping when one settles a parent of another definition (which did
    /// them all).
    pub(crate) async fn resync_views(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        fix: impl Fn(&crate::model::SubsetSpec) -> CountFix,
    ) -> Result<()> {
        for view in self.views() {
            if view
                .recompute()
                .resync(ctx, parent, &fix(view.spec()), Resync::Fix)
                .await?
                .outdated
            {
                break;
            }
        }
        Ok(())
    }

    /// Rebuilds this view of `parent` from the child collection whatever definition it was
    /// built under, counts and sums included: a part of
    /// [`crate::raw::Store::rebuild_parent`], which marks the parent after every view.
    pub(crate) async fn rebuild_view(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Drift> {
        self.resync_as(
            ctx,
            parent,
            &CountFix::Recount,
            Resync::Fix,
            Built::Anywhere,
        )
        .await
    }

    /// [`RawChildren::resync`] of a parent `built` as said.
    async fn resync_as(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        count_fix: &CountFix,
        resync: Resync,
        built: Built,
    ) -> Result<Drift> {
        let write = resync == Resync::Fix;
        let (marked, guarded) = (built != Built::Anywhere, built == Built::HereGuarded);
        // Whether `found` must be put to the rebuild's guard: a reconcile's or check's, or a
        // follower's of a parent whose adoption is under way.
        let spec = self.spec();
        let guards = |found: &RawDocument| {
            guarded || (built == Built::HereFollowing && model_change::adopting(found, spec))
        };
        let store = self.store();
        let attempts = if ctx.atomic() { 1 } else { ORDERED_ATTEMPTS };
        let mut drift = Drift::default();
        let raw_parents = store.parents::<RawDocumentBuf>();
        for attempt in 0..attempts {
            // Writers that missed each other's conditional updates spread out rather than
            // read and miss again at once (a hot parent's re-ranking votes, without a
            // transaction).
            if attempt > 0 {
                super::exec::backoff(attempt as u32).await;
            }
            // The parent's subset and count, as stored.
            let mut projection = query::subset_projection(spec);
            // Only a store that notes what it leaves out needs the parent's size (see below).
            if !store.model().is_partial() {
                size::project(&mut projection);
            }
            let find = raw_parents
                .find_one(doc! { "_id": parent.clone() })
                .projection(projection);
            let found = ctx
                .run(find)
                .await
                .map_err(|e| store.mongo(e))?
                .ok_or_else(|| self.parent_not_found(parent))?;
            if marked {
                // A check reads only (and registers nothing).
                let registry = match write {
                    true => store.model().registry().await?,
                    false => store.model().registry_to_read().await?,
                };
                // An unmarked parent without the field was not built under this model (a view
                // added since): rebuilt whole, like any other.
                let unbuilt = !store.model().is_partial()
                    && matches!(found.get(MARKER), Ok(None))
                    && matches!(found.get(spec.field), Ok(None));
                if unbuilt || !store.model().built_here(&found, &registry) {
                    if guards(&found) {
                        // Before anything is settled: refused here, it is refused everywhere.
                        store.model().would_empty(ctx, parent).await?;
                    }
                    drift = Drift {
                        parent: parent.clone(),
                        outdated: true,
                        ..Drift::default()
                    };
                    if write {
                        // Settled by the executor after the steps: rebuilt when this is the
                        // current definition.
                        ctx.outdated(parent);
                        drift.fixed = store.model().rebuilds_outdated().await?;
                    }
                    return Ok(drift);
                }
            }
            let stored = Stored::of(&found, store.collection_name(), spec)?;

            // The truth: the child collection's first `keep` that may be embedded, and its
            // count when it is needed. A check or reconcile also reports the malformed ones.
            let recount = matches!(count_fix, CountFix::Recount);
            let malformed = match recount {
                true => self.malformed(ctx, parent).await?,
                false => Vec::new(),
            };
            // A child the parent cannot hold is left out, as a malformed one is (see `size.rs`),
            // by a store that notes it for pages; a store of some fields, which writes no note,
            // lets the server refuse the subset instead.
            let noting = !store.model().is_partial();
            let mut unheld: Vec<MalformedChild> = Vec::new();
            let (top, mut head_malformed) = loop {
                let left_out: Vec<Bson> = unheld.iter().map(|m| m.child.clone()).collect();
                let (top, head) = self.top(ctx, parent, &malformed, &left_out).await?;
                let bytes = size::of(&found).unwrap_or(0);
                let unheld_child = noting
                    .then(|| size::unheld(spec, parent, bytes, stored.embedded(), &top))
                    .flatten();
                match unheld_child {
                    // One the running operation stores is refused, with what it wrote.
                    Some((child, with)) if ctx.stores(&child.child) => {
                        return Err(Error::SubsetTooLarge {
                            collection: store.collection_name().to_owned(),
                            id: Box::new(parent.clone()),
                            field: spec.field.to_owned(),
                            bytes: with.max(0) as u64,
                        });
                    }
                    Some((child, _)) => unheld.push(child),
                    None => break (top, head),
                }
            };
            head_malformed.extend(unheld.iter().map(|m| m.child.clone()));
            let mut malformed = malformed;
            malformed.extend(unheld);
            let kept = spec.count.is_some() || !spec.sums.is_empty();
            let totals = match recount && kept {
                true => Some(self.totals(ctx, parent).await?),
                false => None,
            };
            let expected = Expected {
                top,
                totals,
                head_malformed,
                noting,
            };

            drift = Drift::between(spec, parent, &stored, &expected);
            drift.malformed = malformed;
            // A parent no write of this library has marked, or one whose adoption was cut
            // off, holding children the child collection lacks: they may not be stale but the
            // only copies, which a reconcile must not drop (see `would_empty`).
            let unmigrated = !model_change::marked(&found) || stored.adopting;
            if guards(&found) && !drift.stale.is_empty() && unmigrated {
                store.model().would_empty(ctx, parent).await?;
            }
            if !write {
                return Ok(drift);
            }
            let Some(Fix { filter, update }) =
                Fix::of(spec, parent, &stored, &expected, &drift, count_fix)
            else {
                // A write of children that leaves this view as it is (see
                // `ParentUpdate::touch_only`).
                if marked && matches!(count_fix, CountFix::Inc(_)) {
                    let touch = ParentUpdate::touch_only();
                    let written = store.write_parent(ctx, parent, touch).await?;
                    drift.outdated = written == Written::Outdated;
                }
                return Ok(drift);
            };
            // The conditions of `Fix` hold `_id` already.
            let mut own = filter;
            own.remove("_id");
            let write = ParentUpdate {
                filter: own,
                // A rebuild under another definition between our read and this write makes
                // it miss, and the executor settles the parent.
                guard: if marked {
                    Guard::Marked
                } else {
                    Guard::Rebuild
                },
                ..ParentUpdate::of(update)
            };
            let written = match store.write_parent(ctx, parent, write).await {
                Ok(written) => written,
                Err(e) => {
                    let adding =
                        super::bson_len(&expected.top) - super::bson_len(stored.embedded());
                    return Err(query::parent_write_error(self, e, parent, adding).await);
                }
            };
            match written {
                Written::Applied => {
                    drift.fixed = true;
                    return Ok(drift);
                }
                Written::Missing => return Err(self.parent_not_found(parent)),
                Written::Outdated => {
                    drift.outdated = true;
                    return Ok(drift);
                }
                Written::Missed => {}
            }
            tracing::debug!(parent = %parent, "subset changed while resyncing; reading again");
        }
        // Still changed under every attempt: by writers that take no turns (another program,
        // an older version of this library), or, in a transaction, a snapshot that moved. The
        // view is not left as it is: the parent is rebuilt from the child collection after the
        // steps (or marked for a rebuild), which also counts what this write removed. A
        // rebuild's own recompute reports it, and the rebuild tries again.
        if marked {
            ctx.outdated(parent);
            drift.outdated = true;
        }
        Ok(drift)
    }
}

impl Recompute<'_> {
    /// The children of `parent` that no subset may embed (see [`MalformedChild`]), up to
    /// [`malformed::MALFORMED_LISTED`]: one query over the parent's children.
    async fn malformed(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Vec<MalformedChild>> {
        let rules = Rules::of(self.spec(), self.view_specs());
        let children = self.children::<Document>();
        let find = children
            .find(rules.filter(parent))
            .limit(malformed::MALFORMED_LISTED);
        let found = ctx.collect(find).await.map_err(|e| self.mongo_child(e))?;
        Ok(rules.reports(&found))
    }

    /// The child collection's first `keep` children of `parent` in their embedded form, none of
    /// them malformed, and the `_id`s of the malformed ones among its own first `keep` (which a
    /// page from the collection meets, and the parent's marker notes).
    ///
    /// The first query leaves nothing out, so that it finds those; any malformed child it
    /// returns, and the `known` ones, are left out of the next, until one returns none (on a
    /// backfill, which knows none, the first query is usually the last). A malformed child is
    /// never embedded.
    ///
    /// The `left_out` children (too large to embed, see `size.rs`) are left out of every query.
    async fn top(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        known: &[MalformedChild],
        left_out: &[Bson],
    ) -> Result<(Vec<Document>, Vec<Bson>)> {
        let children = self.children::<Document>();
        let find = query::top_children(&children, self.spec(), parent, left_out);
        let first = ctx.collect(find).await.map_err(|e| self.mongo_child(e))?;
        self.top_after(ctx, parent, first, known, left_out).await
    }

    /// The malformed children of `first` (the result of the first query of `top`, sent by it
    /// or as part of a read's `aggregate`), as `top` finds them.
    fn malformed_in(&self, first: &[Document]) -> Vec<Bson> {
        let rules = Rules::of(self.spec(), self.view_specs());
        first
            .iter()
            .filter(|child| rules.problem(child, false).is_some())
            .map(|child| child.get("_id").cloned().unwrap_or(Bson::Null))
            .collect()
    }

    /// `top` from the result of its first query, `first`: no more query when it holds no
    /// malformed child.
    async fn top_after(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        first: Vec<Document>,
        known: &[MalformedChild],
        left_out: &[Bson],
    ) -> Result<(Vec<Document>, Vec<Bson>)> {
        let children = self.children::<Document>();
        let mut excluded: Vec<Bson> = left_out.to_vec();
        let mut top = first;
        let mut head: Option<Vec<Bson>> = None;
        loop {
            let found = self.malformed_in(&top);
            let in_head = head.get_or_insert_with(|| found.clone());
            if found.is_empty() {
                return Ok((top, std::mem::take(in_head)));
            }
            for id in found
                .into_iter()
                .chain(known.iter().map(|m| m.child.clone()))
            {
                if !excluded.contains(&id) {
                    excluded.push(id);
                }
            }
            let find = query::top_children(&children, self.spec(), parent, &excluded);
            top = ctx.collect(find).await.map_err(|e| self.mongo_child(e))?;
        }
    }
}

/// [`RawChildren::reconcile`] and [`RawChildren::check`].
struct ResyncSteps<'s, 'a> {
    subset: &'s RawChildren<'a>,
    parent: &'s Bson,
    resync: Resync,
    built: Built,
}

impl Steps for ResyncSteps<'_, '_> {
    type Output = Drift;

    fn parents(&self) -> Vec<&Bson> {
        // A check reads only.
        match self.resync {
            Resync::Fix => vec![self.parent],
            Resync::Check => Vec::new(),
        }
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<Drift> {
        let (resync, built) = (self.resync, self.built);
        self.subset
            .recompute()
            .resync_as(ctx, self.parent, &CountFix::Recount, resync, built)
            .await
    }
}
