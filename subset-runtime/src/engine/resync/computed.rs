//! The views a read computes for a parent it cannot take as built (built under another
//! definition, or left by a writer that stopped between its writes): every such view of one
//! child collection, its top `keep`, count and sums, in one `aggregate`.
//!
//! The stages are those the resync sends on their own ([`query::top_stages`] is
//! [`query::top_children`] as stages, [`totals::stages`] the reconcile's `$group`), and what they
//! return is read by the resync's own code, malformed children included: a read of such a
//! parent and its rebuild give the same views.

use crate::bson::{doc, Bson, Document};

use super::state::Totals;
use super::{totals, MalformedChild};
use crate::engine::exec::Ctx;
use crate::engine::query::{self, ReadAhead};
use crate::engine::RawStore;
use crate::error::{driver, Error, Result};
use crate::model::SubsetSpec;

/// One part of the `aggregate`: a `$facet` branch, or a command of its own; or a `$lookup` of
/// a read ahead ([`RawStore::computed_lookups`]), named as the `$facet` of one parent names it.
#[derive(Clone, Copy)]
enum Branch<'s> {
    /// The view's first `keep` ([`query::top_children`]).
    Top(&'s SubsetSpec),
    /// Its count and sums ([`totals::stages`]).
    Totals(&'s SubsetSpec),
}

impl Branch<'_> {
    /// Its name in the `$facet`, for the `i`th branch of the `p`th parent.
    fn name(self, p: usize, i: usize) -> String {
        match (self, p) {
            (Branch::Top(_), 0) => format!("t{i}"),
            (Branch::Totals(_), 0) => format!("c{i}"),
            (Branch::Top(_), p) => format!("t{i}p{p}"),
            (Branch::Totals(_), p) => format!("c{i}p{p}"),
        }
    }

    fn stages(self, parent: &Bson) -> Vec<Document> {
        match self {
            Branch::Top(spec) => query::top_stages(spec, parent, &[]),
            Branch::Totals(spec) => totals::stages(spec, parent).to_vec(),
        }
    }
}

/// One view of one parent as the child collection says it is: what a rebuild writes.
#[derive(Debug, Clone, Default)]
pub(super) struct ComputedView {
    /// The first `keep` children in embedded form, none of them malformed.
    pub(super) top: Vec<Document>,
    /// The `_id`s of the malformed children among the child collection's own first `keep`.
    pub(super) head_malformed: Vec<Bson>,
    /// The count and sums, for a view that keeps them.
    pub(super) totals: Option<Totals>,
    /// Whether the first read found any child of the parent under the view's key (malformed
    /// ones included, the view's filter applied).
    pub(super) found: bool,
}

impl RawStore {
    /// The views `stale` of `parent` as the child collection says they are, each as the
    /// parent's fields: the array of its first `keep` in embedded form, and its count and sums
    /// when it keeps them (sums as `$sum` makes them; the caller gives them the stored type).
    ///
    /// One command per child collection: an `aggregate` whose `$facet` holds every view's top
    /// and totals, or, for a single view without totals, the resync's `find` of its top, which
    /// the index of its order serves. More only where a rebuild sends more: a top holding a
    /// malformed child is read again without it, as the resync's is. Views whose branches the
    /// parent's read brought along (`ahead`, [`RawStore::computed_lookups`]) are taken from
    /// it, and only the others read.
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub(crate) async fn computed(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        stale: &[&SubsetSpec],
        ahead: Option<&ReadAhead>,
    ) -> Result<Vec<Document>> {
        // What the look-ahead read of each view; the views it did not read are read now, in
        // the command a read that did not look ahead sends.
        let looked: Vec<Option<(Vec<Document>, Vec<Document>)>> = stale
            .iter()
            .map(|spec| {
                let ahead = ahead?;
                let i = self.field_index(spec)?;
                let grouped = match kept(spec) {
                    true => ahead.branch(&Branch::Totals(spec).name(0, i))?,
                    false => Vec::new(),
                };
                Some((ahead.branch(&Branch::Top(spec).name(0, i))?, grouped))
            })
            .collect();
        let missing: Vec<&SubsetSpec> = stale
            .iter()
            .zip(&looked)
            .filter(|(_, looked)| looked.is_none())
            .map(|(spec, _)| *spec)
            .collect();
        let mut read = match missing.is_empty() {
            true => Vec::new(),
            false => self
                .computed_views(ctx, std::slice::from_ref(parent), &missing)
                .await?
                .pop()
                .unwrap_or_default(),
        }
        .into_iter();
        let mut views = Vec::with_capacity(stale.len());
        for (spec, looked) in stale.iter().zip(looked) {
            views.push(match looked {
                Some((first, grouped)) => {
                    self.computed_view(ctx, parent, spec, first, grouped)
                        .await?
                }
                None => read.next().unwrap_or_default(),
            });
        }
        Ok(stale
            .iter()
            .zip(views)
            .map(|(spec, view)| {
                let mut fields = doc! { spec.field: view.top };
                if let Some(totals) = view.totals {
                    if let Some(count) = spec.count {
                        fields.insert(count, totals.count as i64);
                    }
                    for (sum, value) in spec.sums.iter().zip(totals.sums) {
                        fields.insert(sum.parent, value);
                    }
                }
                fields
            })
            .collect())
    }

    /// The `$lookup` stages that read, beside `parent` in one `aggregate`
    /// ([`query::read_ahead`]), what [`RawStore::computed`] reads for each view of the model
    /// that reads have lately computed ([`Lookahead`](crate::engine::model_change::Lookahead)):
    /// its top and, when it keeps them, its totals, each a stage of its own (a top is the
    /// stages of the resync's `find`, which the index of its order serves), under the names
    /// [`RawStore::computed`] then takes them from. None when no view is read ahead.
    pub(crate) fn computed_lookups(&self, parent: &Bson) -> Vec<Document> {
        let mut stages = Vec::new();
        for (i, spec) in self.spec().subsets.iter().enumerate() {
            if !self.shared.lookahead.wanted(i) {
                continue;
            }
            let mut branches = vec![Branch::Top(spec)];
            if kept(spec) {
                branches.push(Branch::Totals(spec));
            }
            for branch in branches {
                let name = branch.name(0, i);
                stages.push(query::lookup(spec, branch.stages(parent), &name));
            }
        }
        stages
    }

    /// The views `stale` of each of `parents`, one list per parent in the order of `stale`:
    /// [`RawStore::computed`] of many parents at once, in the same one command per child
    /// collection (its `$match` selects the children of every parent, and its `$facet` holds
    /// every parent's branches).
    ///
    /// # Errors
    ///
    /// [`Error::Mongo`].
    pub(super) async fn computed_views(
        &self,
        ctx: &mut Ctx<'_>,
        parents: &[Bson],
        stale: &[&SubsetSpec],
    ) -> Result<Vec<Vec<ComputedView>>> {
        let mut views = vec![vec![ComputedView::default(); stale.len()]; parents.len()];
        let mut collections: Vec<&str> = Vec::new();
        for spec in stale {
            if !collections.contains(&spec.child_collection) {
                collections.push(spec.child_collection);
            }
        }
        for collection in collections {
            let members: Vec<usize> = (0..stale.len())
                .filter(|&i| stale[i].child_collection == collection)
                .collect();
            let mut branches = Vec::new();
            for &i in &members {
                branches.push(Branch::Top(stale[i]));
                if kept(stale[i]) {
                    branches.push(Branch::Totals(stale[i]));
                }
            }
            let keys: Vec<&str> = members.iter().map(|&i| stale[i].key).collect();
            let mut results = self
                .branches(ctx, collection, parents, &keys, &branches)
                .await?
                .into_iter();
            for (parent, views) in parents.iter().zip(&mut views) {
                for &i in &members {
                    let first = results.next().unwrap_or_default();
                    let grouped = match kept(stale[i]) {
                        true => results.next().unwrap_or_default(),
                        false => Vec::new(),
                    };
                    views[i] = self
                        .computed_view(ctx, parent, stale[i], first, grouped)
                        .await?;
                }
            }
        }
        Ok(views)
    }

    /// The view `spec` of `parent` from what its branches returned: `first`, the top's
    /// children, and `grouped`, the totals' `$group` (empty for a view without totals).
    async fn computed_view(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        spec: &SubsetSpec,
        first: Vec<Document>,
        grouped: Vec<Document>,
    ) -> Result<ComputedView> {
        let found = !first.is_empty();
        let subset = self.children(spec).recompute();
        // The children a rebuild knows as malformed, which it leaves out with those of the
        // top: asked only when the top holds one.
        let known: Vec<MalformedChild> = match subset.malformed_in(&first).is_empty() {
            true => Vec::new(),
            false => subset.malformed(ctx, parent).await?,
        };
        let (top, head_malformed) = subset.top_after(ctx, parent, first, &known, &[]).await?;
        Ok(ComputedView {
            top,
            head_malformed,
            totals: kept(spec).then(|| Totals::grouped(spec, grouped.first())),
            found,
        })
    }

    /// What each of `branches` returns from `collection` for each of `parents`, parent by
    /// parent: in one `aggregate` whose `$facet` holds them all after a `$match` of the
    /// parents' children (under each of `keys`), or each as the resync sends it when there is
    /// one (a top's `find`, which the index of its order serves), or when their answers
    /// together are over the 16 MiB of one document.
    async fn branches(
        &self,
        ctx: &mut Ctx<'_>,
        collection: &str,
        parents: &[Bson],
        keys: &[&str],
        branches: &[Branch<'_>],
    ) -> Result<Vec<Vec<Document>>> {
        let children = self.collection::<Document>(collection);
        let error = |e| Error::mongo(collection, e);
        if branches.len() * parents.len() > 1 {
            let mut facet = Document::new();
            for (p, parent) in parents.iter().enumerate() {
                for (i, branch) in branches.iter().enumerate() {
                    facet.insert(branch.name(p, i), branch.stages(parent));
                }
            }
            let pipeline = [
                doc! { "$match": children_of(keys, parents) },
                doc! { "$facet": facet },
            ];
            match ctx.aggregate(children.aggregate(pipeline)).await {
                Ok(out) => {
                    let out = out.into_iter().next().unwrap_or_default();
                    let mut found = Vec::with_capacity(parents.len() * branches.len());
                    for p in 0..parents.len() {
                        for (i, b) in branches.iter().enumerate() {
                            found.push(documents(&out, &b.name(p, i)));
                        }
                    }
                    return Ok(found);
                }
                Err(e) if driver::is_too_large(&e) => {}
                Err(e) => return Err(error(e)),
            }
        }
        let mut results = Vec::with_capacity(parents.len() * branches.len());
        for parent in parents {
            for branch in branches {
                let found = match *branch {
                    Branch::Top(spec) => {
                        ctx.collect(query::top_children(&children, spec, parent, &[]))
                            .await
                    }
                    Branch::Totals(spec) => {
                        ctx.aggregate(children.aggregate(totals::stages(spec, parent)))
                            .await
                    }
                };
                results.push(found.map_err(error)?);
            }
        }
        Ok(results)
    }
}

/// Whether the view keeps a count or sums, which a `$group` computes.
fn kept(spec: &SubsetSpec) -> bool {
    spec.count.is_some() || !spec.sums.is_empty()
}

/// The children of `parents` under any of `keys` (the keys of the views of one collection,
/// most often one), which every branch of the `$facet` selects from.
fn children_of(keys: &[&str], parents: &[Bson]) -> Document {
    let mut distinct: Vec<&str> = Vec::new();
    for key in keys {
        if !distinct.contains(key) {
            distinct.push(key);
        }
    }
    let any_of = |key: &str| match parents {
        [parent] => doc! { key: parent.clone() },
        parents => doc! { key: { "$in": parents.to_vec() } },
    };
    match distinct.as_slice() {
        [key] => any_of(key),
        keys => {
            let any: Vec<Document> = keys.iter().map(|k| any_of(k)).collect();
            doc! { "$or": any }
        }
    }
}

/// The documents of the `$facet` branch `name` in its output `out`.
fn documents(out: &Document, name: &str) -> Vec<Document> {
    out.get_array(name)
        .map(|found| {
            found
                .iter()
                .filter_map(|d| d.as_document().cloned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_facet_selects_the_children_under_every_key_once() {
        let parent = [Bson::Int32(7)];
        assert_eq!(
            children_of(&["movie_id", "movie_id"], &parent),
            doc! { "movie_id": 7 }
        );
        assert_eq!(
            children_of(&["movie_id", "film_id"], &parent),
            doc! { "$or": [{ "movie_id": 7 }, { "film_id": 7 }] }
        );
        let parents = [Bson::Int32(7), Bson::Int32(8)];
        assert_eq!(
            children_of(&["movie_id"], &parents),
            doc! { "movie_id": { "$in": [7, 8] } }
        );
    }

    #[test]
    fn a_missing_branch_reads_as_no_documents() {
        let out = doc! { "t0": [{ "_id": 1 }], "c0": [] };
        assert_eq!(documents(&out, "t0"), vec![doc! { "_id": 1 }]);
        assert!(documents(&out, "c0").is_empty());
        assert!(documents(&out, "t1").is_empty());
    }
}
