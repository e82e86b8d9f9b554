//! Call sites for the running agent (`--debug.callsites`): a thread that
//! every [`HARVEST_INTERVAL`] reads the kernel's sampled stacks, symbolizes
//! the new ones while their process still runs, and adds the samples to
//! folded stacks served at `/debug/callsites` (flame graph input).
//!
//! Costs and bounds: the kernel side takes at most one stack per jiffy
//! per kind of call per process; each harvest reads the `callsites` table (one lookup per
//! entry, at most 16384 entries) and the stacks of new entries only, with
//! their stack copies (unwound once, then deleted from the kernel table to
//! leave room for new sites: see `unwind.rs`).
//! Symbolized paths are cached per process and per stack, and evicted when
//! the process exits, together with its kernel entries and the stacks no one
//! else uses. At most [`MAX_NEW_PROCESSES_PER_HARVEST`] new processes are
//! symbolized per harvest. At most [`MAX_FOLDED_STACKS`] distinct folded
//! stacks are kept; samples of further stacks go to one
//! `[more stacks than slowpath keeps];[kind]` line per kind.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use blazesym::symbolize::Symbolizer;
use prometheus::proto::MetricType;
use prometheus::{IntCounter, IntGauge, Registry};

use super::tables::StackTables;
use super::unwind::Unwinding;
use super::{folded_path, symbolize_site_with, unknown_site, EXITED};
use crate::exposition::{Family, FamilyList};

/// How often the kernel tables are read.
pub const HARVEST_INTERVAL: Duration = Duration::from_secs(1);
/// Distinct folded stacks kept (about 200 bytes each).
pub const MAX_FOLDED_STACKS: usize = 10_000;
/// New processes symbolized per harvest; the others wait for the next one.
pub const MAX_NEW_PROCESSES_PER_HARVEST: usize = 64;
/// blazesym keeps an entry per /proc/<pid>/map_files path it opened: a
/// fresh symbolizer after this many exits frees them (the parsed ELF files
/// go with it and are parsed again on demand).
const RENEW_SYMBOLIZER_AFTER_EXITS: usize = 1024;
const OVERFLOW_FRAME: &str = "[more stacks than slowpath keeps]";

/// Folded stacks with their sample counts; shared with the HTTP server.
#[derive(Debug, Default)]
pub struct FoldedStacks {
    /// path -> (`enum sp_callsite_kind`, samples)
    lines: HashMap<String, (u32, u64)>,
    /// Names of the call kinds, indexed by `enum sp_callsite_kind`.
    kinds: Vec<&'static str>,
}

/// The folded stacks, behind a lock the harvester holds once per harvest.
pub type SharedFolded = Arc<Mutex<FoldedStacks>>;

impl FoldedStacks {
    /// No stacks yet; `kinds` names the call kinds, indexed by
    /// `enum sp_callsite_kind` (the signals' `call_sites`).
    pub fn new(kinds: Vec<&'static str>) -> Self {
        Self {
            lines: HashMap::new(),
            kinds,
        }
    }

    /// The name of call kind `kind` ("?" when unknown).
    pub fn kind_name(&self, kind: u32) -> &'static str {
        self.kinds.get(kind as usize).copied().unwrap_or("?")
    }

    /// The call kind named `name`, if there is one.
    pub fn kind_named(&self, name: &str) -> Option<u32> {
        self.kinds
            .iter()
            .position(|&k| k == name)
            .and_then(|i| u32::try_from(i).ok())
    }

    /// Every call kind's name, in kind order.
    pub fn kind_names(&self) -> &[&'static str] {
        &self.kinds
    }

    /// Add `samples` to `path`, or to the overflow line once full.
    fn add(&mut self, path: &str, kind: u32, samples: u64) {
        if let Some(line) = self.lines.get_mut(path) {
            line.1 += samples;
            return;
        }
        let path = if self.lines.len() < MAX_FOLDED_STACKS {
            path.to_string()
        } else {
            format!("{OVERFLOW_FRAME};[{}]", self.kind_name(kind))
        };
        self.lines.entry(path).or_insert((kind, 0)).1 += samples;
    }

    /// Distinct folded stacks kept.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// `path count` lines, most sampled first, of one kind or of all.
    pub fn render(&self, kind: Option<u32>) -> String {
        let mut lines: Vec<(&String, u64)> = self
            .lines
            .iter()
            .filter(|(_, (k, n))| *n > 0 && kind.is_none_or(|want| *k == want))
            .map(|(path, (_, n))| (path, *n))
            .collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut out = String::with_capacity(lines.len() * 128);
        for (path, n) in lines {
            out.push_str(path);
            out.push(' ');
            out.push_str(&n.to_string());
            out.push('\n');
        }
        out
    }
}

/// Self-metrics of the call-site capture (registered only when it is on).
const SAMPLES: Family = Family {
    name: "slowpath_callsite_samples_total",
    help: "User stacks sampled at counted syscalls and folded into /debug/callsites \
           (at most one per jiffy per kind of call per process)",
    kind: MetricType::COUNTER,
};
const DROPPED: Family = Family {
    name: "slowpath_callsite_samples_dropped_total",
    help: "Sampled user stacks the kernel could not keep (stacks or callsites \
           table full, or stack not walkable)",
    kind: MetricType::COUNTER,
};
const STACKS: Family = Family {
    name: "slowpath_callsite_stacks",
    help: "Distinct folded stacks kept for /debug/callsites",
    kind: MetricType::GAUGE,
};
const PROCESSES: Family = Family {
    name: "slowpath_callsite_processes",
    help: "Live processes with symbolized call sites in the cache",
    kind: MetricType::GAUGE,
};

/// The families of [`CallSiteMetrics`] (with `--debug.callsites`), as
/// `slowpath signals` lists them.
pub const FAMILIES: FamilyList = FamilyList {
    defined_in: file!(),
    families: &[&SAMPLES, &DROPPED, &STACKS, &PROCESSES],
};

#[derive(Clone)]
pub struct CallSiteMetrics {
    samples: IntCounter,
    dropped: IntCounter,
    stacks: IntGauge,
    processes: IntGauge,
}

impl CallSiteMetrics {
    /// Create and register `slowpath_callsite_*`.
    pub fn register(registry: &Registry) -> Result<Self> {
        let m = Self {
            samples: IntCounter::new(SAMPLES.name, SAMPLES.help)?,
            dropped: IntCounter::new(DROPPED.name, DROPPED.help)?,
            stacks: IntGauge::new(STACKS.name, STACKS.help)?,
            processes: IntGauge::new(PROCESSES.name, PROCESSES.help)?,
        };
        registry.register(Box::new(m.samples.clone()))?;
        registry.register(Box::new(m.dropped.clone()))?;
        registry.register(Box::new(m.stacks.clone()))?;
        registry.register(Box::new(m.processes.clone()))?;
        Ok(m)
    }
}

/// Symbolized stacks of one process: (kind, stack id, stack top, comm) -> where
/// its samples go and how many were already counted.
type ProcSites = HashMap<(u32, u64, [u64; 2], String), Known>;

struct Known {
    path: String,
    seen: u64,
}

/// Harvests the kernel tables into [`FoldedStacks`]; lives on one thread
/// (blazesym's symbolizer is not `Send`).
pub struct Harvester {
    tables: StackTables,
    symbolizer: Symbolizer,
    unwinding: Unwinding,
    procs: HashMap<u32, ProcSites>,
    exits_since_renewal: usize,
    dropped_seen: u64,
    folded: SharedFolded,
    metrics: CallSiteMetrics,
    /// The call kinds' names (as in `folded`), for the paths made here.
    kinds: Vec<&'static str>,
}

impl Harvester {
    pub fn new(tables: StackTables, folded: SharedFolded, metrics: CallSiteMetrics) -> Self {
        let kinds = folded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .kind_names()
            .to_vec();
        Self {
            kinds,
            tables,
            symbolizer: Symbolizer::new(),
            unwinding: Unwinding::new(),
            procs: HashMap::new(),
            exits_since_renewal: 0,
            dropped_seen: 0,
            folded,
            metrics,
        }
    }

    /// One pass: fold new samples, symbolize new stacks, evict exited
    /// processes (their last samples are folded first).
    pub fn harvest(&mut self) {
        let mut alive: HashMap<u32, bool> = HashMap::new();
        let mut new_procs = 0;
        let mut batch: Vec<(String, u32, u64)> = Vec::new();
        self.unwinding.new_pass(); // libraries may have come and gone
        for mut site in self.tables.entries() {
            let live = *alive
                .entry(site.tgid)
                .or_insert_with(|| process_alive(site.tgid));
            let sites = match self.procs.entry(site.tgid) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(v) => {
                    if live && new_procs >= MAX_NEW_PROCESSES_PER_HARVEST {
                        continue; // next harvest
                    }
                    new_procs += 1;
                    v.insert(ProcSites::new())
                }
            };
            let known = sites
                .entry((site.kind, site.stack_id, site.stack_top, site.comm.clone()))
                .or_insert_with(|| {
                    let symbolized = match live && self.tables.fill_stack(&mut site) {
                        true => {
                            let s =
                                symbolize_site_with(&self.symbolizer, &mut self.unwinding, &site);
                            // symbolized once: its room is for new sites
                            self.tables.drop_copy(&site);
                            s
                        }
                        // gone before its first harvest
                        false => unknown_site(0, EXITED),
                    };
                    Known {
                        path: folded_path(
                            &site.comm,
                            &symbolized,
                            self.kinds.get(site.kind as usize).copied().unwrap_or("?"),
                        ),
                        seen: 0,
                    }
                });
            let delta = site.samples.saturating_sub(known.seen);
            known.seen = site.samples;
            if delta > 0 {
                batch.push((known.path.clone(), site.kind, delta));
            }
        }
        // Processes with no entry left are gone from the cache too.
        self.procs.retain(|tgid, _| alive.contains_key(tgid));
        let exited: HashSet<u32> = alive
            .into_iter()
            .filter(|&(_, live)| !live)
            .map(|(tgid, _)| tgid)
            .collect();
        self.evict(&exited);
        self.publish(&batch);
    }

    /// Forget exited processes: their kernel entries, unshared stacks and
    /// cached paths.
    fn evict(&mut self, exited: &HashSet<u32>) {
        self.tables.forget(exited);
        for tgid in exited {
            self.procs.remove(tgid);
        }
        self.exits_since_renewal += exited.len();
        if self.exits_since_renewal >= RENEW_SYMBOLIZER_AFTER_EXITS {
            self.symbolizer = Symbolizer::new();
            self.exits_since_renewal = 0;
        }
    }

    fn publish(&mut self, batch: &[(String, u32, u64)]) {
        let stacks = {
            let mut folded = self.folded.lock().unwrap_or_else(|e| e.into_inner());
            for (path, kind, n) in batch {
                folded.add(path, *kind, *n);
            }
            folded.len()
        };
        let m = &self.metrics;
        m.samples.inc_by(batch.iter().map(|b| b.2).sum());
        let dropped = self.tables.dropped();
        m.dropped.inc_by(dropped.saturating_sub(self.dropped_seen));
        self.dropped_seen = dropped;
        m.stacks.set(stacks as i64);
        m.processes.set(self.procs.len() as i64);
    }
}

/// The harvester's thread; dropping it stops the thread.
pub struct HarvesterThread {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HarvesterThread {
    /// Harvest every [`HARVEST_INTERVAL`] until dropped.
    pub fn spawn(
        tables: StackTables,
        folded: SharedFolded,
        metrics: CallSiteMetrics,
    ) -> Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("slowpath-stacks".into())
            .spawn(move || {
                let mut harvester = Harvester::new(tables, folded, metrics);
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(HARVEST_INTERVAL) {
                    harvester.harvest();
                }
            })
            .context("starting the call-site thread")?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for HarvesterThread {
    fn drop(&mut self) {
        drop(self.stop.take()); // disconnects: the loop ends
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether `tgid` still runs (its /proc entry exists; a zombie counts as
/// gone: its memory map is already empty).
fn process_alive(tgid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{tgid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_stacks_are_bounded_and_sorted() {
        let mut f = FoldedStacks::new(vec!["clock", "rt_sigprocmask", "sleep", "thp_fault"]);
        for i in 0..MAX_FOLDED_STACKS + 5 {
            f.add(&format!("app;f{i};[clock]"), 0, 1);
        }
        f.add("app;f0;[clock]", 0, 9);
        f.add("app;g;[sleep]", 2, 3);
        assert_eq!(f.len(), MAX_FOLDED_STACKS + 2);
        let all = f.render(None);
        assert!(all.starts_with("app;f0;[clock] 10\n"), "{all}");
        assert!(all.contains(&format!("{OVERFLOW_FRAME};[clock] 5\n")));
        assert!(all.contains(&format!("{OVERFLOW_FRAME};[sleep] 3\n")));
        let sleeps = f.render(Some(2));
        assert_eq!(sleeps, format!("{OVERFLOW_FRAME};[sleep] 3\n"));
    }

    #[test]
    fn own_process_is_alive_and_a_free_pid_is_not() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }
}
