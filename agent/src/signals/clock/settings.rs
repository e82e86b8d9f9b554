//! The node's clocksource (kernel/time/clocksource.c, drivers/clocksource):
//! the current one and those available, read from sysfs on every scrape and
//! report, and its switches (`switches`). With a clocksource the vDSO cannot
//! read, every clock read of every process is a system call.

use std::path::Path;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::switches::{self, Switches};
use crate::node::{read_setting, Fact, NodeFact, Unreadable};

/// The files, relative to the sysfs root.
const FILES: [&str; 2] = [
    "devices/system/clocksource/clocksource0/current_clocksource",
    "devices/system/clocksource/clocksource0/available_clocksource",
];

/// Current and available clocksources, from
/// `<sysfs>/devices/system/clocksource/clocksource0/{current,available}_clocksource`.
#[derive(Debug, Default, PartialEq)]
pub struct Clocksources {
    pub current: Option<String>,
    pub available: Vec<String>,
    /// Its switches: since the agent started, and the last one known.
    pub switches: Switches,
}

impl Clocksources {
    #[cfg(test)]
    pub fn new(current: Option<String>, available: Vec<String>) -> Self {
        Self {
            current,
            available,
            switches: Switches::default(),
        }
    }
}

/// The doctor report's `clocksource` object: `{"available": "tsc hpet",
/// "current": "tsc", "last_switch": {"at": 1764000000.5, "from": "tsc",
/// "to": "hpet", "reason": "watchdog", "detail": "the skew is too large"}}`
/// (keys sorted, empty strings when unread; `last_switch` null when none
/// is known).
impl Serialize for Clocksources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("available", &self.available.join(" "))?;
        map.serialize_entry("current", self.current.as_deref().unwrap_or_default())?;
        map.serialize_entry("last_switch", &self.switches.last)?;
        map.end()
    }
}

impl NodeFact for Clocksources {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("clocksource", self))
    }
    fn headline(&self) -> Option<String> {
        Some(format!(
            "clocksource {} (available: {})",
            self.current.as_deref().unwrap_or_default(),
            self.available.join(" ")
        ))
    }
}

/// Reads [`Clocksources`] under a sysfs root (a `node::SettingsReader`).
pub fn read(sysfs: &Path, unreadable: &mut Vec<Unreadable>) -> Fact {
    let current = read_setting(sysfs, FILES[0], unreadable)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let available = read_setting(sysfs, FILES[1], unreadable);
    let switches = switches::observe(sysfs, current.as_deref());
    Arc::new(Clocksources {
        current,
        available: available
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        switches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{NodeFacts, SettingsReader};

    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("slowpath-cs-{}", std::process::id()));
        let cs = root.join("devices/system/clocksource/clocksource0");
        std::fs::create_dir_all(&cs).unwrap();
        std::fs::write(cs.join("current_clocksource"), "xen\n").unwrap();
        std::fs::write(cs.join("available_clocksource"), "xen tsc hpet acpi_pm \n").unwrap();
        let node = NodeFacts::read_settings(&root, [read as SettingsReader]);
        assert_eq!(
            node.get::<Clocksources>(),
            Some(&Clocksources::new(
                Some("xen".into()),
                vec!["xen".into(), "tsc".into(), "hpet".into(), "acpi_pm".into()],
            ))
        );
        assert!(node.unreadable.is_empty());
        let missing = NodeFacts::read_settings(&root.join("missing"), [read as SettingsReader]);
        assert_eq!(
            missing.get::<Clocksources>(),
            Some(&Clocksources::default())
        );
        assert_eq!(missing.unreadable.len(), FILES.len());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
