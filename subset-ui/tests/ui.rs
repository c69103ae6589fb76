//! Compile-fail cases for the derives, one misuse per file in `tests/ui/`. (Valid uses are plain
//! tests in `tests/derive/`: with no pass case, trybuild type-checks its project instead of
//! building it.)
//!
//! The snapshots hold rustc's human-readable output, which moves a span inside another crate's
//! macro to the user's code; tools that read `--message-format=json` (rust-analyzer, IDEs) take
//! the primary span as it is. So the cases are checked a second time as JSON: every error's
//! primary span must be in the case's own file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

#[test]
fn ui() {
    // Dropping the test cases runs them (and panics on a mismatch).
    {
        let t = trybuild::TestCases::new();
        t.compile_fail("tests/ui/*.rs");
    }
    primary_spans_in_case_files();
}

/// Checks the project trybuild generated (one `[[bin]]` per case) again, as trybuild itself
/// does, with the same flags, features and target directory so that no dependency is rebuilt,
/// and asserts that every case fails with errors whose primary spans are all in the case's file.
fn primary_spans_in_case_files() {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory holds CARGO_TARGET_TMPDIR")
        .join("tests")
        .join("trybuild");
    let project = target_dir.join(env!("CARGO_PKG_NAME"));
    let output = trybuild_check(&project, &target_dir);
    let stdout = String::from_utf8_lossy(&output.stdout);

    let mut errors: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut misplaced = Vec::new();
    for line in stdout.lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-message" || message["message"]["level"] != "error" {
            continue;
        }
        let case = canonical(Path::new(
            message["target"]["src_path"].as_str().unwrap_or_default(),
        ));
        *errors.entry(case.clone()).or_default() += 1;
        let primary: Vec<PathBuf> = message["message"]["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|span| span["is_primary"] == true)
            .map(|span| project.join(span["file_name"].as_str().unwrap_or_default()))
            .collect();
        if primary.is_empty() || primary.iter().any(|file| canonical(file) != case) {
            misplaced.push(format!(
                "{}: {:?} has its primary span in {primary:?}",
                case.display(),
                message["message"]["message"].as_str().unwrap_or_default(),
            ));
        }
    }

    // Every case failed, so the spans of all of them were seen.
    let cases = case_files();
    let silent: Vec<_> = cases
        .iter()
        .filter(|case| !errors.contains_key(*case))
        .collect();
    assert!(
        silent.is_empty(),
        "no error in the JSON output for {silent:#?}\ncargo said:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        misplaced.is_empty(),
        "errors whose primary span is not in the case's file:\n{}",
        misplaced.join("\n")
    );
}

/// `cargo check --bins --keep-going --message-format=json` in trybuild's project, invoked as
/// trybuild invokes it (its `build_all_tests`).
fn trybuild_check(project: &Path, target_dir: &Path) -> std::process::Output {
    let rustflags =
        r#"["--cfg", "trybuild", "--verbose", "-A", "dead_code", "--diagnostic-width=140"]"#;
    let host = host_triple();
    let features: Vec<&str> = [
        ("bson-2", cfg!(feature = "bson-2")),
        ("bson-3", cfg!(feature = "bson-3")),
        ("default", cfg!(feature = "default")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(project)
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_INCREMENTAL", "0")
        .env_remove("RUSTFLAGS")
        .arg("--offline")
        .arg(format!("--config=build.rustflags={rustflags}"))
        .arg(format!("--config=target.{host}.rustflags={rustflags}"))
        .args([
            "check",
            "--target",
            &host,
            "--bins",
            "--no-default-features",
        ])
        .args(["--features", &features.join(",")])
        .args([
            "--quiet",
            "--color=never",
            "--message-format=json",
            "--keep-going",
        ])
        .output()
        .expect("cargo runs")
}

/// The host's target triple, which trybuild passes as `--target` (and names its output
/// directory by).
fn host_triple() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(rustc).arg("-vV").output().expect("rustc runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}

/// The compile-fail cases, as trybuild names them in its project.
fn case_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("ui");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/ui is readable")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .map(|path| canonical(&path))
        .collect();
    cases.sort();
    cases
}

/// `path` with its links and `..` resolved, so that paths cargo and rustc write compare.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}
