//! What several signals name alike, so that no signal imports another: the
//! clock classes (`enum sp_clock`: the clock signal's reads, the sleep
//! signal's sleeps), the buckets of requested lengths (`enum
//! sp_sleep_bucket`: requested sleeps and the timer signal's requested
//! timeouts) and the clock offsets both need for absolute deadlines.

use crate::bpf::slot;
use crate::bpf::types::{bss, sp_clock, sp_sleep_bucket};

/// Number of `enum sp_clock` classes.
pub const CLOCK_COUNT: usize = slot!(sp_clock::SP_CLOCK_COUNT);

/// `clock` label values, indexed by `enum sp_clock`.
pub const CLOCK_NAMES: [&str; CLOCK_COUNT] = [
    "realtime",
    "monotonic",
    "process_cputime",
    "thread_cputime",
    "monotonic_raw",
    "realtime_coarse",
    "monotonic_coarse",
    "boottime",
    "realtime_alarm",
    "boottime_alarm",
    "tai",
    "cpu_clock",
    "fd_clock",
    "invalid",
];

/// Number of `enum sp_sleep_bucket` buckets (the last is +Inf).
pub const BUCKET_COUNT: usize = slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_COUNT);

/// Upper bounds (seconds) of the requested-sleep histogram buckets; the BPF
/// side has one more bucket for +Inf.
pub const BUCKET_BOUNDS: [f64; BUCKET_COUNT - 1] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0];

/// Index of the bucket that ends at 1 ms.
pub const BUCKET_1MS: usize = slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_1MS);
const _: () = assert!(BUCKET_BOUNDS[BUCKET_1MS] == 1e-3);

/// Tell the BPF side how far CLOCK_REALTIME and CLOCK_TAI are ahead of
/// CLOCK_MONOTONIC, to turn absolute deadlines on them into lengths (the
/// sleep signal's requested sleeps and the timer signal's requested
/// timeouts: the upkeep of both). Kept current on every pass of the worker (at most
/// 500 ms apart), so a clock step is off for at most that long.
pub fn update_clock_offsets(bss: &mut bss) {
    let now = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    };
    let mono = now(libc::CLOCK_MONOTONIC);
    bss.realtime_offset_ns = now(libc::CLOCK_REALTIME) - mono;
    bss.tai_offset_ns = now(libc::CLOCK_TAI) - mono;
}
