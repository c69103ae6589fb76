//! Reading and deleting a parent.

use crate::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::query::{self, Ahead};
use super::RawStore;
use crate::action::{span, Action, Operation};
use crate::error::{Error, Result};

impl RawStore {
    /// Reads one parent document, as this store's model sees it: see [`crate::Store::get`] for
    /// what a subset built under another definition costs.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`]; [`Error::MalformedParent`] when a subset built under another
    /// definition must be replaced in a parent that cannot be decoded.
    pub fn get(&self, id: &Bson) -> Action<'_, Option<RawDocumentBuf>> {
        Action::of(Get {
            store: self,
            id: id.clone(),
        })
    }

    /// Deletes a parent and its children; see [`crate::Store::delete`].
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub fn delete(&self, id: &Bson) -> Action<'_, bool> {
        Action::of(Delete {
            store: self,
            id: id.clone(),
        })
    }
}

/// [`RawStore::get`].
struct Get<'a> {
    store: &'a RawStore,
    id: Bson,
}

impl<'s, 'a: 's> Operation<'s> for Get<'a> {
    type Output = Option<RawDocumentBuf>;

    fn span(&self) -> tracing::Span {
        span!("subset.get", self.store, None::<&str>, Some(&self.id))
    }

    fn check(&self) -> Result<()> {
        self.store.check_parent_id(&self.id)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Self::Output> {
        let store = self.store;
        let ctx = &mut Ctx::read(caller);
        let lookups = store.computed_lookups(&self.id);
        if !lookups.is_empty() {
            match query::read_ahead(store, ctx, &self.id, None, lookups).await? {
                Ahead::Read(parent, read) => {
                    return store
                        .model()
                        .served(ctx, parent, Some(&read))
                        .await
                        .map(Some);
                }
                Ahead::Missing => return Ok(None),
                Ahead::Apart => {}
            }
        }
        let parents = store.parents::<RawDocumentBuf>();
        let found = ctx
            .run(parents.find_one(doc! { "_id": self.id.clone() }))
            .await
            .map_err(|e| store.mongo(e))?;
        match found {
            Some(found) => store.model().served(ctx, found, None).await.map(Some),
            None => Ok(None),
        }
    }
}

/// [`RawStore::delete`]: the parent first, so a crash leaves invisible orphans rather than a
/// parent whose embedded children are gone from the collection; its fold documents last (a
/// crash before leaves them to `reconcile_all`).
struct Delete<'a> {
    store: &'a RawStore,
    id: Bson,
}

impl<'s, 'a: 's> Operation<'s> for Delete<'a> {
    type Output = bool;

    fn span(&self) -> tracing::Span {
        span!("subset.delete", self.store, None::<&str>, Some(&self.id))
    }

    fn check(&self) -> Result<()> {
        self.store.check_parent_id(&self.id)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<bool> {
        exec::execute(self.store, caller, &self).await
    }
}

impl Steps for Delete<'_> {
    type Output = bool;

    fn parents(&self) -> Vec<&Bson> {
        vec![&self.id]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<bool> {
        let parents = self.store.parents::<Document>();
        let deleted = ctx
            .run(parents.delete_one(doc! { "_id": self.id.clone() }))
            .await
            .map_err(|e| self.store.mongo(e))?;
        for spec in self.store.spec().subsets {
            let coll = self
                .store
                .database()
                .collection::<Document>(spec.child_collection);
            ctx.run(coll.delete_many(doc! { spec.key: self.id.clone() }))
                .await
                .map_err(|e| Error::mongo(spec.child_collection, e))?;
        }
        self.store.drop_folds(ctx, &self.id).await?;
        Ok(deleted.deleted_count > 0)
    }
}
