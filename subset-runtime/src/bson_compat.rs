//! The one place that knows which bson version [`crate::bson`] is.
//!
//! The driver picks it: `mongodb::bson` is bson 3 when its `bson-3` feature is on (whoever turned
//! it on, and even when `bson-2` is on too), bson 2 otherwise. This crate's `bson-2` and `bson-3`
//! features turn on the driver's feature of the same name and select the code below, so with both
//! on, bson 3 wins here as well. Every other file names bson through `crate::bson` and calls the
//! functions and types here where the two versions differ.

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
pub(crate) type DeError = crate::bson::error::Error;
/// The error of deserializing BSON into a value (bson 2's `de::Error`, bson 3's `error::Error`).
#[cfg(not(feature = "bson-3"))]
pub(crate) type DeError = crate::bson::de::Error;

// bson 3 renamed the serde entry points; the bson 2 names are used everywhere else.
#[cfg(feature = "bson-3")]
pub(crate) use crate::bson::{
    deserialize_from_bson as from_bson, deserialize_from_slice as from_slice,
    serialize_to_bson as to_bson, serialize_to_document as to_document,
};
#[cfg(not(feature = "bson-3"))]
pub(crate) use crate::bson::{from_bson, from_slice, to_bson, to_document};

#[cfg(all(test, feature = "bson-3"))]
pub(crate) use crate::bson::deserialize_from_document as from_document;
#[cfg(all(test, not(feature = "bson-3")))]
pub(crate) use crate::bson::from_document;

/// What a deserialization error says, without the wrapping bson 3 adds ("BSON error. Kind: …
/// Message: …"): serde's own words, such as "missing field `rating`", which the decoder parses.
pub(crate) fn de_message(error: &DeError) -> String {
    #[cfg(feature = "bson-3")]
    if let Some(message) = &error.message {
        return message.clone();
    }
    error.to_string()
}

/// A regular expression value (its parts are `String`s in bson 2, NUL-free `CString`s in bson 3).
#[cfg(test)]
pub(crate) fn regex(pattern: &str, options: &str) -> crate::bson::Regex {
    #[cfg(feature = "bson-3")]
    let part = |text: &str| crate::bson::raw::CString::try_from(text).expect("no NUL byte");
    #[cfg(not(feature = "bson-3"))]
    let part = String::from;
    crate::bson::Regex {
        pattern: part(pattern),
        options: part(options),
    }
}
