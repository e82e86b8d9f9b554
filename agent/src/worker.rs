//! The BPF worker thread: it owns the loaded skeleton (libbpf objects stay on
//! one thread), answers snapshot requests from the scrape path, drains the
//! ring buffers as they fill (`wakeup`) and on a short timer, folds entries
//! the kernel flagged as exited, and runs the vDSO canary.

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

use crate::bpf::types::{self, sp_clock};
use crate::bpf::{self, slot, LoadOptions, ProbeStatus};
use crate::callsites::tables::StackTables;
use crate::canary;
use crate::kubernetes::SharedPodIndex;
use crate::procs::{Aggregator, PendingCgroups, PendingRecords, SeriesLimits};
use crate::snapshot::{Series, SeriesKey, Snapshot, LOST_REASON_COUNT, LOST_REASON_NAMES};
use crate::wakeup::{Doorbell, Waiter};

/// Longest sleep of the worker: the ring buffers are drained at least this
/// often (the kernel wakes it sooner once a ring is a quarter full).
const DRAIN_INTERVAL: Duration = Duration::from_millis(500);
/// How often entries of vanished processes are looked for (only needed when
/// the exit probe is not attached).
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Worker settings.
pub struct WorkerOptions {
    pub load: LoadOptions,
    /// What the signals ask of the kernel side (hooks, fentry syscalls, rodata).
    pub kernel: bpf::KernelSetup,
    /// The kernel's BTF, parsed once per start; dropped once loaded.
    pub btf: bpf::KernelBtf,
    pub pid_label: bool,
    /// Bounds of the per-process series.
    pub limits: SeriesLimits,
    /// Period of the vDSO canary.
    pub canary_interval: Duration,
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
    pub fn start(opts: WorkerOptions) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let doorbell = Arc::new(Doorbell::new().context("creating the worker's eventfd")?);
        let bell = doorbell.clone();
        let thread = std::thread::Builder::new()
            .name("slowpath-bpf".into())
            .spawn(move || run(opts, rx, &bell, ready_tx))
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
    rx: Receiver<Request>,
    doorbell: &Doorbell,
    ready: SyncSender<Result<Ready>>,
) {
    let mut storage = bpf::ObjectStorage::new();
    let loaded = bpf::load(&mut storage, &opts.load, &opts.kernel, &opts.btf);
    drop(opts.btf); // megabytes, needed only to plan the load
    let mut loaded = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let pending: PendingRecords = Rc::new(RefCell::new(Vec::new()));
    let new_cgroups: PendingCgroups = Rc::new(RefCell::new(Vec::new()));
    let (ring, waiter) = match open_rings(&loaded, &pending, &new_cgroups, doorbell) {
        Ok(opened) => opened,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let stack_tables = match opts.load.capture_stacks {
        true => match StackTables::open(&loaded) {
            Ok(tables) => Some(tables),
            Err(err) => {
                let _ = ready.send(Err(err));
                return;
            }
        },
        false => None,
    };
    let _ = ready.send(Ok(Ready {
        probes: loaded.probes.clone(),
        stack_tables,
    }));

    let procs = &loaded.skel.maps.procs;
    let sys_enter_attached = loaded
        .probes
        .iter()
        .any(|p| p.probe == "sys_enter" && p.attached());
    let mut agg = Aggregator::new(opts.pid_label, opts.limits.clone());
    let mut canary_results = Vec::new();
    let mut next_canary = Instant::now();
    let mut next_sweep = Instant::now() + SWEEP_INTERVAL;
    let own_tgid = std::process::id();
    let mut lost_seen = [0u64; LOST_REASON_COUNT];
    let mut flagged_seen = 0u64;

    loop {
        update_clock_offsets(loaded.skel.maps.bss_data.as_deref_mut());
        let now = Instant::now();
        if now >= next_canary {
            canary_results = canary::run(|clock| {
                sys_enter_attached.then(|| own_clock_syscalls(procs, own_tgid, clock))
            });
            next_canary = now + opts.canary_interval;
        }
        if now >= next_sweep {
            match agg.sweep_dead(procs) {
                Ok(0) => {}
                Ok(n) => info!(
                    entries = n,
                    "folded entries of processes that left no exit record"
                ),
                Err(err) => warn!(error = %format!("{err:#}"), "sweeping the process table"),
            }
            next_sweep = now + SWEEP_INTERVAL;
        }
        // Drain on every pass, whatever woke us: records never wait for a scrape.
        if let Err(err) = ring.consume() {
            warn!(error = %err, "draining the ring buffers");
        }
        agg.learn_cgroups(&new_cgroups);
        agg.fold_records(&pending);
        let flagged = loaded
            .skel
            .maps
            .bss_data
            .as_deref()
            .map_or(0, |b| b.exited_flagged);
        if flagged != flagged_seen {
            // Exit records the ring buffer had no room for: their entries
            // wait in the table, flagged; fold them now, not at the next scrape.
            flagged_seen = flagged;
            if let Err(err) = agg.fold_flagged(procs) {
                warn!(error = %format!("{err:#}"), "folding flagged entries");
            }
        }
        log_new_losses(&read_lost(&loaded.skel.maps.lost), &mut lost_seen);
        while let Ok(request) = rx.try_recv() {
            match request {
                Request::Snapshot(reply) => {
                    if let Some(pods) = &opts.pods {
                        drop_deleted_pods(&mut agg, pods);
                    }
                    let result = agg
                        .refresh(procs, || ring.consume().map_err(Into::into), &pending)
                        .map(|r| {
                            Arc::new(Snapshot {
                                series: export(r.series, opts.pods.as_ref()),
                                tracked_processes: r.tracked_processes,
                                folded: r.folded,
                                lost: read_lost(&loaded.skel.maps.lost),
                                recursion_misses: bpf::recursion_misses(&loaded),
                                probes: loaded.probes.clone(),
                                canary: canary_results.clone(),
                            })
                        });
                    if let Err(err) = &result {
                        error!(error = %format!("{err:#}"), "reading the kernel tables");
                    }
                    let _ = reply.send(result);
                }
                Request::Stop(ack) => {
                    debug!("detaching BPF programs");
                    drop(ring);
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
        waiter.wait(DRAIN_INTERVAL.min(next_canary.saturating_duration_since(Instant::now())));
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

/// Tell the BPF side how far CLOCK_REALTIME and CLOCK_TAI are ahead of
/// CLOCK_MONOTONIC, to turn absolute deadlines on them into lengths. Kept
/// current every pass of the worker loop (at most `DRAIN_INTERVAL` apart),
/// so a clock step is off for at most that long.
fn update_clock_offsets(bss: Option<&mut types::bss>) {
    let Some(bss) = bss else { return };
    let now = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec * 1_000_000_000 + ts.tv_nsec
    };
    let mono = now(libc::CLOCK_MONOTONIC);
    bss.realtime_offset_ns = now(libc::CLOCK_REALTIME) - mono;
    bss.tai_offset_ns = now(libc::CLOCK_TAI) - mono;
}

/// The agent's own `clock_gettime` syscall count for `clock`.
fn own_clock_syscalls(procs: &dyn MapCore, tgid: u32, clock: sp_clock) -> u64 {
    let Ok(Some(bytes)) = procs.lookup(&tgid.to_ne_bytes(), MapFlags::ANY) else {
        return 0; // no entry yet: no counted syscall yet
    };
    let mut p = types::sp_proc::default();
    match plain::copy_from_bytes(&mut p, &bytes) {
        Ok(()) => p.c.clock_gettime[slot!(clock)],
        Err(_) => 0,
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
