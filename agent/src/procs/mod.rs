//! Per-process counters: reading the kernel's `procs` table, folding the
//! final counts of exited and exec'd process images, and summing both into
//! exported series.
//!
//! Why counters never go backwards: the kernel submits a process image's
//! final record to the `proc_events` ring buffer *before* it deletes the
//! image's `procs` entry. A refresh reads the table first and drains the ring
//! second, so every image is seen at least once, as a live entry or as a
//! record; when it is seen as both, the record (which is final and never
//! smaller) replaces the live reading.
//!
//! Why the series stay bounded: a series (comm, cgroup[, pid]) keeps what
//! its dead processes gave it while its cgroup exists, and is dropped a
//! grace period after its last process is gone together with its cgroup (or,
//! with the pid label, its process). New keys beyond the per-cgroup comm
//! limit or the total series limit go to one over-the-limit series, counted.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::MapCore;

use crate::bpf::types::{sp_counters, sp_proc, sp_proc_event, sp_proc_key};
use crate::labels::cgroup::CgroupResolver;
use crate::snapshot::{Cgroup, SeriesKey};

mod counters;
mod fold;
mod limits;
mod liveness;
mod series;
mod table;

use counters::words;
pub use counters::{add_counters, add_sparse_counters, sparse_counters, sub_counters};
pub use limits::{Limit, SeriesLimits, LIMIT_NAMES, OVER_LIMIT_CGROUP, OVER_LIMIT_COMM};
pub use liveness::stat_start_ticks;

/// Keys of the `procs` map at or above this hold parked entries of exited
/// processes (`proc_park()` in bpf/core/lifecycle.h), never a tgid.
const PARKED_KEY_BASE: u32 = 1 << sp_proc_key::SP_PARKED_KEY_SHIFT.0;

/// Bound of the parsed-cgroup cache (cleared when it grows past it).
const MAX_PARSED_CGROUPS: usize = 65_536;

/// Identity of one process image in the kernel table: tgid, the group
/// leader's start time (distinguishes a reused pid) and its exec id (the
/// image after an exec from the one before it).
type ImageId = (u32, u64, u64);

fn image_id(tgid: u32, p: &sp_proc) -> ImageId {
    (tgid, p.start_boottime_ns, p.exec_id)
}

/// Ring buffer records waiting to be folded, filled by the ring callback.
pub type PendingRecords = Rc<RefCell<Vec<sp_proc_event>>>;

/// New cgroups' (id, path) from `cgroup_events`, filled by the ring callback.
pub type PendingCgroups = Rc<RefCell<Vec<(u64, String)>>>;

/// One exported series' state in the agent.
struct SeriesState {
    /// Final counts of this series' process images that are gone.
    retired: sp_counters,
    /// When an image last retired into it (or it was made).
    changed: Instant,
}

/// Aggregated per-process state of the agent.
pub struct Aggregator {
    pid_label: bool,
    limits: SeriesLimits,
    cgroups: CgroupResolver,
    /// Parsed cgroups by path: series in one cgroup share one parse.
    parsed: HashMap<String, Arc<Cgroup>>,
    /// Every series kept, live or retired.
    series: HashMap<SeriesKey, SeriesState>,
    /// Distinct comms of the kept series, per cgroup path.
    comms: HashMap<String, HashSet<String>>,
    /// Series key of each image seen live and not yet retired, so its
    /// record gets the same key even if its cgroup is removed meanwhile.
    keys: HashMap<ImageId, SeriesKey>,
    /// Images whose final record was folded recently, with their series.
    /// The kernel deletes an entry just after submitting its record, so a
    /// table read can still see an entry whose record a drain already
    /// folded: skip those. Their late counts (`SP_EVENT_LATE`) join the
    /// same series.
    recently_retired: HashMap<ImageId, (Instant, SeriesKey)>,
    /// Images folded into an over-the-limit series, by [`Limit`].
    folded: [u64; 2],
    /// Sum of each live image's counters at the last refresh: how busy it
    /// has been since (which process of a series to name and sample).
    activity: HashMap<ImageId, u64>,
    clk_tck: u64,
}

/// How long a folded image id is remembered (far longer than the gap
/// between the kernel's submit and delete).
const RECENT_RETIREMENT: Duration = Duration::from_secs(10);

/// What one refresh produced.
pub struct Refreshed {
    /// Totals per series, sorted by key.
    pub series: Vec<(SeriesKey, sp_counters)>,
    /// Live entries in the kernel table.
    pub tracked_processes: usize,
    /// Images folded into an over-the-limit series so far, by [`Limit`].
    pub folded: [u64; 2],
    /// The live thread groups (tgids) behind each series, the busiest
    /// since the last refresh first (counts added, all counters summed).
    pub live_tgids: HashMap<SeriesKey, Vec<u32>>,
    /// Each live tgid's image: (start time in ns since boot, exec count).
    pub live_images: HashMap<u32, (u64, u64)>,
}

impl Aggregator {
    pub fn new(pid_label: bool, limits: SeriesLimits) -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            pid_label,
            limits,
            cgroups: CgroupResolver::new(),
            parsed: HashMap::new(),
            series: HashMap::new(),
            comms: HashMap::new(),
            keys: HashMap::new(),
            recently_retired: HashMap::new(),
            folded: [0; 2],
            activity: HashMap::new(),
            clk_tck: if tck > 0 { tck as u64 } else { 100 },
        }
    }

    /// Drain the ring buffers, read the whole table, drain again, drop
    /// series that are gone for good, and return totals. Entries the kernel
    /// flagged as exited are folded and deleted here.
    ///
    /// The first drain learns the path of every cgroup made before the
    /// table is read: an entry read here or an exit record folded after may
    /// be of a cgroup that is already removed, which no walk finds, and an
    /// image keeps the series it is first given.
    pub fn refresh(
        &mut self,
        procs: &dyn MapCore,
        mut drain: impl FnMut() -> Result<()>,
        rings: (&PendingRecords, &PendingCgroups),
    ) -> Result<Refreshed> {
        let (pending, new_cgroups) = rings;
        self.cgroups.new_round();
        drain().context("draining the ring buffers")?;
        self.learn_cgroups(new_cgroups);
        self.fold_pending(pending);
        let live = self.read_table(procs)?;
        drain().context("draining the ring buffers")?;
        self.learn_cgroups(new_cgroups);
        self.fold_pending(pending);

        let mut live_totals: HashMap<SeriesKey, sp_counters> = HashMap::new();
        let mut busy: HashMap<SeriesKey, Vec<(u64, u32)>> = HashMap::new();
        let mut activity = HashMap::new();
        let mut live_images = HashMap::new();
        let mut tracked = 0;
        for (tgid, p) in live {
            let id = image_id(tgid, &p);
            if self.recently_retired.contains_key(&id) {
                continue; // its final record is already folded
            }
            tracked += 1;
            live_images.insert(tgid, (p.start_boottime_ns, p.exec_id));
            let key = self.key_for(tgid, &p);
            add_counters(live_totals.entry(key.clone()).or_default(), &p.c);
            let total = words(&p.c).iter().fold(0u64, |a, &w| a.wrapping_add(w));
            let since = total.wrapping_sub(self.activity.get(&id).copied().unwrap_or(0));
            activity.insert(id, total);
            busy.entry(key).or_default().push((since, tgid));
        }
        self.activity = activity;
        // the busiest since the last refresh first
        let live_tgids = busy
            .into_iter()
            .map(|(key, mut tgids)| {
                tgids.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                (key, tgids.into_iter().map(|(_, tgid)| tgid).collect())
            })
            .collect();
        self.drop_gone(&live_totals);
        let mut series: Vec<_> = self
            .series
            .iter()
            .map(|(key, state)| {
                let mut total = state.retired;
                if let Some(live) = live_totals.get(key) {
                    add_counters(&mut total, live);
                }
                (key.clone(), total)
            })
            .collect();
        series.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Refreshed {
            series,
            tracked_processes: tracked,
            folded: self.folded,
            live_tgids,
            live_images,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::liveness::process_alive;
    use super::*;

    #[test]
    fn counters_add_elementwise() {
        let mut a = sp_counters::default();
        let mut b = sp_counters::default();
        a.clock_gettime[1] = 5;
        b.clock_gettime[1] = 7;
        b.compaction_ns[2] = 9;
        b.sleep_calls[1][0][1] = 3;
        add_counters(&mut a, &b);
        assert_eq!(a.clock_gettime[1], 12);
        assert_eq!(a.compaction_ns[2], 9);
        assert_eq!(a.sleep_calls[1][0][1], 3);
        assert_eq!(words(&a).iter().sum::<u64>(), 24);
    }

    pub(super) fn limited(max_series: usize, max_comms_per_cgroup: usize) -> Aggregator {
        Aggregator::new(
            false,
            SeriesLimits {
                max_series,
                max_comms_per_cgroup,
                ..Default::default()
            },
        )
    }

    /// An image named "x" that made 5 gettimeofday calls.
    pub(super) fn image_x() -> sp_proc {
        let mut p = sp_proc::default();
        p.comm[0] = b'x' as i8;
        p.c.gettimeofday = 5;
        p.start_boottime_ns = 42;
        p
    }

    #[test]
    fn start_time_is_field_22_even_with_odd_comms() {
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 \
                    1000 100 18446744073709551615";
        assert_eq!(stat_start_ticks(stat), Some(98765));
    }

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let pid = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let ticks = stat_start_ticks(&stat).unwrap();
        // SAFETY: sysconf has no memory-safety preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let ns = ticks * (1_000_000_000 / tck);
        assert!(process_alive(pid, ns, tck));
        assert!(!process_alive(pid, ns + 10_000_000_000, tck));
    }
}
