//! The limits that bound the series, and the over-the-limit series that
//! takes the process images beyond them.

use std::time::Duration;

/// `comm` of the series that takes the process images over a limit. 17
/// characters: a comm holds at most 15, so no process can take this name.
pub const OVER_LIMIT_COMM: &str = "[over the limit]";

/// `cgroup` of the series that takes the images over `--metrics.max-series`.
pub const OVER_LIMIT_CGROUP: &str = "[over the limit]";

/// The limits that bound the series, whatever the processes do.
#[derive(Clone, Debug)]
pub struct SeriesLimits {
    /// Distinct (comm, cgroup[, pid]) keys kept at once (`--metrics.max-series`).
    pub max_series: usize,
    /// Distinct comm values per cgroup (`--metrics.max-comms-per-cgroup`).
    pub max_comms_per_cgroup: usize,
    /// How long a series with no live process, whose cgroup (or, with the
    /// pid label, whose process) is gone, stays before it is dropped.
    pub retired_grace: Duration,
}

impl Default for SeriesLimits {
    fn default() -> Self {
        Self {
            max_series: 10_000,
            max_comms_per_cgroup: 200,
            retired_grace: Duration::from_secs(300),
        }
    }
}

/// Which limit folded a process image into an over-the-limit series (the
/// `limit` label of `slowpath_series_folded_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    CommsPerCgroup = 0,
    Series = 1,
}

/// `limit` label values, indexed by [`Limit`].
pub const LIMIT_NAMES: [&str; 2] = ["comms_per_cgroup", "series"];
