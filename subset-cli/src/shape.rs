//! Whether a parent's array can be moved into a child collection: an array of documents, each
//! with every sort field and a usable, unique `_id` (or none, to be assigned).

use std::collections::HashMap;

use bson::spec::ElementType;
use bson::{RawBsonRef, RawDocument};
use subset_runtime::{bson_type_name, SubsetSpec};

/// How many element positions a problem names.
const NAMED: usize = 3;

/// A parent's array as found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Shape {
    /// Elements.
    pub len: u64,
    /// Elements without an `_id`.
    pub without_id: u64,
    /// Bytes of the array in the parent document.
    pub array_bytes: u64,
}

impl Shape {
    /// The array's bytes if only `keep` of its elements (of average size) stayed.
    pub fn kept_bytes(&self, keep: u32) -> u64 {
        kept_bytes(self.array_bytes, self.len, keep)
    }
}

/// An array of `len` elements in `array_bytes` bytes, cut to `keep` elements of average size.
pub fn kept_bytes(array_bytes: u64, len: u64, keep: u32) -> u64 {
    // 5 bytes are the array's header and terminator.
    let elements = array_bytes.saturating_sub(5);
    match elements.checked_div(len) {
        Some(each) => 5 + each * len.min(u64::from(keep)),
        None => array_bytes,
    }
}

/// Reads `spec.field` of `parent` and says what is wrong with it, naming the path in MongoDB's
/// dotted notation.
pub fn check(parent: &RawDocument, spec: &SubsetSpec) -> Result<Shape, String> {
    let field = spec.field;
    let value = parent
        .get(field)
        .map_err(|e| format!("`{field}` cannot be read: {e}"))?;
    let Some(value) = value else {
        return Ok(Shape::default());
    };
    let RawBsonRef::Array(array) = value else {
        return Err(format!(
            "`{field}` is {}, not an array",
            bson_type_name(value.element_type())
        ));
    };
    let mut shape = Shape {
        array_bytes: array.as_bytes().len() as u64,
        ..Shape::default()
    };
    let mut missing: HashMap<&str, Vec<u64>> = HashMap::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for (i, element) in array.into_iter().enumerate() {
        let i = i as u64;
        let element = element.map_err(|e| format!("`{field}.{i}` cannot be read: {e}"))?;
        let RawBsonRef::Document(child) = element else {
            return Err(format!(
                "`{field}.{i}` is {}, not a document",
                bson_type_name(element.element_type())
            ));
        };
        shape.len += 1;
        for key in spec.sort.iter().filter(|k| k.field != "_id") {
            if !matches!(child.get(key.field), Ok(Some(_))) {
                missing.entry(key.field).or_default().push(i);
            }
        }
        match child.get("_id") {
            Ok(Some(id)) => {
                let kind = id.element_type();
                if matches!(
                    kind,
                    ElementType::Array | ElementType::RegularExpression | ElementType::Undefined
                ) {
                    return Err(format!(
                        "`{field}.{i}._id` is {}, which MongoDB does not accept as an `_id`",
                        bson_type_name(kind)
                    ));
                }
                // Display conflates 1 and 1.0 and 1L, as the `_id` index does.
                let text =
                    bson::Bson::try_from(id).map_or_else(|_| format!("{id:?}"), |b| b.to_string());
                if let Some(first) = seen.insert(text.clone(), i) {
                    return Err(format!(
                        "`{field}.{i}._id` repeats `{field}.{first}._id` ({text}): each child needs its own `_id`"
                    ));
                }
            }
            Ok(None) => shape.without_id += 1,
            Err(e) => return Err(format!("`{field}.{i}._id` cannot be read: {e}")),
        }
    }
    if let Some(key) = spec
        .sort
        .iter()
        .find(|k| missing.contains_key(k.field))
        .map(|k| k.field)
    {
        let at = &missing[key];
        let mut named: Vec<String> = at
            .iter()
            .take(NAMED)
            .map(|i| format!("`{field}.{i}`"))
            .collect();
        if at.len() > NAMED {
            named.push(format!("and {} more", at.len() - NAMED));
        }
        return Err(format!(
            "sort field `{key}` is missing on {} of {} elements: {}",
            at.len(),
            shape.len,
            named.join(", ")
        ));
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};
    use subset_runtime::SpecBuilder;

    fn spec() -> &'static SubsetSpec {
        SpecBuilder::new("reviews", "reviews", "shop_id")
            .sort("date desc")
            .build()
            .unwrap()
    }

    fn shape(parent: bson::Document) -> Result<Shape, String> {
        let raw = RawDocumentBuf::from_document(&parent).unwrap();
        check(&raw, spec())
    }

    #[test]
    fn good_arrays_are_measured() {
        let s = shape(doc! { "reviews": [{ "_id": 1, "date": 1 }, { "date": 2 }] }).unwrap();
        assert_eq!((s.len, s.without_id), (2, 1));
        assert_eq!(shape(doc! {}).unwrap().len, 0);
    }

    #[test]
    fn problems_name_the_path() {
        let err = shape(doc! { "reviews": "many" }).unwrap_err();
        assert_eq!(err, "`reviews` is a string, not an array");
        let err = shape(doc! { "reviews": [{ "date": 1 }, 7] }).unwrap_err();
        assert_eq!(err, "`reviews.1` is an int32, not a document");
        let err = shape(doc! { "reviews": [{ "date": 1 }, { "x": 1 }] }).unwrap_err();
        assert_eq!(
            err,
            "sort field `date` is missing on 1 of 2 elements: `reviews.1`"
        );
        let err = shape(doc! { "reviews": [{ "_id": 1, "date": 1 }, { "_id": 1, "date": 2 }] })
            .unwrap_err();
        assert!(
            err.contains("`reviews.1._id` repeats `reviews.0._id`"),
            "{err}"
        );
    }
}
