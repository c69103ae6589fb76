//! Page requests, pages and the opaque keyset cursor that links them.

use std::fmt;
use std::str::FromStr;

use crate::bson::{doc, Bson, Document};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::model::SubsetSpec;
use crate::order;
use crate::values::{self, is_scalar};

/// The largest page [`crate::Subset::page`] serves.
pub const MAX_PAGE_SIZE: u32 = 10_000;

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
    /// position is one the key can hold ([`crate::spec::SortValues`]): a position no stored child can
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

/// Which page to read: a size, a direction, and the cursor the page starts from, if any.
///
/// The four requests of a Relay connection:
///
/// | request | the page |
/// |---|---|
/// | [`PageRequest::first(n)`](PageRequest::first) | the first `n` children |
/// | [`PageRequest::after(cursor, n)`](PageRequest::after) | the `n` children after `cursor` |
/// | [`PageRequest::last(n)`](PageRequest::last) | the last `n` children |
/// | [`PageRequest::before(cursor, n)`](PageRequest::before) | the `n` children before `cursor` |
///
/// Every page comes back in the subset's order, whichever way it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct PageRequest {
    pub(crate) size: u32,
    pub(crate) anchor: Anchor,
}

/// Where a page request starts, and which way it reads.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Anchor {
    /// Forward from the first child.
    Start,
    /// Forward from just after this position.
    After(Cursor),
    /// Backward from the last child.
    End,
    /// Backward from just before this position.
    Before(Cursor),
}

impl PageRequest {
    /// The first page, of `size` children.
    pub fn first(size: u32) -> Self {
        PageRequest {
            size,
            anchor: Anchor::Start,
        }
    }

    /// The page of `size` children after `cursor` (a page's [`Page::next`], or any cursor of
    /// [`Page::cursors`]).
    pub fn after(cursor: Cursor, size: u32) -> Self {
        PageRequest {
            size,
            anchor: Anchor::After(cursor),
        }
    }

    /// The last page: the last `size` children of the whole order, or all of them when there
    /// are fewer.
    pub fn last(size: u32) -> Self {
        PageRequest {
            size,
            anchor: Anchor::End,
        }
    }

    /// The page of `size` children before `cursor` (a page's [`Page::previous`], or any cursor
    /// of [`Page::cursors`]): the `size` children closest to it, in the subset's order.
    pub fn before(cursor: Cursor, size: u32) -> Self {
        PageRequest {
            size,
            anchor: Anchor::Before(cursor),
        }
    }

    /// The page size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether this request reads backward ([`PageRequest::last`], [`PageRequest::before`]).
    pub fn is_backward(&self) -> bool {
        matches!(self.anchor, Anchor::End | Anchor::Before(_))
    }

    /// The cursor this request starts from: `after`'s or `before`'s.
    pub fn cursor(&self) -> Option<&Cursor> {
        match &self.anchor {
            Anchor::After(cursor) | Anchor::Before(cursor) => Some(cursor),
            Anchor::Start | Anchor::End => None,
        }
    }
}

/// One page of children, in the subset's order (for a backward page too), with a cursor for
/// each child and the cursors that continue the walk either way.
///
/// [`Page::has_next`] and [`Page::has_previous`] follow Relay's `hasNextPage` and
/// `hasPreviousPage`. The direction a page was read in is exact: the page reads one child past
/// its end, so `has_next` of a forward page and `has_previous` of a backward page say whether
/// more children follow (when the page was read). The other direction costs no query: it is
/// `true` when the page was asked for from a cursor and holds children (the cursor's own child,
/// on the other side, was there when the cursor was made), and `false` for a page from either
/// end ([`PageRequest::first`] / [`PageRequest::last`]). An empty page has neither: it has no
/// cursor to continue from.
///
/// The first page read from the embedded subset knows whether more follow from the subset and
/// its count; without a `count` field, a page exactly as large as a full subset cannot tell,
/// and says `has_next` (the next page may be empty).
///
/// With serde, a page is `{"items": [...], "cursors": [...], "has_previous": …, "has_next": …}`,
/// each cursor its token.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<C> {
    /// The children on this page, in the subset's order. The cursors stay with their index:
    /// to turn the children into other values, use [`Page::map`] rather than editing this.
    pub items: Vec<C>,
    /// The cursor of the next page, for [`PageRequest::after`]: the last child's, or `None`
    /// when no page follows ([`Page::has_next`]).
    pub next: Option<Cursor>,
    /// The cursor of the previous page, for [`PageRequest::before`]: the first child's, or
    /// `None` when no page comes before ([`Page::has_previous`]).
    pub previous: Option<Cursor>,
    /// One cursor per item, at the same index.
    pub(crate) cursors: Vec<Cursor>,
}

impl<C> Page<C> {
    /// A page of `items`, each at the position of the cursor at the same index of `cursors`,
    /// which must be as long.
    pub(crate) fn new(
        items: Vec<C>,
        cursors: Vec<Cursor>,
        has_previous: bool,
        has_next: bool,
    ) -> Self {
        let previous = cursors.first().filter(|_| has_previous).cloned();
        let next = cursors.last().filter(|_| has_next).cloned();
        Page {
            items,
            next,
            previous,
            cursors,
        }
    }

    /// Whether a page follows this one (Relay's `hasNextPage`; see [`Page`] for how exact).
    pub fn has_next(&self) -> bool {
        self.next.is_some()
    }

    /// Whether a page comes before this one (Relay's `hasPreviousPage`; see [`Page`] for how
    /// exact).
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// The cursor of each child, at the same index as [`Page::items`]: a page can continue
    /// after or before any child on it. This is the one way to reach them: `cursors().first()`
    /// and `cursors().last()` are Relay's `startCursor` and `endCursor`, and
    /// `cursors().iter().zip(&page.items)` its edges.
    pub fn cursors(&self) -> &[Cursor] {
        &self.cursors
    }

    /// The same page with each child turned into `f(child)` (an API's view of it, say),
    /// keeping the cursors and where the page stands.
    pub fn map<D>(self, f: impl FnMut(C) -> D) -> Page<D> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next: self.next,
            previous: self.previous,
            cursors: self.cursors,
        }
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

/// The serialized form of a [`Page`].
#[derive(Serialize)]
#[serde(rename = "Page")]
struct PageOut<'a, C> {
    items: &'a [C],
    cursors: &'a [Cursor],
    has_previous: bool,
    has_next: bool,
}

/// The deserialized form of a [`Page`], checked before it becomes one.
#[derive(Deserialize)]
#[serde(rename = "Page")]
struct PageIn<C> {
    items: Vec<C>,
    cursors: Vec<Cursor>,
    #[serde(default)]
    has_previous: bool,
    #[serde(default)]
    has_next: bool,
}

/// `{"items": [...], "cursors": [...], "has_previous": …, "has_next": …}`.
impl<C: Serialize> Serialize for Page<C> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        PageOut {
            items: &self.items,
            cursors: &self.cursors,
            has_previous: self.has_previous(),
            has_next: self.has_next(),
        }
        .serialize(serializer)
    }
}

/// Reads what [`Page`]'s `Serialize` writes; fails when the items and cursors are not as many,
/// or an empty page claims a page before or after it.
impl<'de, C: Deserialize<'de>> Deserialize<'de> for Page<C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let page = PageIn::<C>::deserialize(deserializer)?;
        if page.items.len() != page.cursors.len() {
            return Err(de::Error::custom(format!(
                "invalid page: {} items but {} cursors; a page holds one cursor per item",
                page.items.len(),
                page.cursors.len()
            )));
        }
        if page.items.is_empty() && (page.has_previous || page.has_next) {
            return Err(de::Error::custom(
                "invalid page: an empty page has no cursor, so no page before or after it",
            ));
        }
        Ok(Page::new(
            page.items,
            page.cursors,
            page.has_previous,
            page.has_next,
        ))
    }
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

    #[test]
    fn a_page_round_trips_and_its_cursors_are_checked() {
        let other = Cursor {
            position: vec![Bson::Int32(1)],
            ..cursor()
        };
        let page = Page::new(vec![10, 20], vec![cursor(), other.clone()], true, false);
        assert_eq!(page.previous.as_ref(), Some(&cursor()));
        assert_eq!(page.next, None);
        assert_eq!(page.cursors(), [cursor(), other.clone()]);
        let json = serde_json::to_value(&page).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "items": [10, 20],
                "cursors": [cursor().encode(), other.encode()],
                "has_previous": true,
                "has_next": false,
            })
        );
        assert_eq!(serde_json::from_value::<Page<i32>>(json).unwrap(), page);
        for (bad, said) in [
            (
                serde_json::json!({ "items": [1], "cursors": [] }),
                "1 items but 0 cursors",
            ),
            (
                serde_json::json!({ "items": [], "cursors": [], "has_next": true }),
                "an empty page has no cursor",
            ),
            (
                serde_json::json!({ "items": [1], "cursors": ["%"] }),
                "invalid page cursor",
            ),
        ] {
            let err = serde_json::from_value::<Page<i32>>(bad).unwrap_err();
            assert!(err.to_string().contains(said), "{err}");
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
        let untyped = crate::spec::SpecBuilder::new("recent", "reviews", "product_id")
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
