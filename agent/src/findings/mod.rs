//! Findings in the running agent: the diagnosis engine (`crate::diagnosis`,
//! the rules `slowpath doctor` applies) judged continuously on a sliding
//! window (`--findings.window`, 60 s by default, re-judged every quarter
//! of it) over the counters the agent keeps anyway. A process that crosses
//! a finding's threshold has a few of its user stacks sampled on demand
//! (`sampling.rs`) and matched against the known sources, so that the
//! finding names the cause and the fix. Shown as metrics
//! (`slowpath_finding_info`, `metrics.rs`) and, in full with call sites,
//! as JSON at `/debug/findings`.
//!
//! Costs: one extra read of the kernel tables per hop (as a scrape), the
//! rules over the series that grew in the window, one `struct sp_counters`
//! (about 1.2 KB) per series that grew per hop, and, per process that
//! crosses a threshold, 16 stack samples symbolized once in its life.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::callsites::tables::StackTables;
use crate::callsites::CallSite;
use crate::diagnosis;
use crate::finding::Finding;
use crate::signals::{Observation, SignalArgs};
use crate::snapshot::Snapshot;
use crate::worker::Worker;

pub mod held;
pub mod metrics;
pub mod sampling;
pub mod window;

use held::{Held, HeldFinding, MAX_PROCESSES_PER_FINDING};
use sampling::Sampler;
use window::Window;

/// Processes of a finding whose call sites are sampled (its top ones).
const SAMPLED_PER_FINDING: usize = 3;
/// Live processes sampled per series (a series without a pid label is every
/// process of one comm in one cgroup), the busiest since the last snapshot
/// first.
const SAMPLED_PER_SERIES: usize = 4;
/// How often the thread looks whether sampled stacks are ready.
const TICK: Duration = Duration::from_secs(1);

/// The engine's settings (`--findings.*`).
#[derive(Clone, Debug)]
pub struct FindingsOptions {
    /// Length of the sliding window; it is judged every quarter of it.
    pub window: Duration,
    /// Most (finding, process) pairs shown at once.
    pub max: usize,
    /// How long a cleared finding stays shown.
    pub grace: Duration,
    /// The signals' flags (their thresholds).
    pub args: SignalArgs,
    /// Root of sysfs (the node settings the rules read).
    pub sysfs: PathBuf,
}

/// What the engine publishes after each evaluation.
#[derive(Default)]
pub struct Published {
    /// The shown findings, per finding and process.
    pub held: Vec<HeldFinding>,
    /// Pairs found and not shown for `--findings.max`.
    pub over_limit: usize,
    /// Evaluations so far, and their total time in seconds.
    pub evaluations: u64,
    pub evaluation_seconds: f64,
    /// Processes whose stacks are being sampled now.
    pub sampling: usize,
    /// `/debug/findings`: the page as JSON.
    pub json: String,
}

/// Shared between the engine thread, the scrape and the HTTP route.
pub type SharedFindings = Arc<Mutex<Published>>;

/// `/debug/findings`, schema version 1: the findings of the last
/// evaluation in the doctor's JSON shape (`findings[]`, with call sites and
/// known sources), and the shown ones with since when they hold.
#[derive(Serialize)]
struct Page<'a> {
    schema_version: u32,
    /// Length of the observation the findings are judged on, in seconds
    /// (less than the window in the agent's first minute).
    window_seconds: f64,
    /// When the last evaluation ended (Unix seconds).
    evaluated_at: f64,
    findings: &'a [Finding],
    shown: &'a [HeldFinding],
    over_limit: usize,
}

/// The engine's thread; dropping it stops the thread.
pub struct FindingsThread {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl FindingsThread {
    /// Start the engine over `worker`'s snapshots; with `tables`, it
    /// samples call sites on demand.
    pub fn spawn(
        worker: Arc<Worker>,
        tables: Option<StackTables>,
        opts: FindingsOptions,
        shared: SharedFindings,
    ) -> Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("slowpath-findings".into())
            .spawn(move || {
                // built here: the symbolizer stays on this thread
                let mut engine = Engine {
                    sampler: tables.map(|t| Sampler::new(t, worker.clone())),
                    worker,
                    window: Window::new(opts.window),
                    held: Held::new(opts.max, opts.grace),
                    snapshot: None,
                    shared,
                    evaluations: 0,
                    evaluation_seconds: 0.0,
                    opts,
                };
                engine.run(&stopped);
            })
            .context("starting the findings thread")?;
        Ok(Self {
            stop: Some(stop),
            handle: Some(handle),
        })
    }
}

impl Drop for FindingsThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

struct Engine {
    worker: Arc<Worker>,
    sampler: Option<Sampler>,
    window: Window,
    held: Held,
    /// The last snapshot (live tgids of each series).
    snapshot: Option<Arc<Snapshot>>,
    shared: SharedFindings,
    evaluations: u64,
    evaluation_seconds: f64,
    opts: FindingsOptions,
}

impl Engine {
    /// Judge every hop, read sampled stacks as they come, until `stopped`
    /// says so (or its sender is gone).
    fn run(&mut self, stopped: &mpsc::Receiver<()>) {
        let hop = (self.opts.window / 4).max(TICK);
        let mut next = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next {
                self.evaluate(true);
                next += hop;
            }
            // also when every tick is a hop (a 4 s window)
            if self.sampler.as_ref().is_some_and(|s| s.due(now)) {
                self.read_samples(now);
            }
            let wait = next.saturating_duration_since(Instant::now()).min(TICK);
            match stopped.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    /// Judge the window: with `fresh`, a new hop ends now (a new snapshot);
    /// without, the same window again (call sites just came in).
    fn evaluate(&mut self, fresh: bool) {
        let started = Instant::now();
        if fresh {
            match self.worker.snapshot() {
                Ok(snapshot) => {
                    self.window.advance(started, snapshot.clone());
                    self.snapshot = Some(snapshot);
                }
                Err(err) => {
                    warn!(error = %format!("{err:#}"), "findings: reading the kernel tables");
                    return;
                }
            }
        }
        let Some(snapshot) = self.snapshot.clone() else {
            return;
        };
        let tgids = series_tgids(&snapshot);
        if fresh {
            if let Some(sampler) = &mut self.sampler {
                sampler.retain_live(&snapshot.live_images);
            }
        }
        let findings = self.judge(&snapshot, &tgids);
        self.held
            .update(Instant::now(), SystemTime::now(), &findings);
        self.evaluations += 1;
        self.evaluation_seconds += started.elapsed().as_secs_f64();
        self.publish(&findings);
        debug!(
            findings = findings.len(),
            shown = self.held.shown().count(),
            kept = self.window.kept(),
            elapsed = ?started.elapsed(),
            "findings evaluated"
        );
    }

    /// The rules over the window, each process named by a live tgid, with
    /// the call sites known so far (the others asked for).
    fn judge(&mut self, snapshot: &Snapshot, tgids: &Tgids) -> Vec<Finding> {
        let secs = self.window.secs();
        if secs <= 0.0 {
            return Vec::new();
        }
        let deltas = self.window.deltas();
        let node = diagnosis::node_facts(snapshot, &self.opts.sysfs, &self.opts.args, false);
        let obs = Observation {
            deltas: &deltas,
            secs,
            node: &node,
            args: &self.opts.args,
        };
        // Each process is named before its signal looks at it live (the
        // yield spin's CPU): a series of several processes (same comm and
        // cgroup, no pid label) is named by its call sites, not by its
        // first tgid, which measured an idle twin's CPU for the spinner.
        let sampler = &mut self.sampler;
        let findings = diagnosis::diagnose_with(&obs, true, |f| {
            f.processes.truncate(MAX_PROCESSES_PER_FINDING);
            for p in &mut f.processes {
                if p.pid == 0 {
                    p.pid = tgids
                        .get(&(p.identity.comm.clone(), p.identity.cgroup.clone(), None))
                        .and_then(|t| t.first().copied())
                        .unwrap_or(0);
                }
            }
            if let Some(sampler) = sampler.as_mut() {
                attach_call_sites(sampler, f, tgids);
            }
        });
        if let Some(sampler) = sampler {
            sampler.apply();
        }
        findings
    }

    /// Read the samples that came in and judge the window again with them.
    fn read_samples(&mut self, now: Instant) {
        if let Some(sampler) = &mut self.sampler {
            sampler.read(now);
            self.evaluate(false);
        }
    }

    fn publish(&self, findings: &[Finding]) {
        let held: Vec<HeldFinding> = self.held.shown().cloned().collect();
        let page = Page {
            schema_version: 1,
            window_seconds: self.window.secs(),
            evaluated_at: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            findings,
            shown: &held,
            over_limit: self.held.over_limit,
        };
        let mut json = serde_json::to_string_pretty(&page).unwrap_or_else(|err| {
            warn!(error = %err, "findings: encoding /debug/findings");
            String::from("{}")
        });
        json.push('\n');
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        *shared = Published {
            held,
            over_limit: self.held.over_limit,
            evaluations: self.evaluations,
            evaluation_seconds: self.evaluation_seconds,
            sampling: self.sampler.as_ref().map_or(0, Sampler::targets),
            json,
        };
    }
}

/// Live tgids per series: (comm, cgroup path, pid label).
type Tgids = HashMap<(String, String, Option<u32>), Vec<u32>>;

fn series_tgids(snapshot: &Snapshot) -> Tgids {
    (snapshot.live_tgids.iter())
        .map(|(key, tgids)| {
            let id = (key.comm.clone(), key.cgroup.path.clone(), key.pid);
            (id, tgids.clone())
        })
        .collect()
}

/// The call sites of `f`'s top processes as far as sampled (asking for the
/// rest), then the known sources they match (`Finding::explain`). A series
/// of several live processes (no pid label) has its busiest ones sampled;
/// of those sampled so far, the one with the most samples of the finding's
/// calls is named (the two storms of one series may each be named in turn).
fn attach_call_sites(sampler: &mut Sampler, f: &mut Finding, tgids: &Tgids) {
    let Some(kind) = f.call_sites else {
        return;
    };
    for p in f.processes.iter_mut().take(SAMPLED_PER_FINDING) {
        let candidates: Vec<u32> =
            match tgids.get(&(p.identity.comm.clone(), p.identity.cgroup.clone(), None)) {
                Some(t) => t.iter().copied().take(SAMPLED_PER_SERIES).collect(),
                // with a pid label the series is one process
                None => vec![p.pid],
            };
        // (samples, tgid, sites) of the best so far
        let mut best: Option<(u64, u32, Vec<CallSite>)> = None;
        for tgid in candidates.into_iter().filter(|&t| t != 0) {
            let Some(sites) = sampler.sites(tgid, kind) else {
                continue;
            };
            let samples: u64 = sites.iter().map(|s| s.samples).sum();
            if samples > 0 && best.as_ref().is_none_or(|b| samples > b.0) {
                best = Some((samples, tgid, sites.to_vec()));
            }
        }
        if let Some((_, tgid, sites)) = best {
            p.pid = tgid;
            p.call_sites = sites;
        }
    }
    f.explain();
}

/// Log what the engine does, once at start.
pub fn log_start(opts: &FindingsOptions, sampling: bool) {
    info!(
        window = ?opts.window,
        max = opts.max,
        grace = ?opts.grace,
        call_sites = if sampling { "sampled on demand" } else { "off (--debug.callsites has the stack tables)" },
        "findings: judging every {:?}, at /debug/findings and slowpath_finding_info",
        (opts.window / 4).max(TICK)
    );
}

/// The shared state, empty until the first evaluation.
pub fn shared() -> SharedFindings {
    Arc::new(Mutex::new(Published {
        json: String::from("{\"schema_version\":1,\"findings\":[],\"shown\":[]}\n"),
        ..Published::default()
    }))
}
