//! The BPF worker thread: it owns the loaded skeleton (libbpf objects stay on
//! one thread), answers snapshot requests from the scrape path, drains the
//! ring buffers as they fill (`wakeup`) and on a short timer, folds entries
//! the kernel flagged as exited, and runs the signals' node checks and
//! upkeep (`NodeNeeds::check`, `KernelNeeds::upkeep`).

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::{MapCore, MapFlags, RingBuffer, RingBufferBuilder};
use tracing::{debug, error, info, warn};

use crate::bpf::types;
use crate::bpf::{self, LoadOptions, ProbeStatus};
use crate::callsites::tables::StackTables;
use crate::labels::kubernetes::SharedPodIndex;
use crate::node::Fact;
use crate::procs::{Aggregator, PendingCgroups, PendingRecords, SeriesLimits};
use crate::signals::{KernelView, NodeCheck, SignalArgs, SIGNALS};
use crate::snapshot::{Series, SeriesKey, Snapshot, LOST_REASON_COUNT, LOST_REASON_NAMES};
use crate::wakeup::{Doorbell, Waiter};

/// Longest sleep of the worker: the ring buffers are drained at least this
/// often (the kernel wakes it sooner once a ring is a quarter full).
const DRAIN_INTERVAL: Duration = Duration::from_millis(500);
/// How often entries of vanished processes are looked for (only needed when
/// the exit probe is not attached).
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Worker settings.
#[derive(Clone)]
pub struct WorkerOptions {
    pub load: LoadOptions,
    pub pid_label: bool,
    /// Bounds of the per-process series.
    pub limits: SeriesLimits,
    /// The signals' flags (the periods of their node checks).
    pub signals: SignalArgs,
    /// Run every node check this often instead of the signal's period
    /// (the doctor: once, at start).
    pub check_every: Option<Duration>,
    /// Pod labels, when Kubernetes is enabled.
    pub pods: Option<PodLabelling>,
}

/// Pod metadata for the series, and how long a deleted pod's series stay.
#[derive(Clone)]
pub struct PodLabelling {
    pub index: SharedPodIndex,
    pub deleted_pod_grace: Duration,
}

enum Request {
    Snapshot(SyncSender<Result<Arc<Snapshot>>>),
    Stop(SyncSender<()>),
}

/// Handle to the worker thread.
pub struct Worker {
    tx: Sender<Request>,
    doorbell: Arc<Doorbell>,
    thread: Option<JoinHandle<()>>,
    probes: Vec<ProbeStatus>,
    stack_tables: Option<StackTables>,
}

/// What the thread hands back once loaded.
struct Ready {
    probes: Vec<ProbeStatus>,
    /// With `capture_stacks` only.
    stack_tables: Option<StackTables>,
}

impl Worker {
    /// Start the thread and wait until the programs are loaded and attached.
    /// `kernel` is what the signals ask of the kernel side; `btf`, the
    /// kernel's BTF, parsed once, is dropped once loaded (megabytes, needed
    /// only to plan the load).
    pub fn start(
        opts: WorkerOptions,
        kernel: bpf::KernelSetup,
        btf: bpf::KernelBtf,
    ) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let doorbell = Arc::new(Doorbell::new().context("creating the worker's eventfd")?);
        let bell = doorbell.clone();
        let thread = std::thread::Builder::new()
            .name("slowpath-bpf".into())
            .spawn(move || run(opts, (kernel, btf), rx, &bell, ready_tx))
            .context("starting the BPF worker thread")?;
        match ready_rx.recv() {
            Ok(Ok(ready)) => Ok(Self {
                tx,
                doorbell,
                thread: Some(thread),
                probes: ready.probes,
                stack_tables: ready.stack_tables,
            }),
            Ok(Err(err)) => {
                let _ = thread.join();
                Err(err)
            }
            Err(_) => {
                let _ = thread.join();
                Err(anyhow!("the BPF worker thread died while loading"))
            }
        }
    }

    /// Attach results, as at start.
    pub fn probes(&self) -> &[ProbeStatus] {
        &self.probes
    }

    /// Send a request built around a reply channel and wait for the reply.
    fn ask<T>(&self, request: impl FnOnce(SyncSender<T>) -> Request) -> Result<T> {
        let gone = || anyhow!("the BPF worker thread is gone");
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        self.tx.send(request(reply_tx)).map_err(|_| gone())?;
        self.doorbell.ring();
        reply_rx.recv().map_err(|_| gone())
    }

    /// The sampled-stack tables, once (`None` unless loaded with
    /// `capture_stacks`, or when already taken).
    pub fn take_stack_tables(&mut self) -> Option<StackTables> {
        self.stack_tables.take()
    }

    /// Read the kernel tables now (blocking; call off the async executor).
    pub fn snapshot(&self) -> Result<Arc<Snapshot>> {
        self.ask(Request::Snapshot)?
    }
}

impl Drop for Worker {
    /// Detach every program and join the thread.
    fn drop(&mut self) {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        if self.tx.send(Request::Stop(ack_tx)).is_ok() {
            self.doorbell.ring();
            let _ = ack_rx.recv();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    opts: WorkerOptions,
    kernel: (bpf::KernelSetup, bpf::KernelBtf),
    rx: Receiver<Request>,
    doorbell: &Doorbell,
    ready: SyncSender<Result<Ready>>,
) {
    let mut storage = bpf::ObjectStorage::new();
    let (loaded, rings) = match start(&mut storage, &opts, kernel, doorbell) {
        Ok((loaded, rings, ready_msg)) => {
            let _ = ready.send(Ok(ready_msg));
            (loaded, rings)
        }
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let mut state = Loop::new(&opts, &loaded);
    state.serve(loaded, rings, &opts, &rx, doorbell);
}

/// The ring buffers and the queues their callbacks fill.
struct Rings {
    ring: RingBuffer<'static>,
    waiter: Waiter,
    pending: PendingRecords,
    new_cgroups: PendingCgroups,
}

/// Load and attach, open the rings and, with `capture_stacks`, the stack
/// tables: everything the caller of `Worker::start` waits for.
fn start<'obj>(
    storage: &'obj mut bpf::ObjectStorage,
    opts: &WorkerOptions,
    (kernel, btf): (bpf::KernelSetup, bpf::KernelBtf),
    doorbell: &Doorbell,
) -> Result<(bpf::Loaded<'obj>, Rings, Ready)> {
    let loaded = bpf::load(storage, &opts.load, &kernel, &btf);
    drop(btf); // megabytes, needed only to plan the load
    let loaded = loaded?;
    let pending: PendingRecords = Rc::new(RefCell::new(Vec::new()));
    let new_cgroups: PendingCgroups = Rc::new(RefCell::new(Vec::new()));
    let (ring, waiter) = open_rings(&loaded, &pending, &new_cgroups, doorbell)?;
    let stack_tables = match opts.load.capture_stacks {
        true => Some(StackTables::open(&loaded)?),
        false => None,
    };
    let ready = Ready {
        probes: loaded.probes.clone(),
        stack_tables,
    };
    let rings = Rings {
        ring,
        waiter,
        pending,
        new_cgroups,
    };
    Ok((loaded, rings, ready))
}

/// A signal's periodic node check and when it is next due.
struct DueCheck {
    check: &'static NodeCheck,
    every: Duration,
    next: Instant,
}

/// The worker's state between passes.
struct Loop {
    agg: Aggregator,
    /// Each signal's node check, with its last result in `results`.
    checks: Vec<DueCheck>,
    results: Vec<Option<Fact>>,
    next_sweep: Instant,
    lost_seen: [u64; LOST_REASON_COUNT],
    flagged_seen: u64,
    /// Whether the syscall hook counts: the checks may read the agent's
    /// own counters only then.
    sys_enter_attached: bool,
}

impl Loop {
    fn new(opts: &WorkerOptions, loaded: &bpf::Loaded<'_>) -> Self {
        let now = Instant::now();
        let checks: Vec<DueCheck> = SIGNALS
            .iter()
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
            next_sweep: now + SWEEP_INTERVAL,
            lost_seen: [0; LOST_REASON_COUNT],
            flagged_seen: 0,
            sys_enter_attached: loaded
                .probes
                .iter()
                .any(|p| p.probe == "sys_enter" && p.attached()),
        }
    }

    /// Until stopped: on every pass keep the kernel side current, run the
    /// node checks that are due, drain and fold, answer requests, then
    /// sleep until a ring fills, a request comes or the next check is due.
    fn serve(
        &mut self,
        mut loaded: bpf::Loaded<'_>,
        rings: Rings,
        opts: &WorkerOptions,
        rx: &Receiver<Request>,
        doorbell: &Doorbell,
    ) {
        loop {
            upkeep(&mut loaded);
            self.run_due_checks(&loaded);
            self.sweep_if_due(&loaded);
            self.drain(&loaded, &rings);
            while let Ok(request) = rx.try_recv() {
                match request {
                    Request::Snapshot(reply) => {
                        let _ = reply.send(self.snapshot(&loaded, &rings, opts));
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
            let next_check = self.checks.iter().map(|c| c.next).min();
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
        let refreshed = self.agg.refresh(
            &loaded.skel.maps.procs,
            || rings.ring.consume().map_err(Into::into),
            &rings.pending,
        );
        let result = refreshed.map(|r| {
            Arc::new(Snapshot {
                series: export(r.series, opts.pods.as_ref()),
                tracked_processes: r.tracked_processes,
                folded: r.folded,
                lost: read_lost(&loaded.skel.maps.lost),
                recursion_misses: bpf::recursion_misses(loaded),
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
        self.sys_enter_attached
            .then(|| own_counters(&self.loaded.skel.maps.procs, std::process::id()))
    }
}

/// Each signal's upkeep of the object's writable data (`KernelNeeds::upkeep`).
fn upkeep(loaded: &mut bpf::Loaded<'_>) {
    if let Some(bss) = loaded.skel.maps.bss_data.as_deref_mut() {
        for upkeep in SIGNALS.iter().filter_map(|s| s.kernel.upkeep) {
            upkeep(bss);
        }
    }
}

/// The ring buffer manager over `proc_events` and `cgroup_events`, and the
/// waiter that sleeps on it and on `doorbell`.
fn open_rings(
    loaded: &bpf::Loaded<'_>,
    pending: &PendingRecords,
    new_cgroups: &PendingCgroups,
    doorbell: &Doorbell,
) -> Result<(RingBuffer<'static>, Waiter)> {
    let mut builder = RingBufferBuilder::new();
    let records = pending.clone();
    builder.add(&loaded.skel.maps.proc_events, move |data: &[u8]| {
        let mut event = types::sp_proc_event {
            tgid: 0,
            kind: 0,
            proc: Default::default(),
        };
        if plain::copy_from_bytes(&mut event, data).is_ok() {
            records.borrow_mut().push(event);
        }
        0
    })?;
    let cgroups = new_cgroups.clone();
    builder.add(&loaded.skel.maps.cgroup_events, move |data: &[u8]| {
        if let Some(event) = cgroup_event(data) {
            cgroups.borrow_mut().push(event);
        }
        0
    })?;
    let ring = builder.build().context("opening the ring buffers")?;
    let waiter = Waiter::new(&[ring.epoll_fd(), doorbell.as_raw_fd()])
        .context("creating the worker's epoll set")?;
    Ok((ring, waiter))
}

/// (cgroup id, path) of one `struct sp_cgroup_event` record.
fn cgroup_event(data: &[u8]) -> Option<(u64, String)> {
    let id = u64::from_ne_bytes(data.get(..8)?.try_into().ok()?);
    let path = data.get(8..)?;
    let len = path.iter().position(|&b| b == 0)?;
    let path = String::from_utf8_lossy(&path[..len]).into_owned();
    (!path.is_empty()).then_some((id, path))
}

/// The series of one refresh, with their pod's labels when Kubernetes is on.
fn export(
    series: Vec<(SeriesKey, types::sp_counters)>,
    pods: Option<&PodLabelling>,
) -> Vec<Series> {
    let index = pods.map(|p| p.index.read().unwrap_or_else(|e| e.into_inner()));
    series
        .into_iter()
        .map(|(key, counters)| Series {
            pod: index.as_ref().map(|i| i.labels(&key.cgroup.identity)),
            key,
            counters,
        })
        .collect()
}

/// Drop the series of pods deleted more than the grace period ago, then
/// forget those pods.
fn drop_deleted_pods(agg: &mut Aggregator, pods: &PodLabelling) {
    let now = Instant::now();
    let grace = pods.deleted_pod_grace;
    {
        let index = pods.index.read().unwrap_or_else(|e| e.into_inner());
        agg.drop_retired(|key| {
            key.cgroup
                .identity
                .pod_uid
                .as_ref()
                .is_some_and(|uid| index.expired(uid, grace, now))
        });
    }
    pods.index
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .prune(grace, now);
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

/// Log lost-event counters that grew since the last call.
fn log_new_losses(now: &[u64; LOST_REASON_COUNT], seen: &mut [u64; LOST_REASON_COUNT]) {
    for ((reason, &n), last) in LOST_REASON_NAMES.iter().zip(now).zip(seen.iter_mut()) {
        if n > *last {
            warn!(
                reason,
                new = n - *last,
                total = n,
                "events lost (slowpath_lost_events_total): raise the table capacity flags if this repeats"
            );
            *last = n;
        }
    }
}

/// Sum the per-CPU lost-event counters.
fn read_lost(map: &dyn MapCore) -> [u64; LOST_REASON_COUNT] {
    let mut out = [0u64; LOST_REASON_COUNT];
    for (reason, slot) in out.iter_mut().enumerate() {
        let key = (reason as u32).to_ne_bytes();
        if let Ok(Some(per_cpu)) = map.lookup_percpu(&key, MapFlags::ANY) {
            *slot = per_cpu
                .iter()
                .filter_map(|v| v.as_slice().try_into().ok().map(u64::from_ne_bytes))
                .sum();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_record_gives_its_id_and_path() {
        let mut record = 42u64.to_ne_bytes().to_vec();
        record.extend_from_slice(b"/system.slice/app.service\0garbage");
        assert_eq!(
            cgroup_event(&record),
            Some((42, "/system.slice/app.service".to_string()))
        );
        let mut empty = 7u64.to_ne_bytes().to_vec();
        empty.push(0);
        assert_eq!(cgroup_event(&empty), None, "an empty path names nothing");
        let mut unterminated = 7u64.to_ne_bytes().to_vec();
        unterminated.extend_from_slice(b"/a");
        assert_eq!(cgroup_event(&unterminated), None);
        assert_eq!(cgroup_event(&[1, 2, 3]), None, "shorter than the id");
    }

    #[test]
    fn only_grown_losses_move_what_was_seen() {
        let mut seen = [0u64; LOST_REASON_COUNT];
        let mut now = [0u64; LOST_REASON_COUNT];
        now[2] = 5;
        log_new_losses(&now, &mut seen);
        assert_eq!(seen, now);
        // a per-CPU sum read lower (a CPU went offline) is not a new loss
        let lower = [0u64; LOST_REASON_COUNT];
        log_new_losses(&lower, &mut seen);
        assert_eq!(seen[2], 5);
    }

    #[test]
    fn series_carry_pod_labels_only_with_kubernetes() {
        let key = SeriesKey {
            comm: "app".into(),
            cgroup: crate::snapshot::Cgroup::new("/kubepods/pod1234/abc".into()),
            pid: None,
        };
        let plain = export(vec![(key.clone(), Default::default())], None);
        assert!(plain[0].pod.is_none());
        let pods = PodLabelling {
            index: Default::default(),
            deleted_pod_grace: Duration::from_secs(1),
        };
        let labelled = export(vec![(key, Default::default())], Some(&pods));
        let pod = labelled[0]
            .pod
            .as_ref()
            .expect("every series gets pod labels");
        assert_eq!(
            pod.pod, "",
            "a pod the index does not know has empty labels"
        );
    }
}
