//! Close sweeps (hook `sys_enter`, or fentry on close): `close()` of a
//! descriptor the process does not have open, which returns EBADF. Code that
//! closes "every descriptor that might be open" before it execs or
//! daemonizes loops up to `sysconf(_SC_OPEN_MAX)`, the soft
//! `RLIMIT_NOFILE`: a syscall per descriptor, a second or minutes per spawn
//! at a container's limit of 1,048,576 or 1,073,741,816. Counted in the
//! kernel (`bpf/signals/fdclose.bpf.h`) from the caller's file table at
//! entry: a close of an open descriptor is not counted.
//!
//! Doctor rule: a process closing more than [`CLOSES_PER_SEC`] descriptors a
//! second that it does not have open, with its soft limit read from the live
//! process ([`limit`]), the sweeps a second that makes, their CPU from the
//! node's measured syscall cost ([`cost`]), its call sites matched to
//! [`sources::SOURCES`] and the fix for each way the limit is set.

pub mod cost;
pub mod limit;
pub mod sources;

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::types::{sp_callsite_kind, sp_syscall_group};
use crate::exposition::{family, push_nonzero, Family};
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
use cost::SyscallCost;
use sources::{SOURCES, SWEEP_GAIN};

/// Doctor and in-agent threshold: closes of descriptors that are not open,
/// per second of one process. At ~150 ns a close that is 1.5 ms of CPU a
/// second, and at a limit of 1,048,576 one sweep every 105 s, each a 0.16 s
/// stall of the spawn it precedes: worth a look; below it a sweep at a
/// limit of 1,024 ten times a second costs too little to page anyone.
pub const CLOSES_PER_SEC: f64 = 10_000.0;

const FD_CLOSE_UNOPENED: Family = Family {
    name: "slowpath_fd_close_unopened_calls_total",
    help: "close() calls on a descriptor the process does not have open (raw_syscalls:sys_enter, or fentry on close; told from the process's file table at entry: fd >= fdt->max_fds or its open_fds bit clear), which return EBADF: the loop of close(fd) up to the open-files limit that code runs before it execs or daemonizes",
    kind: MetricType::COUNTER,
};

// The rates the chart's recording rules record.
const UNOPENED_CLOSES: Recorded = Recorded {
    name: "slowpath_fd_close_unopened_calls",
    family: &FD_CLOSE_UNOPENED,
    only: None,
    fleet: Some(FleetRow {
        title: "Close sweeps",
        meaning: "closes of descriptors that are not open, per second (close(fd) up to the open-files limit before exec or daemonizing; close_range() or a sane nofile removes them)",
    }),
};

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
const PROMQL: &[&str] = &[
    r#"close sweeps: closes of descriptors that are not open per second, per process, and the
#    CPU they take at the node's measured cost of one system call
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_fd_close_unopened_calls_total[5m])))
sum by (instance, comm, cgroup) (rate(slowpath_fd_close_unopened_calls_total[5m]))
  * on (instance) group_left max by (instance) (slowpath_syscall_seconds)"#,
];

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &FD_CLOSE_UNOPENED,
        labels: "none but the process's",
        counts: "`close()` calls on a descriptor the process does not have open, which return `EBADF`: the descriptor is at or past the file table's size (`files->fdt->max_fds`) or its bit in `fdt->open_fds` is clear, read at syscall entry. The close sweeps of code that closes every descriptor up to `sysconf(_SC_OPEN_MAX)` (the soft `RLIMIT_NOFILE`) before it execs or daemonizes. Not counted: a close of an open descriptor, `close_range()`. A thread of the same process opening or closing that number at the same instant, or holding it reserved by an open not yet done, can move one count by one",
        hook: "fentry on `close`, or `raw_syscalls:sys_enter`: x86_64 `close` (3), arm64 `close` (57); the descriptor is the first argument",
    },
];

// The findings its diagnosis makes (docs/doctor.md's table).
const FD_CLOSE_SWEEP: FindingRule = FindingRule {
    id: "fd_close_sweep",
    severities: &[Severity::Warning],
    when: "a process closes 10,000+ descriptors/s that it does not have open (`EBADF`): a close sweep up to its open-files limit before it execs or daemonizes; names the process's soft limit (read from `/proc/PID/limits`), the sweeps per second, the CPU of one sweep (at the node's measured cost of one system call), the call site's known source and the fix (`close_range()`/`closefrom()`, `O_CLOEXEC`, `LimitNOFILE` in the unit or the container runtime's)",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathFdCloseSweep",
    rate: &UNOPENED_CLOSES,
    threshold: Setting {
        key: "fdCloseUnopenedPerProcess",
        default: "10000",
        why: "closes of descriptors a process does not have open, per second (close sweeps up to the open-files limit): 10k/s at ~150 ns is 0.15 % of a core, and at a nofile of 1,048,576 a 0.16 s sweep every 105 s",
    },
    for_: Setting {
        key: "fdCloseSweep",
        default: "10m",
        why: "",
    },
    findings: &[&FD_CLOSE_SWEEP],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} closes {{ $value | humanize }} descriptors/s it does not have open (a close sweep)",
    description: "calls close() {{ $value | humanize }} times per second on descriptors it does not have open (EBADF): a loop that closes every descriptor up to the open-files limit before it execs or daemonizes, one system call per number, as long as the soft nofile limit (1,048,576 or more in many containers). The finding names the process's limit; close_range()/closefrom(), or a lower nofile, removes the loop.",
    runbook: "close-sweeps",
};

pub const SIGNAL: Signal = Signal {
    name: "fdclose",
    summary: "close() of descriptors that are not open: sweeps up to the open-files limit before exec or daemonizing",
    case: "close sweeps",
    story: Some("code that closes every descriptor up to its open-files limit before it execs or daemonizes makes one syscall per number, almost all returning `EBADF`; at a container's nofile of 1,048,576 that is ~0.16 s per spawn (Perl's `Proc::Daemon`, erlexec took 43.9 ms per spawn at 600,000 against 1.7 ms at 1,024), minutes at 1,073,741,816."),
    families: &[&FD_CLOSE_UNOPENED],
    export,
    diagnose,
    enrich: Some(limit::enrich),
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_FD_CLOSE,
        name: "fd_close",
        what: "closes of descriptors that are not open",
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
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_FD_CLOSES],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "EBADF/s",
            meaning: "`close()` calls on descriptors the process does not have open: a close sweep up to its open-files limit",
            sort: "ebadf",
            key: "fd_close_unopened",
            family: &FD_CLOSE_UNOPENED,
            only: None,
            cost: EventCost::Gauge("slowpath_syscall_seconds"),
            recorded: Some(&UNOPENED_CLOSES),
            cell: Cell::PerSecond,
            common: false,
        }],
        timeouts: None,
        not_shown: &[],
        node: None,
    },
    recorded: &[UNOPENED_CLOSES],
    finding_rules: &[FD_CLOSE_SWEEP],
    family_docs: FAMILY_DOCS,
    promql: PROMQL,
    alert: Some(ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## Close sweeps

`SlowpathFdCloseSweep`: one process closes more than 10,000 descriptors per second that it does not
have open, for 10 min (`slowpath_fd_close_unopened_calls_total`; Helm
`prometheusRule.thresholds.fdCloseUnopenedPerProcess`, `prometheusRule.for.fdCloseSweep`).

What it means: before it execs a child or daemonizes, the process closes "every descriptor that
might be open" with `for (fd = 3; fd < sysconf(_SC_OPEN_MAX); fd++) close(fd);`. Almost none are
open, so each call is a system call that returns `EBADF`, and the loop is as long as the soft
open-files limit (`RLIMIT_NOFILE`): microseconds at 1,024, about 0.16 s at 1,048,576 (a container
runtime's `LimitNOFILE=infinity`, which is `fs.nr_open`), minutes at 1,073,741,816 (`fs.nr_open`
under systemd 240 and later). 20,000 closes took 3.1 ms here. The cost is paid at every spawn, as
latency of the spawn as much as CPU: Perl's `Proc::Daemon::Init`, Python 2's `subprocess` with
`close_fds=True`, erlexec, Firecracker's jailer, ZeroC IceGrid, D's `std.process`, rpm under Docker.

The count: a `close()` whose descriptor is at or past the file table's size (`fdt->max_fds`) or
whose `open_fds` bit is clear, read at syscall entry (no exit program). A close of an open
descriptor is never counted; `close_range()` is not counted at all. Another thread opening or
closing the same number at the same instant can move one count by one.

Threshold: 10,000 closes/s at ~150 ns each is 0.15 % of a core, and at a limit of 1,048,576 one
sweep every 105 s, each a 0.16 s stall of the spawn behind it. A shell's occasional `EBADF` close
stays far below. The finding estimates the CPU with the node's measured cost of one system call,
and names the process's soft limit (read from `/proc/PID/limits` while it runs), the sweeps per
second and the CPU of one sweep:

```promql
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_fd_close_unopened_calls_total[5m]))
  * on (instance) group_left max by (instance) (slowpath_syscall_seconds))
```

Confirm on the node:
- `strace -f -e trace=close -e status=failed -p PID` shows `close(N) = -1 EBADF` for N counting up,
  at each spawn; `Ctrl-C` it after a second.
- `grep 'Max open files' /proc/PID/limits`: the soft limit (first number) is the sweep's length.
- [The doctor](#running-the-doctor) (`slowpath doctor --comm NAME` in the node's agent pod, or
  `sudo slowpath doctor --comm NAME` on a VM) names the `fd_close_sweep` finding with the rate, the
  limit, the CPU per sweep, the call sites and their known source.

Fix, in the code first:
- Close only what is open: `close_range(3, ~0U, 0)` (Linux 5.9+), `closefrom(3)` (glibc 2.34+), or
  a walk of `/proc/self/fd`; or open every descriptor with `O_CLOEXEC` so that exec closes it.
  Python 3.8 and later, and current Go, Java and glibc `posix_spawn`, do not sweep.

Where the code cannot change, lower the soft open-files limit that it sweeps to:
- systemd: `systemctl edit UNIT`, add the two lines below, then `systemctl restart UNIT`. The soft
  limit (1,024) is what `sysconf(_SC_OPEN_MAX)` returns; a program that needs more raises its soft
  limit itself up to the hard one (524,288):

  ```ini
  [Service]
  LimitNOFILE=1024:524288
  ```

- Containers inherit the runtime's limit. containerd before 2.0 and Docker before 25.0 ship
  `LimitNOFILE=infinity` in their systemd units; later releases leave systemd's default
  (1024:524288). `systemctl show containerd -p LimitNOFILE` (or `docker`, `crio`) tells. Podman and
  Docker take `--ulimit nofile=1024:524288` per container.
- Kubernetes has no per-pod rlimit: pods get the runtime's. Set it in the runtime's unit (a drop-in
  `LimitNOFILE=1024:524288` for containerd, then restart it and the pods), or run `ulimit -n 1024`
  in the container's entrypoint before the program starts.
"##;

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut calls = Vec::new();
    for (key, series) in scrape.series() {
        push_nonzero(
            &mut calls,
            key.clone(),
            series.counters.fd_close_unopened as f64,
        );
    }
    vec![family(&FD_CLOSE_UNOPENED, calls)]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    sweep_finding(obs).into_iter().collect()
}

/// The fix, for every way a process gets its open-files limit.
pub const FIX: &str = "Close only what is open: close_range(3, ~0U, 0) (Linux 5.9+) or \
    closefrom(3) (glibc 2.34+) in place of the loop, O_CLOEXEC/FD_CLOEXEC on the descriptors \
    the program opens so that exec closes them, or a walk of /proc/self/fd. Where the code \
    cannot change, lower the soft open-files limit it sweeps to. systemd: LimitNOFILE=1024:524288 \
    in the unit's [Service] section (LimitNOFILE=infinity gives fs.nr_open: 1,048,576 by default, \
    1,073,741,816 with systemd 240 and later). Containers inherit the runtime's limit: \
    containerd before 2.0 and Docker before 25.0 ship LimitNOFILE=infinity in their units \
    (systemctl show containerd -p LimitNOFILE tells), later releases keep systemd's 1024:524288; \
    podman/docker run --ulimit nofile=1024:524288. Kubernetes has no per-pod rlimit: pods get \
    the runtime's, so set it in the runtime's unit (a drop-in with LimitNOFILE) or with ulimit \
    -n in the container's entrypoint.";

/// A finding's title: the process, its rate and, when read, its limit.
pub(crate) fn title(comm: &str, per_second: f64, limit: Option<f64>) -> String {
    match limit {
        Some(limit) => format!(
            "{comm} closes descriptors it does not have open {per_second:.0} times/s: a sweep \
             to its open-files limit, {limit:.0}"
        ),
        None => format!("{comm} closes descriptors it does not have open {per_second:.0} times/s"),
    }
}

fn sweep_finding(obs: &Observation<'_>) -> Option<Finding> {
    let cost = obs.node.get::<SyscallCost>().map(|c| c.0);
    let processes = obs.ranked(|d| {
        let rate = d.c.fd_close_unopened as f64 / obs.secs;
        if rate < CLOSES_PER_SEC {
            return None;
        }
        let mut detail = BTreeMap::from([("unopened_closes_per_second".to_string(), rate)]);
        if let Some(cost) = cost {
            detail.insert("estimated_cpu_percent".into(), rate * cost * 100.0);
            detail.insert("cpu_seconds_per_close".into(), cost);
        }
        Some((rate, detail))
    });
    let top = processes.first()?;
    let mut evidence = BTreeMap::from([(
        "threshold_closes_per_second".to_string(),
        format!("{CLOSES_PER_SEC}"),
    )]);
    if let Some(cost) = cost {
        evidence.insert(
            "cpu_seconds_per_close".into(),
            format!("{cost:.2e} (one system call, measured on this node)"),
        );
    }
    Some(Finding {
        id: FD_CLOSE_SWEEP.id,
        severity: Severity::Warning,
        title: title(&top.identity.comm, top.per_second, None),
        evidence,
        processes,
        cause: "The process closes every descriptor that might be open, one close() per \
                number up to its soft open-files limit (sysconf(_SC_OPEN_MAX)), before it \
                execs a child or daemonizes. Almost none are open, so each call is a system \
                call that returns EBADF, and the loop is as long as the limit: microseconds at \
                1,024, a second or minutes at a container's 1,048,576 or 1,073,741,816."
            .into(),
        fix: FIX.into(),
        expected_gain: Some(SWEEP_GAIN.into()),
        cause_basis: CauseBasis::Guess {
            from: "closes of descriptors the process does not have open (no sampled frame \
                   matches a known source)"
                .into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_FD_CLOSE),
        sources: Some((SOURCES, Compose::AfterRule)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeFacts;
    use crate::signals::test_support::{delta, export_one_of, observe, observe_on};

    #[test]
    fn a_sweeping_process_gets_the_finding_with_its_cpu() {
        let daemon = delta("perl", |c| c.fd_close_unopened = 2_000_000);
        let shell = delta("sh", |c| c.fd_close_unopened = 500);
        let mut node = NodeFacts::default();
        node.extend([std::sync::Arc::new(SyscallCost(1.5e-7)) as _]);
        let f = observe_on(&node, &[daemon, shell], sweep_finding).unwrap();
        assert_eq!(f.id, "fd_close_sweep");
        assert_eq!(f.processes.len(), 1, "only the sweeping process");
        let p = &f.processes[0];
        assert_eq!(p.identity.comm, "perl");
        let cpu = p.detail["estimated_cpu_percent"];
        assert!((cpu - p.per_second * 1.5e-5).abs() < 1e-9, "{cpu}");
        assert!(f.fix.contains("close_range") && f.fix.contains("LimitNOFILE="));
        assert!(f.title.starts_with("perl closes descriptors"));
    }

    #[test]
    fn below_the_threshold_there_is_no_finding() {
        let rare = delta("sh", |c| c.fd_close_unopened = 1);
        assert!(observe(&[rare], sweep_finding).is_none());
    }

    #[test]
    fn the_title_names_the_limit_once_read() {
        let t = title("erl_child_setup", 20_000.0, Some(1_048_576.0));
        assert!(
            t.ends_with("a sweep to its open-files limit, 1048576"),
            "{t}"
        );
    }

    #[test]
    fn the_counter_is_exported_per_process() {
        let d = delta("perl", |c| c.fd_close_unopened = 19_996);
        let families = export_one_of(&SIGNAL, d);
        assert_eq!(families[0].name(), FD_CLOSE_UNOPENED.name);
        assert_eq!(
            families[0].get_metric()[0].get_counter().get_value(),
            19_996.0
        );
    }

    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(SOURCES);
    }
}
