//! Call sites on demand: when a process crosses a finding's threshold, the
//! agent asks the kernel side for its user stacks (the `stack_targets`
//! table) for [`SAMPLE_FOR`]: at most one sample per jiffy per kind of call
//! (clock, sigprocmask, timed wait, THP fault), taken at that process's
//! counted calls only, so a storm gives up to HZ samples a second
//! and a quiet process of the same series a few. It then symbolizes them off
//! the hot path with blazesym and keeps the result for as long as the process
//! lives. While no target waits, a counted call pays a load and a branch
//! (`stack_target_count`); while one does (two seconds after a finding
//! appears), every process counts in its `procs` entry rather than the
//! combining slots, and looks the target table up. A signal may have its
//! calls sampled for every process without being asked (its rodata patch:
//! the memory signal's THP faults, whose burst is over by the time it is a
//! finding).

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

/// Which process image a tgid was: (start time in ns since boot, exec
/// count), as the kernel's process table keys it. A pid reused by another
/// process, or an exec, makes another image.
pub type Image = (u64, u64);

/// The call sites of one process for one kind of call.
struct Sites {
    sites: Vec<CallSite>,
    /// When they were read: an empty result is asked again later.
    read: Instant,
    /// The image sampled: the sites are forgotten when the tgid's changes.
    image: Option<Image>,
}

/// A process being sampled.
struct Target {
    /// `enum sp_callsite_kind` values asked for.
    kinds: HashSet<u32>,
    since: Instant,
    /// The image asked about (the last snapshot's, when it had the tgid).
    image: Option<Image>,
}

/// The on-demand sampler: targets, and the call sites found per process.
pub struct Sampler {
    tables: StackTables,
    /// Tells the programs how many targets there are (it owns .bss).
    worker: Arc<Worker>,
    /// tgid -> what is sampled
    targets: HashMap<u32, Target>,
    /// Call sites per (tgid, `enum sp_callsite_kind`), most sampled first.
    sites: HashMap<(u32, u32), Sites>,
    /// Whether `targets` changed since the kernel table was written.
    dirty: bool,
    /// The live images of the last snapshot, by tgid ([`retain_live`](Self::retain_live)).
    live: HashMap<u32, Image>,
}

impl Sampler {
    pub fn new(tables: StackTables, worker: Arc<Worker>) -> Self {
        let mut sampler = Self {
            tables,
            worker,
            targets: HashMap::new(),
            sites: HashMap::new(),
            dirty: true,
            live: HashMap::new(),
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
            Some(target) => {
                target.kinds.insert(kind.0);
            }
            None if !full => {
                let target = Target {
                    kinds: HashSet::from([kind.0]),
                    since: now,
                    image: self.live.get(&tgid).copied(),
                };
                self.targets.insert(tgid, target);
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
            .filter(|(_, target)| now.duration_since(target.since) >= SAMPLE_FOR)
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
        let started = Instant::now();
        let raw = self.tables.read();
        // A symbolizer per read, dropped after it: blazesym keeps every
        // binary it parsed (with its DWARF, when debug packages are
        // installed: libc's alone is about 17 MiB), and a read comes only
        // with a new finding.
        let symbolizer = Symbolizer::new();
        for tgid in &due {
            let target = self.targets.remove(tgid).expect("a due target");
            for kind in target.kinds {
                let sites =
                    callsites::for_process(&symbolizer, &raw, *tgid, sp_callsite_kind(kind));
                let image = target.image;
                self.sites.insert(
                    (*tgid, kind),
                    Sites {
                        sites,
                        read: now,
                        image,
                    },
                );
            }
        }
        self.tables.forget(&due.iter().copied().collect());
        self.dirty = true;
        self.apply();
        drop(symbolizer);
        release_freed_memory();
        debug!(processes = due.len(), elapsed = ?started.elapsed(), "call sites read");
    }

    /// Forget every process whose tgid is not in `live` (tgid -> image, the
    /// snapshot's live processes) or is now another image (a reused pid, an
    /// exec: it starts afresh), stop sampling them, and free their kernel
    /// entries.
    pub fn retain_live(&mut self, live: &HashMap<u32, Image>) {
        let same = |tgid: &u32, image: &Option<Image>| {
            live.get(tgid)
                .is_some_and(|now| image.is_none_or(|then| then == *now))
        };
        let mut gone: HashSet<u32> = (self.sites.iter())
            .filter(|((tgid, _), s)| !same(tgid, &s.image))
            .map(|((tgid, _), _)| *tgid)
            .collect();
        gone.extend(
            (self.targets.iter())
                .filter(|(tgid, t)| !same(tgid, &t.image))
                .map(|(tgid, _)| *tgid),
        );
        // a tgid that is another image than at the last snapshot
        gone.extend(
            (live.iter())
                .filter(|(tgid, image)| self.live.get(tgid).is_some_and(|then| then != *image))
                .map(|(tgid, _)| *tgid),
        );
        // every process's THP faults are sampled unasked: look at the table
        gone.extend(
            (self.tables.entries().iter().map(|s| s.tgid)).filter(|tgid| !live.contains_key(tgid)),
        );
        if !gone.is_empty() {
            self.tables.forget(&gone);
        }
        self.sites.retain(|(tgid, _), _| !gone.contains(tgid));
        let before = self.targets.len();
        self.targets.retain(|tgid, _| !gone.contains(tgid));
        if self.targets.len() != before {
            self.dirty = true;
        }
        self.live.clone_from(live);
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

/// Give the heap the symbolizer freed back to the kernel: glibc keeps freed
/// memory in its arenas (one per thread), and a symbolization parses whole
/// binaries (their DWARF too), so without this the agent's RSS keeps that
/// peak.
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim(3) only returns free heap pages to the kernel; it
    // takes no pointer and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
