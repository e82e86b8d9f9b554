//! Allocator purge storms (hook `sys_enter`, or fentry on madvise and
//! munmap): calls that give a process's memory back to the kernel,
//! `madvise()` with an advice that drops pages (`MADV_DONTNEED`,
//! `MADV_FREE`, others) and `munmap()`, with the bytes they ask for
//! (`bpf/signals/purge.bpf.h`). An allocator that gives freed memory back
//! at once faults it in again on the next allocation: a system call, a TLB
//! shootdown and a zeroed page per round, thousands of rounds a second.
//!
//! On x86_64 it also counts the remote TLB flushes each process asks for
//! (`tlb:tlb_flush`, reason `TLB_REMOTE_SEND_IPI`): the shootdown IPIs of
//! its purges, unmaps and protection changes, charged to the sender.
//!
//! Doctor rule: a process making more than [`PURGES_PER_SEC`] purge calls a
//! second, the bytes a second it gives back, the CPU that costs from the
//! node's measured syscall and refault ([`cost`]), its allocator from the
//! call sites ([`sources::SOURCES`]) and that allocator's setting.

pub mod cost;
mod docs;
pub mod sources;

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::types::{sp_callsite_kind, sp_counters, sp_purge_call, sp_syscall_group};
use crate::bpf::{slot, Hook};
use crate::exposition::{family, push_nonzero, with, Family};
use crate::finding::{Compose, Finding, Severity};
use crate::signals::CallKind;
use crate::signals::FindingRule;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeCheck, NodeNeeds, Observation, Recorded, Scrape,
    Signal, Top, TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::sources::CauseBasis;
use cost::PurgeCost;
use sources::{PURGE_GAIN, SOURCES};

/// Number of `enum sp_purge_call` slots.
const CALL_COUNT: usize = slot!(sp_purge_call::SP_PURGE_CALL_COUNT);

/// `syscall` and `advice` label values, indexed by `enum sp_purge_call`:
/// madvise by advice (`other`: `MADV_REMOVE`, `MADV_PAGEOUT`,
/// `MADV_DONTNEED_LOCKED`), and munmap, which takes none.
pub const CALL_NAMES: [(&str, &str); CALL_COUNT] = [
    ("madvise", "dontneed"),
    ("madvise", "free"),
    ("madvise", "other"),
    ("munmap", "none"),
];

const _: fn(&sp_counters) -> (&[u64; CALL_COUNT], &[u64; CALL_COUNT]) =
    |c| (&c.purge_calls, &c.purge_bytes);

/// Doctor and in-agent threshold: purge calls per second of one process.
/// Allocators purge by design a few to a few hundred times a second (the Go
/// scavenger paced to 1 % of a CPU, jemalloc's 10 s decay, glibc trimming a
/// heap top); a storm is thousands: 3,274 a second from one Python loop
/// under jemalloc with dirty_decay_ms:0 here. At ~1 us a call and a 64 KiB
/// refault each, 1,000 a second is 1 to 5 % of a CPU, before the TLB
/// shootdowns on the other CPUs.
pub const PURGES_PER_SEC: f64 = 1_000.0;

/// A process's purge series appear once it has made this many purge calls
/// (its lifetime's, every kind): every dynamically linked program unmaps the
/// loader's cache at its start, and a few unmaps are not a purge worth a
/// series. Below it the kernel still counts; the first exported value
/// holds every call since the process began.
pub const SERIES_FROM: u64 = 64;

const PURGE_CALLS: Family = Family {
    name: "slowpath_memory_purge_calls_total",
    help: "Calls that give the process's memory back to the kernel (raw_syscalls:sys_enter, or fentry on madvise and munmap): madvise by advice (dontneed: MADV_DONTNEED, free: MADV_FREE, other: MADV_REMOVE, MADV_PAGEOUT, MADV_DONTNEED_LOCKED; other advice is not counted) and munmap (advice none); a process's series appear once it has made 64 such calls",
    kind: MetricType::COUNTER,
};

const PURGE_BYTES: Family = Family {
    name: "slowpath_memory_purge_bytes_total",
    help: "Bytes the counted purge calls ask to give back (their length argument as passed; the kernel rounds it up to a page), by syscall and advice as slowpath_memory_purge_calls_total",
    kind: MetricType::COUNTER,
};

const TLB_SHOOTDOWNS: Family = Family {
    name: "slowpath_tlb_shootdowns_total",
    help: "Remote TLB flushes the process's threads asked for (x86_64: tlb:tlb_flush with reason TLB_REMOTE_SEND_IPI, traced on the sender's CPU before the flush IPIs go out to the other CPUs that ran the process): the shootdowns of its purges, unmaps and protection changes; a process's series appear at 64",
    kind: MetricType::COUNTER,
};

/// The shootdown hook: x86_64 sends IPIs to flush other CPUs' TLBs;
/// arm64 broadcasts the invalidation in hardware (no IPI, no tracepoint).
const HOOKS: &[Hook] = if cfg!(target_arch = "x86_64") {
    &[Hook::new("tlb_flush")]
} else {
    &[]
};

// The rates the chart's recording rules record.
const PURGES: Recorded = Recorded {
    name: "slowpath_memory_purge_calls",
    family: &PURGE_CALLS,
    only: None,
    fleet: Some(FleetRow {
        title: "Allocator purges",
        meaning: "calls per second that give memory back to the kernel (madvise MADV_DONTNEED/MADV_FREE, munmap), each refaulted on the next allocation: an allocator's decay, trim or mmap threshold set too eager",
    }),
};

// The findings its diagnosis makes (docs/doctor.md's table).
const PURGE_STORM: FindingRule = FindingRule {
    id: "purge_storm",
    severities: &[Severity::Warning],
    when: "a process makes 1,000+ calls/s that give memory back to the kernel (`madvise` `MADV_DONTNEED`/`MADV_FREE`/others, `munmap`); names the bytes per second, the CPU estimated at the node's measured cost of a system call and of a page refault, its allocator from the call sites (jemalloc, the Go runtime, glibc malloc and `malloc_trim`, tcmalloc, mimalloc) and that allocator's setting",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathAllocatorPurgeStorm",
    rate: &PURGES,
    threshold: Setting {
        key: "memoryPurgePerProcess",
        default: "1000",
        why: "calls per second, per process, that give memory back to the kernel: allocators purge a few to a few hundred times a second by design; a storm is thousands (3,274/s from one Python loop under jemalloc dirty_decay_ms:0), each a syscall, a TLB shootdown and refaulted pages",
    },
    for_: Setting {
        key: "purgeStorm",
        default: "10m",
        why: "",
    },
    findings: &[&PURGE_STORM],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} gives memory back to the kernel {{ $value | humanize }} times/s (an allocator purge storm)",
    description: "calls madvise(MADV_DONTNEED/MADV_FREE) or munmap {{ $value | humanize }} times per second: its allocator gives freed memory back at once and faults it in again on the next allocation, a system call, a TLB shootdown on the CPUs that ran its threads and a zeroed page each time. The finding names the allocator from the call sites and its setting (jemalloc background_thread with a finite dirty_decay_ms, glibc MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_, Go without debug.FreeOSMemory in a loop).",
    runbook: "allocator-purge-storms",
};

pub const SIGNAL: Signal = Signal {
    name: "purge",
    summary: "madvise and munmap calls that give memory back to the kernel, by advice, with their bytes: allocator purge storms",
    case: "allocator purge storms",
    story: Some("an allocator that gives freed memory back at once faults it in again on the next allocation: a jemalloc service at `dirty_decay_ms:0` spent ~18 % of its CPU on it (TLB-flush IPIs to 48 cores, zeroing refaulted pages), ClickHouse measured a ~2x slowdown from one `madvise` per freed extent, and glibc's adaptive mmap threshold left a Rust inference engine with millions of minor faults."),
    families: &[&PURGE_CALLS, &PURGE_BYTES, &TLB_SHOOTDOWNS],
    export,
    diagnose,
    enrich: None,
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_PURGE,
        name: "purge",
        what: "madvise and munmap calls that give memory back",
    }],
    node: NodeNeeds {
        settings: None,
        check: Some(NodeCheck {
            every: cost::every,
            run: cost::check,
        }),
        measure: None,
    },
    kernel: KernelNeeds {
        hooks: HOOKS,
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_PURGES],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "PURGE/s",
            meaning: "calls that give memory back to the kernel (`madvise` `MADV_DONTNEED`/`MADV_FREE`/others, `munmap`): an allocator purging and refaulting; its cost in `CPU%` is the syscalls' alone, a floor (the refaults are in the `purge_storm` finding)",
            sort: "purge",
            key: "memory_purge",
            family: &PURGE_CALLS,
            only: None,
            cost: EventCost::Gauge("slowpath_syscall_seconds"),
            recorded: Some(&PURGES),
            cell: Cell::PerSecond,
            common: false,
        }],
        timeouts: None,
        not_shown: &[
            (
                &PURGE_BYTES,
                "the bytes of the calls PURGE/s counts: in the purge_storm finding and the dashboards",
            ),
            (
                &TLB_SHOOTDOWNS,
                "the shootdowns of the purges PURGE/s counts (and of other unmaps): in the purge_storm finding and the dashboards",
            ),
        ],
        node: None,
    },
    recorded: &[PURGES],
    finding_rules: &[PURGE_STORM],
    family_docs: docs::FAMILY_DOCS,
    promql: docs::PROMQL,
    alert: Some(ALERT),
    runbook: docs::RUNBOOK,
};

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let (mut calls, mut bytes, mut shootdowns) = (Vec::new(), Vec::new(), Vec::new());
    for (key, series) in scrape.series() {
        let c = &series.counters;
        if c.tlb_shootdowns >= SERIES_FROM {
            push_nonzero(&mut shootdowns, key.clone(), c.tlb_shootdowns as f64);
        }
        if c.purge_calls.iter().sum::<u64>() < SERIES_FROM {
            continue;
        }
        for (i, &(syscall, advice)) in CALL_NAMES.iter().enumerate() {
            let labels = with(key, &[("syscall", syscall), ("advice", advice)]);
            push_nonzero(&mut calls, labels.clone(), c.purge_calls[i] as f64);
            push_nonzero(&mut bytes, labels, c.purge_bytes[i] as f64);
        }
    }
    vec![
        family(&PURGE_CALLS, calls),
        family(&PURGE_BYTES, bytes),
        family(&TLB_SHOOTDOWNS, shootdowns),
    ]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    storm_finding(obs).into_iter().collect()
}

/// A finding's title: the process, its calls and bytes a second.
pub(crate) fn title(comm: &str, per_second: f64, bytes_per_second: f64) -> String {
    format!(
        "{comm} gives memory back to the kernel {per_second:.0} times/s, {:.1} MiB/s, and \
         faults it in again",
        bytes_per_second / (1024.0 * 1024.0)
    )
}

/// A process's purges in the window: calls and bytes a second, each kind's
/// calls a second, and the CPU at the node's costs.
fn detail(c: &sp_counters, secs: f64, cost: Option<&PurgeCost>) -> (f64, BTreeMap<String, f64>) {
    let calls = c.purge_calls.iter().sum::<u64>() as f64 / secs;
    let bytes = c.purge_bytes.iter().sum::<u64>() as f64 / secs;
    let mut detail = BTreeMap::from([
        ("purge_calls_per_second".to_string(), calls),
        ("bytes_given_back_per_second".to_string(), bytes),
    ]);
    for (i, (syscall, advice)) in CALL_NAMES.iter().enumerate() {
        let name = match *syscall {
            "madvise" => format!("madvise_{advice}_per_second"),
            _ => format!("{syscall}_per_second"),
        };
        detail.insert(name, c.purge_calls[i] as f64 / secs);
    }
    if cfg!(target_arch = "x86_64") {
        let shootdowns = c.tlb_shootdowns as f64 / secs;
        detail.insert("tlb_shootdowns_per_second".into(), shootdowns);
    }
    if let Some(cost) = cost {
        detail.insert(
            "estimated_cpu_percent".into(),
            cost.cpu(calls, bytes) * 100.0,
        );
    }
    (calls, detail)
}

fn storm_finding(obs: &Observation<'_>) -> Option<Finding> {
    let cost = obs.node.get::<PurgeCost>();
    let processes = obs.ranked(|d| {
        let (calls, detail) = detail(&d.c, obs.secs, cost);
        (calls >= PURGES_PER_SEC).then_some((calls, detail))
    });
    let top = processes.first()?;
    let mut evidence = BTreeMap::from([(
        "threshold_purge_calls_per_second".to_string(),
        format!("{PURGES_PER_SEC}"),
    )]);
    if let Some(cost) = cost {
        evidence.insert(
            "cpu_seconds_per_call".into(),
            format!(
                "{:.2e} (one system call, measured on this node)",
                cost.syscall_seconds
            ),
        );
        if let Some(page) = cost.refault_seconds_per_page {
            evidence.insert(
                "cpu_seconds_per_refaulted_page".into(),
                format!("{page:.2e} (a 4 KiB page faulted in, measured on this node; the estimate assumes every page given back is faulted in again)"),
            );
        }
    }
    let bytes = top.detail["bytes_given_back_per_second"];
    Some(Finding {
        id: PURGE_STORM.id,
        severity: Severity::Warning,
        title: title(&top.identity.comm, top.per_second, bytes),
        evidence,
        processes,
        cause: "The process's allocator gives freed memory back to the kernel at once \
                (madvise MADV_DONTNEED or MADV_FREE, or munmap) and the next allocations fault \
                it in again: each round is a system call, a TLB shootdown on every CPU that ran \
                the process's threads, and a zeroed page per 4 KiB refaulted."
            .into(),
        fix: FIX.into(),
        expected_gain: Some(PURGE_GAIN.into()),
        cause_basis: CauseBasis::Guess {
            from: "calls that give memory back (no sampled frame matches a known allocator)".into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_PURGE),
        sources: Some((SOURCES, Compose::Replace)),
    })
}

/// The fix when the call sites name no allocator: each one's setting.
pub const FIX: &str = "Let the allocator keep freed memory a while. jemalloc: \
    MALLOC_CONF=background_thread:true,dirty_decay_ms:10000 (no decay of 0). glibc malloc: \
    MALLOC_MMAP_THRESHOLD_ above the buffers freed in a loop and MALLOC_TRIM_THRESHOLD_ above \
    the heap's swing (either turns off the adaptive threshold), and no malloc_trim() in a \
    loop. Go: no debug.FreeOSMemory() in a loop, GOMEMLIMIT well above the live heap, a higher \
    GOGC. tcmalloc: a lower TCMALLOC_RELEASE_RATE. mimalloc: MIMALLOC_PURGE_DELAY of 10 ms or \
    more. Or keep and reuse the buffers.";

#[cfg(test)]
mod tests;
