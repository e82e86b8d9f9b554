//! Sleeps: `nanosleep` and `clock_nanosleep` calls (hook `sys_enter`, or
//! fentry) by clock and relative/absolute mode, and the requested length of
//! relative sleeps, bucketed exactly in the kernel (`sp_sleep_bucket()` in
//! `bpf/classify.h`).
//!
//! Doctor rule: a sleep loop, a process sleeping 1 ms or less hundreds of
//! times a second (the sentinel-golang ticker).

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{
    sp_callsite_kind, sp_counters, sp_sleep_bucket, sp_sleep_mode, sp_sleep_syscall,
};
use crate::exposition::{cumulative_buckets, family, histogram, push_nonzero, with, Family};
use crate::finding::{Finding, Observation, Severity};
use crate::signals::clock::{CLOCK_COUNT, CLOCK_NAMES};
use crate::signals::{Scrape, Signal};

const SYSCALL_COUNT: usize = slot!(sp_sleep_syscall::SP_SLEEP_SYSCALL_COUNT);
const MODE_COUNT: usize = slot!(sp_sleep_mode::SP_SLEEP_MODE_COUNT);
const BUCKET_COUNT: usize = slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_COUNT);

/// `syscall` label values, indexed by `enum sp_sleep_syscall`.
pub const SYSCALL_NAMES: [&str; SYSCALL_COUNT] = ["nanosleep", "clock_nanosleep"];

/// `mode` label values, indexed by `enum sp_sleep_mode`.
pub const MODE_NAMES: [&str; MODE_COUNT] = ["relative", "absolute"];

/// Upper bounds (seconds) of the requested-sleep histogram buckets; the BPF
/// side has one more bucket for +Inf.
pub const BUCKET_BOUNDS: [f64; BUCKET_COUNT - 1] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0];

/// Index of the bucket that ends at 1 ms.
const BUCKET_1MS: usize = slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_1MS);
const _: () = assert!(BUCKET_BOUNDS[BUCKET_1MS] == 1e-3);

const _: fn(&sp_counters) -> &[[[u64; MODE_COUNT]; CLOCK_COUNT]; SYSCALL_COUNT] =
    |c| &c.sleep_calls;
const _: fn(&sp_counters) -> &[[u64; BUCKET_COUNT]; SYSCALL_COUNT] = |c| &c.sleep_buckets;
const _: fn(&sp_counters) -> &[u64; SYSCALL_COUNT] = |c| &c.sleep_requested_ns;

/// Doctor threshold: sleeps of 1 ms or less per second of one process.
const SHORT_SLEEPS_PER_SEC: f64 = 200.0;

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

pub const SIGNAL: Signal = Signal {
    name: "sleep",
    families: &[&SLEEP_CALLS, &SLEEP_REQUESTED],
    export,
    diagnose,
};

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
            let sum = c.sleep_requested_ns[s] as f64 / 1e9;
            requested.extend(histogram(&labels, &BUCKET_BOUNDS, &c.sleep_buckets[s], sum));
        }
    }
    vec![
        family(&SLEEP_CALLS, calls),
        family(&SLEEP_REQUESTED, requested),
    ]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    sleep_loop_finding(obs).into_iter().collect()
}

fn sleep_loop_finding(obs: &Observation<'_>) -> Option<Finding> {
    let secs = obs.secs;
    let processes = obs.ranked(|d| {
        let mut short = 0u64;
        let mut detail = BTreeMap::new();
        for buckets in &d.c.sleep_buckets {
            let (finite, total) = cumulative_buckets(&BUCKET_BOUNDS, buckets);
            short += finite[BUCKET_1MS].1;
            if total > 0 {
                for (i, &n) in buckets.iter().enumerate() {
                    if n > 0 {
                        let le = BUCKET_BOUNDS
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
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_SLEEP),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::test_support::{delta, export_one_of, observe};

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
            c.sleep_buckets[CLOCK_NANOSLEEP][BUCKET_1MS] = 1000;
            c.sleep_requested_ns[CLOCK_NANOSLEEP] = 1_000_000_000;
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

    #[test]
    fn ticker_is_a_sleep_loop_and_a_10ms_ticker_is_not() {
        let ticker = delta("mosn", |c| {
            c.sleep_buckets[CLOCK_NANOSLEEP][BUCKET_1MS] = 1000
        });
        let f = observe(&[ticker], sleep_loop_finding).unwrap();
        assert_eq!(f.processes[0].per_second, 1000.0);
        let slow = delta("slow", |c| {
            c.sleep_buckets[CLOCK_NANOSLEEP][BUCKET_1MS + 1] = 1000
        });
        assert!(observe(&[slow], sleep_loop_finding).is_none());
    }
}
