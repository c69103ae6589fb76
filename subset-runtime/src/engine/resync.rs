//! Keeping the copy true: recomputing a subset from the child collection, the one primitive
//! behind backfill, re-ranking, `reconcile` and `check`.

use crate::bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::{query, sums, RawSubset};
use crate::action::Action;
use crate::decode;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// How many times an ordered (non-transactional) resync re-reads and retries when a concurrent
/// writer changed the subset between its reads and its conditional write.
const ORDERED_ATTEMPTS: usize = 16;

/// What a check or reconcile found for one parent and one subset field.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Drift {
    /// The parent's `_id`.
    pub parent: Bson,
    /// `_id`s that belong in the subset (the top `keep` of the child collection) but were not
    /// embedded.
    pub missing: Vec<Bson>,
    /// `_id`s that were embedded but do not belong there (evicted, deleted, or out of rank).
    pub stale: Vec<Bson>,
    /// `_id`s embedded with content that differs from the child collection's copy.
    pub changed: Vec<Bson>,
    /// Whether the right children were embedded but in the wrong order.
    pub misordered: bool,
    /// The stored count and the child collection's count, when they differ.
    pub count: Option<(i64, u64)>,
    /// Every running sum whose stored value differs from the sum over the child collection.
    pub sums: Vec<SumDrift>,
    /// Whether the parent was rewritten to fix what was found.
    pub fixed: bool,
}

impl Drift {
    /// Whether the subset and the count were exactly right.
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty()
            && self.stale.is_empty()
            && self.changed.is_empty()
            && !self.misordered
            && self.count.is_none()
            && self.sums.is_empty()
    }
}

/// A running sum (see [`crate::spec::SumSpec`]) that differs from the sum over the child collection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SumDrift {
    /// BSON name of the parent field holding the sum.
    pub field: String,
    /// The value stored in the parent (`Null` when the field is missing).
    pub stored: Bson,
    /// The sum over the child collection.
    pub computed: Bson,
}

/// What one resync should do besides making the array right.
#[derive(Debug, Clone)]
pub(crate) enum CountFix {
    /// Apply this `$inc` to the count and the sums (a removal: count `-1`, each sum minus the
    /// child's value), exactly once; empty to leave them as they are.
    Inc(Document),
    /// Set the count and the sums to the child collection's (reconcile).
    Recount,
}

/// The count and sums of one parent's children, from one `$group`.
struct Totals {
    count: u64,
    /// One per [`SubsetSpec::sums`], in order.
    sums: Vec<Bson>,
}

impl RawSubset<'_> {
    /// Recomputes the subset (the top `keep` of the child collection), the count and the running
    /// sums, writes them if they differ, and reports what differed.
    ///
    /// Safe while writers run: the write is conditional on the subset and count being as read,
    /// and is retried otherwise, so it never overwrites a child pushed after it read. In
    /// [`crate::WriteMode::Ordered`] a push whose child is stored but whose parent update is
    /// still in flight can leave the count one high; the next reconcile corrects it.
    ///
    /// # Errors
    ///
    /// [`Error::ParentNotFound`], [`Error::MalformedParent`] when the stored subset field is not
    /// an array, [`Error::MalformedChild`] when a stored child's summed field is not a number,
    /// [`Error::Mongo`].
    pub fn reconcile<'r>(&'r self, parent: &'r Bson) -> Action<'r, Drift> {
        Action::new(move |session| Box::pin(self.resync_in(parent, true, session)))
    }

    /// What [`RawSubset::reconcile`] would find, without writing anything.
    ///
    /// In a transaction on a replica set, so that its reads see one snapshot and a push landing
    /// between them is not reported as drift.
    ///
    /// # Errors
    ///
    /// As [`RawSubset::reconcile`].
    pub fn check<'r>(&'r self, parent: &'r Bson) -> Action<'r, Drift> {
        Action::new(move |session| Box::pin(self.resync_in(parent, false, session)))
    }

    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field, write))]
    pub(crate) async fn resync_in(
        &self,
        parent: &Bson,
        write: bool,
        caller: Option<&mut ClientSession>,
    ) -> Result<Drift> {
        self.store().check_parent_id(parent)?;
        let steps = ResyncSteps {
            subset: self,
            parent,
            write,
        };
        exec::execute(self.store(), caller, &steps).await
    }

    /// Reads the subset and the count, then the child collection's top `keep` (and count), and,
    /// when `write`, makes the parent agree with them in one conditional update.
    ///
    /// The parent is read first: a push whose parent update lands after that read changes the
    /// array or the count, so the conditional update misses and we read again; a push whose
    /// child we counted but whose update comes after ours finds its child embedded and skips
    /// (see `RawSubset::push_filter`).
    pub(crate) async fn resync(
        &self,
        ctx: &mut Ctx<'_>,
        parent: &Bson,
        count_fix: &CountFix,
        write: bool,
    ) -> Result<Drift> {
        let spec = self.spec();
        let store = self.store();
        let attempts = if ctx.atomic() { 1 } else { ORDERED_ATTEMPTS };
        let mut drift = Drift::default();
        let (parents, children) = (store.parents::<Document>(), self.children::<Document>());
        let raw_parents = store.parents::<RawDocumentBuf>();
        for _ in 0..attempts {
            // The parent's subset and count, as stored.
            let find = raw_parents
                .find_one(doc! { "_id": parent.clone() })
                .projection(query::subset_projection(spec));
            let found = ctx
                .run(find)
                .await
                .map_err(|e| store.mongo(e))?
                .ok_or_else(|| self.parent_not_found(parent))?;
            let embedded = embedded_array(&found, store.collection_name(), spec)?;
            let stored_count = spec
                .count
                .and_then(|c| found.get(c).ok().flatten())
                .and_then(|v| Bson::try_from(v).ok());
            let stored_sums: Vec<Option<Bson>> = spec
                .sums
                .iter()
                .map(|s| found.get(s.parent).ok().flatten())
                .map(|v| v.and_then(|v| Bson::try_from(v).ok()))
                .collect();

            // The truth: the child collection's first `keep`, and its count when it is needed.
            let top = ctx
                .collect(query::top_children(&children, spec, parent))
                .await
                .map_err(|e| self.mongo_child(e))?;
            let kept = spec.count.is_some() || !spec.sums.is_empty();
            let actual = match count_fix {
                CountFix::Recount if kept => Some(self.totals(ctx, parent).await?),
                _ => None,
            };

            drift = compare(parent, embedded.as_deref().unwrap_or_default(), &top);
            let stored_n = spec
                .count
                .and_then(|c| found.get(c).ok().flatten())
                .and_then(decode::count_value);
            if let (Some(_), Some(totals)) = (spec.count, &actual) {
                let n = totals.count;
                if stored_n != Some(n as i64) {
                    drift.count = Some((stored_n.unwrap_or(0), n));
                }
            }
            if let Some(totals) = &actual {
                for ((sum, stored), computed) in
                    spec.sums.iter().zip(&stored_sums).zip(&totals.sums)
                {
                    let same = match (
                        stored.as_ref().and_then(sums::Num::of),
                        sums::Num::of(computed),
                    ) {
                        (Some(a), Some(b)) => a.same(b),
                        _ => false,
                    };
                    if !same {
                        drift.sums.push(SumDrift {
                            field: sum.parent.to_owned(),
                            stored: stored.clone().unwrap_or(Bson::Null),
                            computed: computed.clone(),
                        });
                    }
                }
            }
            let array_ok = embedded.as_deref() == Some(top.as_slice());
            if !write {
                return Ok(drift);
            }

            let mut set = Document::new();
            let mut update = Document::new();
            if !array_ok {
                set.insert(spec.field, top.clone());
            }
            if let (Some(count), Some(totals)) = (spec.count, &actual) {
                if drift.count.is_some() {
                    set.insert(count, totals.count as i64);
                }
            }
            for wrong in &drift.sums {
                set.insert(wrong.field.clone(), wrong.computed.clone());
            }
            if !set.is_empty() {
                update.insert("$set", set);
            }
            if let CountFix::Inc(inc) = count_fix {
                if !inc.is_empty() {
                    update.insert("$inc", inc.clone());
                }
            }
            if update.is_empty() {
                return Ok(drift);
            }
            // Conditional on what we read, unless all we do is a relative `$inc`.
            let mut filter = doc! { "_id": parent.clone() };
            if update.contains_key("$set") {
                match &embedded {
                    Some(array) => filter.insert(spec.field, array.clone()),
                    None => filter.insert(spec.field, doc! { "$exists": false }),
                };
                if let (Some(count), true) = (spec.count, actual.is_some()) {
                    match stored_count {
                        Some(v) => filter.insert(count, v),
                        None => filter.insert(count, doc! { "$exists": false }),
                    };
                }
                if actual.is_some() {
                    for (sum, stored) in spec.sums.iter().zip(&stored_sums) {
                        match stored {
                            Some(v) => filter.insert(sum.parent, v.clone()),
                            None => filter.insert(sum.parent, doc! { "$exists": false }),
                        };
                    }
                }
            }
            let updated = match ctx.run(parents.update_one(filter, update)).await {
                Ok(updated) => updated,
                Err(e) => {
                    let embedded = embedded.as_deref().unwrap_or_default();
                    let adding = super::bson_len(&top) - super::bson_len(embedded);
                    return Err(self.parent_write_error(e, parent, adding).await);
                }
            };
            if updated.matched_count == 1 {
                drift.fixed = true;
                return Ok(drift);
            }
            tracing::debug!(parent = %parent, "subset changed while resyncing; reading again");
        }
        // Still contended after every attempt (in a transaction, the snapshot changed under
        // us): a removal must still count, in the same transaction if there is one; the array
        // is left for the next reconcile.
        if let CountFix::Inc(inc) = count_fix {
            if !inc.is_empty() {
                let inc = parents
                    .update_one(doc! { "_id": parent.clone() }, doc! { "$inc": inc.clone() });
                ctx.run(inc).await.map_err(|e| store.mongo(e))?;
            }
        }
        Ok(drift)
    }

    /// The count and every sum of `parent`'s children, in one `$group`.
    ///
    /// # Errors
    ///
    /// [`Error::MalformedChild`] when a child's summed field is not an int32, int64 or double
    /// (`$sum` would skip it silently), [`Error::Mongo`].
    async fn totals(&self, ctx: &mut Ctx<'_>, parent: &Bson) -> Result<Totals> {
        let spec = self.spec();
        let children = self.children::<Document>();
        let numeric = ["int", "long", "double"];
        let mut group = doc! { "_id": Bson::Null, "n": { "$sum": 1 } };
        for (i, sum) in spec.sums.iter().enumerate() {
            let path = format!("${}", sum.child);
            group.insert(format!("s{i}"), doc! { "$sum": &path });
            let is_number = doc! { "$in": [{ "$type": &path }, numeric.as_slice()] };
            group.insert(
                format!("b{i}"),
                doc! { "$sum": { "$cond": [is_number, 0, 1] } },
            );
        }
        let pipeline = [
            doc! { "$match": spec.children_of(parent) },
            doc! { "$group": group },
        ];
        let grouped = ctx
            .aggregate(children.aggregate(pipeline))
            .await
            .map_err(|e| self.mongo_child(e))?;
        let Some(grouped) = grouped.into_iter().next() else {
            // No children: every sum is 0, not missing.
            return Ok(Totals {
                count: 0,
                sums: spec.sums.iter().map(|_| Bson::Int64(0)).collect(),
            });
        };
        let number = |key: &str| grouped.get(key).and_then(sums::Num::of);
        if (0..spec.sums.len())
            .any(|i| number(&format!("b{i}")).is_some_and(|b| !b.same(sums::Num::Int(0))))
        {
            let not_numbers: Vec<Bson> = spec
                .sums
                .iter()
                .map(|s| {
                    Bson::Document(doc! { s.child: { "$not": { "$type": numeric.as_slice() } } })
                })
                .collect();
            let mut bad = spec.children_of(parent);
            bad.insert("$or", not_numbers);
            let find = children.find_one(bad);
            let bad = ctx.run(find).await.map_err(|e| self.mongo_child(e))?;
            if let Some(bad) = bad {
                sums::check_child(spec, &bad)?;
            }
        }
        let count = match number("n") {
            Some(sums::Num::Int(n)) => u64::try_from(n).unwrap_or(0),
            _ => 0,
        };
        let sums = (0..spec.sums.len())
            .map(|i| number(&format!("s{i}")).map_or(Bson::Int64(0), sums::Num::into_bson))
            .collect();
        Ok(Totals { count, sums })
    }
}

/// [`RawSubset::reconcile`] and [`RawSubset::check`].
struct ResyncSteps<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    write: bool,
}

impl Steps for ResyncSteps<'_, '_> {
    type Output = Drift;

    async fn run(&self, ctx: &mut Ctx<'_>) -> Result<Drift> {
        self.subset
            .resync(ctx, self.parent, &CountFix::Recount, self.write)
            .await
    }
}

/// The subset field as stored: `None` when absent; an error when it is not an array of
/// documents (the same check, and message, as every other read of a parent).
fn embedded_array(
    parent_doc: &RawDocument,
    collection: &str,
    spec: &SubsetSpec,
) -> Result<Option<Vec<Document>>> {
    if matches!(parent_doc.get(spec.field), Ok(None)) {
        return Ok(None);
    }
    decode::subset_elements(parent_doc, collection, spec)?
        .into_iter()
        .enumerate()
        .map(|(i, element)| {
            Document::try_from(element).map_err(|e| Error::MalformedParent {
                collection: collection.to_owned(),
                id: Box::new(decode::id_of(parent_doc)),
                field: format!("{}.{i}", spec.field),
                problem: format!("is unreadable: {e}"),
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// How an embedded subset differs from the top `keep` of the collection.
fn compare(parent: &Bson, embedded: &[Document], top: &[Document]) -> Drift {
    let id = |d: &Document| d.get("_id").cloned().unwrap_or(Bson::Null);
    let embedded_ids: Vec<Bson> = embedded.iter().map(id).collect();
    let top_ids: Vec<Bson> = top.iter().map(id).collect();
    let missing = top_ids
        .iter()
        .filter(|i| !embedded_ids.contains(i))
        .cloned()
        .collect();
    // Not in the top `keep`, or embedded a second time.
    let stale = embedded_ids
        .iter()
        .enumerate()
        .filter(|(n, i)| !top_ids.contains(i) || embedded_ids[..*n].contains(i))
        .map(|(_, i)| i.clone())
        .collect();
    let changed = embedded
        .iter()
        .filter_map(|e| {
            let t = top.iter().find(|t| id(t) == id(e))?;
            (t != e).then(|| id(e))
        })
        .collect();
    let in_embedded_order: Vec<&Bson> = embedded_ids
        .iter()
        .filter(|i| top_ids.contains(i))
        .collect();
    let in_top_order: Vec<&Bson> = top_ids
        .iter()
        .filter(|i| embedded_ids.contains(i))
        .collect();
    Drift {
        parent: parent.clone(),
        missing,
        stale,
        changed,
        misordered: in_embedded_order != in_top_order,
        count: None,
        sums: Vec::new(),
        fixed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(id: i32, v: i32) -> Document {
        doc! { "_id": id, "v": v }
    }

    #[test]
    fn compare_names_every_kind_of_drift() {
        let top = [child(1, 1), child(2, 2), child(3, 3)];
        assert!(compare(&Bson::Null, &top, &top).is_clean());
        let d = compare(&Bson::Null, &[child(2, 2), child(1, 1), child(9, 9)], &top);
        assert_eq!(d.missing, [Bson::Int32(3)]);
        assert_eq!(d.stale, [Bson::Int32(9)]);
        assert!(d.misordered);
        let d = compare(&Bson::Null, &[child(1, 1), child(1, 1), child(2, 5)], &top);
        assert_eq!(d.stale, [Bson::Int32(1)]);
        assert_eq!(d.changed, [Bson::Int32(2)]);
        assert_eq!(d.missing, [Bson::Int32(3)]);
    }
}
