//! Timer wakeups: how often each process is woken by an expiring timer,
//! whatever syscall carries its wait, and the timeouts it asks for.
//!
//! - Wakeups (hooks `timer:hrtimer_expire_entry`/`_exit` and
//!   `sched:sched_waking`, see `bpf/signals/timer_wakeups.bpf.h`): a wakeup made while an
//!   hrtimer callback runs is counted for the woken process, by `wait`: the
//!   syscall a sleeper's timeout ended (`nanosleep`, `clock_nanosleep`,
//!   `futex`, `epoll_wait`, `poll`, `select`), a `timerfd`, a `posix_timer`
//!   (setitimer, timer_create), or `other`.
//! - Timed waits (hook `sys_enter`): every call of a timed wait (a wait
//!   syscall with a timeout), counted exactly by `wait`.
//! - Requested timeouts (hook `sys_enter`): the timeout a timed wait asks
//!   for, read from the syscall's arguments; an absolute deadline counts as
//!   its distance from the clock's time at the call. Every sleep's is read;
//!   the other waits' are a sample, the first wait of a process in each
//!   jiffy on each CPU (`count_wait()` in `bpf/core/timeouts.h`), because
//!   reading user memory is most of what a traced wait costs. So the
//!   histograms' `_count` is the number of requests read, not of waits (that
//!   is `slowpath_timer_waits_total`); their buckets, `_sum / _count` and
//!   quantiles describe the requests as before.
//!
//! Series budget: nearly every process has timer wakeups, so the per-process
//! series are the wakeup counters of the `wait` kinds a process used; the
//! timed-wait counter and the requested-timeout histogram are per process
//! only for timer loops (processes that reached `--timer.loop-threshold`
//! wakeups in some second, marked in the kernel) and per node for everyone.
//!
//! Doctor rule: a timer loop, a process woken by short timers hundreds of
//! times a second (the sentinel-golang 1 ms ticker), with its cost in CPU.
//! What waits comes from the call site of its timed waits ([`SOURCES`]: the
//! JVM, the Go runtime, libuv, Python, glibc sleeps, timed condition waits,
//! event loops); the runtime note (`runtime`) adds what the live process is.

use std::collections::BTreeMap;

use prometheus::proto::{Metric, MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{sp_callsite_kind, sp_counters, sp_syscall_group, sp_wait};
use crate::exposition::{
    counter, cumulative_buckets, family, gauge, histogram, push_nonzero, with, Family,
};
use crate::finding::{Compose, Delta, Finding, Severity};
use crate::signals::vocabulary::{update_clock_offsets, BUCKET_BOUNDS, BUCKET_COUNT};
use crate::signals::FamilyDoc;
use crate::signals::FindingRule;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeCheck, NodeNeeds, Observation, Recorded, Scrape,
    Signal, Top, TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::sources::CauseBasis;

pub mod kernel;
mod runtime;
mod sources;
pub mod wakeup_cost;

use sources::MOSN_GAIN;
pub use sources::SOURCES;
use wakeup_cost::WakeupCost;

/// Number of `enum sp_wait` kinds.
pub const WAIT_COUNT: usize = slot!(sp_wait::SP_WAIT_COUNT);
/// The first kinds, whose timeouts the kernel side reads.
const WAIT_SYSCALL_COUNT: usize = slot!(sp_wait::SP_WAIT_SYSCALL_COUNT);

/// `wait` label values, indexed by `enum sp_wait`.
pub const WAIT_NAMES: [&str; WAIT_COUNT] = [
    "nanosleep",
    "clock_nanosleep",
    "futex",
    "epoll_wait",
    "poll",
    "select",
    "timerfd",
    "posix_timer",
    "other",
];

const _: fn(&sp_counters) -> &[u64; WAIT_COUNT] = |c| &c.timer_wakeups;
const _: fn(&sp_counters) -> &[[u64; BUCKET_COUNT]; WAIT_SYSCALL_COUNT] = |c| &c.timeout_buckets;
const _: fn(&sp_counters) -> &[u64; WAIT_SYSCALL_COUNT] = |c| &c.timeout_ns;
const _: fn(&sp_counters) -> &[u64; WAIT_SYSCALL_COUNT] = |c| &c.timer_waits;

/// Default of `--timer.loop-threshold`, wakeups per second of one process.
/// Measured on the build machine: a 1 ms loop wakes 880-1040 times a second
/// (Python, Go with sentinel-golang, JDK, Node); the busiest process of an
/// idle node (systemd, journald, the Go runtime's sysmon of an idle program)
/// stays below 50. 200 is a 5 ms ticker.
pub const DEFAULT_LOOP_PER_SEC: f64 = 200.0;

/// A timer loop's timers are short: the median requested timeout is at most
/// this (seconds). Longer timers at a high rate are many threads, not a loop.
const SHORT_TIMEOUT_SECONDS: f64 = 0.01;

const TIMER_WAKEUPS: Family = Family {
    name: "slowpath_timer_wakeups_total",
    help: "Wakeups of this process by an expiring timer (timer:hrtimer_expire_entry/exit around sched:sched_waking), by what it waited in: the syscall whose timeout expired, timerfd, posix_timer (setitimer, timer_create), or other",
    kind: MetricType::COUNTER,
};
const TIMER_WAITS: Family = Family {
    name: "slowpath_timer_waits_total",
    help: "Timed waits of this process (sys_enter: calls of a wait syscall with a timeout; a zero timeout counts too), exact, by wait; only for processes that were timer loops (--timer.loop-threshold wakeups in one second)",
    kind: MetricType::COUNTER,
};
const NODE_TIMER_WAITS: Family = Family {
    name: "slowpath_node_timer_waits_total",
    help: "Timed waits of every process on the node, exact, by wait (as slowpath_timer_waits_total, summed over all processes)",
    kind: MetricType::COUNTER,
};
const TIMER_REQUESTED: Family = Family {
    name: "slowpath_timer_requested_seconds",
    help: "Requested timeouts of timed waits (sys_enter arguments; absolute deadlines as their distance from the clock's time at the call), in seconds, by wait: every sleep's, and a sample of the other waits' (the first of the process in each jiffy on each CPU), so _count is the requests read and the rate of waits is slowpath_timer_waits_total; only for processes that were timer loops (--timer.loop-threshold wakeups in one second)",
    kind: MetricType::HISTOGRAM,
};
const WAKEUP_COST: Family = Family {
    name: "slowpath_timer_wakeup_cost_seconds",
    help: "CPU seconds one timed wakeup costs the woken thread on this node (syscall, arming the timer, switching out and back in): the agent's 200 clock_nanosleep calls of 200 us every 5 min, timed by CLOCK_THREAD_CPUTIME_ID. Wakeups per second times this is the share of a CPU a timer loop costs",
    kind: MetricType::GAUGE,
};
const NODE_TIMER_REQUESTED: Family = Family {
    name: "slowpath_node_timer_requested_seconds",
    help: "Requested timeouts of the timed waits of every process on the node, in seconds, by wait (as slowpath_timer_requested_seconds, sampled the same way, summed over all processes; the rate of waits is slowpath_node_timer_waits_total)",
    kind: MetricType::HISTOGRAM,
};

// The rates the chart's recording rules record.
const WAKEUPS: Recorded = Recorded {
    name: "slowpath_timer_wakeups",
    family: &TIMER_WAKEUPS,
    only: None,
    fleet: Some(FleetRow {
        title: "Timer wakeups",
        meaning: "wakeups per second by an expiring timer, whatever the wait (sleeps, futex, epoll, timerfd)",
    }),
};

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
const PROMQL: &[&str] = &[
    r#"timer loops: timer wakeups per second per process, what they wait in, the timeouts asked for
topk(10, sum by (instance, namespace, pod, comm) (rate(slowpath_timer_wakeups_total[5m])))
sum by (instance, comm, wait) (rate(slowpath_timer_wakeups_total[5m]))
sum by (instance, comm, wait) (rate(slowpath_timer_waits_total[5m]))  # timer loops' waits per second
histogram_quantile(0.5, sum by (instance, comm, le) (rate(slowpath_timer_requested_seconds_bucket[5m])))"#,
];

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &TIMER_WAKEUPS,
        labels: "`wait` (`nanosleep`, `clock_nanosleep`, `futex`, `epoll_wait`, `poll`, `select`, `timerfd`, `posix_timer`, `other`)",
        counts: "wakeups of the process by an expiring timer: a wakeup made while an hrtimer callback runs, counted for the woken process. A sleeper's timeout is labelled by the syscall it waited in (read from its user registers; `epoll_wait` covers `epoll_pwait`/`epoll_pwait2`, `poll` covers `ppoll`, `select` covers `pselect6`, `futex` covers `futex_waitv`); `timerfd` and `posix_timer` (`setitimer`, `timer_create`) wake their reader or signal their process; `other` is any other timer callback or syscall. A wait ended early by an event cancels its timer and counts nothing",
        hook: "`timer:hrtimer_expire_entry`/`_exit` around `sched:sched_waking`",
    },
    FamilyDoc {
        family: &TIMER_WAITS,
        labels: "`wait` (the six syscall kinds)",
        counts: "timed waits, exact: every call of a wait syscall with a timeout (`futex` with a timeout, `epoll_wait` > 0 ms, `poll` > 0 ms, a non-NULL `select`/`ppoll`/`pselect6`/`epoll_pwait2`/`futex_waitv` timeout, sleeps), whether its timer expires or an event ends it first. `rate()` of it is the waits per second. Only for timer loops (as below); everyone is in `slowpath_node_timer_waits_total`",
        hook: "`raw_syscalls:sys_enter`",
    },
    FamilyDoc {
        family: &TIMER_REQUESTED,
        labels: "`wait` (the six syscall kinds)",
        counts: "histogram of the timeouts of timed waits, in seconds, same buckets; absolute deadlines (futex `WAIT_BITSET`/`LOCK_PI`, `futex_waitv`, `clock_nanosleep` `TIMER_ABSTIME`) as their distance at the call. **A sample**: every sleep's request (`nanosleep`, `clock_nanosleep`), and of the other waits the first of the process in each jiffy on each CPU (HZ reads a second per CPU at most: reading the timeout from user memory was most of what a traced wait cost). So `_count` is the number of requests read, not of waits (that is `slowpath_timer_waits_total`); the buckets' shares, quantiles and `_sum / _count` (the mean request) describe the requests as before, since a loop asks for the same timeout again and again. Only for timer loops: processes that reached `--timer.loop-threshold` wakeups in one 1 s window (marked in the kernel); everyone is in `slowpath_node_timer_requested_seconds`",
        hook: "`raw_syscalls:sys_enter` (arguments)",
    },
];

// The findings its diagnosis makes (docs/doctor.md's table).
const TIMER_LOOP: FindingRule = FindingRule {
    id: "timer_loop",
    severities: &[Severity::Warning],
    when: "a process woken by timers `--timer.loop-threshold` (200) or more times per second, with a median requested timeout of 10 ms or less where it is known; names the `wait` mix, the median timeout, the estimated CPU (wakeups/s times the CPU one timed wakeup costs a thread on this node, measured by the agent and the doctor every 5 min and exported as `slowpath_timer_wakeup_cost_seconds`), the runtime (Go, and sentinel-golang among its packages; JVM; Node; Python) with that runtime's fix, and the call sites of the timed waits",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathTimerLoop",
    rate: &WAKEUPS,
    threshold: Setting {
        key: "timerWakeupsPerProcess",
        default: "500",
        why: "timer wakeups per second, per process, whatever syscall waits: a 1 ms ticker makes ~1000/s (0.7 to 1.2 % of a core per idle pod in the sentinel-golang case); idle services stay under 50/s",
    },
    for_: Setting {
        key: "timerLoop",
        default: "15m",
        why: "",
    },
    findings: &[&TIMER_LOOP],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} is woken by timers {{ $value | humanize }} times/s",
    description: "is woken by an expiring timer {{ $value | humanize }} times per second (sleeps, futex/epoll/poll/select timeouts, timerfds, itimers): a short ticker that costs CPU even when idle. slowpath_timer_wakeup_cost_seconds is what one wakeup costs on the node (times this rate: the CPU they take; recorded as instance_cgroup_comm:slowpath_timer_wakeup_cpu_seconds:rate5m); the doctor names the runtime.",
    runbook: "timer-loop",
};

pub const SIGNAL: Signal = Signal {
    name: "timer",
    summary: "timer wakeups per process (hrtimer_expire_entry/exit, sched_waking) and the timeouts of timed waits",
    case: "timer loops",
    story: Some("processes woken by short timers hundreds of times a second, whatever syscall carries the wait (Go and the JVM wait in `futex`, Node in `epoll_pwait`, Python in an absolute `clock_nanosleep`), such as sentinel-golang's 1 ms ticker that cost 0.7-1.2 % CPU on every idle pod of a large fleet."),
    families: &[
        &TIMER_WAKEUPS,
        &TIMER_WAITS,
        &NODE_TIMER_WAITS,
        &TIMER_REQUESTED,
        &NODE_TIMER_REQUESTED,
        &WAKEUP_COST,
    ],
    export,
    diagnose,
    enrich: Some(runtime::enrich),
    sources: SOURCES,
    call_sites: &[],
    node: NodeNeeds {
        settings: None,
        check: Some(NodeCheck {
            every: wakeup_cost::every,
            run: wakeup_cost::check,
        }),
        measure: None,
    },
    kernel: KernelNeeds {
        hooks: &kernel::HOOKS,
        // a sleep is a timed wait too (the first two `wait` kinds of the
        // requested-timeout histograms)
        syscall_groups: &[
            sp_syscall_group::SP_SYSCALLS_SLEEPS,
            sp_syscall_group::SP_SYSCALLS_TIMED_WAITS,
        ],
        rodata: Some(kernel::rodata),
        // absolute deadlines on CLOCK_REALTIME and CLOCK_TAI (futex, futex_waitv)
        upkeep: Some(update_clock_offsets),
        map_sizes: None,
        left_out: Some(kernel::left_out),
    },
    top: Top {
        columns: &[TopColumn {
            header: "WAKEUP/s",
            meaning: "wakeups by an expiring timer, whatever the wait",
            sort: "wakeup",
            key: "timer_wakeups",
            family: &TIMER_WAKEUPS,
            only: None,
            cost: EventCost::Gauge("slowpath_timer_wakeup_cost_seconds"),
            recorded: Some(&WAKEUPS),
            cell: Cell::PerSecond,
            common: true,
        }],
        timeouts: Some(&TIMER_REQUESTED),
        not_shown: &[
            (
                &TIMER_WAITS,
                "counted only for timer loops; what a wait costs is its wakeup, WAKEUP/s",
            ),
            (&NODE_TIMER_WAITS, "node-wide: no process"),
        ],
        node: None,
    },
    recorded: &[WAKEUPS],
    finding_rules: &[TIMER_LOOP],
    family_docs: FAMILY_DOCS,
    promql: PROMQL,
    alert: Some(ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## Timer loop

`SlowpathTimerLoop`: a process is woken by an expiring timer more than 500 times per second for
15 min (`slowpath_timer_wakeups_total`, every `wait`).

A 1 ms `time.Sleep` ticker (sentinel-golang's cached-time ticker, `UseCacheTime: true`, in MOSN)
wakes the process about 1000 times per second and cost 0.7 to 1.2 % CPU on every idle pod of a
fleet of hundreds of thousands. The cost is the wakeup, whatever syscall waits: the Go runtime
waits in `futex` and `epoll_pwait` timeouts, the JVM in `futex`, Node in `epoll_pwait`, Python
3.11+ in an absolute `clock_nanosleep`. 500/s catches a 1-2 ms ticker with margin and leaves
10 ms tickers (100/s) and idle services (under 50/s on the build machine) alone.

Find the cause: `sum by (wait) (rate(slowpath_timer_wakeups_total{pod="POD"}[5m]))` says what the
process waits in; `histogram_quantile(0.5, sum by (le, wait) (rate(slowpath_timer_requested_seconds_bucket{pod="POD"}[5m])))`
gives the timeout it asks for (per-process histograms exist for processes that reached
`--timer.loop-threshold` wakeups in a second). [The doctor](#running-the-doctor)
(`slowpath doctor --comm NAME` in the node's agent pod, `sudo slowpath doctor --comm NAME` on a VM)
names the runtime
(Go, and sentinel-golang among its packages; the JVM; Node; Python), the runtime's fix, the
estimated CPU cost (wakeups/s times the cost of one wakeup measured on the node), and the call
sites of the timed waits.

What it costs: `instance_cgroup_comm:slowpath_timer_wakeup_cpu_seconds:rate5m` (and `instance:` for
the node) is the wakeup rate times `slowpath_timer_wakeup_cost_seconds`, the agent's measure of one
wakeup on that node, in CPUs (0.01 is 1 % of a core); the same figure `slowpath top`'s `CPU%`
column and the overview dashboard's "Estimated CPU of timer wakeups" use. To page on cost instead
of rate, alert on that record (for example `> 0.01` for 15 min).

Fix: use a coarser tick, a timer that is armed only when there is work, or block on an event
instead of polling. sentinel-golang: `UseCacheTime: false`.
"##;

/// The timer signal's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct TimerArgs {
    /// Timer wakeups per second of one process that make it a timer loop:
    /// the doctor's timer_loop finding, and the level above which a process
    /// gets its own slowpath_timer_requested_seconds histogram (reached in
    /// any one second).
    #[arg(long = "timer.loop-threshold", global = true, env = "SLOWPATH_TIMER_LOOP_THRESHOLD",
          default_value_t = DEFAULT_LOOP_PER_SEC, value_name = "WAKEUPS_PER_SECOND",
          value_parser = parse_loop_threshold)]
    pub loop_threshold: f64,
}

impl Default for TimerArgs {
    fn default() -> Self {
        Self {
            loop_threshold: DEFAULT_LOOP_PER_SEC,
        }
    }
}

/// `--timer.loop-threshold`: a positive, finite number of wakeups per second.
fn parse_loop_threshold(s: &str) -> Result<f64, &'static str> {
    match s.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n <= 1e9 => Ok(n),
        _ => Err("expected a positive number of wakeups per second, e.g. 200"),
    }
}

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut wakeups = Vec::new();
    let mut waits = Vec::new();
    let mut requested = Vec::new();
    let mut node = [[0u64; BUCKET_COUNT]; WAIT_SYSCALL_COUNT];
    let mut node_ns = [0u64; WAIT_SYSCALL_COUNT];
    let mut node_waits = [0u64; WAIT_SYSCALL_COUNT];
    for (key, series) in scrape.series() {
        let c = &series.counters;
        for (wait, &n) in WAIT_NAMES.iter().zip(&c.timer_wakeups) {
            push_nonzero(&mut wakeups, with(key, &[("wait", wait)]), n as f64);
        }
        for w in 0..WAIT_SYSCALL_COUNT {
            for (sum, n) in node[w].iter_mut().zip(c.timeout_buckets[w]) {
                *sum += n;
            }
            node_ns[w] += c.timeout_ns[w];
            node_waits[w] += c.timer_waits[w];
            if c.timer_hot_windows > 0 {
                let labels = with(key, &[("wait", WAIT_NAMES[w])]);
                push_nonzero(&mut waits, labels.clone(), c.timer_waits[w] as f64);
                requested.extend(timeout_histogram(
                    &labels,
                    &c.timeout_buckets[w],
                    c.timeout_ns[w],
                ));
            }
        }
    }
    let node_waits = (0..WAIT_SYSCALL_COUNT)
        .filter(|&w| node_waits[w] > 0)
        .map(|w| counter(&[("wait", WAIT_NAMES[w].to_string())], node_waits[w] as f64));
    let node = (0..WAIT_SYSCALL_COUNT).filter_map(|w| {
        timeout_histogram(&[("wait", WAIT_NAMES[w].to_string())], &node[w], node_ns[w])
    });
    vec![
        family(&TIMER_WAKEUPS, wakeups),
        family(&TIMER_WAITS, waits),
        family(&NODE_TIMER_WAITS, node_waits.collect()),
        family(&TIMER_REQUESTED, requested),
        family(&NODE_TIMER_REQUESTED, node.collect()),
        family(&WAKEUP_COST, wakeup_cost_gauge(scrape)),
    ]
}

/// The node's measured wakeup cost, when the worker has measured it.
fn wakeup_cost_gauge(scrape: &Scrape<'_>) -> Vec<Metric> {
    let cost = scrape.node.get::<WakeupCost>().and_then(|c| c.0);
    cost.map(|s| gauge(&[], s)).into_iter().collect()
}

fn timeout_histogram(labels: &[(&str, String)], buckets: &[u64], ns: u64) -> Option<Metric> {
    histogram(labels, &BUCKET_BOUNDS, buckets, ns as f64 / 1e9)
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    timer_loop_finding(obs).into_iter().collect()
}

/// Upper bound (seconds) of the bucket holding the median of `buckets`
/// (summed over waits), `None` when no timeout was seen; the last bucket
/// has no bound and says 10 s or more as `f64::INFINITY`.
fn median_timeout(c: &sp_counters) -> Option<f64> {
    let mut sum = [0u64; BUCKET_COUNT];
    for buckets in &c.timeout_buckets {
        for (s, n) in sum.iter_mut().zip(buckets) {
            *s += n;
        }
    }
    let (finite, total) = cumulative_buckets(&BUCKET_BOUNDS, &sum);
    if total == 0 {
        return None;
    }
    let half = total.div_ceil(2);
    Some(
        finite
            .iter()
            .find(|(_, n)| *n >= half)
            .map_or(f64::INFINITY, |(bound, _)| *bound),
    )
}

/// A process's timer wakeups per second by wait, and their sum.
fn wakeup_rates(d: &Delta, secs: f64) -> (f64, BTreeMap<String, f64>) {
    let detail: BTreeMap<String, f64> = WAIT_NAMES
        .iter()
        .zip(d.c.timer_wakeups)
        .filter(|(_, n)| *n > 0)
        .map(|(wait, n)| (format!("wakeups_per_second/{wait}"), n as f64 / secs))
        .collect();
    (detail.values().sum(), detail)
}

fn timer_loop_finding(obs: &Observation<'_>) -> Option<Finding> {
    let threshold = obs.args.timer.loop_threshold;
    let cost = obs.node.get::<WakeupCost>().and_then(|c| c.0);
    let processes = obs.ranked(|d| {
        let (rate, mut detail) = wakeup_rates(d, obs.secs);
        let median = median_timeout(&d.c);
        if rate < threshold || median.is_some_and(|m| m > SHORT_TIMEOUT_SECONDS) {
            return None;
        }
        if let Some(m) = median {
            detail.insert("median_requested_timeout_seconds".into(), m);
        }
        if let Some(cost) = cost {
            detail.insert("estimated_cpu_percent".into(), rate * cost * 100.0);
        }
        Some((rate, detail))
    });
    let top = processes.first()?;
    let mut evidence = BTreeMap::from([(
        "threshold_wakeups_per_second".to_string(),
        format!("{threshold}"),
    )]);
    if let Some(cost) = cost {
        evidence.insert(
            "cpu_seconds_per_wakeup".into(),
            format!("{:.2e} (measured on this node)", cost),
        );
    }
    Some(Finding {
        id: TIMER_LOOP.id,
        severity: Severity::Warning,
        title: format!(
            "{} is woken by a short timer {:.0} times/s",
            top.identity.comm, top.per_second
        ),
        evidence,
        processes,
        cause: "A short periodic timer (a ticker, a polling loop, a sleep in a loop) wakes the \
                process hundreds of times per second even when it has nothing to do; each \
                wakeup costs a timer interrupt, two context switches and a syscall, as \
                sentinel-golang's 1 ms time.Sleep ticker did in MOSN."
            .into(),
        fix: "Use a coarser tick, arm the timer only when there is work, or batch the periodic \
              work (see each process's runtime note)."
            .into(),
        expected_gain: Some(MOSN_GAIN.into()),
        cause_basis: CauseBasis::Guess {
            from: "wakeup rates and requested timeouts (no sampled frame matches a known source)"
                .into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_SLEEP),
        sources: Some((SOURCES, Compose::Replace)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::test_support::{delta, export_one_of, observe};
    use crate::signals::vocabulary::BUCKET_1MS;

    const FUTEX: usize = slot!(sp_wait::SP_WAIT_FUTEX);

    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(SOURCES);
    }
    const EPOLL: usize = slot!(sp_wait::SP_WAIT_EPOLL_WAIT);

    #[test]
    fn a_1ms_ticker_is_a_timer_loop_and_a_slow_or_long_one_is_not() {
        let go = delta("mosn", |c| {
            c.timer_wakeups[FUTEX] = 600;
            c.timer_wakeups[EPOLL] = 400;
            c.timeout_buckets[FUTEX][BUCKET_1MS] = 1000;
        });
        let f = observe(&[go], timer_loop_finding).unwrap();
        let p = &f.processes[0];
        assert_eq!(p.per_second, 1000.0);
        assert_eq!(p.detail["wakeups_per_second/futex"], 600.0);
        assert_eq!(p.detail["median_requested_timeout_seconds"], 1e-3);
        let slow = delta("slow", |c| c.timer_wakeups[FUTEX] = 100);
        assert!(observe(&[slow], timer_loop_finding).is_none());
        let long = delta("pool", |c| {
            c.timer_wakeups[FUTEX] = 1000;
            c.timeout_buckets[FUTEX][BUCKET_1MS + 2] = 1000; // 100 ms timeouts
        });
        assert!(observe(&[long], timer_loop_finding).is_none());
    }

    #[test]
    fn requested_timeouts_are_per_process_only_for_timer_loops() {
        let quiet = delta("quiet", |c| {
            c.timer_wakeups[FUTEX] = 3;
            c.timer_waits[FUTEX] = 5;
            c.timeout_buckets[FUTEX][BUCKET_1MS] = 3;
            c.timeout_ns[FUTEX] = 3_000_000;
        });
        let series = |fams: &[MetricFamily], family: &Family| {
            let f = fams.iter().find(|f| f.name() == family.name).unwrap();
            f.get_metric().to_vec()
        };
        let fams = export_one_of(&SIGNAL, quiet.clone());
        assert_eq!(
            series(&fams, &TIMER_WAKEUPS).len(),
            1,
            "one wakeup series: futex"
        );
        assert!(
            series(&fams, &TIMER_REQUESTED).is_empty(),
            "no per-process histogram"
        );
        assert!(
            series(&fams, &TIMER_WAITS).is_empty(),
            "no per-process wait counter"
        );
        let node = &series(&fams, &NODE_TIMER_REQUESTED)[0];
        assert_eq!(
            node.get_histogram().get_sample_count(),
            3,
            "the requests read"
        );
        assert_eq!(node.get_label()[0].value(), "futex");
        let node_waits = &series(&fams, &NODE_TIMER_WAITS)[0];
        assert_eq!(node_waits.get_counter().get_value(), 5.0, "every wait");
        let mut hot = quiet;
        hot.c.timer_hot_windows = 1;
        let fams = export_one_of(&SIGNAL, hot);
        assert_eq!(series(&fams, &TIMER_REQUESTED).len(), 1);
        assert_eq!(
            series(&fams, &TIMER_WAITS)[0].get_counter().get_value(),
            5.0
        );
    }
}
