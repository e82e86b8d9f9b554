//! What a purge costs on this node, for the estimate of a storm's CPU: one
//! system call (a batch of `getppid`, which slowpath does not count, timed
//! as the other signals' syscall costs are) and the refault of one 4 KiB
//! page (the first touch of a fresh anonymous mapping, timed once at the
//! agent's start: the same fault into a zeroed page that follows a
//! `MADV_DONTNEED`). The TLB shootdown a purge sends is not in either.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::node::{median_seconds_per_call, Fact, NodeFact};
use crate::signals::{KernelView, SignalArgs};

/// Seconds per system call (`getppid`, with slowpath attached) and per
/// refaulted 4 KiB page (`None`: the mapping was refused).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PurgeCost {
    pub syscall_seconds: f64,
    pub refault_seconds_per_page: Option<f64>,
}

impl PurgeCost {
    /// CPU seconds per second of `calls` purges a second giving back `bytes`
    /// a second, every page of which is faulted in again (the storm's
    /// pattern; a process that never touches them again pays less).
    pub fn cpu(&self, calls: f64, bytes: f64) -> f64 {
        let pages = (bytes / PAGE as f64).ceil();
        calls * self.syscall_seconds + pages * self.refault_seconds_per_page.unwrap_or(0.0)
    }
}

impl NodeFact for PurgeCost {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("purge_cost", self))
    }
}

/// How often the worker measures the syscall: a batch costs ~20 us.
pub fn every(_: &SignalArgs) -> Duration {
    Duration::from_secs(30)
}

/// The worker's node check: the syscall now, the refault from the start.
pub fn check(_: &dyn KernelView) -> Fact {
    Arc::new(PurgeCost {
        syscall_seconds: syscall_seconds(),
        refault_seconds_per_page: *REFAULT.get_or_init(refault_seconds_per_page),
    })
}

static REFAULT: OnceLock<Option<f64>> = OnceLock::new();

const BATCH: u32 = 100;
const SLICES: u32 = 10;

/// Seconds per `getppid`: the median of the means of [`SLICES`] slices.
fn syscall_seconds() -> f64 {
    median_seconds_per_call(SLICES, BATCH / SLICES, || {
        // SAFETY: getppid takes no argument and cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
    })
}

/// The page the estimate counts in (x86_64's and most arm64 kernels').
const PAGE: usize = 4096;
/// Pages touched: 1 MiB, below a huge page, so never a THP fault.
const PAGES: usize = 256;

/// Seconds to fault in one page of a fresh private anonymous mapping,
/// timed once (one mmap and one munmap of the agent's own, far below the
/// series threshold).
fn refault_seconds_per_page() -> Option<f64> {
    let len = PAGE * PAGES;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = Instant::now();
    for i in 0..PAGES {
        // SAFETY: i * PAGE is inside the mapping of len bytes made above.
        unsafe { std::ptr::write_volatile((p as *mut u8).add(i * PAGE), 1) };
    }
    let took = start.elapsed().as_secs_f64();
    // SAFETY: the mapping made above, unmapped once; no reference outlives it.
    unsafe { libc::munmap(p, len) };
    Some(took / PAGES as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refault_costs_between_tens_of_ns_and_a_ms() {
        let s = refault_seconds_per_page().unwrap();
        assert!(s > 1e-8 && s < 1e-3, "{s}");
    }

    #[test]
    fn the_cpu_is_the_calls_and_every_page_given_back() {
        let cost = PurgeCost {
            syscall_seconds: 1e-6,
            refault_seconds_per_page: Some(2e-7),
        };
        // 1,000 calls/s of 64 KiB each: 16,000 pages/s
        let cpu = cost.cpu(1000.0, 1000.0 * 65536.0);
        assert!((cpu - (1e-3 + 16_000.0 * 2e-7)).abs() < 1e-12, "{cpu}");
    }
}
