//! Memory: transparent huge pages allocated on a page fault and the faults
//! that fell back to 4 KiB pages (hook `mm_page_alloc`: order 9 with a THP
//! fault gfp mask, see `bpf/signals/memory.bpf.h`), memory compaction runs and
//! their time by trigger (hooks `mm_compaction_begin`/`_end`), and the
//! node's THP policy (sysfs `transparent_hugepage/{enabled,defrag}`).
//!
//! Doctor rules: direct compaction stalls, THP faults and their fallbacks.
//! Whose faults they are comes from the user stacks sampled at THP fault
//! allocations ([`SOURCES`]: the JVM pre-touching or growing its heap,
//! jemalloc and glibc malloc arenas); without a matching frame the cause
//! rests on the node's THP settings.

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::types::{sp_callsite_kind, sp_compaction_trigger, sp_counters};
use crate::bpf::{slot, Hook, KernelBtf, RodataPatch};
use crate::exposition::{counter, family, gauge, push_nonzero, with, Family};
use crate::finding::{Compose, Finding, Severity};
use crate::signals::CallKind;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeGauges, NodeNeeds, Observation, Recorded, Scrape,
    Signal, SignalArgs, Top, TopColumn, TopNode,
};
use crate::sources::CauseBasis;

mod alert;
mod docs;
mod findings;
pub mod settings;
mod sources;

use settings::ThpSettings;
pub use sources::SOURCES;

const TRIGGER_COUNT: usize = slot!(sp_compaction_trigger::SP_COMPACTION_TRIGGER_COUNT);

/// `trigger` label values, indexed by `enum sp_compaction_trigger`.
pub const TRIGGER_NAMES: [&str; TRIGGER_COUNT] = ["direct", "kcompactd", "manual"];

const DIRECT: usize = slot!(sp_compaction_trigger::SP_COMPACTION_DIRECT);

const _: fn(&sp_counters) -> &[u64; TRIGGER_COUNT] = |c| &c.compaction_runs;
const _: fn(&sp_counters) -> &[u64; TRIGGER_COUNT] = |c| &c.compaction_ns;

// Doctor thresholds.
/// Share of the observation a process spent in direct compaction.
const DIRECT_COMPACTION_RATIO: f64 = 0.01;
/// Share of THP fault allocations that failed, above which it is a warning.
const THP_FALLBACK_RATIO: f64 = 0.3;
/// THP faults per second of one process worth a finding.
const THP_FAULTS_PER_SEC: f64 = 1.0;

const THP_ALLOCS: Family = Family {
    name: "slowpath_thp_fault_allocs_total",
    help: "Transparent huge pages allocated on a page fault in process context (tracepoint kmem:mm_page_alloc, order 9 with a THP fault gfp mask)",
    kind: MetricType::COUNTER,
};
const THP_FALLBACKS: Family = Family {
    name: "slowpath_thp_fault_fallbacks_total",
    help: "THP fault allocations that failed, so the fault fell back to 4 KiB pages (tracepoint kmem:mm_page_alloc, final attempt returned no page)",
    kind: MetricType::COUNTER,
};
const COMPACTION_RUNS: Family = Family {
    name: "slowpath_compaction_runs_total",
    help: "Memory compaction runs of one zone (tracepoints compaction:mm_compaction_begin/end) by trigger, attributed to the task that ran them",
    kind: MetricType::COUNTER,
};
const COMPACTION_SECONDS: Family = Family {
    name: "slowpath_compaction_seconds_total",
    help: "Seconds spent in memory compaction runs (mm_compaction_begin to mm_compaction_end) by trigger; direct = allocation stall felt by the process",
    kind: MetricType::COUNTER,
};
/// `THP enabled=always defrag=madvise` on `slowpath top`'s node line, from
/// `slowpath_thp_settings_info`; nothing before the agent has read them.
fn thp_words(gauges: &NodeGauges) -> Option<String> {
    let (labels, _) = gauges.series(&THP_SETTINGS).first()?;
    Some(format!("THP enabled={} defrag={}", labels[0], labels[1]))
}

const THP_SETTINGS: Family = Family {
    name: "slowpath_thp_settings_info",
    help: "Transparent huge page policy from /sys/kernel/mm/transparent_hugepage/{enabled,defrag}, value 1",
    kind: MetricType::GAUGE,
};

// The rates the chart's recording rules record.
const FAULT_ALLOCS: Recorded = Recorded {
    name: "slowpath_thp_fault_allocs",
    family: &THP_ALLOCS,
    only: None,
    fleet: None,
};
const FAULT_FALLBACKS: Recorded = Recorded {
    name: "slowpath_thp_fault_fallbacks",
    family: &THP_FALLBACKS,
    only: None,
    fleet: Some(FleetRow {
        title: "THP fault fallbacks",
        meaning: "huge-page faults per second that fell back to 4 KiB pages",
    }),
};
const DIRECT_COMPACTION: Recorded = Recorded {
    name: "slowpath_direct_compaction_seconds",
    family: &COMPACTION_SECONDS,
    only: Some(("trigger", "direct")),
    fleet: Some(FleetRow {
        title: "Direct compaction stalls",
        meaning: "seconds per second spent compacting memory inside allocations",
    }),
};

pub const SIGNAL: Signal = Signal {
    name: "memory",
    summary: "huge-page faults, their fallbacks, compaction runs and stalls (hooks mm_page_alloc, mm_compaction_begin/end)",
    case: "THP faults and compaction",
    story: Some("huge-page allocations on page faults, their fallbacks, and the time processes spend compacting memory (direct compaction is a stall the process feels)."),
    families: &[
        &THP_ALLOCS,
        &THP_FALLBACKS,
        &COMPACTION_RUNS,
        &COMPACTION_SECONDS,
        &THP_SETTINGS,
    ],
    export,
    diagnose,
    enrich: None,
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_THP_FAULT,
        name: "thp_fault",
        what: "page faults that allocate a huge page (THP)",
    }],
    node: NodeNeeds {
        settings: Some(settings::read),
        check: None,
        measure: None,
    },
    kernel: KernelNeeds {
        hooks: &[
            Hook::new("mm_page_alloc"),
            Hook::new("mm_compaction_begin"),
            Hook::new("mm_compaction_end"),
        ],
        syscall_groups: &[],
        rodata: Some(sample_thp_faults),
        upkeep: None,
        map_sizes: Some(map_sizes),
        left_out: None,
    },
    top: Top {
        columns: &[
            TopColumn {
                header: "THP/s",
                meaning: "huge pages allocated on a page fault",
                sort: "thp",
                key: "thp_faults",
                family: &THP_ALLOCS,
                only: None,
                cost: EventCost::None,
                recorded: None,
                cell: Cell::PerSecond,
                common: false,
            },
            TopColumn {
                header: "THPFB/s",
                meaning: "page faults whose huge-page allocation fell back to 4 KiB pages",
                sort: "thp-fallback",
                key: "thp_fallbacks",
                family: &THP_FALLBACKS,
                only: None,
                cost: EventCost::None,
                recorded: None,
                cell: Cell::PerSecond,
                common: false,
            },
            TopColumn {
                header: "COMPACT%",
                meaning: "time in memory compaction, in % of one CPU",
                sort: "compaction",
                key: "compaction_seconds",
                family: &COMPACTION_SECONDS,
                only: None,
                cost: EventCost::Seconds,
                recorded: Some(&DIRECT_COMPACTION),
                cell: Cell::Percent,
                common: false,
            },
        ],
        timeouts: None,
        not_shown: &[(&COMPACTION_RUNS, "what a run costs is its time, COMPACT%")],
        node: Some(TopNode {
            gauges: &[(&THP_SETTINGS, &["enabled", "defrag"])],
            words: thp_words,
        }),
    },
    recorded: &[FAULT_ALLOCS, FAULT_FALLBACKS, DIRECT_COMPACTION],
    finding_rules: &[findings::DIRECT_COMPACTION_STALLS, findings::THP_FAULTS],
    family_docs: docs::FAMILY_DOCS,
    promql: docs::PROMQL,
    alert: Some(alert::ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## Direct compaction stalls

`SlowpathDirectCompactionStalls`: a process spends more than 5 % of its time (0.05 s/s) in direct
compaction for 10 min.

Direct compaction runs inside the allocating task when memory is fragmented and a high-order
allocation (typically a transparent huge page with `defrag=always`) cannot be served: the process
stalls. With THP `enabled=always`, system time rose above user time under load (the php-fpm case);
turning THP off halved it.

Find the cause: `slowpath_thp_settings_info` (defrag `always` makes every THP fault compact
synchronously), `slowpath_thp_fault_allocs_total` of the same process, and
`slowpath_compaction_seconds_total{trigger="kcompactd"}` for background compaction.

Fix: `echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag` (compaction in the
background, synchronous only for `madvise` regions), or `enabled=madvise` so only programs that ask
get huge pages; `never` where THP does not pay off.

## THP fault fallbacks

`SlowpathThpFaultFallbackRatio`: on a node, more than half of the THP fault allocations fail (with
at least one per second) for 15 min.

Processes pay for the attempt (and with `defrag=always` for compaction) without getting huge pages.
Find which: `sum by (comm) (rate(slowpath_thp_fault_fallbacks_total[5m]))`. Fix: the same settings
as above; for a database that wants huge pages, reserve them (hugetlbfs) instead.
"##;

/// The memory signal's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct MemoryArgs {
    /// Capacity of the in-flight compaction table (tasks compacting at once).
    #[arg(long = "bpf.max-compactions", env = "SLOWPATH_BPF_MAX_COMPACTIONS", default_value_t = 4096, value_name = "N",
          value_parser = crate::flag_values::whole_number(16u32, 1_048_576))]
    pub max_compactions: u32,
}

impl Default for MemoryArgs {
    fn default() -> Self {
        Self {
            max_compactions: 4096,
        }
    }
}

/// THP faults are sampled for every process whenever the findings sample
/// call sites on demand, without waiting to be asked: a fault burst is over
/// by the time it is a finding. Runs after the core settings
/// (`stacks_on_demand` is already written).
fn sample_thp_faults(_: &SignalArgs, _: &KernelBtf) -> RodataPatch {
    Box::new(|rodata| rodata.sample_thp_faults = rodata.stacks_on_demand)
}

/// `compaction_starts` (the start time of each compaction in flight, by
/// task) holds `--bpf.max-compactions` entries; beyond it a run is counted
/// in `slowpath_lost_events_total{reason="compaction_table_full"}`.
fn map_sizes(args: &SignalArgs) -> Vec<(&'static str, u32)> {
    vec![("compaction_starts", args.memory.max_compactions)]
}

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut thp_allocs = Vec::new();
    let mut thp_fallbacks = Vec::new();
    let mut runs = Vec::new();
    let mut seconds = Vec::new();
    for (key, series) in scrape.series() {
        let c = &series.counters;
        push_nonzero(&mut thp_allocs, with(key, &[]), c.thp_fault_alloc as f64);
        push_nonzero(
            &mut thp_fallbacks,
            with(key, &[]),
            c.thp_fault_fallback as f64,
        );
        for (i, trigger) in TRIGGER_NAMES.iter().enumerate() {
            let labels = with(key, &[("trigger", trigger)]);
            if c.compaction_runs[i] > 0 {
                seconds.push(counter(&labels, c.compaction_ns[i] as f64 / 1e9));
            }
            push_nonzero(&mut runs, labels, c.compaction_runs[i] as f64);
        }
    }
    let unread = ThpSettings::default();
    let thp = scrape.node.get::<ThpSettings>().unwrap_or(&unread);
    let settings = match (&thp.enabled, &thp.defrag) {
        (None, None) => vec![],
        (enabled, defrag) => vec![gauge(
            &[
                ("enabled", enabled.clone().unwrap_or_default()),
                ("defrag", defrag.clone().unwrap_or_default()),
            ],
            1.0,
        )],
    };
    vec![
        family(&THP_ALLOCS, thp_allocs),
        family(&THP_FALLBACKS, thp_fallbacks),
        family(&COMPACTION_RUNS, runs),
        family(&COMPACTION_SECONDS, seconds),
        family(&THP_SETTINGS, settings),
    ]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    [compaction_finding(obs), thp_finding(obs)]
        .into_iter()
        .flatten()
        .collect()
}

fn compaction_finding(obs: &Observation<'_>) -> Option<Finding> {
    let unread = ThpSettings::default();
    let (secs, thp) = (obs.secs, obs.node.get::<ThpSettings>().unwrap_or(&unread));
    let processes = obs.ranked(|d| {
        let ratio = d.c.compaction_ns[DIRECT] as f64 / 1e9 / secs;
        let detail = BTreeMap::from([
            (
                "direct_runs_per_second".to_string(),
                d.c.compaction_runs[DIRECT] as f64 / secs,
            ),
            (
                "thp_fault_allocs_per_second".to_string(),
                d.c.thp_fault_alloc as f64 / secs,
            ),
        ]);
        (ratio >= DIRECT_COMPACTION_RATIO).then_some((ratio, detail))
    });
    let top = processes.first()?;
    let defrag = thp.defrag.clone().unwrap_or_default();
    Some(Finding {
        id: findings::DIRECT_COMPACTION_STALLS.id,
        severity: Severity::Warning,
        title: format!(
            "{} spends {:.1} % of its time in direct compaction",
            top.identity.comm,
            top.per_second * 100.0
        ),
        evidence: thp_evidence(thp),
        processes,
        cause: "Allocations of high-order pages (transparent huge pages above all) find memory \
                fragmented and compact it synchronously, inside the process."
            .into(),
        fix: if defrag == "always" {
            "defrag is \"always\": echo defer+madvise > /sys/kernel/mm/transparent_hugepage/defrag \
             (compaction in the background, synchronous only for madvise regions)."
                .into()
        } else {
            "Make compaction asynchronous (defrag defer or defer+madvise), or limit THP to \
             programs that ask for it (enabled=madvise)."
                .into()
        },
        expected_gain: Some(
            "php-fpm under load with THP enabled=always: turning THP off halved system time".into(),
        ),
        cause_basis: CauseBasis::NodeSettings {
            from: format!("THP defrag={defrag} and the direct compaction time"),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_THP_FAULT),
        sources: Some((SOURCES, Compose::AfterRule)),
    })
}

fn thp_finding(obs: &Observation<'_>) -> Option<Finding> {
    let unread = ThpSettings::default();
    let (secs, thp) = (obs.secs, obs.node.get::<ThpSettings>().unwrap_or(&unread));
    let processes = obs.ranked(|d| {
        let (allocs, fallbacks) = (d.c.thp_fault_alloc as f64, d.c.thp_fault_fallback as f64);
        let rate = (allocs + fallbacks) / secs;
        if rate < THP_FAULTS_PER_SEC {
            return None;
        }
        let detail = BTreeMap::from([
            ("allocs_per_second".to_string(), allocs / secs),
            ("fallbacks_per_second".to_string(), fallbacks / secs),
            (
                "fallback_ratio".to_string(),
                fallbacks / (allocs + fallbacks),
            ),
        ]);
        Some((rate, detail))
    });
    processes.first()?;
    let fallbacks: f64 = processes
        .iter()
        .map(|p| p.detail["fallbacks_per_second"])
        .sum();
    let total: f64 = processes.iter().map(|p| p.per_second).sum();
    let ratio = fallbacks / total;
    let enabled = thp.enabled.clone().unwrap_or_default();
    let (severity, cause, fix) = thp_verdict(ratio, &enabled);
    Some(Finding {
        id: findings::THP_FAULTS.id,
        severity,
        title: format!(
            "THP fault allocations at {total:.0}/s, {:.0} % falling back",
            ratio * 100.0
        ),
        evidence: thp_evidence(thp),
        processes,
        cause,
        fix,
        expected_gain: None,
        cause_basis: CauseBasis::NodeSettings {
            from: format!("THP enabled={enabled} and the fault rates"),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_THP_FAULT),
        sources: Some((SOURCES, Compose::AfterRule)),
    })
}

/// Severity, cause and fix of THP faults at `ratio` falling back, under
/// `enabled`.
fn thp_verdict(ratio: f64, enabled: &str) -> (Severity, String, String) {
    if ratio >= THP_FALLBACK_RATIO {
        (
        Severity::Warning,
        format!(
            "{:.0} % of THP fault allocations fail: memory is fragmented, processes pay for the \
             attempts without getting huge pages.",
            ratio * 100.0
        ),
        "Make compaction asynchronous (defrag defer+madvise) or reserve huge pages (hugetlbfs) \
         for the programs that need them."
            .to_string(),
    )
    } else {
        (
            Severity::Info,
            format!("Processes fault in transparent huge pages (enabled={enabled})."),
            if enabled == "always" {
                "Fine for programs that use large heaps; if system time is high or latency spikes \
             under load, try enabled=madvise so only programs that ask get huge pages."
                    .to_string()
            } else {
                "No action needed while fallbacks stay rare and direct compaction stays low."
                    .to_string()
            },
        )
    }
}

fn thp_evidence(thp: &ThpSettings) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "thp_enabled".to_string(),
            thp.enabled.clone().unwrap_or_default(),
        ),
        (
            "thp_defrag".to_string(),
            thp.defrag.clone().unwrap_or_default(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(super::SOURCES);
    }
}
