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
use libbpf_rs::{MapCore, MapFlags};
use tracing::debug;

use crate::bpf::types::{
    sp_counters, sp_proc, sp_proc_event, sp_proc_event_kind, sp_proc_flag, sp_proc_key,
};
use crate::labels::cgroup::CgroupResolver;
use crate::snapshot::{comm_to_string, Cgroup, SeriesKey};

mod counters;
mod limits;
mod liveness;

use counters::words;
pub use counters::{add_counters, add_sparse_counters, sparse_counters, sub_counters};
pub use limits::{Limit, SeriesLimits, LIMIT_NAMES, OVER_LIMIT_CGROUP, OVER_LIMIT_COMM};
use liveness::process_alive;
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

    fn key_for(&mut self, tgid: u32, p: &sp_proc) -> SeriesKey {
        let id = image_id(tgid, p);
        if let Some(key) = self.keys.get(&id) {
            return key.clone();
        }
        let key = self.new_key(tgid, p);
        self.keys.insert(id, key.clone());
        key
    }

    /// The series an image not seen before goes to, by its comm and cgroup.
    fn new_key(&mut self, tgid: u32, p: &sp_proc) -> SeriesKey {
        let key = SeriesKey {
            comm: comm_to_string(&p.comm),
            cgroup: self.cgroup(p.cgroup_id),
            pid: self.pid_label.then_some(tgid),
        };
        self.admit(key)
    }

    /// `key` if it is kept or fits the limits (then it is kept from now
    /// on), else the over-the-limit series that takes its place.
    fn admit(&mut self, key: SeriesKey) -> SeriesKey {
        if self.series.contains_key(&key) {
            return key;
        }
        let known = self.comms.get(&key.cgroup.path);
        let comms = known.map_or(0, HashSet::len);
        let new_comm = !known.is_some_and(|c| c.contains(&key.comm));
        let key = if self.series.len() >= self.limits.max_series {
            self.folded[Limit::Series as usize] += 1;
            SeriesKey {
                comm: OVER_LIMIT_COMM.into(),
                cgroup: self.parsed_cgroup(OVER_LIMIT_CGROUP.into()),
                pid: None,
            }
        } else if new_comm && comms >= self.limits.max_comms_per_cgroup {
            self.folded[Limit::CommsPerCgroup as usize] += 1;
            SeriesKey {
                comm: OVER_LIMIT_COMM.into(),
                pid: None,
                ..key
            }
        } else {
            key
        };
        // The over-the-limit series themselves are let in past the limit:
        // at most one per cgroup, and one for the whole agent.
        if !self.series.contains_key(&key) {
            self.comms
                .entry(key.cgroup.path.clone())
                .or_default()
                .insert(key.comm.clone());
            self.series.insert(
                key.clone(),
                SeriesState {
                    retired: sp_counters::default(),
                    changed: Instant::now(),
                },
            );
        }
        key
    }

    /// The cgroup of `id`, its path resolved and its identity parsed once.
    fn cgroup(&mut self, id: u64) -> Arc<Cgroup> {
        let path = self.cgroups.resolve(id);
        self.parsed_cgroup(path)
    }

    fn parsed_cgroup(&mut self, path: String) -> Arc<Cgroup> {
        if self.parsed.len() >= MAX_PARSED_CGROUPS {
            self.parsed.clear();
        }
        self.parsed
            .entry(path)
            .or_insert_with_key(|path| Cgroup::new(path.clone()))
            .clone()
    }

    /// Fold the final counts of one image, once: the same image can be met
    /// twice when the kernel sends the record of an entry flagged in place
    /// (a recycled pid) while a table read folds it too.
    fn retire(&mut self, tgid: u32, p: &sp_proc) {
        let id = image_id(tgid, p);
        if self.recently_retired.contains_key(&id) {
            return;
        }
        let key = self.key_for(tgid, p);
        self.keys.remove(&id);
        self.recently_retired
            .insert(id, (Instant::now(), key.clone()));
        self.add_retired(&key, &p.c);
    }

    /// Add the late counts of an image that is gone (`SP_EVENT_LATE`: the
    /// kernel found them in a CPU's combining slot after the image's entry
    /// went) to its series: the one it retired into, the one it still has
    /// (its flagged entry not folded yet), or the one its comm and cgroup
    /// name. Every late record counts: they are disjoint.
    fn add_late(&mut self, tgid: u32, p: &sp_proc) {
        let id = image_id(tgid, p);
        let known = (self.recently_retired.get(&id).map(|(_, key)| key))
            .or_else(|| self.keys.get(&id))
            .cloned();
        let key = match known {
            Some(key) => key,
            None => self.new_key(tgid, p),
        };
        self.add_retired(&key, &p.c);
    }

    fn add_retired(&mut self, key: &SeriesKey, c: &sp_counters) {
        if let Some(state) = self.series.get_mut(key) {
            add_counters(&mut state.retired, c);
            state.changed = Instant::now();
        }
    }

    /// Remember the paths of cgroups the kernel saw created (`cgroup_events`).
    pub fn learn_cgroups(&mut self, pending: &PendingCgroups) {
        for (id, path) in std::mem::take(&mut *pending.borrow_mut()) {
            self.cgroups.learn(id, path);
        }
    }

    /// Fold the records waiting in `pending` (after a ring buffer consume).
    pub fn fold_records(&mut self, pending: &PendingRecords) {
        self.cgroups.new_round();
        self.fold_pending(pending);
    }

    /// Fold without starting a cgroup round (inside `refresh`, which has one).
    fn fold_pending(&mut self, pending: &PendingRecords) {
        let records = std::mem::take(&mut *pending.borrow_mut());
        let now = Instant::now();
        for event in &records {
            if event.kind == sp_proc_event_kind::SP_EVENT_LATE.0 {
                self.add_late(event.tgid, &event.proc);
            } else {
                self.retire(event.tgid, &event.proc);
            }
        }
        self.recently_retired
            .retain(|_, (at, _)| now.duration_since(*at) < RECENT_RETIREMENT);
    }

    /// Fold and delete the entries the kernel flagged as exited (their exit
    /// record did not fit the ring buffer).
    pub fn fold_flagged(&mut self, procs: &dyn MapCore) -> Result<()> {
        self.cgroups.new_round();
        self.read_table(procs).map(drop)
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

    /// Drop the series that have no live process, have not changed for the
    /// grace period, and whose process (pid label) or cgroup is gone.
    fn drop_gone(&mut self, live: &HashMap<SeriesKey, sp_counters>) {
        let grace = self.limits.retired_grace;
        let now = Instant::now();
        let pending: HashSet<&SeriesKey> = self.keys.values().collect();
        let mut cgroup_gone: HashMap<String, bool> = HashMap::new();
        let cgroups = &self.cgroups;
        let before = self.series.len();
        self.series.retain(|key, state| {
            if live.contains_key(key)
                || pending.contains(key)
                || now.duration_since(state.changed) < grace
            {
                return true;
            }
            if key.pid.is_some() {
                return false;
            }
            let gone = *cgroup_gone
                .entry(key.cgroup.path.clone())
                .or_insert_with(|| !cgroups.exists(&key.cgroup.path));
            !gone
        });
        if self.series.len() != before {
            debug!(
                dropped = before - self.series.len(),
                "dropped retired series"
            );
            self.comms.clear();
            for key in self.series.keys() {
                self.comms
                    .entry(key.cgroup.path.clone())
                    .or_default()
                    .insert(key.comm.clone());
            }
            // Parsed identities of cgroups no series names any more: a
            // node that churns cgroups would otherwise keep one per cgroup
            // ever seen (up to MAX_PARSED_CGROUPS); a later miss re-parses.
            let comms = &self.comms;
            self.parsed.retain(|path, _| comms.contains_key(path));
        }
    }

    /// Live entries of the table; folds and deletes flagged ones.
    fn read_table(&mut self, procs: &dyn MapCore) -> Result<Vec<(u32, sp_proc)>> {
        let mut seen = HashSet::new();
        let mut live = Vec::new();
        // A deleted current key makes the iteration restart: dedupe by tgid.
        for key in procs.keys() {
            let Ok(bytes) = <[u8; 4]>::try_from(key.as_slice()) else {
                continue;
            };
            let slot = u32::from_ne_bytes(bytes);
            if !seen.insert(slot) {
                continue;
            }
            let Some(p) = lookup_entry(procs, &key)? else {
                continue; // deleted since: its record is in the ring buffer
            };
            if p.flags & sp_proc_flag::SP_PROC_EXITED.0 != 0 {
                // parked under a key no pid has, or flagged in place
                let tgid = if slot >= PARKED_KEY_BASE {
                    p.tgid
                } else {
                    slot
                };
                debug!(
                    tgid,
                    "folding an exited entry the ring buffer had no room for"
                );
                self.retire(tgid, &p);
                let _ = procs.delete(&key);
                continue;
            }
            live.push((slot, p));
        }
        Ok(live)
    }

    /// Drop the retired series `expired` says to (series of deleted pods).
    pub fn drop_retired(&mut self, mut expired: impl FnMut(&SeriesKey) -> bool) {
        let pending: HashSet<SeriesKey> = self.keys.values().cloned().collect();
        self.series
            .retain(|key, _| pending.contains(key) || !expired(key));
    }

    /// Fold and delete entries whose process is gone without an exit record
    /// (possible only when the exit probe is not attached). Costs one read
    /// of `/proc/<tgid>/stat` per entry: run it rarely.
    pub fn sweep_dead(&mut self, procs: &dyn MapCore) -> Result<usize> {
        let mut swept = 0;
        for (tgid, read) in self.read_table(procs)? {
            if process_alive(tgid, read.start_boottime_ns, self.clk_tck) {
                continue;
            }
            // Read the entry again now that the process is known gone: its
            // exit may have come between the table read and the /proc check.
            let key = tgid.to_ne_bytes();
            let now = lookup_entry(procs, &key)?;
            if self.sweep_entry(tgid, &read, now.as_ref()) {
                let _ = procs.delete(&key);
                swept += 1;
            }
        }
        Ok(swept)
    }

    /// Fold the entry of a process that is gone, `now` as the table holds
    /// it after /proc said so (`read` as the sweep first read it). True when
    /// the entry is to be deleted. Once a process is reaped its exit hook
    /// has run, so an entry still there has no record coming, except that
    /// one the exit sent after the first read is in the ring buffer (its
    /// entry deleted: `now` is `None`), and must not be replaced by the
    /// older reading, which would drop the record as already folded.
    fn sweep_entry(&mut self, tgid: u32, read: &sp_proc, now: Option<&sp_proc>) -> bool {
        let Some(now) = now.filter(|now| image_id(tgid, now) == image_id(tgid, read)) else {
            return false; // exited since (record in the ring), or a new process on the pid
        };
        if self.recently_retired.contains_key(&image_id(tgid, now)) {
            // made after the image's record by a hook that ran during its
            // exit: counts the record does not hold
            self.add_late(tgid, now);
        } else {
            self.retire(tgid, now);
        }
        true
    }
}

/// The `procs` entry under `key`, if there is one.
fn lookup_entry(procs: &dyn MapCore, key: &[u8]) -> Result<Option<sp_proc>> {
    let Some(value) = procs
        .lookup(key, MapFlags::ANY)
        .context("reading the procs map")?
    else {
        return Ok(None);
    };
    let mut p = sp_proc::default();
    plain::copy_from_bytes(&mut p, &value)
        .map_err(|e| anyhow::anyhow!("procs value of unexpected size: {e:?}"))?;
    Ok(Some(p))
}

#[cfg(test)]
mod tests {
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

    fn key(comm: &str, cgroup: &str, pid: Option<u32>) -> SeriesKey {
        SeriesKey {
            comm: comm.into(),
            cgroup: Cgroup::new(cgroup.into()),
            pid,
        }
    }

    fn limited(max_series: usize, max_comms_per_cgroup: usize) -> Aggregator {
        Aggregator::new(
            false,
            SeriesLimits {
                max_series,
                max_comms_per_cgroup,
                ..Default::default()
            },
        )
    }

    #[test]
    fn comms_past_the_cgroup_limit_share_one_series_and_are_counted() {
        let mut agg = limited(100, 2);
        assert_eq!(agg.admit(key("a", "/x", None)).comm, "a");
        assert_eq!(agg.admit(key("b", "/x", None)).comm, "b");
        let over = agg.admit(key("c", "/x", None));
        assert_eq!(
            (over.comm.as_str(), over.cgroup.path.as_str()),
            (OVER_LIMIT_COMM, "/x")
        );
        assert_eq!(agg.admit(key("d", "/x", None)), over);
        // a known comm, and another cgroup, are let in as they are
        assert_eq!(agg.admit(key("a", "/x", None)).comm, "a");
        assert_eq!(agg.admit(key("c", "/y", None)).comm, "c");
        assert_eq!(agg.folded, [2, 0]);
    }

    #[test]
    fn keys_past_the_series_limit_go_to_one_series() {
        let mut agg = limited(2, 100);
        agg.admit(key("a", "/x", Some(1)));
        agg.admit(key("a", "/x", Some(2)));
        let over = agg.admit(key("a", "/x", Some(3)));
        assert_eq!(over, key(OVER_LIMIT_COMM, OVER_LIMIT_CGROUP, None));
        assert_eq!(agg.admit(key("b", "/z", Some(4))), over);
        assert_eq!(agg.folded, [0, 2]);
        assert_eq!(
            agg.series.len(),
            3,
            "the limit plus the one over-the-limit series"
        );
    }

    /// An image named "x" that made 5 gettimeofday calls.
    fn image_x() -> sp_proc {
        let mut p = sp_proc::default();
        p.comm[0] = b'x' as i8;
        p.c.gettimeofday = 5;
        p.start_boottime_ns = 42;
        p
    }

    #[test]
    fn an_image_is_folded_once_however_often_it_is_met() {
        let mut agg = limited(100, 100);
        let p = image_x();
        agg.retire(7, &p);
        agg.retire(7, &p); // its record, after a table read folded it
        let total: u64 = agg.series.values().map(|s| s.retired.gettimeofday).sum();
        assert_eq!(total, 5);
    }

    #[test]
    fn late_counts_join_the_series_their_image_retired_into_every_time() {
        let mut agg = limited(100, 100);
        let p = image_x();
        agg.retire(7, &p);
        let mut late = p;
        late.c = sp_counters::default();
        late.c.gettimeofday = 3;
        late.comm[0] = b'y' as i8; // the series comes from the image, not the record's comm
        agg.add_late(7, &late);
        agg.add_late(7, &late); // every late record is new counts
        assert_eq!(agg.series.len(), 1);
        let total: u64 = agg.series.values().map(|s| s.retired.gettimeofday).sum();
        assert_eq!(total, 11);
        // an image the agent never saw goes to the series of its comm and cgroup
        late.start_boottime_ns = 43;
        agg.add_late(7, &late);
        assert_eq!(agg.series.len(), 2);
        assert!(
            agg.keys.is_empty(),
            "a late record never makes an image live"
        );
    }

    #[test]
    fn dropping_a_gone_cgroups_series_forgets_its_parsed_identity() {
        let mut agg = Aggregator::new(
            false,
            SeriesLimits {
                retired_grace: Duration::ZERO,
                ..Default::default()
            },
        );
        let gone = "/slowpath-unit-test-no-such-cgroup";
        let kept = agg.parsed_cgroup("/".into());
        agg.admit(SeriesKey {
            comm: "a".into(),
            cgroup: kept,
            pid: None,
        });
        let parsed = agg.parsed_cgroup(gone.into());
        agg.admit(SeriesKey {
            comm: "b".into(),
            cgroup: parsed,
            pid: None,
        });
        agg.drop_gone(&HashMap::new());
        assert_eq!(agg.series.len(), 1, "the gone cgroup's series is dropped");
        assert!(agg.parsed.contains_key("/") && !agg.parsed.contains_key(gone));
    }

    fn total(agg: &Aggregator) -> u64 {
        agg.series.values().map(|s| s.retired.gettimeofday).sum()
    }

    #[test]
    fn a_sweep_never_takes_an_older_reading_over_the_exit_record() {
        let mut agg = limited(100, 100);
        let read = image_x();
        // the exit sent its record (7 calls) and deleted the entry between
        // the sweep's table read (5) and its /proc check
        assert!(!agg.sweep_entry(7, &read, None));
        let mut record = read;
        record.c.gettimeofday = 7;
        agg.retire(7, &record);
        assert_eq!(total(&agg), 7);
        // a new process on the pid is not the dead one's to fold
        let mut other = read;
        other.start_boottime_ns += 1;
        assert!(!agg.sweep_entry(7, &read, Some(&other)));
        // an entry made during the exit, after its record, holds new counts
        let mut after = read;
        after.c.gettimeofday = 2;
        assert!(agg.sweep_entry(7, &read, Some(&after)));
        assert_eq!(total(&agg), 9);
        // an entry that never had a record is folded whole
        let mut lone = image_x();
        lone.start_boottime_ns = 99;
        assert!(agg.sweep_entry(8, &lone, Some(&lone)));
        assert_eq!(total(&agg), 14);
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
