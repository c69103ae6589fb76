//! The bson calls whose names differ between bson 2 and bson 3, under one name that works on both.
//!
//! [`bson`](crate::bson) is the driver's: `mongodb::bson` is bson 3 when the driver's `bson-3`
//! feature is on (whoever turned it on, and even when `bson-2` is on too), bson 2 otherwise. This
//! crate's `bson-2` (default) and `bson-3` features turn on the driver's feature of the same name
//! and select the code here, so with both on, bson 3 wins here as well.
//!
//! bson 3 renamed the serde entry points (`to_document` became `serialize_to_document`,
//! `from_document` became `deserialize_from_document`, and so on). Code that must compile on
//! either version, such as a library or a test suite built with `--all-features`, calls the
//! functions here instead: each is bson 2's function of that name on `bson-2` and bson 3's renamed
//! one on `bson-3`, with the same arguments and results. Everything else (types, `doc!`, raw
//! documents, `RawDocumentBuf::try_from(&document)`) is spelled the same on both versions, except
//! for raw documents' keys ([`raw_key`]) and extended JSON ([`to_relaxed_extjson`]): use
//! [`bson`](crate::bson) directly.
//!
//! ```
//! use subset_runtime::bson::{doc, Document};
//! use subset_runtime::bson_compat;
//!
//! #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
//! struct Review {
//!     rating: i32,
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let stored: Document = bson_compat::to_document(&Review { rating: 5 })?;
//! assert_eq!(stored, doc! { "rating": 5 });
//! let back: Review = bson_compat::from_document(stored)?;
//! assert_eq!(back, Review { rating: 5 });
//! # Ok(())
//! # }
//! ```

use crate::bson::{Bson, Document, Regex};
use serde::de::{Deserialize, DeserializeOwned};
use serde::Serialize;

#[cfg(not(any(feature = "bson-2", feature = "bson-3")))]
compile_error!(
    "subset needs one of its `bson-2` and `bson-3` features: `bson-2` is the default, \
     `features = [\"bson-3\"]` selects bson 3"
);

/// The error of serializing a value to BSON (bson 2's `ser::Error`, bson 3's `error::Error`).
#[cfg(feature = "bson-3")]
pub type SerError = crate::bson::error::Error;
/// The error of serializing a value to BSON (bson 2's `ser::Error`, bson 3's `error::Error`).
#[cfg(not(feature = "bson-3"))]
pub type SerError = crate::bson::ser::Error;

/// The error of deserializing BSON into a value (bson 2's `de::Error`, bson 3's `error::Error`).
#[cfg(feature = "bson-3")]
pub type DeError = crate::bson::error::Error;
/// The error of deserializing BSON into a value (bson 2's `de::Error`, bson 3's `error::Error`).
#[cfg(not(feature = "bson-3"))]
pub type DeError = crate::bson::de::Error;

/// Serializes `value` to a [`Bson`] value: bson 2's `to_bson` on `bson-2`, bson 3's
/// `serialize_to_bson` on `bson-3`.
///
/// # Errors
///
/// The value's `Serialize` impl fails, or it holds something BSON cannot store (such as an
/// unsigned integer above `i64::MAX`).
pub fn to_bson<T: Serialize + ?Sized>(value: &T) -> Result<Bson, SerError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::serialize_to_bson as to_bson;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::to_bson;
    to_bson(value)
}

/// Serializes `value` to a [`Document`]: bson 2's `to_document` on `bson-2`, bson 3's
/// `serialize_to_document` on `bson-3`.
///
/// # Errors
///
/// As [`to_bson`], and when the value does not serialize to a document (a number, a string, a
/// sequence).
pub fn to_document<T: Serialize + ?Sized>(value: &T) -> Result<Document, SerError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::serialize_to_document as to_document;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::to_document;
    to_document(value)
}

/// Serializes `value` to the bytes of a BSON document: bson 2's `to_vec` on `bson-2`, bson 3's
/// `serialize_to_vec` on `bson-3`.
///
/// # Errors
///
/// As [`to_document`].
pub fn to_vec<T: Serialize>(value: &T) -> Result<Vec<u8>, SerError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::serialize_to_vec as to_vec;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::to_vec;
    to_vec(value)
}

/// Serializes `value` to a raw document: bson 2's `to_raw_document_buf` on `bson-2`, bson 3's
/// `serialize_to_raw_document_buf` on `bson-3`.
///
/// # Errors
///
/// As [`to_document`].
pub fn to_raw_document_buf<T: Serialize>(
    value: &T,
) -> Result<crate::bson::RawDocumentBuf, SerError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::serialize_to_raw_document_buf as to_raw_document_buf;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::to_raw_document_buf;
    to_raw_document_buf(value)
}

/// Deserializes a `T` from a [`Bson`] value: bson 2's `from_bson` on `bson-2`, bson 3's
/// `deserialize_from_bson` on `bson-3`.
///
/// # Errors
///
/// The value does not have the shape `T` expects (a missing field, a wrong type).
pub fn from_bson<T: DeserializeOwned>(bson: Bson) -> Result<T, DeError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::deserialize_from_bson as from_bson;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::from_bson;
    from_bson(bson)
}

/// Deserializes a `T` from a [`Document`]: bson 2's `from_document` on `bson-2`, bson 3's
/// `deserialize_from_document` on `bson-3`.
///
/// # Errors
///
/// As [`from_bson`].
pub fn from_document<T: DeserializeOwned>(document: Document) -> Result<T, DeError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::deserialize_from_document as from_document;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::from_document;
    from_document(document)
}

/// Deserializes a `T` from the bytes of a BSON document: bson 2's `from_slice` on `bson-2`,
/// bson 3's `deserialize_from_slice` on `bson-3`.
///
/// # Errors
///
/// The bytes are not a well-formed BSON document, or as [`from_bson`].
pub fn from_slice<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, DeError> {
    #[cfg(feature = "bson-3")]
    use crate::bson::deserialize_from_slice as from_slice;
    #[cfg(not(feature = "bson-3"))]
    use crate::bson::from_slice;
    from_slice(bytes)
}

/// A regular expression value. Its parts are `String`s in bson 2 and NUL-free `CString`s in
/// bson 3, so the struct literal does not compile on both.
///
/// # Errors
///
/// On `bson-3`, `pattern` or `options` holds a NUL byte, which BSON cannot store. On `bson-2`
/// this never fails (the same regex fails later, when it is serialized).
pub fn regex(pattern: &str, options: &str) -> Result<Regex, SerError> {
    #[cfg(feature = "bson-3")]
    let part = |text: &str| crate::bson::raw::CString::try_from(text);
    #[cfg(not(feature = "bson-3"))]
    let part = |text: &str| Ok::<_, SerError>(String::from(text));
    Ok(Regex {
        pattern: part(pattern)?,
        options: part(options)?,
    })
}

/// A value as relaxed extended JSON (`{"$oid": "…"}` for an ObjectId, `{"$date": "…"}` for a
/// date): `Bson::into_relaxed_extjson` on both versions. bson 3 has it only with its
/// `serde_json-1` feature, which this crate's `bson-3` feature turns on.
pub fn to_relaxed_extjson(value: Bson) -> serde_json::Value {
    value.into_relaxed_extjson()
}

/// The key of an element of a raw document (what iterating a `RawDocument` yields): `str` in
/// bson 2, bson 3's NUL-free `CStr`.
#[cfg(feature = "bson-3")]
pub type RawKey = crate::bson::raw::CStr;
/// The key of an element of a raw document (what iterating a `RawDocument` yields): `str` in
/// bson 2, bson 3's NUL-free `CStr`.
#[cfg(not(feature = "bson-3"))]
pub type RawKey = str;

/// A raw document's key as a `&str`, on either version.
pub fn raw_key(key: &RawKey) -> &str {
    #[cfg(feature = "bson-3")]
    let key = key.as_str();
    key
}

/// What a deserialization error says, without the wrapping bson 3 adds ("BSON error. Kind: …
/// Message: …"): serde's own words, such as "missing field `rating`", which the decoder parses.
pub(crate) fn de_message(error: &DeError) -> String {
    #[cfg(feature = "bson-3")]
    if let Some(message) = &error.message {
        return message.clone();
    }
    error.to_string()
}
