//! Turning the user's types into BSON, the counterpart of `decode.rs`.

use bson::{Bson, Document};
use serde::Serialize;

use crate::error::{Error, Result};

/// An `_id` (of a parent or a child, `what` says which) as BSON.
pub(crate) fn id(value: &impl Serialize, what: &'static str) -> Result<Bson> {
    bson::to_bson(value).map_err(|source| Error::Serialize {
        what,
        source: Box::new(source),
    })
}

/// A parent or child (`what` says which) as a document.
pub(crate) fn document(value: &impl Serialize, what: &'static str) -> Result<Document> {
    bson::to_document(value).map_err(|source| Error::Serialize {
        what,
        source: Box::new(source),
    })
}
