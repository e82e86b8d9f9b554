//! The CPU cost of one timed wakeup on this node, measured by the agent's
//! worker (and so the doctor's) to put a timer loop's wakeups in CPU
//! seconds: the syscall, arming the timer and two context switches, which
//! differ by CPU and by mitigations. Exported as
//! `slowpath_timer_wakeup_cost_seconds`, so that findings, `slowpath top`,
//! dashboards and alerts use the one figure.

use std::sync::Arc;
use std::time::Duration;

use crate::node::{Fact, NodeFact};
use crate::signals::{KernelView, SignalArgs};

/// CPU seconds one timed wakeup costs the woken thread, when measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WakeupCost(pub Option<f64>);

impl NodeFact for WakeupCost {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("timer_wakeup_cost_seconds", &self.0))
    }
}

/// How often the worker measures it: one measurement keeps the worker
/// about 50 ms (200 sleeps of 200 us) for ~1.5 ms of CPU.
pub fn every(_: &SignalArgs) -> Duration {
    Duration::from_secs(300)
}

/// The worker's node check: measure now.
pub fn check(_: &dyn KernelView) -> Fact {
    Arc::new(WakeupCost(wakeup_cost()))
}

/// Sleeps in one wakeup-cost measurement, and how long each asks for.
const WAKEUP_SAMPLES: u32 = 200;
const WAKEUP_SLEEP: libc::timespec = libc::timespec {
    tv_sec: 0,
    tv_nsec: 200_000,
};

/// CPU seconds one timed wakeup costs the woken thread on this node: the
/// thread CPU time (`CLOCK_THREAD_CPUTIME_ID`) of [`WAKEUP_SAMPLES`] short
/// `clock_nanosleep` calls, each ended by its timer (syscall entry and exit,
/// arming the timer, switching out and back in), divided by their number.
/// `None` if the thread CPU clock cannot be read.
pub fn wakeup_cost() -> Option<f64> {
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
    };
    let start = cpu()?;
    for _ in 0..WAKEUP_SAMPLES {
        // SAFETY: a valid request pointer and a NULL remainder are allowed.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                0,
                &WAKEUP_SLEEP,
                std::ptr::null_mut(),
            );
        }
    }
    Some((cpu()? - start) / WAKEUP_SAMPLES as f64)
}
