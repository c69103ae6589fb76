//! Partial updates of one child: `$set`, `$unset` and `$inc` of some of its fields, applied to
//! the child collection and to every embedded copy in one write each.
//!
//! The child is changed first, with `findOneAndUpdate`, which returns it as it was: the change
//! and the state it applied to are one atomic fact, so each patch knows exactly what it moved
//! (a `+1` vote moves a sum by 1 whatever other votes land meanwhile). Then each view of the
//! child is brought along by the cheapest write that keeps it true:
//!
//! - a view the child neither was nor is in: nothing;
//! - a view the child stays in and ranks no lower in (a vote on a view of the most voted):
//!   re-ranked in place, in a pipeline update with `$sortArray` (MongoDB 5.2): its copies of
//!   the others, then the child as it is now, sorted, the first `keep`. No other child can
//!   enter or leave it, so nothing is read. The update's filter asks that the view hold a copy
//!   of the child or be full; a parent where neither holds is recomputed instead;
//! - a view whose order or filter the patch touches otherwise: recomputed from the child
//!   collection (the child may enter or leave it, with backfill), its count and sums moved by
//!   the difference;
//! - any other view: the same operators on the embedded copy (`latest.$[c0].helpful`, matched
//!   by `_id` with an array filter), and its sums moved by the difference, all views in one
//!   parent update; none at all when the patch touches no field a view embeds or sums.
//!
//! The operators are the same ones the child got, so the server applies them to the copy as it
//! did to the child: concurrent `$inc`s commute and leave the copy exact in either write mode.
//!
//! The patches queued on one parent run together (group commit): each child's patches composed
//! into one ([`ChildPatch::then`]) and every copy changed in place in one parent update. In a
//! transaction of ours, equal patches that change no field a view orders, filters or sums by
//! (votes on different reviews) are one `update` of all their children, since nothing needs
//! them as they were. Other patches of distinct children are read as they are in one `find`
//! (instead of a `findOneAndUpdate` each: in a transaction, whose update of them then
//! conflicts with any write since; without one, under the lease), and each equal patch is one
//! `update` of all of its children. Patches of several parents go together too
//! ([`super::abreast`]) when no view needs their children as they were, or only to re-rank in
//! place.
//!
//! | file | holds |
//! |---|---|
//! | `child_patch.rs` | [`ChildPatch`]: the change, its checks, how it composes and applies |
//! | `steps.rs` | the writes of one run of patches, and which view gets which |

use crate::bson::Bson;
use mongodb::ClientSession;

use super::abreast::{Aboard, Cargo};
use super::batch::Queued;
use super::exec;
use super::RawChildren;
use crate::action::{span, Action, Operation};
use crate::error::Result;
use std::sync::Arc;
// Only the docs link to it.
#[cfg(doc)]
use crate::error::Error;

pub(super) mod child_patch;
mod steps;
use steps::PatchSteps;
pub(in crate::engine) use steps::{apply_all, as_found, put_back, read_all, GroupWrites};

pub use child_patch::ChildPatch;

/// [`RawChildren::patch`].
pub(crate) struct PatchOne<'a> {
    subset: RawChildren<'a>,
    parent: Bson,
    child: Bson,
    patch: ChildPatch,
}

impl<'s, 'a: 's> Operation<'s> for PatchOne<'a> {
    type Output = ();

    fn span(&self) -> tracing::Span {
        let s = self.subset;
        span!(
            "subset.patch",
            s.store(),
            Some(s.spec().field),
            Some(&self.parent)
        )
    }

    fn check(&self) -> Result<()> {
        let s = self.subset;
        s.store().check_parent_id(&self.parent)?;
        s.check_child_id(&self.child)?;
        s.check_patch(&self.patch)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<()> {
        self.send(caller).await
    }
}

impl PatchOne<'_> {
    /// [`Operation::execute`]; of its own, for [`super::ByChild`] to call in a future the
    /// compiler can see is `Send`.
    pub(crate) async fn send(self, caller: Option<&mut ClientSession>) -> Result<()> {
        if self.patch.is_empty() {
            return Ok(());
        }
        let (s, parent) = (self.subset, &self.parent);
        let batch = vec![(self.child, self.patch)];
        // Unless the caller gives a session, patches of one parent's children go together: votes
        // on one hot child would otherwise conflict and retry in transactions, or take turns
        // on the parent one by one without them (see `exec::traffic`).
        if caller.is_none() {
            return s.patch_combined(parent, batch).await;
        }
        s.patch_alone(parent, &batch, caller).await
    }
}

impl RawChildren<'_> {
    /// Changes some fields of a stored child (matched by `_id` under `parent`) in the child
    /// collection and in every embedded copy of it, in every view: see [`ChildPatch`] and
    /// [`crate::Children::patch`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPatch`] (nothing is written), [`Error::ChildNotFound`],
    /// [`Error::ParentNotFound`], [`Error::Mongo`].
    pub fn patch<'r>(&'r self, parent: &Bson, child: &Bson, patch: &ChildPatch) -> Action<'r, ()> {
        Action::of(self.patch_one(parent.clone(), child.clone(), patch.clone()))
    }

    /// The operation of [`RawChildren::patch`].
    pub(crate) fn patch_one(&self, parent: Bson, child: Bson, patch: ChildPatch) -> PatchOne<'_> {
        PatchOne {
            subset: *self,
            parent,
            child,
            patch,
        }
    }

    /// What [`RawChildren::patch`] checks before it writes anything: the patch names neither the
    /// `_id` nor the parent key nor one field twice, unsets or nulls no field a view of these
    /// children orders, filters or sums by, and increments by numbers.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPatch`] naming the field.
    pub fn check_patch(&self, patch: &ChildPatch) -> Result<()> {
        patch.check(self.view_specs())
    }

    async fn patch_alone(
        &self,
        parent: &Bson,
        patches: &[(Bson, ChildPatch)],
        caller: Option<&mut ClientSession>,
    ) -> Result<()> {
        let steps = PatchSteps {
            subset: self,
            parent,
            patches,
        };
        exec::execute(self.store(), caller, &steps).await
    }

    /// `patches` with the patches queued on the same parent (see [`exec::traffic`]); when no
    /// view needs the children as they were (votes on a field no view ranks, filters or sums
    /// by), with the work queued for other parents too, while another group is in flight
    /// ([`exec::traffic::Across`]).
    async fn patch_combined(&self, parent: &Bson, patches: Vec<(Bson, ChildPatch)>) -> Result<()> {
        let group = self.view_specs().first().unwrap_or(self.spec()).field;
        let run = |work: &Queued| {
            let patches = work.patches().to_vec();
            async move {
                let ranks = steps::ranks(self, &patches).await?;
                if GroupWrites::of(self, parent, &patches, ranks).is_none() {
                    return self.patch_alone(parent, &patches, None).await;
                }
                let cargo = Cargo::Patches(patches.clone());
                let aboard = Aboard::new(self.spec().field, parent.clone(), cargo);
                let mine = &patches;
                let alone = move |_: Arc<Aboard>| self.patch_alone(parent, mine, None);
                self.store().ride(aboard, alone).await
            }
        };
        let work = Queued::Patches { group, patches };
        self.store().traffic().together(parent, work, run).await
    }
}
