//! What slowpath's own programs cost in the kernel, per hook: their runs,
//! counted by the programs themselves at all times (`probe_runs`, a per-CPU
//! array by `enum sp_probe`), and the in-kernel time per run, measured by the
//! kernel in short statistics windows.
//!
//! The kernel times program runs only while its run-time statistics are on
//! (`BPF_ENABLE_STATS`, kernel/bpf/syscall.c, held by an fd; or the sysctl
//! `kernel.bpf_stats_enabled`): then every run of every BPF program on the
//! node pays two more clock reads (`__bpf_prog_run()` in
//! include/linux/filter.h). So the meter turns them on for a window
//! (`--bpf.stats-window`, 1 s) every `--bpf.stats-interval` (1 m), reads
//! `run_time_ns` and `run_cnt` of each program (`bpf_prog_info`) at both ends,
//! and charges every run to the time per run of the latest window. Runs in a
//! window are charged at that window's own measured time.
//!
//! Two corrections make that the programs' true cost:
//! - The statistics' own clock reads are inside every measured run. In each
//!   window the meter test-runs an empty program (`stats_floor`,
//!   bpf/slowpath.bpf.c) through the same accounting and subtracts its time
//!   per run ([`Calibration::stats_floor_ns`]).
//! - What the kernel spends reaching a program lies outside it and is never
//!   timed. For `sys_enter` as tp_btf or raw_tp it is large: every syscall of
//!   the node then takes the traced path (syscall_trace_enter() and its exit
//!   twin, kernel/entry/common.c). The agent times an untraced syscall right
//!   before and after attaching (`dispatch.rs`); the difference less the
//!   program's own time for it is charged to every run of the hook
//!   ([`ProbeCost::dispatch_seconds`]). Other hooks' dispatch (a tracepoint's
//!   call into the program, an fentry trampoline: ~10-20 ns a run) is not
//!   seen.
//!
//! Where the statistics are not allowed (no CAP_SYS_ADMIN and the sysctl
//! off, decided at start) or `--bpf.stats-interval` is 0, the time per run
//! is estimated instead ([`CostMethod::Estimated`]): from the programs' own
//! timing of one run in 1,024 (`self_timed.rs`), each timed run standing
//! for its hook's runs in the ratio of all runs to timed ones, read at every
//! scrape, so that a burst of dearer runs (the on-demand stack sampling of
//! a process with a finding triples `sys_enter`'s time for seconds) is
//! charged to the runs around it; the dispatch from the same timing around
//! the start's untraced syscalls.

use std::cell::Cell;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::dispatch::time_untraced_syscall;
use super::hooks::AttachType;
use super::loaded::Loaded;
use super::probe_slots::{object_slots, percpu_sum};
pub use super::run_stats::CostMethod;
use super::run_stats::{
    cost_method, enable_stats, kernel_totals, less_floor, per_run, stats_floor_ns,
};
use super::self_timed::{estimated_seconds, self_timed, MIN_TIMED_RUNS};

/// Runs a hook needs in the calibration's window for its figure to stand
/// for the runs around it (the agent's ~500,000 untraced syscalls give
/// `sys_enter` that many; a hook with a few cold runs would be charged
/// several times its cost).
const CALIBRATION_MIN_RUNS: u64 = 10_000;

/// When the agent's first statistics window opens after start (or one
/// interval, if shorter): not during the start-up of the agent and of
/// whatever is measured with it, which the window would slow down.
pub const FIRST_WINDOW_AFTER: Duration = Duration::from_secs(10);

/// One hook's cost since the agent loaded its programs.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeCost {
    /// The hook (`slowpath_probe_attached{probe}`).
    pub probe: &'static str,
    /// Runs of its programs, all CPUs (exact: counted by the programs).
    pub runs: u64,
    /// In-kernel seconds of those runs: each run charged at the time per run
    /// the kernel measured in the latest statistics window, less the
    /// statistics' own time per run ([`Calibration::stats_floor_ns`]).
    /// `None` until a window measured one (no window yet, or statistics not
    /// allowed).
    pub run_seconds: Option<f64>,
    /// Seconds the kernel spent reaching these runs, outside the programs:
    /// runs x [`Calibration::dispatch_ns`]. Only for `sys_enter` attached as
    /// a tracepoint (tp_btf, raw_tp), and only once the agent measured it.
    pub dispatch_seconds: Option<f64>,
    /// Whether `run_seconds` is the kernel's measure or the estimate.
    pub method: CostMethod,
}

/// What the meter measured to correct the kernel's time per run, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Calibration {
    /// What the statistics add to each run they time: an empty program's
    /// measured time per run in the latest window (BPF_PROG_TEST_RUN).
    pub stats_floor_ns: Option<f64>,
    /// What slowpath adds to a syscall it does not count (`getppid`): its
    /// time after attaching less right before ([`time_untraced_syscall`]),
    /// measured at start with the statistics off. Near 0 with fentry.
    pub untraced_added_ns: Option<f64>,
    /// What that syscall costs with slowpath attached: the floor of every
    /// syscall on this node, counted or not (same timing as
    /// `untraced_added_ns`'s "after").
    pub untraced_ns: Option<f64>,
    /// The dispatch charged to each run of `sys_enter`:
    /// `untraced_added_ns` less the program's own time for such a syscall
    /// (measured with the statistics on, less `stats_floor_ns`), at least 0.
    pub dispatch_ns: Option<f64>,
}

/// When the statistics windows run.
#[derive(Clone, Copy, Debug)]
pub struct CostOptions {
    /// Time from one window's start to the next; `None`: no windows (runs
    /// are still counted).
    pub interval: Option<Duration>,
    /// How long the kernel's statistics stay on in each window.
    pub window: Duration,
    /// When the first window opens after start (capped at `interval`).
    pub first_after: Duration,
}

/// Time charged to one hook so far.
#[derive(Clone, Copy, Debug, Default)]
struct Charge {
    ns: f64,
    /// Runs already charged (in `ns`).
    runs: u64,
    /// In-kernel ns per run of the latest window that measured one.
    ns_per_run: Option<f64>,
}

impl Charge {
    /// Charge the runs up to `runs` at the time per run in force.
    fn up_to(&mut self, runs: u64) {
        if let Some(rate) = self.ns_per_run {
            self.ns += runs.saturating_sub(self.runs) as f64 * rate;
            self.runs = self.runs.max(runs);
        }
    }

    /// Seconds with the runs up to `runs` charged, without changing state.
    fn seconds_at(&self, runs: u64) -> Option<f64> {
        let rate = self.ns_per_run?;
        Some((self.ns + runs.saturating_sub(self.runs) as f64 * rate) / 1e9)
    }
}

/// A statistics window in progress.
struct Window {
    ends: Instant,
    /// Keeps the kernel's statistics on; `None` when the kernel refused
    /// (the sysctl may still have them on).
    stats: Option<OwnedFd>,
    /// Each hook's (run_time_ns, run_cnt) and runs at the start.
    kernel_at_start: Vec<(u64, u64)>,
    runs_at_start: Vec<u64>,
}

/// The statistics windows and the time charged to each hook.
pub struct CostMeter {
    opts: CostOptions,
    /// `probe_runs` slot of each hook of the table (`None`: the object has
    /// no slot for it, so its runs are not known).
    slots: Vec<Option<u32>>,
    charges: Vec<Charge>,
    window: Option<Window>,
    next_window: Option<Instant>,
    refusal_logged: bool,
    measured_logged: bool,
    /// A failed test run of the empty program was logged.
    floor_failure_logged: bool,
    calibration: Calibration,
    /// Table index of `sys_enter` when attached as a tracepoint: the hook
    /// charged with the dispatch.
    dispatched: Option<usize>,
    method: CostMethod,
    /// Each hook's highest estimate so far, in s (estimated only): a
    /// counter never goes back when a cheap run lowers the mean.
    estimated: Vec<Cell<f64>>,
}

impl CostMeter {
    /// A meter for the programs of `loaded`; the first window opens
    /// `opts.first_after` later.
    pub fn new(loaded: &Loaded<'_>, opts: CostOptions) -> Self {
        let slots = match object_slots(loaded) {
            Ok(slots) => slots,
            Err(err) => {
                warn!(error = %format!("{err:#}"), "runs of the BPF programs not counted");
                vec![None; loaded.table.len()]
            }
        };
        let method = cost_method(opts.interval.is_some());
        // no windows where the statistics are not allowed
        let every = opts.interval.filter(|_| method == CostMethod::Measured);
        Self {
            charges: vec![Charge::default(); slots.len()],
            estimated: vec![Cell::new(0.0); slots.len()],
            slots,
            opts,
            method,
            window: None,
            next_window: every.map(|every| Instant::now() + every.min(opts.first_after)),
            refusal_logged: false,
            measured_logged: false,
            floor_failure_logged: false,
            calibration: Calibration::default(),
            dispatched: dispatched_hook(loaded),
        }
    }

    /// Measure the dispatch of `sys_enter` against the untraced syscall's
    /// time taken right before attaching: time it again now, and, where the
    /// statistics may be on, the program's own time for it. Call right after
    /// loading, before any window (it takes ~200 ms).
    pub fn calibrate(&mut self, loaded: &Loaded<'_>) {
        let Some(before) = loaded.untraced_before else {
            return;
        };
        let after = time_untraced_syscall();
        let added = (after.ns_per_call - before.ns_per_call).max(0.0);
        self.calibration.untraced_added_ns = Some(added);
        self.calibration.untraced_ns = Some(after.ns_per_call);
        let bodies = match self.method {
            CostMethod::Measured => self.calibration_window(loaded),
            CostMethod::Estimated => self.self_timed_window(loaded),
        };
        let body = self.dispatched.and_then(|idx| bodies[idx]);
        self.calibration.dispatch_ns = body.map(|b| (added - b).max(0.0));
        info!(
            before_ns = format!("{:.1}", before.ns_per_call),
            after_ns = format!("{:.1}", after.ns_per_call),
            program_ns = ?body.map(|b| format!("{b:.1}")),
            dispatch_ns = ?self.calibration.dispatch_ns.map(|d| format!("{d:.1}")),
            "untraced syscall timed before and after attaching: the dispatch charged to each \
             sys_enter run (none with fentry)"
        );
        if self.calibration.dispatch_ns == Some(0.0) {
            // a tracepoint's dispatch always costs something: the timing
            // before attaching ran slower than the one after
            warn!(
                "an untraced syscall timed no slower with sys_enter's tracepoint attached than \
                 before: other work disturbed the timing, so slowpath_probe_dispatch_seconds_total \
                 stays 0 until the agent restarts on a quieter node"
            );
        }
    }

    /// A statistics window of its own around more untraced syscalls: each
    /// hook's time per run less the statistics' own; `None` for a hook that
    /// ran fewer than [`CALIBRATION_MIN_RUNS`] times in it (or with the
    /// statistics off). Most of `sys_enter`'s runs so far are the agent's
    /// own untraced syscalls, timed here and just before: they are charged
    /// at this window's figure, so that the first regular window, which
    /// charges the runs before it at its own figure, leaves them out. Its
    /// figure for `sys_enter` is the program's time for an untraced syscall
    /// (other CPUs' syscalls mix in).
    fn calibration_window(&mut self, loaded: &Loaded<'_>) -> Vec<Option<f64>> {
        // refused without CAP_SYS_ADMIN (the first window says so), but
        // kernel.bpf_stats_enabled may have them on: then run_cnt grows
        let stats = enable_stats().ok();
        let t0 = kernel_totals(loaded);
        time_untraced_syscall();
        let t1 = kernel_totals(loaded);
        let floor = self.stats_floor_ns(loaded);
        drop(stats);
        self.calibration.stats_floor_ns = floor;
        let runs = self.runs(loaded);
        let mut bodies = vec![None; self.charges.len()];
        for (idx, charge) in self.charges.iter_mut().enumerate() {
            if t1[idx].1.saturating_sub(t0[idx].1) < CALIBRATION_MIN_RUNS {
                continue; // a few cold runs: no figure for the runs around them
            }
            let Some(measured) = per_run(t0[idx], t1[idx]) else {
                continue;
            };
            let body = less_floor(measured, floor);
            bodies[idx] = Some(body);
            charge.ns = runs[idx] as f64 * body;
            charge.runs = runs[idx];
        }
        bodies
    }

    /// [`Self::calibration_window`] where the statistics are not allowed:
    /// each hook's time per run from its self-timed runs around more
    /// untraced syscalls (~500 of `sys_enter`'s on this CPU).
    fn self_timed_window(&self, loaded: &Loaded<'_>) -> Vec<Option<f64>> {
        let t0 = self_timed(loaded, &self.slots);
        time_untraced_syscall();
        let t1 = self_timed(loaded, &self.slots);
        t1.iter()
            .zip(&t0)
            .map(|(after, before)| after.per_run_since(before, MIN_TIMED_RUNS))
            .collect()
    }

    /// Each hook's estimated seconds ([`estimated_seconds`]).
    fn estimated_seconds(&self, loaded: &Loaded<'_>, runs: &[u64]) -> Vec<Option<f64>> {
        estimated_seconds(&self_timed(loaded, &self.slots), runs, &self.estimated)
    }

    /// What corrects the kernel's figures (see [`Calibration`]).
    pub fn calibration(&self) -> Calibration {
        self.calibration
    }

    /// When the meter next needs a tick (a window to open or to close).
    pub fn next_due(&self) -> Option<Instant> {
        match &self.window {
            Some(w) => Some(w.ends),
            None => self.next_window,
        }
    }

    /// Open or close a window when one is due.
    pub fn tick(&mut self, loaded: &Loaded<'_>) {
        let now = Instant::now();
        match &self.window {
            Some(w) if now >= w.ends => self.close(loaded),
            None if self.next_window.is_some_and(|t| now >= t) => self.open(loaded, now),
            _ => {}
        }
    }

    /// Each loaded hook's runs and charged seconds, in table order.
    pub fn costs(&self, loaded: &Loaded<'_>) -> Vec<ProbeCost> {
        let runs = self.runs(loaded);
        let estimated = match self.method {
            CostMethod::Estimated => self.estimated_seconds(loaded, &runs),
            CostMethod::Measured => Vec::new(),
        };
        let frozen = self.window.as_ref().map(|w| &w.runs_at_start);
        loaded
            .probes
            .iter()
            .enumerate()
            .filter(|(idx, p)| p.attached() && self.slots[*idx].is_some())
            .map(|(idx, p)| ProbeCost {
                probe: p.probe,
                runs: runs[idx],
                // while a window is open its runs are not charged yet: the
                // seconds stay where they were at its start, so that they
                // never go back when the window's own time per run is lower
                run_seconds: match self.method {
                    CostMethod::Measured => {
                        self.charges[idx].seconds_at(frozen.map_or(runs[idx], |f| f[idx]))
                    }
                    CostMethod::Estimated => estimated[idx],
                },
                dispatch_seconds: (self.dispatched == Some(idx))
                    .then_some(self.calibration.dispatch_ns)
                    .flatten()
                    .map(|ns| runs[idx] as f64 * ns / 1e9),
                method: self.method,
            })
            .collect()
    }

    fn open(&mut self, loaded: &Loaded<'_>, now: Instant) {
        let runs = self.runs(loaded);
        for (charge, &n) in self.charges.iter_mut().zip(&runs) {
            charge.up_to(n);
        }
        let stats = match enable_stats() {
            Ok(fd) => Some(fd),
            Err(err) => {
                if !self.refusal_logged {
                    warn!(error = %format!("{err:#}"),
                          "in-kernel time of slowpath's programs not measured (slowpath_probe_run_seconds_total left out \
                           unless kernel.bpf_stats_enabled is on): grant the agent CAP_SYS_ADMIN, or read \
                           slowpath_probe_runs_total with the benchmark's time per run");
                    self.refusal_logged = true;
                }
                None
            }
        };
        self.window = Some(Window {
            ends: now + self.opts.window,
            stats,
            kernel_at_start: kernel_totals(loaded),
            runs_at_start: runs,
        });
    }

    fn close(&mut self, loaded: &Loaded<'_>) {
        let Some(w) = self.window.take() else {
            return;
        };
        let runs = self.runs(loaded);
        let kernel = kernel_totals(loaded);
        let floor = self.stats_floor_ns(loaded);
        drop(w.stats); // statistics off before anything else is read
        if floor.is_some() {
            self.calibration.stats_floor_ns = floor;
        }
        let floor = self.calibration.stats_floor_ns;
        for (idx, charge) in self.charges.iter_mut().enumerate() {
            let Some(measured) = per_run(w.kernel_at_start[idx], kernel[idx]) else {
                charge.up_to(runs[idx]); // nothing measured: the old time per run
                continue;
            };
            debug!(
                probe = loaded.table.name(idx),
                measured_ns = measured,
                floor_ns = ?floor,
                "statistics window"
            );
            // the first window's figure also takes the runs before it (all
            // since attaching, less those the calibration charged)
            charge.ns_per_run = Some(less_floor(measured, floor));
            charge.up_to(runs[idx]);
        }
        if !self.measured_logged && self.charges.iter().any(|c| c.ns_per_run.is_some()) {
            info!(
                window = ?self.opts.window,
                "in-kernel time of slowpath's programs measured in a statistics window"
            );
            self.measured_logged = true;
        }
        self.next_window = self.opts.interval.map(|every| Instant::now() + every);
    }

    /// The statistics' own time per run ([`stats_floor_ns`]); a failed test
    /// run is logged once, and leaves the floor unsubtracted.
    fn stats_floor_ns(&mut self, loaded: &Loaded<'_>) -> Option<f64> {
        stats_floor_ns(loaded).unwrap_or_else(|err| {
            if !self.floor_failure_logged {
                warn!(error = %format!("{err:#}"),
                      "the statistics' own time per run is not subtracted from the programs' (BPF_PROG_TEST_RUN failed)");
                self.floor_failure_logged = true;
            }
            None
        })
    }

    /// Each hook's runs on all CPUs, in table order (0 without a slot).
    fn runs(&self, loaded: &Loaded<'_>) -> Vec<u64> {
        let map = &loaded.skel.maps.probe_runs;
        self.slots
            .iter()
            .map(|slot| slot.map_or(0, |s| percpu_sum(map, s)))
            .collect()
    }
}

/// The index of `sys_enter` when it is attached as a tracepoint (tp_btf,
/// raw_tp), whose dispatch every syscall of the node pays.
fn dispatched_hook(loaded: &Loaded<'_>) -> Option<usize> {
    loaded.probes.iter().position(|p| {
        p.probe == super::SYS_ENTER && p.attached() && p.attach_type != AttachType::Fentry
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_takes_each_run_at_the_time_per_run_in_force() {
        let mut c = Charge::default();
        c.up_to(100);
        assert_eq!(c.seconds_at(100), None, "no time per run measured yet");
        c.ns_per_run = Some(50.0); // the first window: every run so far
        c.up_to(100);
        assert_eq!(c.seconds_at(100), Some(5e-6));
        c.ns_per_run = Some(10.0);
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-15;
        assert!(near(c.seconds_at(300), 7e-6));
        c.up_to(300);
        let charged = c.seconds_at(300);
        c.up_to(200); // runs never go back: nothing changes
        assert_eq!(c.seconds_at(300), charged);
        assert!(near(charged, 7e-6));
    }

    #[test]
    fn runs_the_calibration_charged_keep_its_figure() {
        // 500,000 untraced syscalls at 2 ns, then the first window's 80 ns
        // for the 1,000 runs after them only
        let mut c = Charge {
            ns: 500_000.0 * 2.0,
            runs: 500_000,
            ns_per_run: None,
        };
        assert_eq!(
            c.seconds_at(501_000),
            None,
            "no figure before the first window"
        );
        c.ns_per_run = Some(80.0);
        c.up_to(501_000);
        assert!((c.seconds_at(501_000).unwrap() - 1.08e-3).abs() < 1e-12);
    }
}
