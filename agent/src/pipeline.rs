//! The agent's parts, built from the flags: the worker (the BPF programs
//! loaded and attached, and the thread that reads them), the metrics
//! registry, the findings engine, the call-site harvester and the pod
//! watch, all started in one order ([`start`]). The agent serves them over
//! HTTP; `slowpath top` without an agent runs the same parts in its own
//! process ([`start_standalone_top`]), so that its numbers are the agent's.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use prometheus::Registry;
use tracing::info;

use crate::callsites::{self, harvest};
use crate::cli::Cli;
use crate::worker::{self, Worker, WorkerOptions};
use crate::{
    bpf, findings, kernel, labels, memlock, metrics, own_process, preflight, procs, signals, top,
};

/// The agent's parts up to its registry, loaded and attached; the findings
/// engine, the harvester and the pod watch start from them.
pub struct Parts {
    /// The async runtime the Kubernetes client was made on (the pod watch
    /// runs on it).
    pub runtime: tokio::runtime::Runtime,
    pub kube: Option<KubeWatch>,
    pub worker: Arc<Worker>,
    /// The user-stack tables, for the call-site harvester or the findings'
    /// on-demand sampling (`None` unless either can run).
    pub stack_tables: Option<callsites::tables::StackTables>,
    pub registry: Registry,
}

/// Start what the agent and a standalone `slowpath top` both run, in this
/// order: the checks (the kernel's age and sysfs warn; missing privileges
/// and BTF are errors, before anything is loaded), the Kubernetes client
/// (a bad configuration fails before anything is attached), the worker
/// (with `pid_label`, a series per process), the attach log line, and the
/// registry. Errors: each step's, with its cause and fix; nothing stays
/// attached after an error (dropping the worker detaches).
pub fn start(cli: &Cli, pid_label: bool) -> Result<Parts> {
    preflight::warn_if_kernel_too_old();
    preflight::check_capabilities()?;
    let memlock = memlock::settle(&kernel::release().unwrap_or_default());
    bpf::check_btf(&cli.btf_path)?;
    signals::warn_if_sysfs_unreadable(&cli.sysfs, &cli.signals.collectors);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let kube = kubernetes_watch(cli, &runtime)?;
    let mut worker = start_worker(cli, memlock, kube.as_ref().map(|(_, _, k)| k), pid_label)?;
    let stack_tables = worker.take_stack_tables();
    let worker = Arc::new(worker);
    log_attached(worker.probes(), &cli.signals);
    let kubernetes_up = kube.as_ref().map(|(_, _, k)| k.up.clone());
    let registry = registry(worker.clone(), cli, kubernetes_up)?;
    Ok(Parts {
        runtime,
        kube,
        worker,
        stack_tables,
        registry,
    })
}

/// Load and attach the programs every signal asks for, with the flags'
/// settings; with Kubernetes on, series get their pod's labels from `kube`;
/// with `pid_label`, every process is a series of its own.
pub fn start_worker(
    cli: &Cli,
    memlock: memlock::Memlock,
    kube: Option<&labels::kubernetes::KubeState>,
    pid_label: bool,
) -> Result<Worker> {
    let btf = bpf::KernelBtf::open(&cli.btf_path)?;
    let kernel = signals::kernel_setup(&cli.signals, &btf);
    let options = WorkerOptions {
        load: load_options(cli, cli.debug_callsites, memlock),
        pid_label,
        limits: series_limits(cli),
        signals: cli.signals.clone(),
        check_every: None,
        pods: kube.map(|k| worker::PodLabelling {
            index: k.index.clone(),
            deleted_pod_grace: cli.deleted_pod_grace,
        }),
        cost: cli.cost_options(),
    };
    Worker::start(options, kernel, btf)
}

/// The pod watch's client, options and state with `--kubernetes.enabled`.
pub type KubeWatch = (
    kube::Client,
    labels::kubernetes::WatchOptions,
    labels::kubernetes::KubeState,
);

/// Connect to the Kubernetes API when enabled. A bad Kubernetes
/// configuration fails here, before anything is attached; an unreachable API
/// server does not (the watch retries).
pub fn kubernetes_watch(cli: &Cli, runtime: &tokio::runtime::Runtime) -> Result<Option<KubeWatch>> {
    if !cli.kubernetes {
        return Ok(None);
    }
    let opts = labels::kubernetes::WatchOptions {
        node_name: cli.node_name.clone().unwrap_or_else(host_name),
        kubeconfig: cli.kubeconfig.clone(),
    };
    let client = runtime.block_on(labels::kubernetes::client(&opts))?;
    Ok(Some((
        client,
        opts,
        labels::kubernetes::KubeState::default(),
    )))
}

/// The registry the metrics page serves: every slowpath family (read from
/// `worker` at scrape time) and the agent's own process metrics
/// ([`own_process`]).
pub fn registry(
    worker: Arc<Worker>,
    cli: &Cli,
    kubernetes_up: Option<Arc<std::sync::atomic::AtomicBool>>,
) -> Result<Registry> {
    let registry = Registry::new();
    let collector = metrics::SlowpathCollector::new(
        worker,
        cli.sysfs.clone(),
        cli.signals.collectors,
        kubernetes_up,
    )?;
    registry.register(Box::new(collector))?;
    registry.register(Box::new(own_process::OwnProcessCollector::new()?))?;
    Ok(registry)
}

/// `--debug.callsites`: the harvester thread and the folded stacks it
/// publishes for `/debug/callsites`, named by the signals' call kinds.
pub fn start_call_sites(
    tables: callsites::tables::StackTables,
    registry: &Registry,
) -> Result<(harvest::SharedFolded, harvest::HarvesterThread)> {
    preflight::warn_if_cannot_symbolize("--debug.callsites");
    let folded = harvest::SharedFolded::new(std::sync::Mutex::new(harvest::FoldedStacks::new(
        signals::callsite_kinds(),
    )));
    let metrics = harvest::CallSiteMetrics::register(registry)?;
    let thread = harvest::HarvesterThread::spawn(tables, folded.clone(), metrics)?;
    info!("call sites: sampling user stacks, folded at /debug/callsites");
    Ok((folded, thread))
}

/// The findings engine (`--findings.*`, on a sliding `window`) and its
/// metrics, unless the window is 0; with `tables`, it samples call sites
/// on demand.
pub fn start_findings(
    cli: &Cli,
    window: Duration,
    worker: &Arc<Worker>,
    tables: Option<callsites::tables::StackTables>,
    registry: &Registry,
) -> Result<Option<(findings::SharedFindings, findings::FindingsThread)>> {
    if window.is_zero() {
        return Ok(None);
    }
    let opts = findings::FindingsOptions {
        window,
        max: usize::try_from(cli.findings_max).unwrap_or(usize::MAX),
        grace: cli.findings_grace,
        args: cli.signals.clone(),
        sysfs: cli.sysfs.clone(),
    };
    if tables.is_some() {
        preflight::warn_if_cannot_symbolize("findings");
    }
    findings::log_start(&opts, tables.is_some());
    let shared = findings::shared();
    registry.register(Box::new(findings::metrics::FindingsCollector::new(
        shared.clone(),
    )?))?;
    let thread = findings::FindingsThread::spawn(worker.clone(), tables, opts, shared.clone())?;
    Ok(Some((shared, thread)))
}

/// One info line naming every attached probe and its attach type and the
/// signals that run, then one line per collector switched off, saying
/// which hooks and syscalls it leaves out.
pub fn log_attached(probes: &[bpf::ProbeStatus], args: &signals::SignalArgs) {
    let attached: Vec<String> = probes
        .iter()
        .filter(|p| p.attached())
        .map(|p| format!("{}={}", p.probe, p.attach_type))
        .collect();
    let signals: Vec<&str> = args.enabled().map(|s| s.name).collect();
    info!(attached = %attached.join(" "), signals = %signals.join(" "), "BPF programs attached");
    signals::log_left_out(&args.collectors);
}

/// The series bounds from the flags.
pub fn series_limits(cli: &Cli) -> procs::SeriesLimits {
    procs::SeriesLimits {
        max_series: usize::try_from(cli.max_series).unwrap_or(usize::MAX),
        max_comms_per_cgroup: usize::try_from(cli.max_comms_per_cgroup).unwrap_or(usize::MAX),
        retired_grace: cli.retired_series_grace,
    }
}

/// BPF settings from the flags; `capture_stacks` for the doctor; `memlock`
/// from `memlock::settle`.
pub fn load_options(
    cli: &Cli,
    capture_stacks: bool,
    memlock: memlock::Memlock,
) -> bpf::LoadOptions {
    bpf::LoadOptions {
        max_processes: cli.max_processes,
        memlock,
        ringbuf_bytes: cli.ringbuf_bytes,
        force_attach: cli.attach_type,
        capture_stacks,
        stacks_on_demand: !capture_stacks && !cli.findings_window.is_zero(),
        #[cfg(feature = "fault-injection")]
        break_probe: cli.break_probe.clone(),
        #[cfg(feature = "fault-injection")]
        refuse_page_alloc: cli.refuse_probe.is_some(),
    }
}

/// The kernel's host name, the default Kubernetes node name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The longest findings window of a standalone view: the first findings
/// show after a quarter of it, and a view is looked at for minutes, not
/// hours.
const STANDALONE_FINDINGS_WINDOW: Duration = Duration::from_secs(20);

/// `slowpath top` with no agent to read: the agent's parts ([`start`]) with
/// a series per process (the pid label), its findings engine (the window
/// at most 20 s) and, with `--kubernetes.enabled`, its pod watch on a
/// thread of its own. `why` says in the header why the view runs
/// standalone. Errors: what the agent's start would say (missing
/// privileges, no BTF, a bad Kubernetes config).
pub fn start_standalone_top(cli: &Cli, why: &str) -> Result<top::StandaloneSource> {
    let parts = start(cli, true)?;
    let window = cli.findings_window.min(STANDALONE_FINDINGS_WINDOW);
    let findings = start_findings(
        cli,
        window,
        &parts.worker,
        parts.stack_tables,
        &parts.registry,
    )?;
    if let Some((client, opts, state)) = parts.kube {
        let runtime = parts.runtime;
        std::thread::Builder::new()
            .name("pod-watch".into())
            .spawn(move || runtime.block_on(labels::kubernetes::watch_pods(client, opts, state)))
            .context("starting the pod watch")?;
    }
    Ok(top::StandaloneSource::new(parts.registry, findings, why))
}
