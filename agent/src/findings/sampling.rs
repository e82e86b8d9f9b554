//! Call sites on demand: when a process crosses a finding's threshold, the
//! agent asks the kernel side for its user stacks (the `stack_targets`
//! table) for [`SAMPLE_FOR`]: at most one sample per jiffy, taken at that
//! process's counted calls only, so a storm gives up to HZ samples a second
//! and a quiet process of the same series a few. It then symbolizes them off
//! the hot path with blazesym and keeps the result for as long as the process
//! lives. While no target waits, a counted call pays a load and a branch
//! (`stack_target_count`); while one does (two seconds after a finding
//! appears), every process counts in its `procs` entry rather than the
//! combining slots, and looks the target table up. THP faults are
//! sampled for every process without being asked (`sample_thp_faults`: the
//! burst is over by the time it is a finding).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blazesym::symbolize::Symbolizer;
use tracing::{debug, warn};

use crate::bpf::types::sp_callsite_kind;
use crate::callsites::tables::StackTables;
use crate::callsites::{self, CallSite};
use crate::worker::Worker;

/// How long a process is sampled once asked for.
pub const SAMPLE_FOR: Duration = Duration::from_secs(2);
/// Most samples of one process (HZ=1000 for [`SAMPLE_FOR`] is 2,000).
const MAX_SAMPLES: u32 = 4096;
/// Processes sampled at once (the kernel table holds 64).
pub const MAX_TARGETS: usize = 16;
/// A process sampled without a single counted call of a kind is asked
/// again after this long (it may have paused).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(60);
/// A fresh symbolizer after this many processes (blazesym caches per
/// /proc/<pid>/map_files path).
const RENEW_SYMBOLIZER_AFTER: usize = 256;

/// The call sites of one process for one kind of call.
struct Sites {
    sites: Vec<CallSite>,
    /// When they were read: an empty result is asked again later.
    read: Instant,
}

/// The on-demand sampler: targets, and the call sites found per process.
pub struct Sampler {
    tables: StackTables,
    /// Tells the programs how many targets there are (it owns .bss).
    worker: Arc<Worker>,
    symbolizer: Symbolizer,
    symbolized: usize,
    /// tgid -> (kinds asked for, since when sampled)
    targets: HashMap<u32, (HashSet<u32>, Instant)>,
    /// Call sites per (tgid, `enum sp_callsite_kind`), most sampled first.
    sites: HashMap<(u32, u32), Sites>,
    /// Whether `targets` changed since the kernel table was written.
    dirty: bool,
}

impl Sampler {
    pub fn new(tables: StackTables, worker: Arc<Worker>) -> Self {
        let mut sampler = Self {
            tables,
            worker,
            symbolizer: Symbolizer::new(),
            symbolized: 0,
            targets: HashMap::new(),
            sites: HashMap::new(),
            dirty: true,
        };
        sampler.apply(); // from a known state: no target
        sampler
    }

    /// Make the kernel side sample exactly `wanted` (tgid, samples): the
    /// programs are told there is none while the table changes.
    fn write_targets(&self, wanted: &[(u32, u32)]) -> anyhow::Result<usize> {
        self.worker.set_stack_target_count(0)?;
        let taken = self.tables.set_targets(wanted);
        if taken > 0 {
            self.worker
                .set_stack_target_count(u32::try_from(taken).unwrap_or(u32::MAX))?;
        }
        Ok(taken)
    }

    /// The call sites of `tgid` for calls of `kind` when sampled (empty:
    /// it made none while sampled); otherwise ask for them (they come with
    /// a later [`read`](Self::read)).
    pub fn sites(&mut self, tgid: u32, kind: sp_callsite_kind) -> Option<&[CallSite]> {
        let now = Instant::now();
        let known = self
            .sites
            .get(&(tgid, kind.0))
            .is_some_and(|s| !s.sites.is_empty() || now.duration_since(s.read) < ASK_AGAIN_AFTER);
        if known {
            return self.sites.get(&(tgid, kind.0)).map(|s| s.sites.as_slice());
        }
        let full = self.targets.len() >= MAX_TARGETS;
        match self.targets.get_mut(&tgid) {
            Some((kinds, _)) => {
                kinds.insert(kind.0);
            }
            None if !full => {
                self.targets.insert(tgid, (HashSet::from([kind.0]), now));
                self.dirty = true;
            }
            None => {}
        }
        None
    }

    /// Write the targets to the kernel table if they changed.
    pub fn apply(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let wanted: Vec<(u32, u32)> = self.targets.keys().map(|&t| (t, MAX_SAMPLES)).collect();
        match self.write_targets(&wanted) {
            Ok(n) => debug!(targets = n, "stack targets set"),
            Err(err) => warn!(error = %format!("{err:#}"), "setting the stack targets"),
        }
    }

    /// The targets sampled for [`SAMPLE_FOR`] by `now`.
    fn due_targets(&self, now: Instant) -> Vec<u32> {
        (self.targets.iter())
            .filter(|(_, (_, since))| now.duration_since(*since) >= SAMPLE_FOR)
            .map(|(&tgid, _)| tgid)
            .collect()
    }

    /// Whether some target is due to be read.
    pub fn due(&self, now: Instant) -> bool {
        !self.due_targets(now).is_empty()
    }

    /// Read the targets that are due: symbolize their stacks, keep the call
    /// sites, free their kernel entries and stop sampling them.
    pub fn read(&mut self, now: Instant) {
        let due = self.due_targets(now);
        if due.is_empty() {
            return;
        }
        let raw = self.tables.read();
        for tgid in &due {
            let (kinds, _) = self.targets.remove(tgid).expect("a due target");
            for kind in kinds {
                let sites =
                    callsites::for_process(&self.symbolizer, &raw, *tgid, sp_callsite_kind(kind));
                self.sites.insert((*tgid, kind), Sites { sites, read: now });
            }
            self.symbolized += 1;
        }
        self.tables.forget(&due.iter().copied().collect());
        self.dirty = true;
        self.apply();
        if self.symbolized >= RENEW_SYMBOLIZER_AFTER {
            self.symbolizer = Symbolizer::new();
            self.symbolized = 0;
        }
    }

    /// Forget every process not in `live` (exited: a reused pid starts
    /// afresh), stop sampling them, and free their kernel entries.
    pub fn retain_live(&mut self, live: &HashSet<u32>) {
        // every process's THP faults are sampled unasked: look at the table
        let exited: HashSet<u32> = (self.tables.entries().iter().map(|s| s.tgid))
            .filter(|tgid| !live.contains(tgid))
            .collect();
        if !exited.is_empty() {
            self.tables.forget(&exited);
        }
        self.sites.retain(|(tgid, _), _| live.contains(tgid));
        let before = self.targets.len();
        self.targets.retain(|tgid, _| live.contains(tgid));
        if self.targets.len() != before {
            self.dirty = true;
        }
    }

    /// Processes being sampled now.
    pub fn targets(&self) -> usize {
        self.targets.len()
    }
}

impl Drop for Sampler {
    /// Stop every on-demand sample (the programs may outlive the engine).
    fn drop(&mut self) {
        let _ = self.write_targets(&[]);
    }
}
