//! The official build that runs on this machine: its architecture, and its distribution as
//! MongoDB names the builds, from `/etc/os-release` or `SUBSET_MONGODB_DISTRO`.

use crate::error::TestkitError;

/// The official build that runs on this machine, as its archive names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Platform {
    /// `x86_64` or `aarch64`.
    pub(crate) arch: &'static str,
    /// The build's distribution, e.g. `ubuntu2204`, `debian12`, `rhel93`.
    pub(crate) distro: String,
}

impl Platform {
    /// The build for this machine and `version`: the distribution is `distro` when given
    /// (`SUBSET_MONGODB_DISTRO`), else read from `/etc/os-release`.
    ///
    /// # Errors
    ///
    /// [`TestkitError::UnsupportedPlatform`] for an operating system, an architecture or a
    /// distribution MongoDB publishes no build for.
    pub(crate) fn detect(version: &str, distro: Option<&str>) -> Result<Self, TestkitError> {
        let unsupported = |why: String| TestkitError::UnsupportedPlatform {
            platform: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            why,
        };
        if !cfg!(target_os = "linux") {
            return Err(unsupported(
                "the test kit downloads Linux builds only".to_owned(),
            ));
        }
        let arch = match std::env::consts::ARCH {
            "x86_64" => "x86_64",
            "aarch64" => "aarch64",
            other => {
                return Err(unsupported(format!(
                    "MongoDB publishes no Community build for {other}"
                )))
            }
        };
        if let Some(distro) = distro {
            return Ok(Self {
                arch,
                distro: distro.to_owned(),
            });
        }
        let release = ["/etc/os-release", "/usr/lib/os-release"]
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .ok_or_else(|| {
                unsupported(
                    "there is no /etc/os-release to tell the distribution; set \
                     SUBSET_MONGODB_DISTRO to the build that runs here (e.g. ubuntu2204)"
                        .to_owned(),
                )
            })?;
        let distro = distro_of(&release, version).ok_or_else(|| {
            let name = os_release_value(&release, "PRETTY_NAME")
                .or_else(|| os_release_value(&release, "ID"))
                .unwrap_or("this distribution");
            unsupported(format!(
                "MongoDB publishes no build for {name}; set SUBSET_MONGODB_DISTRO to a build \
                 that runs here (ubuntu2204, ubuntu2404, debian12, rhel8, rhel93, amazon2023, …)"
            ))
        })?;
        Ok(Self { arch, distro })
    }

    /// `mongodb-linux-<arch>-<distro>-<version>`: the archive's name without `.tgz`, and the
    /// directory its files are in.
    pub(crate) fn archive_stem(&self, version: &str) -> String {
        format!("mongodb-linux-{}-{}-{version}", self.arch, self.distro)
    }
}

/// A value of `/etc/os-release`, unquoted.
fn os_release_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (name, value) = line.trim().split_once('=')?;
        (name == key).then(|| value.trim().trim_matches(|c| c == '"' || c == '\''))
    })
}

/// The build's distribution name for the system `/etc/os-release` describes, as MongoDB names
/// them; `None` when MongoDB publishes none for it. Derivatives (Linux Mint, Rocky, AlmaLinux…)
/// get their parent's build; releases newer than the newest build get the newest build, which
/// runs on them.
pub(crate) fn distro_of(os_release: &str, version: &str) -> Option<String> {
    let value = |key| os_release_value(os_release, key).unwrap_or("");
    let id = value("ID");
    let like: Vec<&str> = value("ID_LIKE").split_whitespace().collect();
    let is = |name: &str| id == name || like.contains(&name);
    let major = |text: &str| -> Option<u32> { text.split('.').next()?.parse().ok() };
    let version_id = value("VERSION_ID");
    // 8.0 renamed some builds (rhel80 → rhel8, rhel90 → rhel93) and added Ubuntu 24.04.
    let eight = major(version).is_some_and(|m| m >= 8);
    if is("ubuntu") {
        // A derivative's VERSION_ID is its own; UBUNTU_CODENAME names the Ubuntu under it.
        let ubuntu = if id == "ubuntu" {
            version_id
                .split_once('.')
                .and_then(|(y, m)| Some(y.parse::<u32>().ok()? * 100 + m.parse::<u32>().ok()?))
        } else {
            match value("UBUNTU_CODENAME") {
                "bionic" => Some(1804),
                "focal" => Some(2004),
                "jammy" => Some(2204),
                "noble" => Some(2404),
                _ => None,
            }
        }?;
        let build = match ubuntu {
            2404.. if eight => "ubuntu2404",
            2204.. => "ubuntu2204",
            2004.. => "ubuntu2004",
            1804.. => "ubuntu1804",
            _ => return None,
        };
        return Some(build.to_owned());
    }
    if is("debian") {
        let build = match major(version_id)? {
            12.. => "debian12",
            11 => "debian11",
            10 => "debian10",
            _ => return None,
        };
        return Some(build.to_owned());
    }
    if id == "amzn" {
        return match version_id {
            "2" => Some("amazon2".to_owned()),
            v if major(v).is_some_and(|y| y >= 2023) => Some("amazon2023".to_owned()),
            _ => None,
        };
    }
    if is("rhel") || is("centos") {
        let build = match (major(version_id)?, eight) {
            (9.., true) => "rhel93",
            (9.., false) => "rhel90",
            (8, true) => "rhel8",
            (8, false) => "rhel80",
            (7, _) => "rhel70",
            _ => return None,
        };
        return Some(build.to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_release(id: &str, like: &str, version_id: &str, extra: &str) -> String {
        format!("ID={id}\nID_LIKE=\"{like}\"\nVERSION_ID=\"{version_id}\"\n{extra}\n")
    }

    #[test]
    fn distributions_map_to_the_official_builds() {
        let cases = [
            (
                os_release("ubuntu", "debian", "22.04", ""),
                "8.0.29",
                "ubuntu2204",
            ),
            (
                os_release("ubuntu", "debian", "24.04", ""),
                "8.0.29",
                "ubuntu2404",
            ),
            (
                os_release("ubuntu", "debian", "24.04", ""),
                "7.0.14",
                "ubuntu2204",
            ),
            (
                os_release("ubuntu", "debian", "26.04", ""),
                "8.0.29",
                "ubuntu2404",
            ),
            (
                os_release("ubuntu", "debian", "20.04", ""),
                "8.0.29",
                "ubuntu2004",
            ),
            (
                os_release(
                    "linuxmint",
                    "ubuntu debian",
                    "21.3",
                    "UBUNTU_CODENAME=jammy",
                ),
                "8.0.29",
                "ubuntu2204",
            ),
            (os_release("debian", "", "12", ""), "8.0.29", "debian12"),
            (os_release("debian", "", "13", ""), "8.0.29", "debian12"),
            (os_release("debian", "", "11", ""), "7.0.14", "debian11"),
            (
                os_release("rocky", "rhel centos fedora", "9.3", ""),
                "8.0.29",
                "rhel93",
            ),
            (os_release("rhel", "fedora", "9.4", ""), "7.0.14", "rhel90"),
            (
                os_release("almalinux", "rhel centos fedora", "8.10", ""),
                "8.0.29",
                "rhel8",
            ),
            (
                os_release("amzn", "centos rhel fedora", "2023", ""),
                "8.0.29",
                "amazon2023",
            ),
            (
                os_release("amzn", "centos rhel fedora", "2", ""),
                "8.0.29",
                "amazon2",
            ),
        ];
        for (text, version, want) in cases {
            assert_eq!(
                distro_of(&text, version).as_deref(),
                Some(want),
                "{text} {version}"
            );
        }
        for text in [
            os_release("arch", "", "", ""),
            os_release("alpine", "", "3.20.0", ""),
            os_release("debian", "", "9", ""),
            os_release("linuxmint", "ubuntu", "99", "UBUNTU_CODENAME=unknown"),
        ] {
            assert_eq!(distro_of(&text, "8.0.29"), None, "{text}");
        }
    }
}
