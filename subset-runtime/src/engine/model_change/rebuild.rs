//! Settling a parent a write found built under another definition of the model: rebuilt under
//! this one when it is the current one, else marked as built under none.

use super::Model;
use crate::bson::{doc, oid::ObjectId, Bson, Document, RawDocumentBuf};

use super::{adopting, adoption_mark, marked, MARKER};
use crate::engine::exec::{Ctx, Steps};
use crate::engine::parent_write::{Guard, ParentUpdate, Written};
use crate::engine::RawStore;
use crate::error::Result;
use crate::model::SubsetSpec;

/// How many times an ordered rebuild of one parent starts again when a concurrent writer
/// marked the parent while it read.
const ORDERED_REBUILDS: usize = 4;

impl Model<'_> {
    /// Settles a parent a write found built under another definition, after the write's own
    /// child-collection change: rebuilt under this definition when it is the current one, else
    /// marked as built under none (see the module documentation). `true` when rebuilt. Run by
    /// the executor after the steps (see [`Ctx::outdated`]).
    pub(crate) async fn settle(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<bool> {
        let registry = self.refresh_registry().await?;
        // A store of some fields never rebuilds: it cannot build the views it does not know.
        if registry.current == self.shared.definition.digest() && !self.shared.definition.partial {
            self.rebuild_parent(ctx, parent).await.map(|()| true)
        } else {
            tracing::debug!(parent = %parent, "a parent of another definition: marked for rebuild");
            unmark(self, ctx, parent).await.map(|_| false)
        }
    }

    /// Whether settling a parent rebuilds it (this store's definition is the current one and
    /// whole), as the registry was last read; otherwise settling marks it for a rebuild.
    pub(crate) async fn rebuilds_outdated(&self) -> Result<bool> {
        let registry = self.registry().await?;
        Ok(registry.current == self.shared.definition.digest() && !self.shared.definition.partial)
    }

    /// Marks `parent` as built under no definition, outside any operation: its writer lost its
    /// lease before it could bring the views along (see [`crate::Error::Unsettled`]). Readers
    /// then compute its views and the next writer rebuilds them.
    pub(crate) async fn mark_unsettled(&self, parent: &Bson) {
        let parents = self.parents::<Document>();
        let unmark = parents.update_one(doc! { "_id": parent.clone() }, unmarked(ObjectId::new()));
        if let Err(e) = unmark.await {
            tracing::warn!(collection = self.collection_name(), parent = %parent, error = %e, "could not mark a parent for a rebuild; reconcile repairs it");
        }
    }

    /// Rebuilds every view of `parent` from the child collections and marks it as built under
    /// this definition. In a transaction, in one snapshot. In order, the parent is first
    /// marked as built under none with a nonce, and marked as built here only if the nonce is
    /// still there after every view is rebuilt: a writer of another definition that changed a
    /// child meanwhile (one that holds no lease: a process of an older version) has marked it
    /// again, and the rebuild starts over, so it never marks a view that missed that child.
    pub(crate) async fn rebuild_parent(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<()> {
        // The marking sets every view's entry whole: with the notes of malformed children
        // that each view's recompute found.
        let mark = |notes: &[(&str, u32)]| ParentUpdate {
            guard: Guard::Rebuild,
            ..ParentUpdate::of(self.shared.definition.marking(notes))
        };
        let noted = |spec: &crate::model::SubsetSpec, drift: &crate::engine::Drift| {
            (spec.field, drift.malformed_in_head.len() as u32)
        };
        if ctx.atomic() {
            let mut notes = Vec::with_capacity(self.spec().subsets.len());
            for spec in self.spec().subsets {
                let drift = self
                    .children(spec)
                    .recompute()
                    .rebuild_view(ctx, parent)
                    .await?;
                notes.push(noted(spec, &drift));
            }
            self.write_parent(ctx, parent, mark(&notes)).await?;
            return Ok(());
        }
        for attempt in 0..ORDERED_REBUILDS {
            if attempt > 0 {
                crate::engine::exec::backoff(attempt as u32).await;
            }
            let Some(nonce) = unmark(self, ctx, parent).await? else {
                return Ok(());
            };
            let mut rebuilt = true;
            let mut notes = Vec::with_capacity(self.spec().subsets.len());
            for spec in self.spec().subsets {
                let drift = self
                    .children(spec)
                    .recompute()
                    .rebuild_view(ctx, parent)
                    .await?;
                rebuilt &= drift.fixed || drift.is_in_sync();
                notes.push(noted(spec, &drift));
            }
            if !rebuilt {
                // A view changed under every attempt: left marked as built under none.
                tracing::debug!(parent = %parent, "rebuild contended; left for the next write");
                return Ok(());
            }
            let still = ParentUpdate {
                filter: doc! { format!("{MARKER}.n"): nonce },
                ..mark(&notes)
            };
            if self.write_parent(ctx, parent, still).await? == Written::Applied {
                return Ok(());
            }
        }
        // Contended every time: left marked as built under none, which every reader computes
        // and the next write or rebuild finishes.
        tracing::debug!(parent = %parent, "rebuild contended; left for the next write");
        Ok(())
    }
}

/// The update that marks a parent as built under no definition, with `nonce`, keeping its
/// lease.
pub(crate) fn unmarked(nonce: ObjectId) -> Document {
    doc! {
        "$set": { format!("{MARKER}.d"): "", format!("{MARKER}.n"): nonce },
        "$unset": { format!("{MARKER}.v"): "" },
    }
}

/// [`RawStore::rebuild_parent`] as an operation of its own (a rebuild's visit).
pub(crate) struct RebuildSteps<'a> {
    store: &'a RawStore,
    parent: &'a Bson,
    /// Whether the rebuild may empty a view that holds children today.
    allow_emptying: bool,
}

impl<'s> Model<'s> {
    pub(crate) fn rebuild_steps<'a>(
        &self,
        parent: &'a Bson,
        allow_emptying: bool,
    ) -> RebuildSteps<'a>
    where
        's: 'a,
    {
        RebuildSteps {
            store: self.store,
            parent,
            allow_emptying,
        }
    }

    /// Refuses a rebuild that would empty a view of the first parents `outdated` matches that
    /// hold children: up to [`EMPTYING_SAMPLE`] of them, all of whose views would be emptied.
    /// One that would not (its children are under the key) lets the rebuild go on, which
    /// still refuses each parent it would empty.
    pub(crate) async fn refuse_emptying(&self, outdated: &Document) -> Result<()> {
        let mut holding = Vec::with_capacity(self.spec().subsets.len());
        for spec in self.spec().subsets {
            holding.push(doc! { format!("{}.0", spec.field): { "$exists": true } });
        }
        let filter = doc! { "$and": [outdated.clone(), { "$or": holding }] };
        let parents = self.parents::<Document>();
        let find = parents
            .find(filter)
            .projection(doc! { "_id": 1 })
            .limit(EMPTYING_SAMPLE);
        let mut ctx = Ctx::read(None);
        let sample = ctx.collect(find).await.map_err(|e| self.mongo(e))?;
        let mut refused = None;
        for parent in sample {
            let id = parent.get("_id").cloned().unwrap_or(Bson::Null);
            match self.would_empty(&mut ctx, &id).await {
                Ok(()) => return Ok(()),
                Err(
                    e @ (crate::Error::RebuildWouldEmpty { .. } | crate::Error::NotMigrated { .. }),
                ) => refused = Some(e),
                Err(other) => return Err(other),
            }
        }
        refused.map_or(Ok(()), Err)
    }
}

/// How many parents [`RawStore::refuse_emptying`] looks at.
const EMPTYING_SAMPLE: i64 = 10;

impl Model<'_> {
    /// The one answer to whether rebuilding `parent` under this definition must be refused
    /// ([`crate::Error::RebuildWouldEmpty`]), which a rebuild, a reconcile and a check all ask
    /// of a parent built under another definition, so that they never disagree on one.
    ///
    /// Refused only when a view holds children today, none is stored under the view's key, and
    /// one of the embedded children is still stored, holding the parent's `_id` in another
    /// field: the key was renamed (a renamed struct, whose default key follows its name), and
    /// the rebuild would drop children that exist. A view whose embedded children are gone from
    /// the child collection (the last one removed by code of an older model, which left the
    /// view as it was and marked the parent as built under none) or now belong to another
    /// parent is stale, and rebuilding it empty is right.
    ///
    /// Also refused ([`crate::Error::NotMigrated`]): a parent whose view embeds children the
    /// child collection lacks, when its array is their only copy: the parent carries the mark
    /// of an adoption of that view under way (see [`super::ADOPTING`]; an adoption cut off
    /// after it copied some children), and any of them is missing; or no write of this library
    /// has marked it (no `_subset.d`: as `subset migrate` and `Children::adopt` leave the
    /// parents they move, and as a legacy parent is) and none of them is stored (a parent the
    /// migration skipped). Otherwise one child missing beside others stored is drift, which a
    /// reconcile repairs.
    pub(crate) async fn would_empty(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<()> {
        let mut projection = doc! { "_id": 1, format!("{MARKER}.d"): 1 };
        for spec in self.spec().subsets {
            projection.insert(format!("{}._id", spec.field), 1);
            projection.insert(adoption_mark(spec), 1);
        }
        let parents = self.parents::<Document>();
        let find = parents
            .find_one(doc! { "_id": parent.clone() })
            .projection(projection);
        let Some(found) = ctx.run(find).await.map_err(|e| self.mongo(e))? else {
            return Ok(());
        };
        let raw = RawDocumentBuf::try_from(&found).ok();
        let unmarked = !raw.as_ref().is_some_and(|raw| marked(raw));
        let adopting = |spec: &SubsetSpec| raw.as_ref().is_some_and(|raw| adopting(raw, spec));
        // The view of the group whose array holds `id`.
        let holding = |group: (&str, &str), id: &Bson| {
            self.spec()
                .subsets
                .iter()
                .find(|s| {
                    (s.child_collection, s.key) == group
                        && found.get_array(s.field).is_ok_and(|a| {
                            a.iter()
                                .filter_map(Bson::as_document)
                                .any(|c| c.get("_id") == Some(id))
                        })
                })
                .map(|s| s.field)
        };
        // Views of one child collection and key share the answer: asked once, about the
        // children any of them embeds.
        let mut asked: Vec<(&str, &str)> = Vec::new();
        for spec in self.spec().subsets {
            let group = (spec.child_collection, spec.key);
            if asked.contains(&group) {
                continue;
            }
            asked.push(group);
            let in_group = |s: &&SubsetSpec| (s.child_collection, s.key) == group;
            let embedded = embedded_ids(&found, self.spec().subsets.iter().filter(in_group));
            if embedded.is_empty() {
                continue;
            }
            let children = self.collection::<Document>(spec.child_collection);
            let child_error = |e| crate::Error::mongo(spec.child_collection, e);
            let not_migrated =
                |field: Option<&str>, absent: usize, first: &Bson| crate::Error::NotMigrated {
                    collection: self.collection_name().to_owned(),
                    id: Box::new(parent.clone()),
                    field: field.unwrap_or(spec.field).to_owned(),
                    child_collection: spec.child_collection.to_owned(),
                    absent,
                    first: Box::new(first.clone()),
                };
            // An adoption under way: every child its views embed must be stored, counted
            // whole (the `_id` index answers), and read only to name the first missing.
            let views = self.spec().subsets.iter().filter(in_group);
            let copying = embedded_ids(&found, views.filter(|s| adopting(s)));
            if !copying.is_empty() {
                let all = children.count_documents(doc! { "_id": { "$in": copying.clone() } });
                let stored = ctx.run(all).await.map_err(child_error)?;
                if stored < copying.len() as u64 {
                    let find = children
                        .find(doc! { "_id": { "$in": copying.clone() } })
                        .projection(doc! { "_id": 1 });
                    let present = ctx.collect(find).await.map_err(child_error)?;
                    let absent: Vec<&Bson> = copying
                        .iter()
                        .filter(|id| !present.iter().any(|c| c.get("_id") == Some(*id)))
                        .collect();
                    if let Some(first) = absent.first() {
                        return Err(not_migrated(holding(group, first), absent.len(), first));
                    }
                }
            } else if unmarked {
                // Only when none is there: a migrated parent whose array gained a child the
                // collection never had (drift a reconcile repairs) holds the others.
                let any = children
                    .count_documents(doc! { "_id": { "$in": embedded.clone() } })
                    .limit(1);
                if ctx.run(any).await.map_err(child_error)? == 0 {
                    let first = &embedded[0];
                    return Err(not_migrated(holding(group, first), embedded.len(), first));
                }
            }
            let under_key = children
                .count_documents(doc! { spec.key: parent.clone() })
                .limit(1);
            if ctx.run(under_key).await.map_err(child_error)? > 0 {
                continue;
            }
            let stored = children.find(doc! { "_id": { "$in": embedded } });
            let stored = ctx.collect(stored).await.map_err(child_error)?;
            let carried = stored.iter().find_map(|child| {
                child
                    .iter()
                    .find(|(k, v)| {
                        k.as_str() != "_id"
                            && k.as_str() != spec.key
                            && crate::engine::parent_key::same_key(v, parent)
                    })
                    .map(|(k, _)| k.to_owned())
            });
            if let Some(carried) = carried {
                return Err(crate::Error::RebuildWouldEmpty {
                    collection: self.collection_name().to_owned(),
                    id: Box::new(parent.clone()),
                    field: spec.field.to_owned(),
                    key: spec.key.to_owned(),
                    carried,
                });
            }
        }
        Ok(())
    }
}

/// The `_id`s the arrays of `views` in `found` (a parent, or a projection of their `_id`s)
/// embed, each once, in the order of the views and their arrays.
fn embedded_ids<'v>(found: &Document, views: impl Iterator<Item = &'v SubsetSpec>) -> Vec<Bson> {
    let mut embedded: Vec<Bson> = Vec::new();
    for view in views {
        let ids = found
            .get_array(view.field)
            .into_iter()
            .flatten()
            .filter_map(Bson::as_document)
            .filter_map(|c| c.get("_id"));
        for id in ids {
            if !embedded.contains(id) {
                embedded.push(id.clone());
            }
        }
    }
    embedded
}

impl Steps for RebuildSteps<'_> {
    type Output = ();

    fn parents(&self) -> Vec<&Bson> {
        vec![self.parent]
    }

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<()> {
        if !self.allow_emptying {
            self.store.model().would_empty(ctx, self.parent).await?;
        }
        self.store.model().rebuild_parent(ctx, self.parent).await
    }
}

/// Marks `parent` as built under no definition; returns the nonce it wrote, or `None`
/// when there is no such parent. The lease, if any, stays.
async fn unmark(store: &RawStore, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Option<ObjectId>> {
    let nonce = ObjectId::new();
    let write = ParentUpdate {
        guard: Guard::Rebuild,
        ..ParentUpdate::of(unmarked(nonce))
    };
    let written = store.write_parent(ctx, parent, write).await?;
    Ok((written == Written::Applied).then_some(nonce))
}
