//! The two sides a resync compares, as plain values: the field as a parent stores it, and what
//! the child collection says it should hold.

use crate::bson::{Bson, Document, RawDocument};

use crate::decode;
use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// One parent's subset field as stored: its array, count and sums, which a resync compares
/// and makes its write conditional on.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Stored {
    /// The embedded array; `None` when the parent has no such field.
    pub(super) embedded: Option<Vec<Document>>,
    /// The count field's value; `None` when absent, or when the field keeps no count.
    pub(super) count: Option<Bson>,
    /// Each sum field's value, one per [`SubsetSpec::sums`]; `None` when absent.
    pub(super) sums: Vec<Option<Bson>>,
    /// How many malformed children the view's note says its head holds (0: no note).
    pub(super) noted: u32,
    /// Whether the parent carries the view's adoption mark (see
    /// [`crate::engine::model_change::ADOPTING`]), which the write that builds the view
    /// removes.
    pub(super) adopting: bool,
}

impl Stored {
    /// The field of `spec`, its count and its sums, as `parent` (a parent document of
    /// `collection`, read with [`crate::engine::query::subset_projection`]) holds them.
    ///
    /// # Errors
    ///
    /// [`Error::MalformedParent`] when the field is there but not an array of documents.
    pub(super) fn of(parent: &RawDocument, collection: &str, spec: &SubsetSpec) -> Result<Self> {
        let value = |name: &str| {
            parent
                .get(name)
                .ok()
                .flatten()
                .and_then(|v| Bson::try_from(v).ok())
        };
        Ok(Stored {
            embedded: embedded_array(parent, collection, spec)?,
            count: spec.count.and_then(value),
            sums: spec.sums.iter().map(|s| value(s.parent)).collect(),
            noted: crate::engine::model_change::noted_malformed(parent, spec),
            adopting: crate::engine::model_change::adopting(parent, spec),
        })
    }

    /// The embedded children (none when the field is absent).
    pub(super) fn embedded(&self) -> &[Document] {
        self.embedded.as_deref().unwrap_or_default()
    }

    /// The stored count, when it is an integer (`$inc` may leave an int32 or an int64).
    pub(super) fn count_value(&self) -> Option<i64> {
        match self.count {
            Some(Bson::Int32(n)) => Some(i64::from(n)),
            Some(Bson::Int64(n)) => Some(n),
            _ => None,
        }
    }
}

/// What one parent's subset field should hold, read from the child collection.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Expected {
    /// The top `keep` children in their embedded form, in the subset's order.
    pub(super) top: Vec<Document>,
    /// The count and sums over every child the field keeps, when they were recounted (a
    /// reconcile of a field with a count or sums); `None` leaves them out of the comparison.
    pub(super) totals: Option<Totals>,
    /// The `_id`s of the malformed children among the child collection's own first `keep`
    /// (which the subset leaves out, and a page from the collection meets).
    pub(super) head_malformed: Vec<Bson>,
    /// Whether the parent's marker should note [`Expected::head_malformed`]: not for a store
    /// of some fields, which writes no marker.
    pub(super) noting: bool,
}

/// The count and sums of one parent's children.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Totals {
    pub(super) count: u64,
    /// One per [`SubsetSpec::sums`], in order.
    pub(super) sums: Vec<Bson>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::{doc, RawDocumentBuf};
    use crate::spec::SpecBuilder;

    fn raw(d: Document) -> RawDocumentBuf {
        RawDocumentBuf::try_from(&d).expect("a document")
    }

    #[test]
    fn a_parent_gives_its_array_count_and_sums() {
        let spec = SpecBuilder::new("recent", "reviews", "product_id")
            .count("n")
            .sum("stars", "rating")
            .sum("words", "length")
            .build()
            .expect("a valid descriptor");
        let parent = raw(doc! { "_id": 1, "recent": [{ "_id": 2 }], "n": 3_i64, "stars": 4 });
        let stored = Stored::of(&parent, "products", spec).expect("a readable parent");
        assert_eq!(stored.embedded(), [doc! { "_id": 2 }]);
        assert_eq!(stored.count_value(), Some(3));
        assert_eq!(stored.sums, [Some(Bson::Int32(4)), None]);

        let bare = Stored::of(&raw(doc! { "_id": 1 }), "products", spec).expect("a parent");
        assert_eq!(bare.embedded, None);
        assert_eq!((&bare.count, bare.count_value()), (&None, None));
    }

    #[test]
    fn a_field_that_is_not_an_array_is_malformed() {
        let spec = SpecBuilder::new("recent", "reviews", "product_id")
            .build()
            .expect("a valid descriptor");
        let parent = raw(doc! { "_id": 1, "recent": "x" });
        let err = Stored::of(&parent, "products", spec).unwrap_err();
        assert!(matches!(err, Error::MalformedParent { .. }), "{err}");
    }
}
