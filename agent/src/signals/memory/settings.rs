//! The node's transparent huge page policy (mm/huge_memory.c): the
//! bracketed choices of `<sysfs>/kernel/mm/transparent_hugepage/{enabled,defrag}`,
//! read on every scrape and report.

use std::path::Path;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::node::{read_setting, selected_choice, Fact, NodeFact, Unreadable};

/// The files, relative to the sysfs root.
const FILES: [&str; 2] = [
    "kernel/mm/transparent_hugepage/enabled",
    "kernel/mm/transparent_hugepage/defrag",
];

/// THP policy: `enabled` (always, madvise, never) and `defrag` (always,
/// defer, defer+madvise, madvise, never); `None` when unreadable.
#[derive(Debug, Default, PartialEq)]
pub struct ThpSettings {
    pub enabled: Option<String>,
    pub defrag: Option<String>,
}

impl ThpSettings {
    pub fn new(enabled: Option<String>, defrag: Option<String>) -> Self {
        Self { enabled, defrag }
    }
}

/// The doctor report's `thp` object: `{"defrag": "madvise", "enabled":
/// "always"}` (keys sorted, empty strings when unread).
impl Serialize for ThpSettings {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("defrag", self.defrag.as_deref().unwrap_or_default())?;
        map.serialize_entry("enabled", self.enabled.as_deref().unwrap_or_default())?;
        map.end()
    }
}

impl NodeFact for ThpSettings {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("thp", self))
    }
    fn headline(&self) -> Option<String> {
        Some(format!(
            "THP enabled={} defrag={}",
            self.enabled.as_deref().unwrap_or_default(),
            self.defrag.as_deref().unwrap_or_default()
        ))
    }
}

/// Reads [`ThpSettings`] under a sysfs root (a `node::SettingsReader`).
pub fn read(sysfs: &Path, unreadable: &mut Vec<Unreadable>) -> Fact {
    let mut choice = |file| read_setting(sysfs, file, unreadable).and_then(|s| selected_choice(&s));
    let enabled = choice(FILES[0]);
    let defrag = choice(FILES[1]);
    Arc::new(ThpSettings::new(enabled, defrag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{NodeFacts, SettingsReader};

    #[test]
    fn reads_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("slowpath-thp-{}", std::process::id()));
        let thp = root.join("kernel/mm/transparent_hugepage");
        std::fs::create_dir_all(&thp).unwrap();
        std::fs::write(thp.join("enabled"), "[always] madvise never\n").unwrap();
        std::fs::write(
            thp.join("defrag"),
            "always defer [defer+madvise] madvise never\n",
        )
        .unwrap();
        let node = NodeFacts::read_settings(&root, [read as SettingsReader]);
        assert_eq!(
            node.get::<ThpSettings>(),
            Some(&ThpSettings::new(
                Some("always".into()),
                Some("defer+madvise".into())
            ))
        );
        assert!(node.unreadable.is_empty());
        let missing = NodeFacts::read_settings(&root.join("missing"), [read as SettingsReader]);
        assert_eq!(missing.get::<ThpSettings>(), Some(&ThpSettings::default()));
        assert_eq!(missing.unreadable.len(), FILES.len());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
