//! Prometheus metrics: a custom [`Collector`] that turns a worker
//! [`Snapshot`] and the node's sysfs settings into metric families at scrape
//! time. Per-process series are emitted only once non-zero, so an idle
//! process costs no series.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use tracing::error;

use crate::bpf::types::sp_counters;
use crate::labels::{
    cumulative_buckets, is_vdso_clock, CLOCK_NAMES, COMPACTION_TRIGGERS, LOST_REASONS, SIGMASK_OPS,
    SLEEP_MODES, SLEEP_SYSCALLS,
};
use crate::node;
use crate::worker::{Series, Snapshot, Worker};

/// One metric family: name, help, type. `PER_PROCESS` families carry the
/// series labels (`comm`, `cgroup`, optional `pid`) before their own.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
}

const CLOCK_SYSCALLS: Family = Family {
    name: "slowpath_clock_syscalls_total",
    help: "clock_gettime/gettimeofday/time calls that entered the kernel (raw_syscalls:sys_enter, or fentry on the syscall functions), by clock; fallback=\"true\" when the vDSO could have served the clock",
    kind: MetricType::COUNTER,
};
const SIGPROCMASK: Family = Family {
    name: "slowpath_rt_sigprocmask_calls_total",
    help: "rt_sigprocmask calls (raw_syscalls:sys_enter, or fentry) by operation; query = NULL new set, the glibc getcontext() signature",
    kind: MetricType::COUNTER,
};
const SLEEP_CALLS: Family = Family {
    name: "slowpath_sleep_calls_total",
    help: "nanosleep/clock_nanosleep calls (raw_syscalls:sys_enter, or fentry) by clock and relative/absolute (TIMER_ABSTIME) mode",
    kind: MetricType::COUNTER,
};
const SLEEP_REQUESTED: Family = Family {
    name: "slowpath_sleep_requested_seconds",
    help: "Requested durations of relative nanosleep/clock_nanosleep calls, in seconds, bucketed exactly in the kernel",
    kind: MetricType::HISTOGRAM,
};
const THP_ALLOCS: Family = Family {
    name: "slowpath_thp_fault_allocs_total",
    help: "Transparent huge pages allocated on a page fault in process context (tracepoint kmem:mm_page_alloc, order 9 with a THP fault gfp mask)",
    kind: MetricType::COUNTER,
};
const THP_FALLBACKS: Family = Family {
    name: "slowpath_thp_fault_fallbacks_total",
    help: "THP fault allocations that failed, so the fault fell back to 4 KiB pages (tracepoint kmem:mm_page_alloc, final attempt returned no page)",
    kind: MetricType::COUNTER,
};
const COMPACTION_RUNS: Family = Family {
    name: "slowpath_compaction_runs_total",
    help: "Memory compaction runs of one zone (tracepoints compaction:mm_compaction_begin/end) by trigger, attributed to the task that ran them",
    kind: MetricType::COUNTER,
};
const COMPACTION_SECONDS: Family = Family {
    name: "slowpath_compaction_seconds_total",
    help: "Seconds spent in memory compaction runs (mm_compaction_begin to mm_compaction_end) by trigger; direct = allocation stall felt by the process",
    kind: MetricType::COUNTER,
};
const CLOCKSOURCE_CURRENT: Family = Family {
    name: "slowpath_clocksource_current_info",
    help: "The node's current clocksource (sysfs current_clocksource), value 1",
    kind: MetricType::GAUGE,
};
const CLOCKSOURCE_AVAILABLE: Family = Family {
    name: "slowpath_clocksource_available_info",
    help: "Clocksources the node offers (sysfs available_clocksource), value 1 each",
    kind: MetricType::GAUGE,
};
const VDSO_FALLBACK: Family = Family {
    name: "slowpath_vdso_fallback",
    help: "1 when the agent's own libc reads of this clock entered the kernel (vDSO canary checked against its BPF counts), else 0",
    kind: MetricType::GAUGE,
};
const CLOCK_READ: Family = Family {
    name: "slowpath_clock_read_seconds",
    help: "Measured mean cost in seconds of one libc clock_gettime of this clock on this node (canary batch of 1000 reads)",
    kind: MetricType::GAUGE,
};
const THP_SETTINGS: Family = Family {
    name: "slowpath_thp_settings_info",
    help: "Transparent huge page policy from /sys/kernel/mm/transparent_hugepage/{enabled,defrag}, value 1",
    kind: MetricType::GAUGE,
};
const BUILD_INFO: Family = Family {
    name: "slowpath_build_info",
    help: "Build of the running slowpath agent, value 1",
    kind: MetricType::GAUGE,
};
const PROBE_ATTACHED: Family = Family {
    name: "slowpath_probe_attached",
    help: "1 when the BPF program for this kernel hook is attached, 0 when it failed (see the agent log); attach_type is fentry, tp_btf or raw_tp",
    kind: MetricType::GAUGE,
};
const TRACKED: Family = Family {
    name: "slowpath_tracked_processes",
    help: "Thread groups with an entry in the kernel's process table now",
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

/// Families this collector produces.
const COLLECTED: [&Family; 18] = [
    &CLOCK_SYSCALLS,
    &SIGPROCMASK,
    &SLEEP_CALLS,
    &SLEEP_REQUESTED,
    &THP_ALLOCS,
    &THP_FALLBACKS,
    &COMPACTION_RUNS,
    &COMPACTION_SECONDS,
    &CLOCKSOURCE_CURRENT,
    &CLOCKSOURCE_AVAILABLE,
    &VDSO_FALLBACK,
    &CLOCK_READ,
    &THP_SETTINGS,
    &BUILD_INFO,
    &PROBE_ATTACHED,
    &TRACKED,
    &LOST,
    &KUBERNETES_UP,
];

/// Scrapes whose kernel-table read failed (a plain counter of this collector).
const SCRAPE_ERRORS: Family = Family {
    name: "slowpath_scrape_errors_total",
    help: "Scrapes in which reading the kernel tables failed (per-process series were left out)",
    kind: MetricType::COUNTER,
};

/// Collects every slowpath family at scrape time.
pub struct SlowpathCollector {
    worker: Arc<Worker>,
    sysfs: PathBuf,
    /// The pod watch's health, when Kubernetes is enabled.
    kubernetes_up: Option<Arc<AtomicBool>>,
    descs: Vec<Desc>,
    errors: prometheus::IntCounter,
}

impl SlowpathCollector {
    pub fn new(
        worker: Arc<Worker>,
        sysfs: PathBuf,
        kubernetes_up: Option<Arc<AtomicBool>>,
    ) -> prometheus::Result<Self> {
        let descs = COLLECTED
            .iter()
            .map(|f| Desc::new(f.name.into(), f.help.into(), vec![], Default::default()))
            .collect::<prometheus::Result<Vec<_>>>()?;
        let errors = prometheus::IntCounter::new(SCRAPE_ERRORS.name, SCRAPE_ERRORS.help)?;
        Ok(Self {
            worker,
            sysfs,
            kubernetes_up,
            descs,
            errors,
        })
    }

    /// The scrape-error counter, to register beside this collector.
    pub fn errors_counter(&self) -> prometheus::IntCounter {
        self.errors.clone()
    }
}

impl Collector for SlowpathCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let snapshot = match self.worker.snapshot() {
            Ok(s) => s,
            Err(err) => {
                error!(error = %format!("{err:#}"), "scrape without per-process series");
                self.errors.inc();
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
        families(&snapshot, &self.sysfs, kubernetes_up)
    }
}

/// Every family of one scrape: per-process series of `snapshot`, the node's
/// settings under `sysfs`, the agent's own state. Empty families are left out.
pub fn families(
    snapshot: &Snapshot,
    sysfs: &std::path::Path,
    kubernetes_up: Option<bool>,
) -> Vec<MetricFamily> {
    let mut out = per_process_families(&snapshot.series);
    out.extend(node_families(snapshot, sysfs));
    out.extend(agent_families(snapshot));
    if let Some(up) = kubernetes_up {
        let value = if up { 1.0 } else { 0.0 };
        out.push(family(&KUBERNETES_UP, vec![gauge(&[], value)]));
    }
    out.retain(|f| !f.get_metric().is_empty());
    out
}

/// A metric with `labels` (name, value) in order.
fn metric(labels: &[(&str, String)]) -> Metric {
    let pairs = labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.clone());
            pair
        })
        .collect();
    let mut m = Metric::default();
    m.set_label(pairs);
    m
}

fn counter(labels: &[(&str, String)], value: f64) -> Metric {
    let mut m = metric(labels);
    let mut c = Counter::default();
    c.set_value(value);
    m.set_counter(c);
    m
}

fn gauge(labels: &[(&str, String)], value: f64) -> Metric {
    let mut m = metric(labels);
    let mut g = Gauge::default();
    g.set_value(value);
    m.set_gauge(g);
    m
}

fn family(f: &Family, metrics: Vec<Metric>) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(f.name.into());
    mf.set_help(f.help.into());
    mf.set_field_type(f.kind);
    mf.set_metric(metrics);
    mf
}

/// The series' labels followed by `extra`.
fn with(
    key: &[(&'static str, String)],
    extra: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut labels = key.to_vec();
    labels.extend(extra.iter().map(|(n, v)| (*n, v.to_string())));
    labels
}

/// Push a counter when non-zero.
fn push_nonzero(out: &mut Vec<Metric>, labels: Vec<(&'static str, String)>, value: f64) {
    if value > 0.0 {
        out.push(counter(&labels, value));
    }
}

fn per_process_families(series: &[Series]) -> Vec<MetricFamily> {
    let mut clock = Vec::new();
    let mut sigmask = Vec::new();
    let mut sleeps = Vec::new();
    let mut hist = Vec::new();
    let mut thp_allocs = Vec::new();
    let mut thp_fallbacks = Vec::new();
    let mut comp_runs = Vec::new();
    let mut comp_secs = Vec::new();

    for Series {
        labels: key,
        counters: c,
    } in series
    {
        clock_series(&mut clock, key, c);
        for (op, &n) in SIGMASK_OPS.iter().zip(&c.sigprocmask) {
            push_nonzero(&mut sigmask, with(key, &[("op", op)]), n as f64);
        }
        sleep_series(&mut sleeps, &mut hist, key, c);
        push_nonzero(&mut thp_allocs, with(key, &[]), c.thp_fault_alloc as f64);
        push_nonzero(
            &mut thp_fallbacks,
            with(key, &[]),
            c.thp_fault_fallback as f64,
        );
        for (i, trigger) in COMPACTION_TRIGGERS.iter().enumerate() {
            let runs = c.compaction_runs[i] as f64;
            push_nonzero(&mut comp_runs, with(key, &[("trigger", trigger)]), runs);
            if runs > 0.0 {
                let secs = c.compaction_ns[i] as f64 / 1e9;
                comp_secs.push(counter(&with(key, &[("trigger", trigger)]), secs));
            }
        }
    }
    vec![
        family(&CLOCK_SYSCALLS, clock),
        family(&SIGPROCMASK, sigmask),
        family(&SLEEP_CALLS, sleeps),
        family(&SLEEP_REQUESTED, hist),
        family(&THP_ALLOCS, thp_allocs),
        family(&THP_FALLBACKS, thp_fallbacks),
        family(&COMPACTION_RUNS, comp_runs),
        family(&COMPACTION_SECONDS, comp_secs),
    ]
}

fn fallback_label(clock: usize) -> &'static str {
    if is_vdso_clock(clock) {
        "true"
    } else {
        "false"
    }
}

fn clock_series(out: &mut Vec<Metric>, key: &[(&'static str, String)], c: &sp_counters) {
    for (i, &n) in c.clock_gettime.iter().enumerate() {
        let labels = [
            ("syscall", "clock_gettime"),
            ("clock", CLOCK_NAMES[i]),
            ("fallback", fallback_label(i)),
        ];
        push_nonzero(out, with(key, &labels), n as f64);
    }
    // gettimeofday(2) and time(2) read CLOCK_REALTIME; the vDSO serves both.
    for (syscall, n) in [("gettimeofday", c.gettimeofday), ("time", c.time)] {
        let labels = [
            ("syscall", syscall),
            ("clock", "realtime"),
            ("fallback", "true"),
        ];
        push_nonzero(out, with(key, &labels), n as f64);
    }
}

fn sleep_series(
    calls: &mut Vec<Metric>,
    hist: &mut Vec<Metric>,
    key: &[(&'static str, String)],
    c: &sp_counters,
) {
    for (s, syscall) in SLEEP_SYSCALLS.iter().enumerate() {
        for (clk, clock) in CLOCK_NAMES.iter().enumerate() {
            for (m, mode) in SLEEP_MODES.iter().enumerate() {
                let labels = [("syscall", *syscall), ("clock", *clock), ("mode", *mode)];
                push_nonzero(calls, with(key, &labels), c.sleep_calls[s][clk][m] as f64);
            }
        }
        let (finite, total) = cumulative_buckets(&c.sleep_buckets[s]);
        if total == 0 {
            continue;
        }
        let buckets = finite
            .into_iter()
            .map(|(bound, count)| {
                let mut b = Bucket::default();
                b.set_upper_bound(bound);
                b.set_cumulative_count(count);
                b
            })
            .collect();
        let mut h = Histogram::default();
        h.set_sample_count(total);
        h.set_sample_sum(c.sleep_requested_ns[s] as f64 / 1e9);
        h.set_bucket(buckets);
        let mut m = metric(&with(key, &[("syscall", syscall)]));
        m.set_histogram(h);
        hist.push(m);
    }
}

fn node_families(snapshot: &Snapshot, sysfs: &std::path::Path) -> Vec<MetricFamily> {
    let cs = node::read_clocksources(sysfs);
    let current = cs
        .current
        .iter()
        .map(|c| gauge(&[("clocksource", c.clone())], 1.0))
        .collect();
    let available = cs
        .available
        .iter()
        .map(|c| gauge(&[("clocksource", c.clone())], 1.0))
        .collect();
    let fallback = snapshot
        .canary
        .iter()
        .filter_map(|c| {
            let fell_back = c.fell_back?;
            let value = if fell_back { 1.0 } else { 0.0 };
            Some(gauge(&[("clock", CLOCK_NAMES[c.clock].to_string())], value))
        })
        .collect();
    let cost = snapshot
        .canary
        .iter()
        .map(|c| {
            gauge(
                &[("clock", CLOCK_NAMES[c.clock].to_string())],
                c.seconds_per_read,
            )
        })
        .collect();
    let thp = node::read_thp_settings(sysfs);
    let thp_info = match (thp.enabled, thp.defrag) {
        (None, None) => vec![],
        (enabled, defrag) => vec![gauge(
            &[
                ("enabled", enabled.unwrap_or_default()),
                ("defrag", defrag.unwrap_or_default()),
            ],
            1.0,
        )],
    };
    vec![
        family(&CLOCKSOURCE_CURRENT, current),
        family(&CLOCKSOURCE_AVAILABLE, available),
        family(&VDSO_FALLBACK, fallback),
        family(&CLOCK_READ, cost),
        family(&THP_SETTINGS, thp_info),
    ]
}

fn agent_families(snapshot: &Snapshot) -> Vec<MetricFamily> {
    let build = gauge(
        &[
            ("version", env!("CARGO_PKG_VERSION").to_string()),
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
    let lost = LOST_REASONS
        .iter()
        .zip(snapshot.lost)
        .map(|(reason, n)| counter(&[("reason", reason.to_string())], n as f64))
        .collect();
    vec![
        family(&BUILD_INFO, vec![build]),
        family(&PROBE_ATTACHED, probes),
        family(
            &TRACKED,
            vec![gauge(&[], snapshot.tracked_processes as f64)],
        ),
        family(&LOST, lost),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(counters: sp_counters) -> Series {
        let key = crate::labels::SeriesKey::new("ticker".into(), "/".into(), None);
        Series {
            labels: key.label_pairs(),
            counters,
        }
    }

    fn find<'a>(fams: &'a [MetricFamily], name: &str) -> &'a MetricFamily {
        fams.iter().find(|f| f.name() == name).expect(name)
    }

    fn label<'a>(m: &'a Metric, name: &str) -> &'a str {
        m.get_label()
            .iter()
            .find(|l| l.name() == name)
            .map(|l| l.value())
            .unwrap_or("")
    }

    #[test]
    fn clock_series_carry_fallback_by_clock() {
        let mut c = sp_counters::default();
        c.clock_gettime[1] = 100_000; // monotonic
        c.clock_gettime[2] = 3; // process_cputime
        c.gettimeofday = 5;
        let fams = per_process_families(&[series(c)]);
        let clock = find(&fams, "slowpath_clock_syscalls_total");
        assert_eq!(clock.get_metric().len(), 3, "zero series are not emitted");
        let by_clock = |name: &str, syscall: &str| {
            clock
                .get_metric()
                .iter()
                .find(|m| label(m, "clock") == name && label(m, "syscall") == syscall)
                .unwrap()
        };
        let mono = by_clock("monotonic", "clock_gettime");
        assert_eq!(label(mono, "fallback"), "true");
        assert_eq!(mono.get_counter().get_value(), 100_000.0);
        assert_eq!(
            label(by_clock("process_cputime", "clock_gettime"), "fallback"),
            "false"
        );
        assert_eq!(
            label(by_clock("realtime", "gettimeofday"), "fallback"),
            "true"
        );
        assert_eq!(label(mono, "comm"), "ticker");
    }

    #[test]
    fn sleep_histogram_is_cumulative_with_sum_in_seconds() {
        let mut c = sp_counters::default();
        c.sleep_calls[1][0][0] = 1000;
        c.sleep_buckets[1][3] = 1000;
        c.sleep_requested_ns[1] = 1_000_000_000;
        let fams = per_process_families(&[series(c)]);
        let hist = find(&fams, "slowpath_sleep_requested_seconds");
        let h = hist.get_metric()[0].get_histogram();
        assert_eq!(h.get_sample_count(), 1000);
        assert_eq!(h.get_sample_sum(), 1.0);
        let le = |bound: f64| {
            h.get_bucket()
                .iter()
                .find(|b| b.upper_bound() == bound)
                .unwrap()
                .cumulative_count()
        };
        assert_eq!(le(1e-4), 0);
        assert_eq!(le(1e-3), 1000);
        assert_eq!(le(10.0), 1000);
        let calls = find(&fams, "slowpath_sleep_calls_total");
        let m = &calls.get_metric()[0];
        assert_eq!(label(m, "syscall"), "clock_nanosleep");
        assert_eq!(label(m, "clock"), "realtime");
        assert_eq!(label(m, "mode"), "relative");
    }

    #[test]
    fn every_family_name_follows_prometheus_conventions() {
        for f in COLLECTED.into_iter().chain([&SCRAPE_ERRORS]) {
            assert!(f.name.starts_with("slowpath_"), "{}", f.name);
            let is_counter = f.kind == MetricType::COUNTER;
            assert_eq!(f.name.ends_with("_total"), is_counter, "{}", f.name);
            assert!(!f.help.is_empty());
        }
    }
}
