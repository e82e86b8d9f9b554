//! What one system call costs on this node, for the estimate of a sweep's
//! CPU: the agent times a small batch of `getppid`, which slowpath does not
//! count, as the other signals' syscall costs are taken. A close that
//! returns EBADF is that and a look into the file table, so the figure is
//! its floor (within a few ns).

use std::sync::Arc;
use std::time::Duration;

use crate::node::{median_seconds_per_call, Fact, NodeFact};
use crate::signals::{KernelView, SignalArgs};

/// Seconds one untraced system call costs on this node (`getppid`), with
/// slowpath attached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyscallCost(pub f64);

impl NodeFact for SyscallCost {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("fd_close_syscall_seconds", &self.0))
    }
}

/// How often the worker measures it: a batch costs ~20 us (100 calls).
pub fn every(_: &SignalArgs) -> Duration {
    Duration::from_secs(30)
}

/// The worker's node check: measure now.
pub fn check(_: &dyn KernelView) -> Fact {
    Arc::new(SyscallCost(measure()))
}

/// Calls per measurement, timed in [`SLICES`] slices of equal size.
const BATCH: u32 = 100;
const SLICES: u32 = 10;

/// Seconds per `getppid`: the median of the means of [`SLICES`] slices.
pub fn measure() -> f64 {
    median_seconds_per_call(SLICES, BATCH / SLICES, || {
        // SAFETY: getppid takes no argument and cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_costs_between_tens_of_ns_and_a_ms() {
        let s = measure();
        assert!(s > 1e-8 && s < 1e-3, "{s}");
    }
}
