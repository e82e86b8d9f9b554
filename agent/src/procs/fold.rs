//! Folding the final counts of process images that exited or exec'd (the
//! `proc_events` records, entries flagged in place) and the late counts the
//! kernel sends after an image's entry went, each into its series once.

use std::time::Instant;

use anyhow::Result;
use libbpf_rs::MapCore;

use super::{
    add_counters, image_id, Aggregator, PendingCgroups, PendingRecords, RECENT_RETIREMENT,
};
use crate::bpf::types::{sp_counters, sp_proc, sp_proc_event_kind};
use crate::snapshot::SeriesKey;

impl Aggregator {
    /// Fold the final counts of one image, once: the same image can be met
    /// twice when the kernel sends the record of an entry flagged in place
    /// (a recycled pid) while a table read folds it too.
    pub(super) fn retire(&mut self, tgid: u32, p: &sp_proc) {
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
    pub(super) fn add_late(&mut self, tgid: u32, p: &sp_proc) {
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

    pub(super) fn add_retired(&mut self, key: &SeriesKey, c: &sp_counters) {
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
    pub(super) fn fold_pending(&mut self, pending: &PendingRecords) {
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::{image_x, limited};
    use crate::bpf::types::sp_counters;

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
}
