//! Page requests, pages and the opaque keyset cursor that links them.

use std::fmt;
use std::str::FromStr;

use crate::bson::{doc, Bson, Document};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::error::{Error, Result};
use crate::model::SubsetSpec;
use crate::order;
use crate::values::{self, is_scalar};

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
            field,
            parent,
            position,
        })
    }

    /// Checks that this cursor was made for `parent`'s subset `spec`, and that each value of its
    /// position is one the key can hold ([`crate::SortValues`]): a position no stored child can
    /// have is a forged cursor, refused here, before any query (a value of another type bracket
    /// would match no child, and the end of the walk would look for the children it missed).
    pub(crate) fn check(&self, spec: &SubsetSpec, parent: &Bson) -> Result<&[Bson]> {
        let field = spec.field;
        let keys = spec.order().count();
        let misfit = spec
            .order()
            .zip(&self.position)
            .find(|(key, value)| !key.values.admits(value));
        let reason = if self.field != field {
            format!("it pages `{}`, not `{field}`", self.field)
        } else if &self.parent != parent {
            format!("it was made for parent {}, not {parent}", self.parent)
        } else if self.position.len() != keys {
            format!(
                "it holds {} sort values where `{field}` sorts by {keys}",
                self.position.len()
            )
        } else if let Some((key, value)) = misfit {
            format!(
                "its `{}` is {}, where the children's `{}` is {}",
                key.field,
                values::describe(value),
                key.field,
                key.values
            )
        } else {
            return Ok(&self.position);
        };
        Err(Error::InvalidCursor { reason })
    }

    /// At the end of a walk over well-typed children: fails when this cursor's position is of
    /// other type brackets than `stored`, the position of a stored child of the same parent
    /// (keys missing or null in `stored` are not compared). Such a cursor was forged (a real one
    /// is the position of a child); for descriptors without Rust types, [`Cursor::check`] could
    /// not tell before the query.
    pub(crate) fn check_brackets(&self, spec: &SubsetSpec, stored: &[Bson]) -> Result<()> {
        let differs =
            spec.order()
                .zip(self.position.iter().zip(stored))
                .find(|(_, (mine, theirs))| {
                    // A missing or null stored value says nothing of the others.
                    let theirs = order::type_bracket(theirs);
                    theirs.is_some() && order::type_bracket(mine) != theirs
                });
        match differs {
            Some((key, (mine, theirs))) => Err(Error::InvalidCursor {
                reason: format!(
                    "its `{}` is {}, where the children's `{}` is {}",
                    key.field,
                    values::describe(mine),
                    key.field,
                    values::describe(theirs)
                ),
            }),
            None => Ok(()),
        }
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

    use crate::bson;
    use crate::model::TEST_SPEC as SPEC;

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

    fn position() -> Vec<Bson> {
        vec![
            Bson::Int32(3),
            Bson::DateTime(bson::DateTime::from_millis(1)),
            Bson::ObjectId(bson::oid::ObjectId::new()),
        ]
    }

    /// A cursor of `TEST_SPEC` for parent 7 with `position`.
    fn at(position: Vec<Bson>) -> Cursor {
        Cursor {
            field: "recent".into(),
            parent: Bson::Int32(7),
            position,
        }
    }

    #[test]
    fn check_names_the_mismatch() {
        let c = at(position());
        assert!(c.check(&SPEC, &Bson::Int32(7)).is_ok());
        let other = SubsetSpec {
            field: "questions",
            ..SPEC
        };
        let err = c.check(&other, &Bson::Int32(7)).unwrap_err();
        assert!(err.to_string().contains("questions"), "{err}");
        let err = c.check(&SPEC, &Bson::Int32(8)).unwrap_err();
        assert!(err.to_string().contains("parent"), "{err}");
        assert!(at(position()[..2].to_vec())
            .check(&SPEC, &Bson::Int32(7))
            .is_err());
    }

    #[test]
    fn check_refuses_values_the_keys_cannot_hold() {
        let with = |i: usize, value: Bson| {
            let mut p = position();
            p[i] = value;
            at(p)
        };
        for (i, value, said) in [
            (
                1,
                Bson::Int32(5),
                "its `date` is an int32, where the children's `date` is a date",
            ),
            (1, Bson::Double(f64::NAN), "a double (NaN)"),
            (1, Bson::String("2024".into()), "a string"),
            (1, Bson::Null, "null"),
            (0, Bson::Double(3.0), "`rating` is a double"),
            (
                0,
                Bson::Int64(1 << 40),
                "an int32 or int64 from -2147483648 to 2147483647",
            ),
            (
                2,
                Bson::Undefined,
                "its `_id` is undefined, where the children's `_id` is an ObjectId",
            ),
        ] {
            match with(i, value).check(&SPEC, &Bson::Int32(7)) {
                Err(Error::InvalidCursor { reason }) => assert!(reason.contains(said), "{reason}"),
                other => panic!("{said}: {other:?}"),
            }
        }
        // Run-time descriptors know no types: any scalar, and any `_id` but the unsortable.
        let untyped = crate::SpecBuilder::new("recent", "reviews", "product_id")
            .sort("rating asc, date desc")
            .build()
            .unwrap();
        assert!(with(1, Bson::Int32(5))
            .check(untyped, &Bson::Int32(7))
            .is_ok());
        let compound = with(2, Bson::Document(doc! { "a": 1 }));
        assert!(compound.check(untyped, &Bson::Int32(7)).is_ok());
        for bad in [
            Bson::Undefined,
            Bson::Null,
            Bson::MinKey,
            Bson::Array(vec![]),
        ] {
            let err = with(2, bad).check(untyped, &Bson::Int32(7)).unwrap_err();
            assert!(err.to_string().contains("`_id`"), "{err}");
        }
    }

    #[test]
    fn check_brackets_names_the_key_and_both_types() {
        let c = at(vec![Bson::Int32(3), Bson::Int32(5), Bson::Int32(1)]);
        let stored = [
            Bson::Int64(4),
            Bson::DateTime(bson::DateTime::from_millis(1)),
            Bson::Int32(2),
        ];
        let err = c.check_brackets(&SPEC, &stored).unwrap_err().to_string();
        assert!(
            err.contains("its `date` is an int32, where the children's `date` is a date"),
            "{err}"
        );
        let same = [Bson::Double(4.5), Bson::Int64(7), Bson::Int32(2)];
        assert!(c.check_brackets(&SPEC, &same).is_ok());
    }
}
