//! A push without a transaction: the children first, then the parent, so that a crash in
//! between leaves drift `reconcile` repairs, never an embedded child missing from the
//! collection.

use crate::bson::{doc, Bson, Document};

use super::parent_update::PushAs;
use super::parent_update::ViewPush;
use super::{Prepared, PushSteps};
use crate::engine::exec::Ctx;
use crate::engine::parent_write::{ParentUpdate, Written};
use crate::engine::query;
use crate::error::driver::{self, InsertFailure};
use crate::error::Result;

/// How many times an ordered push re-reads the subset when concurrent writers embedded some of
/// its children between its insert and its update.
const ORDERED_PUSH_ATTEMPTS: usize = 8;

impl PushSteps<'_, '_> {
    /// Without a transaction: `insertMany` (unordered) first, then one update for what it
    /// inserted, so that a crash in between leaves a child uncounted or missing from the subset,
    /// never an embedded child missing from the collection.
    pub(super) async fn ordered(&self, ctx: &mut Ctx<'_>) -> Result<()> {
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
        *self.inserted.lock().unwrap_or_else(|e| e.into_inner()) =
            fresh.iter().map(|p| p.id.clone()).collect();
        if !fresh.is_empty() {
            // The parent update is the last write unless duplicates are restored after it.
            let last = duplicates.is_empty() && failure.is_none();
            let failed = match self.push_to_parent(ctx, &fresh, last).await {
                Ok(true) => None,
                Ok(false) => Some(s.parent_not_found(self.parent)),
                // Refused by the server (too large, say): nothing reached the parent, so the
                // children come out again and the push leaves nothing, as a transaction would.
                Err(e) if driver::was_refused(&e) => Some(e),
                // Nobody knows whether it applied (a lost connection): the children stay, for a
                // retry or `reconcile` to finish.
                Err(e) => return Err(e),
            };
            if let Some(error) = failed {
                let ids: Vec<Bson> = fresh.iter().map(|p| p.id.clone()).collect();
                let spec = s.spec();
                ctx.run(children.delete_many(query::owned(spec, self.parent, ids)))
                    .await
                    .map_err(|e| s.mongo_child(e))?;
                return Err(error);
            }
        }
        for p in &duplicates {
            s.pushes().restore(ctx, self.parent, &p.id).await?;
        }
        match failure {
            Some(e) => Err(s.mongo_child(e)),
            None => Ok(()),
        }
    }

    /// The parent half of an ordered push: `$push`/`$sort`/`$slice` into every view and `$inc`
    /// in one update, unless some of these children are embedded already (an earlier attempt
    /// of this push, cut off after its parent update). Then each view gets only the children it
    /// does not hold yet, and all of them are counted. Returns `false` when the parent does not
    /// exist.
    pub(in crate::engine) async fn push_to_parent(
        &self,
        ctx: &mut Ctx<'_>,
        fresh: &[&Prepared],
        last: bool,
    ) -> Result<bool> {
        let s = self.subset;
        let parents = s.store().parents::<Document>();
        let inc = s.pushes().added_inc(fresh);
        let views = s.view_specs();
        let mut pending = ViewPush::new(fresh);
        if pending.is_empty() && inc.is_empty() {
            // Children no view of this model admits: nothing goes into the parent.
            let touch = ParentUpdate::touch_only();
            let written = s.store().write_parent(ctx, self.parent, touch).await?;
            return Ok(written != Written::Missing);
        }
        for _ in 0..ORDERED_PUSH_ATTEMPTS {
            match s
                .pushes()
                .capped_push(
                    ctx,
                    self.parent,
                    &pending,
                    &inc,
                    PushAs {
                        skip_embedded: true,
                        last,
                    },
                )
                .await?
            {
                Written::Applied => return Ok(true),
                Written::Missing => return Ok(false),
                // The children are stored: settling (by the executor) embeds and counts them.
                Written::Outdated => return Ok(true),
                // Some already embedded (by an earlier attempt of this push): push the others.
                Written::Missed => {}
            }
            let projection: Document = views
                .iter()
                .map(|v| (format!("{}._id", v.field), Bson::Int32(1)))
                .collect();
            let find = parents
                .find_one(doc! { "_id": self.parent.clone() })
                .projection(projection);
            let found = ctx.run(find).await.map_err(|e| s.store().mongo(e))?;
            let Some(found) = found else {
                return Ok(false);
            };
            for (i, view) in views.iter().enumerate() {
                let embedded: Vec<Bson> = found
                    .get_array(view.field)
                    .map(|a| {
                        a.iter()
                            .filter_map(|c| c.as_document()?.get("_id").cloned())
                            .collect()
                    })
                    .unwrap_or_default();
                pending.drop_embedded(i, &embedded);
            }
            if pending.is_empty() {
                break;
            }
        }
        // Everything is embedded (or the parent is too contended to say): count what we added.
        if !inc.is_empty() {
            let count = ParentUpdate {
                last,
                ..ParentUpdate::of(doc! { "$inc": inc })
            };
            // Of another definition meanwhile: settling recounts.
            s.store().write_parent(ctx, self.parent, count).await?;
        }
        Ok(true)
    }
}
