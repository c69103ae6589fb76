//! Memory pressure: the benchmark's own `mongod` confined to a memory limit by a cgroup (v2 or
//! v1, whichever the machine mounts), so that the data set is larger than the memory the server
//! has, not only larger than its WiredTiger cache. Without a limit the operating system keeps
//! the collection files in its page cache and a cache miss costs a memory copy, not a disk read.
//!
//! The cgroup is a child of the benchmark's own memory cgroup, so any limit above it still
//! applies. `mongod` enters it through a wrapper script that writes its own pid into the cgroup
//! and then `exec`s the real binary (the test kit runs the binary `SUBSET_MONGOD` names), so
//! that all of its memory is charged there from its first page. The data set is written with no
//! limit (index builds need more memory); then the server is stopped, the limit set, the
//! cgroup's page cache dropped, and the server started again, cold, under the limit.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::Res;

/// The cgroup interface a machine offers for memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A memory cgroup this process created, removed when dropped.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    dir: PathBuf,
    /// v2: `memory.peak` kept open, since a reset holds only for reads through the same file
    /// descriptor.
    peak: Option<fs::File>,
}

/// What the cgroup's memory looked like.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Highest usage since the last [`Cgroup::reset_peak`] (or since creation when the kernel
    /// cannot reset it).
    pub peak: Option<u64>,
    /// Anonymous memory (the process's own: WiredTiger's cache, connections, …).
    pub anon: Option<u64>,
    /// Page cache (the collection and index files as the operating system caches them).
    pub file: Option<u64>,
    /// Processes the kernel killed for want of memory in the cgroup.
    pub oom_kills: Option<u64>,
}

/// A cgroup mount from `/proc/self/mountinfo`: its root within the hierarchy and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    root: String,
    point: PathBuf,
}

/// The v1 mount of the memory controller and the v2 mount, if any.
fn mounts(mountinfo: &str) -> (Option<Mount>, Option<Mount>) {
    let (mut v1, mut v2) = (None, None);
    for line in mountinfo.lines() {
        // `id parent dev root point options [optional…] - fstype source super-options`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) = (fields.get(3), fields.get(4), right.first())
        else {
            continue;
        };
        let mount = Mount {
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
        };
        match *fstype {
            "cgroup2" if v2.is_none() => v2 = Some(mount),
            "cgroup"
                if v1.is_none()
                    && right
                        .get(2)
                        .is_some_and(|opts| opts.split(',').any(|o| o == "memory")) =>
            {
                v1 = Some(mount)
            }
            _ => {}
        }
    }
    (v1, v2)
}

/// mountinfo escapes spaces, tabs, newlines and backslashes as octal.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// This process's cgroup path in the v1 memory hierarchy and in the v2 hierarchy.
fn own_paths(proc_cgroup: &str) -> (Option<String>, Option<String>) {
    let (mut v1, mut v2) = (None, None);
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_owned());
        }
    }
    (v1, v2)
}

/// Where the cgroup at `path` (as `/proc/self/cgroup` names it) is in the file system.
fn directory(mount: &Mount, path: &str) -> PathBuf {
    let relative = if mount.root == "/" {
        path
    } else {
        path.strip_prefix(mount.root.as_str()).unwrap_or(path)
    };
    mount.point.join(relative.trim_start_matches('/'))
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a `key value` file (`memory.stat`, `memory.events`, `oom_control`).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Cgroup {
    /// Creates `subset-bench-<pid>` under this process's memory cgroup, with no limit yet.
    ///
    /// # Errors
    ///
    /// Why it cannot: no memory controller mounted, the controller not available to this
    /// process's cgroup, or no permission (it needs root or a delegated cgroup).
    pub fn create() -> Result<Cgroup, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let proc_cgroup = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let (v1_mount, v2_mount) = mounts(&mountinfo);
        let (v1_path, v2_path) = own_paths(&proc_cgroup);
        let name = format!("subset-bench-{}", std::process::id());
        let mut reasons = Vec::new();

        if let (Some(mount), Some(path)) = (&v2_mount, &v2_path) {
            let own = directory(mount, path);
            let controllers =
                fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                match Self::create_v2(&own, &name) {
                    Ok(cgroup) => return Ok(cgroup),
                    Err(e) => reasons.push(format!("cgroup v2 at {}: {e}", own.display())),
                }
            } else {
                reasons.push(format!(
                    "cgroup v2 at {}: the memory controller is not available there",
                    own.display()
                ));
            }
        }
        if let (Some(mount), Some(path)) = (&v1_mount, &v1_path) {
            let own = directory(mount, path);
            let dir = own.join(&name);
            match fs::create_dir(&dir) {
                Ok(()) => {
                    return Ok(Cgroup {
                        version: Version::V1,
                        dir,
                        peak: None,
                    })
                }
                Err(e) => reasons.push(format!("cgroup v1 at {}: {e}", own.display())),
            }
        }
        if reasons.is_empty() {
            reasons.push("no cgroup memory controller is mounted".into());
        }
        Err(reasons.join("; "))
    }

    fn create_v2(own: &Path, name: &str) -> io::Result<Cgroup> {
        // A child gets the memory controller only if its parent hands it down. Enabling it fails
        // (EBUSY) where the parent holds processes of its own, unless it is the root.
        let subtree = fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
        if !subtree.split_whitespace().any(|c| c == "memory") {
            write(&own.join("cgroup.subtree_control"), "+memory")?;
        }
        let dir = own.join(name);
        fs::create_dir(&dir)?;
        Ok(Cgroup {
            version: Version::V2,
            dir,
            peak: None,
        })
    }

    /// "cgroup v1, /sys/fs/cgroup/memory/…".
    pub fn describe(&self) -> String {
        let v = match self.version {
            Version::V1 => "v1",
            Version::V2 => "v2",
        };
        format!("cgroup {v}, {}", self.dir.display())
    }

    /// Writes, into `dir`, an executable `mongod` that moves itself into this cgroup and
    /// `exec`s `real` with its arguments; returns its path.
    pub fn wrapper(&self, real: &Path, dir: &Path) -> Res<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
        let script = format!(
            "#!/bin/sh\n\
             # Written by subset-bench: runs mongod inside the memory cgroup {}.\n\
             echo $$ > {} || exit 1\n\
             exec {} \"$@\"\n",
            self.dir.display(),
            quote(&self.dir.join("cgroup.procs")),
            quote(real)
        );
        fs::create_dir_all(dir)?;
        let path = dir.join("mongod");
        fs::write(&path, script)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    /// Sets the limit. With no process inside, what exceeds it (page cache) is reclaimed.
    pub fn set_limit(&self, bytes: u64) -> Res<()> {
        match self.version {
            Version::V1 => write(&self.dir.join("memory.limit_in_bytes"), &bytes.to_string())?,
            Version::V2 => {
                write(&self.dir.join("memory.max"), &bytes.to_string())?;
                // Memory pressure should mean reading from disk, not swapping the cache out.
                let _ = write(&self.dir.join("memory.swap.max"), "0");
            }
        }
        Ok(())
    }

    /// Drops what the cgroup still holds of the page cache, so that the next start is cold.
    /// Best effort: the limit is what matters.
    pub fn drop_page_cache(&self) {
        let done = match self.version {
            Version::V1 => write(&self.dir.join("memory.force_empty"), "0"),
            Version::V2 => write(&self.dir.join("memory.reclaim"), &u64::MAX.to_string()),
        };
        if let Err(e) = done {
            eprintln!("could not empty the cgroup's page cache ({e}); starting warm");
        }
    }

    /// Starts the peak over; `false` when the kernel cannot (v2 before Linux 6.12).
    pub fn reset_peak(&mut self) -> bool {
        match self.version {
            Version::V1 => write(&self.dir.join("memory.max_usage_in_bytes"), "0").is_ok(),
            Version::V2 => {
                use std::io::Write as _;
                let path = self.dir.join("memory.peak");
                let file = fs::OpenOptions::new().read(true).write(true).open(path);
                match file {
                    Ok(mut f) => {
                        let reset = f.write_all(b"reset").is_ok();
                        if reset {
                            self.peak = Some(f);
                        }
                        reset
                    }
                    Err(_) => false,
                }
            }
        }
    }

    fn peak(&self) -> Option<u64> {
        use std::io::{Read as _, Seek as _};
        match (&self.version, &self.peak) {
            (Version::V1, _) => read_u64(&self.dir.join("memory.max_usage_in_bytes")),
            (Version::V2, Some(file)) => {
                let mut f = file;
                let mut text = String::new();
                f.rewind().ok()?;
                f.read_to_string(&mut text).ok()?;
                text.trim().parse().ok()
            }
            (Version::V2, None) => read_u64(&self.dir.join("memory.peak")),
        }
    }

    /// The limit in force (`None` for none).
    pub fn limit(&self) -> Option<u64> {
        match self.version {
            // v1 reports "no limit" as a huge page-aligned number.
            Version::V1 => {
                read_u64(&self.dir.join("memory.limit_in_bytes")).filter(|&b| b < 1 << 60)
            }
            Version::V2 => read_u64(&self.dir.join("memory.max")),
        }
    }

    pub fn usage(&self) -> Usage {
        let d = &self.dir;
        match self.version {
            Version::V1 => Usage {
                peak: self.peak(),
                anon: keyed(&d.join("memory.stat"), "total_rss"),
                file: keyed(&d.join("memory.stat"), "total_cache"),
                oom_kills: keyed(&d.join("memory.oom_control"), "oom_kill"),
            },
            Version::V2 => Usage {
                peak: self.peak(),
                anon: keyed(&d.join("memory.stat"), "anon"),
                file: keyed(&d.join("memory.stat"), "file"),
                oom_kills: keyed(&d.join("memory.events"), "oom_kill"),
            },
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Fails while a process is still inside; the empty directory then stays behind.
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("could not remove the cgroup {}: {e}", self.dir.display());
        }
    }
}

/// Bytes the process `pid` has caused to be read from storage (`/proc/<pid>/io`, `read_bytes`):
/// the disk reads that the page cache did not absorb.
pub fn disk_reads(pid: u32) -> Option<u64> {
    keyed_colon(
        &fs::read_to_string(format!("/proc/{pid}/io")).ok()?,
        "read_bytes",
    )
}

fn keyed_colon(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Parses "512M", "1.5G", "800000000": bytes, with an optional K, M or G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (number, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_uppercase()),
        _ => (s, 'B'),
    };
    let scale: f64 = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("unknown unit `{unit}`: use K, M or G, e.g. `512M`")),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size: write e.g. `512M` or `1G`"))?;
    if value.is_nan() || value <= 0.0 {
        return Err(format!("`{s}`: a memory limit must be above zero"));
    }
    Ok((value * scale) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
35 25 0:30 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
40 35 0:35 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 35 0:36 /outer /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
";

    #[test]
    fn finds_the_memory_mounts() {
        let (v1, v2) = mounts(MOUNTINFO);
        assert_eq!(
            v1,
            Some(Mount {
                root: "/outer".into(),
                point: "/sys/fs/cgroup/memory".into()
            })
        );
        assert_eq!(
            v2.map(|m| m.point),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn maps_the_own_cgroup_to_a_directory() {
        let (v1, v2) = own_paths("4:memory:/outer/job/7\n1:cpu:/\n0::/user.slice\n");
        assert_eq!(v1.as_deref(), Some("/outer/job/7"));
        assert_eq!(v2.as_deref(), Some("/user.slice"));
        let (mount, _) = mounts(MOUNTINFO);
        assert_eq!(
            directory(&mount.unwrap(), "/outer/job/7"),
            PathBuf::from("/sys/fs/cgroup/memory/job/7")
        );
    }

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("0M").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn reads_proc_io() {
        let io = "rchar: 10\nwchar: 5\nread_bytes: 8192\nwrite_bytes: 0\n";
        assert_eq!(keyed_colon(io, "read_bytes"), Some(8192));
    }
}
