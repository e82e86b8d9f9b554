//! Command-line flags, named after the Prometheus exporter convention.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};

use crate::bpf::{AttachType, KERNEL_BTF};
use crate::flag_values::{parse_duration, parse_duration_or_zero, whole_number};
use crate::signals::SignalArgs;

mod doctor;
mod top;

pub use doctor::{DoctorArgs, Format};
pub use top::{TopArgs, TopSource};

/// Every flag can also be set in the environment (`SLOWPATH_WEB_LISTEN_ADDRESS`
/// for `--web.listen-address`, ...), which is how the container image, the
/// Helm chart and the systemd unit's `/etc/default/slowpath` configure it; a
/// flag on the command line wins.
///
/// slowpath: counts, per process, the kernel slow paths that cheap-looking
/// calls fall into (vDSO clock fallbacks, rt_sigprocmask storms, sleep
/// loops, THP faults, memory compaction) and serves them as Prometheus metrics.
#[derive(Parser, Debug)]
#[command(name = "slowpath", version = crate::version::LONG, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address to serve metrics on: [HOST]:PORT; ":9891" listens on every IPv4 address.
    #[arg(
        long = "web.listen-address",
        env = "SLOWPATH_WEB_LISTEN_ADDRESS",
        default_value = ":9891",
        value_name = "[HOST]:PORT",
        value_parser = parse_listen_address
    )]
    pub listen_address: SocketAddr,

    /// Path under which to expose metrics.
    #[arg(
        long = "web.telemetry-path",
        env = "SLOWPATH_WEB_TELEMETRY_PATH",
        default_value = "/metrics",
        value_name = "PATH",
        value_parser = parse_telemetry_path
    )]
    pub telemetry_path: String,

    /// Most open HTTP connections; at the limit a new one closes the
    /// longest-idle one. Also capped at the soft file limit less 256.
    #[arg(
        long = "web.max-connections",
        env = "SLOWPATH_WEB_MAX_CONNECTIONS",
        default_value_t = 512,
        value_name = "N",
        value_parser = whole_number(1u16, u16::MAX)
    )]
    pub max_connections: u16,

    /// A client must send a whole request header within this time, or its
    /// connection is closed (slowloris).
    #[arg(long = "web.read-header-timeout", env = "SLOWPATH_WEB_READ_HEADER_TIMEOUT",
          default_value = "10s", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub read_header_timeout: std::time::Duration,

    /// A connection with no request in flight for this long is closed (keep
    /// it above the scrape interval, so scrapes reuse their connection).
    #[arg(long = "web.idle-timeout", env = "SLOWPATH_WEB_IDLE_TIMEOUT",
          default_value = "2m", value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub idle_timeout: std::time::Duration,

    /// TLS, client certificates, basic auth, response headers and a rate
    /// limit, in the Prometheus exporter-toolkit format (the node_exporter
    /// and Prometheus --web.config.file). Re-read when it or a certificate
    /// it names changes.
    #[arg(
        long = "web.config.file",
        env = "SLOWPATH_WEB_CONFIG_FILE",
        value_name = "FILE"
    )]
    pub web_config_file: Option<PathBuf>,

    /// Log level.
    #[arg(long = "log.level", global = true, env = "SLOWPATH_LOG_LEVEL", default_value = "info",
          value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub log_level: String,

    /// Add a `pid` label (the tgid) to per-process series. Off by default:
    /// every process then gets its own series (dropped
    /// --metrics.retired-series-grace after it exits).
    #[arg(long = "metrics.pid-label", env = "SLOWPATH_METRICS_PID_LABEL")]
    pub pid_label: bool,

    /// Most distinct per-process series (comm, cgroup[, pid]) kept at once;
    /// the processes of new ones beyond it are counted in one series
    /// comm="[over the limit]", cgroup="[over the limit]" and in
    /// slowpath_series_folded_total{limit="series"}.
    #[arg(long = "metrics.max-series", env = "SLOWPATH_METRICS_MAX_SERIES", default_value_t = 10_000,
          value_name = "N", value_parser = whole_number(1u64, 10_000_000))]
    pub max_series: u64,

    /// Most distinct comm values per cgroup; the processes of new comms
    /// beyond it are counted in the cgroup's comm="[over the limit]" series
    /// and in slowpath_series_folded_total{limit="comms_per_cgroup"}.
    #[arg(long = "metrics.max-comms-per-cgroup", env = "SLOWPATH_METRICS_MAX_COMMS_PER_CGROUP",
          default_value_t = 200, value_name = "N", value_parser = whole_number(1u64, 1_000_000))]
    pub max_comms_per_cgroup: u64,

    /// How long the series of processes that are gone stay once their
    /// cgroup (or, with --metrics.pid-label, their process) is gone too,
    /// counted from their last change. A few scrape intervals at least.
    #[arg(long = "metrics.retired-series-grace", env = "SLOWPATH_METRICS_RETIRED_SERIES_GRACE",
          default_value = "5m", value_name = "DURATION", value_parser = parse_duration)]
    pub retired_series_grace: Duration,

    /// Capacity of the kernel's process table (thread groups tracked at
    /// once; 1304 bytes each, preallocated). Beyond it events are counted in
    /// slowpath_lost_events_total{reason="process_table_full"}.
    #[arg(long = "bpf.max-processes", global = true, env = "SLOWPATH_BPF_MAX_PROCESSES", default_value_t = 16384, value_name = "N",
          value_parser = whole_number(64u32, 4_194_304))]
    pub max_processes: u32,

    /// Size in bytes of the ring buffer that carries the final counts of
    /// exiting processes (a power of two, at least 4096).
    #[arg(long = "bpf.ringbuf-bytes", env = "SLOWPATH_BPF_RINGBUF_BYTES", default_value_t = 1 << 20, value_name = "BYTES",
          value_parser = parse_ringbuf_bytes)]
    pub ringbuf_bytes: u32,

    /// Attach with this type instead of probing the kernel (default: the
    /// cheapest the kernel accepts: fentry for the syscall hook, then tp_btf,
    /// then raw_tp). Only the syscall hook has fentry programs; with
    /// `fentry` the tracepoint hooks use tp_btf.
    #[arg(
        long = "bpf.attach-type",
        global = true,
        env = "SLOWPATH_BPF_ATTACH_TYPE",
        value_enum,
        value_name = "TYPE"
    )]
    pub attach_type: Option<AttachType>,

    /// How often the kernel's run-time statistics are turned on, for
    /// --bpf.stats-window, to measure the in-kernel time of slowpath's
    /// programs (slowpath_probe_run_seconds_total{method="measured"}); 0
    /// never. While they are on, every BPF program on the node pays two clock
    /// reads per run. Needs CAP_SYS_ADMIN (BPF_ENABLE_STATS) unless
    /// kernel.bpf_stats_enabled is on; without either, or with 0, the time is
    /// estimated from the programs' own timing of one run in 1024
    /// (method="estimated").
    #[arg(long = "bpf.stats-interval", env = "SLOWPATH_BPF_STATS_INTERVAL", default_value = "1m",
          value_name = "DURATION", value_parser = parse_duration_or_zero)]
    pub stats_interval: Duration,

    /// How long each statistics window lasts (see --bpf.stats-interval).
    #[arg(long = "bpf.stats-window", env = "SLOWPATH_BPF_STATS_WINDOW", default_value = "1s",
          value_name = "DURATION", value_parser = parse_duration)]
    pub stats_window: Duration,

    /// Kernel BTF used for CO-RE relocations (for kernels without
    /// /sys/kernel/btf/vmlinux, a BTF file for the exact running kernel).
    #[arg(long = "bpf.btf-path", global = true, env = "SLOWPATH_BPF_BTF_PATH", default_value = KERNEL_BTF, value_name = "FILE")]
    pub btf_path: PathBuf,

    /// Root of sysfs (clocksource and THP settings); "/host/sys" in a container.
    #[arg(
        long = "path.sysfs",
        global = true,
        env = "SLOWPATH_PATH_SYSFS",
        default_value = "/sys",
        value_name = "DIR"
    )]
    pub sysfs: PathBuf,

    /// Each signal's own flags (`signals::SignalArgs`).
    #[command(flatten)]
    pub signals: SignalArgs,

    /// Add `namespace`, `pod` and `container` labels from the Kubernetes API
    /// (a watch of this node's pods; needs get/list/watch on pods).
    #[arg(
        global = true,
        long = "kubernetes.enabled",
        env = "SLOWPATH_KUBERNETES_ENABLED"
    )]
    pub kubernetes: bool,

    /// Kubeconfig for the Kubernetes API (default: the in-cluster service
    /// account, else $KUBECONFIG or ~/.kube/config).
    #[arg(
        global = true,
        long = "kubeconfig",
        env = "KUBECONFIG",
        value_name = "FILE"
    )]
    pub kubeconfig: Option<PathBuf>,

    /// This node's name in Kubernetes; in a DaemonSet, NODE_NAME from the
    /// downward API (spec.nodeName). Default: the host name.
    #[arg(
        global = true,
        long = "kubernetes.node-name",
        env = "NODE_NAME",
        value_name = "NAME"
    )]
    pub node_name: Option<String>,

    /// How long series of a deleted pod are kept before they are dropped.
    #[arg(global = true, long = "kubernetes.deleted-pod-grace", env = "SLOWPATH_KUBERNETES_DELETED_POD_GRACE",
          default_value = "5m", value_name = "DURATION", value_parser = parse_duration)]
    pub deleted_pod_grace: Duration,

    /// Sample user stacks at the counted syscalls (at most one per
    /// jiffy, 1 to 10 ms, per process), symbolize them and serve them as folded
    /// stacks (flame graph input) at /debug/callsites. Off by default: it
    /// adds a stack walk per sample and 6 MiB of kernel tables.
    #[arg(long = "debug.callsites", env = "SLOWPATH_DEBUG_CALLSITES")]
    pub debug_callsites: bool,

    /// Length of the sliding window the agent's findings are judged on (the
    /// doctor's rules and thresholds; re-judged every quarter of it); 0
    /// turns findings off (no slowpath_finding_info, /debug/findings 404).
    /// `slowpath top` running standalone judges on at most 20 s of it.
    #[arg(long = "findings.window", global = true, env = "SLOWPATH_FINDINGS_WINDOW", default_value = "1m",
          value_name = "DURATION", value_parser = parse_findings_window)]
    pub findings_window: Duration,

    /// Most findings shown at once, per finding and process; the ones
    /// beyond are counted in slowpath_findings_over_limit.
    #[arg(long = "findings.max", env = "SLOWPATH_FINDINGS_MAX", default_value_t = 100,
          value_name = "N", value_parser = whole_number(1u64, 10_000))]
    pub findings_max: u64,

    /// How long a finding stays shown after its rule stops holding.
    #[arg(long = "findings.grace", env = "SLOWPATH_FINDINGS_GRACE", default_value = "2m",
          value_name = "DURATION", value_parser = parse_duration_or_zero)]
    pub findings_grace: Duration,

    /// Testing only (cargo feature fault-injection): make the kernel refuse
    /// this probe (attached as raw_tp to a tracepoint that does not exist)
    /// to exercise degraded operation.
    #[cfg(feature = "fault-injection")]
    #[arg(long = "bpf.test-break-probe", hide = true, value_name = "PROBE")]
    pub break_probe: Option<String>,

    /// Testing only (cargo feature fault-injection): make the verifier
    /// refuse both programs of the mm_page_alloc hook (a call to a helper no
    /// kernel has), to exercise per-hook degradation at load.
    #[cfg(feature = "fault-injection")]
    #[arg(long = "bpf.test-refuse-probe", hide = true, value_name = "PROBE",
          value_parser = ["mm_page_alloc"])]
    pub refuse_probe: Option<String>,
}

/// What to run; without a subcommand, the agent.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Observe this node (or one process or cgroup) for a while and print
    /// ranked findings: which slow path, which processes, the evidence, the
    /// likely cause and the fix.
    Doctor(DoctorArgs),
    /// This node's slow paths per process, live, from the agent running on
    /// it: each slow path's rate, the median requested timeout and the
    /// findings, highest first. Full screen on a terminal; plain-text
    /// frames (as `top -b`) or JSON lines with --batch.
    Top(TopArgs),
    /// Print the completion script for SHELL on standard output (the .deb
    /// installs bash's, zsh's and fish's): `source <(slowpath completions
    /// bash)`.
    Completions(CompletionsArgs),
    /// Write the man pages (slowpath.1 and one per subcommand,
    /// slowpath-top.1, ...) into DIR: how the package gets them.
    #[command(hide = true)]
    Man(ManArgs),
    /// Print every signal's declaration (collector, families, hooks,
    /// syscalls, call kinds, top columns, alert, known sources, runbook) and
    /// the agent's own families as JSON: what the tests and generators read
    /// instead of lists of their own.
    #[command(hide = true)]
    Signals,
}

/// Arguments of `slowpath completions`.
#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// Arguments of `slowpath man`.
#[derive(Args, Debug, Clone)]
pub struct ManArgs {
    /// Where the pages go (made if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Exit status of a wrong command line (unknown flag, a value that does not
/// parse or is out of range, flags that contradict each other), as clap and
/// getopt tools use it; a start-up failure (port in use, no BTF, missing
/// privileges, a bad web config file) exits 1.
pub const USAGE_ERROR: u8 = 2;

/// Parse the command line. A wrong one ends here with exit status 2: a bad
/// value as one line naming the flag, the value and what to give instead;
/// anything else (unknown flag, `--help`, `--version`) as clap prints it.
pub fn parse() -> Result<Cli, ExitCode> {
    let cli = Cli::try_parse().map_err(exit_on_parse_error)?;
    cli.check().map_err(|problem| usage_error(&problem))?;
    Ok(cli)
}

fn usage_error(line: &str) -> ExitCode {
    eprintln!("slowpath: error: {line}");
    ExitCode::from(USAGE_ERROR)
}

fn exit_on_parse_error(err: clap::Error) -> ExitCode {
    match bad_value_line(&err) {
        Some(line) => usage_error(&line),
        None => err.exit(),
    }
}

/// The one line for a flag value clap refused: `bad --FLAG "VALUE": what
/// to give instead` (the value parser's reason, or the values allowed).
/// `None` for every other parse error.
fn bad_value_line(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    use std::error::Error;
    let context = |kind| match err.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    };
    // "--web.listen-address <[HOST]:PORT>": the flag alone
    let arg = context(ContextKind::InvalidArg)?;
    let flag = arg.split(' ').next().unwrap_or(&arg);
    let value = context(ContextKind::InvalidValue)?;
    let expected = match err.kind() {
        ErrorKind::ValueValidation => err.source()?.to_string(),
        ErrorKind::InvalidValue => format!("expected one of {}", context(ContextKind::ValidValue)?),
        _ => return None,
    };
    Some(format!("bad {flag} {value:?}: {expected}"))
}

/// Parse `--web.listen-address`: `:PORT` (every IPv4 address), `HOST:PORT`,
/// `[V6]:PORT`.
pub fn parse_listen_address(s: &str) -> Result<SocketAddr, String> {
    let bad = || "expected [HOST]:PORT, e.g. :9891 or 127.0.0.1:9891".to_string();
    let with_host = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    let (_, port) = with_host.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    with_host
        .to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)
}

/// `--web.telemetry-path`: an absolute path other than `/`.
fn parse_telemetry_path(s: &str) -> Result<String, String> {
    if !s.starts_with('/') || s.len() < 2 {
        return Err("expected a path that starts with / and names a page, e.g. /metrics".into());
    }
    Ok(s.to_string())
}

fn parse_ringbuf_bytes(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n >= 4096 && n.is_power_of_two() => Ok(n),
        _ => Err("expected a power of two of at least 4096 bytes, e.g. 1048576".into()),
    }
}

/// A findings window: 0 (off), or 4 s to 1 h (it is judged every quarter
/// of it, and rates over a longer one hide storms).
pub fn parse_findings_window(s: &str) -> Result<Duration, String> {
    let d = parse_duration_or_zero(s)?;
    if !d.is_zero() && !(Duration::from_secs(4)..=Duration::from_secs(3600)).contains(&d) {
        return Err("expected 0 (off) or a duration from 4s to 1h".into());
    }
    Ok(d)
}

impl Cli {
    /// What no value parser can see: flags that contradict each other.
    fn check(&self) -> Result<(), String> {
        let interval = self.stats_interval;
        if !interval.is_zero() && self.stats_window >= interval {
            return Err(format!(
                "--bpf.stats-window ({}) must be shorter than --bpf.stats-interval ({}): \
                 shorten the window or lengthen the interval",
                humantime::format_duration(self.stats_window),
                humantime::format_duration(interval)
            ));
        }
        Ok(())
    }

    /// The statistics windows (`--bpf.stats-interval`, `--bpf.stats-window`).
    pub fn cost_options(&self) -> crate::bpf::CostOptions {
        crate::bpf::CostOptions {
            interval: (!self.stats_interval.is_zero()).then_some(self.stats_interval),
            window: self.stats_window,
            first_after: crate::bpf::FIRST_WINDOW_AFTER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_exporter_convention() {
        let cli = Cli::try_parse_from(["slowpath"]).unwrap();
        assert_eq!(cli.listen_address, "0.0.0.0:9891".parse().unwrap());
        assert_eq!(cli.telemetry_path, "/metrics");
        assert!(!cli.pid_label);
        assert_eq!(cli.signals.clock.canary_interval, Duration::from_secs(15));
        assert_eq!(cli.attach_type, None);
        assert_eq!(
            cli.signals.collectors,
            crate::signals::Collectors::default()
        );
    }

    #[test]
    fn collectors_switch_off_for_the_agent_and_the_doctor() {
        for args in [
            &["slowpath", "--no-collector.timer", "--no-collector.clock"][..],
            &[
                "slowpath",
                "doctor",
                "--no-collector.timer",
                "--no-collector.clock",
            ],
            &[
                "slowpath",
                "--no-collector.timer",
                "doctor",
                "--no-collector.clock",
            ],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            let on: Vec<&str> = cli.signals.enabled().map(|s| s.name).collect();
            let want = crate::signals::test_support::signal_names_but(&["clock", "timer"]);
            assert_eq!(on, want, "{args:?}");
        }
        let err = Cli::try_parse_from(["slowpath", "--no-collector.nosuch"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnknownArgument);
    }

    #[test]
    fn every_public_flag_has_an_environment_variable() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        for arg in cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_long().is_some())
        {
            let long = arg.get_long().unwrap();
            let want = match long {
                "help" | "version" => continue,
                // SLOWPATH_COLLECTOR_<NAME>=false is the switch-off flag's
                // variable: its twin --collector.<name> has it
                off if off.starts_with("no-collector.") => {
                    assert_eq!(arg.get_env(), None, "--{long}");
                    continue;
                }
                // the names every Kubernetes tool and manifest uses
                "kubeconfig" => "KUBECONFIG".to_string(),
                "kubernetes.node-name" => "NODE_NAME".to_string(),
                _ => format!("SLOWPATH_{}", long.replace(['.', '-'], "_").to_uppercase()),
            };
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            assert_eq!(env.as_deref(), Some(want.as_str()), "--{long}");
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_address(":9891").unwrap(),
            "0.0.0.0:9891".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("[::1]:9891").unwrap(),
            "[::1]:9891".parse().unwrap()
        );
        for bad in ["9891", ":99999", "nohost:", ":http"] {
            let err = parse_listen_address(bad).unwrap_err();
            assert!(
                err.starts_with("expected [HOST]:PORT, e.g."),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Cli::try_parse_from(["slowpath", "--no-such-flag"]).is_err());
        assert!(Cli::try_parse_from(["slowpath", "--bpf.ringbuf-bytes", "5000"]).is_err());
        assert!(Cli::try_parse_from(["slowpath", "--canary.interval", "soon"]).is_err());
        for bad in ["0", "-5", "many", "inf", "NaN"] {
            let flag = format!("--timer.loop-threshold={bad}");
            let err = Cli::try_parse_from(["slowpath", &flag]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}");
        }
        for path in ["metrics", "/"] {
            let err = Cli::try_parse_from(["slowpath", "--web.telemetry-path", path]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation);
        }
        let raw = Cli::try_parse_from(["slowpath", "--bpf.attach-type", "raw-tp"]).unwrap();
        assert_eq!(raw.attach_type, Some(AttachType::RawTp));
    }

    /// The line a wrong value gets (exit status 2): the flag, the value,
    /// and what to give instead.
    fn bad_value(args: &[&str]) -> String {
        let mut argv = vec!["slowpath"];
        argv.extend_from_slice(args);
        bad_value_line(&Cli::try_parse_from(argv).unwrap_err()).unwrap()
    }

    #[test]
    fn a_bad_value_is_one_line_with_the_flag_the_value_and_the_fix() {
        let cases = [
            (
                &["--bpf.ringbuf-bytes=5000"][..],
                r#"bad --bpf.ringbuf-bytes "5000": expected a power of two of at least 4096 bytes, e.g. 1048576"#,
            ),
            (
                &["--canary.interval", "soon"],
                r#"bad --canary.interval "soon": expected a duration, e.g. 15s, 500ms, 1m (expected number at 0)"#,
            ),
            (
                &["--findings.window=2s"],
                r#"bad --findings.window "2s": expected 0 (off) or a duration from 4s to 1h"#,
            ),
            (
                &["--bpf.stats-window=1ms"],
                r#"bad --bpf.stats-window "1ms": too short: expected at least 100ms"#,
            ),
            (
                &["--web.max-connections=0"],
                r#"bad --web.max-connections "0": expected a whole number from 1 to 65535"#,
            ),
            (
                &["--bpf.max-processes=lots"],
                r#"bad --bpf.max-processes "lots": expected a whole number from 64 to 4194304"#,
            ),
            (
                &["doctor", "--pid=-1"],
                r#"bad --pid "-1": expected a whole number from 1 to 4194304"#,
            ),
            (
                &["--web.telemetry-path=/"],
                r#"bad --web.telemetry-path "/": expected a path that starts with / and names a page, e.g. /metrics"#,
            ),
            (
                &["--log.level=loud"],
                r#"bad --log.level "loud": expected one of error, warn, info, debug, trace"#,
            ),
        ];
        for (args, want) in cases {
            assert_eq!(bad_value(args), want, "{args:?}");
        }
        // an unknown flag keeps clap's message and usage
        let unknown = Cli::try_parse_from(["slowpath", "--no-such-flag"]).unwrap_err();
        assert_eq!(bad_value_line(&unknown), None);
    }

    #[test]
    fn a_window_as_long_as_the_interval_is_a_wrong_command_line() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).unwrap().check();
        let err = parse(&[
            "slowpath",
            "--bpf.stats-interval=1s",
            "--bpf.stats-window=1s",
        ])
        .unwrap_err();
        assert_eq!(
            err,
            "--bpf.stats-window (1s) must be shorter than --bpf.stats-interval (1s): \
             shorten the window or lengthen the interval"
        );
        assert!(parse(&[
            "slowpath",
            "--bpf.stats-interval=0",
            "--bpf.stats-window=5s"
        ])
        .is_ok());
        assert!(parse(&["slowpath"]).is_ok());
    }
}
