//! The clock signal's doctor rules: a clocksource the vDSO cannot read
//! (every process falls back), processes that bypass a working vDSO, heavy
//! CPU-time clock use.

use std::collections::BTreeMap;

use super::benchmark::ClockBenchmark;
use super::settings::Clocksources;
use super::sources::SOURCES;
use super::{clock_at, is_vdso_clock, CLOCK_NAMES};
use crate::bpf::types::{sp_callsite_kind, sp_clock};
use crate::finding::{Compose, Delta, Finding, Severity};
use crate::signals::FindingRule;
use crate::signals::Observation;
use crate::sources::CauseBasis;

// Doctor thresholds: more sensitive than the alerts (it is run when someone
// is already looking), high enough that an idle node reports nothing.
// The findings its diagnosis makes (docs/doctor.md's table).
pub(super) const CLOCKSOURCE_NOT_VDSO_CAPABLE: FindingRule = FindingRule {
    id: "clocksource_not_vdso_capable",
    severities: &[Severity::Critical],
    when: "the canary's libc reads (the agent's own batch of reads of each clock, looked for in its BPF counts) enter the kernel, or the clocksource is xen/hpet/acpi_pm/jiffies",
};

pub(super) const VDSO_BYPASS: FindingRule = FindingRule {
    id: "vdso_bypass",
    severities: &[Severity::Warning],
    when: "a process makes 1000+ clock syscalls/s the vDSO could serve, on a healthy clocksource",
};

pub(super) const CPU_TIME_CLOCKS: FindingRule = FindingRule {
    id: "cpu_time_clocks",
    severities: &[Severity::Info],
    when: "50,000+ CPU-time clock reads/s (always syscalls)",
};

const VDSO_BYPASS_PER_SEC: f64 = 1000.0;
const CPU_CLOCKS_PER_SEC: f64 = 50_000.0;

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

pub fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
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
    let unread = Clocksources::default();
    let cs = obs.node.get::<Clocksources>().unwrap_or(&unread);
    let bench = obs
        .node
        .get::<ClockBenchmark>()
        .map_or(&[][..], |b| &b.0[..]);
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
    let switched = switched_to(cs, &current);
    if let Some(line) = &switched {
        evidence.insert("last_switch".into(), line.clone());
    }
    Some(Finding {
        id: CLOCKSOURCE_NOT_VDSO_CAPABLE.id,
        severity: Severity::Critical,
        title: format!("clocksource {current} is not vDSO-capable: every clock read is a system call"),
        processes,
        evidence,
        cause: format!(
            "{}The vDSO cannot read the {current} clocksource, so clock_gettime(), gettimeofday() and \
             time() enter the kernel in every process on this node.",
            switched.map_or(String::new(), |line| format!(
                "The kernel switched to it: {line}; the clock syscalls below followed. "
            ))
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

/// The node's last clocksource switch, when it went to `current`:
/// "from tsc at 2026-11-25T01:35:15Z (watchdog: the skew is too large)".
fn switched_to(cs: &Clocksources, current: &str) -> Option<String> {
    let s = cs.switches.last.as_ref().filter(|s| s.to == current)?;
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(s.at.max(0.0));
    let from = if s.from.is_empty() { "?" } else { &s.from };
    let why = match s.detail.as_str() {
        "" => s.reason.label().to_string(),
        detail => format!("{}: {detail}", s.reason.label()),
    };
    Some(format!(
        "from {from} at {} ({why})",
        humantime::format_rfc3339_seconds(at)
    ))
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
        id: VDSO_BYPASS.id,
        severity: Severity::Warning,
        title: format!(
            "{} process(es) read the clock through system calls although the vDSO works (top: {} at {:.0}/s)",
            processes.len(),
            top.identity.comm,
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
        id: CPU_TIME_CLOCKS.id,
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
    use crate::signals::clock::switches::{Reason, Switch};

    #[test]
    fn only_a_switch_to_the_current_clocksource_is_named() {
        let mut cs = Clocksources::new(Some("hpet".into()), vec!["tsc".into(), "hpet".into()]);
        assert_eq!(switched_to(&cs, "hpet"), None);
        cs.switches.last = Some(Switch {
            at: 1_795_000_000.0,
            from: "tsc".into(),
            to: "hpet".into(),
            reason: Reason::Watchdog,
            detail: "the skew is too large".into(),
        });
        assert_eq!(
            switched_to(&cs, "hpet").as_deref(),
            Some("from tsc at 2026-11-18T11:06:40Z (watchdog: the skew is too large)")
        );
        assert_eq!(switched_to(&cs, "acpi_pm"), None);
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
}
