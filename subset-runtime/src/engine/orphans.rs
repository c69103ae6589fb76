//! Children of no parent: documents of a child collection whose key is missing, is an array, or
//! names no parent `_id`. No subset can show them and no resync of a parent ever reads them, so
//! only a pass over the child collection finds them.

use crate::bson::{doc, Bson, Document};
use mongodb::ClientSession;

use super::exec::Ctx;
use super::{RawChildren, RawStore};
use crate::action::{span, Action, Operation};
use crate::error::{Error, Result};

/// How many orphans' `_id`s an [`Orphans`] report names.
const ORPHAN_SAMPLES: usize = 5;

/// The children of a child collection that belong to no parent of a subset field; from
/// [`raw::Children::orphans`](crate::raw::Children::orphans).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Orphans {
    /// Children whose key is missing (or null).
    pub keyless: u64,
    /// Children whose key no parent `_id` can be (an array).
    pub invalid_key: u64,
    /// Children whose key names no stored parent (of another type than the parents' `_id`s, or
    /// a parent deleted or never written).
    pub no_parent: u64,
    /// The `_id`s of up to 5 of them.
    pub sample: Vec<Bson>,
}

impl Orphans {
    /// Every child of no parent.
    pub fn total(&self) -> u64 {
        self.keyless + self.invalid_key + self.no_parent
    }
}

impl RawChildren<'_> {
    /// Counts the children of this field's child collection that belong to no parent, with a
    /// few of their `_id`s; see [`RawStore::orphans`].
    ///
    /// A filtered view's filter plays no part: a child of no parent is one whatever its flags.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`].
    pub fn orphans(&self) -> Action<'_, Orphans> {
        self.store
            .orphans(self.spec.child_collection, self.spec.key)
    }
}

impl RawStore {
    /// Counts the documents of `children` whose `key` names no parent of this store (missing,
    /// an array, or no stored parent's `_id`), with a few of their `_id`s. One aggregation over
    /// `children`, grouped by key, that looks up each distinct key among the parents' `_id`s
    /// (an index lookup per parent, not per child).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`].
    pub fn orphans<'a>(&'a self, children: &'a str, key: &'a str) -> Action<'a, Orphans> {
        Action::of(FindOrphans {
            store: self,
            children,
            key,
        })
    }
}

/// [`RawStore::orphans`].
struct FindOrphans<'a> {
    store: &'a RawStore,
    children: &'a str,
    key: &'a str,
}

impl<'s, 'a: 's> Operation<'s> for FindOrphans<'a> {
    type Output = Orphans;

    fn span(&self) -> tracing::Span {
        span!("subset.orphans", self.store, Some(self.key), None)
    }

    async fn execute(self, caller: Option<&'s mut ClientSession>) -> Result<Orphans> {
        let (children, parents) = (self.children, self.store.collection_name());
        let collection = self.store.database().collection::<Document>(children);
        let found = Ctx::read(caller)
            .aggregate(collection.aggregate(orphans_pipeline(self.key, parents)))
            .await
            .map_err(|e| Error::mongo(children, e))?;
        Ok(found.first().map(read_report).unwrap_or_default())
    }
}

/// Groups the children by key, keeps the keys that are missing, arrays, or match no parent, and
/// sums them by kind. `$lookup` on a missing key would match parents whose `_id` is null or
/// missing, and on an array any parent named by an element, so both are classified before it.
fn orphans_pipeline(key: &str, parents: &str) -> Vec<Document> {
    let key_ref = format!("${key}");
    vec![
        doc! { "$group": {
            "_id": &key_ref,
            "n": { "$sum": 1 },
            "ids": { "$firstN": { "input": "$_id", "n": ORPHAN_SAMPLES as i64 } },
        } },
        doc! { "$set": { "kind": { "$switch": { "branches": [
            { "case": { "$eq": [{ "$ifNull": ["$_id", null] }, null] }, "then": "keyless" },
            { "case": { "$isArray": "$_id" }, "then": "invalid_key" },
        ], "default": "keyed" } } } },
        doc! { "$lookup": {
            "from": parents,
            "localField": "_id",
            "foreignField": "_id",
            "pipeline": [{ "$project": { "_id": 1 } }],
            "as": "parent",
        } },
        doc! { "$match": { "$or": [
            { "kind": { "$ne": "keyed" } },
            { "parent": { "$size": 0 } },
        ] } },
        doc! { "$group": {
            "_id": null,
            "keyless": { "$sum": { "$cond": [{ "$eq": ["$kind", "keyless"] }, "$n", 0] } },
            "invalid_key": { "$sum": { "$cond": [{ "$eq": ["$kind", "invalid_key"] }, "$n", 0] } },
            "no_parent": { "$sum": { "$cond": [{ "$eq": ["$kind", "keyed"] }, "$n", 0] } },
            "ids": { "$push": "$ids" },
        } },
        doc! { "$project": {
            "keyless": 1,
            "invalid_key": 1,
            "no_parent": 1,
            "sample": { "$slice": [
                { "$reduce": { "input": "$ids", "initialValue": [], "in": { "$concatArrays": ["$$value", "$$this"] } } },
                ORPHAN_SAMPLES as i64,
            ] },
        } },
    ]
}

/// The report from the pipeline's one document.
fn read_report(found: &Document) -> Orphans {
    let count = |name: &str| match found.get(name) {
        Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
        _ => 0,
    };
    let sample = match found.get("sample") {
        Some(Bson::Array(ids)) => ids.clone(),
        _ => Vec::new(),
    };
    Orphans {
        keyless: count("keyless"),
        invalid_key: count("invalid_key"),
        no_parent: count("no_parent"),
        sample,
    }
}
