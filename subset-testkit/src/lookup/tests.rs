use super::*;

/// A fresh directory under the system temporary directory.
pub(crate) fn scratch_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("subset-locate-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `mongod` script in `dir` with the permissions `mode`.
#[cfg(unix)]
pub(crate) fn fake_binary(dir: &Path, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("mongod");
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A lookup that needs no `/etc/os-release` and no network: a fixed distribution and a
/// mirror nothing listens on.
pub(crate) fn offline(cache: &Path) -> MongodLookup {
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
    let error = find(&lookup, true).unwrap_err();
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
    assert_eq!(find(&lookup, true).unwrap(), found(binary.clone()));

    fake_binary(&dir, 0o644);
    let error = find(&lookup, true).unwrap_err();
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
    assert_eq!(find(&lookup, true).unwrap(), found(good));
    // A version asked for is that version, not whatever is on PATH.
    assert_eq!(find(&lookup.clone().version("7.0.14"), true).unwrap(), None);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn nothing_found_means_a_download() {
    let lookup = MongodLookup {
        path: Some("/nonexistent-a:/nonexistent-b".into()),
        ..MongodLookup::new().cache_dir("/nonexistent/cache")
    };
    assert_eq!(find(&lookup, true).unwrap(), None);
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
        assert_eq!(find(&lookup, true).unwrap(), found(binary));
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
            format!("http://mirror.example/mongodb/linux/mongodb-linux-{arch}-debian12-7.0.14.tgz")
        );
    }
}
