//! Node-level settings read from sysfs on every scrape: the clocksource
//! (drivers/clocksource, kernel/time/clocksource.c) and the transparent huge
//! page policy (mm/huge_memory.c).

use std::fs;
use std::path::Path;

/// Current and available clocksources, from
/// `<sysfs>/devices/system/clocksource/clocksource0/{current,available}_clocksource`.
#[derive(Debug, Default, PartialEq)]
pub struct Clocksources {
    pub current: Option<String>,
    pub available: Vec<String>,
}

pub fn read_clocksources(sysfs: &Path) -> Clocksources {
    let dir = sysfs.join("devices/system/clocksource/clocksource0");
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
    Clocksources {
        current: read("current_clocksource")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        available: read("available_clocksource")
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

pub fn read_thp_settings(sysfs: &Path) -> ThpSettings {
    let dir = sysfs.join("kernel/mm/transparent_hugepage");
    let read = |name: &str| {
        fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|s| selected_choice(&s))
    };
    ThpSettings {
        enabled: read("enabled"),
        defrag: read("defrag"),
    }
}

/// The node settings the signals report, read once per scrape or report.
#[derive(Debug, Default, PartialEq)]
pub struct NodeSettings {
    pub clocksources: Clocksources,
    pub thp: ThpSettings,
}

impl NodeSettings {
    /// Read both from the sysfs tree at `sysfs` (missing files leave gaps).
    pub fn read(sysfs: &Path) -> Self {
        Self {
            clocksources: read_clocksources(sysfs),
            thp: read_thp_settings(sysfs),
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
        assert_eq!(
            read_clocksources(&root),
            Clocksources {
                current: Some("xen".into()),
                available: vec!["xen".into(), "tsc".into(), "hpet".into(), "acpi_pm".into()],
            }
        );
        assert_eq!(
            read_thp_settings(&root),
            ThpSettings {
                enabled: Some("always".into()),
                defrag: Some("defer+madvise".into()),
            }
        );
        assert_eq!(
            read_clocksources(&root.join("missing")),
            Clocksources::default()
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
