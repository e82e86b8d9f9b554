//! The memory signal's rows of docs/metrics.md: its families' labels and
//! hooks, and its cases in PromQL.

use super::{COMPACTION_RUNS, COMPACTION_SECONDS, THP_ALLOCS, THP_FALLBACKS};
use crate::signals::FamilyDoc;

pub // docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &THP_ALLOCS,
        labels: "none but the process's",
        counts: "transparent huge pages allocated on a page fault in process context",
        hook: "`kmem:mm_page_alloc`, see below",
    },
    FamilyDoc {
        family: &THP_FALLBACKS,
        labels: "none but the process's",
        counts: "THP fault allocations that failed (the fault fell back to 4 KiB pages)",
        hook: "`kmem:mm_page_alloc`",
    },
    FamilyDoc {
        family: &COMPACTION_RUNS,
        labels: "`trigger` (`direct`, `kcompactd`, `manual`)",
        counts: "compaction runs (one per zone), attributed to the task that ran them",
        hook: "`compaction:mm_compaction_begin`/`end`",
    },
    FamilyDoc {
        family: &COMPACTION_SECONDS,
        labels: "`trigger`",
        counts: "seconds between begin and end; `direct` is allocation stall time",
        hook: "same",
    },
];

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
pub const PROMQL: &[&str] = &[
    r#"THP faults and the fallback ratio
sum by (instance, comm) (rate(slowpath_thp_fault_allocs_total[5m]))
sum by (instance) (rate(slowpath_thp_fault_fallbacks_total[5m]))
  / (sum by (instance) (rate(slowpath_thp_fault_allocs_total[5m])) + sum by (instance) (rate(slowpath_thp_fault_fallbacks_total[5m])))"#,
    r#"compaction: direct-compaction stall seconds per second, per process
topk(10, sum by (instance, comm) (rate(slowpath_compaction_seconds_total{trigger="direct"}[5m])))"#,
];
