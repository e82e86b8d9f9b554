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
//! namespace, pod, container, per_second, detail}], evidence{}, cause, fix,
//! expected_gain}`. Findings are sorted by severity, then by rate.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};

use blazesym::symbolize::Symbolizer;

use crate::bpf::types::sp_counters;
use crate::callsites::{self, CallSite};
use crate::canary;
use crate::cli::{DoctorArgs, Format};
use crate::labels::{cumulative_buckets, is_vdso_clock, CLOCK_NAMES, SLEEP_BUCKET_BOUNDS};
use crate::node;
use crate::procs::sub_counters;
use crate::stack_tables::{RawCallSite, StackTables};
use crate::worker::{Snapshot, Worker};

/// Clocksources the vDSO cannot read (x86: only tsc, kvm-clock, hyperv have a
/// vDSO read path; these fall back to a syscall for every read).
const NON_VDSO_CLOCKSOURCES: [&str; 4] = ["xen", "hpet", "acpi_pm", "jiffies"];

// Doctor thresholds: more sensitive than the alerts (it is run when someone
// is already looking), high enough that an idle node reports nothing.
const VDSO_BYPASS_PER_SEC: f64 = 1000.0;
const CPU_CLOCKS_PER_SEC: f64 = 50_000.0;
const SIGPROCMASK_PER_SEC: f64 = 10_000.0;
const SHORT_SLEEPS_PER_SEC: f64 = 200.0;
const DIRECT_COMPACTION_RATIO: f64 = 0.01;
const THP_FALLBACK_RATIO: f64 = 0.3;
const THP_FAULTS_PER_SEC: f64 = 1.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// One process in a finding.
#[derive(Debug, Serialize)]
pub struct ProcessRate {
    pub pid: u32,
    pub comm: String,
    pub cgroup: String,
    pub unit: String,
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The finding's headline rate for this process, per second.
    pub per_second: f64,
    /// Break-down (e.g. per clock, per operation), per second unless named otherwise.
    pub detail: BTreeMap<String, f64>,
    /// Sampled user stacks at the calls this finding is about (see `callsites`).
    pub call_sites: Vec<CallSite>,
}

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
}

/// ns per read of one clock, through libc and through the raw syscall.
#[derive(Debug, Serialize)]
pub struct ClockCost {
    pub clock: &'static str,
    pub libc_ns: f64,
    pub syscall_ns: f64,
    /// Whether the vDSO should serve this clock.
    pub vdso_clock: bool,
    /// Whether the agent's libc reads of it entered the kernel.
    pub fell_back: Option<bool>,
}

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

impl From<&DoctorArgs> for Filter {
    fn from(args: &DoctorArgs) -> Self {
        Self {
            pid: args.pid,
            comm: args.comm.clone(),
            cgroup: args.cgroup.clone(),
        }
    }
}

/// A process's counter deltas over the observation.
struct Delta {
    labels: BTreeMap<&'static str, String>,
    c: sp_counters,
}

/// Run the doctor: observe with `worker`, print the report, with the call
/// sites sampled in `stacks`.
pub fn run(
    worker: &Worker,
    stacks: Option<&StackTables>,
    args: &DoctorArgs,
    sysfs: &Path,
) -> Result<()> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone())
            .context("installing the SIGINT/SIGTERM handler")?;
    }
    let before = worker.snapshot()?;
    let observed = observe(args.duration, &interrupted);
    let after = worker.snapshot()?;
    let deltas = deltas(&before, &after, &Filter::from(args));
    let mut report = build_report(&after, &deltas, observed, sysfs);
    attach_call_sites(
        &mut report,
        &stacks.map(StackTables::read).unwrap_or_default(),
    );
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Format::Text => print_text(&report, std::io::stdout().is_terminal()),
    }
    Ok(())
}

/// Which sampled calls a finding is about (`enum sp_callsite_kind`).
fn callsite_kind(finding: &str) -> Option<u32> {
    match finding {
        "clocksource_not_vdso_capable" | "vdso_bypass" | "cpu_time_clocks" => Some(0),
        "rt_sigprocmask_storm" => Some(1),
        "sleep_loop" => Some(2),
        _ => None,
    }
}

/// Symbolize the call sites of the processes findings name (the top ten of
/// each), while they still run.
fn attach_call_sites(report: &mut Report, raw: &[RawCallSite]) {
    let symbolizer = Symbolizer::new();
    for finding in &mut report.findings {
        let Some(kind) = callsite_kind(finding.id) else {
            continue;
        };
        for p in finding.processes.iter_mut().take(10) {
            p.call_sites = callsites::for_process(&symbolizer, raw, p.pid, kind);
        }
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

fn label_map(labels: &[(&'static str, String)]) -> BTreeMap<&'static str, String> {
    labels.iter().cloned().collect()
}

fn deltas(before: &Snapshot, after: &Snapshot, filter: &Filter) -> Vec<Delta> {
    let mut start: BTreeMap<Vec<(&str, String)>, sp_counters> = BTreeMap::new();
    for s in &before.series {
        start.insert(s.labels.clone(), s.counters);
    }
    after
        .series
        .iter()
        .filter(|s| selected(&label_map(&s.labels), filter))
        .map(|s| {
            let mut c = s.counters;
            if let Some(b) = start.get(&s.labels) {
                sub_counters(&mut c, b);
            }
            Delta {
                labels: label_map(&s.labels),
                c,
            }
        })
        .collect()
}

fn selected(labels: &BTreeMap<&'static str, String>, args: &Filter) -> bool {
    let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
    if args.pid.is_some_and(|pid| get("pid") != pid.to_string()) {
        return false;
    }
    if args.comm.as_deref().is_some_and(|comm| get("comm") != comm) {
        return false;
    }
    if let Some(cg) = args.cgroup.as_deref() {
        let path = get("cgroup");
        let cg = cg.trim_end_matches('/');
        if path != cg && !path.starts_with(&format!("{cg}/")) {
            return false;
        }
    }
    true
}

fn process(d: &Delta, per_second: f64, detail: BTreeMap<String, f64>) -> ProcessRate {
    let get = |k: &str| d.labels.get(k).cloned().unwrap_or_default();
    ProcessRate {
        pid: get("pid").parse().unwrap_or(0),
        comm: get("comm"),
        cgroup: get("cgroup"),
        unit: get("unit"),
        namespace: get("namespace"),
        pod: get("pod"),
        container: get("container"),
        per_second,
        detail,
        call_sites: Vec::new(),
    }
}

fn build_report(snapshot: &Snapshot, deltas: &[Delta], window: Duration, sysfs: &Path) -> Report {
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
        sysfs,
        clock_benchmark(snapshot),
        (
            host("/proc/sys/kernel/hostname"),
            host("/proc/sys/kernel/osrelease"),
        ),
    )
}

/// The report for measured inputs: `bench` from [`clock_benchmark`],
/// `(node, kernel)` names.
fn report_from(
    snapshot: &Snapshot,
    deltas: &[Delta],
    secs: f64,
    sysfs: &Path,
    bench: Vec<ClockCost>,
    (node_name, kernel): (String, String),
) -> Report {
    let cs = node::read_clocksources(sysfs);
    let thp = node::read_thp_settings(sysfs);
    let mut findings = Vec::new();
    findings.extend(clocksource_finding(&cs, &bench, deltas, secs));
    let node_falls_back = findings
        .iter()
        .any(|f| f.id == "clocksource_not_vdso_capable");
    findings.extend(vdso_bypass_finding(deltas, secs, node_falls_back));
    findings.extend(cpu_clock_finding(deltas, secs));
    findings.extend(sigprocmask_finding(deltas, secs));
    findings.extend(sleep_loop_finding(deltas, secs));
    findings.extend(compaction_finding(deltas, secs, &thp));
    findings.extend(thp_finding(deltas, secs, &thp));
    findings.sort_by(|a, b| {
        b.severity.cmp(&a.severity).then_with(|| {
            let top = |f: &Finding| f.processes.first().map_or(0.0, |p| p.per_second);
            top(b).total_cmp(&top(a))
        })
    });
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

/// ns per read through libc and through the raw syscall, per clock the
/// vDSO serves plus the two CPU-time clocks (the seeds' TimeBench).
fn clock_benchmark(snapshot: &Snapshot) -> Vec<ClockCost> {
    let clocks = [0usize, 1, 4, 5, 6, 7, 10, 2, 3];
    clocks
        .iter()
        .map(|&clock| ClockCost {
            clock: CLOCK_NAMES[clock],
            libc_ns: canary::time_reads(clock) * 1e9,
            syscall_ns: canary::time_raw_reads(clock) * 1e9,
            vdso_clock: is_vdso_clock(clock),
            fell_back: snapshot
                .canary
                .iter()
                .find(|c| c.clock == clock)
                .and_then(|c| c.fell_back),
        })
        .collect()
}

/// Per-process fallback (`vdso` true) or CPU-clock (`vdso` false) reads per second, by clock.
fn clock_rates(d: &Delta, secs: f64, vdso: bool) -> (f64, BTreeMap<String, f64>) {
    let mut detail = BTreeMap::new();
    for (i, &n) in d.c.clock_gettime.iter().enumerate() {
        if n > 0 && is_vdso_clock(i) == vdso {
            detail.insert(format!("clock_gettime/{}", CLOCK_NAMES[i]), n as f64 / secs);
        }
    }
    if vdso {
        for (name, n) in [("gettimeofday", d.c.gettimeofday), ("time", d.c.time)] {
            if n > 0 {
                detail.insert(name.into(), n as f64 / secs);
            }
        }
    }
    (detail.values().sum(), detail)
}

/// The processes `rate` picks (rate per second and break-down), highest first.
fn ranked(
    deltas: &[Delta],
    mut rate: impl FnMut(&Delta) -> Option<(f64, BTreeMap<String, f64>)>,
) -> Vec<ProcessRate> {
    let mut processes: Vec<ProcessRate> = deltas
        .iter()
        .filter_map(|d| rate(d).map(|(per_second, detail)| process(d, per_second, detail)))
        .collect();
    processes.sort_by(|a, b| b.per_second.total_cmp(&a.per_second));
    processes
}

fn clocksource_finding(
    cs: &node::Clocksources,
    bench: &[ClockCost],
    deltas: &[Delta],
    secs: f64,
) -> Option<Finding> {
    let current = cs.current.clone().unwrap_or_default();
    let canary_fell_back = bench
        .iter()
        .any(|c| c.vdso_clock && c.fell_back == Some(true));
    if !canary_fell_back && !NON_VDSO_CLOCKSOURCES.contains(&current.as_str()) {
        return None;
    }
    let mono = bench.iter().find(|c| c.clock == "monotonic");
    let processes = ranked(deltas, |d| {
        let (rate, detail) = clock_rates(d, secs, true);
        (rate > 0.0).then_some((rate, detail))
    });
    let tsc = cs.available.iter().any(|c| c == "tsc");
    let mut evidence = BTreeMap::from([
        ("current_clocksource".to_string(), current.clone()),
        ("available_clocksources".to_string(), cs.available.join(" ")),
        (
            "canary".to_string(),
            if canary_fell_back {
                "the agent's own libc clock reads entered the kernel".into()
            } else {
                "not measured as falling back".into()
            },
        ),
    ]);
    if let Some(m) = mono {
        evidence.insert(
            "libc_clock_gettime_monotonic_ns".into(),
            format!("{:.0}", m.libc_ns),
        );
    }
    Some(Finding {
        id: "clocksource_not_vdso_capable",
        severity: Severity::Critical,
        title: format!("clocksource {current} is not vDSO-capable: every clock read is a system call"),
        processes,
        evidence,
        cause: format!(
            "The vDSO cannot read the {current} clocksource, so clock_gettime(), gettimeofday() and \
             time() enter the kernel in every process on this node."
        ),
        fix: if tsc {
            "Where the TSC is reliable: echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource; \
             persist with clocksource=tsc tsc=reliable on the kernel command line."
                .into()
        } else {
            "tsc is not available on this node: check why the kernel marked it unstable (dmesg), \
             or move to an instance type with an invariant TSC."
                .into()
        },
        expected_gain: Some(
            "Netflix (Cassandra on Xen EC2): 30 % less CPU, 43 % lower write latency after switching to tsc; \
             a Java loop of 100M currentTimeMillis() went from 68 s to 3.3 s."
                .into(),
        ),
    })
}

fn vdso_bypass_finding(deltas: &[Delta], secs: f64, node_falls_back: bool) -> Option<Finding> {
    if node_falls_back {
        return None; // the clocksource finding covers every process
    }
    let processes = ranked(deltas, |d| {
        let (rate, detail) = clock_rates(d, secs, true);
        (rate >= VDSO_BYPASS_PER_SEC).then_some((rate, detail))
    });
    let top = processes.first()?;
    Some(Finding {
        id: "vdso_bypass",
        severity: Severity::Warning,
        title: format!(
            "{} process(es) read the clock through system calls although the vDSO works (top: {} at {:.0}/s)",
            processes.len(),
            top.comm,
            top.per_second
        ),
        evidence: BTreeMap::from([(
            "node".to_string(),
            "the clocksource is vDSO-capable and the canary does not fall back".to_string(),
        )]),
        processes,
        cause: "These processes call the clock_gettime/gettimeofday/time system calls directly: a \
                statically linked binary with an old libc, a seccomp or sandbox layer, a runtime \
                that issues syscall(SYS_clock_gettime), or a tracer."
            .into(),
        fix: "Rebuild against a libc that uses the vDSO, drop the sandbox rule that forces the \
              syscall, or cache the time in the application."
            .into(),
        expected_gain: Some("about 150 ns per read on bare metal, ~2 us on Xen (30 ns via the vDSO)".into()),
    })
}

fn cpu_clock_finding(deltas: &[Delta], secs: f64) -> Option<Finding> {
    let processes = ranked(deltas, |d| {
        let (rate, detail) = clock_rates(d, secs, false);
        (rate >= CPU_CLOCKS_PER_SEC).then_some((rate, detail))
    });
    processes.first()?;
    Some(Finding {
        id: "cpu_time_clocks",
        severity: Severity::Info,
        title: "heavy use of CPU-time clocks, which always enter the kernel".into(),
        evidence: BTreeMap::new(),
        processes,
        cause: "CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID and pthread_getcpuclockid() \
                clocks are never served by the vDSO (profilers, per-request CPU accounting)."
            .into(),
        fix: "Sample CPU time less often, or use CLOCK_MONOTONIC where wall time is enough.".into(),
        expected_gain: None,
    })
}

fn sigprocmask_finding(deltas: &[Delta], secs: f64) -> Option<Finding> {
    let names = crate::labels::SIGMASK_OPS;
    let mut getcontext = false;
    let processes = ranked(deltas, |d| {
        let total: u64 = d.c.sigprocmask.iter().sum();
        let rate = total as f64 / secs;
        if rate < SIGPROCMASK_PER_SEC {
            return None;
        }
        let (query, setmask) = (d.c.sigprocmask[3] as f64, d.c.sigprocmask[2] as f64);
        // getcontext() queries, setcontext() sets: equal halves
        if query > 0.4 * total as f64 && (query - setmask).abs() <= 0.1 * query {
            getcontext = true;
        }
        let detail = names
            .iter()
            .zip(d.c.sigprocmask)
            .filter(|(_, n)| *n > 0)
            .map(|(op, n)| (op.to_string(), n as f64 / secs))
            .collect();
        Some((rate, detail))
    });
    let top = processes.first()?;
    let (cause, fix) = if getcontext {
        (
            "query and setmask at the same rate: the glibc getcontext()/setcontext() signature \
             (each makes one rt_sigprocmask call), as in Ruby 1.8.7 built with --enable-pthread."
                .to_string(),
            "Rebuild the runtime without the option that switches threads with \
             getcontext/setcontext (Ruby: without --enable-pthread), or move context switching \
             off ucontext."
                .to_string(),
        )
    } else {
        (
            "Signal masks changed around short critical sections at a high rate.".to_string(),
            "Move the masking out of the hot loop.".to_string(),
        )
    };
    Some(Finding {
        id: "rt_sigprocmask_storm",
        severity: Severity::Warning,
        title: format!("{} makes {:.0} rt_sigprocmask calls/s", top.comm, top.per_second),
        evidence: BTreeMap::from([(
            "getcontext_setcontext_signature".to_string(),
            getcontext.to_string(),
        )]),
        processes,
        cause,
        fix,
        expected_gain: getcontext.then(|| {
            "Ruby 1.8.7 ran ~40 % faster without --enable-pthread (20M rt_sigprocmask calls gone)".to_string()
        }),
    })
}

fn sleep_loop_finding(deltas: &[Delta], secs: f64) -> Option<Finding> {
    let processes = ranked(deltas, |d| {
        let mut short = 0u64;
        let mut detail = BTreeMap::new();
        for buckets in &d.c.sleep_buckets {
            let (finite, total) = cumulative_buckets(buckets);
            short += finite[3].1; // requests of 1 ms or less
            if total > 0 {
                for (i, &n) in buckets.iter().enumerate() {
                    if n > 0 {
                        let le = SLEEP_BUCKET_BOUNDS
                            .get(i)
                            .map_or("+Inf".to_string(), |b| format!("{b}"));
                        *detail.entry(format!("le_{le}_s")).or_insert(0.0) += n as f64 / secs;
                    }
                }
            }
        }
        let rate = short as f64 / secs;
        (rate >= SHORT_SLEEPS_PER_SEC).then_some((rate, detail))
    });
    let top = processes.first()?;
    Some(Finding {
        id: "sleep_loop",
        severity: Severity::Warning,
        title: format!(
            "{} sleeps 1 ms or less {:.0} times/s",
            top.comm, top.per_second
        ),
        evidence: BTreeMap::from([(
            "requested_durations".to_string(),
            "per-bucket sleeps per second in each process's detail (le_<bound>_s)".to_string(),
        )]),
        processes,
        cause: "A short periodic sleep (a ticker) wakes the process up hundreds of times per \
                second even when it has nothing to do, as sentinel-golang's 1 ms time.Sleep ticker did in MOSN."
            .into(),
        fix: "Use a coarser tick, arm the timer only when there is work, or batch the periodic work."
            .into(),
        expected_gain: Some(
            "MOSN: removing the 1 ms ticker saved 0.7 % CPU on every idle pod of the fleet".into(),
        ),
    })
}

fn compaction_finding(deltas: &[Delta], secs: f64, thp: &node::ThpSettings) -> Option<Finding> {
    let processes = ranked(deltas, |d| {
        let ratio = d.c.compaction_ns[0] as f64 / 1e9 / secs;
        let detail = BTreeMap::from([
            (
                "direct_runs_per_second".to_string(),
                d.c.compaction_runs[0] as f64 / secs,
            ),
            (
                "thp_fault_allocs_per_second".to_string(),
                d.c.thp_fault_alloc as f64 / secs,
            ),
        ]);
        (ratio >= DIRECT_COMPACTION_RATIO).then_some((ratio, detail))
    });
    let top = processes.first()?;
    let defrag = thp.defrag.clone().unwrap_or_default();
    Some(Finding {
        id: "direct_compaction_stalls",
        severity: Severity::Warning,
        title: format!(
            "{} spends {:.1} % of its time in direct compaction",
            top.comm,
            top.per_second * 100.0
        ),
        evidence: thp_evidence(thp),
        processes,
        cause: "Allocations of high-order pages (transparent huge pages above all) find memory \
                fragmented and compact it synchronously, inside the process."
            .into(),
        fix: if defrag == "always" {
            "defrag is \"always\": echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag \
             (compaction in the background, synchronous only for madvise regions)."
                .into()
        } else {
            "Make compaction asynchronous (defrag defer or defer+madvise), or limit THP to \
             programs that ask for it (enabled=madvise)."
                .into()
        },
        expected_gain: Some(
            "php-fpm under load with THP enabled=always: turning THP off halved system time".into(),
        ),
    })
}

fn thp_finding(deltas: &[Delta], secs: f64, thp: &node::ThpSettings) -> Option<Finding> {
    let processes = ranked(deltas, |d| {
        let (allocs, fallbacks) = (d.c.thp_fault_alloc as f64, d.c.thp_fault_fallback as f64);
        let rate = (allocs + fallbacks) / secs;
        if rate < THP_FAULTS_PER_SEC {
            return None;
        }
        let detail = BTreeMap::from([
            ("allocs_per_second".to_string(), allocs / secs),
            ("fallbacks_per_second".to_string(), fallbacks / secs),
            (
                "fallback_ratio".to_string(),
                fallbacks / (allocs + fallbacks),
            ),
        ]);
        Some((rate, detail))
    });
    processes.first()?;
    let fallbacks: f64 = processes
        .iter()
        .map(|p| p.detail["fallbacks_per_second"])
        .sum();
    let total: f64 = processes.iter().map(|p| p.per_second).sum();
    let ratio = fallbacks / total;
    let enabled = thp.enabled.clone().unwrap_or_default();
    let (severity, cause, fix) = if ratio >= THP_FALLBACK_RATIO {
        (
            Severity::Warning,
            format!(
                "{:.0} % of THP fault allocations fail: memory is fragmented, processes pay for the \
                 attempts without getting huge pages.",
                ratio * 100.0
            ),
            "Make compaction asynchronous (defrag defer+madvise) or reserve huge pages (hugetlbfs) \
             for the programs that need them."
                .to_string(),
        )
    } else {
        (
            Severity::Info,
            format!("Processes fault in transparent huge pages (enabled={enabled})."),
            if enabled == "always" {
                "Fine for programs that use large heaps; if system time is high or latency spikes \
                 under load, try enabled=madvise so only programs that ask get huge pages."
                    .to_string()
            } else {
                "No action needed while fallbacks stay rare and direct compaction stays low."
                    .to_string()
            },
        )
    };
    Some(Finding {
        id: "thp_faults",
        severity,
        title: format!(
            "THP fault allocations at {total:.0}/s, {:.0} % falling back",
            ratio * 100.0
        ),
        evidence: thp_evidence(thp),
        processes,
        cause,
        fix,
        expected_gain: None,
    })
}

fn thp_evidence(thp: &node::ThpSettings) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "thp_enabled".to_string(),
            thp.enabled.clone().unwrap_or_default(),
        ),
        (
            "thp_defrag".to_string(),
            thp.defrag.clone().unwrap_or_default(),
        ),
    ])
}

/// The report for a terminal: colour only on a TTY.
fn print_text(r: &Report, colour: bool) {
    let paint = |s: &str, code: &str| {
        if colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    println!(
        "slowpath doctor: {} (kernel {}), observed {:.0} s",
        r.node, r.kernel, r.duration_seconds
    );
    println!(
        "clocksource {} (available: {}); THP enabled={} defrag={}",
        r.clocksource["current"], r.clocksource["available"], r.thp["enabled"], r.thp["defrag"]
    );
    println!();
    if r.findings.is_empty() {
        println!(
            "{}",
            paint(
                "No findings: nothing on this node falls off the fast paths slowpath watches.",
                "32"
            )
        );
    }
    for (i, f) in r.findings.iter().enumerate() {
        let sev = match f.severity {
            Severity::Critical => paint("CRITICAL", "1;31"),
            Severity::Warning => paint("WARNING", "33"),
            Severity::Info => paint("INFO", "36"),
        };
        println!("{}. [{sev}] {}", i + 1, f.title);
        if !f.processes.is_empty() {
            println!(
                "   {:>8}  {:<16} {:>12}  WHERE",
                "PID", "COMM", "PER SECOND"
            );
            for p in f.processes.iter().take(10) {
                let place = if p.pod.is_empty() {
                    p.cgroup.clone()
                } else {
                    format!("{}/{} ({})", p.namespace, p.pod, p.container)
                };
                println!(
                    "   {:>8}  {:<16} {:>12.1}  {}",
                    p.pid, p.comm, p.per_second, place
                );
                for site in p.call_sites.iter().take(2) {
                    println!("             at {}", callsites::one_line(site));
                }
            }
        }
        for (k, v) in &f.evidence {
            println!("   {k}: {v}");
        }
        println!("   cause: {}", f.cause);
        println!("   fix:   {}", f.fix);
        if let Some(g) = &f.expected_gain {
            println!("   gain:  {g}");
        }
        println!();
    }
    println!("clock read cost on this node (ns per read):");
    println!("   {:<18} {:>10} {:>12}", "CLOCK", "LIBC", "RAW SYSCALL");
    for c in &r.clock_benchmark {
        println!(
            "   {:<18} {:>10.1} {:>12.1}",
            c.clock, c.libc_ns, c.syscall_ns
        );
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
    let bench = [0usize, 1, 4, 5, 6, 7, 10, 2, 3]
        .iter()
        .enumerate()
        .map(|(i, &clock)| ClockCost {
            clock: CLOCK_NAMES[clock],
            libc_ns: 20.0 + i as f64,
            syscall_ns: 150.0 + 10.0 * i as f64,
            vdso_clock: is_vdso_clock(clock),
            fell_back: after
                .canary
                .iter()
                .find(|c| c.clock == clock)
                .and_then(|c| c.fell_back),
        })
        .collect();
    let deltas = deltas(before, after, &filter);
    report_from(
        after,
        &deltas,
        secs,
        sysfs,
        bench,
        ("node-1".into(), "6.1.0-test".into()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(comm: &str, f: impl FnOnce(&mut sp_counters)) -> Delta {
        let mut c = sp_counters::default();
        f(&mut c);
        Delta {
            labels: BTreeMap::from([("comm", comm.to_string()), ("pid", "42".to_string())]),
            c,
        }
    }

    #[test]
    fn getcontext_signature_is_recognised() {
        let d = delta("ruby", |c| {
            c.sigprocmask[3] = 100_000;
            c.sigprocmask[2] = 100_000;
        });
        let f = sigprocmask_finding(&[d], 1.0).unwrap();
        assert_eq!(f.evidence["getcontext_setcontext_signature"], "true");
        assert!(f.cause.contains("getcontext"));
        let blocky = delta("x", |c| c.sigprocmask[0] = 50_000);
        let f = sigprocmask_finding(&[blocky], 1.0).unwrap();
        assert_eq!(f.evidence["getcontext_setcontext_signature"], "false");
        assert!(sigprocmask_finding(&[delta("idle", |c| c.sigprocmask[2] = 10)], 1.0).is_none());
    }

    #[test]
    fn ticker_is_a_sleep_loop_and_a_10ms_ticker_is_not() {
        let ticker = delta("mosn", |c| c.sleep_buckets[1][3] = 1000);
        let f = sleep_loop_finding(&[ticker], 1.0).unwrap();
        assert_eq!(f.processes[0].per_second, 1000.0);
        let slow = delta("slow", |c| c.sleep_buckets[1][4] = 1000);
        assert!(sleep_loop_finding(&[slow], 1.0).is_none());
    }

    #[test]
    fn filters_select_processes() {
        let args = |pid, comm: Option<&str>, cgroup: Option<&str>| Filter {
            pid,
            cgroup: cgroup.map(String::from),
            comm: comm.map(String::from),
        };
        let labels = BTreeMap::from([
            ("pid", "42".to_string()),
            ("comm", "java".to_string()),
            ("cgroup", "/system.slice/app.service".to_string()),
        ]);
        assert!(selected(&labels, &args(Some(42), None, None)));
        assert!(!selected(&labels, &args(Some(7), None, None)));
        assert!(selected(
            &labels,
            &args(None, Some("java"), Some("/system.slice"))
        ));
        assert!(!selected(&labels, &args(None, None, Some("/system"))));
    }
}
