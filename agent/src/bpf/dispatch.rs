//! Timing a syscall that slowpath does not count, to see what its syscall
//! hook costs outside its programs (see `cost.rs`). With a program on
//! `sys_enter` as tp_btf or raw_tp, every syscall of the node takes the
//! kernel's traced path to reach it, counted or not; with fentry only the
//! counted syscalls' functions run a program, and an untraced syscall costs
//! what it costs without slowpath.

/// Slices timed; the fastest tenth's slowest slice is kept, so that
/// interrupts, a busy SMT sibling or cache misses in most of them do not
/// move the figure (the median moved by up to 60 ns between agent starts
/// on a quiet 2-vCPU VM; this by a few).
const SLICES: usize = 81;

/// Syscalls per slice: ~0.1-1 ms, long next to a clock read, short next to
/// a scheduler tick.
const CALLS_PER_SLICE: u32 = 2_000;

/// Batches timed: now and then a whole batch runs slow (seen: +30 % for
/// all 81 slices of one, on a CPU shared with a busy process), so the
/// lowest of a few is kept.
const BATCHES: usize = 3;

/// Time between batches: long enough for what slowed one to pass.
const BATCH_GAP: std::time::Duration = std::time::Duration::from_millis(10);

/// The time of one untraced syscall, from [`time_untraced_syscall`].
#[derive(Clone, Copy, Debug)]
pub struct UntracedTiming {
    /// CPU time per call, in ns (see [`time_untraced_syscall`]).
    pub ns_per_call: f64,
}

/// Time `getppid(2)`, which no slowpath signal counts and which does
/// nothing but read a pointer, in [`BATCHES`] batches a few ms apart: in
/// each, [`SLICES`] slices of [`CALLS_PER_SLICE`] calls and the 10th
/// percentile of their time per call; the lowest batch's figure. The
/// thread's CPU time, not the wall clock: a slice preempted by a busy node's
/// other work counts only what this thread ran. Takes ~100 ms.
pub fn time_untraced_syscall() -> UntracedTiming {
    let batches = (0..BATCHES).map(|batch| {
        if batch > 0 {
            std::thread::sleep(BATCH_GAP);
        }
        time_batch()
    });
    UntracedTiming {
        ns_per_call: batches.fold(f64::INFINITY, f64::min),
    }
}

/// One batch: the 10th percentile of its slices' ns per call.
fn time_batch() -> f64 {
    let mut per_call: Vec<f64> = (0..SLICES)
        .map(|_| {
            let start = thread_cpu_ns();
            for _ in 0..CALLS_PER_SLICE {
                // SAFETY: getppid takes no argument and cannot fail. The raw
                // syscall, so that no libc cache answers in its place.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
            (thread_cpu_ns() - start) / f64::from(CALLS_PER_SLICE)
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[SLICES / 10]
}

/// This thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`: the
/// scheduler's runtime of the thread, exact to the ns when read).
fn thread_cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to write; this clock
    // exists on every kernel slowpath runs on, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}
