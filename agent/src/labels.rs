//! Label values for the per-process counters.
//!
//! The BPF side counts into arrays indexed by the enums of `bpf/slowpath.h`
//! (`enum sp_clock`, `enum sp_sigmask_op`, ...). The tables here give the
//! Prometheus label value of each index, in the same order. Their lengths are
//! checked at compile time against the array sizes of the generated types.

use crate::bpf::types::sp_counters;

/// `clock` label values, indexed by `enum sp_clock`.
pub const CLOCK_NAMES: [&str; 14] = [
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

/// Clocks the vDSO serves (x86_64 and arm64, lib/vdso/gettimeofday.c): when a
/// read of one of them reaches the kernel, the process fell off the vDSO.
/// CPU-time clocks, alarm clocks and fd clocks always enter the kernel.
pub const VDSO_CLOCKS: [usize; 7] = [0, 1, 4, 5, 6, 7, 10];

/// Whether a `clock_gettime` of clock class `clock` (an `enum sp_clock`
/// index) is a vDSO fallback.
pub fn is_vdso_clock(clock: usize) -> bool {
    VDSO_CLOCKS.contains(&clock)
}

/// `op` label values of `slowpath_rt_sigprocmask_calls_total`, indexed by
/// `enum sp_sigmask_op`. `invalid` is a call with a new set and an unknown
/// `how` (the kernel returns EINVAL); it is not in the contract but
/// keeps the sum equal to the syscall count.
pub const SIGMASK_OPS: [&str; 5] = ["block", "unblock", "setmask", "query", "invalid"];

/// `syscall` label values of the sleep metrics, indexed by `enum sp_sleep_syscall`.
pub const SLEEP_SYSCALLS: [&str; 2] = ["nanosleep", "clock_nanosleep"];

/// `mode` label values, indexed by `enum sp_sleep_mode`.
pub const SLEEP_MODES: [&str; 2] = ["relative", "absolute"];

/// Upper bounds (seconds) of the requested-sleep histogram buckets; the BPF
/// side has one more bucket for +Inf (`sp_sleep_bucket()` in `bpf/classify.h`).
pub const SLEEP_BUCKET_BOUNDS: [f64; 8] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0];

/// `trigger` label values, indexed by `enum sp_compaction_trigger`.
pub const COMPACTION_TRIGGERS: [&str; 3] = ["direct", "kcompactd", "manual"];

/// `reason` label values of `slowpath_lost_events_total`, indexed by
/// `enum sp_lost_reason`.
pub const LOST_REASONS: [&str; 4] = [
    "process_table_full",
    "compaction_table_full",
    "ringbuf_full",
    "sleep_request_unreadable",
];

// The label tables must have exactly one entry per BPF array slot.
const _: () = {
    let c = sp_counters {
        clock_gettime: [0; CLOCK_NAMES.len()],
        gettimeofday: 0,
        time: 0,
        sigprocmask: [0; SIGMASK_OPS.len()],
        sleep_calls: [[[0; SLEEP_MODES.len()]; CLOCK_NAMES.len()]; SLEEP_SYSCALLS.len()],
        sleep_buckets: [[0; SLEEP_BUCKET_BOUNDS.len() + 1]; SLEEP_SYSCALLS.len()],
        sleep_requested_ns: [0; SLEEP_SYSCALLS.len()],
        thp_fault_alloc: 0,
        thp_fault_fallback: 0,
        compaction_runs: [0; COMPACTION_TRIGGERS.len()],
        compaction_ns: [0; COMPACTION_TRIGGERS.len()],
    };
    let _ = c;
};

/// Cumulative Prometheus buckets from the kernel's per-bucket counts:
/// returns `(upper_bound, cumulative_count)` pairs for the finite bounds and
/// the total count (the +Inf bucket).
pub fn cumulative_buckets(counts: &[u64; 9]) -> (Vec<(f64, u64)>, u64) {
    let mut running = 0u64;
    let finite = SLEEP_BUCKET_BOUNDS
        .iter()
        .zip(counts.iter())
        .map(|(&bound, &n)| {
            running += n;
            (bound, running)
        })
        .collect();
    (finite, running + counts[8])
}

/// Identity of one exported per-process series: the thread-group leader's
/// comm, its cgroup path, the systemd unit named by that path (empty when
/// none) and, with `--metrics.pid-label`, its tgid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub comm: String,
    pub cgroup: String,
    pub unit: String,
    pub pid: Option<u32>,
}

impl SeriesKey {
    /// Key of a process image; `unit` comes from the cgroup path.
    pub fn new(comm: String, cgroup: String, pid: Option<u32>) -> Self {
        let unit = crate::identity::parse(&cgroup).unit.unwrap_or_default();
        Self {
            comm,
            cgroup,
            unit,
            pid,
        }
    }

    /// Label pairs in export order.
    pub fn label_pairs(&self) -> Vec<(&'static str, String)> {
        let mut labels = vec![
            ("comm", self.comm.clone()),
            ("cgroup", self.cgroup.clone()),
            ("unit", self.unit.clone()),
        ];
        if let Some(pid) = self.pid {
            labels.push(("pid", pid.to_string()));
        }
        labels
    }
}

/// A kernel `comm` (NUL-padded `char[16]`) as a string; invalid UTF-8 is
/// replaced, never dropped.
pub fn comm_to_string(comm: &[i8; 16]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdso_clocks_are_the_seven_the_vdso_serves() {
        let names: Vec<&str> = VDSO_CLOCKS.iter().map(|&i| CLOCK_NAMES[i]).collect();
        assert_eq!(
            names,
            [
                "realtime",
                "monotonic",
                "monotonic_raw",
                "realtime_coarse",
                "monotonic_coarse",
                "boottime",
                "tai"
            ]
        );
        for cpu in ["process_cputime", "thread_cputime", "cpu_clock", "fd_clock"] {
            let idx = CLOCK_NAMES.iter().position(|&n| n == cpu).unwrap();
            assert!(!is_vdso_clock(idx), "{cpu} always enters the kernel");
        }
    }

    #[test]
    fn buckets_accumulate_and_end_in_inf() {
        let counts = [0, 0, 0, 1000, 2, 0, 0, 0, 5];
        let (finite, total) = cumulative_buckets(&counts);
        assert_eq!(finite[2], (1e-4, 0));
        assert_eq!(finite[3], (1e-3, 1000));
        assert_eq!(finite[4], (1e-2, 1002));
        assert_eq!(finite[7], (10.0, 1002));
        assert_eq!(total, 1007);
    }

    #[test]
    fn series_labels_add_pid_only_when_asked() {
        let mut key = SeriesKey::new("java".into(), "/system.slice/app.service".into(), None);
        assert_eq!(
            key.label_pairs(),
            vec![
                ("comm", "java".to_string()),
                ("cgroup", "/system.slice/app.service".to_string()),
                ("unit", "app.service".to_string()),
            ]
        );
        key.pid = Some(42);
        assert_eq!(key.label_pairs()[3], ("pid", "42".to_string()));
    }

    #[test]
    fn comm_stops_at_nul_and_survives_bad_utf8() {
        let mut comm = [0i8; 16];
        for (i, b) in b"ruby\xff".iter().enumerate() {
            comm[i] = *b as i8;
        }
        assert_eq!(comm_to_string(&comm), "ruby\u{fffd}");
        let full = [b'a' as i8; 16];
        assert_eq!(comm_to_string(&full), "a".repeat(16));
    }
}
