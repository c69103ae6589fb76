//! The parent key in a child as it is written: filled with the parent's `_id` where the child
//! leaves it out, refused where it names another parent.

use crate::bson::{Bson, Document};

use crate::error::{Error, Result};
use crate::model::SubsetSpec;

/// `child` with its parent key set to `parent`, before it is written under `parent` (by a push,
/// an update or an insert).
///
/// A key that is missing or `null` (an `Option` key left `None`) is filled in. A key that holds
/// another value is refused rather than overwritten: the caller said the child belongs to
/// another parent, and silently moving it would hide the mistake.
///
/// # Errors
///
/// [`Error::ParentKeyMismatch`] naming the child collection, the parent, the child, the key
/// field and the value the child holds there.
pub(crate) fn keyed(spec: &SubsetSpec, parent: &Bson, mut child: Document) -> Result<Document> {
    match child.get(spec.key) {
        None | Some(Bson::Null) => {}
        Some(found) if same_key(found, parent) => return Ok(child),
        Some(found) => {
            return Err(Error::ParentKeyMismatch {
                collection: spec.child_collection.to_owned(),
                parent: Box::new(parent.clone()),
                child: Box::new(child.get("_id").cloned().unwrap_or(Bson::Null)),
                field: spec.key.to_owned(),
                found: Box::new(found.clone()),
            })
        }
    }
    child.insert(spec.key, parent.clone());
    Ok(child)
}

/// Whether a child's parent key `found` names `parent`, as the server's equality does: the
/// integer types compare by value (an `Int32` key written by one program names the `Int64`
/// `_id` of the same number, and a query on the key finds it); any other value must be equal.
pub(crate) fn same_key(found: &Bson, parent: &Bson) -> bool {
    match (found, parent) {
        (Bson::Int32(a), Bson::Int64(b)) | (Bson::Int64(b), Bson::Int32(a)) => i64::from(*a) == *b,
        _ => found == parent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bson::doc;
    use crate::model::TEST_SPEC;

    #[test]
    fn a_missing_or_null_key_is_filled_an_equal_one_kept_another_refused() {
        let key = TEST_SPEC.key;
        let parent = Bson::Int32(7);
        let filled = keyed(&TEST_SPEC, &parent, doc! { "_id": 1 }).unwrap();
        assert_eq!(filled.get(key), Some(&parent));
        let null = keyed(&TEST_SPEC, &parent, doc! { "_id": 1, key: Bson::Null }).unwrap();
        assert_eq!(null.get(key), Some(&parent));
        let equal = keyed(&TEST_SPEC, &parent, doc! { "_id": 1, key: 7 }).unwrap();
        assert_eq!(equal, doc! { "_id": 1, key: 7 });
        let err = keyed(&TEST_SPEC, &parent, doc! { "_id": 1, key: 8 }).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::ParentKeyMismatch { field, found, parent, child, .. }
                    if field == key && **found == Bson::Int32(8)
                        && **parent == Bson::Int32(7) && **child == Bson::Int32(1)
            ),
            "{err:?}"
        );
    }

    #[test]
    fn integer_keys_of_the_same_value_name_the_same_parent() {
        let key = TEST_SPEC.key;
        assert!(same_key(&Bson::Int32(7), &Bson::Int64(7)));
        assert!(same_key(&Bson::Int64(7), &Bson::Int32(7)));
        assert!(!same_key(&Bson::Int32(7), &Bson::Int64(8)));
        assert!(!same_key(&Bson::String("7".into()), &Bson::Int64(7)));
        // Kept as the child holds it: a query on the key finds it under either type.
        let kept = keyed(&TEST_SPEC, &Bson::Int64(7), doc! { "_id": 1, key: 7_i32 }).unwrap();
        assert_eq!(kept.get(key), Some(&Bson::Int32(7)));
    }
}
