#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub use subset_derive::{Child, Subset};
// Everything public of the runtime, the derives' hidden module included.
pub use subset_runtime::*;

// The `subset-testkit` crate, whose own docs render as this module's.
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
#[doc(inline)]
pub use subset_testkit as testkit;

// The guide: one page per module, each a Markdown file of `docs/guide/` (so that docs.rs shows
// it and doc tests compile its examples). The modules hold no items.
#[doc = include_str!("../docs/guide/README.md")]
pub mod guide {
    #[doc = include_str!("../docs/guide/pagination.md")]
    pub mod pagination {}
    #[doc = include_str!("../docs/guide/views.md")]
    pub mod views {}
    #[doc = include_str!("../docs/guide/mutations.md")]
    pub mod mutations {}
    #[doc = include_str!("../docs/guide/model-changes.md")]
    pub mod model_changes {}
    #[doc = include_str!("../docs/guide/bookkeeping.md")]
    pub mod bookkeeping {}
    #[doc = include_str!("../docs/guide/consistency.md")]
    pub mod consistency {}
    #[doc = include_str!("../docs/guide/transactions.md")]
    pub mod transactions {}
    #[doc = include_str!("../docs/guide/repair.md")]
    pub mod repair {}
    #[doc = include_str!("../docs/guide/schema.md")]
    pub mod schema {}
    #[doc = include_str!("../docs/guide/sharding.md")]
    pub mod sharding {}
    #[doc = include_str!("../docs/guide/errors.md")]
    pub mod errors {}
    #[doc = include_str!("../docs/guide/checks.md")]
    pub mod checks {}
    #[doc = include_str!("../docs/guide/examples.md")]
    pub mod examples {}
    #[doc = include_str!("../docs/guide/bson.md")]
    pub mod bson {}
    #[doc = include_str!("../docs/guide/cli.md")]
    pub mod cli {}
    #[doc = include_str!("../docs/guide/serde.md")]
    pub mod serde {}
}
