//! Forks that copy the address space (hooks `sys_enter`, or fentry on
//! clone, clone3 and fork, for the entry time, and `task:task_newtask` for
//! the copy): a fork without `CLONE_VM` copies the parent's page tables,
//! and the parent waits the whole time, longer the more memory it maps
//! (`bpf/signals/fork.bpf.h`). vfork, `posix_spawn` and threads
//! (`CLONE_VM`) copy nothing and are not counted.
//!
//! Per process: the copying forks by the time they held the parent (a
//! histogram, 1 ms to 10 s, and a counter of seconds), the parent's mapped
//! bytes and page-table bytes at each, and how many of the children exec'd
//! (the spawn pattern: fork then exec, which `posix_spawn` replaces) rather
//! than lived on as a copy (a snapshot or a pre-forked worker).
//!
//! Doctor rule: a process whose copying forks take [`FORK_TIME_SHARE`] of
//! the wall time at [`FORK_MIN_SECONDS`] or more each, or any fork over
//! [`FORK_STALL_SECONDS`]: its size, the time per fork, the forks a
//! second, the pattern and the fix for its runtime from the call sites
//! ([`sources::SOURCES`]).

mod docs;
pub mod sources;

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::types::sp_syscall_group;
use crate::bpf::types::{sp_callsite_kind, sp_counters, sp_fork_bound_us, sp_fork_bucket};
use crate::bpf::{slot, Hook};
use crate::exposition::{family, histogram, push_nonzero, Family};
use crate::finding::{Compose, Finding, Severity};
use crate::signals::CallKind;
use crate::signals::FindingRule;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeNeeds, Observation, Recorded, Scrape, Signal, Top,
    TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::sources::CauseBasis;
use sources::{FORK_GAIN, SOURCES};

/// Number of `enum sp_fork_bucket` buckets (the last is +Inf).
const BUCKET_COUNT: usize = slot!(sp_fork_bucket::SP_FORK_BUCKET_COUNT);

/// The upper bounds of the finite buckets, in seconds, from `enum
/// sp_fork_bound_us` (`bpf/slowpath.h`).
pub const BUCKET_BOUNDS: [f64; BUCKET_COUNT - 1] = [
    sp_fork_bound_us::SP_FORK_BOUND_0_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_1_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_2_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_3_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_4_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_5_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_6_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_7_US.0 as f64 / 1e6,
    sp_fork_bound_us::SP_FORK_BOUND_8_US.0 as f64 / 1e6,
];

/// The first bucket of forks over [`FORK_STALL_SECONDS`].
const STALL_BUCKET: usize = 7;
const _: () = assert!(sp_fork_bound_us::SP_FORK_BOUND_6_US.0 == 1_000_000);

/// Doctor and alert threshold: the share of the wall time a process spends
/// stalled in copying forks (seconds per second). 1 %: a process of 10 GiB
/// that spawns a helper every 10 s (~150 ms a copy) loses 1.5 %; one that
/// forks for a snapshot every few minutes stays below it.
pub const FORK_TIME_SHARE: f64 = 0.01;

/// A process is named for its forks only when each takes this long on
/// average (seconds): about 50 to 100 MiB mapped. Small processes (shells,
/// supervisors) that fork often copy little each time; their cost is the
/// process creation itself, not this slow path.
pub const FORK_MIN_SECONDS: f64 = 0.001;

/// One fork held its parent this long or longer (seconds): a stall users
/// see whatever the rate (Redis on Xen: 3.46 s at 11.5 GB, every BGSAVE).
pub const FORK_STALL_SECONDS: f64 = 1.0;

/// A process's fork series appear once its copying forks have held it this
/// long in all (ns), at [`FORK_MIN_SECONDS`] or more each on average:
/// shells, supervisors and process churners, whose forks copy a few MiB
/// each, add none however often they fork. The first exported values hold
/// every fork since it began.
pub const SERIES_FROM_NS: u64 = 10_000_000;

/// Whether a process's forks in `c` get series ([`SERIES_FROM_NS`]).
fn has_series(c: &sp_counters) -> bool {
    c.fork_copy_ns >= SERIES_FROM_NS
        && c.fork_copy_ns as f64 / 1e9 / copies(c).max(1) as f64 >= FORK_MIN_SECONDS
}

const FORK_COPIES: Family = Family {
    name: "slowpath_fork_copies_total",
    help: "Forks that copied the process's address space (clone, clone3 or fork without CLONE_VM, counted at task:task_newtask for the parent; vfork, posix_spawn and threads copy nothing and are not counted); a process's fork series appear once its copies took 10 ms in all, at 1 ms or more each on average",
    kind: MetricType::COUNTER,
};

const FORK_SECONDS: Family = Family {
    name: "slowpath_fork_copy_seconds_total",
    help: "Time the process's copying forks held it, from the fork's syscall entry to task:task_newtask at the end of copy_process() (the page tables copied)",
    kind: MetricType::COUNTER,
};

const FORK_DURATION: Family = Family {
    name: "slowpath_fork_copy_duration_seconds",
    help: "Time each copying fork held the process (as slowpath_fork_copy_seconds_total), buckets from 1 ms to 10 s",
    kind: MetricType::HISTOGRAM,
};

const FORK_MAPPED: Family = Family {
    name: "slowpath_fork_mapped_bytes_total",
    help: "The process's mapped memory (mm->total_vm, every mapping, reserved or not) at each copying fork, summed: over slowpath_fork_copies_total, the size a fork copies the mappings of",
    kind: MetricType::COUNTER,
};

const FORK_PAGE_TABLES: Family = Family {
    name: "slowpath_fork_page_table_bytes_total",
    help: "The process's page-table bytes (mm->pgtables_bytes) at each copying fork, summed: the tables dup_mmap() copies, which grow with the memory the process has touched",
    kind: MetricType::COUNTER,
};

const FORK_EXECS: Family = Family {
    name: "slowpath_fork_execs_total",
    help: "Copying forks whose child exec'd (sched:sched_process_exec) before it exited: the spawn pattern, fork then exec, which posix_spawn or vfork make copy nothing",
    kind: MetricType::COUNTER,
};

/// The hook that sees each fork made: it runs only on forks.
const HOOKS: &[Hook] = &[Hook::new("task_newtask")];

// The rates the chart's recording rules record.
const FORK_TIME: Recorded = Recorded {
    name: "slowpath_fork_copy_seconds",
    family: &FORK_SECONDS,
    only: None,
    fleet: Some(FleetRow {
        title: "Fork copies",
        meaning: "seconds per second processes spend stalled in forks that copy their address space (clone without CLONE_VM): a large process that spawns with fork and exec, or forks for snapshots",
    }),
};

// The findings its diagnosis makes (docs/doctor.md's table).
const LARGE_FORKS: FindingRule = FindingRule {
    id: "large_forks",
    severities: &[Severity::Warning],
    when: "a process spends 1 %+ of the wall time in forks that copy its address space at 1 ms or more each, or one such fork takes 1 s or more; names its size, the time per fork, the forks per second, the pattern (fork then exec, or a copy that lives on) and the fix for its runtime from the call sites (JVM, CPython, Ruby, Node, Go, Redis, glibc system/popen)",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathLargeForks",
    rate: &FORK_TIME,
    threshold: Setting {
        key: "forkCopySecondsPerProcess",
        default: "0.01",
        why: "seconds per second, per process, stalled in forks that copy its address space: 1 % of the time; a 10 GiB process spawning a helper every 10 s loses about 1.5 %, a snapshot every few minutes stays below",
    },
    for_: Setting {
        key: "largeForks",
        default: "10m",
        why: "",
    },
    findings: &[&LARGE_FORKS],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} spends {{ $value | humanizePercentage }} of its time copying its address space in fork()",
    description: "forks without CLONE_VM: each fork copies its page tables, and it waits the whole time, longer the more memory it maps. The finding names the size, the time per fork, whether the child execs right after (spawn: use posix_spawn or vfork) or lives on as a copy (snapshot: less memory per fork, THP off), and the fix for the runtime from the call sites.",
    runbook: "forks-of-a-large-address-space",
};

pub const SIGNAL: Signal = Signal {
    name: "fork",
    summary: "forks that copy the address space (clone without CLONE_VM), timed, with the parent's size and whether the child execs: forks of a large process",
    case: "forks of a large address space",
    story: Some("fork() copies the parent's page tables and stalls it the whole time: a Redis BGSAVE fork took 3.46 s at 11.5 GB on Xen, Go's fork of a 10 GB process 16 ms against 0.5 ms with vfork (GitLab's Gitaly got 30x faster from the switch), and 1,000 spawns of a 100 MB Ruby process 41.4 s with fork/exec against 0.97 s with posix_spawn."),
    families: &[
        &FORK_COPIES,
        &FORK_SECONDS,
        &FORK_DURATION,
        &FORK_MAPPED,
        &FORK_PAGE_TABLES,
        &FORK_EXECS,
    ],
    export,
    diagnose,
    enrich: None,
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_FORK,
        name: "fork",
        what: "forks that copy the address space",
    }],
    node: NodeNeeds {
        settings: None,
        check: None,
        measure: None,
    },
    kernel: KernelNeeds {
        hooks: HOOKS,
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_FORKS],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "FORK%",
            meaning: "time stalled in forks that copy the address space, in % of the wall time (of one CPU)",
            sort: "fork",
            key: "fork_copy_seconds",
            family: &FORK_SECONDS,
            only: None,
            cost: EventCost::Seconds,
            recorded: Some(&FORK_TIME),
            cell: Cell::Percent,
            common: false,
        }],
        timeouts: None,
        not_shown: &[
            (&FORK_COPIES, "what a copy costs is its time, FORK%; the count is in the large_forks finding and the dashboards"),
            (&FORK_MAPPED, "the size of the forks FORK% times: in the large_forks finding and the dashboards"),
            (&FORK_PAGE_TABLES, "the size of the forks FORK% times: in the large_forks finding and the dashboards"),
            (&FORK_EXECS, "the pattern of the forks FORK% times: in the large_forks finding and the dashboards"),
        ],
        node: None,
    },
    recorded: &[FORK_TIME],
    finding_rules: &[LARGE_FORKS],
    family_docs: docs::FAMILY_DOCS,
    promql: docs::PROMQL,
    alert: Some(ALERT),
    runbook: docs::RUNBOOK,
};

/// Copying forks in `c`, every bucket.
fn copies(c: &sp_counters) -> u64 {
    c.fork_copies.iter().sum()
}

/// The agent's page size: `mm->total_vm` counts pages.
fn page_bytes() -> f64 {
    procfs::page_size() as f64
}

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let (mut count, mut seconds, mut durations) = (Vec::new(), Vec::new(), Vec::new());
    let (mut mapped, mut tables, mut execs) = (Vec::new(), Vec::new(), Vec::new());
    for (key, series) in scrape.series() {
        let c = &series.counters;
        if !has_series(c) {
            continue;
        }
        let secs = c.fork_copy_ns as f64 / 1e9;
        push_nonzero(&mut count, key.clone(), copies(c) as f64);
        push_nonzero(&mut seconds, key.clone(), secs);
        durations.extend(histogram(key, &BUCKET_BOUNDS, &c.fork_copies, secs));
        push_nonzero(
            &mut mapped,
            key.clone(),
            c.fork_mapped_pages as f64 * page_bytes(),
        );
        push_nonzero(&mut tables, key.clone(), c.fork_page_table_bytes as f64);
        push_nonzero(&mut execs, key.clone(), c.fork_execs as f64);
    }
    vec![
        family(&FORK_COPIES, count),
        family(&FORK_SECONDS, seconds),
        family(&FORK_DURATION, durations),
        family(&FORK_MAPPED, mapped),
        family(&FORK_PAGE_TABLES, tables),
        family(&FORK_EXECS, execs),
    ]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    large_forks_finding(obs).into_iter().collect()
}

/// A finding's title: the process, its size, the time per fork and the rate.
pub(crate) fn title(comm: &str, detail: &BTreeMap<String, f64>) -> String {
    format!(
        "{comm} copies {:.1} GiB of mappings in each fork: {:.1} ms a fork, {:.2} forks/s, \
         {:.1} % of its time",
        detail["mapped_bytes_per_fork"] / (1u64 << 30) as f64,
        detail["seconds_per_fork"] * 1e3,
        detail["forks_per_second"],
        detail["share_of_time"] * 100.0,
    )
}

/// A process's copying forks in the window, if it has any: the share of the
/// time they held it and its break-down.
fn detail(c: &sp_counters, secs: f64) -> Option<(f64, BTreeMap<String, f64>)> {
    let n = copies(c);
    if n == 0 {
        return None;
    }
    let held = c.fork_copy_ns as f64 / 1e9;
    let stalls: u64 = c.fork_copies[STALL_BUCKET..].iter().sum();
    let detail = BTreeMap::from([
        ("forks_per_second".to_string(), n as f64 / secs),
        ("seconds_per_fork".to_string(), held / n as f64),
        ("share_of_time".to_string(), held / secs),
        (
            "mapped_bytes_per_fork".to_string(),
            c.fork_mapped_pages as f64 * page_bytes() / n as f64,
        ),
        (
            "page_table_bytes_per_fork".to_string(),
            c.fork_page_table_bytes as f64 / n as f64,
        ),
        (
            "exec_after_fork_share".to_string(),
            (c.fork_execs as f64 / n as f64).min(1.0),
        ),
        ("forks_over_1s".to_string(), stalls as f64),
    ]);
    Some((held / secs, detail))
}

/// Whether a process's forks in the window are this slow path.
fn named(detail: &BTreeMap<String, f64>) -> bool {
    let costly = detail["share_of_time"] >= FORK_TIME_SHARE
        && detail["seconds_per_fork"] >= FORK_MIN_SECONDS;
    costly || detail["forks_over_1s"] > 0.0
}

fn large_forks_finding(obs: &Observation<'_>) -> Option<Finding> {
    let processes = obs.ranked(|d| detail(&d.c, obs.secs).filter(|(_, detail)| named(detail)));
    let top = processes.first()?;
    let spawns = top.detail["exec_after_fork_share"] >= 0.5;
    let evidence = BTreeMap::from([
        (
            "threshold_share_of_time".to_string(),
            format!("{FORK_TIME_SHARE} (at {FORK_MIN_SECONDS} s or more a fork)"),
        ),
        (
            "threshold_single_fork_seconds".to_string(),
            format!("{FORK_STALL_SECONDS}"),
        ),
        (
            "pattern".to_string(),
            if spawns {
                "spawn (fork then exec)"
            } else {
                "copy (the child lives on)"
            }
            .into(),
        ),
    ]);
    Some(Finding {
        id: LARGE_FORKS.id,
        severity: Severity::Warning,
        title: title(&top.identity.comm, &top.detail),
        evidence,
        processes,
        cause: CAUSE.into(),
        fix: if spawns { SPAWN_FIX } else { COPY_FIX }.into(),
        expected_gain: Some(FORK_GAIN.into()),
        cause_basis: CauseBasis::Guess {
            from: "forks without CLONE_VM (no sampled frame matches a known runtime)".into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_FORK),
        sources: Some((SOURCES, Compose::Replace)),
    })
}

const CAUSE: &str = "The process forks without CLONE_VM: the kernel copies its page tables \
    (dup_mmap()), and the process waits the whole time, about 10 to 20 ms per GiB it has \
    touched with 4 KiB pages (far more on Xen PV guests); its child then tears the copy down \
    again at exec or exit.";

/// The fix when the children exec right after the fork.
pub const SPAWN_FIX: &str = "Spawn without copying: posix_spawn() or vfork() \
    (CLONE_VM|CLONE_VFORK) instead of fork() then exec(). Java: \
    -Djdk.lang.Process.launchMechanism=POSIX_SPAWN (the default since JDK 13) or VFORK. \
    Python: subprocess (vfork since 3.10 where no preexec_fn is given) or os.posix_spawn \
    instead of os.fork()+os.exec*(). Ruby: Process.spawn. Go: 1.9 or later. C: posix_spawn, \
    not system() or popen() on glibc before 2.29. Or spawn from a small helper process forked \
    at start.";

/// The fix when the children live on as copies.
pub const COPY_FIX: &str = "Fork less, or fork a smaller process: keep less memory in the \
    process that forks (a smaller heap or dataset per instance), turn transparent huge pages \
    off for it (a fork splits and copies huge pages: Redis asks for THP off), snapshot less \
    often (Redis: save intervals, or AOF without rewrites), and avoid Xen PV guests, whose \
    page-table updates are hypercalls. Pre-fork workers once, at start, while the process is \
    small.";

#[cfg(test)]
mod tests;
