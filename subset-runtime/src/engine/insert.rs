//! Inserting a parent with its children: the parent with empty subsets, the children into their
//! collections, then each subset as the server sorts the child collection.

use crate::bson::{doc, Bson, Document};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::{query, RawStore};
use crate::action::{span, Action, Operation};
use crate::error::{driver, Error, Result};

impl RawStore {
    /// Inserts a parent document with the children found in its subset fields; see
    /// [`crate::Store::insert`].
    ///
    /// # Errors
    ///
    /// As [`crate::Store::insert`].
    pub fn insert(&self, parent: Document) -> Action<'_, ()> {
        Action::of(Insert {
            store: self,
            parent,
        })
    }
}

/// [`RawStore::insert`].
struct Insert<'a> {
    store: &'a RawStore,
    parent: Document,
}

impl Insert<'_> {
    fn id(&self) -> Result<&Bson> {
        self.parent
            .get("_id")
            .ok_or_else(|| Error::ParentWithoutId {
                collection: self.store.collection_name().to_owned(),
            })
    }
}

impl<'s, 'a: 's> Operation<'s> for Insert<'a> {
    type Output = ();

    fn span(&self) -> tracing::Span {
        span!("subset.insert", self.store, None::<&str>, self.id().ok())
    }

    fn check(&self) -> Result<()> {
        self.store.check_parent_id(self.id()?)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<()> {
        let store = self.store;
        let id = self.id()?.clone();
        let mut parent = self.parent;
        // Built under this store's definition of the model, whatever the parent carried, and
        // the definition registered before any parent carries it.
        store.model().registry().await?;
        parent.insert(super::MARKER, store.shared.definition.marker().clone());
        // The children of every view of one child collection and key go in once, for their
        // group (the union of what the views hold, by `_id`).
        let subsets = store.spec().subsets;
        let groups = store.views().groups();
        let mut children: Vec<Vec<Document>> = vec![Vec::new(); groups.len()];
        for (i, spec) in subsets.iter().enumerate() {
            let given = match parent.insert(spec.field, Bson::Array(Vec::new())) {
                Some(Bson::Array(given)) => given,
                _ => Vec::new(),
            };
            if spec.embed.is_some() && !given.is_empty() {
                return Err(Error::PreviewsOnInsert {
                    collection: store.collection_name().to_owned(),
                    id: Box::new(id),
                    field: spec.field.to_owned(),
                });
            }
            if let Some(count) = spec.count {
                parent.insert(count, 0_i64);
            }
            for sum in spec.sums {
                // A zero of the type the parent stores there: a `Decimal128` sum stays one.
                let zero = super::sums::like_stored(Bson::Int64(0), parent.get(sum.parent));
                parent.insert(sum.parent, zero);
            }
            let g = store.views().group_index(i);
            let first = groups[g].first_field() == i;
            for child in given {
                let without_id = || Error::ChildWithoutId {
                    collection: spec.child_collection.to_owned(),
                };
                let Bson::Document(child) = child else {
                    return Err(without_id());
                };
                let Some(child_id) = child.get("_id") else {
                    return Err(without_id());
                };
                if !first && children[g].iter().any(|c| c.get("_id") == Some(child_id)) {
                    continue;
                }
                children[g].push(super::parent_key::keyed(spec, &id, child)?);
            }
        }
        for (i, spec) in subsets.iter().enumerate() {
            for child in &children[store.views().group_index(i)] {
                super::sums::check_child(spec, child)?;
            }
        }
        let steps = InsertSteps {
            store,
            id: &id,
            parent: &parent,
            children: &children,
        };
        exec::execute(store, caller, &steps).await
    }
}

/// The writes of [`RawStore::insert`]; `children[g]` are the children of the `g`th view group
/// (see [`super::views::ViewTable::groups`]).
struct InsertSteps<'a> {
    store: &'a RawStore,
    id: &'a Bson,
    parent: &'a Document,
    children: &'a [Vec<Document>],
}

impl Steps for InsertSteps<'_> {
    type Output = ();

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        // A duplicate parent fails here, before anything else is written.
        let parents = self.store.parents::<Document>();
        let concern = match ctx.run(parents.insert_one(self.parent)).await {
            Ok(_) => None,
            // Applied, but not as durably as asked: the children and subsets go on, and the
            // error is reported after, as an ordered push reports it; stopping here would leave
            // a parent whose children were never written, and its retry a duplicate.
            Err(e) if !ctx.atomic() && driver::is_write_concern(&e) => Some(e),
            Err(e) if driver::is_duplicate_id(&e) => {
                return Err(Error::ParentExists {
                    collection: self.store.collection_name().to_owned(),
                    id: Box::new(self.id.clone()),
                })
            }
            Err(e) => return Err(self.store.mongo(e)),
        };
        let written = self.write_children(ctx).await;
        if written.is_err() && !ctx.atomic() {
            self.undo(ctx).await;
        }
        written?;
        concern.map_or(Ok(()), |e| Err(self.store.mongo(e)))
    }
}

impl InsertSteps<'_> {
    /// Everything after the parent's own insert.
    async fn write_children(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        let mut set = Document::new();
        let mut largest = None;
        let mut bytes = super::bson_len([self.parent]);
        let views = self.store.views();
        for (i, spec) in self.store.spec().subsets.iter().enumerate() {
            let child = |e| Error::mongo(spec.child_collection, e);
            let coll = self
                .store
                .database()
                .collection::<Document>(spec.child_collection);
            let g = views.group_index(i);
            // Every view of these children, the first one included; inserted with the first.
            let docs = &self.children[g];
            if views.groups()[g].first_field() == i && !docs.is_empty() {
                ctx.run(coll.insert_many(docs)).await.map_err(child)?;
            }
            if docs.is_empty() {
                continue;
            }
            let top = ctx
                .collect(query::top_children(&coll, spec, self.id, &[]))
                .await
                .map_err(child)?;
            let adding = super::bson_len(&top);
            bytes += adding;
            if largest.is_none_or(|(_, most)| adding > most) {
                largest = Some((spec, adding));
            }
            set.insert(spec.field, top);
            if let Some(count) = spec.count {
                let admitted = docs.iter().filter(|d| spec.admits(d)).count();
                set.insert(count, admitted as i64);
            }
            for (field, total) in super::sums::totals(spec, docs) {
                set.insert(field, total);
            }
        }
        if !set.is_empty() {
            let parents = self.store.parents::<Document>();
            let mut update = doc! { "$set": set };
            super::numbers::Bounds::of(self.store.spec(), &mut update)
                .map_err(|o| o.at(self.store.collection_name(), self.id))?;
            let update = parents.update_one(doc! { "_id": self.id.clone() }, update);
            if let Err(e) = ctx.run(update).await {
                // Named after the largest subset, the likeliest to have outgrown the document.
                return Err(match largest {
                    Some((spec, _)) => {
                        let subset = self.store.children(spec);
                        query::too_large(&subset, e, self.id, bytes.max(0) as u64)
                    }
                    None => self.store.mongo(e),
                });
            }
        }
        Ok(())
    }

    /// Best-effort removal of what a failed ordered insert wrote. Only children carrying the
    /// ids given are removed, so children an existing parent already had stay.
    async fn undo(&self, ctx: &mut Ctx<'_>) {
        let parents = self.store.parents::<Document>();
        let _ = ctx
            .run(parents.delete_one(doc! { "_id": self.id.clone() }))
            .await;
        for (group, docs) in self.store.views().groups().iter().zip(self.children) {
            let Some(spec) = group.specs().first() else {
                continue;
            };
            let ids: Vec<Bson> = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
            if ids.is_empty() {
                continue;
            }
            let coll = self
                .store
                .database()
                .collection::<Document>(spec.child_collection);
            let _ = ctx
                .run(coll.delete_many(query::owned(spec, self.id, ids)))
                .await;
        }
    }
}
