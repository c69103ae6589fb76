//! Children too large to embed: a child that another program stored, and that the subset
//! cannot hold next to the parent's other fields (a review of 16 MiB), would make every
//! recompute of its parent fail for ever. A recompute leaves it out instead, reports it by name
//! as a [`MalformedChild`], and notes it in the parent's marker like any malformed child in
//! the head, so that a first page comes from the child collection; the count and sums, which
//! the child collection's totals give, stay exact.

use crate::bson::{doc, Bson, Document, RawDocument};

use super::MalformedChild;
use crate::model::SubsetSpec;

/// MongoDB's document limit.
pub(crate) const LIMIT: i64 = 16 * 1024 * 1024;

/// Room kept for what a recompute writes besides the array (the marker, the count, the sums),
/// and for the estimate of an array element's overhead.
const ROOM: i64 = 16 * 1024;

/// The field a recompute's read of the parent adds to its projection: the parent's size.
const SIZE: &str = "_subset_bytes";

/// Adds the parent's size to the projection of a recompute's read.
pub(super) fn project(projection: &mut Document) {
    projection.insert(SIZE, doc! { "$bsonSize": "$$ROOT" });
}

/// The parent's size as the read projected it ([`project`]).
pub(super) fn of(found: &RawDocument) -> Option<i64> {
    match found.get(SIZE).ok().flatten()? {
        crate::bson::RawBsonRef::Int32(n) => Some(n.into()),
        crate::bson::RawBsonRef::Int64(n) => Some(n),
        _ => None,
    }
}

/// The size of `copy` as an array element, when it is small enough to carry in an update as a
/// literal, within the room a recompute keeps: a view re-ranked in place takes only such
/// copies.
pub(crate) fn carried(copy: &Document) -> Option<i64> {
    let bytes = crate::engine::bson_len([copy]);
    (bytes <= ROOM).then_some(bytes)
}

/// The condition, for a parent update's filter, that the parent can take `added` more bytes
/// (the copies it carries, [`carried`]) and keep the room a recompute keeps: an update that
/// would not fit misses instead, and the recompute that follows leaves out what does not fit
/// ([`unheld`]). `None` when no parent could take them: an update carrying them would itself
/// be over the limit.
pub(crate) fn fits(added: i64) -> Option<Document> {
    let most = LIMIT - ROOM - added;
    (most >= 0).then(|| doc! { "$expr": { "$lte": [{ "$bsonSize": "$$ROOT" }, most] } })
}

/// When `parent`, of `bytes` now holding `held` in this view cannot hold `top` instead, the
/// largest child of `top`, reported, with the size the parent would have had.
pub(super) fn unheld(
    spec: &SubsetSpec,
    parent: &Bson,
    bytes: i64,
    held: &[Document],
    top: &[Document],
) -> Option<(MalformedChild, i64)> {
    let without = bytes - crate::engine::bson_len(held);
    let with = without + crate::engine::bson_len(top) + ROOM;
    if with <= LIMIT {
        return None;
    }
    let largest = top
        .iter()
        .max_by_key(|child| crate::engine::bson_len([*child]))?;
    let size = crate::engine::bson_len([largest]);
    let problem = format!(
        "makes the child {size} bytes in `{}`: with it the parent would be about {with} bytes, \
         over MongoDB's document limit of {LIMIT}, so no subset holds it (a page reads it from \
         the child collection)",
        spec.field
    );
    Some((
        MalformedChild {
            child: largest.get("_id").cloned().unwrap_or(Bson::Null),
            parent: parent.clone(),
            field: largest_field(largest),
            problem,
        },
        with,
    ))
}

/// The name of `child`'s largest field: what makes it large.
fn largest_field(child: &Document) -> String {
    child
        .iter()
        .filter(|(name, _)| *name != "_id")
        .max_by_key(|(_, value)| match value {
            Bson::Document(d) => crate::engine::bson_len([d]),
            Bson::String(s) => s.len() as i64,
            Bson::Array(a) => a.len() as i64 * 16,
            Bson::Binary(b) => b.bytes.len() as i64,
            _ => 16,
        })
        .map_or_else(|| "_id".to_owned(), |(name, _)| name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TEST_SPEC;

    #[test]
    fn the_largest_child_is_left_out_only_past_the_limit() {
        let small = doc! { "_id": 1, "text": "a" };
        let huge = doc! { "_id": 2, "text": "x".repeat(LIMIT as usize - 100), "n": 1 };
        assert!(unheld(
            &TEST_SPEC,
            &Bson::Int32(7),
            1_000,
            &[],
            std::slice::from_ref(&small)
        )
        .is_none());
        let top = [huge, small.clone()];
        let (child, with) = unheld(
            &TEST_SPEC,
            &Bson::Int32(7),
            1_000,
            std::slice::from_ref(&small),
            &top,
        )
        .expect("over the limit");
        assert_eq!(child.child, Bson::Int32(2));
        assert_eq!(child.field, "text");
        assert!(with > LIMIT, "{with}");
        assert!(child.problem.contains("`recent`"), "{}", child.problem);
    }
}
