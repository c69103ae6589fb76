//! The official MongoDB server build: the archive for this machine from fastdl.mongodb.org (or a
//! mirror laid out like it), checked against the SHA-256 published next to it, and `bin/mongod`
//! taken out of it.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::cache::{install_binary, Scratch};
use crate::error::TestkitError;
use crate::notice::{announce_done, announce_download, size_text};
use crate::platform::Platform;

/// Where the official builds are published: `<base>/linux/mongodb-linux-<arch>-<distro>-<version>.tgz`.
pub(crate) const DEFAULT_MIRROR: &str = "https://fastdl.mongodb.org";

/// How long resolving the host and opening the connection may take each. Short: where the
/// server is unreachable, every test process that needs a `mongod` would wait this long before
/// falling back (the first one only; the failure is remembered, see `cache::Marker`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the server may take to answer a request, up to its headers.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the whole archive (about 70 MB) may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(600);

/// The largest `.sha256` file read: the official ones are one line of about 110 bytes.
const CHECKSUM_FILE_LIMIT: u64 = 4096;

/// What to download: the archive and its checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    /// The server version, e.g. `8.0.29`.
    pub(crate) version: String,
    /// The build.
    pub(crate) platform: Platform,
    /// `<mirror>/linux/<archive>.tgz`.
    pub(crate) url: String,
}

impl Source {
    /// The archive of `version` for `platform` under `mirror` (no trailing `/`).
    pub(crate) fn new(mirror: &str, version: &str, platform: Platform) -> Self {
        let url = format!("{mirror}/linux/{}.tgz", platform.archive_stem(version));
        Self {
            version: version.to_owned(),
            platform,
            url,
        }
    }

    /// The published checksum: the archive's URL + `.sha256`.
    pub(crate) fn checksum_url(&self) -> String {
        format!("{}.sha256", self.url)
    }
}

/// The HTTP client: short connect timeouts, statuses handled here rather than as errors, and
/// the proxy of `HTTPS_PROXY`/`ALL_PROXY` as usual.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_resolve(Some(CONNECT_TIMEOUT))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(RESPONSE_TIMEOUT))
        .timeout_recv_body(Some(BODY_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into()
}

/// `GET url`, failing on anything but 200.
fn get(agent: &ureq::Agent, url: &str) -> Result<ureq::http::Response<ureq::Body>, TestkitError> {
    let response = agent
        .get(url)
        .call()
        .map_err(|e| TestkitError::Unreachable {
            url: url.to_owned(),
            source: Box::new(e),
        })?;
    let status = response.status().as_u16();
    if status != 200 {
        return Err(TestkitError::Http {
            url: url.to_owned(),
            status,
        });
    }
    Ok(response)
}

/// Downloads the archive of `source` into a scratch directory in the cache, checks it against
/// the published SHA-256 before anything is unpacked, takes `bin/mongod` out of it and renames
/// it to `target` (so that no process ever sees a half-written binary). Announces the download
/// and its end on stderr.
///
/// # Errors
///
/// [`TestkitError::Unreachable`] or [`TestkitError::Http`] for the checksum or the archive
/// (a missing `.sha256` is an error: nothing unverified is installed),
/// [`TestkitError::BadChecksumFile`], [`TestkitError::ChecksumMismatch`],
/// [`TestkitError::NoMongodInArchive`], and [`TestkitError::Io`] for the cache. On any error
/// nothing is left in the cache but the lock file.
pub(crate) fn download(source: &Source, target: &Path) -> Result<PathBuf, TestkitError> {
    let agent = agent();
    let cache = target
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let checksum_url = source.checksum_url();
    let expected = read_checksum(&agent, &checksum_url)?;

    let response = get(&agent, &source.url)?;
    let size = response.body().content_length();
    let scratch = Scratch::create(cache, &source.version)?;
    let started = Instant::now();
    announce_download(
        &source.version,
        &format!("{} {}", source.platform.arch, source.platform.distro),
        &[
            (
                "archive",
                format!(
                    "{}.tgz (the official server build; {}; sha256 from its .sha256)",
                    source.platform.archive_stem(&source.version),
                    size.map_or_else(|| "size not announced".to_owned(), size_text),
                ),
            ),
            ("from", source.url.clone()),
        ],
        target,
    );
    tracing::info!(url = %source.url, target = %target.display(), "downloading mongod");

    let archive = scratch.path().join("archive.tgz");
    let actual =
        save_hashing(response.into_body().into_reader(), &archive).map_err(|e| match e {
            SaveError::Read(source_error) => TestkitError::Unreachable {
                url: source.url.clone(),
                source: Box::new(source_error),
            },
            SaveError::Write(io) => TestkitError::io("write", &archive, io),
        })?;
    if actual != expected {
        return Err(TestkitError::ChecksumMismatch {
            url: source.url.clone(),
            expected,
            actual,
        });
    }
    let member = format!(
        "{}/bin/mongod",
        source.platform.archive_stem(&source.version)
    );
    let extracted = scratch.path().join("mongod");
    if !extract_mongod(&archive, &extracted)
        .map_err(|e| TestkitError::io("unpack the downloaded archive", &archive, e))?
    {
        return Err(TestkitError::NoMongodInArchive {
            url: source.url.clone(),
            member,
        });
    }
    install_binary(&extracted, target)?;
    announce_done(&source.version, started, target);
    Ok(target.to_path_buf())
}

/// Fetches `<archive>.sha256` and returns its hash, in lowercase hex. The file is
/// `<hash>  <archive name>`, as `sha256sum` writes it.
fn read_checksum(agent: &ureq::Agent, url: &str) -> Result<String, TestkitError> {
    let mut text = String::new();
    get(agent, url)?
        .into_body()
        .into_reader()
        .take(CHECKSUM_FILE_LIMIT)
        .read_to_string(&mut text)
        .map_err(|e| TestkitError::Unreachable {
            url: url.to_owned(),
            source: Box::new(e),
        })?;
    let hash = text.split_whitespace().next().unwrap_or("");
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hash.to_ascii_lowercase())
    } else {
        Err(TestkitError::BadChecksumFile {
            url: url.to_owned(),
            start: text.chars().take(80).collect(),
        })
    }
}

/// Why saving a download failed: the network or the disk.
enum SaveError {
    Read(std::io::Error),
    Write(std::io::Error),
}

/// Copies `body` to a new file at `path` and returns the SHA-256 of what was copied.
fn save_hashing(mut body: impl Read, path: &Path) -> Result<String, SaveError> {
    let mut out = BufWriter::new(File::create(path).map_err(SaveError::Write)?);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 16];
    loop {
        let n = match body.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(SaveError::Read(e)),
        };
        hasher.update(&buffer[..n]);
        out.write_all(&buffer[..n]).map_err(SaveError::Write)?;
    }
    out.flush().map_err(SaveError::Write)?;
    Ok(hex(&hasher.finalize()))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the archive's `<top directory>/bin/mongod` to `dest`; `false` when there is none.
fn extract_mongod(archive: &Path, dest: &Path) -> std::io::Result<bool> {
    let gz = flate2::read::GzDecoder::new(BufReader::new(File::open(archive)?));
    let mut tar = tar::Archive::new(gz);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let path = entry.path()?;
        let parts: Vec<_> = path.components().collect();
        let is_mongod = entry.header().entry_type().is_file()
            && parts.len() == 3
            && parts[1].as_os_str() == "bin"
            && parts[2].as_os_str() == "mongod";
        if is_mongod {
            let mut out = File::create(dest)?;
            std::io::copy(&mut entry, &mut out)?;
            out.flush()?;
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_url_follows_the_official_layout() {
        let platform = Platform {
            arch: "x86_64",
            distro: "debian12".to_owned(),
        };
        let source = Source::new(DEFAULT_MIRROR, "8.0.29", platform);
        assert_eq!(
            source.url,
            "https://fastdl.mongodb.org/linux/mongodb-linux-x86_64-debian12-8.0.29.tgz"
        );
        assert_eq!(
            source.checksum_url(),
            "https://fastdl.mongodb.org/linux/mongodb-linux-x86_64-debian12-8.0.29.tgz.sha256"
        );
    }
}
