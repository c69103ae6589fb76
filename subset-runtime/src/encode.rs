//! Turning the user's types into BSON, the counterpart of `decode.rs`.

use crate::bson::{Bson, Document, RawDocumentBuf};
use serde::Serialize;

use crate::error::{Error, Result};

/// An `_id` (of a parent or a child, `what` says which) as BSON.
pub(crate) fn id<T: Serialize + 'static>(value: &T, what: &'static str) -> Result<Bson> {
    // The usual `_id` directly: bson 2's serializer writes an `ObjectId` out as `{"$oid": hex}`
    // and parses that back, a few microseconds of every operation that names a parent.
    if let Some(id) = (value as &dyn std::any::Any).downcast_ref::<crate::bson::oid::ObjectId>() {
        return Ok(Bson::ObjectId(*id));
    }
    crate::bson_compat::to_bson(value).map_err(|source| Error::Serialize {
        what,
        source: Box::new(source),
    })
}

/// A parent or child (`what` says which) as a document.
pub(crate) fn document(value: &impl Serialize, what: &'static str) -> Result<Document> {
    crate::bson_compat::to_document(value).map_err(|source| Error::Serialize {
        what,
        source: Box::new(source),
    })
}

/// A child (or its preview) as a raw document, to read its sort values from.
pub(crate) fn raw(value: &impl Serialize, what: &'static str) -> Result<RawDocumentBuf> {
    crate::bson_compat::to_raw_document_buf(value).map_err(|source| Error::Serialize {
        what,
        source: Box::new(source),
    })
}

/// Refuses an `_id` (of a parent or a child, `what` says which, in `collection`) that no stored
/// document can have. Every filter puts ids in as values: a document such as `{"$ne": null}`
/// would act as an operator there and match other documents, so it is refused here, before any
/// query.
pub(crate) fn check_id(id: &Bson, what: &'static str, collection: &str) -> Result<()> {
    let reason = match id {
        Bson::Undefined => "undefined is not a value an `_id` can have",
        Bson::Array(_) => "an `_id` cannot be an array",
        Bson::RegularExpression(_) => "an `_id` cannot be a regular expression",
        Bson::Document(d) if d.keys().any(|k| k.starts_with('$')) => {
            "a document with `$`-prefixed fields would be read as a query operator"
        }
        _ => return Ok(()),
    };
    Err(Error::InvalidId {
        collection: collection.to_owned(),
        what,
        id: Box::new(id.clone()),
        reason,
    })
}
