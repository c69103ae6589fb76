//! What the server keeps for us: the child-collection indexes that make every page an index
//! scan, and the `$jsonSchema` cap that stops writers outside this library from growing a
//! subset.

use crate::bson::{doc, Bson, Document};
use futures::TryStreamExt;
use mongodb::options::IndexOptions;
use mongodb::IndexModel;

use super::{RawChildren, RawStore};
use crate::error::Result;
use crate::order;

impl RawStore {
    /// Creates every subset field's child-collection index; see [`RawChildren::ensure_index`].
    ///
    /// # Errors
    ///
    /// As [`RawChildren::ensure_index`].
    pub async fn ensure_indexes(&self) -> Result<()> {
        for spec in self.spec().subsets {
            self.children(spec).ensure_index().await?;
        }
        Ok(())
    }

    /// Installs on the parent collection a `$jsonSchema` validator with `bsonType: "array"` and
    /// `maxItems: keep` for each subset field, so that a write outside this library that forgets
    /// `$slice` is rejected by the server. Creates the collection if needed; merges with (rather
    /// than replaces) a validator the collection already has, replacing only its own earlier
    /// version, so it is idempotent.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`], e.g. when the user lacks the `collMod` privilege.
    #[tracing::instrument(skip_all, fields(collection = %self.collection_name()))]
    pub async fn ensure_schema(&self) -> Result<()> {
        let ours = self.schema();
        let db = self.database();
        let existing = db
            .list_collections()
            .filter(doc! { "name": self.collection_name() })
            .await
            .map_err(|e| self.mongo(e))?
            .try_next()
            .await
            .map_err(|e| self.mongo(e))?;
        let Some(existing) = existing else {
            return db
                .create_collection(self.collection_name())
                .validator(ours)
                .await
                .map_err(|e| self.mongo(e));
        };
        let current = existing.options.validator.unwrap_or_default();
        let merged = merge_validator(current.clone(), ours);
        if merged == current {
            return Ok(());
        }
        db.run_command(doc! { "collMod": self.collection_name(), "validator": merged })
            .await
            .map_err(|e| self.mongo(e))?;
        Ok(())
    }

    fn schema(&self) -> Document {
        let properties: Document = self
            .spec()
            .subsets
            .iter()
            .map(|spec| {
                let rule = doc! { "bsonType": "array", "maxItems": i64::from(spec.keep) };
                (spec.field.to_owned(), Bson::Document(rule))
            })
            .collect();
        doc! {
            "$jsonSchema": {
                "title": schema_title(self.collection_name()),
                "bsonType": "object",
                "properties": properties,
            }
        }
    }
}

impl RawChildren<'_> {
    /// The keys of the child-collection index that serves this field's pages:
    /// `{key: 1, <sort keys>, _id}`.
    pub fn index_keys(&self) -> Document {
        order::index_keys(self.spec)
    }

    /// Creates the child-collection index [`RawChildren::index_keys`]; idempotent.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] naming the child collection.
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection_name(), field = self.spec.field))]
    pub async fn ensure_index(&self) -> Result<()> {
        // Views in the same order share one index, made under the first one's name.
        if self.has_index().await? {
            return Ok(());
        }
        let spec = self.spec;
        let index = IndexModel::builder()
            .keys(self.index_keys())
            .options(
                IndexOptions::builder()
                    .name(format!("subset_{}_{}", spec.key, spec.field))
                    .build(),
            )
            .build();
        self.children::<Document>()
            .create_index(index)
            .await
            .map_err(|e| self.mongo_child(e))?;
        Ok(())
    }

    /// Whether the child collection has an index with exactly [`RawChildren::index_keys`], under
    /// any name (`false` when the collection does not exist).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Mongo`] naming the child collection.
    #[tracing::instrument(skip_all, fields(collection = %self.store.collection_name(), field = self.spec.field))]
    pub async fn has_index(&self) -> Result<bool> {
        let name = self.spec.child_collection;
        let db = self.store.database();
        let exists = !db
            .list_collection_names()
            .filter(doc! { "name": name })
            .await
            .map_err(|e| self.mongo_child(e))?
            .is_empty();
        if !exists {
            return Ok(false);
        }
        let wanted = self.index_keys();
        let indexes: Vec<IndexModel> = self
            .children::<Document>()
            .list_indexes()
            .await
            .map_err(|e| self.mongo_child(e))?
            .try_collect()
            .await
            .map_err(|e| self.mongo_child(e))?;
        Ok(indexes.iter().any(|i| same_keys(&i.keys, &wanted)))
    }
}

/// Key documents compared field by field in order, numbers by value (`1` and `1.0` alike, as
/// indexes made by other tools may store them).
fn same_keys(a: &Document, b: &Document) -> bool {
    let number = |v: &Bson| match v {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(n) => Some(*n),
        _ => None,
    };
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|((ka, va), (kb, vb))| {
            ka == kb && number(va).is_some() && number(va) == number(vb)
        })
}

/// The title that marks our schema inside a user's validator.
fn schema_title(collection: &str) -> String {
    format!("subset: capped subsets of `{collection}`")
}

fn is_ours(validator: &Document) -> bool {
    validator
        .get_document("$jsonSchema")
        .and_then(|s| s.get_str("title"))
        .is_ok_and(|t| t.starts_with("subset: "))
}

/// `current` with our schema in place: alone if there was nothing, swapped for our earlier
/// version, or added to the user's rules under `$and`.
fn merge_validator(current: Document, ours: Document) -> Document {
    if current.is_empty() || is_ours(&current) {
        return ours;
    }
    if current.len() == 1 {
        if let Ok(all) = current.get_array("$and") {
            let mut rules: Vec<Bson> = all
                .iter()
                .filter(|r| !r.as_document().is_some_and(is_ours))
                .cloned()
                .collect();
            rules.push(Bson::Document(ours));
            return doc! { "$and": rules };
        }
    }
    doc! { "$and": [current, ours] }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(keep: i64) -> Document {
        doc! { "$jsonSchema": { "title": schema_title("p"), "properties": { "a": { "maxItems": keep } } } }
    }

    #[test]
    fn index_keys_match_by_value() {
        let ours = doc! { "shop_id": 1, "date": -1, "_id": -1 };
        assert!(same_keys(
            &ours,
            &doc! { "shop_id": 1.0, "date": -1_i64, "_id": -1 }
        ));
        assert!(!same_keys(
            &ours,
            &doc! { "date": -1, "shop_id": 1, "_id": -1 }
        ));
        assert!(!same_keys(
            &ours,
            &doc! { "shop_id": 1, "date": 1, "_id": -1 }
        ));
        assert!(!same_keys(
            &ours,
            &doc! { "shop_id": 1, "date": "text", "_id": -1 }
        ));
    }

    #[test]
    fn merging_keeps_user_rules_and_replaces_only_ours() {
        assert_eq!(merge_validator(Document::new(), ours(5)), ours(5));
        assert_eq!(merge_validator(ours(5), ours(7)), ours(7));
        let user = doc! { "name": { "$type": "string" } };
        let merged = merge_validator(user.clone(), ours(5));
        assert_eq!(merged, doc! { "$and": [user.clone(), ours(5)] });
        let again = merge_validator(merged, ours(7));
        assert_eq!(again, doc! { "$and": [user, ours(7)] });
    }
}
