//! Which series exist: the key an image is given (its comm, cgroup and,
//! with the pid label, tgid), admitted within the series limits or folded
//! into an over-the-limit series, and the series dropped once gone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::{
    image_id, Aggregator, Limit, SeriesState, MAX_PARSED_CGROUPS, OVER_LIMIT_CGROUP,
    OVER_LIMIT_COMM,
};
use crate::bpf::types::{sp_counters, sp_proc};
use crate::snapshot::{comm_to_string, Cgroup, SeriesKey};

impl Aggregator {
    pub(super) fn key_for(&mut self, tgid: u32, p: &sp_proc) -> SeriesKey {
        let id = image_id(tgid, p);
        if let Some(key) = self.keys.get(&id) {
            return key.clone();
        }
        let key = self.new_key(tgid, p);
        self.keys.insert(id, key.clone());
        key
    }

    /// The series an image not seen before goes to, by its comm and cgroup.
    pub(super) fn new_key(&mut self, tgid: u32, p: &sp_proc) -> SeriesKey {
        let key = SeriesKey {
            comm: comm_to_string(&p.comm),
            cgroup: self.cgroup(p.cgroup_id),
            pid: self.pid_label.then_some(tgid),
        };
        self.admit(key)
    }

    /// `key` if it is kept or fits the limits (then it is kept from now
    /// on), else the over-the-limit series that takes its place.
    pub(super) fn admit(&mut self, key: SeriesKey) -> SeriesKey {
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
    pub(super) fn cgroup(&mut self, id: u64) -> Arc<Cgroup> {
        let path = self.cgroups.resolve(id);
        self.parsed_cgroup(path)
    }

    pub(super) fn parsed_cgroup(&mut self, path: String) -> Arc<Cgroup> {
        if self.parsed.len() >= MAX_PARSED_CGROUPS {
            self.parsed.clear();
        }
        self.parsed
            .entry(path)
            .or_insert_with_key(|path| Cgroup::new(path.clone()))
            .clone()
    }

    /// Drop the series that have no live process, have not changed for the
    /// grace period, and whose process (pid label) or cgroup is gone.
    pub(super) fn drop_gone(&mut self, live: &HashMap<SeriesKey, sp_counters>) {
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

    /// Drop the retired series `expired` says to (series of deleted pods).
    pub fn drop_retired(&mut self, mut expired: impl FnMut(&SeriesKey) -> bool) {
        let pending: HashSet<SeriesKey> = self.keys.values().cloned().collect();
        self.series
            .retain(|key, _| pending.contains(key) || !expired(key));
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::limited;
    use super::*;
    use crate::procs::SeriesLimits;
    use std::time::Duration;

    fn key(comm: &str, cgroup: &str, pid: Option<u32>) -> SeriesKey {
        SeriesKey {
            comm: comm.into(),
            cgroup: Cgroup::new(cgroup.into()),
            pid,
        }
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
}
