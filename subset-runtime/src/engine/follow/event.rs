//! What a change event on a child collection says: which parents it concerns.
//!
//! A child belongs to the parent named by its key field (one key per subset field). An insert
//! concerns the parent in the new document; a delete the parent in the document as it was (the
//! pre-image); an update or a replace both, since it may move the child from one parent to
//! another. The images are the ones the server recorded with the event
//! (`changeStreamPreAndPostImages`), not the document as it is when the event is read, so a
//! child moved twice is accounted to every parent it passed through.

use crate::bson::{doc, Bson, Document};
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};

use crate::model::SubsetSpec;

/// A change event as the follower reads it: the key fields of its images, nothing else.
pub(super) type Event = ChangeStreamEvent<Document>;

/// What one event means for the follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Meaning {
    /// A child was written: the parents it concerns were added to the batch.
    Parents,
    /// A child was written, but an image the mapping needs was not recorded (a change from
    /// before pre-images were enabled, or one whose pre-image expired): the parents are unknown.
    MissingImage,
    /// The collection was dropped or renamed; an `invalidate` event follows and ends the stream.
    Dropped,
    /// The stream ended (`invalidate`).
    Invalidated,
    /// Nothing the subsets depend on (an event type the follower does not know).
    Nothing,
}

/// The stage that trims each event to what the mapping reads: the images shrink to the key
/// fields, so that large children do not cross the wire. The event's `_id` (its resume token)
/// and `operationType` stay untouched, as the driver requires.
pub(super) fn trim(fields: &[SubsetSpec]) -> Document {
    let mut keep = doc! {
        "operationType": 1,
        "ns": 1,
        "documentKey": 1,
        "clusterTime": 1,
        "wallTime": 1,
    };
    for spec in fields {
        keep.insert(format!("fullDocument.{}", spec.key), 1);
        keep.insert(format!("fullDocumentBeforeChange.{}", spec.key), 1);
    }
    doc! { "$project": keep }
}

/// Adds to `parents` each (field index in `fields`, parent `_id`) that `event` concerns, and to
/// `keyless` the `_id` of a child it wrote that carries no parent key of any field: such a
/// child belongs to no parent, so no resync would ever mention it.
pub(super) fn map(
    event: &Event,
    fields: &[SubsetSpec],
    parents: &mut Vec<(usize, Bson)>,
    keyless: &mut Vec<Bson>,
) -> Meaning {
    let (after, before) = match event.operation_type {
        OperationType::Insert => (true, false),
        OperationType::Update | OperationType::Replace => (true, true),
        OperationType::Delete => (false, true),
        OperationType::Drop | OperationType::Rename | OperationType::DropDatabase => {
            return Meaning::Dropped
        }
        OperationType::Invalidate => return Meaning::Invalidated,
        _ => return Meaning::Nothing,
    };
    let images = [
        (after, event.full_document.as_ref()),
        (before, event.full_document_before_change.as_ref()),
    ];
    if images
        .iter()
        .any(|(needed, image)| *needed && image.is_none())
    {
        return Meaning::MissingImage;
    }
    for image in images
        .iter()
        .filter_map(|(needed, image)| image.filter(|_| *needed))
    {
        for (index, spec) in fields.iter().enumerate() {
            // A document without the key belongs to no parent of this field.
            if let Some(parent) = image.get(spec.key) {
                parents.push((index, parent.clone()));
            }
        }
    }
    // Only the document as written counts: a deleted child was counted when it was written.
    if let Some(written) = event.full_document.as_ref().filter(|_| after) {
        if !fields.iter().any(|spec| written.contains_key(spec.key)) {
            let id = event.document_key.as_ref().and_then(|k| k.get("_id"));
            keyless.push(id.cloned().unwrap_or(Bson::Null));
        }
    }
    Meaning::Parents
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC;

    fn event(kind: &str, after: Option<Document>, before: Option<Document>) -> Event {
        let mut raw = doc! {
            "_id": { "_data": "00" },
            "operationType": kind,
            "documentKey": { "_id": 1 },
        };
        if let Some(after) = after {
            raw.insert("fullDocument", after);
        }
        if let Some(before) = before {
            raw.insert("fullDocumentBeforeChange", before);
        }
        crate::bson_compat::from_document(raw).expect("a change event")
    }

    fn mapped(e: &Event) -> (Meaning, Vec<(usize, Bson)>) {
        let (meaning, parents, _) = mapped_with_keyless(e);
        (meaning, parents)
    }

    fn mapped_with_keyless(e: &Event) -> (Meaning, Vec<(usize, Bson)>, Vec<Bson>) {
        let other_key = SubsetSpec {
            key: "first_of",
            ..TEST_SPEC
        };
        let (mut parents, mut keyless) = (Vec::new(), Vec::new());
        let meaning = map(e, &[TEST_SPEC, other_key], &mut parents, &mut keyless);
        (meaning, parents, keyless)
    }

    #[test]
    fn a_written_child_with_no_key_of_any_field_is_keyless() {
        let (_, parents, keyless) = mapped_with_keyless(&event("insert", Some(doc! {}), None));
        assert_eq!((parents, keyless), (vec![], vec![Bson::Int32(1)]));
        // One field's key is enough to belong somewhere.
        let e = event("insert", Some(doc! { "first_of": 7 }), None);
        assert_eq!(mapped_with_keyless(&e).2, Vec::<Bson>::new());
        // An update that unsets the key: the old parent loses the child, which is now keyless.
        let e = event("update", Some(doc! {}), Some(doc! { "product_id": 1 }));
        let (_, parents, keyless) = mapped_with_keyless(&e);
        assert_eq!(
            (parents, keyless),
            (vec![(0, Bson::Int32(1))], vec![Bson::Int32(1)])
        );
        // A deleted keyless child is not counted again.
        let (_, _, keyless) = mapped_with_keyless(&event("delete", None, Some(doc! {})));
        assert!(keyless.is_empty());
    }

    #[test]
    fn an_update_that_moves_a_child_concerns_both_parents_of_every_field() {
        let e = event(
            "update",
            Some(doc! { "product_id": 2, "first_of": 7 }),
            Some(doc! { "product_id": 1 }),
        );
        let (meaning, parents) = mapped(&e);
        assert_eq!(meaning, Meaning::Parents);
        assert_eq!(
            parents,
            [
                (0, Bson::Int32(2)),
                (1, Bson::Int32(7)),
                (0, Bson::Int32(1))
            ]
        );
    }

    #[test]
    fn inserts_read_the_new_document_and_deletes_the_old_one() {
        let (_, parents) = mapped(&event("insert", Some(doc! { "product_id": 3 }), None));
        assert_eq!(parents, [(0, Bson::Int32(3))]);
        let (_, parents) = mapped(&event("delete", None, Some(doc! { "product_id": 4 })));
        assert_eq!(parents, [(0, Bson::Int32(4))]);
    }

    #[test]
    fn a_missing_image_is_reported_not_guessed() {
        let (meaning, parents) = mapped(&event("delete", None, None));
        assert_eq!(meaning, Meaning::MissingImage);
        assert!(parents.is_empty());
        let e = event("replace", Some(doc! { "product_id": 1 }), None);
        assert_eq!(mapped(&e).0, Meaning::MissingImage);
    }

    #[test]
    fn drops_and_invalidations_end_the_stream() {
        assert_eq!(mapped(&event("drop", None, None)).0, Meaning::Dropped);
        assert_eq!(
            mapped(&event("invalidate", None, None)).0,
            Meaning::Invalidated
        );
    }
}
