//! Prometheus metrics: a custom [`Collector`] that, at scrape time, asks the
//! worker for a [`Snapshot`], reads the node's sysfs settings, and lets each
//! enabled signal (`signals::SIGNALS`, less those switched off with
//! `--no-collector.<name>`) encode its families; the agent's own health
//! families (build, probes, table fill, lost events, Kubernetes watch) are
//! here. Per-process series are emitted only once non-zero, so an idle
//! process costs no series.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};
use tracing::error;

use crate::exposition::{counter, family, gauge, Family, FamilyList};
use crate::node::NodeFacts;
use crate::procs::LIMIT_NAMES;
use crate::signals::{self, Collectors, Scrape};
use crate::snapshot::{Snapshot, LOST_REASON_NAMES};
use crate::worker::Worker;

const BUILD_INFO: Family = Family {
    name: "slowpath_build_info",
    help: "Build of the running slowpath agent, value 1",
    kind: MetricType::GAUGE,
};
/// The hooks of a collector switched off have no series: they were not
/// asked for, and 0 means a failure (the alert on it, `/readyz`).
const PROBE_ATTACHED: Family = Family {
    name: "slowpath_probe_attached",
    help: "1 when the BPF program for this kernel hook is attached, 0 when it failed (see the agent log); attach_type is fentry, tp_btf or raw_tp",
    kind: MetricType::GAUGE,
};
/// Whether each hook is expected to attach here: 0 for a hook left out by
/// design on this kernel with these privileges (the log says why at start),
/// so the alert on `slowpath_probe_attached` 0 leaves it out too.
const PROBE_EXPECTED: Family = Family {
    name: "slowpath_probe_expected",
    help: "1 when the BPF program for this kernel hook is expected to attach on this kernel with the agent's privileges, 0 when it is left out by design (e.g. the timer hooks on 5.10 to 5.12 without CAP_SYSLOG, a tracepoint the kernel was built without; the agent log says why at start)",
    kind: MetricType::GAUGE,
};
const COMBINING_SLOTS: Family = Family {
    name: "slowpath_combining_slots_enabled",
    help: "1 when the per-CPU combining slots count the syscall and timer wakeup counters (tp_btf programs on x86_64, after the agent folded every CPU at start: no table lookup and no locked add per event), 0 when every event adds to its process's table entry (see the agent log for why)",
    kind: MetricType::GAUGE,
};
const TRACKED: Family = Family {
    name: "slowpath_tracked_processes",
    help: "Thread groups with an entry in the kernel's process table now",
    kind: MetricType::GAUGE,
};
/// The process table's size, which the locked-memory limit may have cut
/// (`bpf::fit`): with `slowpath_tracked_processes`, how full it is.
const PROCESS_CAPACITY: Family = Family {
    name: "slowpath_process_table_capacity",
    help: "Thread groups the kernel's process table can hold (--bpf.max-processes, or fewer where a kernel before 5.11 charges BPF maps to a locked-memory limit the agent may not lift; the agent log says so at start); a process beyond it is counted in slowpath_lost_events_total{reason=\"process_table_full\"}",
    kind: MetricType::GAUGE,
};
const COLLECTOR_COUNTING: Family = Family {
    name: "slowpath_collector_counting",
    help: "1 when this signal's collector counts on this node: switched on and every kernel hook it needs attached. 0 when it cannot, with reason switched_off (--no-collector.<name>), missing_capability (a privilege this kernel asks for the hook: the timer hooks on 5.10 to 5.12 without CAP_SYSLOG), no_kernel_hook (a tracepoint the kernel was built without) or kernel_refused (a hook the kernel was expected to take: SlowpathProbeNotAttached), and hook, the first hook it lacks. One series per declared signal (SlowpathCollectorCannotCount)",
    kind: MetricType::GAUGE,
};

const NODE_CPUS: Family = Family {
    name: "slowpath_node_cpus",
    help: "CPUs online on this node (devices/system/cpu/online under --path.sysfs: the host's, not the agent container's cpuset). SlowpathOverheadHigh divides slowpath's own CPU by it. Absent when the file cannot be read",
    kind: MetricType::GAUGE,
};

const LOST: Family = Family {
    name: "slowpath_lost_events_total",
    help: "Events the kernel side could not record, by reason (a full table or ring buffer, an unreadable sleep request)",
    kind: MetricType::COUNTER,
};

const KUBERNETES_UP: Family = Family {
    name: "slowpath_kubernetes_up",
    help: "1 when the last request of the agent's pod watch to the Kubernetes API succeeded, else 0 (only with --kubernetes.enabled)",
    kind: MetricType::GAUGE,
};

const FOLDED: Family = Family {
    name: "slowpath_series_folded_total",
    help: "Process images counted in an over-the-limit series (comm=\"[over the limit]\") instead of their own, by the limit reached: comms_per_cgroup (--metrics.max-comms-per-cgroup) or series (--metrics.max-series)",
    kind: MetricType::COUNTER,
};

/// The agent's own families (each signal lists its own): every family this
/// file defines (`slowpath signals` lists them).
pub const FAMILIES: FamilyList = FamilyList {
    defined_in: file!(),
    families: &[
        &BUILD_INFO,
        &PROBE_ATTACHED,
        &PROBE_EXPECTED,
        &COLLECTOR_COUNTING,
        &NODE_CPUS,
        &COMBINING_SLOTS,
        &TRACKED,
        &PROCESS_CAPACITY,
        &LOST,
        &FOLDED,
        &RECURSION_MISSES,
        &PROBE_RUNS,
        &PROBE_RUN_SECONDS,
        &PROBE_DISPATCH_SECONDS,
        &STATS_OVERHEAD,
        &UNTRACED_SYSCALL_ADDED,
        &SYSCALL_COST,
        &KUBERNETES_UP,
        &SCRAPE_ERRORS,
    ],
};

const PROBE_RUNS: Family = Family {
    name: "slowpath_probe_runs_total",
    help: "Runs of this hook's BPF programs on all CPUs since the agent attached them (counted by the programs, per CPU: exact)",
    kind: MetricType::COUNTER,
};

const PROBE_RUN_SECONDS: Family = Family {
    name: "slowpath_probe_run_seconds_total",
    help: "slowpath's own in-kernel time on this hook: each run charged at the time per run the kernel measured (bpf_prog_info run_time_ns / run_cnt) in the latest statistics window (--bpf.stats-interval, --bpf.stats-window), less an empty program's measured time per run (slowpath_probe_stats_overhead_seconds: what the measurement adds, two clock reads, and an empty body), so what slowpath's programs do beyond any program on the hook (method=measured). Where the statistics are not allowed (no CAP_SYS_ADMIN, kernel.bpf_stats_enabled=0) or --bpf.stats-interval=0, method=estimated: the programs' own timing of one run in 1024 per CPU (bpf_ktime_get_ns() around the program, less a clock read), each timed run standing for its share of the hook's runs; leaves out the program's prologue and run counter, a few ns a run. Cannot see the hook's call into a program, which any program pays (for sys_enter as a tracepoint: slowpath_probe_dispatch_seconds_total). Absent until the first window (10 s after start), or until 8 runs of the hook were timed. rate() of it is the share of one CPU; with process_cpu_seconds_total it is slowpath's own part (SlowpathOverheadHigh)",
    kind: MetricType::COUNTER,
};

/// The part of the syscall hook's cost that no program run includes.
const PROBE_DISPATCH_SECONDS: Family = Family {
    name: "slowpath_probe_dispatch_seconds_total",
    help: "The floor the attach type forces, outside the programs: only sys_enter attached as tp_btf or raw_tp, with which every syscall of the node takes the kernel's traced syscall path, whatever program is on the hook. Each run charged at slowpath_untraced_syscall_added_seconds less the program's own time for that syscall, measured at start (with the statistics, or the programs' own timing where they are not allowed). Not slowpath's own part: its fix is fentry (SlowpathDispatchFloorHigh). Absent with fentry (an untraced syscall then pays nothing)",
    kind: MetricType::COUNTER,
};

const STATS_OVERHEAD: Family = Family {
    name: "slowpath_probe_stats_overhead_seconds",
    help: "What the kernel's run-time statistics add to each run they time (two sched_clock() reads, __bpf_prog_run() in include/linux/filter.h): an empty BPF program's measured time per run, test-run in the latest statistics window; subtracted from every run in slowpath_probe_run_seconds_total",
    kind: MetricType::GAUGE,
};

const UNTRACED_SYSCALL_ADDED: Family = Family {
    name: "slowpath_untraced_syscall_added_seconds",
    help: "What slowpath adds to a syscall it does not count (getppid), measured by the agent at start: its CPU time per call right after attaching its programs less right before (the lowest of three batches' 10th percentile of 81 slices). With sys_enter as tp_btf or raw_tp every syscall of the node pays this; with fentry it is near 0",
    kind: MetricType::GAUGE,
};

const SYSCALL_COST: Family = Family {
    name: "slowpath_syscall_seconds",
    help: "What one system call costs on this node with slowpath attached: an untraced getppid, timed by the agent at start (the \"after\" of slowpath_untraced_syscall_added_seconds). The floor of every counted syscall's cost: slowpath top charges counted rt_sigprocmask calls, and clock syscalls of a clock the vDSO serves, at this",
    kind: MetricType::GAUGE,
};

const RECURSION_MISSES: Family = Family {
    name: "slowpath_probe_recursion_misses_total",
    help: "Events of this hook the kernel did not run the BPF program for, because it was already running on that CPU (bpf_prog_info recursion_misses, kernel 5.12+): events not counted",
    kind: MetricType::COUNTER,
};

/// Scrapes with a failed read, by source (a counter this collector owns and
/// reports after counting the scrape's own failures).
const SCRAPE_ERRORS: Family = Family {
    name: "slowpath_scrape_errors_total",
    help: "Scrapes in which a read failed, by source: bpf (the kernel tables: per-process series were left out), sysfs (a clocksource or THP settings file under --path.sysfs: those metrics were left out)",
    kind: MetricType::COUNTER,
};

/// Collects every slowpath family at scrape time.
pub struct SlowpathCollector {
    worker: Arc<Worker>,
    sysfs: PathBuf,
    /// Which signals run.
    collectors: Collectors,
    /// The pod watch's health, when Kubernetes is enabled.
    kubernetes_up: Option<Arc<AtomicBool>>,
    descs: Vec<Desc>,
    errors: prometheus::IntCounterVec,
}

/// [`FAMILIES`] but [`SCRAPE_ERRORS`], which the collector makes with the
/// prometheus crate.
fn agent_families_but_errors() -> impl Iterator<Item = &'static Family> {
    (FAMILIES.families.iter().copied()).filter(|f| f.name != SCRAPE_ERRORS.name)
}

impl SlowpathCollector {
    pub fn new(
        worker: Arc<Worker>,
        sysfs: PathBuf,
        collectors: Collectors,
        kubernetes_up: Option<Arc<AtomicBool>>,
    ) -> prometheus::Result<Self> {
        let descs = collectors
            .enabled()
            .flat_map(|s| s.families.iter().copied())
            // the scrape errors' desc is the counter's own
            .chain(agent_families_but_errors())
            .map(|f| Desc::new(f.name.into(), f.help.into(), vec![], Default::default()))
            .collect::<prometheus::Result<Vec<_>>>()?;
        let errors = prometheus::IntCounterVec::new(
            prometheus::Opts::new(SCRAPE_ERRORS.name, SCRAPE_ERRORS.help),
            &["source"],
        )?;
        for source in ["bpf", "sysfs"] {
            errors.with_label_values(&[source]); // both series from the start, at 0
        }
        Ok(Self {
            worker,
            sysfs,
            collectors,
            kubernetes_up,
            descs,
            errors,
        })
    }
}

impl Collector for SlowpathCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().chain(self.errors.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let snapshot = match self.worker.snapshot() {
            Ok(s) => s,
            Err(err) => {
                error!(error = %format!("{err:#}"), "scrape without per-process series");
                self.errors.with_label_values(&["bpf"]).inc();
                Arc::new(Snapshot {
                    probes: self.worker.probes().to_vec(),
                    ..Default::default()
                })
            }
        };
        let kubernetes_up = self
            .kubernetes_up
            .as_ref()
            .map(|up| up.load(Ordering::Relaxed));
        let node = signals::read_node_settings(&self.sysfs, &self.collectors);
        if !node.unreadable.is_empty() {
            // Warned about at start (preflight); counted on every scrape.
            self.errors.with_label_values(&["sysfs"]).inc();
        }
        let mut out = families(&snapshot, node, kubernetes_up, &self.collectors);
        if let Some(cpus) = crate::cpus::online(&self.sysfs) {
            out.push(family(&NODE_CPUS, vec![gauge(&[], f64::from(cpus))]));
        }
        // After this scrape's failures are counted, so that it reports them.
        out.extend(self.errors.collect());
        out
    }
}

/// Every family of one scrape: each enabled signal's from `snapshot`, the
/// node's `settings` and the worker's last node checks, then the agent's
/// own state. Empty families are left out.
pub fn families(
    snapshot: &Snapshot,
    settings: NodeFacts,
    kubernetes_up: Option<bool>,
    collectors: &Collectors,
) -> Vec<MetricFamily> {
    let mut node = settings;
    node.extend(snapshot.checks.iter().cloned());
    let scrape = Scrape::new(snapshot, &node);
    let mut out: Vec<MetricFamily> = collectors
        .enabled()
        .flat_map(|s| (s.export)(&scrape))
        .collect();
    out.extend(agent_families(snapshot));
    out.push(collector_counting(collectors, &snapshot.probes));
    if let Some(up) = kubernetes_up {
        let value = if up { 1.0 } else { 0.0 };
        out.push(family(&KUBERNETES_UP, vec![gauge(&[], value)]));
    }
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// `slowpath_collector_counting`: one series per declared signal.
fn collector_counting(collectors: &Collectors, probes: &[crate::bpf::ProbeStatus]) -> MetricFamily {
    let series = signals::counting(collectors, probes)
        .into_iter()
        .map(|c| {
            let labels = [
                ("collector", c.collector.to_string()),
                ("reason", c.not.map_or("", |n| n.label()).to_string()),
                ("hook", c.hook.to_string()),
            ];
            gauge(&labels, if c.not.is_none() { 1.0 } else { 0.0 })
        })
        .collect();
    family(&COLLECTOR_COUNTING, series)
}

fn agent_families(snapshot: &Snapshot) -> Vec<MetricFamily> {
    let build = gauge(
        &[
            ("version", crate::version::VERSION.to_string()),
            ("revision", crate::version::REVISION.to_string()),
            ("build_date", crate::version::BUILD_DATE.to_string()),
            ("arch", std::env::consts::ARCH.to_string()),
        ],
        1.0,
    );
    let probes = snapshot
        .probes
        .iter()
        .map(|p| {
            gauge(
                &[
                    ("probe", p.probe.to_string()),
                    ("attach_type", p.attach_type.to_string()),
                ],
                if p.attached() { 1.0 } else { 0.0 },
            )
        })
        .collect();
    let expected = (snapshot.probes.iter())
        .map(|p| {
            let value = if p.expected() { 1.0 } else { 0.0 };
            gauge(&[("probe", p.probe.to_string())], value)
        })
        .collect();
    let calibration = snapshot.cost_calibration;
    let lost = LOST_REASON_NAMES
        .iter()
        .zip(snapshot.lost)
        .map(|(reason, n)| counter(&[("reason", reason.to_string())], n as f64))
        .collect();
    vec![
        family(&BUILD_INFO, vec![build]),
        family(&PROBE_ATTACHED, probes),
        family(&PROBE_EXPECTED, expected),
        family(
            &COMBINING_SLOTS,
            (snapshot.combining_slots.iter())
                .map(|&on| gauge(&[], if on { 1.0 } else { 0.0 }))
                .collect(),
        ),
        family(
            &TRACKED,
            vec![gauge(&[], snapshot.tracked_processes as f64)],
        ),
        family(
            &PROCESS_CAPACITY,
            vec![gauge(&[], f64::from(snapshot.process_capacity))],
        ),
        family(&LOST, lost),
        family(
            &FOLDED,
            LIMIT_NAMES
                .iter()
                .zip(snapshot.folded)
                .map(|(limit, n)| counter(&[("limit", limit.to_string())], n as f64))
                .collect(),
        ),
        family(
            &PROBE_RUNS,
            snapshot
                .probe_costs
                .iter()
                .map(|c| counter(&[("probe", c.probe.to_string())], c.runs as f64))
                .collect(),
        ),
        family(
            &PROBE_RUN_SECONDS,
            snapshot
                .probe_costs
                .iter()
                .filter_map(|c| {
                    let labels = [
                        ("probe", c.probe.to_string()),
                        ("method", c.method.label().to_string()),
                    ];
                    Some(counter(&labels, c.run_seconds?))
                })
                .collect(),
        ),
        family(
            &PROBE_DISPATCH_SECONDS,
            snapshot
                .probe_costs
                .iter()
                .filter_map(|c| {
                    Some(counter(
                        &[("probe", c.probe.to_string())],
                        c.dispatch_seconds?,
                    ))
                })
                .collect(),
        ),
        family(&STATS_OVERHEAD, nanoseconds(calibration.stats_floor_ns)),
        family(
            &UNTRACED_SYSCALL_ADDED,
            nanoseconds(calibration.untraced_added_ns),
        ),
        family(&SYSCALL_COST, nanoseconds(calibration.untraced_ns)),
        family(
            &RECURSION_MISSES,
            snapshot
                .recursion_misses
                .iter()
                .map(|(probe, n)| counter(&[("probe", probe.to_string())], *n as f64))
                .collect(),
        ),
    ]
}

/// A gauge in seconds of a figure in ns, none when it is unknown.
fn nanoseconds(ns: Option<f64>) -> Vec<prometheus::proto::Metric> {
    ns.map(|ns| gauge(&[], ns / 1e9)).into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::follows_conventions;

    #[test]
    fn every_agent_family_follows_prometheus_conventions() {
        for f in FAMILIES.families {
            assert!(follows_conventions(f), "{}", f.name);
        }
    }
}
