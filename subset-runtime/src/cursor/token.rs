//! The cursor and its token: what a cursor holds, and the URL-safe string it travels as
//! (`Display`/`FromStr`, and serde as that string).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::bson::{doc, Bson, Document};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::values::is_scalar;
// Only the docs link to it.
#[cfg(doc)]
use super::{Page, PageRequest};

/// Layout version of encoded cursors, so that a future layout can reject old tokens cleanly.
const VERSION: i32 = 1;

/// The position of one child (its sort-key values and `_id`) of one parent in one subset field:
/// where a page after it ([`PageRequest::after`]) or before it ([`PageRequest::before`])
/// starts. Every child on a [`Page`] has one.
///
/// Cursors are opaque to users. [`Cursor::encode`] makes a URL-safe token for web APIs and
/// [`Cursor::decode`] (or [`str::parse`]) reads it back; with serde, a cursor is that token. Tokens are not signed: a client can forge a
/// position, but only within the parent and field it already pages through, which both are checked
/// on use.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    /// Borrowed from the descriptor in the cursors a page makes (one per child, so none
    /// allocates its field's name); owned in one read from a token.
    pub(crate) field: Cow<'static, str>,
    pub(crate) parent: Bson,
    pub(crate) position: Vec<Bson>,
}

impl Cursor {
    /// The token for this cursor: base64url (no padding) over a small BSON document.
    pub fn encode(&self) -> String {
        let token = doc! {
            "v": VERSION,
            "f": &*self.field,
            "p": self.parent.clone(),
            "k": self.position.clone(),
        };
        let mut bytes = Vec::new();
        // Writing a document into a Vec only fails for a document over the BSON size limit,
        // which a cursor built from one child's sort keys cannot reach.
        if token.to_writer(&mut bytes).is_err() {
            bytes.clear();
        }
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Reads a token made by [`Cursor::encode`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCursor`] when the token is not base64url, not a cursor document, or of
    /// another layout version.
    pub fn decode(token: &str) -> Result<Cursor> {
        let invalid = |reason: &str| Error::InvalidCursor {
            reason: reason.to_owned(),
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim())
            .map_err(|_| invalid("the token is not base64url"))?;
        let mut token =
            Document::from_reader(bytes.as_slice()).map_err(|_| invalid("the token is corrupt"))?;
        if token.get_i32("v").ok() != Some(VERSION) {
            return Err(invalid("the token has an unknown version"));
        }
        let field = match token.remove("f") {
            Some(Bson::String(f)) if !f.is_empty() => f,
            _ => return Err(invalid("the token names no field")),
        };
        let parent = token
            .remove("p")
            .ok_or_else(|| invalid("the token names no parent"))?;
        let position = match token.remove("k") {
            Some(Bson::Array(k)) if !k.is_empty() => k,
            _ => return Err(invalid("the token holds no position")),
        };
        if token.len() != 1 {
            return Err(invalid("the token has unexpected fields"));
        }
        // Sort keys are scalars; only the last value, the `_id`, may be a document. A document
        // or array elsewhere is forged (and would sort among no real child).
        let (_, keys) = position.split_last().unwrap_or((&Bson::Null, &[]));
        if keys.iter().any(|v| !is_scalar(v)) {
            return Err(invalid("the token holds a sort value that is not a scalar"));
        }
        Ok(Cursor {
            field: Cow::Owned(field),
            parent,
            position,
        })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

impl FromStr for Cursor {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Cursor::decode(s)
    }
}

/// A cursor is its token: a string in JSON, a query string or a form.
impl Serialize for Cursor {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.encode())
    }
}

/// Reads a token made by [`Cursor::encode`]; a token [`Cursor::decode`] refuses fails with the
/// same words ("invalid page cursor: …").
impl<'de> Deserialize<'de> for Cursor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Token;

        impl Visitor<'_> for Token {
            type Value = Cursor;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a page cursor token")
            }

            fn visit_str<E: de::Error>(self, token: &str) -> std::result::Result<Cursor, E> {
                Cursor::decode(token).map_err(E::custom)
            }
        }

        deserializer.deserialize_str(Token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor() -> Cursor {
        Cursor {
            field: "recent_reviews".into(),
            parent: Bson::Int32(7),
            position: vec![Bson::String("a/b+c".into()), Bson::Int64(-3)],
        }
    }

    #[test]
    fn round_trips_through_a_url_safe_token() {
        let token = cursor().encode();
        assert!(token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(token.parse::<Cursor>().unwrap(), cursor());
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        for bad in ["", "!!!", "AAAA", &cursor().encode()[..10]] {
            assert!(
                matches!(Cursor::decode(bad), Err(Error::InvalidCursor { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_single_byte_flip_is_rejected_or_decodes_to_a_cursor_that_round_trips() {
        let token = cursor().encode();
        let bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            match Cursor::decode(&URL_SAFE_NO_PAD.encode(b)) {
                Err(Error::InvalidCursor { .. }) => {}
                Err(other) => panic!("byte {i}: {other:?}"),
                Ok(c) => assert_eq!(Cursor::decode(&c.encode()).unwrap(), c, "byte {i}"),
            }
        }
    }

    #[test]
    fn a_cursor_serializes_as_its_token_and_refuses_bad_ones_in_the_same_words() {
        let json = serde_json::to_string(&cursor()).unwrap();
        assert_eq!(json, format!("\"{}\"", cursor().encode()));
        assert_eq!(serde_json::from_str::<Cursor>(&json).unwrap(), cursor());
        let err = serde_json::from_str::<Cursor>("\"%%\"").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid page cursor: the token is not base64url"),
            "{err}"
        );
        assert!(serde_json::from_str::<Cursor>("7").is_err());
    }
}
