//! The vDSO canary: the agent reads each vDSO clock through libc in a small
//! batch, times it, and checks its own BPF counts. If the batch shows up as
//! `clock_gettime` syscalls of that clock in the agent's own `procs` entry,
//! the node's reads of that clock fall off the vDSO (for example a `xen`,
//! `hpet` or `acpi_pm` clocksource, which the vDSO cannot read).

use std::sync::Arc;
use std::time::Instant;

use super::{kernel_clockid, VDSO_CLOCKS};
use crate::bpf::slot;
use crate::bpf::types::sp_clock;
use crate::node::{Fact, NodeFact};
use crate::signals::KernelView;

/// The canary's last reading of one clock.
#[derive(Clone, Debug)]
pub struct CanaryReading {
    pub clock: sp_clock,
    /// Seconds per libc `clock_gettime` of this clock (the median of the
    /// batch's slices, [`time_batch`]).
    pub seconds_per_read: f64,
    /// Whether the batch entered the kernel; `None` when the syscall probe
    /// is not attached, so the kernel side could not tell.
    pub fell_back: Option<bool>,
}

/// The last canary run: one reading per vDSO clock.
#[derive(Clone, Debug, Default)]
pub struct CanaryReadings(pub Vec<CanaryReading>);

impl NodeFact for CanaryReadings {}

impl CanaryReadings {
    /// Whether the agent's reads of `clock` fell back, when the canary knows.
    pub fn verdict(&self, clock: sp_clock) -> Option<bool> {
        self.0
            .iter()
            .find(|c| c.clock == clock)
            .and_then(|c| c.fell_back)
    }
}

/// One canary run (the agent's worker, every `--canary.interval`), with
/// the agent's own clock syscall counts from the kernel's process table.
pub fn check(kernel: &dyn KernelView) -> Fact {
    Arc::new(CanaryReadings(run(|clock| {
        kernel.own_counters().map(|c| c.clock_gettime[slot!(clock)])
    })))
}

/// Reads per clock in one canary batch. Costs ~30 us per clock through the
/// vDSO, a few ms when every read is a syscall.
pub const BATCH: u64 = 1000;

/// The batch is timed in this many slices of equal size.
const SLICES: u64 = 10;

/// Seconds per call of `read` over `BATCH` calls, each given a valid,
/// writable timespec: the median of the means of [`SLICES`] slices, so
/// that one slice that lost the CPU (an interrupt, another thread of a busy
/// node) does not raise the figure.
fn time_batch(mut read: impl FnMut(*mut libc::timespec)) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let per_slice = BATCH / SLICES;
    let mut means: Vec<f64> = (0..SLICES)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_slice {
                read(&mut ts);
            }
            start.elapsed().as_secs_f64() / per_slice as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[means.len() / 2]
}

/// Time `BATCH` libc reads of `clock`; returns seconds per read
/// ([`time_batch`]: the median slice's mean).
pub fn time_reads(clock: sp_clock) -> f64 {
    let id = kernel_clockid(clock);
    // SAFETY: `time_batch` passes a valid, writable timespec.
    time_batch(|ts| unsafe {
        libc::clock_gettime(id, ts);
    })
}

/// Time `BATCH` raw `syscall(SYS_clock_gettime)` reads of `clock` (what a
/// process that bypasses the vDSO pays); seconds per read as
/// [`time_reads`].
pub fn time_raw_reads(clock: sp_clock) -> f64 {
    let id = kernel_clockid(clock);
    // SAFETY: clock_gettime(2) writes one timespec through the valid,
    // writable pointer `time_batch` passes; the id is an integer.
    time_batch(|ts| unsafe {
        libc::syscall(libc::SYS_clock_gettime, id, ts);
    })
}

/// Run one batch per vDSO clock. `own_syscalls(clock)` returns the agent's
/// own `clock_gettime` syscall count for that clock so far, or `None` when
/// it cannot be known.
pub fn run(mut own_syscalls: impl FnMut(sp_clock) -> Option<u64>) -> Vec<CanaryReading> {
    VDSO_CLOCKS
        .iter()
        .map(|&clock| {
            let before = own_syscalls(clock);
            let seconds_per_read = time_reads(clock);
            let after = own_syscalls(clock);
            let fell_back = match (before, after) {
                (Some(b), Some(a)) => Some(a.saturating_sub(b) >= BATCH),
                _ => None,
            };
            CanaryReading {
                clock,
                seconds_per_read,
                fell_back,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_needs_the_whole_batch_in_the_kernel() {
        let mut calls = 0u64;
        // Every read counted as a syscall: fell back.
        let result = run(|_| {
            calls += BATCH;
            Some(calls)
        });
        assert!(result.iter().all(|c| c.fell_back == Some(true)));
        // No syscalls: served by the vDSO.
        let result = run(|_| Some(7));
        assert!(result.iter().all(|c| c.fell_back == Some(false)));
        assert!(result.iter().all(|c| c.seconds_per_read > 0.0));
        // Unknown counts: unknown verdict.
        assert!(run(|_| None).iter().all(|c| c.fell_back.is_none()));
    }
}
