//! Valid uses of the derives: each module compiles and asserts what the derive generated (its
//! descriptors, its serde names). The compile-fail cases are in `subset-ui/tests/ui/`; these are
//! plain tests rather than trybuild pass cases so that trybuild only has to type-check its
//! project.

mod generics;
mod multi_key_sort;
mod other_derives;
mod parent_key;
mod previews;
mod rename_all_cases;
mod renames;
mod serde_attrs;
mod single_subset;
mod sort_skip_deserializing;
mod sums;
mod two_subsets;
mod views;
