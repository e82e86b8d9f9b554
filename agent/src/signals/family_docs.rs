//! How a signal's per-process families read ([`super::Signal::family_docs`]):
//! each one's labels, what one count is and where the kernel counts it,
//! declared beside the family. `slowpath signals` prints them;
//! docs/generate.py writes docs/metrics.md's table of labels and hooks from
//! them.

use serde::Serialize;

use super::recorded::family_name;
use crate::exposition::Family;

/// One family's row of docs/metrics.md's "Labels and hooks" (Markdown cells,
/// one line each).
#[derive(Serialize)]
pub struct FamilyDoc {
    #[serde(serialize_with = "family_name")]
    pub family: &'static Family,
    /// Its labels beyond the process's, with their values where they are a
    /// closed set ("none but the process's", or empty).
    pub labels: &'static str,
    /// What one count (or second) is, exactly, and what is left out.
    pub counts: &'static str,
    /// Where the kernel side counts it: the tracepoint, or the syscall
    /// entry and its numbers per architecture.
    pub hook: &'static str,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::signals::SIGNALS;

    #[test]
    fn every_shown_or_recorded_family_has_its_row_once() {
        let mut documented = HashSet::new();
        for signal in SIGNALS {
            for doc in signal.family_docs {
                let own = signal.families.iter().any(|f| f.name == doc.family.name);
                assert!(
                    own,
                    "{}: {} is not its family",
                    signal.name, doc.family.name
                );
                assert!(documented.insert(doc.family.name), "{}", doc.family.name);
                for cell in [doc.labels, doc.counts, doc.hook] {
                    assert!(!cell.contains(['\n', '|']), "{}: one cell", doc.family.name);
                }
                assert!(!doc.counts.is_empty() && !doc.hook.is_empty());
            }
        }
        let shown = SIGNALS.iter().flat_map(|s| {
            let columns = s.top.columns.iter().map(|c| c.family.name);
            columns.chain(s.recorded.iter().map(|r| r.family.name))
        });
        for part in SIGNALS.iter().flat_map(|s| s.promql.iter()) {
            let title = part.lines().next().unwrap_or_default();
            assert!(!title.is_empty() && !part.contains("```"), "{part}");
        }
        for name in shown {
            assert!(
                documented.contains(name),
                "{name}: no row in docs/metrics.md"
            );
        }
    }
}
