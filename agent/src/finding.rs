//! What the doctor's rules work on and produce, shared by every signal: the
//! per-process deltas of one observation, the node's facts and the signals'
//! flags, and the finding (severity, processes, evidence, cause, fix) each
//! rule may return.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::bpf::types::{sp_callsite_kind, sp_counters};
use crate::callsites::CallSite;
use crate::labels::PodLabels;
use crate::snapshot::SeriesKey;
use crate::sources::{match_sites, CauseBasis, KnownSource, SourceMatch};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// Who a process of a finding is, as the findings name it: in the doctor's
/// report and JSON, and in the labels of `slowpath_finding_info` (with the
/// finding's id). The pod's three are empty off Kubernetes, `unit` empty
/// outside a systemd unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ProcessIdentity {
    pub comm: String,
    /// The cgroup v2 path (`/system.slice/app.service`).
    pub cgroup: String,
    pub unit: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

impl ProcessIdentity {
    /// The identity of the process (series) of `d`.
    pub fn of(d: &Delta) -> Self {
        let pod = d.pod.clone().unwrap_or_default();
        Self {
            comm: d.key.comm.clone(),
            cgroup: d.key.cgroup.path.clone(),
            unit: d.key.unit().to_string(),
            namespace: pod.namespace,
            pod: pod.pod,
            container: pod.container,
        }
    }
}

/// One process in a finding.
#[derive(Debug, Serialize)]
pub struct ProcessRate {
    pub pid: u32,
    #[serde(flatten)]
    pub identity: ProcessIdentity,
    /// The finding's headline rate for this process, per second.
    pub per_second: f64,
    /// Break-down (e.g. per clock, per operation), per second unless named otherwise.
    pub detail: BTreeMap<String, f64>,
    /// Sampled user stacks at the calls this finding is about (see `callsites`).
    pub call_sites: Vec<CallSite>,
    /// The language runtime the live process runs, when a signal can tell
    /// it and has advice for it (`Signal::enrich`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeNote>,
    /// The row of the finding's known sources that a frame of `call_sites`
    /// matched (null when none did).
    pub known_source: Option<SourceMatch>,
}

/// A runtime recognised in a live process, with the fix for that runtime.
#[derive(Clone, Debug, Serialize)]
pub struct RuntimeNote {
    /// `go`, `jvm`, `node`, `python`, or a library (`sentinel-golang`).
    pub name: &'static str,
    /// How it was told (which mapping, note or string).
    pub evidence: String,
    pub fix: &'static str,
}

/// One diagnosis: which slow path, who takes it, why, and what to do.
#[derive(Debug, Serialize)]
pub struct Finding {
    pub id: &'static str,
    pub severity: Severity,
    pub title: String,
    pub processes: Vec<ProcessRate>,
    pub evidence: BTreeMap<String, String>,
    pub cause: String,
    pub fix: String,
    pub expected_gain: Option<String>,
    /// What `cause` rests on: a call site matched to a known source, the
    /// node's settings, the counters, or a guess from the op mix or rates.
    pub cause_basis: CauseBasis,
    /// Which sampled call sites show where the processes make these calls.
    #[serde(skip)]
    pub call_sites: Option<sp_callsite_kind>,
    /// The known sources the call sites are matched against, and how a
    /// matched row's cause and fix combine with the rule's.
    #[serde(skip)]
    pub sources: Option<(&'static [KnownSource], Compose)>,
}

/// How a matched row's cause and fix combine with the rule's own.
#[derive(Clone, Copy, Debug)]
pub enum Compose {
    /// The row's cause, fix and gain replace the rule's guess.
    Replace,
    /// The rule's cause and fix stay first (a node-wide fix such as the
    /// clocksource) and the row's follow, for the process it matched.
    AfterRule,
}

impl Finding {
    /// Match each process's call sites against the finding's known sources,
    /// and take the cause and fix from the first process with a match.
    pub fn explain(&mut self) {
        let Some((table, compose)) = self.sources else {
            return;
        };
        for p in &mut self.processes {
            p.known_source = match_sites(table, &p.call_sites);
        }
        let Some((pid, comm, m)) = self
            .processes
            .iter()
            .find_map(|p| Some((p.pid, p.identity.comm.clone(), p.known_source.clone()?)))
        else {
            return;
        };
        self.cause_basis = CauseBasis::CallSite { row: m.row, pid };
        match compose {
            Compose::Replace => {
                self.cause = m.cause;
                self.fix = m.fix.to_string();
            }
            Compose::AfterRule => {
                self.cause = format!("{} In {comm} (pid {pid}): {}", self.cause, m.cause);
                self.fix = format!("{} Then, in {comm}: {}", self.fix, m.fix);
            }
        }
        if let Some(gain) = m.expected_gain {
            self.expected_gain = Some(gain.to_string());
        }
    }
}

/// A process's counter growth over the observation.
#[derive(Clone, Debug)]
pub struct Delta {
    pub key: SeriesKey,
    pub pod: Option<PodLabels>,
    pub c: sp_counters,
}

impl ProcessRate {
    /// Process `d` in a finding, at `per_second` with the break-down `detail`
    /// (no call sites yet).
    pub fn of(d: &Delta, per_second: f64, detail: BTreeMap<String, f64>) -> Self {
        Self {
            pid: d.key.pid.unwrap_or(0),
            identity: ProcessIdentity::of(d),
            per_second,
            detail,
            call_sites: Vec::new(),
            runtime: None,
            known_source: None,
        }
    }
}

/// Most severe first; within a severity, the highest top rate first (the
/// sort is stable: equal findings keep the order the rules gave them).
pub fn rank(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.severity.cmp(&a.severity).then_with(|| {
            let top = |f: &Finding| f.processes.first().map_or(0.0, |p| p.per_second);
            top(b).total_cmp(&top(a))
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::test_support::delta;
    use crate::sources::tests::site;
    use crate::sources::Pattern;

    fn finding(severity: Severity, rates: &[f64]) -> Finding {
        Finding {
            id: "test",
            severity,
            title: String::new(),
            processes: rates
                .iter()
                .map(|&r| ProcessRate::of(&delta("p", |_| {}), r, BTreeMap::new()))
                .collect(),
            evidence: BTreeMap::new(),
            cause: "the rule's cause.".into(),
            fix: "the rule's fix.".into(),
            expected_gain: None,
            cause_basis: CauseBasis::Guess { from: "x".into() },
            call_sites: None,
            sources: None,
        }
    }

    #[test]
    fn findings_rank_by_severity_then_top_rate_keeping_ties_in_rule_order() {
        let mut found = vec![
            finding(Severity::Info, &[1e6]),
            finding(Severity::Warning, &[10.0]),
            finding(Severity::Critical, &[1.0]),
            finding(Severity::Warning, &[20.0, 5.0]),
            finding(Severity::Warning, &[]),
        ];
        found[4].id = "empty";
        rank(&mut found);
        let order: Vec<(Severity, f64)> = found
            .iter()
            .map(|f| {
                (
                    f.severity,
                    f.processes.first().map_or(0.0, |p| p.per_second),
                )
            })
            .collect();
        assert_eq!(
            order,
            [
                (Severity::Critical, 1.0),
                (Severity::Warning, 20.0),
                (Severity::Warning, 10.0),
                (Severity::Warning, 0.0),
                (Severity::Info, 1e6),
            ]
        );
    }

    static ROWS: &[KnownSource] = &[KnownSource {
        id: "ucontext",
        frames: &[Pattern::Function("getcontext")],
        cause: "{caller} switches contexts with getcontext.",
        fix: "use something else",
        expected_gain: Some("40 %"),
        example: ("getcontext", "/usr/lib/libc.so.6"),
    }];

    fn with_sites(compose: Compose) -> Finding {
        let mut f = finding(Severity::Warning, &[100.0, 50.0]);
        f.processes[1].pid = 7;
        f.processes[1].identity.comm = "ruby".into();
        f.processes[1].call_sites = vec![site(&[
            ("getcontext", "/usr/lib/libc.so.6"),
            ("rb_thread_switch", "/usr/bin/ruby"),
        ])];
        f.sources = Some((ROWS, compose));
        f
    }

    #[test]
    fn a_matched_call_site_replaces_the_rules_guess() {
        let mut f = with_sites(Compose::Replace);
        f.explain();
        assert!(f.processes[0].known_source.is_none());
        assert_eq!(
            f.processes[1].known_source.as_ref().unwrap().row,
            "ucontext"
        );
        assert_eq!(
            f.cause,
            "rb_thread_switch (ruby) switches contexts with getcontext."
        );
        assert_eq!(f.fix, "use something else");
        assert_eq!(f.expected_gain.as_deref(), Some("40 %"));
        assert!(matches!(
            f.cause_basis,
            CauseBasis::CallSite {
                row: "ucontext",
                pid: 7
            }
        ));
    }

    #[test]
    fn a_node_wide_cause_stays_first_and_the_row_follows() {
        let mut f = with_sites(Compose::AfterRule);
        f.explain();
        assert!(f
            .cause
            .starts_with("the rule's cause. In ruby (pid 7): rb_thread_switch"));
        assert_eq!(f.fix, "the rule's fix. Then, in ruby: use something else");
    }

    #[test]
    fn without_a_match_the_guess_stands() {
        let mut f = with_sites(Compose::Replace);
        f.processes[1].call_sites = vec![site(&[("read", "/usr/lib/libc.so.6")])];
        f.explain();
        assert_eq!(f.cause, "the rule's cause.");
        assert!(matches!(f.cause_basis, CauseBasis::Guess { .. }));
    }
}
