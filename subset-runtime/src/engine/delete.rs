//! Reading and deleting a parent.

use crate::bson::{doc, Bson, Document, RawDocumentBuf};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::RawStore;
use crate::action::Action;
use crate::error::{Error, Result};

impl RawStore {
    /// Reads one parent document, as this store's model sees it: see [`crate::Store::get`] for
    /// what a subset built under another definition costs.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`]; [`Error::MalformedParent`] when a subset built under another
    /// definition must be replaced in a parent that cannot be decoded.
    pub fn get<'a>(&'a self, id: &'a Bson) -> Action<'a, Option<RawDocumentBuf>> {
        Action::new(move |session| Box::pin(self.get_in(id, session)))
    }

    #[tracing::instrument(skip_all, fields(collection = %self.collection_name()))]
    pub(crate) async fn get_in(
        &self,
        id: &Bson,
        caller: Option<&mut ClientSession>,
    ) -> Result<Option<RawDocumentBuf>> {
        self.check_parent_id(id)?;
        let parents = self.parents::<RawDocumentBuf>();
        let ctx = &mut Ctx::read(caller);
        let found = ctx
            .run(parents.find_one(doc! { "_id": id.clone() }))
            .await
            .map_err(|e| self.mongo(e))?;
        match found {
            Some(found) => self.served(ctx, found).await.map(Some),
            None => Ok(None),
        }
    }

    /// Deletes a parent and its children; see [`crate::Store::delete`].
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub fn delete<'a>(&'a self, id: &'a Bson) -> Action<'a, bool> {
        Action::new(move |session| Box::pin(self.delete_in(id, session)))
    }

    #[tracing::instrument(skip_all, fields(collection = %self.collection_name()))]
    pub(crate) async fn delete_in(
        &self,
        id: &Bson,
        caller: Option<&mut ClientSession>,
    ) -> Result<bool> {
        self.check_parent_id(id)?;
        exec::execute(self, caller, &DeleteSteps { store: self, id }).await
    }
}

/// The writes of [`RawStore::delete`]: the parent first, so a crash leaves invisible orphans
/// rather than a parent whose embedded children are gone from the collection; its fold
/// documents last (a crash before leaves them to `reconcile_all`).
struct DeleteSteps<'a> {
    store: &'a RawStore,
    id: &'a Bson,
}

impl Steps for DeleteSteps<'_> {
    type Output = bool;

    fn parents(&self) -> Vec<&Bson> {
        vec![self.id]
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
        self.store.drop_folds(ctx, self.id).await?;
        Ok(deleted.deleted_count > 0)
    }
}
