//! The findings the memory signal's diagnosis makes.

use crate::finding::Severity;
use crate::signals::FindingRule;

pub(crate) const DIRECT_COMPACTION_STALLS: FindingRule = FindingRule {
    id: "direct_compaction_stalls",
    severities: &[Severity::Warning],
    when:
        "1 %+ of a process's time in direct compaction; the fix depends on the THP `defrag` setting",
};

pub(crate) const THP_FAULTS: FindingRule = FindingRule {
    id: "thp_faults",
    severities: &[Severity::Warning, Severity::Info],
    when: "THP faults at 1+/s: a warning when 30 %+ fall back, else info with the settings",
};
