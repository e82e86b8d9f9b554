//! The flags of `slowpath doctor`.

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::flag_values::{parse_duration, whole_number};

/// Flags of `slowpath doctor`.
#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {
    /// How long to observe.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Only this process (tgid).
    #[arg(long, value_parser = whole_number(1u32, 4_194_304))]
    pub pid: Option<u32>,
    /// Only processes in this cgroup (v2 path, e.g. /system.slice/app.service) or below it.
    #[arg(long)]
    pub cgroup: Option<String>,
    /// Only processes with this comm.
    #[arg(long)]
    pub comm: Option<String>,
    /// Output: a report for a terminal, or JSON for automation (schema in docs/doctor.md).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// Output of `slowpath doctor --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}
