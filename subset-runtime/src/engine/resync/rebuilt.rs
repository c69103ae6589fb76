//! Every view of many parents recomputed from one read of each collection: what a batch of a
//! rebuild writes (see `model_change/rebuild_batch.rs`).
//!
//! The parents are read in one `find`, their children in [`RawStore::computed_views`]' one
//! `aggregate` per child collection, and each parent's write is made by the resync's own
//! comparison ([`Drift::between`], [`Fix::of`]), so that a parent rebuilt in a batch ends as
//! one rebuilt alone does. A parent that needs more than that read (one a rebuild may refuse
//! to empty, one holding a child too large to embed, a malformed one) is left to a rebuild of
//! its own, which asks and reports as it always has.

use crate::bson::{doc, oid::ObjectId, Bson, Document, RawDocumentBuf};

use super::state::{Expected, Stored};
use super::{size, CountFix, Drift, Fix};
use crate::engine::exec::Ctx;
use crate::engine::model_change::{adopting, adoption_mark, MARKER};
use crate::engine::{query, RawStore};
use crate::error::Result;

/// One parent's views as a batch rebuilds them.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    /// The conditions under which the views are as read (besides `_id`).
    pub(crate) filter: Document,
    /// The `$set` of every view field, count and sum that differs from the child collection's.
    pub(crate) set: Document,
    /// How many malformed children each view's head holds, for the marking.
    pub(crate) notes: Vec<(&'static str, u32)>,
    /// The nonce of the parent's marker as read (`_subset.n`), if any.
    pub(crate) nonce: Option<ObjectId>,
}

impl RawStore {
    /// Every view of each of `parents` recomputed from the child collections, in one `find`
    /// of the parents and one `aggregate` per child collection: one entry per parent, `None`
    /// for a parent left to a rebuild of its own (gone, malformed, holding a child too large
    /// to embed, or, when `emptying_refused`, one carrying an adoption mark or whose read does
    /// not show that the rebuild keeps children it holds: see [`Model::would_empty`]).
    ///
    /// [`Model::would_empty`]: crate::engine::model_change::Model::would_empty
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`].
    pub(crate) async fn rebuilt(
        &self,
        ctx: &mut Ctx<'_>,
        parents: &[Bson],
        emptying_refused: bool,
    ) -> Result<Vec<Option<Rebuilt>>> {
        let specs = self.spec().subsets;
        // A store of some fields writes no notes, and never rebuilds.
        if self.model().is_partial() {
            return Ok(parents.iter().map(|_| None).collect());
        }
        let mut projection = doc! { MARKER: 1 };
        for spec in specs {
            projection.extend(query::subset_projection(spec));
        }
        size::project(&mut projection);
        let parents_of = self.parents::<RawDocumentBuf>();
        let find = parents_of
            .find(doc! { "_id": { "$in": parents.to_vec() } })
            .projection(projection);
        let found = ctx.collect(find).await.map_err(|e| self.mongo(e))?;
        // Each parent found, with its views as stored; the others are left alone.
        let mut read: Vec<(usize, RawDocumentBuf, Vec<Stored>)> = Vec::new();
        for doc in found {
            let id = doc
                .get("_id")
                .ok()
                .flatten()
                .and_then(|v| Bson::try_from(v).ok());
            let Some(at) = id.and_then(|id| parents.iter().position(|p| *p == id)) else {
                continue;
            };
            let stored: Result<Vec<Stored>> = specs
                .iter()
                .map(|spec| Stored::of(&doc, self.collection_name(), spec))
                .collect();
            if let Ok(stored) = stored {
                read.push((at, doc, stored));
            }
        }
        let ids: Vec<Bson> = read.iter().map(|(at, ..)| parents[*at].clone()).collect();
        let all: Vec<_> = specs.iter().collect();
        let computed = self.computed_views(ctx, &ids, &all).await?;
        let mut rebuilt: Vec<Option<Rebuilt>> = parents.iter().map(|_| None).collect();
        for ((at, doc, stored), views) in read.into_iter().zip(computed) {
            let parent = &parents[at];
            // An adoption under way may hold the only copies of children: asked alone.
            let under_way = stored.iter().any(|view| view.adopting);
            if emptying_refused && (under_way || !keeps_what_it_holds(self, &stored, &views)) {
                continue;
            }
            let bytes = size::of(&doc).unwrap_or(0);
            let mut whole = Rebuilt {
                filter: Document::new(),
                set: Document::new(),
                notes: Vec::with_capacity(specs.len()),
                nonce: doc
                    .get_document(MARKER)
                    .ok()
                    .and_then(|m| m.get_object_id("n").ok()),
            };
            let mut alone = false;
            for ((spec, stored), view) in specs.iter().zip(&stored).zip(views) {
                if size::unheld(spec, parent, bytes, stored.embedded(), &view.top).is_some() {
                    alone = true;
                    break;
                }
                whole
                    .notes
                    .push((spec.field, view.head_malformed.len() as u32));
                let expected = Expected {
                    top: view.top,
                    totals: view.totals,
                    head_malformed: view.head_malformed,
                    noting: true,
                };
                let drift = Drift::between(spec, parent, stored, &expected);
                let fix = Fix::of(spec, parent, stored, &expected, &drift, &CountFix::Recount);
                let Some(Fix { filter, update }) = fix else {
                    continue;
                };
                whole
                    .filter
                    .extend(filter.into_iter().filter(|(k, _)| k != "_id"));
                // The notes are the marking's, which sets every view's entry whole.
                if let Ok(set) = update.get_document("$set") {
                    let views = set.iter().filter(|(k, _)| !k.starts_with(MARKER));
                    whole.set.extend(views.map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            if !alone {
                rebuilt[at] = Some(whole);
            }
        }
        Ok(rebuilt)
    }
}

/// Whether the batch's read shows that rebuilding a parent keeps children it holds: for every
/// child collection and key whose views embed children today, a child under that key was
/// found. Otherwise [`Model::would_empty`] must answer, which a rebuild of its own asks.
///
/// [`Model::would_empty`]: crate::engine::model_change::Model::would_empty
fn keeps_what_it_holds(
    store: &RawStore,
    stored: &[Stored],
    views: &[super::computed::ComputedView],
) -> bool {
    let specs = store.spec().subsets;
    specs.iter().all(|spec| {
        let group = |s: &&crate::model::SubsetSpec| {
            (s.child_collection, s.key) == (spec.child_collection, spec.key)
        };
        let in_group = || specs.iter().enumerate().filter(|(_, s)| group(s));
        let holds = in_group().any(|(i, _)| !stored[i].embedded().is_empty());
        let found = in_group()
            .any(|(i, _)| views[i].found || views[i].totals.as_ref().is_some_and(|t| t.count > 0));
        !holds || found
    })
}

impl RawStore {
    /// Which of `parents` carry an adoption mark (see [`crate::engine::model_change::ADOPTING`]),
    /// or hold children in a view while no child is stored under the view's key (one `find`
    /// of the parents and one `aggregate` per child collection and key): the parents whose
    /// rebuild [`Model::would_empty`] must answer for, asked before a batch without a
    /// transaction writes anything.
    ///
    /// [`Model::would_empty`]: crate::engine::model_change::Model::would_empty
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`].
    pub(crate) async fn holding_unkeyed(
        &self,
        ctx: &mut Ctx<'_>,
        parents: &[Bson],
    ) -> Result<Vec<bool>> {
        let specs = self.spec().subsets;
        let mut projection = doc! { "_id": 1 };
        for spec in specs {
            projection.insert(format!("{}._id", spec.field), 1);
            projection.insert(adoption_mark(spec), 1);
        }
        let parents_of = self.parents::<Document>();
        let find = parents_of
            .find(doc! { "_id": { "$in": parents.to_vec() } })
            .projection(projection);
        let found = ctx.collect(find).await.map_err(|e| self.mongo(e))?;
        let mut unkeyed = vec![false; parents.len()];
        for parent in &found {
            let raw = RawDocumentBuf::try_from(parent);
            let under_way = specs
                .iter()
                .any(|spec| raw.as_ref().is_ok_and(|raw| adopting(raw, spec)));
            let at = parents.iter().position(|p| parent.get("_id") == Some(p));
            if let (true, Some(at)) = (under_way, at) {
                unkeyed[at] = true;
            }
        }
        let mut asked: Vec<(&str, &str)> = Vec::new();
        for spec in specs {
            let group = (spec.child_collection, spec.key);
            if asked.contains(&group) {
                continue;
            }
            asked.push(group);
            let holding: Vec<usize> = found
                .iter()
                .filter(|parent| {
                    specs
                        .iter()
                        .filter(|s| (s.child_collection, s.key) == group)
                        .any(|s| parent.get_array(s.field).is_ok_and(|a| !a.is_empty()))
                })
                .filter_map(|parent| parents.iter().position(|p| parent.get("_id") == Some(p)))
                .collect();
            if holding.is_empty() {
                continue;
            }
            let ids: Vec<Bson> = holding.iter().map(|&i| parents[i].clone()).collect();
            let keys = [
                doc! { "$match": { spec.key: { "$in": ids } } },
                doc! { "$group": { "_id": format!("${}", spec.key) } },
            ];
            let children = self.collection::<Document>(spec.child_collection);
            let keyed = ctx
                .aggregate(children.aggregate(keys))
                .await
                .map_err(|e| crate::Error::mongo(spec.child_collection, e))?;
            for i in holding {
                let under_key = keyed.iter().any(|k| {
                    k.get("_id")
                        .is_some_and(|key| crate::engine::parent_key::same_key(key, &parents[i]))
                });
                unkeyed[i] |= !under_key;
            }
        }
        Ok(unkeyed)
    }
}
