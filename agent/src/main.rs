//! slowpath: an eBPF agent that counts, per process, the kernel slow paths
//! that cheap-looking calls fall into, and serves them as Prometheus metrics.
//!
//! Start-up order keeps failures clean: flags are parsed, the listen address
//! is bound, privileges and BTF are checked, and only then are BPF programs
//! loaded and attached. Any error before serving exits non-zero with one
//! line on stderr and nothing left attached.

mod bpf;
mod callsites;
mod canary;
mod cgroup;
mod cli;
mod connections;
mod doctor;
mod exposition;
mod finding;
#[cfg(test)]
mod golden;
mod identity;
mod kubernetes;
mod metrics;
mod node;
mod preflight;
mod procs;
mod server;
mod signals;
mod snapshot;
mod sources;
mod wakeup;
mod webconfig;
mod worker;

use std::io::{ErrorKind, IsTerminal};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use libbpf_rs::PrintLevel;
use prometheus::Registry;
use tracing::{debug, info, trace, warn};

use crate::callsites::harvest;
use crate::cli::{Cli, Command, DoctorArgs};
use crate::worker::{Worker, WorkerOptions};

/// The HTTP limits from the flags, the connection cap fitted under the file
/// limit (raised to its hard value first).
fn connection_limits(
    max: u16,
    read_header_timeout: std::time::Duration,
    idle_timeout: std::time::Duration,
) -> connections::Limits {
    let (soft, hard) = connections::raise_nofile_limit();
    let max_connections = connections::effective_max_connections(usize::from(max));
    info!(
        max_connections,
        nofile_soft = soft,
        nofile_hard = hard,
        "HTTP connection limit"
    );
    connections::Limits {
        max_connections,
        read_header_timeout,
        idle_timeout,
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return cli::exit_on_parse_error(err),
    };
    let doctor = matches!(cli.command, Some(Command::Doctor(_)));
    // The doctor's output is its report: keep the log to warnings unless asked.
    let level = if doctor && cli.log_level == "info" {
        "warn"
    } else {
        &cli.log_level
    };
    init_logging(level);
    let result = match &cli.command {
        Some(Command::Doctor(args)) => run_doctor(&cli, args),
        None => run(cli),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("slowpath: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // colour only on a terminal, never in journald or container logs
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
            "slowpath={level}"
        )))
        .init();
    // libbpf's own messages (verifier logs on failure) go through tracing.
    let libbpf_level = match level {
        "debug" | "trace" => PrintLevel::Debug,
        _ => PrintLevel::Warn,
    };
    libbpf_rs::set_print(Some((libbpf_level, libbpf_log)));
}

fn libbpf_log(level: PrintLevel, msg: String) {
    let msg = msg.trim_end();
    match level {
        PrintLevel::Warn => warn!(target: "slowpath::libbpf", "{msg}"),
        PrintLevel::Info => debug!(target: "slowpath::libbpf", "{msg}"),
        PrintLevel::Debug => trace!(target: "slowpath::libbpf", "{msg}"),
    }
}

fn run(cli: Cli) -> Result<()> {
    let addr = cli.listen_address;
    let listener = bind_listener(addr).map_err(|err| match err.kind() {
        ErrorKind::AddrInUse => anyhow!(
            "cannot listen on {addr}: address already in use: stop the process using it \
             or pass another --web.listen-address"
        ),
        ErrorKind::PermissionDenied => {
            anyhow!("cannot listen on {addr}: permission denied: use a port above 1023")
        }
        _ => anyhow!("cannot listen on {addr}: {err}"),
    })?;
    listener.set_nonblocking(true).context("listener")?;
    let web_config = match &cli.web_config_file {
        Some(path) => Some(Arc::new(webconfig::WebConfig::load(path)?)),
        None => None,
    };
    preflight::check_capabilities()?;
    bpf::check_btf(&cli.btf_path)?;
    preflight::warn_if_sysfs_unreadable(&cli.sysfs);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // A bad Kubernetes configuration fails here, before anything is attached;
    // an unreachable API server does not (the watch retries).
    let kube = match cli.kubernetes {
        true => {
            let opts = kubernetes::WatchOptions {
                node_name: cli.node_name.clone().unwrap_or_else(host_name),
                kubeconfig: cli.kubeconfig.clone(),
            };
            let client = runtime.block_on(kubernetes::client(&opts))?;
            Some((client, opts, kubernetes::KubeState::default()))
        }
        false => None,
    };
    let btf = bpf::KernelBtf::open(&cli.btf_path)?;
    let mut worker = Worker::start(WorkerOptions {
        load: load_options(&cli, cli.debug_callsites),
        kernel: kernel_setup(&cli, &btf),
        btf,
        pid_label: cli.pid_label,
        limits: series_limits(&cli),
        canary_interval: cli.canary_interval,
        pods: kube.as_ref().map(|(_, _, k)| worker::PodLabelling {
            index: k.index.clone(),
            deleted_pod_grace: cli.deleted_pod_grace,
        }),
    })?;
    let stack_tables = worker.take_stack_tables();
    let worker = Arc::new(worker);
    let probes = worker.probes().to_vec();
    log_attached(&probes);

    let registry = Registry::new();
    let collector = metrics::SlowpathCollector::new(
        worker.clone(),
        cli.sysfs.clone(),
        kube.as_ref().map(|(_, _, k)| k.up.clone()),
    )?;
    registry.register(Box::new(collector))?;
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    let callsites = match stack_tables {
        Some(tables) => {
            preflight::warn_if_cannot_symbolize("--debug.callsites");
            let folded = harvest::SharedFolded::default();
            let metrics = harvest::CallSiteMetrics::register(&registry)?;
            let thread = harvest::HarvesterThread::spawn(tables, folded.clone(), metrics)?;
            info!("call sites: sampling user stacks, folded at /debug/callsites");
            Some((folded, thread))
        }
        None => None,
    };

    runtime.block_on(async {
        if let Some((client, opts, state)) = kube {
            tokio::spawn(kubernetes::watch_pods(client, opts, state));
        }
        let endpoints = server::Endpoints {
            telemetry_path: cli.telemetry_path,
            registry,
            probes,
            callsites: callsites.as_ref().map(|(folded, _)| folded.clone()),
            web_config,
            limits: connection_limits(
                cli.max_connections,
                cli.read_header_timeout,
                cli.idle_timeout,
            ),
        };
        server::serve(listener, endpoints, shutdown_signal()).await
    })?;
    drop(callsites); // stops the harvester, which holds the tables' fds
    info!("shutting down: detaching BPF programs");
    // The registry (and the collector's worker handle) went with the server;
    // dropping the last handle detaches everything.
    drop(worker);
    Ok(())
}

/// Connections the kernel may queue before the agent accepts them. The
/// standard library's 128 overflows when a burst of clients (or a storm of
/// evicted idle ones reconnecting) arrives at once; the kernel caps it at
/// net.core.somaxconn (4096 by default since 5.4).
const LISTEN_BACKLOG: i32 = 4096;

/// Bind `addr` as `TcpListener::bind` does (SO_REUSEADDR on, so a restart
/// does not wait for TIME_WAIT), with a [`LISTEN_BACKLOG`] queue.
fn bind_listener(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// One info line naming every attached probe and its attach type.
fn log_attached(probes: &[bpf::ProbeStatus]) {
    let attached: Vec<String> = probes
        .iter()
        .filter(|p| p.attached())
        .map(|p| format!("{}={}", p.probe, p.attach_type))
        .collect();
    let signals: Vec<&str> = signals::SIGNALS.iter().map(|s| s.name).collect();
    info!(attached = %attached.join(" "), signals = %signals.join(" "), "BPF programs attached");
}

/// The series bounds from the flags.
fn series_limits(cli: &Cli) -> procs::SeriesLimits {
    procs::SeriesLimits {
        max_series: usize::try_from(cli.max_series).unwrap_or(usize::MAX),
        max_comms_per_cgroup: usize::try_from(cli.max_comms_per_cgroup).unwrap_or(usize::MAX),
        retired_grace: cli.retired_series_grace,
    }
}

/// BPF settings from the flags; `capture_stacks` for the doctor.
fn load_options(cli: &Cli, capture_stacks: bool) -> bpf::LoadOptions {
    bpf::LoadOptions {
        max_processes: cli.max_processes,
        max_compactions: cli.max_compactions,
        ringbuf_bytes: cli.ringbuf_bytes,
        force_attach: cli.attach_type,
        capture_stacks,
        #[cfg(feature = "fault-injection")]
        break_probe: cli.break_probe.clone(),
        #[cfg(feature = "fault-injection")]
        refuse_page_alloc: cli.refuse_probe.is_some(),
    }
}

/// What the signals ask of the kernel side. Interim: today's hooks, fentry
/// syscalls and timer settings listed here, until the signals declare them.
fn kernel_setup(cli: &Cli, btf: &bpf::KernelBtf) -> bpf::KernelSetup {
    let memory = ["mm_page_alloc", "mm_compaction_begin", "mm_compaction_end"];
    let mut hooks = signals::timer::kernel::hooks().to_vec();
    hooks.extend(memory.map(bpf::Hook::new));
    bpf::KernelSetup {
        hooks,
        fentry_syscalls: FENTRY_SYSCALLS.to_vec(),
        rodata: vec![signals::timer::kernel::rodata(
            cli.timer_loop_threshold,
            btf,
        )],
    }
}

/// The counted syscalls with an fentry program (`sys_enter_fentry_<name>`).
#[cfg(target_arch = "x86_64")]
const FENTRY_SYSCALLS: [&str; 15] = [
    "clock_gettime",
    "gettimeofday",
    "time",
    "rt_sigprocmask",
    "nanosleep",
    "clock_nanosleep",
    "futex",
    "futex_waitv",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "poll",
    "ppoll",
    "select",
    "pselect6",
];
/// arm64 has no time, epoll_wait, poll or select syscall.
#[cfg(target_arch = "aarch64")]
const FENTRY_SYSCALLS: [&str; 11] = [
    "clock_gettime",
    "gettimeofday",
    "rt_sigprocmask",
    "nanosleep",
    "clock_nanosleep",
    "futex",
    "futex_waitv",
    "epoll_pwait",
    "epoll_pwait2",
    "ppoll",
    "pselect6",
];

/// `slowpath doctor`: the same programs, observed for a while, then a report.
fn run_doctor(cli: &Cli, args: &DoctorArgs) -> Result<()> {
    preflight::check_capabilities()?;
    bpf::check_btf(&cli.btf_path)?;
    let btf = bpf::KernelBtf::open(&cli.btf_path)?;
    let mut worker = Worker::start(WorkerOptions {
        load: load_options(cli, true),
        kernel: kernel_setup(cli, &btf),
        btf,
        pid_label: true,
        // every process of the observation, none dropped or folded
        limits: procs::SeriesLimits {
            max_series: usize::MAX,
            max_comms_per_cgroup: usize::MAX,
            retired_grace: std::time::Duration::MAX,
        },
        // the canary runs once at start; the doctor benchmarks clocks itself
        canary_interval: std::time::Duration::from_secs(3600),
        pods: None,
    })?;
    log_attached(worker.probes());
    preflight::warn_if_cannot_symbolize("doctor");
    let stacks = worker.take_stack_tables();
    let opts = doctor::DoctorOptions {
        duration: args.duration,
        filter: doctor::Filter {
            pid: args.pid,
            comm: args.comm.clone(),
            cgroup: args.cgroup.clone(),
        },
        format: args.format,
        timer_loop_per_sec: cli.timer_loop_threshold,
    };
    doctor::run(&worker, stacks.as_ref(), &opts, &cli.sysfs)
}

/// The kernel's host name, the default Kubernetes node name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The interim setup of the default flags on the running kernel.
    fn setup() -> bpf::KernelSetup {
        let cli = Cli::try_parse_from(["slowpath"]).unwrap();
        let btf = bpf::KernelBtf::open(Path::new(bpf::KERNEL_BTF)).unwrap();
        kernel_setup(&cli, &btf)
    }

    #[test]
    fn the_embedded_object_has_the_programs_of_the_interim_setup() {
        assert_eq!(bpf::check_object(&setup()), Ok(()));
    }

    #[test]
    fn a_setup_with_a_hook_or_syscall_too_many_or_too_few_fails_the_check() {
        let problems = |change: fn(&mut bpf::KernelSetup)| {
            let mut setup = setup();
            change(&mut setup);
            bpf::check_object(&setup).unwrap_err()
        };
        let no_compaction_end = problems(|s| s.hooks.retain(|h| h.name != "mm_compaction_end"));
        assert_eq!(no_compaction_end.len(), 2, "{no_compaction_end:?}");
        assert!(no_compaction_end[0].starts_with("program mm_compaction_end_btf"));
        let extra_hook = problems(|s| s.hooks.push(bpf::Hook::new("no_such_hook")));
        assert_eq!(extra_hook.len(), 2, "{extra_hook:?}");
        assert!(extra_hook[0].starts_with("hook no_such_hook has no program no_such_hook_btf"));
        let no_futex = problems(|s| s.fentry_syscalls.retain(|&n| n != "futex"));
        assert_eq!(no_futex.len(), 1, "{no_futex:?}");
        assert!(no_futex[0].starts_with("program sys_enter_fentry_futex (fentry/"));
        assert!(no_futex[0].ends_with("is accounted for by no hook and no fentry syscall"));
        let extra_syscall = problems(|s| s.fentry_syscalls.push("no_such_syscall"));
        assert_eq!(extra_syscall.len(), 1, "{extra_syscall:?}");
    }
}
