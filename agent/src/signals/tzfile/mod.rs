//! Checks of the default time-zone file (hook `sys_enter`, or fentry on the
//! stat family): with `TZ` unset, glibc's `localtime()`, `mktime()`,
//! `strftime()` and `tzset()` stat `/etc/localtime` on every call to see
//! whether it changed (a syscall each; with `TZ=:/etc/localtime` none).
//! Counted in the kernel (`bpf/signals/tzfile.bpf.h`): stat, lstat,
//! newfstatat and statx calls whose path is `/etc/localtime` and lies in the
//! calling code's own image, as the C library's built-in default does.
//!
//! Doctor rule: a process checking the file more than [`CHECKS_PER_SEC`]
//! times a second, with its estimated CPU from the node's measured cost of
//! one check ([`cost`]), its call sites matched to [`sources::SOURCES`]
//! and the fix written out for systemd and Kubernetes.

pub mod cost;
pub mod sources;

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::types::{sp_callsite_kind, sp_syscall_group};
use crate::exposition::{family, gauge, push_nonzero, Family};
use crate::finding::{Compose, Finding, Severity};
use crate::signals::CallKind;
use crate::signals::FamilyDoc;
use crate::signals::FindingRule;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeCheck, NodeNeeds, Observation, Recorded, Scrape,
    Signal, Top, TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::sources::CauseBasis;
use cost::TzfileCheckCost;
use sources::{SOURCES, TZ_GAIN};

/// Doctor and in-agent threshold: checks per second of one process (about
/// 0.4 % of a core at 4 us a check).
pub const CHECKS_PER_SEC: f64 = 1000.0;

const TZFILE_STATS: Family = Family {
    name: "slowpath_tzfile_stat_calls_total",
    help: "stat-family calls (stat, lstat, newfstatat, statx: raw_syscalls:sys_enter, or fentry) on the default time-zone file /etc/localtime whose path is the calling code's own literal, as glibc's localtime(), mktime(), strftime() and tzset() make with TZ unset; TZ=:/etc/localtime in the environment removes them",
    kind: MetricType::COUNTER,
};
const TZFILE_CHECK_COST: Family = Family {
    name: "slowpath_tzfile_check_seconds",
    help: "Measured cost in seconds of one stat of /etc/localtime on this node (the agent's batch of 100 every 30 s, median of 10 slices); absent when the file does not exist",
    kind: MetricType::GAUGE,
};

// The rates the chart's recording rules record.
const STAT_CALLS: Recorded = Recorded {
    name: "slowpath_tzfile_stat_calls",
    family: &TZFILE_STATS,
    only: None,
    fleet: Some(FleetRow {
        title: "Time-zone file checks",
        meaning: "stats of /etc/localtime per second (glibc's localtime(), mktime(), strftime() with TZ unset; TZ=:/etc/localtime removes them)",
    }),
};

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
const PROMQL: &[&str] = &[
    r#"time-zone file checks (TZ unset): stats of /etc/localtime per second, per process,
#    and the CPU they take at the node's measured cost of one
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_tzfile_stat_calls_total[5m])))
sum by (instance, comm, cgroup) (rate(slowpath_tzfile_stat_calls_total[5m]))
  * on (instance) group_left max by (instance) (slowpath_tzfile_check_seconds)"#,
];

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &TZFILE_STATS,
        labels: "none but the process's",
        counts: "checks of the default time-zone file: `stat`, `lstat`, `newfstatat` and `statx` calls whose path is `/etc/localtime` and lies in the calling code's own ELF file (within 64 MiB of the syscall's return address: the C library's built-in `TZDEFAULT` literal, which glibc's `localtime()`, `mktime()`, `ctime()`, `strftime()` and `tzset()` stat on every call while `TZ` is unset; `localtime_r()` does not). Not counted: a stat of `/etc/localtime` from a stack or `brk` heap buffer, far from the code (`stat /etc/localtime`, the agent's own measurement; a buffer mapped near the C library, as Python's `os.stat` may use, is read and counted), other zone files, opens and reads of the file. `TZ=:/etc/localtime` in the environment takes a process to 0",
        hook: "fentry on the syscalls, or `raw_syscalls:sys_enter`: x86_64 `stat` (4), `lstat` (6), `newfstatat` (262), `statx` (332); arm64 `newfstatat` (79), `statx` (291); the path is the first argument of `stat`/`lstat`, the second of `newfstatat`/`statx`",
    },
];

// The findings its diagnosis makes (docs/doctor.md's table).
const TZFILE_CHECKS: FindingRule = FindingRule {
    id: "tzfile_checks",
    severities: &[Severity::Warning],
    when: "a process stats `/etc/localtime` 1,000+ times/s (glibc's `localtime()`, `mktime()`, `strftime()` with `TZ` unset); names the estimated CPU (checks/s times the node's measured cost of one stat, `slowpath_tzfile_check_seconds`), the call site's known source and the fix for systemd, Kubernetes and shells (`TZ=:/etc/localtime`)",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathTzfileChecks",
    rate: &STAT_CALLS,
    threshold: Setting {
        key: "tzfileChecksPerProcess",
        default: "1000",
        why: "stats of /etc/localtime per second, per process (glibc's localtime() and friends with TZ unset): 1000/s at ~4 us each is 0.4 % of a core, and the fix (TZ in the environment) is one line",
    },
    for_: Setting {
        key: "tzfileChecks",
        default: "10m",
        why: "",
    },
    findings: &[&TZFILE_CHECKS],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} checks /etc/localtime {{ $value | humanize }} times/s (TZ unset)",
    description: "stats /etc/localtime {{ $value | humanize }} times per second: with TZ unset, glibc's localtime(), mktime(), strftime() and tzset() check the time-zone file on every call, one system call each. slowpath_tzfile_check_seconds is what one check costs on the node (times this rate: the CPU they take); TZ=:/etc/localtime in the process's environment removes them.",
    runbook: "time-zone-file-checks",
};

pub const SIGNAL: Signal = Signal {
    name: "tzfile",
    summary: "stats of /etc/localtime with TZ unset (glibc's localtime() and friends), and the node's cost of one",
    case: "time-zone file checks",
    story: Some("with `TZ` unset, glibc's `localtime()`, `mktime()` and `strftime()` stat `/etc/localtime` on every call; a C `localtime()` took 3.9-4.9 us, and 0.11-0.14 us with `TZ=:/etc/localtime`."),
    families: &[&TZFILE_STATS, &TZFILE_CHECK_COST],
    export,
    diagnose,
    enrich: None,
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_TZFILE,
        name: "tzfile",
        what: "stats of `/etc/localtime`",
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
        hooks: &[],
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_TZFILE_CHECKS],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "TZSTAT/s",
            meaning: "stats of `/etc/localtime` (glibc with `TZ` unset)",
            sort: "tzstat",
            key: "tzfile_stats",
            family: &TZFILE_STATS,
            only: None,
            cost: EventCost::Gauge("slowpath_tzfile_check_seconds"),
            recorded: Some(&STAT_CALLS),
            cell: Cell::PerSecond,
            common: false,
        }],
        timeouts: None,
        not_shown: &[],
        node: None,
    },
    recorded: &[STAT_CALLS],
    finding_rules: &[TZFILE_CHECKS],
    family_docs: FAMILY_DOCS,
    promql: PROMQL,
    alert: Some(ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## Time-zone file checks

`SlowpathTzfileChecks`: one process stats `/etc/localtime` more than 1,000 times per second for
10 min (`slowpath_tzfile_stat_calls_total`; Helm `prometheusRule.thresholds.tzfileChecksPerProcess`,
`prometheusRule.for.tzfileChecks`).

What it means: with `TZ` unset, glibc's `localtime()`, `mktime()`, `ctime()`, `strftime()` and
`tzset()` stat `/etc/localtime` on every call to see whether the node's time zone changed (and
re-read it only if it did): one system call per converted time, in a logger or date formatter that
stamps every line. A C `localtime()` took 3.9-4.9 us with `TZ` unset and 0.11-0.14 us with
`TZ=:/etc/localtime`. `localtime_r()` does not check (it keeps the zone read at the first call or
the last `tzset()`), nor does `gmtime()`.

Threshold: 1,000 checks/s at ~4 us a call is 0.4 % of a core for one process: little alone, but
it is paid by every instance of a service on every node, and the fix is one line of configuration
with nothing to rebuild. `slowpath_tzfile_check_seconds` is the measured cost of one stat of
`/etc/localtime` on the node (the agent times a batch every 30 s; 1.8 us on the build machine):
the rate times it is the CPU of the stats alone, a lower bound of what the fix saves:

```promql
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_tzfile_stat_calls_total[5m]))
  * on (instance) group_left max by (instance) (slowpath_tzfile_check_seconds))
```

Confirm on the node:
- `strace -f -e trace=newfstatat,statx,stat -p PID` (on arm64 `-e trace=newfstatat,statx`) shows
  `newfstatat(AT_FDCWD, "/etc/localtime", ...)` (or `stat`, `statx`) over and over, as fast as the
  process formats times; `Ctrl-C` it after a second.
- `tr '\0' '\n' < /proc/PID/environ | grep '^TZ='` prints nothing: `TZ` is unset.
- [The doctor](#running-the-doctor) (`slowpath doctor --comm NAME` in the node's agent pod, or
  `sudo slowpath doctor --comm NAME` on a VM) names the `tzfile_checks` finding with the rate, the estimated
  CPU (checks/s times the node's measured cost of one check), the call sites and their known
  source: `perl_localtime` (Perl's `localtime`, `POSIX::strftime`) or `glibc_localtime` (the
  caller of glibc's `localtime()`, `mktime()`, `strftime()`, named in the cause).

Fix: set `TZ` in the process's environment, so that glibc reads the zone once and never checks
again. `TZ=:/etc/localtime` keeps the node's zone (the colon: a file to read, not a zone rule);
naming the zone (`TZ=Europe/Berlin`) works as well.

- systemd: `systemctl edit UNIT`, add the two lines below, then `systemctl restart UNIT`:

  ```ini
  [Service]
  Environment=TZ=:/etc/localtime
  ```

- Kubernetes: in the container's spec (a Deployment's `spec.template.spec.containers[]`), then roll
  the pods out:

  ```yaml
  env:
    - name: TZ
      value: ":/etc/localtime"
  ```

- A shell or a container: `export TZ=:/etc/localtime`; `podman run -e TZ=:/etc/localtime ...`,
  `docker run -e TZ=:/etc/localtime ...`.
- In the code: Perl `$ENV{TZ} = ':/etc/localtime';` at the start of the script; C `tzset()` once at
  start, then `localtime_r()`.

With `TZ` set, a change of `/etc/localtime` (`timedatectl set-timezone`) reaches the process at its
next start, not at once: for servers that is usually what is wanted.

Not counted: a stat of `/etc/localtime` whose path lies in a stack or `brk` heap buffer, far from
the calling code (the C library's built-in `TZDEFAULT` literal lies in its own image):
`stat /etc/localtime`, a program that builds the path at run time, and the agent's own
measurement: these are no time-zone checks of the C library. (A buffer mapped within 64 MiB of the
calling code, as Python's `os.stat("/etc/localtime")` may use, is read and counted.) Nor are opens or reads of the
file, stats of other zone files (`/usr/share/zoneinfo/...`), or the calls of 32-bit (ia32)
processes counted.
"##;

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut calls = Vec::new();
    for (key, series) in scrape.series() {
        push_nonzero(&mut calls, key.clone(), series.counters.tzfile_stats as f64);
    }
    let cost = scrape
        .node
        .get::<TzfileCheckCost>()
        .and_then(|c| c.0)
        .map(|s| gauge(&[], s));
    vec![
        family(&TZFILE_STATS, calls),
        family(&TZFILE_CHECK_COST, cost.into_iter().collect()),
    ]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    checks_finding(obs).into_iter().collect()
}

/// The fix, for every way a service gets its environment.
pub const FIX: &str = "Set TZ in the service's environment so that glibc reads the zone once: \
    TZ=:/etc/localtime keeps the node's zone (or name it, e.g. TZ=Europe/Berlin). systemd: \
    Environment=TZ=:/etc/localtime in the unit's [Service] section (systemctl edit UNIT, then \
    restart it). Kubernetes: env: [{name: TZ, value: \":/etc/localtime\"}] in the container's \
    spec. A shell or container: export TZ=:/etc/localtime, podman/docker run -e \
    TZ=:/etc/localtime. With TZ set, a change of /etc/localtime reaches the process at its next \
    start.";

fn checks_finding(obs: &Observation<'_>) -> Option<Finding> {
    let cost = obs.node.get::<TzfileCheckCost>().and_then(|c| c.0);
    let processes = obs.ranked(|d| {
        let rate = d.c.tzfile_stats as f64 / obs.secs;
        if rate < CHECKS_PER_SEC {
            return None;
        }
        let mut detail = BTreeMap::from([("stat_calls_per_second".to_string(), rate)]);
        if let Some(cost) = cost {
            detail.insert("estimated_cpu_percent".into(), rate * cost * 100.0);
        }
        Some((rate, detail))
    });
    let top = processes.first()?;
    let mut evidence = BTreeMap::from([(
        "threshold_checks_per_second".to_string(),
        format!("{CHECKS_PER_SEC}"),
    )]);
    if let Some(cost) = cost {
        evidence.insert(
            "cpu_seconds_per_check".into(),
            format!("{cost:.2e} (measured on this node)"),
        );
    }
    Some(Finding {
        id: TZFILE_CHECKS.id,
        severity: Severity::Warning,
        title: format!(
            "{} checks /etc/localtime {:.0} times/s (TZ unset)",
            top.identity.comm, top.per_second
        ),
        evidence,
        processes,
        cause: "With TZ unset, glibc's localtime(), mktime(), ctime(), strftime() and tzset() \
                stat /etc/localtime on every call to see whether the zone changed: one system \
                call per converted time, in a logger or date formatter that runs all the time."
            .into(),
        fix: FIX.into(),
        expected_gain: Some(TZ_GAIN.into()),
        cause_basis: CauseBasis::Guess {
            from: "stat calls on /etc/localtime through the C library's default path (no \
                   sampled frame matches a known source)"
                .into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_TZFILE),
        sources: Some((SOURCES, Compose::AfterRule)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeFacts;
    use crate::signals::test_support::{delta, export_one_of, observe, observe_on};

    #[test]
    fn a_busy_logger_gets_the_finding_with_its_cpu() {
        let logger = delta("logger", |c| c.tzfile_stats = 5_000);
        let idle = delta("cron", |c| c.tzfile_stats = 10);
        let mut node = NodeFacts::default();
        node.extend([std::sync::Arc::new(TzfileCheckCost(Some(4e-6))) as _]);
        let f = observe_on(&node, &[logger, idle], checks_finding).unwrap();
        assert_eq!(f.id, "tzfile_checks");
        assert_eq!(
            f.processes.len(),
            1,
            "only the logger is past the threshold"
        );
        let p = &f.processes[0];
        assert_eq!(p.identity.comm, "logger");
        assert_eq!(p.per_second, 5_000.0);
        let cpu = p.detail["estimated_cpu_percent"];
        assert!((cpu - 2.0).abs() < 1e-9, "{cpu}");
        assert!(f.fix.contains("Environment=TZ=:/etc/localtime"));
        assert!(f.fix.contains("name: TZ, value: \":/etc/localtime\""));
    }

    #[test]
    fn below_the_threshold_or_without_cost_there_is_no_estimate() {
        let slow = delta("cron", |c| c.tzfile_stats = 999);
        assert!(observe(&[slow], checks_finding).is_none());
        let busy = delta("logger", |c| c.tzfile_stats = 1_000);
        let f = observe(&[busy], checks_finding).unwrap();
        assert!(!f.processes[0].detail.contains_key("estimated_cpu_percent"));
        assert!(!f.evidence.contains_key("cpu_seconds_per_check"));
    }

    #[test]
    fn the_counter_is_exported_per_process() {
        let d = delta("perl", |c| c.tzfile_stats = 7);
        let families = export_one_of(&SIGNAL, d);
        assert_eq!(families[0].name(), TZFILE_STATS.name);
        assert_eq!(families[0].get_metric()[0].get_counter().get_value(), 7.0);
        assert!(families[1].get_metric().is_empty(), "no cost measured yet");
    }

    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(SOURCES);
    }
}
