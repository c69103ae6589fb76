//! Keeping the copy true: recomputing a subset from the child collection, the one primitive
//! behind backfill, re-ranking, `reconcile` and `check`.

use crate::bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use mongodb::ClientSession;

use super::exec::{self, Ctx, Steps};
use super::{query, RawSubset};
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
    }
}

/// What one resync should do besides making the array right.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CountFix {
    /// Leave the count as it is.
    Keep,
    /// Add this to the count (a removal: `-1`), exactly once.
    Add(i64),
    /// Set the count to the child collection's count (reconcile).
    Recount,
}

impl RawSubset<'_> {
    /// Recomputes the subset (the top `keep` of the child collection) and the count, writes them
    /// if they differ, and reports what differed.
    ///
    /// Safe while writers run: the write is conditional on the subset and count being as read,
    /// and is retried otherwise, so it never overwrites a child pushed after it read. In
    /// [`crate::WriteMode::Ordered`] a push whose child is stored but whose parent update is
    /// still in flight can leave the count one high; the next reconcile corrects it.
    ///
    /// # Errors
    ///
    /// [`Error::ParentNotFound`], [`Error::MalformedParent`] when the stored subset field is not
    /// an array, [`Error::Mongo`].
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
        count_fix: CountFix,
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

            // The truth: the child collection's first `keep`, and its count when it is needed.
            let top = ctx
                .collect(query::top_children(&children, spec, parent))
                .await
                .map_err(|e| self.mongo_child(e))?;
            let actual = match (spec.count, count_fix) {
                (Some(_), CountFix::Recount) => {
                    let count = children.count_documents(doc! { spec.key: parent.clone() });
                    let n = ctx.run(count).await.map_err(|e| self.mongo_child(e))?;
                    Some(n)
                }
                _ => None,
            };

            drift = compare(parent, embedded.as_deref().unwrap_or_default(), &top);
            let stored_n = spec
                .count
                .and_then(|c| found.get(c).ok().flatten())
                .and_then(decode::count_value);
            if let Some(n) = actual {
                if stored_n != Some(n as i64) {
                    drift.count = Some((stored_n.unwrap_or(0), n));
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
            if let (Some(count), Some(n)) = (spec.count, actual) {
                if drift.count.is_some() {
                    set.insert(count, n as i64);
                }
            }
            if !set.is_empty() {
                update.insert("$set", set);
            }
            if let (Some(count), CountFix::Add(n)) = (spec.count, count_fix) {
                update.insert("$inc", doc! { count: n });
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
        if let (Some(count), CountFix::Add(n)) = (spec.count, count_fix) {
            let inc = parents.update_one(
                doc! { "_id": parent.clone() },
                doc! { "$inc": { count: n } },
            );
            ctx.run(inc).await.map_err(|e| store.mongo(e))?;
        }
        Ok(drift)
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
            .resync(ctx, self.parent, CountFix::Recount, self.write)
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
