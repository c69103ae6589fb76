//! Calls by a child's `_id` alone (a "helpful" button knows the review, not its product): the
//! parent key is read from the child collection, then the call on (parent, child) runs as it
//! would have.
//!
//! A child moved to another parent between the read and the write is found missing under the
//! parent read; the key is then read again and the call retried under the new parent, so a
//! concurrent move makes the call neither fail nor land on the wrong parent. In the caller's
//! transaction the read and the write see one snapshot, and the retry never happens.

use std::future::Future;

use mongodb::ClientSession;

use super::exec::Ctx;
use super::move_child::Move;
use super::patch::ChildPatch;
use super::RawChildren;
use crate::action::{span, Action, Operation};
use crate::bson::{doc, Bson, Document};
use crate::error::{Error, Result};

/// How many times a call follows a child that keeps moving before it reports what it found.
const ATTEMPTS: usize = 4;

impl RawChildren<'_> {
    /// The parent a child is stored under, read from the child collection.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownChild`] when no child has this `_id`, or it carries no parent key;
    /// [`Error::Mongo`].
    pub fn parent_of<'r>(&'r self, child: &Bson) -> Action<'r, Bson> {
        Action::of(ParentOf {
            subset: *self,
            child: child.clone(),
        })
    }

    /// Runs `call` under the parent `child` is stored under, following it if it moves.
    async fn under_parent<'s, F>(
        &'s self,
        child: &Bson,
        mut caller: Option<&'s mut ClientSession>,
        mut call: impl FnMut(Bson, Option<&'s mut ClientSession>) -> F,
    ) -> Result<()>
    where
        F: Future<Output = (Result<()>, Option<&'s mut ClientSession>)>,
    {
        let of = ParentOf {
            subset: *self,
            child: child.clone(),
        };
        of.check()?;
        let mut parent = of.read(caller.as_deref_mut()).await?;
        for _ in 1..ATTEMPTS {
            let (result, back) = call(parent.clone(), caller).await;
            caller = back;
            match result {
                Err(Error::ChildNotFound { .. }) => {
                    let now = of.read(caller.as_deref_mut()).await?;
                    if now == parent {
                        return result;
                    }
                    parent = now;
                }
                other => return other,
            }
        }
        call(parent, caller).await.0
    }

    /// [`RawChildren::patch`] of a child named by its `_id` alone; see
    /// [`crate::Children::patch_by_id`].
    ///
    /// # Errors
    ///
    /// As [`RawChildren::patch`], and [`Error::UnknownChild`].
    pub fn patch_by_id<'r>(&'r self, child: &Bson, patch: &ChildPatch) -> Action<'r, ()> {
        Action::of(ByChild::patch(*self, child.clone(), patch.clone()))
    }

    /// [`RawChildren::move_child`] of a child named by its `_id` alone; see
    /// [`crate::Children::move_by_id`].
    ///
    /// # Errors
    ///
    /// As [`RawChildren::move_child`], and [`Error::UnknownChild`].
    pub fn move_by_id<'r>(&'r self, child: &Bson, to: &Bson) -> Action<'r, ()> {
        Action::of(ByChild {
            subset: *self,
            child: child.clone(),
            call: Call::Move(to.clone()),
        })
    }
}

/// [`RawChildren::parent_of`].
struct ParentOf<'a> {
    subset: RawChildren<'a>,
    child: Bson,
}

impl<'s, 'a: 's> Operation<'s> for ParentOf<'a> {
    type Output = Bson;

    fn span(&self) -> tracing::Span {
        let (store, field) = (self.subset.store(), Some(self.subset.spec().field));
        span!("subset.parent_of", store, field, None)
    }

    fn check(&self) -> Result<()> {
        self.subset.check_child_id(&self.child)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Bson> {
        self.read(caller).await
    }
}

impl ParentOf<'_> {
    /// [`Operation::execute`]; of its own, for [`ByChild`] to call in a future the compiler
    /// can see is `Send`.
    async fn read(&self, caller: Option<&mut ClientSession>) -> Result<Bson> {
        let (s, child) = (self.subset, &self.child);
        let key = s.spec().key;
        let children = s.children::<Document>();
        let find = children
            .find_one(doc! { "_id": child.clone() })
            .projection(doc! { key: 1 });
        let found = Ctx::read(caller)
            .run(find)
            .await
            .map_err(|e| s.mongo_child(e))?;
        found
            .and_then(|mut found| found.remove(key))
            .filter(|parent| !matches!(parent, Bson::Null))
            .ok_or_else(|| Error::UnknownChild {
                collection: s.spec().child_collection.to_owned(),
                id: Box::new(child.clone()),
            })
    }
}

/// A call on a child named by its `_id` alone.
pub(crate) struct ByChild<'a> {
    subset: RawChildren<'a>,
    child: Bson,
    call: Call,
}

/// What [`ByChild`] does under the child's parent.
enum Call {
    Patch(ChildPatch),
    /// A move to this parent.
    Move(Bson),
}

impl<'a> ByChild<'a> {
    /// [`RawChildren::patch_by_id`].
    pub(crate) fn patch(subset: RawChildren<'a>, child: Bson, patch: ChildPatch) -> Self {
        ByChild {
            subset,
            child,
            call: Call::Patch(patch),
        }
    }
}

impl<'s, 'a: 's> Operation<'s> for ByChild<'a> {
    type Output = ();

    fn span(&self) -> tracing::Span {
        let (store, field) = (self.subset.store(), Some(self.subset.spec().field));
        match self.call {
            Call::Patch(_) => span!("subset.patch_by_id", store, field, None),
            Call::Move(_) => span!("subset.move_by_id", store, field, None),
        }
    }

    fn check(&self) -> Result<()> {
        self.subset.check_child_id(&self.child)?;
        match &self.call {
            Call::Patch(patch) => self.subset.check_patch(patch),
            Call::Move(to) => self.subset.store().check_parent_id(to),
        }
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<()> {
        let (subset, child) = (self.subset, &self.child);
        let call = &self.call;
        subset
            .under_parent(child, caller, |parent, mut caller| async move {
                let result = match call {
                    Call::Patch(patch) => {
                        let one = subset.patch_one(parent, child.clone(), patch.clone());
                        match one.check() {
                            Ok(()) => one.send(caller.as_deref_mut()).await,
                            Err(e) => Err(e),
                        }
                    }
                    Call::Move(to) => {
                        let move_child = Move {
                            subset,
                            from: parent,
                            child: child.clone(),
                            to: to.clone(),
                        };
                        match move_child.check() {
                            Ok(()) => move_child.send(caller.as_deref_mut()).await,
                            Err(e) => Err(e),
                        }
                    }
                };
                (result, caller)
            })
            .await
    }
}
