//! The programs' own timing of their runs, the estimate of their in-kernel
//! time where the kernel's run-time statistics are not allowed (no
//! CAP_SYS_ADMIN for `BPF_ENABLE_STATS`, `kernel.bpf_stats_enabled` off).
//!
//! One run in `SP_SELF_TIMED_EVERY` (1,024) of each hook on each CPU reads
//! `bpf_ktime_get_ns()` three times, a b c, with the program between b and
//! c, and adds c - b and b - a to its CPU's `probe_time` slot (`struct
//! sp_probe_time`, bpf/slowpath.h; `probe_ran()` and `probe_timed()` in
//! bpf/core/stats.h). b - a is what a clock read adds to the span, so the
//! program's time per run is the sums' difference over the runs timed. Runs
//! that took longer than `SP_SELF_TIMED_MAX_NS` were interrupted and are
//! left out. What the kernel does before the program's first instruction
//! and after its last (its prologue, and the run counter's lookup before
//! the first read) is not in the span: a few ns a run.

use std::cell::Cell;

use libbpf_rs::{MapCore, MapFlags};

use super::loaded::Loaded;
use super::types::sp_probe_time;

/// Timed runs a figure from a short stretch needs (the start's untraced
/// syscalls): with fewer, one cold run (a cache miss costs ~100 ns) moves
/// the mean by more than the estimate's 25 %.
pub(super) const MIN_TIMED_RUNS: u64 = 32;

/// Timed runs a hook's estimate needs before it is exported: fewer than
/// [`MIN_TIMED_RUNS`], so that a hook that runs ~20,000 times a minute
/// (timer expiries: one timed run in 1,024 per CPU) is charged within a
/// minute; noisier at first, on a hook that costs little in all.
pub(super) const MIN_FIRST_TIMED_RUNS: u64 = 8;

/// A hook's self-timed runs, all CPUs summed (see the module's text).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct SelfTimed {
    /// ns from the second clock read to the third, summed.
    pub ns: u64,
    /// ns between the first two reads (a read's own cost), summed.
    pub clock_ns: u64,
    /// Runs timed.
    pub runs: u64,
}

impl SelfTimed {
    /// The programs' time per run in ns over the runs timed since `earlier`
    /// (at least 0); `None` with fewer than `min_runs` of them.
    pub fn per_run_since(&self, earlier: &SelfTimed, min_runs: u64) -> Option<f64> {
        let runs = self.runs.saturating_sub(earlier.runs);
        if runs < min_runs {
            return None;
        }
        let ns = self.ns.saturating_sub(earlier.ns) as f64;
        let clock = self.clock_ns.saturating_sub(earlier.clock_ns) as f64;
        Some(((ns - clock) / runs as f64).max(0.0))
    }
}

/// Each hook's self-timed runs, in table order, from its `probe_time` slot
/// (`slots`, as the run counters'); a zero reading for a hook without one.
pub(super) fn self_timed(loaded: &Loaded<'_>, slots: &[Option<u32>]) -> Vec<SelfTimed> {
    let map = &loaded.skel.maps.probe_time;
    slots
        .iter()
        .map(|slot| slot.map_or_else(SelfTimed::default, |s| cpus_summed(map, s)))
        .collect()
}

/// Each hook's estimated seconds, from its `timed` runs and all its `runs`
/// (table order): the runs at the mean of those timed since the start, so
/// that each timed run stands for its share of them; `None` before
/// [`MIN_FIRST_TIMED_RUNS`] were timed. Never below the hook's last figure
/// (`highs`, updated): a counter does not go back when cheap runs lower
/// the mean.
pub(super) fn estimated_seconds(
    timed: &[SelfTimed],
    runs: &[u64],
    highs: &[Cell<f64>],
) -> Vec<Option<f64>> {
    timed
        .iter()
        .zip(runs)
        .zip(highs)
        .map(|((t, &n), high)| {
            let per_run = t.per_run_since(&SelfTimed::default(), MIN_FIRST_TIMED_RUNS)?;
            high.set(high.get().max(n as f64 * per_run / 1e9));
            Some(high.get())
        })
        .collect()
}

/// Slot `slot` of `probe_time`, summed over the CPUs.
fn cpus_summed(map: &dyn MapCore, slot: u32) -> SelfTimed {
    let Ok(Some(cpus)) = map.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY) else {
        return SelfTimed::default();
    };
    cpus.iter()
        .filter_map(|bytes| {
            let mut v = sp_probe_time::default();
            plain::copy_from_bytes(&mut v, bytes).ok()?;
            Some(v)
        })
        .fold(SelfTimed::default(), |sum, v| SelfTimed {
            ns: sum.ns + v.ns,
            clock_ns: sum.clock_ns + v.clock_ns,
            runs: sum.runs + v.runs,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_its_span_less_a_clock_read() {
        let earlier = SelfTimed {
            ns: 1_000,
            clock_ns: 400,
            runs: 10,
        };
        // 40 runs since: 40 x (50 ns span - 20 ns read) = 30 ns a run
        let now = SelfTimed {
            ns: 1_000 + 40 * 50,
            clock_ns: 400 + 40 * 20,
            runs: 50,
        };
        assert_eq!(now.per_run_since(&earlier, MIN_TIMED_RUNS), Some(30.0));
        assert_eq!(
            now.per_run_since(&now, MIN_TIMED_RUNS),
            None,
            "no run timed since"
        );
        let few = SelfTimed {
            runs: earlier.runs + MIN_TIMED_RUNS - 1,
            ..now
        };
        assert_eq!(few.per_run_since(&earlier, MIN_TIMED_RUNS), None);
        // reads slower than the spans (a frequency change): never below 0
        let odd = SelfTimed {
            clock_ns: now.ns + 5_000,
            ..now
        };
        assert_eq!(odd.per_run_since(&earlier, MIN_TIMED_RUNS), Some(0.0));
    }

    #[test]
    fn each_timed_run_stands_for_its_share_and_the_figure_never_goes_back() {
        let highs = [Cell::new(0.0), Cell::new(0.0)];
        let few = SelfTimed {
            ns: 700,
            clock_ns: 0,
            runs: MIN_FIRST_TIMED_RUNS - 1,
        };
        // 10 timed runs of 100 ns spans and 20 ns reads: 80 ns each, so
        // 10,240 runs are 819,200 ns
        let ten = SelfTimed {
            ns: 1_000,
            clock_ns: 200,
            runs: 10,
        };
        let out = estimated_seconds(&[ten, few], &[10_240, 7_168], &highs);
        assert_eq!(out, vec![Some(819_200e-9), None]);
        // a cheaper timed run lowers the mean below what was exported
        let cheaper = SelfTimed {
            ns: 1_010,
            clock_ns: 210,
            runs: 11,
        };
        let out = estimated_seconds(&[cheaper, few], &[10_300, 7_168], &highs);
        assert_eq!(out[0], Some(819_200e-9), "held at the last figure");
    }
}
