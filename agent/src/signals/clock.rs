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

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{sp_callsite_kind, sp_clock, sp_counters};
use crate::exposition::{family, gauge, push_nonzero, with, Family, Labels};
use crate::finding::{ClockCost, Compose, Delta, Finding, Observation, Severity};
use crate::node::Clocksources;
use crate::signals::{Scrape, Signal};
use crate::snapshot::Series;
use crate::sources::{CauseBasis, KnownSource, Pattern};

/// Number of `enum sp_clock` classes.
pub const CLOCK_COUNT: usize = slot!(sp_clock::SP_CLOCK_COUNT);

/// `clock` label values, indexed by `enum sp_clock`.
pub const CLOCK_NAMES: [&str; CLOCK_COUNT] = [
    "realtime",
    "monotonic",
    "process_cputime",
    "thread_cputime",
    "monotonic_raw",
    "realtime_coarse",
    "monotonic_coarse",
    "boottime",
    "realtime_alarm",
    "boottime_alarm",
    "tai",
    "cpu_clock",
    "fd_clock",
    "invalid",
];

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

/// Clocks the doctor's benchmark times: the vDSO clocks, then the two
/// CPU-time clocks (the seeds' TimeBench).
pub const BENCHMARK_CLOCKS: [sp_clock; 9] = [
    VDSO_CLOCKS[0],
    VDSO_CLOCKS[1],
    VDSO_CLOCKS[2],
    VDSO_CLOCKS[3],
    VDSO_CLOCKS[4],
    VDSO_CLOCKS[5],
    VDSO_CLOCKS[6],
    sp_clock::SP_CLOCK_PROCESS_CPUTIME,
    sp_clock::SP_CLOCK_THREAD_CPUTIME,
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

/// Clocksources the vDSO cannot read (x86: only tsc, kvm-clock, hyperv have a
/// vDSO read path; arm64: only arch_sys_counter): with these, every read
/// falls back to a syscall.
const NON_VDSO_CLOCKSOURCES: [&str; 4] = ["xen", "hpet", "acpi_pm", "jiffies"];

/// The clocksource a fix switches to, in order of preference, with the
/// kernel command line that keeps it: the vDSO reads each of them
/// (`vdso_clock_mode` in the kernel's clocksource drivers).
const VDSO_CLOCKSOURCES: [(&str, &str); 2] = [
    ("tsc", "clocksource=tsc tsc=reliable"),
    ("arch_sys_counter", "clocksource=arch_sys_counter"),
];

// Doctor thresholds: more sensitive than the alerts (it is run when someone
// is already looking), high enough that an idle node reports nothing.
const VDSO_BYPASS_PER_SEC: f64 = 1000.0;
const CPU_CLOCKS_PER_SEC: f64 = 50_000.0;

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
const VDSO_FALLBACK: Family = Family {
    name: "slowpath_vdso_fallback",
    help: "1 when the agent's own libc reads of this clock entered the kernel (vDSO canary checked against its BPF counts), else 0",
    kind: MetricType::GAUGE,
};
const CLOCK_READ: Family = Family {
    name: "slowpath_clock_read_seconds",
    help: "Measured mean cost in seconds of one libc clock_gettime of this clock on this node (canary batch of 1000 reads)",
    kind: MetricType::GAUGE,
};

pub const SIGNAL: Signal = Signal {
    name: "clock",
    families: &[
        &CLOCK_SYSCALLS,
        &CLOCKSOURCE_CURRENT,
        &CLOCKSOURCE_AVAILABLE,
        &VDSO_FALLBACK,
        &CLOCK_READ,
    ],
    export,
    diagnose,
    enrich: None,
};

/// Who reads the clock, most specific first.
pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "jvm_clock",
        frames: &[
            Pattern::FunctionContains("os::javaTimeMillis"),
            Pattern::FunctionContains("os::javaTimeNanos"),
            Pattern::FunctionContains("os::javaTimeSystemUTC"),
            Pattern::Function("JVM_CurrentTimeMillis"),
            Pattern::Function("JVM_NanoTime"),
            Pattern::Module("libjvm.so"),
        ],
        cause: "The JVM reads the clock for System.currentTimeMillis(), System.nanoTime() and \
                Instant.now() in os::javaTimeMillis/javaTimeNanos (libjvm), through glibc's \
                clock_gettime and the vDSO: every read the application makes is a clock read \
                here.",
        fix: "Read the time once per request or batch instead of per event (loggers, metrics \
              and caches that timestamp every call are the usual readers), or keep a cached \
              clock refreshed by one thread.",
        expected_gain: Some(
            "Netflix: a Java loop of 100M currentTimeMillis() took 68 s on the xen clocksource \
             and 3.3 s on tsc; Cassandra used 30 % less CPU after the switch",
        ),
        example: (
            "os::javaTimeMillis()",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        ),
    },
    KnownSource {
        id: "go_runtime_clock",
        frames: &[
            Pattern::FunctionPrefix("runtime.walltime"),
            Pattern::FunctionPrefix("runtime.nanotime"),
            Pattern::FunctionPrefix("runtime.vdsoCall"),
            Pattern::Function("time.now"),
            Pattern::Function("time.Now"),
        ],
        cause: "Go's time.Now() and time.Since() read the clock through the runtime's own \
                vDSO call (runtime.walltime, runtime.nanotime): the Go scheduler and timers \
                read it too, so every goroutine's time reads are clock reads here.",
        fix: "Nothing to change in Go code once the clocksource is fixed; until then keep \
              time.Now() out of per-event hot loops (a coarse time refreshed by a ticker).",
        expected_gain: Some(
            "Go's time.Now() went from ~80 ns to ~2 us on AWS Xen hosts (xen clocksource)",
        ),
        example: ("runtime.walltime", "/usr/local/bin/app"),
    },
    KnownSource {
        id: "direct_clock_syscall",
        frames: &[
            Pattern::Function("syscall"),
            Pattern::FunctionPrefix("syscall.Syscall"),
            Pattern::FunctionPrefix("syscall.RawSyscall"),
        ],
        cause: "{caller} makes the clock system call directly through syscall() \
                (syscall(SYS_clock_gettime, ...)), which never goes through the vDSO.",
        fix: "Call clock_gettime()/gettimeofday() through libc, which uses the vDSO.",
        expected_gain: Some(
            "about 150 ns per read on bare metal, ~2 us on Xen, against ~30 ns through the vDSO",
        ),
        example: ("syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
    KnownSource {
        id: "glibc_clock",
        frames: &[
            Pattern::Function("clock_gettime"),
            Pattern::Function("clock_gettime64"),
            Pattern::Function("gettimeofday"),
            Pattern::Function("time"),
        ],
        cause: "{caller} reads the clock through glibc (clock_gettime, gettimeofday or time), \
                and the read enters the kernel instead of staying in the vDSO.",
        fix: "Read the clock less often in that code (once per batch or request), or use \
              CLOCK_REALTIME_COARSE/CLOCK_MONOTONIC_COARSE where jiffy resolution is \
              enough: the vDSO serves them from the tick on every clocksource.",
        expected_gain: None,
        example: ("__clock_gettime", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];

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
    let cs = &scrape.node.clocksources;
    let info = |name: &String| gauge(&[("clocksource", name.clone())], 1.0);
    let canary = &scrape.snapshot.canary;
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
        family(&VDSO_FALLBACK, fallback),
        family(&CLOCK_READ, cost),
    ]
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

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    let clocksource = clocksource_finding(obs);
    let bypass = vdso_bypass_finding(obs, clocksource.is_some());
    [clocksource, bypass, cpu_clock_finding(obs)]
        .into_iter()
        .flatten()
        .collect()
}

/// Per-process fallback (`vdso` true) or CPU-clock (`vdso` false) reads per second, by clock.
fn clock_rates(d: &Delta, secs: f64, vdso: bool) -> (f64, BTreeMap<String, f64>) {
    let mut detail = BTreeMap::new();
    for (i, &n) in d.c.clock_gettime.iter().enumerate() {
        if n > 0 && is_vdso_clock(clock_at(i)) == vdso {
            detail.insert(format!("clock_gettime/{}", CLOCK_NAMES[i]), n as f64 / secs);
        }
    }
    if vdso == is_vdso_clock(sp_clock::SP_CLOCK_REALTIME) {
        for (name, n) in [("gettimeofday", d.c.gettimeofday), ("time", d.c.time)] {
            if n > 0 {
                detail.insert(name.into(), n as f64 / secs);
            }
        }
    }
    (detail.values().sum(), detail)
}

fn clocksource_finding(obs: &Observation<'_>) -> Option<Finding> {
    let cs: &Clocksources = &obs.node.clocksources;
    let bench: &[ClockCost] = obs.bench;
    let current = cs.current.clone().unwrap_or_default();
    let canary_fell_back = bench
        .iter()
        .any(|c| c.vdso_clock && c.fell_back == Some(true));
    if !canary_fell_back && !NON_VDSO_CLOCKSOURCES.contains(&current.as_str()) {
        return None;
    }
    let mono = bench.iter().find(|c| c.id == sp_clock::SP_CLOCK_MONOTONIC);
    let processes = obs.ranked(|d| {
        let (rate, detail) = clock_rates(d, obs.secs, true);
        (rate > 0.0).then_some((rate, detail))
    });
    let mut evidence = BTreeMap::from([
        ("current_clocksource".to_string(), current.clone()),
        ("available_clocksources".to_string(), cs.available.join(" ")),
        (
            "canary".to_string(),
            if canary_fell_back {
                "the agent's own libc clock reads entered the kernel".into()
            } else {
                "not measured as falling back".into()
            },
        ),
    ]);
    if let Some(m) = mono {
        evidence.insert(
            "libc_clock_gettime_monotonic_ns".into(),
            format!("{:.0}", m.libc_ns),
        );
    }
    Some(Finding {
        id: "clocksource_not_vdso_capable",
        severity: Severity::Critical,
        title: format!("clocksource {current} is not vDSO-capable: every clock read is a system call"),
        processes,
        evidence,
        cause: format!(
            "The vDSO cannot read the {current} clocksource, so clock_gettime(), gettimeofday() and \
             time() enter the kernel in every process on this node."
        ),
        fix: clocksource_fix(&cs.available),
        expected_gain: Some(
            "Netflix (Cassandra on Xen EC2): 30 % less CPU, 43 % lower write latency after switching to tsc; \
             a Java loop of 100M currentTimeMillis() went from 68 s to 3.3 s."
                .into(),
        ),
        cause_basis: CauseBasis::NodeSettings {
            from: format!("current_clocksource {current} and the canary"),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_CLOCK),
        sources: Some((SOURCES, Compose::AfterRule)),
    })
}

/// The fix for a clocksource the vDSO cannot read: switch to the first
/// vDSO-capable one the node offers (`available`: sysfs
/// available_clocksource), or find out why none is offered.
fn clocksource_fix(available: &[String]) -> String {
    let vdso_capable = VDSO_CLOCKSOURCES
        .iter()
        .find(|(name, _)| available.iter().any(|c| c == name));
    match vdso_capable {
        Some(("tsc", cmdline)) => format!(
            "Where the TSC is reliable: echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource; \
             persist with {cmdline} on the kernel command line."
        ),
        Some((name, cmdline)) => format!(
            "echo {name} > /sys/devices/system/clocksource/clocksource0/current_clocksource; \
             persist with {cmdline} on the kernel command line."
        ),
        None => "No vDSO-capable clocksource (tsc on x86_64, arch_sys_counter on arm64) is available \
                 on this node: check why the kernel marked it unstable (dmesg), \
                 or move to an instance type with an invariant TSC."
            .into(),
    }
}

fn vdso_bypass_finding(obs: &Observation<'_>, node_falls_back: bool) -> Option<Finding> {
    if node_falls_back {
        return None; // the clocksource finding covers every process
    }
    let processes = obs.ranked(|d| {
        let (rate, detail) = clock_rates(d, obs.secs, true);
        (rate >= VDSO_BYPASS_PER_SEC).then_some((rate, detail))
    });
    let top = processes.first()?;
    Some(Finding {
        id: "vdso_bypass",
        severity: Severity::Warning,
        title: format!(
            "{} process(es) read the clock through system calls although the vDSO works (top: {} at {:.0}/s)",
            processes.len(),
            top.comm,
            top.per_second
        ),
        evidence: BTreeMap::from([(
            "node".to_string(),
            "the clocksource is vDSO-capable and the canary does not fall back".to_string(),
        )]),
        processes,
        cause: "These processes call the clock_gettime/gettimeofday/time system calls directly: a \
                statically linked binary with an old libc, a seccomp or sandbox layer, a runtime \
                that issues syscall(SYS_clock_gettime), or a tracer."
            .into(),
        fix: "Rebuild against a libc that uses the vDSO, drop the sandbox rule that forces the \
              syscall, or cache the time in the application."
            .into(),
        expected_gain: Some("about 150 ns per read on bare metal, ~2 us on Xen (30 ns via the vDSO)".into()),
        cause_basis: CauseBasis::Guess {
            from: "clock syscall rates on a node whose vDSO works (no sampled frame matches a \
                   known source)"
                .into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_CLOCK),
        sources: Some((SOURCES, Compose::Replace)),
    })
}

fn cpu_clock_finding(obs: &Observation<'_>) -> Option<Finding> {
    let processes = obs.ranked(|d| {
        let (rate, detail) = clock_rates(d, obs.secs, false);
        (rate >= CPU_CLOCKS_PER_SEC).then_some((rate, detail))
    });
    processes.first()?;
    Some(Finding {
        id: "cpu_time_clocks",
        severity: Severity::Info,
        title: "heavy use of CPU-time clocks, which always enter the kernel".into(),
        evidence: BTreeMap::new(),
        processes,
        cause: "CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID and pthread_getcpuclockid() \
                clocks are never served by the vDSO (profilers, per-request CPU accounting)."
            .into(),
        fix: "Sample CPU time less often, or use CLOCK_MONOTONIC where wall time is enough.".into(),
        expected_gain: None,
        cause_basis: CauseBasis::Counters {
            from: "the clock ids of the clock_gettime calls".into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_CLOCK),
        sources: None,
    })
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
    fn clocksource_fix_names_the_architectures_vdso_clocksource() {
        let fix = |available: &str| {
            clocksource_fix(&available.split(' ').map(String::from).collect::<Vec<_>>())
        };
        assert!(fix("xen tsc hpet acpi_pm").contains("echo tsc > "));
        assert!(fix("xen tsc hpet acpi_pm").contains("clocksource=tsc tsc=reliable"));
        assert!(fix("arch_sys_counter jiffies").contains("echo arch_sys_counter > "));
        assert!(fix("xen hpet").starts_with("No vDSO-capable clocksource"));
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
