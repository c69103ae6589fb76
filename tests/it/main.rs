//! The behaviour tests: one binary (one link of the driver, one shared `mongod` per topology,
//! started by the first test that needs it), a module per feature, each test on a database of
//! its own. The tests that kill, fail over or fault the server are in `tests/chaos/`.

#[path = "../common/mod.rs"]
mod common;

mod adopt;
mod auth;
mod bad_input;
mod bookkeeping;
mod concerns;
mod concurrency;
mod examples;
mod follow;
mod forged_cursors;
mod lifecycle;
mod malformed;
mod model;
mod model_change;
mod mutations;
mod overflow;
mod pages_both_ways;
mod pagination;
mod parent_key;
mod previews;
mod push;
mod races;
mod reranks;
mod round_trips;
mod service;
mod sessions;
mod spans;
mod status;
mod store;
mod sums;
mod targeting;
mod too_large;
mod views;

/// The server's `failCommand` fail point is one per server, and setting it (or turning it off)
/// replaces another test's: the tests that set it take turns.
pub static FAIL_POINT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Tests that write documents of many MiB take turns (after [`FAIL_POINT`], when they take
/// both): the test server's cache is 256 MiB, and several such writes at once can fill it
/// (`TransactionTooLargeForCache`, code 388).
pub static BIG_DOCUMENTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
