//! Pages: the children of one page with their cursors, where the page stands in the walk, and
//! its serde form.

use serde::de;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Cursor;
// Only the docs link to it.
#[cfg(doc)]
use super::PageRequest;

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

    use crate::bson::Bson;

    fn cursor() -> Cursor {
        Cursor {
            field: "recent_reviews".into(),
            parent: Bson::Int32(7),
            position: vec![Bson::String("a/b+c".into()), Bson::Int64(-3)],
        }
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
}
