//! Clock reads that enter the kernel: `clock_gettime`, `gettimeofday` and
//! `time` system calls (hook `sys_enter`, or fentry on the syscall
//! functions), by clock, and whether the vDSO could have served them; the
//! node's clocksource and the vDSO canary's verdict.
//!
//! Doctor rules: a clocksource the vDSO cannot read (every process falls
//! back), processes that bypass a working vDSO, heavy CPU-time clock use.
//! Who reads the clock comes from the call site ([`SOURCES`]: the JVM, the
//! Go runtime, a direct syscall, glibc callers); for a clocksource the vDSO
//! cannot read, the clocksource fix stays first.

use prometheus::proto::{MetricFamily, MetricType};

use std::time::Duration;

use crate::bpf::slot;
use crate::bpf::types::{sp_callsite_kind, sp_clock, sp_counters, sp_syscall_group};
use crate::exposition::{counter, family, gauge, push_nonzero, with, Family, Labels};
use crate::flag_values::parse_duration;
use crate::signals::vocabulary::{CLOCK_COUNT, CLOCK_NAMES};
use crate::signals::CallKind;
use crate::signals::FamilyDoc;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeCheck, NodeNeeds, Recorded, Scrape, Signal,
    SignalArgs, Top, TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::snapshot::Series;

pub mod benchmark;
pub mod canary;
mod node_line;
mod rules;
pub mod settings;
mod sources;
pub mod switches;

use canary::CanaryReadings;
use settings::Clocksources;
pub use sources::SOURCES;

// One counter per clock class in the kernel's table.
const _: fn(&sp_counters) -> &[u64; CLOCK_COUNT] = |c| &c.clock_gettime;

/// Clocks the vDSO serves (x86_64 and arm64, lib/vdso/gettimeofday.c): when a
/// read of one of them reaches the kernel, the process fell off the vDSO.
/// CPU-time clocks, alarm clocks and fd clocks always enter the kernel.
/// `gettimeofday(2)` and `time(2)` read CLOCK_REALTIME.
pub const VDSO_CLOCKS: [sp_clock; 7] = [
    sp_clock::SP_CLOCK_REALTIME,
    sp_clock::SP_CLOCK_MONOTONIC,
    sp_clock::SP_CLOCK_MONOTONIC_RAW,
    sp_clock::SP_CLOCK_REALTIME_COARSE,
    sp_clock::SP_CLOCK_MONOTONIC_COARSE,
    sp_clock::SP_CLOCK_BOOTTIME,
    sp_clock::SP_CLOCK_TAI,
];

/// Whether a read of `clock` that enters the kernel is a vDSO fallback.
pub fn is_vdso_clock(clock: sp_clock) -> bool {
    VDSO_CLOCKS.contains(&clock)
}

/// The `clock` label of `clock`.
pub fn clock_name(clock: sp_clock) -> &'static str {
    CLOCK_NAMES.get(slot!(clock)).copied().unwrap_or("invalid")
}

/// The clock class of slot `i` of a per-clock counter array.
fn clock_at(i: usize) -> sp_clock {
    sp_clock(i as u32)
}

/// Kernel clockid of a clock class (they differ only for TAI, whose kernel
/// id 11 follows the unused 10).
pub fn kernel_clockid(clock: sp_clock) -> libc::clockid_t {
    match clock {
        sp_clock::SP_CLOCK_TAI => libc::CLOCK_TAI,
        other => other.0 as libc::clockid_t,
    }
}

const CLOCK_SYSCALLS: Family = Family {
    name: "slowpath_clock_syscalls_total",
    help: "clock_gettime/gettimeofday/time calls that entered the kernel (raw_syscalls:sys_enter, or fentry on the syscall functions), by clock; fallback=\"true\" when the vDSO could have served the clock",
    kind: MetricType::COUNTER,
};
const CLOCKSOURCE_CURRENT: Family = Family {
    name: "slowpath_clocksource_current_info",
    help: "The node's current clocksource (sysfs current_clocksource), value 1",
    kind: MetricType::GAUGE,
};
const CLOCKSOURCE_AVAILABLE: Family = Family {
    name: "slowpath_clocksource_available_info",
    help: "Clocksources the node offers (sysfs available_clocksource), value 1 each",
    kind: MetricType::GAUGE,
};
const CLOCKSOURCE_CHANGES: Family = Family {
    name: "slowpath_clocksource_changes_total",
    help: "Clocksource switches since the agent started (kernel log: \"clocksource: Switched to clocksource\"; without access to /dev/kmsg, changes of sysfs current_clocksource seen at scrapes)",
    kind: MetricType::COUNTER,
};
const CLOCKSOURCE_LAST_CHANGE: Family = Family {
    name: "slowpath_clocksource_last_change_timestamp_seconds",
    help: "Unix time of the last clocksource switch the kernel log holds (since boot) or the agent saw",
    kind: MetricType::GAUGE,
};
const CLOCKSOURCE_LAST_CHANGE_INFO: Family = Family {
    name: "slowpath_clocksource_last_change_info",
    help: "The last clocksource switch: from, to, and reason (watchdog: the clocksource watchdog marked it unstable; unstable: its driver did; selected: sysfs, boot parameter or a better clocksource; unknown: kernel log unreadable), value 1",
    kind: MetricType::GAUGE,
};
const VDSO_FALLBACK: Family = Family {
    name: "slowpath_vdso_fallback",
    help: "1 when the agent's own libc reads of this clock entered the kernel (vDSO canary checked against its BPF counts), else 0",
    kind: MetricType::GAUGE,
};
const CLOCK_READ: Family = Family {
    name: "slowpath_clock_read_seconds",
    help: "Measured cost in seconds of one libc clock_gettime of this clock on this node (the canary batch of 1000 reads, median of 10 slices)",
    kind: MetricType::GAUGE,
};

// The rates the chart's recording rules record.
const FALLBACKS: Recorded = Recorded {
    name: "slowpath_clock_fallbacks",
    family: &CLOCK_SYSCALLS,
    only: Some(("fallback", "true")),
    fleet: Some(FleetRow {
        title: "Clock syscall fallbacks",
        meaning: "clock reads per second that entered the kernel although the vDSO could have served them",
    }),
};

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
const PROMQL: &[&str] = &[
    r#"vDSO fallback: processes whose clock reads fall into the kernel, per second
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_clock_syscalls_total{fallback="true"}[5m])))
#    ...and whether the whole node falls back (clocksource not vDSO-capable), with its cost
max by (instance, clock) (slowpath_vdso_fallback) == 1
slowpath_clock_read_seconds{clock="monotonic"} > 2e-7
slowpath_clocksource_current_info{clocksource=~"xen|hpet|acpi_pm|jiffies"}
#    ...and a switch at run time (tsc marked unstable by the watchdog), with from, to and reason
increase(slowpath_clocksource_changes_total[30m]) > 0"#,
];

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &CLOCK_SYSCALLS,
        labels: "`syscall` (`clock_gettime`, `gettimeofday`, `time`), `clock`, `fallback`",
        counts: "clock reads that entered the kernel. `fallback=\"true\"` for the clocks the vDSO serves (`realtime`, `monotonic`, `monotonic_raw`, `realtime_coarse`, `monotonic_coarse`, `boottime`, `tai`, and every `gettimeofday`/`time`); `false` for CPU-time clocks (`process_cputime`, `thread_cputime`, `cpu_clock` = ids from `pthread_getcpuclockid`/`clock_getcpuclockid`), alarm clocks, `fd_clock` (PTP) and `invalid` ids, which always enter the kernel",
        hook: "fentry on `__x64_sys_clock_gettime` etc., or `raw_syscalls:sys_enter`; clock id from the first argument",
    },
];

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathClockSyscallFallback",
    rate: &FALLBACKS,
    threshold: Setting {
        key: "clockFallbackPerProcess",
        default: "10000",
        why: "clock syscalls/s that the vDSO could have served, per process: 10k/s at ~2 us each (Xen) is 2 % of a core",
    },
    for_: Setting {
        key: "clockFallback",
        default: "10m",
        why: "",
    },
    findings: &[&rules::VDSO_BYPASS, &rules::CLOCKSOURCE_NOT_VDSO_CAPABLE],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} makes {{ $value | humanize }} clock syscalls/s the vDSO could serve",
    description: "reads the clock through real system calls at {{ $value | humanize }}/s. If slowpath_vdso_fallback is 0 on the node, the process bypasses the vDSO (static binary, seccomp sandbox, old runtime); otherwise see SlowpathClocksourceNotVdsoCapable.",
    runbook: "clock-syscall-fallback",
};

pub const SIGNAL: Signal = Signal {
    name: "clock",
    summary: "clock reads that enter the kernel (clock syscalls), the clocksource and its switches, the vDSO canary",
    case: "vDSO fallback",
    story: Some("`clock_gettime`/`gettimeofday`/`time` calls that enter the kernel although the vDSO (the kernel's code mapped into every process, which reads the clock without a syscall) could have served them (a `xen`, `hpet` or `acpi_pm` clocksource, a static binary, a seccomp sandbox, an old runtime). On Xen EC2 this cost Cassandra 30 % more CPU; a Java loop of 100M `currentTimeMillis()` took 68 s instead of 3.3 s."),
    families: &[
        &CLOCK_SYSCALLS,
        &CLOCKSOURCE_CURRENT,
        &CLOCKSOURCE_AVAILABLE,
        &CLOCKSOURCE_CHANGES,
        &CLOCKSOURCE_LAST_CHANGE,
        &CLOCKSOURCE_LAST_CHANGE_INFO,
        &VDSO_FALLBACK,
        &CLOCK_READ,
    ],
    export,
    diagnose: rules::diagnose,
    enrich: None,
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_CLOCK,
        name: "clock",
        what: "the clock syscalls",
    }],
    node: NodeNeeds {
        settings: Some(settings::read),
        check: Some(NodeCheck {
            every: canary_every,
            run: canary::check,
        }),
        measure: Some(benchmark::measure),
    },
    kernel: KernelNeeds {
        hooks: &[],
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_CLOCK_READS],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "CLOCK/s",
            meaning: "clock reads the vDSO should serve that entered the kernel",
            sort: "clock",
            key: "clock_fallbacks",
            family: &CLOCK_SYSCALLS,
            only: Some(("fallback", "true")),
            cost: EventCost::ClockRead {
                read_seconds: CLOCK_READ.name,
                falls_back: VDSO_FALLBACK.name,
                otherwise: "slowpath_syscall_seconds",
            },
            recorded: Some(&FALLBACKS),
            cell: Cell::PerSecond,
            common: true,
        }],
        timeouts: None,
        not_shown: &[(
            &CLOCKSOURCE_CHANGES,
            "node-wide: the node line shows the clocksource",
        )],
        node: Some(node_line::TOP_NODE),
    },
    recorded: &[FALLBACKS],
    finding_rules: &[rules::CLOCKSOURCE_NOT_VDSO_CAPABLE, rules::VDSO_BYPASS, rules::CPU_TIME_CLOCKS],
    family_docs: FAMILY_DOCS,
    promql: PROMQL,
    alert: Some(ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## Clock syscall fallback

`SlowpathClockSyscallFallback` (per process, default above 10,000/s for 10 min) and
`SlowpathNodeClockSyscallFallback` (per node, above 50,000/s).

What it means: a process reads `CLOCK_REALTIME`, `CLOCK_MONOTONIC` (or another clock the vDSO
serves, or `gettimeofday`/`time`) through a real system call. Through the vDSO such a read costs
~30 ns; as a syscall ~150-200 ns on bare metal and ~2 us on Xen HVM (the Go `time.Now()` case:
~80 ns to ~2 us on AWS Xen hosts).

Threshold: 10,000 fallbacks/s at ~2 us is 2 % of a core for one process, the point where it is
worth a look on every node of a fleet; the Java case (100M `currentTimeMillis()` in 68 s instead
of 3.3 s) ran at ~1.5M/s, Cassandra's 30 % CPU increase at similar rates. 50,000/s on a node is
10 % of a core at Xen prices.

Find the cause:
- `max by (instance) (slowpath_vdso_fallback)`: 1 means the whole node falls back (see the next
  section). 0 means only this process does.
- A process alone: a statically linked binary with an old libc, a seccomp or sandbox layer that
  forces syscalls, a runtime that calls `syscall(SYS_clock_gettime)` directly, or `strace`/`ptrace`.
  `slowpath_clock_syscalls_total{clock=...}` says which clock.

Fix: rebuild against a libc that uses the vDSO; drop the sandbox rule; cache time in the
application (coarse clocks: `CLOCK_MONOTONIC_COARSE` is also served by the vDSO).

## Clocksource not vDSO-capable

`SlowpathClocksourceNotVdsoCapable` (severity `critical`, as the doctor's
`clocksource_not_vdso_capable` finding: Helm `prometheusRule.severities.clocksourceNotVdsoCapable`):
the agent's canary (its own batch of libc reads of each clock, every `--canary.interval`, checked
against its BPF counts) falls into the kernel (`slowpath_vdso_fallback 1`), or the clocksource
is `xen`, `hpet`, `acpi_pm` or `jiffies`.

Every process on the node pays for every clock read (Netflix's Cassandra migration on Xen EC2:
+30 % CPU, +43 % write latency). `slowpath_clock_read_seconds` shows the cost per read on this node;
compare with a healthy node (~20-50 ns).

Fix, where the TSC is reliable (invariant TSC, modern hypervisors, Nitro instances):
`echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource`, and persist it with
`clocksource=tsc tsc=reliable` on the kernel command line. Check
`slowpath_clocksource_available_info` for `tsc`. If the kernel switched away from tsc by itself
(dmesg: "Marking TSC unstable"), find out why before forcing it back.

On arm64 the vDSO reads `arch_sys_counter` (the architected timer), the only clocksource most
machines offer; a node on `jiffies` or another clocksource falls back:
`echo arch_sys_counter > /sys/devices/system/clocksource/clocksource0/current_clocksource`, and
`clocksource=arch_sys_counter` on the command line. Where the kernel disables the counter's vDSO
use itself (an arch timer erratum workaround, logged at boot), every read is a syscall on that
hardware; only a kernel or firmware that drops the workaround helps.

## Clocksource changed

`SlowpathClocksourceChanged`: `slowpath_clocksource_changes_total` grew in the last 30 minutes
(`prometheusRule.thresholds.clocksourceChangeWindow`): the kernel switched the node's clocksource
while the agent ran. The alert carries `from`, `to` and `reason` from
`slowpath_clocksource_last_change_info`; `slowpath_clocksource_last_change_timestamp_seconds` says
when (mark it on the dashboards: the node dashboard's "clocksource switch" annotation does).

- `reason="watchdog"`: the kernel's clocksource watchdog (kernel/time/clocksource.c) found the old
  clocksource skewed against its watchdog clocksource (hpet or acpi_pm) and marked it unstable
  ("Marking clocksource 'tsc' as unstable because the skew is too large"). Seen on overloaded or
  migrated VMs, SMIs, CPUs whose TSCs drift apart. The switch is for the rest of the boot.
- `reason="unstable"`: the driver gave it up ("tsc: Marking TSC unstable due to ..."; the reason
  follows in the kernel log and in `slowpath doctor`'s `last_switch.detail`).
- `reason="selected"`: a write to `current_clocksource` or a better clocksource registered.
- `reason="unknown"`: the agent cannot read `/dev/kmsg` (it needs CAP_SYSLOG when
  `kernel.dmesg_restrict=1`, and a container needs the host's `/dev/kmsg`): the change was seen in
  sysfs at a scrape, its time is the scrape's.

If the new clocksource is `hpet`, `acpi_pm` or `jiffies`, every clock read on the node became a
system call at that second: `slowpath_clock_syscalls_total{fallback="true"}` jumps and
SlowpathClocksourceNotVdsoCapable follows. Find out why the kernel gave up the TSC before forcing it
back (`echo tsc > .../current_clocksource`; `tsc=reliable` turns the watchdog off for the TSC).
"##;

/// The clock signal's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ClockArgs {
    /// Period of the vDSO canary (a timed batch of libc clock reads per vDSO clock).
    #[arg(long = "canary.interval", env = "SLOWPATH_CANARY_INTERVAL", default_value = "15s", value_name = "DURATION",
          value_parser = parse_duration)]
    pub canary_interval: Duration,
}

impl Default for ClockArgs {
    fn default() -> Self {
        Self {
            canary_interval: Duration::from_secs(15),
        }
    }
}

/// The canary's period (`--canary.interval`).
fn canary_every(args: &SignalArgs) -> Duration {
    args.clock.canary_interval
}

fn fallback_label(clock: sp_clock) -> &'static str {
    if is_vdso_clock(clock) {
        "true"
    } else {
        "false"
    }
}

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut syscalls = Vec::new();
    for (key, series) in scrape.series() {
        clock_series(&mut syscalls, key, series);
    }
    let unread = Clocksources::default();
    let cs = scrape.node.get::<Clocksources>().unwrap_or(&unread);
    let info = |name: &String| gauge(&[("clocksource", name.clone())], 1.0);
    let canary = scrape
        .node
        .get::<CanaryReadings>()
        .map_or(&[][..], |c| &c.0[..]);
    let fallback = canary
        .iter()
        .filter_map(|c| {
            let value = if c.fell_back? { 1.0 } else { 0.0 };
            Some(gauge(&[("clock", clock_name(c.clock).to_string())], value))
        })
        .collect();
    let cost = canary
        .iter()
        .map(|c| {
            gauge(
                &[("clock", clock_name(c.clock).to_string())],
                c.seconds_per_read,
            )
        })
        .collect();
    vec![
        family(&CLOCK_SYSCALLS, syscalls),
        family(&CLOCKSOURCE_CURRENT, cs.current.iter().map(info).collect()),
        family(
            &CLOCKSOURCE_AVAILABLE,
            cs.available.iter().map(info).collect(),
        ),
        family(
            &CLOCKSOURCE_CHANGES,
            vec![counter(&[], cs.switches.changes as f64)],
        ),
        family(
            &CLOCKSOURCE_LAST_CHANGE,
            cs.switches.last.iter().map(|s| gauge(&[], s.at)).collect(),
        ),
        family(
            &CLOCKSOURCE_LAST_CHANGE_INFO,
            cs.switches.last.iter().map(switch_info).collect(),
        ),
        family(&VDSO_FALLBACK, fallback),
        family(&CLOCK_READ, cost),
    ]
}

fn switch_info(s: &switches::Switch) -> prometheus::proto::Metric {
    let labels = [
        ("from", s.from.clone()),
        ("to", s.to.clone()),
        ("reason", s.reason.label().to_string()),
    ];
    gauge(&labels, 1.0)
}

fn clock_series(out: &mut Vec<prometheus::proto::Metric>, key: &Labels, series: &Series) {
    let c = &series.counters;
    for (i, &n) in c.clock_gettime.iter().enumerate() {
        let labels = [
            ("syscall", "clock_gettime"),
            ("clock", CLOCK_NAMES[i]),
            ("fallback", fallback_label(clock_at(i))),
        ];
        push_nonzero(out, with(key, &labels), n as f64);
    }
    let realtime = sp_clock::SP_CLOCK_REALTIME;
    for (syscall, n) in [("gettimeofday", c.gettimeofday), ("time", c.time)] {
        let labels = [
            ("syscall", syscall),
            ("clock", clock_name(realtime)),
            ("fallback", fallback_label(realtime)),
        ];
        push_nonzero(out, with(key, &labels), n as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Cgroup, SeriesKey};

    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(SOURCES);
    }

    #[test]
    fn vdso_clocks_are_the_seven_the_vdso_serves() {
        let names: Vec<&str> = VDSO_CLOCKS.iter().map(|&c| clock_name(c)).collect();
        assert_eq!(
            names,
            [
                "realtime",
                "monotonic",
                "monotonic_raw",
                "realtime_coarse",
                "monotonic_coarse",
                "boottime",
                "tai"
            ]
        );
        for cpu in ["process_cputime", "thread_cputime", "cpu_clock", "fd_clock"] {
            let idx = CLOCK_NAMES.iter().position(|&n| n == cpu).unwrap();
            assert!(
                !is_vdso_clock(clock_at(idx)),
                "{cpu} always enters the kernel"
            );
        }
    }

    #[test]
    fn kernel_clockids_match_libc() {
        for (clock, id) in [
            (sp_clock::SP_CLOCK_REALTIME, libc::CLOCK_REALTIME),
            (sp_clock::SP_CLOCK_MONOTONIC, libc::CLOCK_MONOTONIC),
            (sp_clock::SP_CLOCK_MONOTONIC_RAW, libc::CLOCK_MONOTONIC_RAW),
            (sp_clock::SP_CLOCK_BOOTTIME, libc::CLOCK_BOOTTIME),
            (sp_clock::SP_CLOCK_TAI, libc::CLOCK_TAI),
        ] {
            assert_eq!(kernel_clockid(clock), id, "{}", clock_name(clock));
        }
    }

    #[test]
    fn clock_series_carry_fallback_by_clock() {
        let mut c = sp_counters::default();
        c.clock_gettime[slot!(sp_clock::SP_CLOCK_MONOTONIC)] = 100_000;
        c.clock_gettime[slot!(sp_clock::SP_CLOCK_PROCESS_CPUTIME)] = 3;
        c.gettimeofday = 5;
        let series = Series {
            key: SeriesKey {
                comm: "ticker".into(),
                cgroup: Cgroup::new("/".into()),
                pid: None,
            },
            pod: None,
            counters: c,
        };
        let mut out = Vec::new();
        clock_series(&mut out, &series.labels(), &series);
        assert_eq!(out.len(), 3, "zero series are not emitted");
        let label = |m: &prometheus::proto::Metric, name: &str| {
            m.get_label()
                .iter()
                .find(|l| l.name() == name)
                .map(|l| l.value().to_string())
                .unwrap_or_default()
        };
        let by = |clock: &str, syscall: &str| {
            out.iter()
                .find(|m| label(m, "clock") == clock && label(m, "syscall") == syscall)
                .unwrap()
        };
        let mono = by("monotonic", "clock_gettime");
        assert_eq!(label(mono, "fallback"), "true");
        assert_eq!(mono.get_counter().get_value(), 100_000.0);
        assert_eq!(
            label(by("process_cputime", "clock_gettime"), "fallback"),
            "false"
        );
        assert_eq!(label(by("realtime", "gettimeofday"), "fallback"), "true");
        assert_eq!(label(mono, "comm"), "ticker");
    }
}
