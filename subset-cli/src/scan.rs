//! What the commands ask of a collection before they work on it: that it exists, and its size.

use futures::TryStreamExt;
use mongodb::Database;
use serde::Serialize;
use subset_runtime::bson::{doc, Bson, Document};

use crate::error::CliError;

/// Fails with a usage error when `collection` does not exist: a misspelt `--parent` should not
/// look like an empty success.
pub async fn require_collection(db: &Database, collection: &str) -> Result<(), CliError> {
    let names = db
        .list_collection_names()
        .filter(doc! { "name": collection })
        .await
        .map_err(|e| CliError::mongo(collection, e))?;
    if names.is_empty() {
        return Err(CliError::Usage(format!(
            "collection `{collection}` does not exist in database `{}`",
            db.name()
        )));
    }
    Ok(())
}

/// A collection's size as the server keeps it (`$collStats`): cheap, no scan.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sizes {
    /// Documents.
    pub count: u64,
    /// Uncompressed BSON bytes of all documents.
    pub bytes: u64,
    /// Average document size in bytes.
    pub avg_document_bytes: u64,
}

/// The sizes of `collection`.
pub async fn sizes(db: &Database, collection: &str) -> Result<Sizes, CliError> {
    let stats: Vec<Document> = db
        .collection::<Document>(collection)
        .aggregate([doc! { "$collStats": { "storageStats": {} } }])
        .await
        .map_err(|e| CliError::mongo(collection, e))?
        .try_collect()
        .await
        .map_err(|e| CliError::mongo(collection, e))?;
    let storage = stats
        .first()
        .and_then(|s| s.get_document("storageStats").ok());
    let number = |key: &str| {
        storage
            .and_then(|s| s.get(key))
            .and_then(|v| match v {
                Bson::Int32(n) => Some(i64::from(*n)),
                Bson::Int64(n) => Some(*n),
                Bson::Double(n) => Some(*n as i64),
                _ => None,
            })
            .unwrap_or(0)
            .max(0) as u64
    };
    Ok(Sizes {
        count: number("count"),
        bytes: number("size"),
        avg_document_bytes: number("avgObjSize"),
    })
}
