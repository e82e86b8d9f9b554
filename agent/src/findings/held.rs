//! Which findings the agent shows, per finding and process: one entry per
//! (finding, comm, cgroup, pod labels) while the rule holds, kept for
//! `--findings.grace` after it clears (a storm that pauses for a window does
//! not flap), and at most `--findings.max` entries at once (the ones beyond
//! are counted, not shown).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::finding::{Finding, ProcessIdentity, Severity};

/// The processes of a finding shown, most intense first.
pub const MAX_PROCESSES_PER_FINDING: usize = 10;

/// What a shown finding is about: the labels of `slowpath_finding_info`
/// less those that may change while it holds.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct HeldKey {
    /// The rule's id (`clock_syscall_fallback`, `timer_loop`, ...).
    pub finding: &'static str,
    #[serde(flatten)]
    pub identity: ProcessIdentity,
}

/// A finding shown for one process (series).
#[derive(Clone, Debug, Serialize)]
pub struct HeldFinding {
    #[serde(flatten)]
    pub key: HeldKey,
    pub severity: Severity,
    /// The known-source row its call sites matched; empty when none did
    /// or they are not sampled yet.
    pub known_source: &'static str,
    /// When it started to hold (Unix seconds).
    pub since: f64,
    /// Whether the rule held at the last evaluation (else it is in its grace).
    pub holding: bool,
    #[serde(skip)]
    last_seen: Option<Instant>,
}

/// The shown findings and what did not fit.
pub struct Held {
    entries: BTreeMap<HeldKey, HeldFinding>,
    max: usize,
    grace: Duration,
    /// (finding, process) pairs found at the last evaluation and not shown
    /// for the cap.
    pub over_limit: usize,
}

impl Held {
    pub fn new(max: usize, grace: Duration) -> Self {
        Self {
            entries: BTreeMap::new(),
            max,
            grace,
            over_limit: 0,
        }
    }

    /// Take the findings of one evaluation at `now` (`wall`, the same
    /// instant in Unix time): new pairs start, held ones are refreshed,
    /// cleared ones stay for the grace and then go.
    pub fn update(&mut self, now: Instant, wall: SystemTime, findings: &[Finding]) {
        let unix = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.entries.values_mut().for_each(|e| e.holding = false);
        self.over_limit = 0;
        for f in findings {
            for p in f.processes.iter().take(MAX_PROCESSES_PER_FINDING) {
                let key = HeldKey {
                    finding: f.id,
                    identity: p.identity.clone(),
                };
                let full = self.entries.len() >= self.max;
                let entry = match self.entries.get_mut(&key) {
                    Some(e) => e,
                    None if full => {
                        self.over_limit += 1;
                        continue;
                    }
                    None => self.entries.entry(key.clone()).or_insert(HeldFinding {
                        key,
                        severity: f.severity,
                        known_source: "",
                        since: unix,
                        holding: true,
                        last_seen: None,
                    }),
                };
                entry.severity = f.severity;
                entry.holding = true;
                entry.last_seen = Some(now);
                // keep a source once matched: a later window may have no
                // fresh samples of the same process
                if let Some(m) = &p.known_source {
                    entry.known_source = m.row;
                }
            }
        }
        let grace = self.grace;
        self.entries.retain(|_, e| {
            e.last_seen
                .is_some_and(|seen| now.duration_since(seen) <= grace)
        });
    }

    /// The shown findings, in key order.
    pub fn shown(&self) -> impl Iterator<Item = &HeldFinding> {
        self.entries.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::ProcessRate;
    use crate::signals::test_support::delta;
    use crate::sources::CauseBasis;

    fn finding(id: &'static str, comms: &[&str]) -> Finding {
        Finding {
            id,
            severity: Severity::Warning,
            title: String::new(),
            processes: comms
                .iter()
                .map(|c| ProcessRate::of(&delta(c, |_| {}), 1.0, Default::default()))
                .collect(),
            evidence: Default::default(),
            cause: String::new(),
            fix: String::new(),
            expected_gain: None,
            cause_basis: CauseBasis::Guess { from: "x".into() },
            call_sites: None,
            sources: None,
        }
    }

    #[test]
    fn a_cleared_finding_stays_for_the_grace_then_goes() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let s = Duration::from_secs;
        let mut held = Held::new(100, s(60));
        held.update(t0, wall, &[finding("timer_loop", &["a", "b"])]);
        assert_eq!(held.shown().count(), 2);
        held.update(t0 + s(30), wall, &[finding("timer_loop", &["a"])]);
        let b = held.shown().find(|e| e.key.identity.comm == "b").unwrap();
        assert!(!b.holding, "b cleared, in its grace");
        held.update(t0 + s(61), wall, &[finding("timer_loop", &["a"])]);
        let comms: Vec<&str> = held.shown().map(|e| e.key.identity.comm.as_str()).collect();
        assert_eq!(comms, ["a"]);
    }

    #[test]
    fn findings_beyond_the_cap_are_counted_not_shown() {
        let mut held = Held::new(2, Duration::from_secs(60));
        held.update(
            Instant::now(),
            SystemTime::now(),
            &[
                finding("timer_loop", &["a", "b", "c"]),
                finding("x", &["a"]),
            ],
        );
        assert_eq!(held.shown().count(), 2);
        assert_eq!(held.over_limit, 2);
    }

    #[test]
    fn a_shown_finding_serializes_flat_with_its_identity_in_label_order() {
        let mut held = Held::new(10, Duration::from_secs(60));
        held.update(
            Instant::now(),
            SystemTime::UNIX_EPOCH,
            &[finding("x", &["a"])],
        );
        let json = serde_json::to_string(held.shown().next().unwrap()).unwrap();
        let prefix = r#"{"finding":"x","comm":"a","cgroup":"#;
        assert!(json.starts_with(prefix), "{json}");
        let keys = [
            "unit",
            "namespace",
            "pod",
            "container",
            "severity",
            "known_source",
        ];
        let at: Vec<usize> = keys
            .iter()
            .map(|k| json.find(&format!(r#""{k}":"#)).unwrap())
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{json}");
    }
}
