//! One pass of the BPF worker, repeated until it is stopped: the signals'
//! upkeep of the kernel's data and their node checks when due, draining and
//! folding, a sweep of vanished processes now and then, and the snapshot
//! requests of the scrapes and the doctor.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use libbpf_rs::{MapCore, MapFlags};
use tracing::{debug, error, info, warn};

use super::tables::{drop_deleted_pods, export, log_new_losses, read_lost};
use super::{Request, Rings, WorkerOptions, DRAIN_INTERVAL, SWEEP_INTERVAL};
use crate::bpf::{self, types};
use crate::node::Fact;
use crate::procs::Aggregator;
use crate::signals::{KernelView, NodeCheck};
use crate::snapshot::{Snapshot, LOST_REASON_COUNT};
use crate::wakeup::Doorbell;

/// A signal's periodic node check and when it is next due.
struct DueCheck {
    check: &'static NodeCheck,
    every: Duration,
    next: Instant,
}

/// A cost meter for `loaded`, its dispatch measured.
fn calibrated_meter(loaded: &bpf::Loaded<'_>, opts: bpf::CostOptions) -> bpf::CostMeter {
    let mut meter = bpf::CostMeter::new(loaded, opts);
    meter.calibrate(loaded);
    meter
}

/// The worker's state between passes.
pub(super) struct Loop {
    agg: Aggregator,
    /// Each enabled signal's node check, with its last result in `results`.
    checks: Vec<DueCheck>,
    /// Each enabled signal's upkeep of the object's writable data.
    upkeeps: Vec<fn(&mut types::bss)>,
    results: Vec<Option<Fact>>,
    next_sweep: Instant,
    lost_seen: [u64; LOST_REASON_COUNT],
    flagged_seen: u64,
    /// Whether the syscall hook counts: the checks may read the agent's
    /// own counters only then.
    sys_enter_attached: bool,
    /// The programs' own runs and in-kernel time.
    cost: bpf::CostMeter,
}

impl Loop {
    /// The state for `loaded`, its cost meter calibrated.
    pub(super) fn new(opts: &WorkerOptions, loaded: &bpf::Loaded<'_>) -> Self {
        let now = Instant::now();
        let checks: Vec<DueCheck> = (opts.signals.enabled())
            .filter_map(|s| s.node.check.as_ref())
            .map(|check| DueCheck {
                check,
                every: opts
                    .check_every
                    .unwrap_or_else(|| (check.every)(&opts.signals)),
                next: now,
            })
            .collect();
        Self {
            agg: Aggregator::new(opts.pid_label, opts.limits.clone()),
            results: vec![None; checks.len()],
            checks,
            upkeeps: (opts.signals.enabled())
                .filter_map(|s| s.kernel.upkeep)
                .collect(),
            next_sweep: now + SWEEP_INTERVAL,
            lost_seen: [0; LOST_REASON_COUNT],
            flagged_seen: 0,
            sys_enter_attached: loaded
                .probes
                .iter()
                .any(|p| p.probe == bpf::SYS_ENTER && p.attached()),
            cost: calibrated_meter(loaded, opts.cost),
        }
    }

    /// Until stopped: on every pass keep the kernel side current, run the
    /// node checks that are due, drain and fold, answer requests, then
    /// sleep until a ring fills, a request comes or the next check is due.
    pub(super) fn serve(
        &mut self,
        mut loaded: bpf::Loaded<'_>,
        rings: Rings,
        opts: &WorkerOptions,
        rx: &Receiver<Request>,
        doorbell: &Doorbell,
    ) {
        loop {
            upkeep(&mut loaded, &self.upkeeps);
            self.cost.tick(&loaded);
            self.run_due_checks(&loaded);
            self.sweep_if_due(&loaded);
            self.drain(&loaded, &rings);
            while let Ok(request) = rx.try_recv() {
                match request {
                    Request::Snapshot(reply) => {
                        let _ = reply.send(self.snapshot(&loaded, &rings, opts));
                    }
                    Request::StackTargetCount(n, reply) => {
                        bpf::set_stack_target_count(&mut loaded, n);
                        let _ = reply.send(());
                    }
                    Request::Stop(ack) => {
                        debug!("detaching BPF programs");
                        drop(rings);
                        drop(loaded);
                        let _ = ack.send(());
                        return;
                    }
                }
            }
            doorbell.clear();
            if matches!(rx.try_recv(), Err(TryRecvError::Disconnected)) {
                return;
            }
            let next_check = self
                .checks
                .iter()
                .map(|c| c.next)
                .chain(self.cost.next_due())
                .min();
            let until_check = next_check.map_or(DRAIN_INTERVAL, |next| {
                next.saturating_duration_since(Instant::now())
            });
            rings.waiter.wait(DRAIN_INTERVAL.min(until_check));
        }
    }

    /// Run every node check whose time has come.
    fn run_due_checks(&mut self, loaded: &bpf::Loaded<'_>) {
        let now = Instant::now();
        let view = View {
            loaded,
            sys_enter_attached: self.sys_enter_attached,
        };
        for (due, result) in self.checks.iter_mut().zip(&mut self.results) {
            if now >= due.next {
                *result = Some((due.check.run)(&view));
                due.next = now + due.every;
            }
        }
    }

    /// Fold the entries of processes that left no exit record, now and then.
    fn sweep_if_due(&mut self, loaded: &bpf::Loaded<'_>) {
        let now = Instant::now();
        if now < self.next_sweep {
            return;
        }
        bpf::fold_slots(loaded);
        match self.agg.sweep_dead(&loaded.skel.maps.procs) {
            Ok(0) => {}
            Ok(n) => info!(
                entries = n,
                "folded entries of processes that left no exit record"
            ),
            Err(err) => warn!(error = %format!("{err:#}"), "sweeping the process table"),
        }
        self.next_sweep = now + SWEEP_INTERVAL;
    }

    /// Drain on every pass, whatever woke us: records never wait for a
    /// scrape. Fold exit records, flagged entries and new cgroups; log new
    /// losses.
    fn drain(&mut self, loaded: &bpf::Loaded<'_>, rings: &Rings) {
        if let Err(err) = rings.ring.consume() {
            warn!(error = %err, "draining the ring buffers");
        }
        self.agg.learn_cgroups(&rings.new_cgroups);
        self.agg.fold_records(&rings.pending);
        let flagged = loaded
            .skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |b| b.exited_flagged);
        if flagged != self.flagged_seen {
            // Exit records the ring buffer had no room for: their entries
            // wait in the table, flagged; fold them now, not at the next scrape.
            self.flagged_seen = flagged;
            if let Err(err) = self.agg.fold_flagged(&loaded.skel.maps.procs) {
                warn!(error = %format!("{err:#}"), "folding flagged entries");
            }
        }
        log_new_losses(&read_lost(&loaded.skel.maps.lost), &mut self.lost_seen);
    }

    /// Read the kernel tables now and build a snapshot.
    fn snapshot(
        &mut self,
        loaded: &bpf::Loaded<'_>,
        rings: &Rings,
        opts: &WorkerOptions,
    ) -> Result<Arc<Snapshot>> {
        if let Some(pods) = &opts.pods {
            drop_deleted_pods(&mut self.agg, pods);
        }
        bpf::fold_slots(loaded);
        let refreshed = self.agg.refresh(
            &loaded.skel.maps.procs,
            || rings.ring.consume().map_err(Into::into),
            (&rings.pending, &rings.new_cgroups),
        );
        let result = refreshed.map(|r| {
            Arc::new(Snapshot {
                series: export(r.series, opts.pods.as_ref()),
                tracked_processes: r.tracked_processes,
                process_capacity: loaded.process_capacity,
                live_tgids: r.live_tgids,
                live_images: r.live_images,
                folded: r.folded,
                lost: read_lost(&loaded.skel.maps.lost),
                recursion_misses: bpf::recursion_misses(loaded),
                probe_costs: self.cost.costs(loaded),
                cost_calibration: self.cost.calibration(),
                combining_slots: Some(bpf::slots_on(loaded)),
                probes: loaded.probes.clone(),
                checks: self.results.iter().flatten().cloned().collect(),
            })
        });
        if let Err(err) = &result {
            error!(error = %format!("{err:#}"), "reading the kernel tables");
        }
        result
    }
}

/// The node checks' view of the loaded object.
struct View<'a, 'obj> {
    loaded: &'a bpf::Loaded<'obj>,
    sys_enter_attached: bool,
}

impl KernelView for View<'_, '_> {
    fn own_counters(&self) -> Option<types::sp_counters> {
        self.sys_enter_attached.then(|| {
            bpf::fold_slots(self.loaded);
            own_counters(&self.loaded.skel.maps.procs, std::process::id())
        })
    }
}

/// The enabled signals' upkeep of the object's writable data
/// (`KernelNeeds::upkeep`).
fn upkeep(loaded: &mut bpf::Loaded<'_>, upkeeps: &[fn(&mut types::bss)]) {
    if let Some(bss) = loaded.skel.maps.bss_data.as_deref_mut() {
        for upkeep in upkeeps {
            upkeep(bss);
        }
    }
}

/// The agent's own counters in the kernel's process table (zero before its
/// first counted event).
fn own_counters(procs: &dyn MapCore, tgid: u32) -> types::sp_counters {
    let Ok(Some(bytes)) = procs.lookup(&tgid.to_ne_bytes(), MapFlags::ANY) else {
        return types::sp_counters::default(); // no entry yet: nothing counted yet
    };
    let mut p = types::sp_proc::default();
    match plain::copy_from_bytes(&mut p, &bytes) {
        Ok(()) => p.c,
        Err(_) => types::sp_counters::default(),
    }
}
