//! Call sites on demand: when a process crosses a finding's threshold, the
//! agent asks the kernel side for a few of its user stacks (the
//! `stack_targets` table: [`SAMPLES_PER_PROCESS`] samples, at most one per
//! jiffy, taken at that process's counted calls only), then symbolizes them
//! off the hot path with blazesym and keeps the result for as long as the
//! process lives. Every other process keeps the combining slots and pays
//! one inlined array lookup per counted call, and only while some target
//! waits (a few seconds after a finding appears).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use blazesym::symbolize::Symbolizer;
use tracing::{debug, warn};

use crate::bpf::types::sp_callsite_kind;
use crate::callsites::tables::StackTables;
use crate::callsites::{self, CallSite};

/// Samples asked of one process: enough for the few call sites behind a
/// storm (the doctor shows the top 5), a few ms of a 1 kHz loop.
pub const SAMPLES_PER_PROCESS: u32 = 16;
/// Processes sampled at once (the kernel table holds 64).
pub const MAX_TARGETS: usize = 16;
/// A target is read this long after it was set, or sooner once it has all
/// its samples.
const READ_AFTER: Duration = Duration::from_secs(5);
/// Reads of a target that found no sample before the agent gives up on it
/// (a process that stopped calling): it is asked again only after exiting.
const MAX_EMPTY_READS: u32 = 3;
/// A fresh symbolizer after this many processes (blazesym caches per
/// /proc/<pid>/map_files path).
const RENEW_SYMBOLIZER_AFTER: usize = 256;

/// One process being sampled.
struct Target {
    kinds: HashSet<u32>,
    since: Instant,
    empty_reads: u32,
}

/// The on-demand sampler: targets, and the call sites found per process.
pub struct Sampler {
    tables: StackTables,
    symbolizer: Symbolizer,
    symbolized: usize,
    targets: HashMap<u32, Target>,
    /// Call sites per (tgid, `enum sp_callsite_kind`), most sampled first;
    /// empty when sampling found none.
    sites: HashMap<(u32, u32), Vec<CallSite>>,
    /// Processes given up on (no samples), until they exit.
    given_up: HashSet<u32>,
    /// Processes ever targeted: their kernel entries go when they exit.
    sampled: HashSet<u32>,
    /// Whether `targets` changed since the kernel table was written.
    dirty: bool,
}

impl Sampler {
    pub fn new(tables: StackTables) -> Self {
        // A table left by an earlier run of the same object cannot exist
        // (maps are the loaded object's), but start from a known state.
        if let Err(err) = tables.set_targets(&[]) {
            warn!(error = %format!("{err:#}"), "clearing the stack targets");
        }
        Self {
            tables,
            symbolizer: Symbolizer::new(),
            symbolized: 0,
            targets: HashMap::new(),
            sites: HashMap::new(),
            given_up: HashSet::new(),
            sampled: HashSet::new(),
            dirty: false,
        }
    }

    /// The call sites of `tgid` for calls of `kind` when known; otherwise
    /// ask for them (they come with a later [`read`](Self::read)).
    pub fn sites(&mut self, tgid: u32, kind: sp_callsite_kind) -> Option<&[CallSite]> {
        if self.sites.contains_key(&(tgid, kind.0)) {
            return self.sites.get(&(tgid, kind.0)).map(Vec::as_slice);
        }
        if self.given_up.contains(&tgid) {
            return None;
        }
        let full = self.targets.len() >= MAX_TARGETS;
        match self.targets.get_mut(&tgid) {
            Some(t) => self.dirty |= t.kinds.insert(kind.0),
            None if !full => {
                self.targets.insert(
                    tgid,
                    Target {
                        kinds: HashSet::from([kind.0]),
                        since: Instant::now(),
                        empty_reads: 0,
                    },
                );
                self.sampled.insert(tgid);
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
        let wanted: Vec<(u32, u32)> = self
            .targets
            .keys()
            .map(|&tgid| (tgid, SAMPLES_PER_PROCESS))
            .collect();
        match self.tables.set_targets(&wanted) {
            Ok(n) => debug!(targets = n, "stack targets set"),
            Err(err) => warn!(error = %format!("{err:#}"), "setting the stack targets"),
        }
    }

    /// Whether some target is due to be read.
    pub fn due(&self, now: Instant) -> bool {
        self.targets.iter().any(|(&tgid, t)| {
            now.duration_since(t.since) >= READ_AFTER || self.tables.samples_left(tgid) == Some(0)
        })
    }

    /// Read the targets that are due: symbolize their stacks, keep the call
    /// sites, free their kernel entries and stop sampling them. Returns
    /// whether any call sites were found.
    pub fn read(&mut self, now: Instant) -> bool {
        let due: Vec<u32> = (self.targets.iter())
            .filter(|(&tgid, t)| {
                now.duration_since(t.since) >= READ_AFTER
                    || self.tables.samples_left(tgid) == Some(0)
            })
            .map(|(&tgid, _)| tgid)
            .collect();
        if due.is_empty() {
            return false;
        }
        let raw = self.tables.read();
        let mut found = false;
        for tgid in &due {
            let mut target = self.targets.remove(tgid).expect("a due target");
            let sampled = raw.iter().any(|s| s.tgid == *tgid);
            if !sampled {
                target.empty_reads += 1;
                if target.empty_reads < MAX_EMPTY_READS {
                    target.since = now;
                    self.targets.insert(*tgid, target);
                } else {
                    self.given_up.insert(*tgid);
                }
                continue;
            }
            for kind in &target.kinds {
                let sites =
                    callsites::for_process(&self.symbolizer, &raw, *tgid, sp_callsite_kind(*kind));
                found |= !sites.is_empty();
                self.sites.insert((*tgid, *kind), sites);
            }
            self.symbolized += 1;
        }
        let read: HashSet<u32> = due
            .iter()
            .copied()
            .filter(|t| !self.targets.contains_key(t))
            .collect();
        self.tables.forget(&read);
        self.dirty = true;
        self.apply();
        if self.symbolized >= RENEW_SYMBOLIZER_AFTER {
            self.symbolizer = Symbolizer::new();
            self.symbolized = 0;
        }
        found
    }

    /// Forget every process not in `live` (exited: a reused pid starts
    /// afresh), and stop sampling them.
    pub fn retain_live(&mut self, live: &HashSet<u32>) {
        let exited: HashSet<u32> = self.sampled.difference(live).copied().collect();
        if !exited.is_empty() {
            self.tables.forget(&exited);
            self.sampled.retain(|tgid| live.contains(tgid));
        }
        self.sites.retain(|(tgid, _), _| live.contains(tgid));
        self.given_up.retain(|tgid| live.contains(tgid));
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
        let _ = self.tables.set_targets(&[]);
    }
}
