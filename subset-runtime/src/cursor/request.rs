//! Page requests: the size of a page, the way it reads and the cursor it starts from.

use super::Cursor;
// Only the docs link to it.
#[cfg(doc)]
use super::Page;

/// The largest page [`crate::Children::page`] serves.
pub const MAX_PAGE_SIZE: u32 = 10_000;

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
