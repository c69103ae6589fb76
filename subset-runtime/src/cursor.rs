//! Page requests, pages and the opaque keyset cursor that links them.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bson::{doc, Bson, Document};

use crate::error::{Error, Result};

/// The largest page [`crate::Subset::page`] serves.
pub const MAX_PAGE_SIZE: u32 = 10_000;

/// Layout version of encoded cursors, so that a future layout can reject old tokens cleanly.
const VERSION: i32 = 1;

/// Where the next page starts: the position (sort-key values and `_id`) of the last child served,
/// for one parent and one subset field.
///
/// Cursors are opaque to users. [`Cursor::encode`] makes a URL-safe token for web APIs and
/// [`Cursor::decode`] (or [`str::parse`]) reads it back. Tokens are not signed: a client can forge a
/// position, but only within the parent and field it already pages through, which both are checked
/// on use.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    pub(crate) field: String,
    pub(crate) parent: Bson,
    pub(crate) position: Vec<Bson>,
}

impl Cursor {
    /// The token for this cursor: base64url (no padding) over a small BSON document.
    pub fn encode(&self) -> String {
        let token = doc! {
            "v": VERSION,
            "f": &self.field,
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
        if token.get_i32("v") != Ok(VERSION) {
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
            field,
            parent,
            position,
        })
    }

    /// Checks that this cursor was made for `parent`'s `field`, with `keys` sort values.
    pub(crate) fn check(&self, field: &str, parent: &Bson, keys: usize) -> Result<&[Bson]> {
        let reason = if self.field != field {
            format!("it pages `{}`, not `{field}`", self.field)
        } else if &self.parent != parent {
            format!("it was made for parent {}, not {parent}", self.parent)
        } else if self.position.len() != keys {
            format!(
                "it holds {} sort values where `{field}` sorts by {keys}",
                self.position.len()
            )
        } else {
            return Ok(&self.position);
        };
        Err(Error::InvalidCursor { reason })
    }
}

/// The BSON types a sort key can hold (see `SortableField`).
fn is_scalar(v: &Bson) -> bool {
    matches!(
        v,
        Bson::Double(_)
            | Bson::String(_)
            | Bson::Boolean(_)
            | Bson::Int32(_)
            | Bson::Int64(_)
            | Bson::DateTime(_)
            | Bson::ObjectId(_)
            | Bson::Decimal128(_)
            | Bson::Timestamp(_)
            | Bson::Binary(_)
    )
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

/// Which page to read: a size, and the cursor of the previous page (none for the first).
#[derive(Debug, Clone, PartialEq)]
pub struct PageRequest {
    pub(crate) size: u32,
    pub(crate) after: Option<Cursor>,
}

impl PageRequest {
    /// The first page, of `size` children.
    pub fn first(size: u32) -> Self {
        PageRequest { size, after: None }
    }

    /// The page of `size` children after `cursor` (a previous page's [`Page::next`]).
    pub fn after(cursor: Cursor, size: u32) -> Self {
        PageRequest {
            size,
            after: Some(cursor),
        }
    }

    /// The page size.
    pub fn size(&self) -> u32 {
        self.size
    }
}

/// One page of children, in the subset's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<C> {
    /// The children on this page.
    pub items: Vec<C>,
    /// The cursor of the next page, or `None` when this page is the last.
    pub next: Option<Cursor>,
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
    fn every_single_byte_flip_is_rejected_or_decodes_without_panic() {
        let token = cursor().encode();
        let bytes = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = Cursor::decode(&URL_SAFE_NO_PAD.encode(b));
        }
    }

    #[test]
    fn check_names_the_mismatch() {
        let c = cursor();
        assert!(c.check("recent_reviews", &Bson::Int32(7), 2).is_ok());
        let err = c.check("questions", &Bson::Int32(7), 2).unwrap_err();
        assert!(err.to_string().contains("questions"), "{err}");
        let err = c.check("recent_reviews", &Bson::Int32(8), 2).unwrap_err();
        assert!(err.to_string().contains("parent"), "{err}");
        assert!(c.check("recent_reviews", &Bson::Int32(7), 3).is_err());
    }
}
