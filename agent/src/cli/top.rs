//! The flags of `slowpath top`.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::{Args, ValueEnum};

use crate::flag_values::{parse_delay, whole_number};

/// Flags of `slowpath top`.
#[derive(Args, Debug, Clone)]
pub struct TopArgs {
    /// Time between refreshes, in seconds (`2`, `0.5`) or as a duration
    /// (`500ms`): the rates are over it.
    #[arg(short = 'd', long, default_value = "2", value_parser = parse_delay)]
    pub delay: Duration,
    /// Plain-text frames on standard output, one table per refresh with a
    /// blank line between (as `top -b`); also when standard output is not
    /// a terminal or TERM is dumb.
    #[arg(short = 'b', long)]
    pub batch: bool,
    /// Frames to print, then exit (batch mode); without it, until interrupted.
    #[arg(short = 'n', long, value_parser = whole_number(1u32, u32::MAX))]
    pub iterations: Option<u32>,
    /// One JSON object per row and refresh (JSON lines) instead of tables (batch mode).
    #[arg(long)]
    pub json: bool,
    /// Column to sort by, highest first: `cpu` is the estimated share of a
    /// CPU the slow paths cost (the node's measured cost of each event),
    /// `events` adds every slow path's events up.
    #[arg(short = 's', long, default_value = "cpu",
          value_parser = PossibleValuesParser::new(crate::signals::top_sort_names()))]
    pub sort: String,
    /// Rows per table in batch mode; 0 for all.
    #[arg(long, default_value_t = 30)]
    pub rows: usize,
    /// Where the numbers come from: `auto` reads this host's agent and,
    /// when nothing listens there (connection refused), loads the BPF
    /// programs in this process as `slowpath doctor` does (as root: the
    /// agent's privileges, a series per pid, cgroup paths and, with
    /// --kubernetes.enabled, pods); with --agent.url, or `agent`, it never
    /// loads them; `standalone` always does.
    #[arg(long, value_enum, default_value = "auto")]
    pub source: TopSource,
    /// The agent's metrics URL. Default: this host's --web.listen-address
    /// (loopback when it listens on every address) and --web.telemetry-path,
    /// over https when a certificate flag is given.
    #[arg(long = "agent.url", value_name = "URL")]
    pub agent_url: Option<String>,
    /// PEM CA certificate(s) that sign the agent's certificate (https).
    #[arg(long = "agent.ca-file", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for an agent that asks for one (with --agent.key-file).
    #[arg(long = "agent.cert-file", value_name = "FILE")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of --agent.cert-file.
    #[arg(long = "agent.key-file", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Basic auth user, for an agent whose web config asks for it (with --agent.password-file).
    #[arg(long = "agent.username", value_name = "USER")]
    pub username: Option<String>,
    /// File holding the basic auth password (a trailing newline is dropped).
    #[arg(long = "agent.password-file", value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

/// Sources of `slowpath top --source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TopSource {
    Auto,
    Agent,
    Standalone,
}
