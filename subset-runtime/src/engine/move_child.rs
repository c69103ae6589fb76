//! Moving a child to another parent: its parent key changes in the child collection, the old
//! parent's views lose it (backfilled, counted down, its values off the sums) and the new
//! parent's views take it in (re-ranked, counted, summed).

use crate::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::query;
use super::resync::CountFix;
use super::RawChildren;
use crate::action::{span, Action, Operation};
use crate::error::driver;
use crate::error::Result;

impl RawChildren<'_> {
    /// Moves a child stored under `from` to `to`; see [`crate::Children::move_child`].
    ///
    /// # Errors
    ///
    /// As [`crate::Children::move_child`].
    pub fn move_child<'r>(&'r self, from: &Bson, child: &Bson, to: &Bson) -> Action<'r, ()> {
        Action::of(Move {
            subset: *self,
            from: from.clone(),
            child: child.clone(),
            to: to.clone(),
        })
    }
}

/// [`RawChildren::move_child`].
pub(super) struct Move<'a> {
    pub(super) subset: RawChildren<'a>,
    pub(super) from: Bson,
    pub(super) child: Bson,
    pub(super) to: Bson,
}

impl<'s, 'a: 's> Operation<'s> for Move<'a> {
    type Output = ();

    fn span(&self) -> tracing::Span {
        let field = Some(self.subset.spec().field);
        span!(
            "subset.move_child",
            self.subset.store(),
            field,
            Some(&self.from)
        )
    }

    fn check(&self) -> Result<()> {
        let s = self.subset;
        s.store().check_parent_id(&self.from)?;
        s.store().check_parent_id(&self.to)?;
        s.check_child_id(&self.child)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<()> {
        self.send(caller).await
    }
}

impl Move<'_> {
    /// [`Operation::execute`]; of its own, for [`super::ByChild`] to call in a future the
    /// compiler can see is `Send`.
    pub(super) async fn send(self, caller: Option<&mut ClientSession>) -> Result<()> {
        exec::execute(self.subset.store(), caller, &self).await
    }
}

impl Steps for Move<'_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![&self.from, &self.to]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let s = self.subset;
        let spec = s.spec();
        // The new parent first, so that a move to nowhere changes nothing.
        if !query::has_parent(&s, ctx, &self.to).await? {
            return Err(s.parent_not_found(&self.to));
        }
        let filter = doc! { "_id": self.child.clone(), spec.key: self.from.clone() };
        let children = s.children::<Document>();
        let before = if self.from == self.to {
            ctx.run(children.find_one(filter)).await
        } else {
            let change = children
                .find_one_and_update(filter, doc! { "$set": { spec.key: self.to.clone() } })
                .return_document(ReturnDocument::Before);
            ctx.run(change).await
        };
        let Some(before) = before.map_err(|e| s.mongo_child(e))? else {
            return Err(query::child_not_found(&s, ctx, &self.from, &self.child).await);
        };
        if self.from == self.to {
            return Ok(());
        }
        ctx.storing([self.child.clone()]);
        // The old parent first: without a transaction, a crash between the two leaves the child
        // counted under both, which a reconcile of either repairs, never under neither.
        let moved = match s
            .recompute()
            .resync_views(ctx, &self.from, |view| {
                CountFix::Inc(super::sums::inc(view, &[], &[&before]))
            })
            .await
        {
            Ok(()) => {
                s.recompute()
                    .resync_views(ctx, &self.to, |view| {
                        CountFix::Inc(super::sums::inc(view, &[&before], &[]))
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        match moved {
            // Refused (the new parent cannot hold the child, or a count or sum would leave its
            // type) outside a transaction: the child goes back, and the old parent, which may
            // have let it go already, is rebuilt from the child collection.
            Err(e) if !ctx.atomic() && driver::was_refused(&e) => {
                let back = doc! { "_id": self.child.clone(), spec.key: self.to.clone() };
                let undo =
                    children.update_one(back, doc! { "$set": { spec.key: self.from.clone() } });
                ctx.run(undo).await.map_err(|e| s.mongo_child(e))?;
                ctx.outdated(&self.from);
                Err(e)
            }
            other => other,
        }
    }
}
