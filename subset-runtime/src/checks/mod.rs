//! What the derives check at compile time, and the types a field can have: the traits a sort
//! key, a count, a sum and a filter field must implement, and the hidden constant functions that
//! `#[derive(Subset)]` and `#[derive(Child)]` call (through the hidden module of the crate root).
//!
//! rustc says what it can: the derives check each field's type, in a function that is never
//! called, with a method of the trait it must implement, whose `on_unimplemented` message says
//! what to write. What only the other derive knows (a child's fields, and how serde stores them)
//! is read here, in constant evaluation: a child field is found by its Rust name in the child's
//! lists, and its type through its index there ([`FieldOf`]), so that a name that is none is
//! reported once, with the field most likely meant (a child type that names the parent's
//! parameters, which no constant can name, has its fields accessed by name: there it is rustc's
//! "no field" error). Each function returns the problem, and the generated code fails with it (by
//! `Option::expect`, whose `#[track_caller]` locates the failure at the derive's call, where
//! `panic!` would locate it in core's source), so that the error points at the attribute, in JSON
//! diagnostics too, and names nothing of this crate.
//!
//! | file | holds |
//! |---|---|
//! | `fields.rs` | the public traits that say which types a field may have in each role |
//! | `lookup.rs` | a child field found by name in constant evaluation, and what is wrong with it |
//! | `same_order.rs` | whether two views of the same children always sort them in one order |
//! | `probes.rs` | questions about a type that may lack the trait they need, with no second error |

mod fields;
mod lookup;
mod probes;
mod same_order;

pub use fields::{
    nothing, sort_values, CountField, FilterField, PreviewField, SortableField, SumField,
};
pub use lookup::{
    bson_name, field_found, field_index, field_of, field_problem, is_key, key_found, key_index,
    preview_problem, preview_unknown, stores, ChildField, Message, Role, Site,
};
pub use probes::{
    field_at, field_type, sort_values_at, ChildIds, Described, DescribedFallback, FieldOf, FullOf,
    IdFallback, NotAChild, Numbers, NumbersFallback, Probe, SameType, SameTypeFallback, TypeOf,
};
pub use same_order::{distinct_orders, same_order};
