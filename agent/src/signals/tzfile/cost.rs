//! The cost of one time-zone file check on this node: the agent stats
//! `/etc/localtime` in a small timed batch, as glibc's `localtime()` does
//! with `TZ` unset, so that a finding can put a process's checks in CPU
//! seconds (the syscall, the path walk through the symlink and the BPF
//! programs on it, which differ by CPU, mitigations and file system).

use std::sync::Arc;
use std::time::Duration;

use crate::node::{median_seconds_per_call, Fact, NodeFact};
use crate::signals::{KernelView, SignalArgs};

/// Seconds one `stat("/etc/localtime")` costs on this node, when the file
/// could be stat'ed (`None` on a node without it: glibc then reads UTC and
/// still makes the call, but there is no file to time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TzfileCheckCost(pub Option<f64>);

impl NodeFact for TzfileCheckCost {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("tzfile_check_seconds", &self.0))
    }
}

/// How often the worker measures it: a batch costs ~0.5 ms (100 stats).
pub fn every(_: &SignalArgs) -> Duration {
    Duration::from_secs(30)
}

/// The worker's node check: measure now.
pub fn check(_: &dyn KernelView) -> Fact {
    Arc::new(TzfileCheckCost(measure()))
}

/// Stats per measurement, timed in [`SLICES`] slices of equal size.
const BATCH: u32 = 100;
const SLICES: u32 = 10;

/// Seconds per `stat` of `/etc/localtime`: the median of the means of
/// [`SLICES`] slices, so that one slice that lost the CPU does not raise
/// the figure. The path is copied to the stack first: the kernel side
/// counts only paths that lie in the calling code's own image (the C
/// library's literal), so the agent's own measurement is never counted as
/// a check.
pub fn measure() -> Option<f64> {
    let path = *b"/etc/localtime\0";
    let stat_once = || {
        // SAFETY: `path` is NUL-terminated and lives across the call;
        // `st` is a valid, writable stat buffer.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::stat(path.as_ptr().cast(), &mut st) == 0
        }
    };
    if !stat_once() {
        return None;
    }
    Some(median_seconds_per_call(SLICES, BATCH / SLICES, || {
        stat_once();
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_costs_a_syscall() {
        // A stat is between a fraction of a microsecond and a millisecond
        // anywhere; without the file there is nothing to time.
        match measure() {
            Some(s) => assert!(s > 5e-8 && s < 1e-3, "{s}"),
            None => assert!(std::fs::metadata("/etc/localtime").is_err()),
        }
    }
}
