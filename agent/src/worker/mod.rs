//! The BPF worker thread: it owns the loaded skeleton (libbpf objects stay on
//! one thread), answers snapshot requests from the scrape path, drains the
//! ring buffers as they fill (`wakeup`) and on a short timer, folds entries
//! the kernel flagged as exited, and runs the signals' node checks and
//! upkeep (`NodeNeeds::check`, `KernelNeeds::upkeep`). `pass.rs` is one pass
//! of its loop, `tables.rs` its reading of the rings and counters.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::RingBuffer;

use crate::bpf::{self, LoadOptions, ProbeStatus};
use crate::callsites::tables::StackTables;
use crate::labels::kubernetes::SharedPodIndex;
use crate::procs::{PendingCgroups, PendingRecords, SeriesLimits};
use crate::signals::SignalArgs;
use crate::snapshot::Snapshot;
use crate::wakeup::{Doorbell, Waiter};

mod pass;
mod tables;

use pass::Loop;
use tables::open_rings;

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
    /// The statistics windows that measure the programs' in-kernel time.
    pub cost: bpf::CostOptions,
}

/// Pod metadata for the series, and how long a deleted pod's series stay.
#[derive(Clone)]
pub struct PodLabelling {
    pub index: SharedPodIndex,
    pub deleted_pod_grace: Duration,
}

enum Request {
    Snapshot(SyncSender<Result<Arc<Snapshot>>>),
    /// Set `stack_target_count` in .bss (the findings' on-demand sampling).
    StackTargetCount(u32, SyncSender<()>),
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
    /// With `capture_stacks` or `stacks_on_demand` only.
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
            Err(_) => Err(died_while_loading(thread)),
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

    /// Tell the programs how many thread groups `stack_targets` holds (0:
    /// they do not look it up). The worker owns the object's .bss.
    pub fn set_stack_target_count(&self, n: u32) -> Result<()> {
        self.ask(|reply| Request::StackTargetCount(n, reply))
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

/// The error for a worker thread that ended without a word while loading:
/// it panicked (its message, which the panic hook also printed above), or
/// it ended some other way.
fn died_while_loading(thread: JoinHandle<()>) -> anyhow::Error {
    let cause = match thread.join() {
        Err(payload) => format!("it panicked: {}", panic_message(payload.as_ref())),
        Ok(()) => "it ended without reporting a result".to_string(),
    };
    anyhow!(
        "the BPF worker thread died while loading the BPF programs ({cause}): this is a bug \
         in slowpath; please report it with this message and the log of a run with \
         --log.level=debug"
    )
}

/// A panic's message: its payload is a `&str` (`panic!("literal")`) or a
/// `String` (`panic!("{x}")`, `expect`), anything else has no text.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

fn run(
    opts: WorkerOptions,
    kernel: (bpf::KernelSetup, bpf::KernelBtf),
    rx: Receiver<Request>,
    doorbell: &Doorbell,
    ready: SyncSender<Result<Ready>>,
) {
    let mut storage = bpf::ObjectStorage::new();
    let (loaded, rings, mut state) = match start(&mut storage, &opts, kernel, doorbell) {
        Ok((loaded, rings, ready_msg)) => {
            // the cost meter is calibrated before the caller goes on, whose
            // start-up would disturb the timing
            let state = Loop::new(&opts, &loaded);
            let _ = ready.send(Ok(ready_msg));
            (loaded, rings, state)
        }
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
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
    let mut loaded = loaded?;
    if !opts.load.capture_stacks {
        bpf::enable_slots(&mut loaded);
    }
    let pending: PendingRecords = Rc::new(RefCell::new(Vec::new()));
    let new_cgroups: PendingCgroups = Rc::new(RefCell::new(Vec::new()));
    let (ring, waiter) = open_rings(&loaded, &pending, &new_cgroups, doorbell)?;
    let stack_tables = match opts.load.capture_stacks || opts.load.stacks_on_demand {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_died_says_why_and_what_to_do() {
        // the payloads of panic!("literal"), panic!("{x}") and panic_any
        let literal = std::thread::spawn(|| panic!("ring buffer vanished"));
        let formatted = std::thread::spawn(|| panic!("map {} vanished", "procs"));
        let other = std::thread::spawn(|| std::panic::panic_any(42u8));
        let quiet = std::thread::spawn(|| ());
        let message = |thread| died_while_loading(thread).to_string();
        assert_eq!(
            message(literal),
            "the BPF worker thread died while loading the BPF programs (it panicked: ring \
             buffer vanished): this is a bug in slowpath; please report it with this message \
             and the log of a run with --log.level=debug"
        );
        assert!(message(formatted).contains("(it panicked: map procs vanished)"));
        assert!(message(other).contains("(it panicked: no message)"));
        assert!(message(quiet).contains("(it ended without reporting a result)"));
    }
}
