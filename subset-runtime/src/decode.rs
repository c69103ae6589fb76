//! Turning stored BSON into the user's types, with errors that name the document and field.
//!
//! The fast path is one `bson::from_slice` over the raw bytes. Only when it fails do we decode
//! again, through `serde_path_to_error`, to find the path of the offending field.

use crate::bson::raw::RawBsonRef;
use crate::bson::{Bson, Document, RawDocument};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::model::{Subset, SubsetSpec};
use crate::values::type_name;

/// The `_id` of a stored document, or `null` when it has none (in an error message only).
pub(crate) fn id_of(doc: &RawDocument) -> Bson {
    doc.get("_id")
        .ok()
        .flatten()
        .and_then(|v| Bson::try_from(v).ok())
        .unwrap_or(Bson::Null)
}

/// Decodes a child stored in `collection` (the child collection, or the parent collection for an
/// embedded copy, where `prefix` is the element's path, e.g. `recent_reviews.3`).
pub(crate) fn child<C: DeserializeOwned>(
    raw: &RawDocument,
    collection: &str,
    prefix: Option<&str>,
) -> Result<C> {
    crate::bson_compat::from_slice(raw.as_bytes()).map_err(|fast| {
        let (field, problem) = locate::<C>(raw, &crate::bson_compat::de_message(&fast));
        Error::MalformedChild {
            collection: collection.to_owned(),
            id: Box::new(id_of(raw)),
            parent: None,
            field: join(prefix, &field),
            problem,
        }
    })
}

/// Decodes a stored parent after checking the shape of every subset field.
///
/// A subset field must be present and an array of documents, even where the Rust field has
/// `#[serde(default)]`: a parent without it was not written by this library, and serving an
/// empty first page for it would hide the children in the child collection.
pub(crate) fn parent<P: Subset>(raw: &RawDocument) -> Result<P> {
    // Only presence and type here, one lookup per field; the elements are checked by the decode
    // itself, and walked for a precise message only when it fails.
    for spec in P::SUBSETS {
        if !matches!(raw.get(spec.field), Ok(Some(RawBsonRef::Array(_)))) {
            subset_elements(raw, P::COLLECTION, spec)?;
        }
    }
    crate::bson_compat::from_slice(raw.as_bytes()).map_err(|fast| {
        if let Some(Err(shape)) = P::SUBSETS
            .iter()
            .map(|spec| subset_elements(raw, P::COLLECTION, spec))
            .find(Result::is_err)
        {
            return shape;
        }
        let (field, problem) = locate::<P>(raw, &crate::bson_compat::de_message(&fast));
        // Point into the array element when the failure is inside a child.
        let child = P::SUBSETS.iter().find_map(|spec| {
            let rest = field.strip_prefix(spec.field)?.strip_prefix('.')?;
            let (index, _) = rest.split_once('.').unwrap_or((rest, ""));
            let element = raw
                .get_array(spec.field)
                .ok()?
                .into_iter()
                .nth(index.parse().ok()?)?;
            match element.ok()? {
                RawBsonRef::Document(d) => Some(id_of(d)),
                _ => None,
            }
        });
        match child {
            Some(id) => Error::MalformedChild {
                collection: P::COLLECTION.to_owned(),
                id: Box::new(id),
                parent: Some(Box::new(id_of(raw))),
                field,
                problem,
            },
            None => Error::MalformedParent {
                collection: P::COLLECTION.to_owned(),
                id: Box::new(id_of(raw)),
                field,
                problem,
            },
        }
    })
}

/// The embedded children of one subset field, checked to be an array of documents.
pub(crate) fn subset_elements<'a>(
    raw: &'a RawDocument,
    collection: &str,
    spec: &SubsetSpec,
) -> Result<Vec<&'a RawDocument>> {
    let malformed = |problem: String| Error::MalformedParent {
        collection: collection.to_owned(),
        id: Box::new(id_of(raw)),
        field: spec.field.to_owned(),
        problem,
    };
    let array = match raw.get(spec.field) {
        Ok(Some(RawBsonRef::Array(a))) => a,
        Ok(Some(other)) => {
            return Err(malformed(format!(
                "is {}, not an array",
                type_name(other.element_type())
            )))
        }
        Ok(None) => return Err(malformed("is missing".to_owned())),
        Err(e) => return Err(malformed(format!("is unreadable: {e}"))),
    };
    let mut out = Vec::new();
    for (i, element) in array.into_iter().enumerate() {
        match element {
            Ok(RawBsonRef::Document(d)) => out.push(d),
            Ok(other) => {
                return Err(Error::MalformedParent {
                    collection: collection.to_owned(),
                    id: Box::new(id_of(raw)),
                    field: format!("{}.{i}", spec.field),
                    problem: format!(
                        "is {}, not an embedded child document",
                        type_name(other.element_type())
                    ),
                })
            }
            Err(e) => return Err(malformed(format!("is unreadable at element {i}: {e}"))),
        }
    }
    Ok(out)
}

/// Finds the path of the field that fails to decode, and what is wrong with it.
fn locate<T: DeserializeOwned>(raw: &RawDocument, fast: &str) -> (String, String) {
    let doc = match Document::try_from(raw) {
        Ok(doc) => doc,
        Err(e) => return (String::from("."), format!("is unreadable: {e}")),
    };
    match serde_path_to_error::deserialize::<_, T>(crate::bson::Deserializer::new(Bson::Document(
        doc,
    ))) {
        Err(e) => {
            let mut path = dotted(e.path());
            let inner = crate::bson_compat::de_message(&e.into_inner());
            // serde reports a missing field at the struct that lacks it; name the field itself.
            if let Some(name) = inner
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next())
            {
                path = if path == "." {
                    name.to_owned()
                } else {
                    format!("{path}.{name}")
                };
            }
            (path, format!("does not decode: {inner}"))
        }
        // The two decoders disagree; report the fast path's words.
        Ok(_) => (String::from("."), format!("does not decode: {fast}")),
    }
}

/// The path in MongoDB's dotted notation (`reviews.3.rating`), which users can paste into a query.
fn dotted(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let parts: Vec<String> = path
        .iter()
        .map(|segment| match segment {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_owned(),
        })
        .collect();
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join(".")
    }
}

fn join(prefix: Option<&str>, field: &str) -> String {
    match (prefix, field) {
        (Some(p), ".") => p.to_owned(),
        (Some(p), f) => format!("{p}.{f}"),
        (None, f) => f.to_owned(),
    }
}

/// An integer count as stored (`$inc` may leave an int32 or an int64).
pub(crate) fn count_value(v: RawBsonRef<'_>) -> Option<i64> {
    match v {
        RawBsonRef::Int32(n) => Some(i64::from(n)),
        RawBsonRef::Int64(n) => Some(n),
        _ => None,
    }
}
