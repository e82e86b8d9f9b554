//! The kernel's run-time statistics of BPF programs (`BPF_ENABLE_STATS`,
//! `run_time_ns` and `run_cnt` of `bpf_prog_info`) as the cost meter
//! (`cost.rs`) reads them: turned on for a window, summed per hook, less
//! what the statistics themselves add to each timed run.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Context, Result};
use tracing::info;

use super::loaded::Loaded;
use super::stats::{per_hook, prog_info};

/// Name of the empty program test-run in each window.
pub(crate) const STATS_FLOOR_PROGRAM: &str = "stats_floor";

/// Test runs of the empty program per window: enough for a stable mean
/// (each is one bpf(2) call, about a microsecond).
const FLOOR_RUNS: u32 = 256;

/// Turn the kernel's run-time statistics on for as long as the fd lives.
pub(super) fn enable_stats() -> Result<OwnedFd> {
    // SAFETY: a plain bpf(2) command with no pointer argument; it returns a
    // new fd or a negative errno.
    let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    if fd < 0 {
        let err = std::io::Error::from_raw_os_error(-fd);
        if err.kind() == std::io::ErrorKind::PermissionDenied {
            bail!("BPF_ENABLE_STATS refused: it needs CAP_SYS_ADMIN ({err})");
        }
        bail!("BPF_ENABLE_STATS failed (kernel 5.8+): {err}");
    }
    // SAFETY: `fd` is a new descriptor the kernel just returned to us and
    // nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The time per run between two (run_time_ns, run_cnt) readings; `None`
/// when nothing ran.
pub(super) fn per_run((t0, c0): (u64, u64), (t1, c1): (u64, u64)) -> Option<f64> {
    let (dt, dc) = (t1.saturating_sub(t0), c1.saturating_sub(c0));
    (dc > 0).then(|| dt as f64 / dc as f64)
}

/// What the statistics add to each run they time: test-run the empty
/// program [`FLOOR_RUNS`] times and take its measured time per run.
/// `Ok(None)` when the statistics are off (nothing measured); an error when
/// a test run fails.
pub(super) fn stats_floor_ns(loaded: &Loaded<'_>) -> Result<Option<f64>> {
    let prog = &loaded.skel.progs.stats_floor;
    let fd = prog.as_fd().as_raw_fd();
    let Some(before) = prog_info(fd) else {
        return Ok(None);
    };
    for _ in 0..FLOOR_RUNS {
        prog.test_run(libbpf_rs::ProgramInput::default())
            .with_context(|| format!("test-running {STATS_FLOOR_PROGRAM}"))?;
    }
    let Some(after) = prog_info(fd) else {
        return Ok(None);
    };
    Ok(per_run(
        (before.run_time_ns, before.run_cnt),
        (after.run_time_ns, after.run_cnt),
    ))
}

/// A hook's own time per run: the kernel's measured figure less what the
/// statistics add to it (`floor`, when measured), at least 0.
pub(super) fn less_floor(measured: f64, floor: Option<f64>) -> f64 {
    (measured - floor.unwrap_or(0.0)).max(0.0)
}

/// Each hook's (run_time_ns, run_cnt) summed over its loaded programs, in
/// table order, as the kernel counts them while statistics are on.
pub(super) fn kernel_totals(loaded: &Loaded<'_>) -> Vec<(u64, u64)> {
    per_hook(loaded, |i| RunTotals(i.run_time_ns, i.run_cnt))
        .into_iter()
        .map(|t| t.map_or((0, 0), |RunTotals(ns, n)| (ns, n)))
        .collect()
}

/// (run_time_ns, run_cnt), summable.
#[derive(Default)]
struct RunTotals(u64, u64);

impl std::ops::AddAssign for RunTotals {
    fn add_assign(&mut self, other: Self) {
        self.0 += other.0;
        self.1 += other.1;
    }
}

/// The sysctl that keeps the kernel's run-time statistics on for everyone
/// (not namespaced: the host's, in a container too).
const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// How the programs' in-kernel time per run is known, decided at start
/// (`method` label of `slowpath_probe_run_seconds_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostMethod {
    /// Timed by the kernel's run-time statistics in the meter's windows.
    Measured,
    /// From the programs' own timing of one run in 1,024, where the
    /// statistics are not allowed or windows are off (see the module's text).
    Estimated,
}

impl CostMethod {
    /// The label value: `measured` or `estimated`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Measured => "measured",
            Self::Estimated => "estimated",
        }
    }
}

/// [`CostMethod::Measured`] when `windows` are on and the kernel's statistics
/// are allowed (BPF_ENABLE_STATS works, or the sysctl has them on), else
/// [`CostMethod::Estimated`], said once in the log.
pub(super) fn cost_method(windows: bool) -> CostMethod {
    let why = if !windows {
        "--bpf.stats-interval is 0".to_string()
    } else {
        match enable_stats() {
            Ok(_) => return CostMethod::Measured,
            Err(_) if sysctl_stats_on() => return CostMethod::Measured,
            Err(err) => format!("{err:#}, and {STATS_SYSCTL} is not 1"),
        }
    };
    info!(
        why,
        "in-kernel time of slowpath's programs estimated from their own timing of one run in \
         1024 (slowpath_probe_run_seconds_total{{method=\"estimated\"}}): for the kernel's \
         measure, grant CAP_SYS_ADMIN or set kernel.bpf_stats_enabled=1"
    );
    CostMethod::Estimated
}

/// Whether `kernel.bpf_stats_enabled` has the statistics on.
fn sysctl_stats_on() -> bool {
    std::fs::read_to_string(STATS_SYSCTL).is_ok_and(|v| v.trim() == "1")
}
