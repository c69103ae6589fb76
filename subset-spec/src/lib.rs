//! Implementation detail of the `subset` crate: the rules of a subset description, shared by the
//! derive (`subset-derive`, at compile time, on Rust field names) and the runtime's
//! `SpecBuilder` (at run time, on BSON field names).
//!
//! Both read the same sort grammar, apply the same name rules and accept the same `keep`, and
//! both show the same message for the same mistake: each error's `Display` is that message.
//! Nothing in this crate is a stable API of its own; use `subset`.
//!
//! - [`parse_sort`]: `"field asc|desc[, field asc|desc …]"`, every problem with the byte range
//!   of the word at fault;
//! - [`check_collection`], [`check_field`], [`check_key`]: the names MongoDB rejects or the
//!   engine cannot use;
//! - [`parse_sums`]: `"parent_field = child_field[, …]"`, the running sums;
//! - [`parse_filter`]: `"field"` or `"!field"`, a filtered view's `bool` child field;
//! - [`check_keep`], [`MIN_KEEP`], [`MAX_KEEP`]: how many children may stay embedded;
//! - [`closest`], [`is_better`], [`is_close`], [`edit_distance`]: the name a typo most likely
//!   meant, for suggestions.

#![warn(missing_docs)]

mod filter;
mod keep;
mod name;
mod similar;
mod sort;
mod sum;

pub use filter::{parse_filter, FilterError, ParsedFilter};
pub use keep::{check_keep, KeepError, KEEP_RULE, MAX_KEEP, MIN_KEEP};
pub use name::{check_collection, check_field, check_key, NameError, NameProblem, NameRole};
pub use similar::{closest, edit_distance, is_better, is_close, MAX_MEASURED};
pub use sort::{parse_sort, Direction, ParsedSort, SortError, SortKey};
pub use sum::{parse_sums, SumError, SumPair};
