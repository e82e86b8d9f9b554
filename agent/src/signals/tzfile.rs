//! Checks of the default time-zone file (hook `sys_enter`, or fentry on the
//! stat family): with `TZ` unset, glibc's `localtime()`, `mktime()` and
//! `tzset()` stat `/etc/localtime` on every call to see whether it changed
//! (a syscall each; with `TZ=:/etc/localtime` none). Counted in the kernel
//! (`bpf/signals/tzfile.bpf.h`): stat, lstat, newfstatat and statx calls
//! whose path is `/etc/localtime` and lies in the calling code's own image,
//! as the C library's built-in default does.

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::types::{sp_callsite_kind, sp_syscall_group};
use crate::exposition::{family, push_nonzero, Family};
use crate::finding::Finding;
use crate::signals::{KernelNeeds, NodeNeeds, Observation, Scrape, Signal};

const TZFILE_STATS: Family = Family {
    name: "slowpath_tzfile_stat_calls_total",
    help: "stat-family calls (stat, lstat, newfstatat, statx: raw_syscalls:sys_enter, or fentry) on the default time-zone file /etc/localtime made by the C library's localtime(), mktime() or tzset() with TZ unset (the path is its built-in default); TZ=:/etc/localtime in the environment removes them",
    kind: MetricType::COUNTER,
};

pub const SIGNAL: Signal = Signal {
    name: "tzfile",
    families: &[&TZFILE_STATS],
    export,
    diagnose,
    enrich: None,
    sources: &[],
    call_sites: &[(sp_callsite_kind::SP_CALLSITE_TZFILE, "tzfile")],
    node: NodeNeeds::NONE,
    kernel: KernelNeeds {
        hooks: &[],
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_TZFILE_CHECKS],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
};

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut calls = Vec::new();
    for (key, series) in scrape.series() {
        push_nonzero(&mut calls, key.clone(), series.counters.tzfile_stats as f64);
    }
    vec![family(&TZFILE_STATS, calls)]
}

/// No rule yet: the finding (rate threshold, measured cost of one check,
/// call sites, fix) comes with the rest of the signal.
fn diagnose(_: &Observation<'_>) -> Vec<Finding> {
    Vec::new()
}
