//! The download cache: `<cache>/mongodb-<version>/mongod`, the lock file that lets one process
//! download while the others wait, the scratch directories downloads are made in, and the marker
//! that remembers for 24 hours that the official download failed.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::TestkitError;
use crate::lookup::MongodLookup;
use crate::notice;
use crate::official::Source;

/// How long a failed official download is remembered, so that the test processes of a run on a
/// machine that cannot reach it fall back at once instead of each trying again.
pub(crate) const UNAVAILABLE_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// The name of every scratch directory starts with this.
pub(crate) const SCRATCH_PREFIX: &str = ".download-";

/// `<cache>/mongodb-<version>/mongod`.
pub(crate) fn cached_binary(cache: &Path, version: &str) -> PathBuf {
    cache.join(format!("mongodb-{version}")).join("mongod")
}

/// Why the official build of the version wanted cannot be had here, if that is known without
/// trying: there is none for this machine, or a download of the same URL failed less than 24
/// hours ago.
///
/// # Errors
///
/// A malformed setting.
pub(crate) fn official_unavailable(
    lookup: &MongodLookup,
    cache: &Path,
) -> Result<Option<String>, TestkitError> {
    match lookup.source() {
        Ok(source) => Ok(Marker::read(cache, &source).map(|marker| marker.to_string())),
        Err(error @ TestkitError::UnsupportedPlatform { .. }) => Ok(Some(error.to_string())),
        Err(error) => Err(error),
    }
}

/// `<cache>/mongodb-<version>.unavailable`: the official download of that version failed. It
/// holds the URL (a marker for another URL, e.g. before `SUBSET_DOWNLOAD_MIRROR` was set, does
/// not count) and the error; its age is its modification time.
#[derive(Debug)]
pub(crate) struct Marker {
    path: PathBuf,
    error: String,
    age: Duration,
}

impl Marker {
    pub(crate) fn path(cache: &Path, version: &str) -> PathBuf {
        cache.join(format!("mongodb-{version}.unavailable"))
    }

    /// The marker for `source`, if it is less than 24 hours old.
    pub(crate) fn read(cache: &Path, source: &Source) -> Option<Marker> {
        let path = Self::path(cache, &source.version);
        let text = std::fs::read_to_string(&path).ok()?;
        let (url, error) = text.split_once('\n')?;
        let age = std::fs::metadata(&path)
            .and_then(|meta| meta.modified())
            .ok()?
            .elapsed()
            .unwrap_or_default();
        (url == source.url && age < UNAVAILABLE_FOR).then(|| Marker {
            error: error.trim().to_owned(),
            age,
            path,
        })
    }

    /// Remembers that downloading `source` failed with `error`. Best effort: without the marker
    /// the next process only tries again.
    pub(crate) fn write(cache: &Path, source: &Source, error: &TestkitError) {
        let path = Self::path(cache, &source.version);
        if let Err(e) = std::fs::write(&path, format!("{}\n{error}\n", source.url)) {
            tracing::warn!(path = %path.display(), error = %e, "could not remember the failed download");
        }
    }
}

impl std::fmt::Display for Marker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} min ago; not retried for 24 h, or delete {} to retry now)",
            self.error,
            self.age.as_secs() / 60,
            self.path.display()
        )
    }
}

/// The exclusive lock on `<cache>/mongodb-<version>.lock`, held from the check for a cached
/// binary to its installation; released when dropped (or when the process dies). The file stays:
/// removing a lock file lets a third process lock a new file while a second still waits on the
/// old one.
pub(crate) struct CacheLock {
    _file: File,
    /// Whether another process held it first.
    pub(crate) waited: bool,
}

impl CacheLock {
    /// Locks the file of `version`, waiting for the process that holds it; the wait is told to
    /// `say` first, so that it does not look like a hang.
    pub(crate) fn acquire(
        cache: &Path,
        version: &str,
        say: &dyn Fn(&str),
    ) -> Result<Self, TestkitError> {
        let path = cache.join(format!("mongodb-{version}.lock"));
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
                say(&notice::waiting_for_lock(cache, &path));
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

/// Removes the scratch directories of downloads of `version` that were interrupted. Called with
/// that version's lock held, so no download of it is in progress (another version's may be).
pub(crate) fn remove_stale_downloads(cache: &Path, version: &str) {
    let prefix = format!("{SCRATCH_PREFIX}{version}-");
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let path = entry.path();
            if let Err(error) = std::fs::remove_dir_all(&path) {
                tracing::warn!(path = %path.display(), %error, "could not remove an interrupted download");
            }
        }
    }
}

/// A scratch directory inside the cache for a download of one version, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// `<cache>/.download-<version>-<pid>-<n>`.
    pub(crate) fn create(cache: &Path, version: &str) -> Result<Self, TestkitError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{SCRATCH_PREFIX}{version}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = cache.join(name);
        std::fs::create_dir(&path)
            .map_err(|e| TestkitError::io("create the download directory", &path, e))?;
        Ok(Self(path))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(path = %self.0.display(), %error, "could not remove the download directory");
        }
    }
}

/// Moves a downloaded `mongod` to `target` in the cache: executable, on disk, then renamed into
/// place (atomic, so that no process ever sees a half-written binary). Its directory is created
/// only now, so that a failed download leaves none.
pub(crate) fn install_binary(extracted: &Path, target: &Path) -> Result<(), TestkitError> {
    make_executable(extracted)?;
    // On disk before it is renamed into place: a crash must not leave a truncated binary there.
    File::open(extracted)
        .and_then(|file| file.sync_all())
        .map_err(|e| TestkitError::io("flush", extracted, e))?;
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| TestkitError::io("create the cache directory", dir, e))?;
    }
    std::fs::rename(extracted, target)
        .map_err(|e| TestkitError::io("move the downloaded mongod to", target, e))
}

/// Returns `path` if it may be executed, else [`TestkitError::NotExecutable`].
pub(crate) fn executable(path: PathBuf) -> Result<PathBuf, TestkitError> {
    if is_executable(&path) {
        Ok(path)
    } else {
        Err(TestkitError::NotExecutable { path })
    }
}

#[cfg(unix)]
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
pub(crate) fn is_executable(path: &Path) -> bool {
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
