//! Skipping a test where the test output shows it.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::notice::notice;

/// How many tests of this process were skipped so far.
static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// Reports that the calling test cannot run, and why; the test returns right after.
///
/// The test harness captures `eprintln!` of a test that passes, so a test that prints a reason and
/// returns early reads `ok` with nothing else to see. This writes past the capture, straight to
/// the process's stderr, so that a plain `cargo test` shows among the results:
///
/// ```text
/// subset-testkit: SKIPPED crash_test (1 in this process): MONGODB_URI is set: this test kills mongod
/// test crash_test ... ok
/// ```
///
/// Use it for conditions known only at run time (a server at `MONGODB_URI`, a server that turns
/// out not to support transactions); for conditions known when compiling, use
/// `#[ignore = "reason"]` or `#[cfg_attr(…, ignore = "reason")]`, which the harness counts.
///
/// ```no_run
/// # fn run_the_test() {}
/// if std::env::var_os("MONGODB_URI").is_some() {
///     return subset_testkit::skip("MONGODB_URI is set: this test kills mongod, so it needs its own");
/// }
/// run_the_test();
/// ```
///
/// # Panics
///
/// When the environment variable `SUBSET_NO_SKIP` is set and not empty: a run that must run
/// every test (CI with no `MONGODB_URI`) fails instead of skipping.
pub fn skip(reason: &str) {
    let current = std::thread::current();
    // The harness names each test's thread after the test.
    let test = current
        .name()
        .filter(|name| *name != "main")
        .unwrap_or("a test");
    if std::env::var_os("SUBSET_NO_SKIP").is_some_and(|value| !value.is_empty()) {
        panic!("{test} would be skipped, and SUBSET_NO_SKIP is set: {reason}");
    }
    let n = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    notice(&format!("SKIPPED {test} ({n} in this process): {reason}"));
    tracing::warn!(test, reason, "test skipped");
}
