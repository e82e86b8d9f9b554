//! slowpath: an eBPF agent that counts, per process, the kernel slow paths
//! that cheap-looking calls fall into, and serves them as Prometheus metrics.
//!
//! Start-up order keeps failures clean: flags are parsed, the listen address
//! is bound, privileges and BTF are checked, and only then are BPF programs
//! loaded and attached. Any error before serving exits non-zero with one
//! line on stderr and nothing left attached.

mod bpf;
mod callsites;
mod cli;
mod cpus;
mod diagnosis;
mod doctor;
mod export;
mod exposition;
mod finding;
mod findings;
mod flag_values;
#[cfg(test)]
mod golden;
mod http;
mod kernel;
mod labels;
mod manuals;
mod memlock;
mod metrics;
mod node;
mod own_process;
mod pipeline;
mod preflight;
mod procs;
mod signals;
mod snapshot;
mod sources;
mod top;
mod version;
mod wakeup;
mod worker;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use libbpf_rs::PrintLevel;
use tracing::{debug, info, trace, warn};

use crate::cli::{Cli, Command, DoctorArgs, TopArgs, TopSource};
use crate::worker::{Worker, WorkerOptions};

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(usage_error) => return usage_error,
    };
    let report = matches!(cli.command, Some(Command::Doctor(_) | Command::Top(_)));
    // The doctor's and top's output is their report: keep the log to
    // warnings unless asked.
    let level = if report && cli.log_level == "info" {
        "warn"
    } else {
        &cli.log_level
    };
    // A full-screen view owns the terminal: a log line would tear it.
    let full_screen = matches!(&cli.command, Some(Command::Top(args)) if top::full_screen(&top_options(&cli, args)));
    init_logging(level, full_screen);
    let result = match &cli.command {
        Some(Command::Doctor(args)) => run_doctor(&cli, args),
        Some(Command::Top(args)) => run_top(&cli, args),
        Some(Command::Completions(args)) => manuals::print_completions(args.shell),
        Some(Command::Man(args)) => manuals::write_man_pages(&args.dir),
        Some(Command::Signals) => export::print(),
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

/// `slowpath top`: the agent's page when one answers (`--source auto` or
/// `agent`), else the programs loaded in this process. Errors: the agent
/// answers but cannot be read, or nothing answers and the programs cannot
/// be loaded (both causes said).
fn run_top(cli: &Cli, args: &TopArgs) -> Result<()> {
    let opts = top_options(cli, args);
    let agent = top::AgentSource::new(&opts.endpoint)?;
    // An agent named by --agent.url may be another node's: never stand in for it.
    let source = match args.source {
        TopSource::Auto if args.agent_url.is_some() => TopSource::Agent,
        source => source,
    };
    let why = match source {
        TopSource::Agent => return top::run(&opts, &agent, None),
        TopSource::Standalone => "--source standalone".to_string(),
        TopSource::Auto => match agent.presence()? {
            top::Presence::Answers(first) => return top::run(&opts, &agent, Some(*first)),
            top::Presence::Absent(why) => why,
        },
    };
    let standalone = pipeline::start_standalone_top(cli, &why)
        .with_context(|| {
            format!("{why} (start it, or give --agent.url), and this view cannot load the BPF programs itself")
        })?;
    top::run(&opts, &standalone, None)
}

/// `slowpath top`'s options from its flags; the agent's URL from this
/// host's listen address and telemetry path unless given.
fn top_options(cli: &Cli, args: &TopArgs) -> top::TopOptions {
    let tls = args.ca_file.is_some() || args.cert_file.is_some();
    let url = args.agent_url.clone().unwrap_or_else(|| {
        let mut addr = cli.listen_address;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{addr}{}", cli.telemetry_path)
    });
    top::TopOptions {
        endpoint: top::AgentEndpoint {
            url,
            ca_file: args.ca_file.clone(),
            cert_file: args.cert_file.clone(),
            key_file: args.key_file.clone(),
            username: args.username.clone(),
            password_file: args.password_file.clone(),
        },
        delay: args.delay,
        iterations: args.iterations,
        json: args.json,
        sort: top::SortKey::by_name(&args.sort)
            .expect("clap accepts only the values of signals::top_sort_names"),
        max_rows: args.rows,
        batch: args.batch,
    }
}

/// Log to stderr at `level`, or nowhere with `discard`.
fn init_logging(level: &str, discard: bool) {
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let writer = match discard {
        true => BoxMakeWriter::new(std::io::sink),
        false => BoxMakeWriter::new(std::io::stderr),
    };
    tracing_subscriber::fmt()
        .with_writer(writer)
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
    let listener = http::bind(cli.listen_address)?;
    let web_config = match &cli.web_config_file {
        Some(path) => Some(Arc::new(http::WebConfig::load(path)?)),
        None => None,
    };
    let pipeline::Parts {
        runtime,
        kube,
        worker,
        stack_tables,
        registry,
    } = pipeline::start(&cli, cli.pid_label)?;
    let probes = worker.probes().to_vec();
    // The stack tables go to the --debug.callsites harvester when it runs
    // (every process sampled), else to the findings' on-demand sampling.
    let (harvested, on_demand) = match cli.debug_callsites {
        true => (stack_tables, None),
        false => (None, stack_tables),
    };
    let callsites = harvested
        .map(|tables| pipeline::start_call_sites(tables, &registry))
        .transpose()?;
    let findings =
        pipeline::start_findings(&cli, cli.findings_window, &worker, on_demand, &registry)?;

    runtime.block_on(async {
        if let Some((client, opts, state)) = kube {
            tokio::spawn(labels::kubernetes::watch_pods(client, opts, state));
        }
        let endpoints = http::Endpoints {
            telemetry_path: cli.telemetry_path,
            registry,
            probes,
            callsites: callsites.as_ref().map(|(folded, _)| folded.clone()),
            findings: findings.as_ref().map(|(shared, _)| shared.clone()),
            web_config,
            limits: http::connection_limits(
                cli.max_connections,
                cli.read_header_timeout,
                cli.idle_timeout,
            ),
        };
        http::serve(listener, endpoints, shutdown_signal()).await
    })?;
    drop(findings); // stops the engine, which holds a worker handle
    drop(callsites); // stops the harvester, which holds the tables' fds
    info!("shutting down: detaching BPF programs");
    // The registry (and the collector's worker handle) went with the server;
    // dropping the last handle detaches everything.
    drop(worker);
    Ok(())
}

/// `slowpath doctor`: the same programs, observed for a while, then a report.
fn run_doctor(cli: &Cli, args: &DoctorArgs) -> Result<()> {
    if cli.kubernetes {
        // a warning, not an error: a DaemonSet's environment turns it on for
        // every command run in the agent's container
        warn!("--kubernetes.enabled: the doctor's report names comm and cgroup, not pods (the agent and slowpath top label pods)");
    }
    preflight::warn_if_kernel_too_old();
    preflight::check_capabilities()?;
    let memlock = memlock::settle(&kernel::release().unwrap_or_default());
    bpf::check_btf(&cli.btf_path)?;
    let btf = bpf::KernelBtf::open(&cli.btf_path)?;
    let kernel = signals::kernel_setup(&cli.signals, &btf);
    let options = WorkerOptions {
        load: pipeline::load_options(cli, true, memlock),
        pid_label: true,
        // every process of the observation, none dropped or folded
        limits: procs::SeriesLimits {
            max_series: usize::MAX,
            max_comms_per_cgroup: usize::MAX,
            retired_grace: std::time::Duration::MAX,
        },
        signals: cli.signals.clone(),
        // the node checks run once at start; the doctor measures the node itself
        check_every: Some(std::time::Duration::from_secs(3600)),
        pods: None,
        cost: doctor_cost_options(args.duration),
    };
    let mut worker = Worker::start(options, kernel, btf)?;
    pipeline::log_attached(worker.probes(), &cli.signals);
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
        args: cli.signals.clone(),
    };
    doctor::run(&worker, stacks.as_ref(), &opts, &cli.sysfs)
}

/// The doctor's statistics window (it runs as root): one, at the end of the
/// observation (1 s, or half of a shorter one), so that the processes it
/// watches run without the statistics' clock reads until then.
fn doctor_cost_options(observe: std::time::Duration) -> bpf::CostOptions {
    use std::time::Duration;
    let window = (observe / 2).clamp(Duration::from_millis(100), Duration::from_secs(1));
    bpf::CostOptions {
        interval: Some(observe + Duration::from_secs(3600)),
        window,
        first_after: observe.saturating_sub(window + Duration::from_millis(300)),
    }
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
