//! The marker each parent carries (`_subset`): the field, the note of malformed children in a
//! view's entry, and the marks of adoptions under way.

use crate::bson::{Document, RawDocument};
use crate::model::SubsetSpec;

pub(crate) use crate::bookkeeping::names::MARKER;

/// The key, in a view's entry of the marker (`_subset.v.<field>`), of the note that a
/// malformed child (see [`crate::repair::MalformedChild`]) is among the first `keep` the child
/// collection gives: the subset leaves it out, so the first page cannot come from the subset
/// (see `RawChildren::embedded_page`). It holds how many; absent for none.
const NOTE: &str = "m";

/// How the key of an adoption mark begins: `a_` and the view's field, holding when the adoption
/// began. `RawChildren::adopt` sets it before it copies a child of the view into the child
/// collection, and the write that builds the view from there removes it (a reconcile's, or a
/// rebuild's marking): a parent that carries one embeds children that may be its only copies,
/// which a rebuild, reconcile or check refuses to drop (see `Model::would_empty`). A key of its
/// own per view, beside the others (not an entry under one key), so that removing it leaves
/// nothing behind, and one view's adoption never clears another's. Not a definition: a parent
/// marked so is still unmarked (see `guard::marked`).
pub(crate) const ADOPTING: &str = "a_";

/// The path of the adoption mark of `spec`'s view in a parent (see [`ADOPTING`]), for a
/// `$set`, an `$unset` or a projection.
pub(crate) fn adoption_mark(spec: &SubsetSpec) -> String {
    format!("{MARKER}.{ADOPTING}{}", spec.field)
}

/// Whether `parent` (a stored parent, or a projection holding its marker) carries the adoption
/// mark of `spec`'s view (see [`ADOPTING`]).
pub(crate) fn adopting(parent: &RawDocument, spec: &SubsetSpec) -> bool {
    match parent.get(MARKER) {
        Ok(Some(marker)) => marker.as_document().is_some_and(|m| {
            let key = format!("{ADOPTING}{}", spec.field);
            matches!(m.get(key), Ok(Some(_)))
        }),
        _ => false,
    }
}

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
