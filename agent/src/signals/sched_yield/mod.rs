//! Yield spins (hook `sys_enter`, or fentry on sched_yield): `sched_yield()`
//! calls, split by whether another task was runnable on the caller's CPU at
//! the call (`bpf/signals/sched_yield.bpf.h`: the runqueue's `nr_running`,
//! reached from the task). A spin-wait that yields "to let another thread
//! run" returns at once when nothing else is runnable there, and burns the
//! whole CPU, mostly in user space between the calls: a BLAS or OpenMP pool
//! between jobs, the Disruptor's `YieldingWaitStrategy` on an empty ring, a
//! runtime's scheduler spinning before it parks.
//!
//! Doctor rule: a process yielding more than [`YIELDS_PER_SEC`] times a
//! second with nothing else runnable, its CPU measured on the live process
//! while it yields ([`spin_cpu`]), its call sites matched to
//! [`sources::SOURCES`].

pub mod sources;
pub mod spin_cpu;

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{sp_callsite_kind, sp_counters, sp_syscall_group, sp_yield_runnable};
use crate::exposition::{family, push_nonzero, with, Family};
use crate::finding::{Compose, Finding, Severity};
use crate::signals::CallKind;
use crate::signals::FamilyDoc;
use crate::signals::FindingRule;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeNeeds, Observation, Recorded, Scrape, Signal, Top,
    TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::sources::CauseBasis;
use sources::{SOURCES, SPIN_GAIN};

/// Number of `enum sp_yield_runnable` slots.
const RUNNABLE_COUNT: usize = slot!(sp_yield_runnable::SP_YIELD_RUNNABLE_COUNT);

/// `runnable` label values, indexed by `enum sp_yield_runnable`: `none`, the
/// caller alone on its CPU's runqueue (the yield returns at once); `others`,
/// another task was runnable there; `unknown`, a kernel without
/// CONFIG_FAIR_GROUP_SCHED, where the runqueue is not reached from the task.
pub const RUNNABLE_NAMES: [&str; RUNNABLE_COUNT] = ["none", "others", "unknown"];

const _: fn(&sp_counters) -> &[u64; RUNNABLE_COUNT] = |c| &c.sched_yield;

const ALONE: usize = slot!(sp_yield_runnable::SP_YIELD_RUNNABLE_NONE);

/// Doctor and in-agent threshold: yields per second of one process with
/// nothing else runnable. Measured (bpftrace on sys_enter_sched_yield, Intel
/// Xeon, kernel 6.18): a Disruptor consumer on YieldingWaitStrategy with an
/// empty ring makes 1.2 to 1.4 million a second at a whole CPU (26,000 to
/// 71,000 under strace); idle JVM, Go, Node and Python processes none in 20
/// s; a JVM churning its GC 4 a second, a Go channel ping-pong on 2 CPUs 17
/// to 28. Two orders of magnitude either side.
pub const YIELDS_PER_SEC: f64 = 10_000.0;

const SCHED_YIELD: Family = Family {
    name: "slowpath_sched_yield_calls_total",
    help: "sched_yield calls (raw_syscalls:sys_enter, or fentry on sched_yield) by what else was runnable on the caller's CPU at the call: none (the caller alone on its runqueue, task->se.cfs_rq->rq->nr_running 1: the yield returns at once, a spin), others, or unknown (a kernel without CONFIG_FAIR_GROUP_SCHED)",
    kind: MetricType::COUNTER,
};

// The rates the chart's recording rules record.
const ALONE_YIELDS: Recorded = Recorded {
    name: "slowpath_sched_yield_alone_calls",
    family: &SCHED_YIELD,
    only: Some(("runnable", "none")),
    fleet: Some(FleetRow {
        title: "Yield spins",
        meaning: "sched_yield calls per second with nothing else runnable on the CPU (spin-waits that burn a core: a blocking wait, or fewer threads than CPUs, removes them)",
    }),
};

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
const PROMQL: &[&str] = &[
    r#"yield spins: sched_yield calls per second with nothing else runnable, per process, and the
#    share of all its yields that found nobody to hand the CPU to
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_sched_yield_calls_total{runnable="none"}[5m])))
sum by (instance, comm, cgroup) (rate(slowpath_sched_yield_calls_total{runnable="none"}[5m]))
  / sum by (instance, comm, cgroup) (rate(slowpath_sched_yield_calls_total[5m]))"#,
];

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &SCHED_YIELD,
        labels: "`runnable` (`none`, `others`, `unknown`)",
        counts: "`sched_yield()` calls, every one, by what else was runnable on the caller's CPU at the call: the runqueue's `nr_running` (the caller included), read at syscall entry from the task (`task->se.cfs_rq->rq`). `none`: the caller alone, so the yield returns at once (a spin-wait burning the CPU); `others`: another task was runnable there; `unknown`: a kernel without `CONFIG_FAIR_GROUP_SCHED` (the runqueue is not reached from the task). A wakeup on that CPU in the same instant may fall either side. The spin's cost is mostly user time between the calls: the finding measures the process's CPU",
        hook: "fentry on `sched_yield`, or `raw_syscalls:sys_enter`: x86_64 `sched_yield` (24), arm64 `sched_yield` (124)",
    },
];

// The findings its diagnosis makes (docs/doctor.md's table).
const YIELD_SPIN: FindingRule = FindingRule {
    id: "yield_spin",
    severities: &[Severity::Warning],
    when: "a process calls `sched_yield()` 10,000+ times/s with nothing else runnable on its CPU (a spin-wait); names its CPU measured while it yields (its threads' run time over 200 ms) and the threads that ran half a CPU or more, the call site's known source and the fix (a blocking wait strategy, `OMP_WAIT_POLICY=passive`, `GOMAXPROCS` or the pool size at the CPU quota)",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathYieldSpin",
    rate: &ALONE_YIELDS,
    threshold: Setting {
        key: "schedYieldAlonePerProcess",
        default: "10000",
        why: "sched_yield calls per second, per process, with nothing else runnable on the CPU: a yield spin makes ~1M/s at a whole core (a Disruptor consumer on YieldingWaitStrategy); idle and busy runtimes stay under 30/s",
    },
    for_: Setting {
        key: "yieldSpin",
        default: "10m",
        why: "",
    },
    findings: &[&YIELD_SPIN],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} calls sched_yield {{ $value | humanize }} times/s with nothing else to run (a yield spin)",
    description: "calls sched_yield() {{ $value | humanize }} times per second while nothing else is runnable on its CPU: each call returns at once, so a thread spin-waits and burns a CPU (and its pod's CPU quota), mostly in user space between the calls. The finding gives the process's measured CPU and the call sites; a blocking wait, or no more spinning threads than the CPUs the process may use, removes it.",
    runbook: "yield-spins",
};

pub const SIGNAL: Signal = Signal {
    name: "sched_yield",
    summary: "sched_yield calls by whether another task was runnable: spin-waits that burn a CPU",
    case: "yield spins",
    story: Some("threads that wait by calling `sched_yield()` in a loop with nothing else to run burn a whole CPU (and the pod's CPU quota): BLAS pools at ~40,000 calls/s during a matrix multiply (a ~4 % gain once replaced), the LMAX Disruptor's `YieldingWaitStrategy` on an empty ring at 1.2-1.4 million calls/s, a core per consumer."),
    families: &[&SCHED_YIELD],
    export,
    diagnose,
    enrich: Some(spin_cpu::enrich),
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_SCHED_YIELD,
        name: "sched_yield",
        what: "yields with nothing else runnable",
    }],
    node: NodeNeeds::NONE,
    kernel: KernelNeeds {
        hooks: &[],
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_YIELDS],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "YIELD/s",
            meaning: "`sched_yield()` calls with nothing else runnable on the caller's CPU: a spin-wait burning that CPU; its cost in `CPU%` is the syscall's alone, a floor (the spin's user time between the calls is in the `yield_spin` finding)",
            sort: "yield",
            key: "sched_yield_alone",
            family: &SCHED_YIELD,
            only: Some(("runnable", "none")),
            // the syscall alone: a floor, the spin's user time is not in it
            cost: EventCost::Gauge("slowpath_syscall_seconds"),
            recorded: Some(&ALONE_YIELDS),
            cell: Cell::PerSecond,
            common: false,
        }],
        timeouts: None,
        not_shown: &[],
        node: None,
    },
    recorded: &[ALONE_YIELDS],
    finding_rules: &[YIELD_SPIN],
    family_docs: FAMILY_DOCS,
    promql: PROMQL,
    alert: Some(ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## Yield spins

`SlowpathYieldSpin`: one process calls `sched_yield()` more than 10,000 times per second with
nothing else runnable on its CPU, for 10 min (`slowpath_sched_yield_calls_total{runnable="none"}`;
Helm `prometheusRule.thresholds.schedYieldAlonePerProcess`, `prometheusRule.for.yieldSpin`).

What it means: a thread waits for work by calling `sched_yield()` in a loop, meaning to let another
thread run. When nothing else is runnable on its CPU the call returns at once, so the thread spins:
it burns a whole CPU, most of it in user space between the calls, and in a container with a CPU
quota it spends the pod's quota, which then throttles the pod's real work. Known spinners: the LMAX
Disruptor's `YieldingWaitStrategy` on an empty ring (1.2 to 1.4 million yields a second at a whole
CPU, measured here), BLAS and OpenMP thread pools between jobs, the Go runtime with `GOMAXPROCS`
above the pod's CPUs.

The count: every `sched_yield()`, at syscall entry, split by the caller's runqueue at the call
(`nr_running` of its CPU, read from the task: `task->se.cfs_rq->rq`). `runnable="none"`: the caller
alone, the spin; `"others"`: another task was runnable, so the yield could hand it the CPU;
`"unknown"`: a kernel without `CONFIG_FAIR_GROUP_SCHED`, where the runqueue is not reached from the
task (no distribution kernel).

Threshold: 10,000 yields/s with nothing else to run. Idle JVM, Go, Node and Python processes made
none in 20 s here; a JVM churning its GC made 4 a second and a Go channel ping-pong on 2 CPUs 17 to
28; a spinning thread makes about a million. The finding measures the process's CPU while it
yields (its threads' run time in `/proc/PID/task/*/schedstat` over 200 ms) and counts its threads
that ran at least half a CPU:

```promql
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_sched_yield_calls_total{runnable="none"}[5m])))
```

Confirm on the node:
- `top -H -p PID`: the spinning threads at or near 100 % CPU, with a high `sy` share.
- `strace -f -c -e trace=sched_yield -p PID` for a second, then `Ctrl-C`: the calls (strace slows a
  spin 20 to 50 times, so the rate it shows is low).
- [The doctor](#running-the-doctor) (`slowpath doctor --comm NAME` in the node's agent pod, or
  `sudo slowpath doctor --comm NAME` on a VM) names the `yield_spin` finding with the rate, the
  measured CPU, the call sites and their known source.

Fix, by source (the finding's known source says which):
- Disruptor: `BlockingWaitStrategy`, `SleepingWaitStrategy` or `TimeoutBlockingWaitStrategy` in
  place of `YieldingWaitStrategy` or `BusySpinWaitStrategy`, unless the consumer has a core of its
  own (a pinned, isolated CPU).
- OpenMP and BLAS pools: `OMP_WAIT_POLICY=passive`, and `OMP_NUM_THREADS` or
  `OPENBLAS_NUM_THREADS` no higher than the container's CPU quota.
- Go: `GOMAXPROCS` set to the pod's CPU limit (Go 1.25 does so by itself).
- Code of your own: a blocking wait (a condition variable, a futex, a blocking queue), or a bounded
  spin that then sleeps.
"##;

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut calls = Vec::new();
    for (key, series) in scrape.series() {
        for (runnable, &n) in RUNNABLE_NAMES.iter().zip(&series.counters.sched_yield) {
            push_nonzero(&mut calls, with(key, &[("runnable", runnable)]), n as f64);
        }
    }
    vec![family(&SCHED_YIELD, calls)]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    spin_finding(obs).into_iter().collect()
}

/// A finding's title: the process, its rate and, once measured, its CPU.
pub(crate) fn title(comm: &str, per_second: f64, cores: Option<f64>) -> String {
    let head = format!("{comm} yields {per_second:.0} times/s with nothing else to run");
    match cores {
        Some(cores) => format!("{head}, at {:.0} % of a CPU", cores * 100.0),
        None => head,
    }
}

fn spin_finding(obs: &Observation<'_>) -> Option<Finding> {
    let processes = obs.ranked(|d| {
        let alone = d.c.sched_yield[ALONE] as f64 / obs.secs;
        if alone < YIELDS_PER_SEC {
            return None;
        }
        let all: u64 = d.c.sched_yield.iter().sum();
        let detail = BTreeMap::from([
            ("alone_yields_per_second".to_string(), alone),
            ("yields_per_second".to_string(), all as f64 / obs.secs),
        ]);
        Some((alone, detail))
    });
    let top = processes.first()?;
    Some(Finding {
        id: YIELD_SPIN.id,
        severity: Severity::Warning,
        title: title(&top.identity.comm, top.per_second, None),
        evidence: BTreeMap::from([(
            "threshold_alone_yields_per_second".to_string(),
            format!("{YIELDS_PER_SEC}"),
        )]),
        processes,
        cause: "A thread waits by calling sched_yield() in a loop, meaning to let another \
                thread run, but nothing else is runnable on its CPU: each call returns at once \
                and the thread spins, burning the CPU (most of it in user space between the \
                calls) and, in a container with a CPU quota, the pod's quota with it, which \
                throttles the pod's real work."
            .into(),
        fix: "Wait without spinning: a blocking wait (a condition variable, a futex, a \
              blocking queue) or a bounded spin that then sleeps; and no more spinning \
              threads than the CPUs the process may use (its container's CPU quota). The \
              call sites name the library and its setting."
            .into(),
        expected_gain: Some(SPIN_GAIN.into()),
        cause_basis: CauseBasis::Guess {
            from: "yields with nothing else runnable (no sampled frame matches a known source)"
                .into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_SCHED_YIELD),
        sources: Some((SOURCES, Compose::AfterRule)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::test_support::{delta, export_one_of, observe};

    const OTHERS: usize = slot!(sp_yield_runnable::SP_YIELD_RUNNABLE_OTHERS);

    #[test]
    fn a_spin_alone_gets_the_finding_and_yields_to_others_do_not() {
        let spin = delta("java", |c| c.sched_yield[ALONE] = 5_000_000);
        let handing_over = delta("worker", |c| c.sched_yield[OTHERS] = 5_000_000);
        let idle = delta("java", |c| c.sched_yield[ALONE] = 300);
        let f = observe(&[spin, handing_over, idle], spin_finding).unwrap();
        assert_eq!(f.id, "yield_spin");
        assert_eq!(f.processes.len(), 1, "only the spin alone");
        assert!(f.title.starts_with("java yields"), "{}", f.title);
        assert!(f.fix.contains("blocking wait"));
    }

    #[test]
    fn the_title_names_the_cpu_once_measured() {
        let t = title("java", 900_000.0, Some(0.98));
        assert!(t.ends_with("at 98 % of a CPU"), "{t}");
    }

    #[test]
    fn every_runnable_class_is_exported() {
        let d = delta("java", |c| c.sched_yield = [7, 3, 1]);
        let families = export_one_of(&SIGNAL, d);
        assert_eq!(families[0].name(), SCHED_YIELD.name);
        let values: Vec<f64> = families[0]
            .get_metric()
            .iter()
            .map(|m| m.get_counter().get_value())
            .collect();
        assert_eq!(values, [7.0, 3.0, 1.0]);
    }

    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(SOURCES);
    }
}
