//! The sliding window the agent's findings are judged on: the counter
//! growth of every series over the last `--findings.window`, kept as the
//! growth of each hop (a quarter of the window) of the series that grew in
//! it. One snapshot is kept (the last hop's end); an idle series costs
//! nothing past it, a busy one its key and the counters that grew, per hop.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::diagnosis;
use crate::finding::Delta;
use crate::labels::PodLabels;
use crate::procs::{add_sparse_counters, sparse_counters};
use crate::snapshot::{SeriesKey, Snapshot};

/// The growth of the series that grew during one hop.
struct Hop {
    secs: f64,
    grown: Vec<Grown>,
}

/// One series' growth in one hop: only its non-zero counters (a whole
/// `struct sp_counters` is over 1 KB, and a hop's growth touches a few).
struct Grown {
    key: SeriesKey,
    pod: Option<PodLabels>,
    counters: Box<[(u16, u64)]>,
}

/// Hops covering at most `length`, and the snapshot the next hop starts at.
pub struct Window {
    length: Duration,
    last: Option<(Instant, Arc<Snapshot>)>,
    hops: VecDeque<Hop>,
}

impl Window {
    /// An empty window of `length`.
    pub fn new(length: Duration) -> Self {
        Self {
            length,
            last: None,
            hops: VecDeque::new(),
        }
    }

    /// End a hop at `now` with `snapshot` (the first call only sets the
    /// start), and drop the oldest hops once the others cover the window.
    pub fn advance(&mut self, now: Instant, snapshot: Arc<Snapshot>) {
        if let Some((then, before)) = &self.last {
            let grown = diagnosis::deltas(before, &snapshot, |_| true)
                .into_iter()
                .map(|d| Grown {
                    counters: sparse_counters(&d.c),
                    key: d.key,
                    pod: d.pod,
                })
                .filter(|g| !g.counters.is_empty())
                .collect();
            self.hops.push_back(Hop {
                secs: now.duration_since(*then).as_secs_f64(),
                grown,
            });
        }
        self.last = Some((now, snapshot));
        let length = self.length.as_secs_f64();
        while self.hops.len() > 1 && self.secs() - self.hops[0].secs >= length * 0.99 {
            self.hops.pop_front();
        }
    }

    /// Seconds the hops cover (less than the window in its first minute).
    pub fn secs(&self) -> f64 {
        self.hops.iter().map(|h| h.secs).sum()
    }

    /// The growth of every series that grew in the window, summed over its
    /// hops, in series order; empty before the first hop ends.
    pub fn deltas(&self) -> Vec<Delta> {
        let mut sums: BTreeMap<(SeriesKey, Option<PodLabels>), Delta> = BTreeMap::new();
        for g in self.hops.iter().flat_map(|h| &h.grown) {
            let sum = sums
                .entry((g.key.clone(), g.pod.clone()))
                .or_insert_with(|| Delta {
                    key: g.key.clone(),
                    pod: g.pod.clone(),
                    c: Default::default(),
                });
            add_sparse_counters(&mut sum.c, &g.counters);
        }
        sums.into_values().collect()
    }

    /// Series (kept per hop) in the window: what it holds in memory, a key
    /// and the counters that grew each.
    pub fn kept(&self) -> usize {
        self.hops.iter().map(|h| h.grown.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Cgroup, Series};

    fn snapshot(reads: &[(&str, u64)]) -> Arc<Snapshot> {
        let series = reads
            .iter()
            .map(|&(comm, n)| {
                let counters = crate::bpf::types::sp_counters {
                    gettimeofday: n,
                    ..Default::default()
                };
                Series {
                    key: SeriesKey {
                        comm: comm.into(),
                        cgroup: Cgroup::new("/a".into()),
                        pid: None,
                    },
                    pod: None,
                    counters,
                }
            })
            .collect();
        Arc::new(Snapshot {
            series,
            ..Snapshot::default()
        })
    }

    #[test]
    fn the_window_sums_its_hops_and_forgets_older_ones() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Window::new(s(60));
        w.advance(t0, snapshot(&[("a", 100), ("idle", 5)]));
        assert!(w.deltas().is_empty());
        for (i, n) in [(1, 200), (2, 300), (3, 400), (4, 500), (5, 1500)] {
            w.advance(t0 + s(15 * i), snapshot(&[("a", n), ("idle", 5)]));
        }
        // four hops of 15 s cover the window: the first (+100) went
        assert_eq!(w.secs(), 60.0);
        let d = w.deltas();
        assert_eq!(d.len(), 1, "the idle series keeps nothing");
        assert_eq!(d[0].c.gettimeofday, 1300);
        assert_eq!(w.kept(), 4);
    }
}
