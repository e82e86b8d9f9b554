//! `slowpath doctor`: load the same BPF programs, observe for a while, and
//! turn the per-process deltas and the node's facts (each signal's settings,
//! checks and measurements: the clocksource, the canary, a clock benchmark,
//! ...) into ranked findings (the diagnosis engine, `crate::diagnosis`),
//! each with the processes involved, the evidence, the likely cause, the fix
//! and the expected gain where the cases behind slowpath give one.
//!
//! The JSON output (`--format json`) is a stable schema, version 1:
//! `{schema_version, node, kernel, duration_seconds, attach, clocksource,
//! thp, clock_benchmark[], findings[]}`; each finding is `{id, severity
//! (info|warning|critical), title, processes[{pid, comm, cgroup, unit,
//! namespace, pod, container, per_second, detail, call_sites[], runtime,
//! known_source}], evidence{}, cause, fix, expected_gain, cause_basis}`.
//! `known_source` is the row of the signal's known sources a frame of the
//! process's call sites matched (`{row, frame, frame_index, recovered_by,
//! cause, fix, expected_gain}`, or null); `cause_basis` says what the cause
//! rests on: `{kind: call_site, row, pid}`, or without a matching frame
//! `{kind: node_settings|counters|guess, from}`. Findings are sorted by
//! severity, then by rate.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use blazesym::symbolize::Symbolizer;
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::callsites;
use crate::callsites::tables::{RawCallSite, StackTables};
use crate::cli::Format;
use crate::diagnosis;
use crate::finding::{Delta, Finding};
use crate::node::NodeFacts;
use crate::signals::{Observation, SignalArgs};
use crate::snapshot::{SeriesKey, Snapshot};
use crate::worker::Worker;

mod text;

#[derive(Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub node: String,
    pub kernel: String,
    pub duration_seconds: f64,
    /// probe -> attach type (or "not attached").
    pub attach: BTreeMap<String, String>,
    /// Each node fact the report shows, under its own key (`clocksource`,
    /// `thp`, `clock_benchmark`, ...), in the order gathered.
    #[serde(flatten)]
    pub node_facts: NodeSections,
    pub findings: Vec<Finding>,
    /// What slowpath's own programs cost in the kernel during the
    /// observation; absent when the kernel did not measure it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_cost: Option<OwnCost>,
}

/// slowpath's own in-kernel cost over an observation (`bpf::CostMeter`: the
/// runs its programs counted, at the time per run the kernel measured in a
/// statistics window at the end of the observation, or, where the
/// statistics are not allowed, that the programs' own timing gave then).
#[derive(Serialize)]
pub struct OwnCost {
    /// In-kernel time of all its programs over wall time: 0.01 is 1 % of
    /// one CPU.
    pub cpu_share: f64,
    /// `measured` (the kernel's statistics) or `estimated` (the programs'
    /// own timing of one run in 1,024), as the metric's `method` label.
    pub method: &'static str,
    /// Each measured hook, in probe order.
    pub probes: Vec<ProbeRunCost>,
}

/// One hook's part of [`OwnCost`].
#[derive(Serialize)]
pub struct ProbeRunCost {
    pub probe: String,
    /// Runs during the observation, all CPUs.
    pub runs: u64,
    /// In-kernel ns per run (bpf_prog_info run_time_ns / run_cnt, or the
    /// estimate: see [`OwnCost::method`]).
    pub ns_per_run: f64,
}

/// The own cost between two snapshots `secs` apart, from the probes whose
/// time per run was measured by `after`.
fn own_cost(before: &Snapshot, after: &Snapshot, secs: f64) -> Option<OwnCost> {
    let probes: Vec<ProbeRunCost> = after
        .probe_costs
        .iter()
        .filter_map(|c| {
            let seconds = c.run_seconds?;
            let start = before.probe_costs.iter().find(|b| b.probe == c.probe);
            let runs = c.runs - start.map_or(0, |b| b.runs.min(c.runs));
            let ns_per_run = if c.runs == 0 {
                0.0
            } else {
                seconds * 1e9 / c.runs as f64
            };
            Some(ProbeRunCost {
                probe: c.probe.to_string(),
                runs,
                ns_per_run,
            })
        })
        .collect();
    if probes.is_empty() || secs <= 0.0 {
        return None;
    }
    let ns: f64 = probes.iter().map(|p| p.runs as f64 * p.ns_per_run).sum();
    Some(OwnCost {
        cpu_share: ns / 1e9 / secs,
        method: after.probe_costs.first()?.method.label(),
        probes,
    })
}

/// The node facts of a report, serialized as one entry per fact that has a
/// report section ([`NodeFact::report`](crate::node::NodeFact::report)).
pub struct NodeSections(pub NodeFacts);

impl Serialize for NodeSections {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.0.iter().filter_map(|f| f.report()) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Which processes the report is about (`--pid`, `--comm`, `--cgroup`);
/// all of them by default.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this tgid.
    pub pid: Option<u32>,
    /// Only processes with this comm.
    pub comm: Option<String>,
    /// Only processes in this cgroup v2 path or below it.
    pub cgroup: Option<String>,
}

impl Filter {
    /// Whether the series `key` is one of the processes asked about.
    pub fn selects(&self, key: &SeriesKey) -> bool {
        if self.pid.is_some_and(|pid| key.pid != Some(pid)) {
            return false;
        }
        if self.comm.as_deref().is_some_and(|comm| key.comm != comm) {
            return false;
        }
        if let Some(cg) = self.cgroup.as_deref() {
            let path = key.cgroup.path.as_str();
            let cg = cg.trim_end_matches('/');
            if path != cg && !path.starts_with(&format!("{cg}/")) {
                return false;
            }
        }
        true
    }
}

/// What `slowpath doctor` was asked for.
#[derive(Clone, Debug)]
pub struct DoctorOptions {
    /// How long to observe (Ctrl-C or SIGTERM ends it early).
    pub duration: Duration,
    pub filter: Filter,
    pub format: Format,
    /// The signals' flags (thresholds).
    pub args: SignalArgs,
}

/// Run the doctor: observe with `worker`, print the report, with the call
/// sites sampled in `stacks`.
pub fn run(
    worker: &Worker,
    stacks: Option<&StackTables>,
    opts: &DoctorOptions,
    sysfs: &Path,
) -> Result<()> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone())
            .context("installing the SIGINT/SIGTERM handler")?;
    }
    let before = worker.snapshot()?;
    // from here on every event counts: a script can start its workload at
    // this line (shown with `--log.level=debug`: the doctor logs warnings
    // alone by default)
    tracing::info!(duration = ?opts.duration, "observing");
    let observed = observe(opts.duration, &interrupted);
    let after = worker.snapshot()?;
    let deltas = deltas(&before, &after, &opts.filter);
    let mut report = build_report(&after, &deltas, observed, sysfs, &opts.args);
    report.own_cost = own_cost(&before, &after, observed.as_secs_f64());
    attach_call_sites(
        &mut report,
        &stacks.map(StackTables::read).unwrap_or_default(),
    );
    match opts.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text => text::print(&report, std::io::stdout().is_terminal()),
    }
    Ok(())
}

/// Symbolize the call sites of the processes findings name (the top ten of
/// each), while they still run, and match them against each finding's
/// known sources (`Finding::explain`).
fn attach_call_sites(report: &mut Report, raw: &[RawCallSite]) {
    let symbolizer = Symbolizer::new();
    for finding in &mut report.findings {
        let Some(kind) = finding.call_sites else {
            continue;
        };
        for p in finding.processes.iter_mut().take(10) {
            p.call_sites = callsites::for_process(&symbolizer, raw, p.pid, kind);
        }
        finding.explain();
    }
}

/// Sleep for `duration`, with a countdown on a terminal, or until
/// `interrupted` (Ctrl-C or SIGTERM: the report covers the time observed).
/// Returns the time observed.
fn observe(duration: Duration, interrupted: &AtomicBool) -> Duration {
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let end = start + duration;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        if interrupted.load(Ordering::Relaxed) {
            break;
        }
        if tty {
            eprint!(
                "\rslowpath doctor: observing, {:>3} s left ",
                left.as_secs() + 1
            );
            let _ = std::io::stderr().flush();
        }
        std::thread::sleep(left.min(Duration::from_millis(250)));
    }
    if tty {
        eprint!("\r{:50}\r", "");
    }
    start.elapsed().min(duration)
}

/// Counter growth of the series `filter` selects (`diagnosis::deltas`).
fn deltas(before: &Snapshot, after: &Snapshot, filter: &Filter) -> Vec<Delta> {
    diagnosis::deltas(before, after, |key| filter.selects(key))
}

fn build_report(
    snapshot: &Snapshot,
    deltas: &[Delta],
    window: Duration,
    sysfs: &Path,
    args: &SignalArgs,
) -> Report {
    let host = |file: &str| {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let node = diagnosis::node_facts(snapshot, sysfs, args, true);
    let observation = Observation {
        deltas,
        secs: window.as_secs_f64(),
        node: &node,
        args,
    };
    let names = (
        host("/proc/sys/kernel/hostname"),
        host("/proc/sys/kernel/osrelease"),
    );
    report_from(snapshot, &observation, true, names)
}

/// The report of `obs` and `(node, kernel)` names: the findings of the
/// diagnosis engine (`diagnosis::diagnose`, with `live` as there).
pub(crate) fn report_from(
    snapshot: &Snapshot,
    obs: &Observation<'_>,
    live: bool,
    (node_name, kernel): (String, String),
) -> Report {
    let findings = diagnosis::diagnose(obs, live);
    Report {
        schema_version: 1,
        node: node_name,
        kernel,
        duration_seconds: obs.secs,
        attach: attach_table(snapshot),
        node_facts: NodeSections(obs.node.clone()),
        findings,
        own_cost: None,
    }
}

/// probe -> attach type, or "not attached".
fn attach_table(snapshot: &Snapshot) -> BTreeMap<String, String> {
    snapshot
        .probes
        .iter()
        .map(|p| {
            let how = if p.attached() {
                p.attach_type.to_string()
            } else {
                "not attached".to_string()
            };
            (p.probe.to_string(), how)
        })
        .collect()
}

/// Counter growth of every selected series of `after` since `before`
/// (golden tests).
#[cfg(test)]
pub(crate) fn deltas_between(before: &Snapshot, after: &Snapshot, filter: &Filter) -> Vec<Delta> {
    deltas(before, after, filter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Cgroup;

    #[test]
    fn filters_select_processes() {
        let args = |pid, comm: Option<&str>, cgroup: Option<&str>| Filter {
            pid,
            cgroup: cgroup.map(String::from),
            comm: comm.map(String::from),
        };
        let key = SeriesKey {
            pid: Some(42),
            comm: "java".to_string(),
            cgroup: Cgroup::new("/system.slice/app.service".to_string()),
        };
        assert!(args(Some(42), None, None).selects(&key));
        assert!(!args(Some(7), None, None).selects(&key));
        assert!(args(None, Some("java"), Some("/system.slice")).selects(&key));
        assert!(!args(None, None, Some("/system")).selects(&key));
    }
}
