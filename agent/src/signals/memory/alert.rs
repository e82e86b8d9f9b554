//! The memory signal's per-process alert: direct compaction stalls.

use super::DIRECT_COMPACTION;
use crate::signals::{ProcessAlert, Setting};

// Its per-process alert (the chart's PrometheusRule makes it from this).
pub const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathDirectCompactionStalls",
    rate: &DIRECT_COMPACTION,
    threshold: Setting {
        key: "directCompactionStallRatio",
        default: "0.05",
        why: "seconds per second a process spends in direct compaction",
    },
    for_: Setting {
        key: "directCompaction",
        default: "10m",
        why: "",
    },
    findings: &[&super::findings::DIRECT_COMPACTION_STALLS],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} stalls in direct compaction {{ $value | humanizePercentage }} of the time",
    description: "spends {{ $value | humanizePercentage }} of its time compacting memory inside allocations: latency it feels directly. Check slowpath_thp_settings_info.",
    runbook: "direct-compaction-stalls",
};
