//! The slow paths slowpath watches, one module each. A signal owns its label
//! values (the names of the BPF enums' slots), its metric families and its
//! doctor rules with their thresholds and prose; the kernel side counts into
//! `struct sp_counters` (`bpf/slowpath.h`).
//!
//! Adding a signal: its counters and hook in `bpf/`, one module here, one
//! line in [`SIGNALS`], its tests and docs (see ARCHITECTURE.md).

use prometheus::proto::MetricFamily;

use crate::exposition::{Family, Labels};
use crate::finding::{Finding, Observation};
use crate::node::NodeSettings;
use crate::snapshot::{Series, Snapshot};

pub mod clock;
pub mod memory;
pub mod sigmask;
pub mod sleep;
pub mod timer;

/// What the metrics of one scrape are made from.
pub struct Scrape<'a> {
    pub snapshot: &'a Snapshot,
    pub node: &'a NodeSettings,
    /// Label pairs of each series of `snapshot`, in the same order: made
    /// once per scrape, shared by every signal.
    labels: Vec<Labels>,
}

impl<'a> Scrape<'a> {
    pub fn new(snapshot: &'a Snapshot, node: &'a NodeSettings) -> Self {
        let labels = snapshot.series.iter().map(Series::labels).collect();
        Self {
            snapshot,
            node,
            labels,
        }
    }

    /// Every per-process series with its label pairs.
    pub fn series(&self) -> impl Iterator<Item = (&Labels, &Series)> {
        self.labels.iter().zip(&self.snapshot.series)
    }
}

/// One signal: its families, how it exports them, how it diagnoses.
pub struct Signal {
    /// Short name, as in the README's signal table.
    pub name: &'static str,
    /// Every family [`export`](Self::export) may produce.
    pub families: &'static [&'static Family],
    /// This signal's metric families for one scrape (empty ones included).
    pub export: fn(&Scrape<'_>) -> Vec<MetricFamily>,
    /// This signal's findings for one observation, in the order of its rules.
    pub diagnose: fn(&Observation<'_>) -> Vec<Finding>,
    /// Sharpen one of this signal's findings by looking at the live
    /// processes it names (`/proc`); run by the doctor only, not in tests
    /// of recorded observations.
    pub enrich: Option<fn(&mut Finding)>,
}

/// Every signal, in the order the doctor runs their rules.
pub const SIGNALS: [&Signal; 5] = [
    &clock::SIGNAL,
    &sigmask::SIGNAL,
    &sleep::SIGNAL,
    &timer::SIGNAL,
    &memory::SIGNAL,
];

/// Every family of every signal.
pub fn families() -> impl Iterator<Item = &'static Family> {
    SIGNALS.into_iter().flat_map(|s| s.families.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::follows_conventions;

    #[test]
    fn every_family_follows_prometheus_conventions_and_is_unique() {
        let mut names = std::collections::HashSet::new();
        for f in families() {
            assert!(follows_conventions(f), "{}", f.name);
            assert!(names.insert(f.name), "{} exported twice", f.name);
        }
    }
}

/// Observations for the rules' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::bpf::types::sp_counters;
    use crate::finding::{Delta, Observation};
    use crate::node::NodeSettings;
    use crate::snapshot::{Cgroup, SeriesKey};

    /// Process `comm` (tgid 42) whose counters grew as `f` sets them.
    pub fn delta(comm: &str, f: impl FnOnce(&mut sp_counters)) -> Delta {
        let mut c = sp_counters::default();
        f(&mut c);
        Delta {
            key: SeriesKey {
                comm: comm.into(),
                cgroup: Cgroup::new("/".into()),
                pid: Some(42),
            },
            pod: None,
            c,
        }
    }

    /// The families `SIGNAL` exports for one series made of `d`'s counters,
    /// on a node with no settings read.
    pub fn export_one_of(signal: &super::Signal, d: Delta) -> Vec<prometheus::proto::MetricFamily> {
        let snapshot = crate::snapshot::Snapshot {
            series: vec![crate::snapshot::Series {
                key: d.key,
                pod: d.pod,
                counters: d.c,
            }],
            ..Default::default()
        };
        let node = NodeSettings::default();
        (signal.export)(&super::Scrape::new(&snapshot, &node))
    }

    /// `rule` applied to a one-second observation of `deltas` on a node with
    /// no settings read.
    pub fn observe<T>(deltas: &[Delta], rule: impl Fn(&Observation<'_>) -> T) -> T {
        let node = NodeSettings::default();
        rule(&Observation {
            deltas,
            secs: 1.0,
            node: &node,
            bench: &[],
            timer_loop_per_sec: super::timer::DEFAULT_LOOP_PER_SEC,
            wakeup_cost_seconds: None,
        })
    }
}
