//! The download of the official MongoDB build, against a mirror on a loopback port
//! (`MongodLookup::download_mirror`, as `SUBSET_DOWNLOAD_MIRROR` sets it) that serves archives
//! laid out like fastdl.mongodb.org's, made here: download, checksum, extraction and start; a
//! damaged archive, a missing checksum, an archive without `bin/mongod` and an unreachable
//! mirror are refused with typed errors and leave nothing in the cache.
//!
//! The versions are made up (99.x), so that nothing here can be taken for a real cache entry, and
//! every test has a cache directory of its own. Settings are passed in a `MongodLookup`, not the
//! process environment, which every test thread shares.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongodb::bson::doc;
use sha2::{Digest, Sha256};
use subset_testkit::{skip, MongoServer, MongodLookup, TestkitError, Topology};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A directory under the system temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "subset-official-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A static file server on a loopback port: `GET /<path>` answers the file `<path>` from
/// memory, or 404. It records the paths asked for, and stops when dropped.
struct Mirror {
    url: String,
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    port: u16,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mirror {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let files = Arc::new(Mutex::new(HashMap::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (files, requests, stop) = (files.clone(), requests.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        // One request per connection (`Connection: close`): the kit makes two.
                        let _ = serve(stream, &files, &requests);
                    }
                }
            })
        };
        Self {
            url: format!("http://127.0.0.1:{port}"),
            files,
            requests,
            stop,
            port,
            thread: Some(thread),
        }
    }

    /// Serves `bytes` at `/<path>`.
    fn put(&self, path: &str, bytes: Vec<u8>) {
        self.files.lock().unwrap().insert(path.to_owned(), bytes);
    }

    /// The paths asked for so far.
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(
    stream: TcpStream,
    files: &Mutex<HashMap<String, Vec<u8>>>,
    requests: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The headers, up to the empty line.
    let mut line = String::new();
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    let path = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .trim_start_matches('/')
        .to_owned();
    requests.lock().unwrap().push(path.clone());
    let body = files.lock().unwrap().get(&path).cloned();
    let mut out = std::io::BufWriter::new(stream);
    match body {
        Some(body) => {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/gzip\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            )?;
            out.write_all(&body)?;
        }
        None => write!(
            out,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?,
    }
    out.flush()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A `.tgz` laid out like an official build: `<stem>/` holding a README and a licence, and
/// `<stem>/bin/` holding `mongos` and, when given, `mongod`. Stored, not compressed: compressing
/// mongod (141 MB) takes a debug build 17 s, and how the gzip stream is made does not matter to
/// the reader.
fn official_archive(stem: &str, mongod: Option<&[u8]>) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::none());
    let mut tar = tar::Builder::new(gz);
    let mut add = |path: &str, mode: u32, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.append_data(&mut header, format!("{stem}/{path}"), bytes)
            .unwrap();
    };
    add("README", 0o644, b"MongoDB\n");
    add(
        "LICENSE-Community.txt",
        0o644,
        b"Server Side Public License\n",
    );
    add("bin/mongos", 0o755, b"#!/bin/sh\nexit 1\n");
    if let Some(mongod) = mongod {
        add("bin/mongod", 0o755, mongod);
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// The archive's path on the mirror and its name, from the URL the kit will download.
fn archive_path(lookup: &MongodLookup, mirror: &Mirror) -> (String, String) {
    let url = lookup.download_url().unwrap();
    let path = url
        .strip_prefix(&format!("{}/", mirror.url))
        .unwrap_or_else(|| panic!("{url} is not on the mirror {}", mirror.url))
        .to_owned();
    let name = path.strip_prefix("linux/").unwrap().to_owned();
    (path, name)
}

/// Publishes `archive` at `path` with its `.sha256`, written as `sha256sum` writes it.
fn publish(mirror: &Mirror, path: &str, name: &str, archive: Vec<u8>) -> String {
    let hash = sha256_hex(&archive);
    mirror.put(
        &format!("{path}.sha256"),
        format!("{hash}  {name}\n").into_bytes(),
    );
    mirror.put(path, archive);
    hash
}

/// The names in `dir`, sorted.
fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The lookup of the tests of failures: a fixed distribution, so that they do not depend on
/// this machine's (the first test uses this machine's).
fn lookup(mirror: &Mirror, cache: &Path, version: &str) -> MongodLookup {
    MongodLookup::new()
        .version(version)
        .distro("debian12")
        .download_mirror(&mirror.url)
        .cache_dir(cache)
}

#[tokio::test]
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    ignore = "official builds are downloaded for x86-64 and ARM64 Linux only"
)]
async fn an_official_archive_is_downloaded_verified_unpacked_and_started() -> TestResult {
    if std::env::var_os("MONGODB_URI").is_some_and(|uri| !uri.is_empty()) {
        skip("MONGODB_URI is set: this test packs the kit's own mongod and starts it");
        return Ok(());
    }
    // The kit's own mongod (found or downloaded as for any test), packed as version 99.0.0.
    let real = subset_testkit::locate_mongod().await?;
    let real_bytes = std::fs::read(&real)?;
    let mirror = Mirror::start();
    let dir = TempDir::new("start");
    let cache = dir.0.join("cache");
    let lookup = MongodLookup::new()
        .version("99.0.0")
        .download_mirror(&mirror.url)
        .cache_dir(&cache);
    let (path, name) = archive_path(&lookup, &mirror);
    let stem = name.strip_suffix(".tgz").unwrap();
    assert!(
        stem.starts_with(&format!("mongodb-linux-{}-", std::env::consts::ARCH))
            && stem.ends_with("-99.0.0"),
        "{stem}"
    );
    let packed = Instant::now();
    publish(
        &mirror,
        &path,
        &name,
        official_archive(stem, Some(&real_bytes)),
    );
    eprintln!("packed {} in {:.2?}", real.display(), packed.elapsed());

    let downloaded = Instant::now();
    let binary = lookup.locate().await?;
    eprintln!(
        "downloaded, verified and unpacked in {:.2?}",
        downloaded.elapsed()
    );
    assert_eq!(binary, cache.join("mongodb-99.0.0").join("mongod"));
    assert!(std::fs::read(&binary)? == real_bytes, "the binary is whole");
    assert_eq!(
        mirror.requests(),
        [format!("{path}.sha256"), path.clone()],
        "the checksum first, then the archive"
    );
    assert_eq!(list(&cache), ["mongodb-99.0.0", "mongodb-99.0.0.lock"]);
    assert_eq!(list(&cache.join("mongodb-99.0.0")), ["mongod"]);

    // It runs: the kit's own start path, with this lookup, answers a ping.
    let server = MongoServer::start_with(Topology::Standalone, &lookup).await?;
    let reply = server
        .client()
        .await?
        .database("admin")
        .run_command(doc! { "ping": 1 })
        .await?;
    assert_eq!(reply.get_f64("ok").ok(), Some(1.0), "{reply:?}");
    drop(server);
    // Cached: no second download.
    assert_eq!(mirror.requests().len(), 2);
    Ok(())
}

#[tokio::test]
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    ignore = "official builds are downloaded for x86-64 and ARM64 Linux only"
)]
async fn a_damaged_archive_is_refused_and_nothing_is_installed() -> TestResult {
    let mirror = Mirror::start();
    let dir = TempDir::new("damaged");
    let cache = dir.0.join("cache");
    let lookup = lookup(&mirror, &cache, "99.0.1");
    let url = lookup.download_url()?;
    let (path, name) = archive_path(&lookup, &mirror);
    let stem = name.strip_suffix(".tgz").unwrap();
    let archive = official_archive(stem, Some(b"#!/bin/sh\necho mongod\n"));
    let published = publish(&mirror, &path, &name, archive.clone());
    // One bit flipped on the way.
    let mut damaged = archive;
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x01;
    let actual_hash = sha256_hex(&damaged);
    mirror.put(&path, damaged);

    let error = lookup.locate().await.unwrap_err();
    let TestkitError::ChecksumMismatch {
        url: named,
        expected,
        actual,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(*named, url);
    assert_eq!(*expected, published);
    assert_eq!(*actual, actual_hash);
    let message = error.to_string();
    for part in [&url, &published, &actual_hash, "SUBSET_DOWNLOAD_MIRROR"] {
        assert!(message.contains(part), "{message}");
    }
    // Nothing but the lock file: no version directory, no scratch directory, no marker.
    assert_eq!(list(&cache), ["mongodb-99.0.1.lock"]);
    Ok(())
}

#[tokio::test]
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    ignore = "official builds are downloaded for x86-64 and ARM64 Linux only"
)]
async fn a_missing_checksum_is_an_error_and_the_archive_is_not_fetched() -> TestResult {
    let mirror = Mirror::start();
    let dir = TempDir::new("no-checksum");
    let cache = dir.0.join("cache");
    let lookup = lookup(&mirror, &cache, "99.0.2");
    let url = lookup.download_url()?;
    let (path, name) = archive_path(&lookup, &mirror);
    let stem = name.strip_suffix(".tgz").unwrap();
    mirror.put(&path, official_archive(stem, Some(b"#!/bin/sh\n")));

    let error = lookup.locate().await.unwrap_err();
    assert!(
        matches!(&error, TestkitError::Http { url: u, status: 404 } if *u == format!("{url}.sha256")),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&format!("{url}.sha256")),
        "{error}"
    );
    assert_eq!(mirror.requests(), [format!("{path}.sha256")]);
    assert_eq!(list(&cache), ["mongodb-99.0.2.lock"]);

    // A checksum file that holds no hash is refused too.
    mirror.put(&format!("{path}.sha256"), b"<html>Not here</html>".to_vec());
    let error = lookup.locate().await.unwrap_err();
    assert!(
        matches!(&error, TestkitError::BadChecksumFile { start, .. } if start.contains("<html>")),
        "{error:?}"
    );
    assert_eq!(list(&cache), ["mongodb-99.0.2.lock"]);
    Ok(())
}

#[tokio::test]
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    ignore = "official builds are downloaded for x86-64 and ARM64 Linux only"
)]
async fn an_archive_without_bin_mongod_is_refused() -> TestResult {
    let mirror = Mirror::start();
    let dir = TempDir::new("no-mongod");
    let cache = dir.0.join("cache");
    let lookup = lookup(&mirror, &cache, "99.0.3");
    let url = lookup.download_url()?;
    let (path, name) = archive_path(&lookup, &mirror);
    let stem = name.strip_suffix(".tgz").unwrap();
    publish(&mirror, &path, &name, official_archive(stem, None));

    let error = lookup.locate().await.unwrap_err();
    assert!(
        matches!(&error, TestkitError::NoMongodInArchive { url: u, member }
            if *u == url && *member == format!("{stem}/bin/mongod")),
        "{error:?}"
    );
    assert_eq!(list(&cache), ["mongodb-99.0.3.lock"]);
    Ok(())
}

#[tokio::test]
#[cfg_attr(
    not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )),
    ignore = "official builds are downloaded for x86-64 and ARM64 Linux only"
)]
async fn an_unreachable_mirror_fails_at_once_naming_the_url() -> TestResult {
    let dir = TempDir::new("unreachable");
    let cache = dir.0.join("cache");
    // A port that was free a moment ago: the connection is refused.
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let lookup = MongodLookup::new()
        .version("99.0.4")
        .distro("debian12")
        .download_mirror(format!("http://127.0.0.1:{port}/"))
        .cache_dir(&cache);
    let url = lookup.download_url()?;
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{port}/linux/")),
        "{url}"
    );
    let started = Instant::now();
    let error = lookup.locate().await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&error, TestkitError::Unreachable { url: u, .. } if *u == format!("{url}.sha256")),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("SUBSET_DOWNLOAD_MIRROR"), "{message}");
    assert!(took < Duration::from_secs(5), "took {took:.2?}");
    // A version asked for does not fall back, so there is no failure to remember.
    assert_eq!(list(&cache), ["mongodb-99.0.4.lock"]);
    Ok(())
}
