//! `slowpath doctor`: load the same BPF programs, observe for a while, and
//! turn the per-process deltas, the canary, a clock benchmark and the node's
//! settings into ranked findings, each with the processes involved, the
//! evidence, the likely cause, the fix and the expected gain where the cases
//! behind slowpath give one.
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
use crate::canary;
use crate::cli::Format;
use crate::finding::{rank, ClockCost, Delta, Finding, Observation};
use crate::node::NodeSettings;
use crate::procs::sub_counters;
use crate::signals::clock::{clock_name, is_vdso_clock, BENCHMARK_CLOCKS};
use crate::signals::SIGNALS;
use crate::snapshot::{SeriesKey, Snapshot};
use crate::worker::Worker;

mod text;

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub node: String,
    pub kernel: String,
    pub duration_seconds: f64,
    /// probe -> attach type (or "not attached").
    pub attach: BTreeMap<String, String>,
    pub clocksource: BTreeMap<String, String>,
    pub thp: BTreeMap<String, String>,
    pub clock_benchmark: Vec<ClockCost>,
    pub findings: Vec<Finding>,
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
    /// Timer wakeups per second that make a timer loop.
    pub timer_loop_per_sec: f64,
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
    let observed = observe(opts.duration, &interrupted);
    let after = worker.snapshot()?;
    let deltas = deltas(&before, &after, &opts.filter);
    let mut report = build_report(&after, &deltas, observed, sysfs, opts.timer_loop_per_sec);
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

/// Counter growth of every selected series of `after` since `before` (a
/// series new in `after` grew by all of its counts).
fn deltas(before: &Snapshot, after: &Snapshot, filter: &Filter) -> Vec<Delta> {
    let start: BTreeMap<_, _> = before
        .series
        .iter()
        .map(|s| ((&s.key, &s.pod), &s.counters))
        .collect();
    after
        .series
        .iter()
        .filter(|s| filter.selects(&s.key))
        .map(|s| {
            let mut c = s.counters;
            if let Some(b) = start.get(&(&s.key, &s.pod)) {
                sub_counters(&mut c, b);
            }
            Delta {
                key: s.key.clone(),
                pod: s.pod.clone(),
                c,
            }
        })
        .collect()
}

fn build_report(
    snapshot: &Snapshot,
    deltas: &[Delta],
    window: Duration,
    sysfs: &Path,
    timer_loop_per_sec: f64,
) -> Report {
    let host = |file: &str| {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    report_from(
        snapshot,
        deltas,
        window.as_secs_f64(),
        &NodeSettings::read(sysfs),
        Measured {
            bench: clock_benchmark(snapshot),
            wakeup_cost_seconds: canary::wakeup_cost(),
            timer_loop_per_sec,
            live: true,
        },
        (
            host("/proc/sys/kernel/hostname"),
            host("/proc/sys/kernel/osrelease"),
        ),
    )
}

/// What the report's rules use beyond the counters: measurements on this
/// node and the thresholds the user set.
struct Measured {
    bench: Vec<ClockCost>,
    wakeup_cost_seconds: Option<f64>,
    timer_loop_per_sec: f64,
    /// The processes still run: signals may look at them (`Signal::enrich`).
    live: bool,
}

/// The report for measured inputs and `(node, kernel)` names. Every
/// signal's rules run, in [`SIGNALS`] order.
fn report_from(
    snapshot: &Snapshot,
    deltas: &[Delta],
    secs: f64,
    node: &NodeSettings,
    measured: Measured,
    (node_name, kernel): (String, String),
) -> Report {
    let Measured {
        bench,
        wakeup_cost_seconds,
        timer_loop_per_sec,
        live,
    } = measured;
    let obs = Observation {
        deltas,
        secs,
        node,
        bench: &bench,
        timer_loop_per_sec,
        wakeup_cost_seconds,
    };
    let mut findings = Vec::new();
    for signal in SIGNALS {
        let mut found = (signal.diagnose)(&obs);
        if let Some(enrich) = signal.enrich.filter(|_| live) {
            found.iter_mut().for_each(enrich);
        }
        findings.extend(found);
    }
    rank(&mut findings);
    let (cs, thp) = (&node.clocksources, &node.thp);
    Report {
        schema_version: 1,
        node: node_name,
        kernel,
        duration_seconds: secs,
        attach: snapshot
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
            .collect(),
        clocksource: BTreeMap::from([
            ("current".into(), cs.current.clone().unwrap_or_default()),
            ("available".into(), cs.available.join(" ")),
        ]),
        thp: BTreeMap::from([
            ("enabled".into(), thp.enabled.clone().unwrap_or_default()),
            ("defrag".into(), thp.defrag.clone().unwrap_or_default()),
        ]),
        clock_benchmark: bench,
        findings,
    }
}

/// ns per read through libc and through the raw syscall, per clock of
/// [`BENCHMARK_CLOCKS`], with the canary's verdict where it has one.
fn clock_benchmark(snapshot: &Snapshot) -> Vec<ClockCost> {
    BENCHMARK_CLOCKS
        .iter()
        .map(|&clock| {
            clock_cost(
                snapshot,
                clock,
                canary::time_reads(clock) * 1e9,
                canary::time_raw_reads(clock) * 1e9,
            )
        })
        .collect()
}

fn clock_cost(
    snapshot: &Snapshot,
    clock: crate::bpf::types::sp_clock,
    libc_ns: f64,
    syscall_ns: f64,
) -> ClockCost {
    ClockCost {
        clock: clock_name(clock),
        libc_ns,
        syscall_ns,
        vdso_clock: is_vdso_clock(clock),
        fell_back: snapshot
            .canary
            .iter()
            .find(|c| c.clock == clock)
            .and_then(|c| c.fell_back),
        id: clock,
    }
}

/// The report of an observation of `secs` seconds between two recorded
/// snapshots, with a fixed clock benchmark (golden tests).
#[cfg(test)]
pub fn golden_report(
    before: &Snapshot,
    after: &Snapshot,
    secs: f64,
    sysfs: &Path,
    filter: Filter,
) -> Report {
    let bench = BENCHMARK_CLOCKS
        .iter()
        .enumerate()
        .map(|(i, &clock)| clock_cost(after, clock, 20.0 + i as f64, 150.0 + 10.0 * i as f64))
        .collect();
    let deltas = deltas(before, after, &filter);
    report_from(
        after,
        &deltas,
        secs,
        &NodeSettings::read(sysfs),
        Measured {
            bench,
            wakeup_cost_seconds: Some(8e-6),
            timer_loop_per_sec: crate::signals::timer::DEFAULT_LOOP_PER_SEC,
            live: false,
        },
        ("node-1".into(), "6.1.0-test".into()),
    )
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
