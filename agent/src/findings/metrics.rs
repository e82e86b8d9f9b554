//! The findings as metrics, read from what the engine last published:
//! `slowpath_finding_info` (1 per shown finding and process, with its
//! known source), `slowpath_finding_start_time_seconds`, the per-node count
//! by severity, what the cap left out, and the engine's own cost.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::held::HeldFinding;
use super::SharedFindings;
use crate::exposition::{counter, family, gauge, Family, FamilyList};
use crate::finding::Severity;

const INFO: Family = Family {
    name: "slowpath_finding_info",
    help: "1 while a finding holds for a process (and --findings.grace after it clears): finding is the rule, known_source the row of the known sources its sampled call sites matched (empty: none matched, or not sampled yet); cause and fix per known source are in the runbook and at /debug/findings",
    kind: MetricType::GAUGE,
};
const START: Family = Family {
    name: "slowpath_finding_start_time_seconds",
    help: "When the finding started to hold for this process, in Unix seconds",
    kind: MetricType::GAUGE,
};
const COUNT: Family = Family {
    name: "slowpath_findings",
    help: "Findings shown now on this node, per finding and process, by severity",
    kind: MetricType::GAUGE,
};
const OVER_LIMIT: Family = Family {
    name: "slowpath_findings_over_limit",
    help: "Findings (per finding and process) of the last evaluation not shown because --findings.max were shown",
    kind: MetricType::GAUGE,
};
const EVALUATIONS: Family = Family {
    name: "slowpath_findings_evaluations_total",
    help: "Evaluations of the findings' rules over the sliding window (--findings.window, every quarter of it)",
    kind: MetricType::COUNTER,
};
const EVALUATION_SECONDS: Family = Family {
    name: "slowpath_findings_evaluation_seconds_total",
    help: "Wall time the agent spent evaluating findings (table read, rules, symbolizing sampled stacks), in seconds",
    kind: MetricType::COUNTER,
};
const SAMPLING: Family = Family {
    name: "slowpath_findings_sampled_processes",
    help: "Processes whose user stacks are being sampled now for their findings' call sites",
    kind: MetricType::GAUGE,
};

/// The findings' families (`slowpath signals`).
pub const FAMILIES: FamilyList = FamilyList {
    defined_in: file!(),
    families: &[
        &INFO,
        &START,
        &COUNT,
        &OVER_LIMIT,
        &EVALUATIONS,
        &EVALUATION_SECONDS,
        &SAMPLING,
    ],
};

/// The collector of the findings' families.
pub struct FindingsCollector {
    shared: SharedFindings,
    descs: Vec<Desc>,
}

impl FindingsCollector {
    /// Errors: a family's name or help is not valid for Prometheus.
    pub fn new(shared: SharedFindings) -> prometheus::Result<Self> {
        let descs = FAMILIES
            .families
            .iter()
            .map(|f| Desc::new(f.name.into(), f.help.into(), vec![], Default::default()))
            .collect::<prometheus::Result<_>>()?;
        Ok(Self { shared, descs })
    }
}

/// The labels of a shown finding: its key, then `severity` and
/// `known_source` with `info`.
fn labels(h: &HeldFinding, info: bool) -> Vec<(&'static str, String)> {
    let k = &h.key;
    let mut out = vec![("finding", k.finding.to_string())];
    if info {
        out.push(("severity", severity_name(h.severity).to_string()));
        out.push(("known_source", h.known_source.to_string()));
    }
    out.extend([
        ("comm", k.identity.comm.clone()),
        ("cgroup", k.identity.cgroup.clone()),
        ("unit", k.identity.unit.clone()),
        ("namespace", k.identity.namespace.clone()),
        ("pod", k.identity.pod.clone()),
        ("container", k.identity.container.clone()),
    ]);
    out
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

impl Collector for FindingsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let p = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let info = p
            .held
            .iter()
            .map(|h| gauge(&labels(h, true), 1.0))
            .collect();
        let start = p
            .held
            .iter()
            .map(|h| gauge(&labels(h, false), h.since))
            .collect();
        let count = [Severity::Info, Severity::Warning, Severity::Critical]
            .into_iter()
            .map(|s| {
                let n = p.held.iter().filter(|h| h.severity == s).count();
                gauge(&[("severity", severity_name(s).to_string())], n as f64)
            })
            .collect();
        vec![
            family(&INFO, info),
            family(&START, start),
            family(&COUNT, count),
            family(&OVER_LIMIT, vec![gauge(&[], p.over_limit as f64)]),
            family(&EVALUATIONS, vec![counter(&[], p.evaluations as f64)]),
            family(
                &EVALUATION_SECONDS,
                vec![counter(&[], p.evaluation_seconds)],
            ),
            family(&SAMPLING, vec![gauge(&[], p.sampling as f64)]),
        ]
        .into_iter()
        .filter(|f| !f.get_metric().is_empty())
        .collect()
    }
}
