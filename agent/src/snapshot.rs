//! The typed snapshot: everything the metrics and the doctor need from the
//! kernel side at one instant, built once per refresh by the worker.
//!
//! A series is typed all the way: its key (comm, cgroup, optional tgid),
//! the cgroup identity parsed once when the key is made (unit, container,
//! pod UID), the pod's labels and the counters. Strings are made only where
//! a metric is encoded ([`Series::labels`]).

use std::sync::Arc;

use crate::bpf::types::{sp_counters, sp_lost_reason};
use crate::bpf::ProbeStatus;
use crate::labels::identity::{self, CgroupIdentity};
use crate::labels::PodLabels;
use crate::node::Fact;

/// Number of `enum sp_lost_reason` slots.
pub const LOST_REASON_COUNT: usize = sp_lost_reason::SP_LOST_REASON_COUNT.0 as usize;

/// `reason` label values of `slowpath_lost_events_total`, indexed by
/// `enum sp_lost_reason`.
pub const LOST_REASON_NAMES: [&str; LOST_REASON_COUNT] = [
    "process_table_full",
    "compaction_table_full",
    "ringbuf_full",
    "sleep_request_unreadable",
    "pid_reuse_pending",
    "cgroup_name",
];

/// A cgroup v2 path and what it says about its processes, parsed once.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cgroup {
    /// Path relative to the cgroup2 root ("/" is the root), or `unknown`.
    pub path: String,
    pub identity: CgroupIdentity,
}

impl Cgroup {
    pub fn new(path: String) -> Arc<Self> {
        let identity = identity::parse(&path);
        Arc::new(Self { path, identity })
    }
}

/// Identity of one exported per-process series: the thread-group leader's
/// comm, its cgroup and, with `--metrics.pid-label`, its tgid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub comm: String,
    pub cgroup: Arc<Cgroup>,
    pub pid: Option<u32>,
}

impl SeriesKey {
    /// The systemd unit the cgroup path names (empty when none).
    pub fn unit(&self) -> &str {
        self.cgroup.identity.unit.as_deref().unwrap_or("")
    }
}

/// One per-process series at one instant.
#[derive(Clone, Debug)]
pub struct Series {
    pub key: SeriesKey,
    /// With `--kubernetes.enabled` only (values empty when not in a known pod).
    pub pod: Option<PodLabels>,
    pub counters: sp_counters,
}

impl Series {
    /// Label pairs in export order: `comm`, `cgroup`, `unit`, [`pid`],
    /// [`namespace`, `pod`, `container`].
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let key = &self.key;
        let mut labels = vec![
            ("comm", key.comm.clone()),
            ("cgroup", key.cgroup.path.clone()),
            ("unit", key.unit().to_string()),
        ];
        if let Some(pid) = key.pid {
            labels.push(("pid", pid.to_string()));
        }
        if let Some(pod) = &self.pod {
            // Kubernetes on: every series has the three, empty outside pods.
            labels.push(("namespace", pod.namespace.clone()));
            labels.push(("pod", pod.pod.clone()));
            labels.push(("container", pod.container.clone()));
        }
        labels
    }
}

/// Everything the metrics need from the kernel side at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Per-process totals, sorted by series key.
    pub series: Vec<Series>,
    /// Live entries in the kernel's process table.
    pub tracked_processes: usize,
    /// Entries the kernel's process table holds at most: `--bpf.max-processes`,
    /// or fewer where the loader fitted it to the locked-memory limit.
    pub process_capacity: u32,
    /// The live thread groups (tgids) behind each series, the busiest since
    /// the last snapshot first: who to name and sample when a series crosses
    /// a finding's threshold without a pid label.
    pub live_tgids: std::collections::HashMap<SeriesKey, Vec<u32>>,
    /// Each live tgid's process image, (start time in ns since boot, exec
    /// count) as the kernel's process table keys it: a reused pid or an
    /// exec is another image (the findings forget its call sites).
    pub live_images: std::collections::HashMap<u32, (u64, u64)>,
    /// Process images folded into an over-the-limit series, by
    /// `procs::Limit` (`slowpath_series_folded_total{limit}`).
    pub folded: [u64; 2],
    /// Lost-event counters by `enum sp_lost_reason`.
    pub lost: [u64; LOST_REASON_COUNT],
    pub probes: Vec<ProbeStatus>,
    /// Events each attached probe missed to the kernel's recursion guard
    /// (`bpf::recursion_misses`), in probe order.
    pub recursion_misses: Vec<(&'static str, u64)>,
    /// Each attached probe's runs and in-kernel time (`bpf::CostMeter`),
    /// in probe order.
    pub probe_costs: Vec<crate::bpf::ProbeCost>,
    /// What corrects the kernel's time per run: the statistics' own time,
    /// the untraced syscall's added time and the dispatch per run.
    pub cost_calibration: crate::bpf::Calibration,
    /// Whether the per-CPU combining slots count the syscall and timer
    /// wakeup counters (`bpf::slots_on`); `None` when the read failed.
    pub combining_slots: Option<bool>,
    /// The last result of each signal's node check (`NodeNeeds::check`, run
    /// by the worker; empty until the first run).
    pub checks: Vec<Fact>,
}

/// A kernel `comm` (NUL-padded `char[16]`) as a label value. Valid UTF-8
/// is kept as it is; every byte of an invalid sequence becomes `\xNN` and a
/// backslash becomes `\\`, so two different comms never give one value.
pub fn comm_to_string(comm: &[i8; 16]) -> String {
    let bytes: Vec<u8> = comm
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_labels_add_pid_and_pod_only_when_asked() {
        let key = SeriesKey {
            comm: "java".into(),
            cgroup: Cgroup::new("/system.slice/app.service".into()),
            pid: None,
        };
        let mut series = Series {
            key,
            pod: None,
            counters: sp_counters::default(),
        };
        assert_eq!(
            series.labels(),
            vec![
                ("comm", "java".to_string()),
                ("cgroup", "/system.slice/app.service".to_string()),
                ("unit", "app.service".to_string()),
            ]
        );
        series.key.pid = Some(42);
        series.pod = Some(PodLabels::default());
        let labels = series.labels();
        assert_eq!(labels[3], ("pid", "42".to_string()));
        assert_eq!(labels[4], ("namespace", String::new()));
        assert_eq!(labels.len(), 7);
    }

    #[test]
    fn comm_stops_at_nul_and_survives_bad_utf8() {
        let mut comm = [0i8; 16];
        for (i, b) in b"ruby\xff".iter().enumerate() {
            comm[i] = *b as i8;
        }
        assert_eq!(comm_to_string(&comm), "ruby\\xff");
        let full = [b'a' as i8; 16];
        assert_eq!(comm_to_string(&full), "a".repeat(16));
    }

    #[test]
    fn different_comms_never_share_a_label_value() {
        let as_comm = |bytes: &[u8]| {
            let mut comm = [0i8; 16];
            for (i, b) in bytes.iter().enumerate() {
                comm[i] = *b as i8;
            }
            comm_to_string(&comm)
        };
        // U+FFFD itself, two different invalid bytes, and a literal escape
        let names: [&[u8]; 5] = [b"a\xef\xbf\xbd", b"a\xfe", b"a\xff", b"a\\xff", b"a\\\\xff"];
        let values: std::collections::HashSet<String> = names.iter().map(|n| as_comm(n)).collect();
        assert_eq!(values.len(), names.len(), "{values:?}");
        assert_eq!(as_comm(b"a\\xff"), "a\\\\xff");
    }
}
