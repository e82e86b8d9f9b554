//! Per-process counters: reading the kernel's `procs` table, folding the
//! final counts of exited and exec'd process images, and summing both into
//! exported series.
//!
//! Why counters never go backwards: the kernel submits a process image's
//! final record to the `proc_events` ring buffer *before* it deletes the
//! image's `procs` entry. A refresh reads the table first and drains the ring
//! second, so every image is seen at least once, as a live entry or as a
//! record; when it is seen as both, the record (which is final and never
//! smaller) replaces the live reading. Series of a (comm, cgroup) key are kept
//! for the life of the agent, so a key never loses what dead processes gave it.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::mem::size_of;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};
use tracing::debug;

use crate::bpf::types::{sp_counters, sp_proc, sp_proc_event, sp_proc_flag};
use crate::cgroup::CgroupResolver;
use crate::snapshot::{comm_to_string, Cgroup, SeriesKey};

/// Bound of the parsed-cgroup cache (cleared when it grows past it).
const MAX_PARSED_CGROUPS: usize = 65_536;

/// Number of u64 counters in `struct sp_counters`.
const COUNTER_WORDS: usize = size_of::<sp_counters>() / size_of::<u64>();
const _: () = assert!(size_of::<sp_counters>() == COUNTER_WORDS * size_of::<u64>());

/// `struct sp_counters` as a flat slice of its u64 words.
fn words(c: &sp_counters) -> &[u64] {
    // SAFETY: sp_counters is #[repr(C)] and made only of u64 and (nested)
    // arrays of u64, so it has u64 alignment, no padding (asserted above) and
    // is exactly COUNTER_WORDS u64 values laid out back to back.
    unsafe { std::slice::from_raw_parts((c as *const sp_counters).cast::<u64>(), COUNTER_WORDS) }
}

fn words_mut(c: &mut sp_counters) -> &mut [u64] {
    // SAFETY: as in `words`; the exclusive borrow of `c` covers the slice.
    unsafe { std::slice::from_raw_parts_mut((c as *mut sp_counters).cast::<u64>(), COUNTER_WORDS) }
}

/// `into += from`, element by element.
pub fn add_counters(into: &mut sp_counters, from: &sp_counters) {
    for (a, b) in words_mut(into).iter_mut().zip(words(from)) {
        *a = a.wrapping_add(*b);
    }
}

/// `into -= from`, element by element (growth between two readings).
pub fn sub_counters(into: &mut sp_counters, from: &sp_counters) {
    for (a, b) in words_mut(into).iter_mut().zip(words(from)) {
        *a = a.wrapping_sub(*b);
    }
}

/// Identity of one process image in the kernel table: tgid, the group
/// leader's start time (distinguishes a reused pid) and its exec id (the
/// image after an exec from the one before it).
type ImageId = (u32, u64, u64);

fn image_id(tgid: u32, p: &sp_proc) -> ImageId {
    (tgid, p.start_boottime_ns, p.exec_id)
}

/// Ring buffer records waiting to be folded, filled by the ring callback.
pub type PendingRecords = Rc<RefCell<Vec<sp_proc_event>>>;

/// Aggregated per-process state of the agent.
pub struct Aggregator {
    pid_label: bool,
    cgroups: CgroupResolver,
    /// Parsed cgroups by path: series in one cgroup share one parse.
    parsed: HashMap<String, Arc<Cgroup>>,
    /// Final counts of process images that are gone, by series.
    retired: HashMap<SeriesKey, sp_counters>,
    /// Labels of images seen live, so their records get the same cgroup
    /// path even if the cgroup is removed before the record is folded.
    keys: HashMap<ImageId, SeriesKey>,
    /// Images whose final record was folded recently. The kernel deletes an
    /// entry just after submitting its record, so a table read can still see
    /// an entry whose record a timer drain already folded: skip those.
    recently_retired: HashMap<ImageId, Instant>,
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
}

impl Aggregator {
    pub fn new(pid_label: bool) -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            pid_label,
            cgroups: CgroupResolver::new(),
            parsed: HashMap::new(),
            retired: HashMap::new(),
            keys: HashMap::new(),
            recently_retired: HashMap::new(),
            clk_tck: if tck > 0 { tck as u64 } else { 100 },
        }
    }

    fn key_for(&mut self, tgid: u32, p: &sp_proc) -> SeriesKey {
        let id = image_id(tgid, p);
        if let Some(key) = self.keys.get(&id) {
            return key.clone();
        }
        let key = SeriesKey {
            comm: comm_to_string(&p.comm),
            cgroup: self.cgroup(p.cgroup_id),
            pid: self.pid_label.then_some(tgid),
        };
        self.keys.insert(id, key.clone());
        key
    }

    /// The cgroup of `id`, its path resolved and its identity parsed once.
    fn cgroup(&mut self, id: u64) -> Arc<Cgroup> {
        let path = self.cgroups.resolve(id);
        if self.parsed.len() >= MAX_PARSED_CGROUPS {
            self.parsed.clear();
        }
        self.parsed
            .entry(path)
            .or_insert_with_key(|path| Cgroup::new(path.clone()))
            .clone()
    }

    fn retire(&mut self, tgid: u32, p: &sp_proc) {
        let key = self.key_for(tgid, p);
        self.keys.remove(&image_id(tgid, p));
        add_counters(self.retired.entry(key).or_default(), &p.c);
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
            self.recently_retired
                .insert(image_id(event.tgid, &event.proc), now);
            self.retire(event.tgid, &event.proc);
        }
        self.recently_retired
            .retain(|_, at| now.duration_since(*at) < RECENT_RETIREMENT);
    }

    /// Read the whole table, drain the ring buffer, and return totals.
    /// Entries the kernel flagged as exited (their record did not fit the
    /// ring buffer) and entries of processes that no longer exist are folded
    /// and deleted here.
    pub fn refresh(
        &mut self,
        procs: &dyn MapCore,
        drain: impl FnOnce() -> Result<()>,
        pending: &PendingRecords,
    ) -> Result<Refreshed> {
        self.cgroups.new_round();
        let live = self.read_table(procs)?;
        drain().context("draining the proc_events ring buffer")?;
        self.fold_pending(pending);

        let mut totals = self.retired.clone();
        let mut tracked = 0;
        for (tgid, p) in live {
            if self.recently_retired.contains_key(&image_id(tgid, &p)) {
                continue; // its final record is already in `retired`
            }
            tracked += 1;
            let key = self.key_for(tgid, &p);
            add_counters(totals.entry(key).or_default(), &p.c);
        }
        let mut series: Vec<_> = totals.into_iter().collect();
        series.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Refreshed {
            series,
            tracked_processes: tracked,
        })
    }

    /// Live entries of the table; reaps exited ones.
    fn read_table(&mut self, procs: &dyn MapCore) -> Result<Vec<(u32, sp_proc)>> {
        let mut seen = HashSet::new();
        let mut live = Vec::new();
        // A deleted current key makes the iteration restart: dedupe by tgid.
        for key in procs.keys() {
            let Ok(bytes) = <[u8; 4]>::try_from(key.as_slice()) else {
                continue;
            };
            let tgid = u32::from_ne_bytes(bytes);
            if !seen.insert(tgid) {
                continue;
            }
            let Some(value) = procs
                .lookup(&key, MapFlags::ANY)
                .context("reading the procs map")?
            else {
                continue; // deleted since: its record is in the ring buffer
            };
            let mut p = sp_proc::default();
            plain::copy_from_bytes(&mut p, &value)
                .map_err(|e| anyhow::anyhow!("procs value of unexpected size: {e:?}"))?;
            if p.flags & sp_proc_flag::SP_PROC_EXITED.0 != 0 {
                debug!(
                    tgid,
                    "folding an exited entry the ring buffer had no room for"
                );
                self.retire(tgid, &p);
                let _ = procs.delete(&key);
                continue;
            }
            live.push((tgid, p));
        }
        Ok(live)
    }

    /// Drop the retired series `expired` says to (series of deleted pods).
    pub fn drop_retired(&mut self, mut expired: impl FnMut(&SeriesKey) -> bool) {
        self.retired.retain(|key, _| !expired(key));
    }

    /// Fold and delete entries whose process is gone without an exit record
    /// (possible only when the exit probe is not attached). Costs one read
    /// of `/proc/<tgid>/stat` per entry: run it rarely.
    pub fn sweep_dead(&mut self, procs: &dyn MapCore) -> Result<usize> {
        let mut swept = 0;
        for (tgid, p) in self.read_table(procs)? {
            if process_alive(tgid, p.start_boottime_ns, self.clk_tck) {
                continue;
            }
            self.retire(tgid, &p);
            let _ = procs.delete(&tgid.to_ne_bytes());
            swept += 1;
        }
        Ok(swept)
    }
}

/// Whether `/proc/<tgid>` is still the process that started at
/// `start_boottime_ns` (field 22 of /proc/<tgid>/stat is the same time in
/// clock ticks: nsec_to_clock_t() in fs/proc/array.c).
fn process_alive(tgid: u32, start_boottime_ns: u64, clk_tck: u64) -> bool {
    match fs::read_to_string(format!("/proc/{tgid}/stat")) {
        Ok(stat) => stat_start_ticks(&stat) == Some(start_boottime_ns / (1_000_000_000 / clk_tck)),
        Err(_) => false,
    }
}

/// Field 22 (starttime) of a /proc/<pid>/stat line; comm may hold spaces and
/// parentheses, so fields are counted after the last ')'.
fn stat_start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
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

    #[test]
    fn start_time_is_field_22_even_with_odd_comms() {
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 \
                    1000 100 18446744073709551615";
        assert_eq!(stat_start_ticks(stat), Some(98765));
    }

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let pid = std::process::id();
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let ticks = stat_start_ticks(&stat).unwrap();
        // SAFETY: sysconf has no memory-safety preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let ns = ticks * (1_000_000_000 / tck);
        assert!(process_alive(pid, ns, tck));
        assert!(!process_alive(pid, ns + 10_000_000_000, tck));
    }
}
