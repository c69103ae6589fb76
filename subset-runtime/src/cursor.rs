//! Page requests, pages and opaque keyset cursors.
/// A position after which the next page starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {}
/// What page to read.
#[derive(Debug, Clone)]
pub struct PageRequest {}
/// One page.
#[derive(Debug, Clone)]
pub struct Page<C> {
    /// Items.
    pub items: Vec<C>,
    /// Next.
    pub next: Option<Cursor>,
}
