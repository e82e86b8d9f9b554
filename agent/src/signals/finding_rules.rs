//! The findings a signal's diagnosis can make ([`super::Signal::finding_rules`]):
//! each one's id, severity and when it holds, declared once beside the code
//! that makes it (its constructor takes the id from here). `slowpath
//! signals` prints them; docs/generate.py writes docs/doctor.md's table of
//! findings from them.

use serde::Serialize;

use crate::finding::Severity;

/// One finding of a signal.
#[derive(Serialize)]
pub struct FindingRule {
    /// Its id: the `finding` label of `slowpath_finding_info`, the doctor's
    /// JSON `id`, what a per-process alert joins on.
    pub id: &'static str,
    /// The severities it is made at (one, or the ones its cases choose
    /// between).
    pub severities: &'static [Severity],
    /// When it holds and what it names, one Markdown phrase (a cell of
    /// docs/doctor.md's table).
    pub when: &'static str,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::signals::SIGNALS;

    #[test]
    fn every_finding_is_declared_once_and_every_alert_joins_its_own() {
        let mut ids = HashSet::new();
        for signal in SIGNALS {
            for rule in signal.finding_rules {
                assert!(ids.insert(rule.id), "{} declared twice", rule.id);
                let snake = rule.id.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                assert!(snake && !rule.severities.is_empty(), "{}", rule.id);
                assert!(!rule.when.is_empty() && !rule.when.contains(['\n', '|']));
            }
            let Some(alert) = &signal.alert else { continue };
            assert!(!alert.findings.is_empty(), "{}", alert.name);
            for finding in alert.findings {
                let own = signal.finding_rules.iter().any(|r| r.id == finding.id);
                assert!(
                    own,
                    "{}: {} is no finding of its signal",
                    alert.name, finding.id
                );
            }
        }
    }
}
