//! Node-level settings read from sysfs on every scrape: the clocksource
//! (drivers/clocksource, kernel/time/clocksource.c) and the transparent huge
//! page policy (mm/huge_memory.c).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Current and available clocksources, from
/// `<sysfs>/devices/system/clocksource/clocksource0/{current,available}_clocksource`.
#[derive(Debug, Default, PartialEq)]
pub struct Clocksources {
    pub current: Option<String>,
    pub available: Vec<String>,
}

/// The sysfs files the settings come from, relative to the sysfs root.
pub const SETTINGS_FILES: [&str; 4] = [
    "devices/system/clocksource/clocksource0/current_clocksource",
    "devices/system/clocksource/clocksource0/available_clocksource",
    "kernel/mm/transparent_hugepage/enabled",
    "kernel/mm/transparent_hugepage/defrag",
];

/// A settings file that could not be read: its path and the error.
#[derive(Debug)]
pub struct Unreadable {
    pub path: PathBuf,
    pub error: io::Error,
}

/// Read `path`, noting a failure in `unreadable`.
fn read_noting(path: PathBuf, unreadable: &mut Vec<Unreadable>) -> Option<String> {
    match fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) => {
            unreadable.push(Unreadable { path, error });
            None
        }
    }
}

/// `<sysfs>/devices/system/clocksource/clocksource0/{current,available}_clocksource`.
fn read_clocksources_noting(sysfs: &Path, unreadable: &mut Vec<Unreadable>) -> Clocksources {
    let mut read = |i: usize| read_noting(sysfs.join(SETTINGS_FILES[i]), unreadable);
    let current = read(0);
    let available = read(1);
    Clocksources {
        current: current
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        available: available
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
    }
}

/// THP policy: the bracketed choices of
/// `<sysfs>/kernel/mm/transparent_hugepage/{enabled,defrag}`.
#[derive(Debug, Default, PartialEq)]
pub struct ThpSettings {
    pub enabled: Option<String>,
    pub defrag: Option<String>,
}

/// `<sysfs>/kernel/mm/transparent_hugepage/{enabled,defrag}`.
fn read_thp_settings_noting(sysfs: &Path, unreadable: &mut Vec<Unreadable>) -> ThpSettings {
    let mut read = |i: usize| {
        read_noting(sysfs.join(SETTINGS_FILES[i]), unreadable).and_then(|s| selected_choice(&s))
    };
    let enabled = read(2);
    let defrag = read(3);
    ThpSettings { enabled, defrag }
}

/// The node settings the signals report, read once per scrape or report.
#[derive(Debug, Default)]
pub struct NodeSettings {
    pub clocksources: Clocksources,
    pub thp: ThpSettings,
    /// Files of [`SETTINGS_FILES`] that could not be read (a wrong
    /// `--path.sysfs`, a container without the host's /sys, a kernel without
    /// THP): their metrics are missing, and the scrape counts an error.
    pub unreadable: Vec<Unreadable>,
}

impl NodeSettings {
    /// Read both from the sysfs tree at `sysfs` (missing files leave gaps,
    /// listed in `unreadable`).
    pub fn read(sysfs: &Path) -> Self {
        let mut unreadable = Vec::new();
        let clocksources = read_clocksources_noting(sysfs, &mut unreadable);
        let thp = read_thp_settings_noting(sysfs, &mut unreadable);
        Self {
            clocksources,
            thp,
            unreadable,
        }
    }
}

/// `always [madvise] never` -> `madvise`.
pub fn selected_choice(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(text[start..start + len].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bracketed_choice_is_selected() {
        assert_eq!(
            selected_choice("always [madvise] never\n").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected_choice("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected_choice("[always] madvise never").as_deref(),
            Some("always")
        );
        assert_eq!(selected_choice("garbage"), None);
    }

    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("slowpath-sysfs-{}", std::process::id()));
        let cs = root.join("devices/system/clocksource/clocksource0");
        let thp = root.join("kernel/mm/transparent_hugepage");
        fs::create_dir_all(&cs).unwrap();
        fs::create_dir_all(&thp).unwrap();
        fs::write(cs.join("current_clocksource"), "xen\n").unwrap();
        fs::write(cs.join("available_clocksource"), "xen tsc hpet acpi_pm \n").unwrap();
        fs::write(thp.join("enabled"), "[always] madvise never\n").unwrap();
        fs::write(
            thp.join("defrag"),
            "always defer [defer+madvise] madvise never\n",
        )
        .unwrap();
        let node = NodeSettings::read(&root);
        assert_eq!(
            node.clocksources,
            Clocksources {
                current: Some("xen".into()),
                available: vec!["xen".into(), "tsc".into(), "hpet".into(), "acpi_pm".into()],
            }
        );
        assert_eq!(
            node.thp,
            ThpSettings {
                enabled: Some("always".into()),
                defrag: Some("defer+madvise".into()),
            }
        );
        assert!(node.unreadable.is_empty());
        let missing = NodeSettings::read(&root.join("missing"));
        assert_eq!(missing.clocksources, Clocksources::default());
        assert_eq!(missing.unreadable.len(), SETTINGS_FILES.len());
        fs::remove_dir_all(&root).unwrap();
    }
}
