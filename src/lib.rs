//! The MongoDB Subset Pattern as a derive.
#![warn(missing_docs)]

pub use subset_derive::{Child, Subset};
pub use subset_runtime::*;

#[doc(hidden)]
pub use subset_runtime::__private;
