//! Page requests, pages and the opaque keyset cursor that links them.
//!
//! | file | holds |
//! |---|---|
//! | `token.rs` | the [`Cursor`] and its URL-safe token, with serde as that token |
//! | `check.rs` | a cursor checked against the parent and field it is used on |
//! | `request.rs` | [`PageRequest`]: a size, a direction, a starting cursor |
//! | `page.rs` | [`Page`]: children, their cursors and the walk's two ends, with serde |

mod check;
mod page;
mod request;
mod token;

pub use page::Page;
pub(crate) use request::Anchor;
pub use request::{PageRequest, MAX_PAGE_SIZE};
pub use token::Cursor;
