//! `push` and `push_many`: each child into the child collection, and one capped `$push`
//! (`$each`, `$sort`, `$slice: keep`) with `$inc` of the count into the parent.

use bson::{doc, Bson, Document};
use mongodb::ClientSession;

use super::driver_error::{self, InsertFailure};
use super::exec::{self, Ctx, Steps};
use super::{query, RawSubset};
use crate::action::Action;
use crate::error::{Error, Result};
use crate::order;

/// How many times an ordered push re-reads the subset when concurrent writers embedded some of
/// its children between its insert and its update.
const ORDERED_PUSH_ATTEMPTS: usize = 8;

/// A child ready to be written: its `_id`, its embedded form, and its child-collection form
/// (the embedded form plus the parent key).
struct Prepared {
    id: Bson,
    embedded: Document,
    stored: Document,
}

impl<'a> RawSubset<'a> {
    /// Adds children (documents with an `_id`); see [`crate::Subset::push`].
    ///
    /// # Errors
    ///
    /// As [`crate::Subset::push`].
    pub fn push<'r>(&'r self, parent: &'r Bson, children: Vec<Document>) -> Action<'r, ()> {
        Action::new(move |session| Box::pin(self.push_in(parent, children, session)))
    }

    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field, n = children.len()))]
    pub(crate) async fn push_in(
        &self,
        parent: &Bson,
        children: Vec<Document>,
        mut caller: Option<&mut ClientSession>,
    ) -> Result<()> {
        if children.is_empty() {
            return Ok(());
        }
        let batch = children
            .into_iter()
            .map(|c| self.prepare(parent, c))
            .collect::<Result<Vec<_>>>()?;
        // Optimistic: stored children (a retry) are looked for only after a duplicate aborted
        // the first attempt. In the caller's transaction, where that abort would be the
        // caller's, the steps look first instead (see `PushSteps::run`).
        let steps = PushSteps {
            subset: self,
            parent,
            batch: &batch,
            look_first: false,
        };
        match exec::execute(self.store(), caller.as_deref_mut(), &steps).await {
            Err(e) if e.mongo_error().is_some_and(driver_error::is_duplicate) => {
                let steps = PushSteps {
                    look_first: true,
                    ..steps
                };
                exec::execute(self.store(), caller, &steps).await
            }
            other => other,
        }
    }

    fn prepare(&self, parent: &Bson, embedded: Document) -> Result<Prepared> {
        let id = embedded
            .get("_id")
            .cloned()
            .ok_or_else(|| Error::ChildWithoutId {
                collection: self.spec().child_collection.to_owned(),
            })?;
        let mut stored = embedded.clone();
        stored.insert(self.spec().key, parent.clone());
        Ok(Prepared {
            id,
            embedded,
            stored,
        })
    }

    /// The one update that keeps the subset: `$push` with `$each`, `$sort`, `$slice: keep`, and
    /// `$inc` of the count by `added`.
    fn push_update(&self, each: Vec<Bson>, added: i64) -> Document {
        let spec = self.spec();
        let mut update = doc! {
            "$push": {
                spec.field: {
                    "$each": each,
                    "$sort": order::sort_doc(spec),
                    "$slice": i64::from(spec.keep),
                }
            }
        };
        if let (Some(count), true) = (spec.count, added != 0) {
            update.insert("$inc", doc! { count: added });
        }
        update
    }

    /// The parent filter of a push: the parent, unless one of `ids` is already embedded (a
    /// reconcile that read the child collection between our insert and this update has put it
    /// there and counted it; pushing it again would embed and count it twice).
    fn push_filter(&self, parent: &Bson, ids: Vec<Bson>) -> Document {
        doc! {
            "_id": parent.clone(),
            format!("{}._id", self.spec().field): { "$nin": ids },
        }
    }

    /// Puts a child that is already in the child collection back into the subset if it is
    /// missing there, without counting it again. `$push`/`$sort`/`$slice` drops it again at once
    /// when it does not rank in the top `keep`, so this never disturbs a correct subset.
    async fn restore(&self, ctx: &mut Ctx<'_>, parent: &Bson, id: &Bson) -> Result<()> {
        let spec = self.spec();
        let children = self.children::<Document>();
        let stored = ctx
            .run(children.find_one(doc! { "_id": id.clone() }))
            .await
            .map_err(|e| self.mongo_child(e))?;
        let Some(mut stored) = stored else {
            // Gone again (deleted by someone else): nothing to restore.
            return Ok(());
        };
        let owner = stored.remove(spec.key).unwrap_or(Bson::Null);
        if &owner != parent {
            return Err(Error::ChildOwnedElsewhere {
                collection: spec.child_collection.to_owned(),
                id: Box::new(id.clone()),
                parent: Box::new(parent.clone()),
                owner: Box::new(owner),
            });
        }
        let parents = self.store().parents::<Document>();
        let update = parents.update_one(
            self.push_filter(parent, vec![id.clone()]),
            self.push_update(vec![Bson::Document(stored)], 0),
        );
        let updated = ctx.run(update).await.map_err(|e| self.store().mongo(e))?;
        // No match: the child is embedded already, or the parent is gone (its children left
        // behind by an interrupted delete), which a push must report.
        if updated.matched_count == 0 && !self.parent_exists(ctx, parent).await? {
            return Err(self.parent_not_found(parent));
        }
        Ok(())
    }

    pub(crate) async fn parent_exists(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<bool> {
        let parents = self.store().parents::<Document>();
        let find = parents
            .find_one(doc! { "_id": parent.clone() })
            .projection(doc! { "_id": 1 });
        let found = ctx.run(find).await.map_err(|e| self.store().mongo(e))?;
        Ok(found.is_some())
    }
}

/// The writes of one push.
struct PushSteps<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    batch: &'s [Prepared],
    /// Look for children of the batch already stored before writing (a retry), restoring them
    /// into the subset instead of inserting them again.
    look_first: bool,
}

impl Steps for PushSteps<'_, '_> {
    type Output = ();

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        if !ctx.atomic() {
            return self.ordered(ctx).await;
        }
        let fresh = if self.look_first || ctx.joined() {
            self.set_aside_stored(ctx).await?
        } else {
            self.batch.iter().collect()
        };
        if fresh.is_empty() {
            return Ok(());
        }
        // The parent update first, so that a missing parent or a write conflict on a hot parent
        // is found before the insert does any work.
        let s = self.subset;
        let each = fresh
            .iter()
            .map(|p| Bson::Document(p.embedded.clone()))
            .collect();
        let parents = s.store().parents::<Document>();
        let update = parents.update_one(
            doc! { "_id": self.parent.clone() },
            s.push_update(each, fresh.len() as i64),
        );
        let updated = ctx.run(update).await.map_err(|e| s.store().mongo(e))?;
        if updated.matched_count == 0 {
            return Err(s.parent_not_found(self.parent));
        }
        let children = s.children::<Document>();
        let inserted = match fresh.as_slice() {
            [one] => ctx.run(children.insert_one(&one.stored)).await.map(|_| ()),
            _ => ctx
                .run(children.insert_many(fresh.iter().map(|p| &p.stored)))
                .await
                .map(|_| ()),
        };
        inserted.map_err(|e| s.mongo_child(e))
    }
}

impl PushSteps<'_, '_> {
    /// Finds which children of the batch are already stored, checks they are this parent's,
    /// restores them into the subset if missing, and returns the others.
    async fn set_aside_stored(&self, ctx: &mut Ctx<'_>) -> Result<Vec<&Prepared>> {
        let s = self.subset;
        let ids: Vec<Bson> = self.batch.iter().map(|p| p.id.clone()).collect();
        let children = s.children::<Document>();
        let find = children
            .find(doc! { "_id": { "$in": ids } })
            .projection(doc! { "_id": 1 });
        let stored = ctx.collect(find).await.map_err(|e| s.mongo_child(e))?;
        let stored: Vec<&Bson> = stored.iter().filter_map(|d| d.get("_id")).collect();
        for id in &stored {
            s.restore(ctx, self.parent, id).await?;
        }
        Ok(self
            .batch
            .iter()
            .filter(|p| !stored.contains(&&p.id))
            .collect())
    }

    /// Without a transaction: `insertMany` (unordered) first, then one update for what it
    /// inserted, so that a crash in between leaves a child uncounted or missing from the subset,
    /// never an embedded child missing from the collection.
    async fn ordered(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let s = self.subset;
        let children = s.children::<Document>();
        let inserted = match self.batch {
            [one] => ctx.run(children.insert_one(&one.stored)).await.map(|_| ()),
            _ => ctx
                .run(
                    children
                        .insert_many(self.batch.iter().map(|p| &p.stored))
                        .ordered(false),
                )
                .await
                .map(|_| ()),
        };
        let (fresh, duplicates, failure) = match inserted {
            Ok(()) => (self.batch.iter().collect(), Vec::new(), None),
            Err(e) => {
                let Some(failed) = InsertFailure::of(&e) else {
                    return Err(s.mongo_child(e));
                };
                let mut fresh = Vec::new();
                let mut duplicates = Vec::new();
                for (i, p) in self.batch.iter().enumerate() {
                    if failed.duplicates.contains(&i) {
                        duplicates.push(p);
                    } else if !failed.refused.iter().any(|(index, _)| *index == i) {
                        fresh.push(p);
                    }
                }
                // Applied, but not as durably as asked, or some refused: embed and count what
                // was written, then report it.
                let report = !failed.refused.is_empty() || failed.write_concern;
                (fresh, duplicates, report.then_some(e))
            }
        };
        if !fresh.is_empty() && !self.push_to_parent(ctx, &fresh).await? {
            let ids: Vec<Bson> = fresh.iter().map(|p| p.id.clone()).collect();
            let spec = s.spec();
            ctx.run(children.delete_many(query::owned(spec, self.parent, ids)))
                .await
                .map_err(|e| s.mongo_child(e))?;
            return Err(s.parent_not_found(self.parent));
        }
        for p in &duplicates {
            s.restore(ctx, self.parent, &p.id).await?;
        }
        match failure {
            Some(e) => Err(s.mongo_child(e)),
            None => Ok(()),
        }
    }

    /// The parent half of an ordered push: `$push`/`$sort`/`$slice` and `$inc` in one update,
    /// unless a concurrent remove, update or reconcile has already embedded some of these
    /// children (it read them from the child collection between our insert and this update).
    /// Then only the others are pushed, and all of them are counted, since a remove or update
    /// does not recount. Returns `false` when the parent does not exist.
    async fn push_to_parent(&self, ctx: &mut Ctx<'_>, fresh: &[&Prepared]) -> Result<bool> {
        let s = self.subset;
        let parents = s.store().parents::<Document>();
        let added = fresh.len() as i64;
        let mut pending: Vec<&Prepared> = fresh.to_vec();
        for _ in 0..ORDERED_PUSH_ATTEMPTS {
            let ids: Vec<Bson> = pending.iter().map(|p| p.id.clone()).collect();
            let each = pending
                .iter()
                .map(|p| Bson::Document(p.embedded.clone()))
                .collect();
            let update =
                parents.update_one(s.push_filter(self.parent, ids), s.push_update(each, added));
            let updated = ctx.run(update).await.map_err(|e| s.store().mongo(e))?;
            if updated.matched_count == 1 {
                return Ok(true);
            }
            let path = format!("{}._id", s.spec().field);
            let find = parents
                .find_one(doc! { "_id": self.parent.clone() })
                .projection(doc! { path: 1 });
            let found = ctx.run(find).await.map_err(|e| s.store().mongo(e))?;
            let Some(found) = found else {
                return Ok(false);
            };
            let embedded: Vec<&Bson> = found
                .get_array(s.spec().field)
                .map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_document()?.get("_id"))
                        .collect()
                })
                .unwrap_or_default();
            pending.retain(|p| !embedded.contains(&&p.id));
            if pending.is_empty() {
                break;
            }
        }
        // Everything is embedded (or the parent is too contended to say): count what we added.
        if let Some(count) = s.spec().count {
            let update = parents.update_one(
                doc! { "_id": self.parent.clone() },
                doc! { "$inc": { count: added } },
            );
            ctx.run(update).await.map_err(|e| s.store().mongo(e))?;
        }
        Ok(true)
    }
}
