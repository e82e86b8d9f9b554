//! The diagnosis engine: the signals' rules over the counter growth of an
//! observation and the node's facts, giving ranked findings. `slowpath
//! doctor` is one view of it (one observation of `--duration`, then a
//! report); the agent's continuous findings are meant to be another, over
//! a sliding window, with the same rules and the same thresholds.

use std::collections::BTreeMap;
use std::path::Path;

use crate::finding::{rank, Delta, Finding};
use crate::node::NodeFacts;
use crate::procs::sub_counters;
use crate::signals::{self, Observation, SignalArgs};
use crate::snapshot::{SeriesKey, Snapshot};

/// Counter growth of every series of `after` that `selects` keeps, since
/// `before` (a series new in `after` grew by all of its counts). Series are
/// matched by key and pod labels.
pub fn deltas(
    before: &Snapshot,
    after: &Snapshot,
    selects: impl Fn(&SeriesKey) -> bool,
) -> Vec<Delta> {
    let start: BTreeMap<_, _> = before
        .series
        .iter()
        .map(|s| ((&s.key, &s.pod), &s.counters))
        .collect();
    after
        .series
        .iter()
        .filter(|s| selects(&s.key))
        .map(|s| {
            let mut c = s.counters;
            if let Some(b) = start.get(&(&s.key, &s.pod)) {
                sub_counters(&mut c, b);
            }
            Delta {
                key: s.key.clone(),
                pod: s.pod.clone(),
                c,
            }
        })
        .collect()
}

/// What the rules know of the node: every enabled signal's settings read
/// under the sysfs root `sysfs`, the agent's own checks in `snapshot`, and,
/// with `measure`, the measurements the signals make on the spot (the clock
/// benchmark: a few ms of clock reads, for the doctor's report).
pub fn node_facts(
    snapshot: &Snapshot,
    sysfs: &Path,
    args: &SignalArgs,
    measure: bool,
) -> NodeFacts {
    let mut node = signals::read_node_settings(sysfs, &args.collectors);
    node.extend(snapshot.checks.iter().cloned());
    if measure {
        for measure in args.enabled().filter_map(|s| s.node.measure) {
            let fact = measure(&node);
            node.extend([fact]);
        }
    }
    node
}

/// Every enabled signal's findings in `obs`, in `SIGNALS` order, then
/// ranked (severity, then rate). With `live` (the processes still run),
/// signals may also look at them (`Signal::enrich`: which runtime a process
/// runs, from its mappings).
pub fn diagnose(obs: &Observation<'_>, live: bool) -> Vec<Finding> {
    diagnose_with(obs, live, |_| {})
}

/// [`diagnose`], with `prepare` run on each finding before the signal
/// looks at its live processes (the agent names a live tgid for each
/// process of a series without a pid label there, by its call sites where
/// they are sampled).
pub fn diagnose_with(
    obs: &Observation<'_>,
    live: bool,
    mut prepare: impl FnMut(&mut Finding),
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for signal in obs.args.enabled() {
        let mut found = (signal.diagnose)(obs);
        found.iter_mut().for_each(&mut prepare);
        if let Some(enrich) = signal.enrich.filter(|_| live) {
            found.iter_mut().for_each(enrich);
        }
        findings.extend(found);
    }
    rank(&mut findings);
    findings
}
