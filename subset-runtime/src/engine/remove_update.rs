//! Removing and replacing one child: the child collection first, then the subset is recomputed
//! from it (backfilling a removed child, re-ranking a replaced one).

use crate::bson::{doc, Bson, Document};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::resync::CountFix;
use super::RawChildren;
use crate::action::{span, Action, Operation};
use crate::error::{driver, Error, Result};

impl RawChildren<'_> {
    /// Removes a child from the child collection and from the subset, decrements the count (and
    /// takes its values off the sums) and,
    /// if the child was embedded, backfills the next child so the subset is again the top `keep`.
    ///
    /// # Errors
    ///
    /// [`Error::ChildNotFound`] when no child with that `_id` is stored under `parent` (nothing
    /// changes), [`Error::Mongo`].
    pub fn remove<'r>(&'r self, parent: &Bson, child: &Bson) -> Action<'r, ()> {
        Action::of(ChildWrite {
            subset: *self,
            parent: parent.clone(),
            child: child.clone(),
            replacement: None,
            before: std::sync::Mutex::default(),
        })
    }

    /// Replaces a stored child (matched by `_id` under `parent`) in the child collection and its
    /// embedded copy; when its sort keys changed, the subset is recomputed, so the child may
    /// enter or leave it.
    ///
    /// # Errors
    ///
    /// [`Error::ChildNotFound`], [`Error::ChildWithoutId`], [`Error::MalformedChild`] when a summed field
    /// (see [`crate::spec::SumSpec`]) is not a number, [`Error::ParentKeyMismatch`] when the
    /// child's parent key names another parent, [`Error::Mongo`].
    pub fn update<'r>(&'r self, parent: &Bson, child: Document) -> Action<'r, ()> {
        Action::of(ChildWrite {
            subset: *self,
            parent: parent.clone(),
            child: child.get("_id").cloned().unwrap_or(Bson::Null),
            replacement: Some(child),
            before: std::sync::Mutex::default(),
        })
    }
}

/// [`RawChildren::remove`] (no replacement) or [`RawChildren::update`].
struct ChildWrite<'a> {
    subset: RawChildren<'a>,
    parent: Bson,
    child: Bson,
    replacement: Option<Document>,
    /// Without a transaction, the child as it was, for [`Steps::take_back`].
    before: std::sync::Mutex<Option<Document>>,
}

impl<'s, 'a: 's> Operation<'s> for ChildWrite<'a> {
    type Output = ();

    fn span(&self) -> tracing::Span {
        let (store, field, parent) = (
            self.subset.store(),
            Some(self.subset.spec().field),
            Some(&self.parent),
        );
        match self.replacement {
            None => span!("subset.remove", store, field, parent),
            Some(_) => span!("subset.update", store, field, parent),
        }
    }

    fn check(&self) -> Result<()> {
        let s = self.subset;
        s.store().check_parent_id(&self.parent)?;
        let Some(child) = &self.replacement else {
            return s.check_child_id(&self.child);
        };
        s.child_id(child)?;
        for spec in s.view_specs() {
            super::sums::check_child(spec, child)?;
        }
        Ok(())
    }

    async fn execute(mut self, caller: Option<&'s mut ClientSession>) -> Result<()> {
        if let Some(child) = self.replacement.take() {
            let spec = self.subset.spec();
            self.replacement = Some(super::parent_key::keyed(spec, &self.parent, child)?);
        }
        exec::execute(self.subset.store(), caller, &self).await
    }
}

impl Steps for ChildWrite<'_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![&self.parent]
    }

    async fn take_back(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let before = self.before.lock().unwrap_or_else(|e| e.into_inner()).take();
        match before {
            Some(before) => self.put_back(ctx, &before).await,
            None => Ok(()),
        }
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let s = self.subset;
        let spec = s.spec();
        let filter = doc! { "_id": self.child.clone(), spec.key: self.parent.clone() };
        let children = s.children::<Document>();
        if self.replacement.is_some() {
            ctx.storing([self.child.clone()]);
        }
        // The child as it was, to put back if the subset cannot follow.
        let before = match &self.replacement {
            None => ctx.run(children.find_one_and_delete(filter)).await,
            Some(stored) => ctx.run(children.find_one_and_replace(filter, stored)).await,
        };
        let Some(before) = before.map_err(|e| s.mongo_child(e))? else {
            return Err(Error::ChildNotFound {
                collection: spec.child_collection.to_owned(),
                parent: Box::new(self.parent.clone()),
                id: Box::new(self.child.clone()),
            });
        };
        if !ctx.atomic() {
            *self.before.lock().unwrap_or_else(|e| e.into_inner()) = Some(before.clone());
        }
        // Every view is recomputed; its count and sums move by what left it and what came in
        // (a flag that flipped moves the child between them), exactly once.
        let added: Vec<&Document> = self.replacement.iter().collect();
        let resynced = s
            .recompute()
            .resync_views(ctx, &self.parent, |view| {
                CountFix::Inc(super::sums::inc(view, &added, &[&before]))
            })
            .await;
        match resynced {
            Ok(()) => Ok(()),
            // Refused by the server (the re-ranked subset would not fit, say) outside a
            // transaction: the child goes back as it was, so the write leaves nothing, as a
            // transaction would; views resynced before the refusal are rebuilt from it.
            Err(e) if !ctx.atomic() && driver::was_refused(&e) => {
                self.put_back(ctx, &before).await?;
                ctx.outdated(&self.parent);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

impl ChildWrite<'_> {
    /// Puts the child back as it was (`before`), without a transaction: inserted again after a
    /// remove, replaced after an update.
    async fn put_back(&self, ctx: &mut Ctx<'_>, before: &Document) -> Result<()> {
        let s = self.subset;
        let children = s.children::<Document>();
        let undo = doc! { "_id": self.child.clone(), s.spec().key: self.parent.clone() };
        let put_back = match self.replacement {
            None => ctx.run(children.insert_one(before)).await.map(|_| ()),
            Some(_) => ctx
                .run(children.replace_one(undo, before))
                .await
                .map(|_| ()),
        };
        put_back.map_err(|e| s.mongo_child(e))
    }
}
