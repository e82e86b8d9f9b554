//! Reading the kernel's `procs` table (folding and deleting the entries it
//! flagged as exited) and sweeping the entries of processes gone without an
//! exit record.

use std::collections::HashSet;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};
use tracing::debug;

use super::liveness::process_alive;
use super::{image_id, Aggregator, PARKED_KEY_BASE};
use crate::bpf::types::{sp_proc, sp_proc_flag};

impl Aggregator {
    /// Live entries of the table; folds and deletes flagged ones.
    pub(super) fn read_table(&mut self, procs: &dyn MapCore) -> Result<Vec<(u32, sp_proc)>> {
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
    pub(super) fn sweep_entry(&mut self, tgid: u32, read: &sp_proc, now: Option<&sp_proc>) -> bool {
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
    use super::super::tests::{image_x, limited};
    use super::super::Aggregator;

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
}
