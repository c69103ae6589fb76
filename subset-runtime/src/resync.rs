//! Keeping the copy true: removing and replacing children, and recomputing a subset from the
//! child collection (the one primitive behind backfill, re-sorting and reconcile).

use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
use futures::TryStreamExt;
use mongodb::ClientSession;

use crate::error::{Error, Result};
use crate::model::SubsetSpec;
use crate::raw::{count_value, RawSubset, WriteMode};
use crate::{decode, order, txn};

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
    /// Removes a child from the child collection and from the subset, decrements the count and,
    /// if the child was embedded, backfills the next child so the subset is again the top `keep`.
    ///
    /// # Errors
    ///
    /// [`Error::ChildNotFound`] when no child with that `_id` is stored under `parent` (nothing
    /// changes), [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field))]
    pub async fn remove(&self, parent: &Bson, child: &Bson) -> Result<()> {
        let op = ChildOp {
            subset: self,
            parent,
            child,
            replacement: None,
        };
        self.run(&op).await.map(|_| ())
    }

    /// Replaces a stored child (matched by `_id` under `parent`) in the child collection and its
    /// embedded copy; when its sort keys changed, the subset is recomputed, so the child may
    /// enter or leave it.
    ///
    /// # Errors
    ///
    /// [`Error::ChildNotFound`], [`Error::ChildWithoutId`], [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field))]
    pub async fn update(&self, parent: &Bson, child: Document) -> Result<()> {
        let id = child
            .get("_id")
            .cloned()
            .ok_or_else(|| Error::ChildWithoutId {
                collection: self.spec().child_collection.to_owned(),
            })?;
        let mut stored = child;
        stored.insert(self.spec().key, parent.clone());
        let op = ChildOp {
            subset: self,
            parent,
            child: &id,
            replacement: Some(&stored),
        };
        self.run(&op).await.map(|_| ())
    }

    /// Recomputes the subset (the top `keep` of the child collection) and the count, writes them
    /// if they differ, and reports what differed.
    ///
    /// Safe while writers run: the write is conditional on the subset and count being as read,
    /// and is retried otherwise, so it never overwrites a child pushed after it read. In
    /// [`WriteMode::Ordered`] a push whose child is stored but whose parent update is still in
    /// flight can leave the count one high; the next reconcile corrects it.
    ///
    /// # Errors
    ///
    /// [`Error::ParentNotFound`], [`Error::MalformedParent`] when the stored subset field is not
    /// an array, [`Error::Mongo`].
    #[tracing::instrument(skip_all, fields(collection = %self.store().collection_name(), field = self.spec().field))]
    pub async fn reconcile(&self, parent: &Bson) -> Result<Drift> {
        let op = ResyncOp {
            subset: self,
            parent,
            write: true,
        };
        self.run(&op).await
    }

    /// What [`RawSubset::reconcile`] would find, without writing anything.
    ///
    /// # Errors
    ///
    /// As [`RawSubset::reconcile`].
    pub async fn check(&self, parent: &Bson) -> Result<Drift> {
        // In a transaction on a replica set, so that its two reads see one snapshot and a push
        // landing between them is not reported as drift.
        let op = ResyncOp {
            subset: self,
            parent,
            write: false,
        };
        self.run(&op).await
    }

    async fn run<O: ChildWrite>(&self, op: &O) -> Result<Drift> {
        match self.store().mode().await? {
            WriteMode::Transactional => {
                let client = self.store().database().client();
                txn::run(client, self.store().collection_name(), &InTxn(op)).await
            }
            WriteMode::Ordered => op.exec(None).await,
        }
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
        mut session: Option<&mut ClientSession>,
        parent: &Bson,
        count_fix: CountFix,
        write: bool,
    ) -> Result<Drift> {
        let spec = self.spec();
        let store = self.store();
        let attempts = if session.is_some() {
            1
        } else {
            ORDERED_ATTEMPTS
        };
        let mut drift = Drift::default();
        let (parents, children) = (store.parents::<Document>(), self.children::<Document>());
        let raw_parents = store.parents::<RawDocumentBuf>();
        for _ in 0..attempts {
            // The parent's subset and count, as stored.
            let mut projection = doc! { spec.field: 1 };
            if let Some(count) = spec.count {
                projection.insert(count, 1);
            }
            let find = raw_parents
                .find_one(doc! { "_id": parent.clone() })
                .projection(projection);
            let found = match session.as_deref_mut() {
                Some(s) => find.session(s).await,
                None => find.await,
            }
            .map_err(|e| store.mongo(e))?
            .ok_or_else(|| self.parent_not_found(parent))?;
            let embedded = embedded_array(&found, store.collection_name(), spec)?;
            let stored_count = spec
                .count
                .and_then(|c| found.get(c).ok().flatten())
                .and_then(|v| Bson::try_from(v).ok());

            // The truth: the child collection's first `keep`, and its count when it is needed.
            let top = children
                .find(doc! { spec.key: parent.clone() })
                .sort(order::sort_doc(spec))
                .limit(i64::from(spec.keep))
                .projection(doc! { spec.key: 0 });
            let top: Vec<Document> = match session.as_deref_mut() {
                Some(s) => {
                    let mut cursor = top
                        .session(&mut *s)
                        .await
                        .map_err(|e| self.mongo_child(e))?;
                    cursor.stream(s).try_collect().await
                }
                None => match top.await {
                    Ok(cursor) => cursor.try_collect().await,
                    Err(e) => Err(e),
                },
            }
            .map_err(|e| self.mongo_child(e))?;
            let actual = match (spec.count, count_fix) {
                (Some(_), CountFix::Recount) => {
                    let count = children.count_documents(doc! { spec.key: parent.clone() });
                    let n = match session.as_deref_mut() {
                        Some(s) => count.session(s).await,
                        None => count.await,
                    }
                    .map_err(|e| self.mongo_child(e))?;
                    Some(n)
                }
                _ => None,
            };

            drift = compare(parent, embedded.as_deref().unwrap_or_default(), &top);
            let stored_n = spec
                .count
                .and_then(|c| found.get(c).ok().flatten())
                .and_then(count_value);
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
            let updated = match session.as_deref_mut() {
                Some(s) => parents.update_one(filter, update).session(s).await,
                None => parents.update_one(filter, update).await,
            }
            .map_err(|e| store.mongo(e))?;
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
            match session {
                Some(s) => inc.session(s).await,
                None => inc.await,
            }
            .map_err(|e| store.mongo(e))?;
        }
        Ok(drift)
    }
}

/// A write on one child followed by a resync, runnable in a transaction or in order.
pub(crate) trait ChildWrite: Sync {
    /// Runs the writes, in `session`'s transaction when there is one.
    fn exec(
        &self,
        session: Option<&mut ClientSession>,
    ) -> impl std::future::Future<Output = Result<Drift>> + Send;
}

/// Runs a [`ChildWrite`] as a transaction body.
struct InTxn<'o, O>(&'o O);

impl<O: ChildWrite> txn::TxnOp for InTxn<'_, O> {
    type Output = Drift;

    async fn run(&self, session: &mut ClientSession) -> Result<Drift> {
        self.0.exec(Some(session)).await
    }
}

/// [`RawSubset::remove`] (no replacement) or [`RawSubset::update`].
struct ChildOp<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    child: &'s Bson,
    replacement: Option<&'s Document>,
}

impl ChildWrite for ChildOp<'_, '_> {
    async fn exec(&self, mut session: Option<&mut ClientSession>) -> Result<Drift> {
        let s = self.subset;
        let spec = s.spec();
        let filter = doc! { "_id": self.child.clone(), spec.key: self.parent.clone() };
        let children = s.children::<Document>();
        let (found, fix) = match self.replacement {
            None => {
                let delete = children.delete_one(filter);
                let deleted = match session.as_deref_mut() {
                    Some(ses) => delete.session(ses).await,
                    None => delete.await,
                }
                .map_err(|e| s.mongo_child(e))?;
                (deleted.deleted_count == 1, CountFix::Add(-1))
            }
            Some(stored) => {
                let replace = children.replace_one(filter, stored);
                let replaced = match session.as_deref_mut() {
                    Some(ses) => replace.session(ses).await,
                    None => replace.await,
                }
                .map_err(|e| s.mongo_child(e))?;
                (replaced.matched_count == 1, CountFix::Keep)
            }
        };
        if !found {
            return Err(Error::ChildNotFound {
                collection: spec.child_collection.to_owned(),
                parent: Box::new(self.parent.clone()),
                id: Box::new(self.child.clone()),
            });
        }
        s.resync(session, self.parent, fix, true).await
    }
}

/// [`RawSubset::reconcile`].
struct ResyncOp<'s, 'a> {
    subset: &'s RawSubset<'a>,
    parent: &'s Bson,
    write: bool,
}

impl ChildWrite for ResyncOp<'_, '_> {
    async fn exec(&self, session: Option<&mut ClientSession>) -> Result<Drift> {
        self.subset
            .resync(session, self.parent, CountFix::Recount, self.write)
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
