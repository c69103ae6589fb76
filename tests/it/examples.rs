//! Runs each example and checks its exit status and one line of its output. An example asserts
//! what it shows, so a run that ends non-zero is a claim of it found false.
//!
//! Cargo builds the examples (not runs them) in `cargo test` when their required feature is on:
//! `cargo test --features mongodb-subset/testkit`; `cargo test --test it` alone builds only this
//! test, so build the examples first. This test runs the binaries it finds next to its own
//! (`target/<profile>/examples/`), and fails when one is missing or older than its source.
//! Each example starts its own `mongod` unless `MONGODB_URI` names a server; they run one at a
//! time, so that latencies and lags they print are not each other's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One example at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the example `name`, asserts that it ended with success and printed a line starting
/// with `line`, and returns that line.
fn run(name: &str, line: &str) -> String {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // This test is `target/<profile>/deps/it-<hash>`; the examples are in
    // `target/<profile>/examples/`.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps");
    let binary: PathBuf = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "the example `{name}` is not built ({} is missing): the examples need the `testkit` \
         feature; build them with `cargo test --features mongodb-subset/testkit` (or `cargo \
         build --examples --features mongodb-subset/testkit` before `--test it`)",
        binary.display()
    );
    // `cargo test --test it` builds this test alone: an example edited since its last
    // build would run as it was.
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.rs"));
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    assert!(
        modified(&binary) >= modified(&source),
        "the example `{name}` was built before {} last changed: build it again with `cargo \
         build --examples --features mongodb-subset/testkit`",
        source.display()
    );
    let output = Command::new(&binary)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the example `{name}` failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    let found = stdout.lines().find(|l| l.trim_start().starts_with(line));
    match found {
        Some(found) => found.trim().to_owned(),
        None => panic!("the example `{name}` printed no line starting `{line}`:\n{stdout}"),
    }
}

#[test]
fn product_reviews() {
    run(
        "product_reviews",
        "more reviews: 1245 after the 5 previews, none twice, none missing",
    );
}

#[test]
fn delivery_shops() {
    run(
        "delivery_shops",
        "shop with 800 reviews (800 in `shop_reviews`",
    );
}

#[test]
fn social_feed() {
    let line = run(
        "social_feed",
        "thread: 320 comments counted, 320 acknowledged",
    );
    assert!(line.ends_with("the 10 latest embedded, no drift"), "{line}");
}

#[test]
fn watch_history() {
    run(
        "watch_history",
        "re-ranked in place: 9 videos, each once; 3 left to continue",
    );
}

#[test]
fn device_readings() {
    let line = run("device_readings", "every device exact:");
    assert!(
        line.ends_with("counted, summed and the latest 10 embedded"),
        "{line}"
    );
}

#[test]
fn account_ledger() {
    run(
        "account_ledger",
        "ledger exact: balances 57.65 and 42.35, total 100.00, reconcile found nothing to repair",
    );
}
