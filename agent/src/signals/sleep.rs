//! Sleeps: `nanosleep` and `clock_nanosleep` calls (hook `sys_enter`, or
//! fentry) by clock and relative/absolute mode, and the requested length of
//! every sleep, bucketed exactly in the kernel (`sp_timeout_bucket()` in
//! `bpf/classify.h`): a relative request as given, an absolute one
//! (`TIMER_ABSTIME`) as its deadline minus the clock's time at the call.
//!
//! No doctor rule of its own: a process that sleeps in a short loop is a
//! timer loop, which the `timer` signal finds whatever syscall it waits in.

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{
    sp_callsite_kind, sp_counters, sp_sleep_mode, sp_sleep_syscall, sp_syscall_group, sp_wait,
};
use crate::bpf::{KernelBtf, RodataPatch};
use crate::exposition::{family, histogram, push_nonzero, with, Family};
use crate::finding::Finding;
use crate::signals::vocabulary::{update_clock_offsets, BUCKET_BOUNDS, CLOCK_COUNT, CLOCK_NAMES};
use crate::signals::CallKind;
use crate::signals::FamilyDoc;
use crate::signals::{
    KernelNeeds, NodeNeeds, Observation, Recorded, Scrape, Signal, SignalArgs, Top,
};

const SYSCALL_COUNT: usize = slot!(sp_sleep_syscall::SP_SLEEP_SYSCALL_COUNT);
const MODE_COUNT: usize = slot!(sp_sleep_mode::SP_SLEEP_MODE_COUNT);

/// `syscall` label values, indexed by `enum sp_sleep_syscall`.
pub const SYSCALL_NAMES: [&str; SYSCALL_COUNT] = ["nanosleep", "clock_nanosleep"];

/// `mode` label values, indexed by `enum sp_sleep_mode`.
pub const MODE_NAMES: [&str; MODE_COUNT] = ["relative", "absolute"];

const _: fn(&sp_counters) -> &[[[u64; MODE_COUNT]; CLOCK_COUNT]; SYSCALL_COUNT] =
    |c| &c.sleep_calls;
// The requested lengths of sleeps are the first two slots of the timed
// waits' `timeout_buckets` and `timeout_ns` (by `enum sp_wait`).
const _: () =
    assert!(slot!(sp_wait::SP_WAIT_NANOSLEEP) == slot!(sp_sleep_syscall::SP_SLEEP_NANOSLEEP));
const _: () = assert!(
    slot!(sp_wait::SP_WAIT_CLOCK_NANOSLEEP) == slot!(sp_sleep_syscall::SP_SLEEP_CLOCK_NANOSLEEP)
);

const SLEEP_CALLS: Family = Family {
    name: "slowpath_sleep_calls_total",
    help: "nanosleep/clock_nanosleep calls (raw_syscalls:sys_enter, or fentry) by clock and relative/absolute (TIMER_ABSTIME) mode",
    kind: MetricType::COUNTER,
};
const SLEEP_REQUESTED: Family = Family {
    name: "slowpath_sleep_requested_seconds",
    help: "Requested durations of nanosleep/clock_nanosleep calls, in seconds, bucketed exactly in the kernel; an absolute (TIMER_ABSTIME) request counts as its deadline minus the clock's time at the call",
    kind: MetricType::HISTOGRAM,
};

// The rates the chart's recording rules record.
const CALLS: Recorded = Recorded {
    name: "slowpath_sleep_calls",
    family: &SLEEP_CALLS,
    only: None,
    fleet: None,
};

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &SLEEP_CALLS,
        labels: "`syscall` (`nanosleep`, `clock_nanosleep`), `clock`, `mode` (`relative`, `absolute`)",
        counts: "sleep calls; glibc `nanosleep()`/`usleep()` issue `clock_nanosleep(CLOCK_REALTIME, 0)`; `nanosleep(2)` itself is `monotonic`/`relative`",
        hook: "`raw_syscalls:sys_enter`",
    },
    FamilyDoc {
        family: &SLEEP_REQUESTED,
        labels: "`syscall`",
        counts: "histogram of requested sleep durations in seconds, buckets `le` 1e-6 … 10, classified exactly in the kernel from the user's timespec; an absolute (`TIMER_ABSTIME`) sleep counts as its deadline minus the clock's time at the call (EINVAL requests are counted as calls only)",
        hook: "`raw_syscalls:sys_enter`",
    },
];

pub const SIGNAL: Signal = Signal {
    name: "sleep",
    summary: "nanosleep/clock_nanosleep calls and their requested lengths",
    case: "sleeps",
    story: None,
    families: &[&SLEEP_CALLS, &SLEEP_REQUESTED],
    export,
    diagnose,
    enrich: None,
    sources: &[],
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_SLEEP,
        name: "sleep",
        what: "sleeps, and futex, epoll, poll and select waits with a timeout",
    }],
    node: NodeNeeds::NONE,
    kernel: KernelNeeds {
        hooks: &[],
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_SLEEPS],
        rodata: Some(count_sleep_calls),
        upkeep: Some(update_clock_offsets),
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[],
        timeouts: Some(&SLEEP_REQUESTED),
        not_shown: &[(
            &SLEEP_CALLS,
            "a sleep that expires is a timer wakeup: the timer signal's WAKEUP/s counts it, at the cost of one",
        )],
        node: None,
    },
    recorded: &[CALLS],
    finding_rules: &[],
    family_docs: FAMILY_DOCS,
    promql: &[],
    alert: None,
    runbook: RUNBOOK,
};

/// No section of docs/runbook.md: it has no alert of its own (its counts
/// feed the timer signal's figures).
const RUNBOOK: &str = "";

/// Switch on the counting of the sleeps' calls by clock and mode
/// (`count_sleep_calls`, this signal's alone). Their requested lengths
/// come with the group SLEEPS, which the timer signal counts too: to it a
/// sleep is a timed wait.
fn count_sleep_calls(_: &SignalArgs, _: &KernelBtf) -> RodataPatch {
    Box::new(|rodata| rodata.count_sleep_calls = true)
}

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut calls = Vec::new();
    let mut requested = Vec::new();
    for (key, series) in scrape.series() {
        let c = &series.counters;
        for (s, syscall) in SYSCALL_NAMES.iter().enumerate() {
            for (clk, clock) in CLOCK_NAMES.iter().enumerate() {
                for (m, mode) in MODE_NAMES.iter().enumerate() {
                    let labels = [("syscall", *syscall), ("clock", *clock), ("mode", *mode)];
                    push_nonzero(
                        &mut calls,
                        with(key, &labels),
                        c.sleep_calls[s][clk][m] as f64,
                    );
                }
            }
            let labels = with(key, &[("syscall", syscall)]);
            let sum = c.timeout_ns[s] as f64 / 1e9;
            requested.extend(histogram(
                &labels,
                &BUCKET_BOUNDS,
                &c.timeout_buckets[s],
                sum,
            ));
        }
    }
    vec![
        family(&SLEEP_CALLS, calls),
        family(&SLEEP_REQUESTED, requested),
    ]
}

fn diagnose(_: &Observation<'_>) -> Vec<Finding> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::test_support::{delta, export_one_of};
    use crate::signals::vocabulary::BUCKET_1MS;

    fn export_one(d: crate::finding::Delta) -> Vec<MetricFamily> {
        export_one_of(&SIGNAL, d)
    }

    const CLOCK_NANOSLEEP: usize = slot!(sp_sleep_syscall::SP_SLEEP_CLOCK_NANOSLEEP);

    #[test]
    fn sleep_histogram_is_cumulative_with_sum_in_seconds() {
        let realtime = slot!(crate::bpf::types::sp_clock::SP_CLOCK_REALTIME);
        let relative = slot!(sp_sleep_mode::SP_SLEEP_RELATIVE);
        let d = delta("ticker", |c| {
            c.sleep_calls[CLOCK_NANOSLEEP][realtime][relative] = 1000;
            c.timeout_buckets[CLOCK_NANOSLEEP][BUCKET_1MS] = 1000;
            c.timeout_ns[CLOCK_NANOSLEEP] = 1_000_000_000;
        });
        let fams = export_one(d);
        let h = fams[1].get_metric()[0].get_histogram();
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
        let m = &fams[0].get_metric()[0];
        let label = |name: &str| {
            m.get_label()
                .iter()
                .find(|l| l.name() == name)
                .map(|l| l.value().to_string())
                .unwrap()
        };
        assert_eq!(label("syscall"), "clock_nanosleep");
        assert_eq!(label("clock"), "realtime");
        assert_eq!(label("mode"), "relative");
    }
}
