//! The marker each parent carries (`_subset`): the field, and the note of malformed children in
//! a view's entry.

use crate::bson::{Document, RawDocument};
use crate::model::SubsetSpec;

pub(crate) use crate::bookkeeping::names::MARKER;

/// The key, in a view's entry of the marker (`_subset.v.<field>`), of the note that a
/// malformed child (see [`crate::repair::MalformedChild`]) is among the first `keep` the child
/// collection gives: the subset leaves it out, so the first page cannot come from the subset
/// (see `RawChildren::embedded_page`). It holds how many; absent for none.
const NOTE: &str = "m";

/// The path of the note of `spec`'s view in a parent (see [`NOTE`]), for a `$set` or `$unset`.
pub(crate) fn malformed_note(spec: &SubsetSpec) -> String {
    format!("{MARKER}.v.{}.{NOTE}", spec.field)
}

/// `view`, a view's entry of a marker, with the note that `noted` malformed children are
/// among its head (none: without a note).
pub(crate) fn with_note(mut view: Document, noted: u32) -> Document {
    match noted {
        0 => view.remove(NOTE),
        n => view.insert(NOTE, i64::from(n)),
    };
    view
}

/// How many malformed children the note of `spec`'s view in `parent` (a stored parent, or a
/// projection holding its marker) says are among the view's head: 0 when there is no note
/// (or no readable one).
pub(crate) fn noted_malformed(parent: &RawDocument, spec: &SubsetSpec) -> u32 {
    let note = match parent.get(MARKER) {
        Ok(Some(marker)) => marker
            .as_document()
            .and_then(|m| m.get_document("v").ok())
            .and_then(|v| v.get_document(spec.field).ok())
            .and_then(|view| view.get(NOTE).ok().flatten())
            .and_then(crate::decode::count_value),
        _ => None,
    };
    note.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}
