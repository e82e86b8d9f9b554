//! Golden tests: the exposition and the doctor's JSON for fixed, recorded
//! snapshots. A refactoring must leave both byte for byte identical; a
//! deliberate change of output regenerates them with
//! `SLOWPATH_UPDATE_GOLDEN=1 cargo test golden` and shows up in the diff of
//! `agent/tests/golden/`.

// Fixtures set a few counters of a zeroed block, one per line.
#![allow(clippy::field_reassign_with_default)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Encoder, Registry, TextEncoder};

use crate::bpf::types::{
    sp_clock, sp_compaction_trigger, sp_counters, sp_sigmask_op, sp_sleep_bucket, sp_sleep_mode,
    sp_sleep_syscall, sp_wait, sp_yield_runnable,
};
use crate::bpf::{slot, AttachType, Calibration, CostMethod, LeftOutCause, ProbeCost, ProbeStatus};
use crate::labels::PodLabels;
use crate::signals::clock::benchmark::{with_costs, BENCHMARK_CLOCKS};
use crate::signals::clock::canary::{CanaryReading, CanaryReadings};
use crate::signals::timer::wakeup_cost::WakeupCost;
use crate::signals::{Collectors, Observation, SignalArgs};
use crate::snapshot::{Cgroup, Series, SeriesKey, Snapshot};

const NANOSLEEP: usize = slot!(sp_sleep_syscall::SP_SLEEP_NANOSLEEP);
const CLOCK_NANOSLEEP: usize = slot!(sp_sleep_syscall::SP_SLEEP_CLOCK_NANOSLEEP);
const FUTEX: usize = slot!(sp_wait::SP_WAIT_FUTEX);
const RELATIVE: usize = slot!(sp_sleep_mode::SP_SLEEP_RELATIVE);
const ABSOLUTE: usize = slot!(sp_sleep_mode::SP_SLEEP_ABSOLUTE);
/// The (10 ms, 100 ms] bucket of the requested-sleep histogram.
const BUCKET_100MS: usize = slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_1MS) + 2;

/// One recorded process: comm, cgroup, tgid, pod (namespace, pod, container).
struct Proc {
    comm: &'static str,
    cgroup: &'static str,
    tgid: u32,
    pod: Option<[&'static str; 3]>,
    counters: sp_counters,
}

const POD_CGROUP: &str = "/kubepods.slice/kubepods-burstable.slice/\
kubepods-burstable-pod0c1d2e3f_4a5b_6c7d_8e9f_a0b1c2d3e4f5.slice/\
cri-containerd-1111111111111111111111111111111111111111111111111111111111111111.scope";

/// A busy node: a JVM in a pod falling off the vDSO and faulting THP, Ruby
/// switching contexts, a 1 ms ticker, a profiler on CPU-time clocks,
/// kcompactd and a manual compaction, and a hostile comm.
fn recorded() -> Vec<Proc> {
    let mut java = sp_counters::default();
    java.clock_gettime[slot!(sp_clock::SP_CLOCK_MONOTONIC)] = 500_000;
    java.clock_gettime[slot!(sp_clock::SP_CLOCK_REALTIME)] = 20_000;
    java.gettimeofday = 3_000;
    java.time = 7;
    java.thp_fault_alloc = 400;
    java.thp_fault_fallback = 300;
    java.compaction_runs[slot!(sp_compaction_trigger::SP_COMPACTION_DIRECT)] = 50;
    java.compaction_ns[slot!(sp_compaction_trigger::SP_COMPACTION_DIRECT)] = 900_000_000;
    // a Disruptor consumer on YieldingWaitStrategy, its ring empty
    java.sched_yield[slot!(sp_yield_runnable::SP_YIELD_RUNNABLE_NONE)] = 3_000_000;
    java.sched_yield[slot!(sp_yield_runnable::SP_YIELD_RUNNABLE_OTHERS)] = 2_000;
    // its native code runs on jemalloc with dirty_decay_ms:0
    java.purge_calls = [1_200_000, 30_000, 10, 700];
    java.purge_bytes = [
        1_200_000 * 262_144,
        30_000 * 65_536,
        10 * 4_096,
        700 * 1_048_576,
    ];
    // its purges flush the TLBs of the other CPUs its threads ran on
    java.tlb_shootdowns = 1_100_000;
    // it starts a helper with fork and exec (launchMechanism=FORK) from its
    // 4 GiB heap: 40 ms a spawn
    java.fork_copies[4] = 30;
    java.fork_copy_ns = 30 * 40_000_000;
    java.fork_mapped_pages = 30 * (4 << 30) / 4096;
    java.fork_page_table_bytes = 30 * (8 << 20);
    java.fork_execs = 30;
    let mut ruby = sp_counters::default();
    ruby.sigprocmask[slot!(sp_sigmask_op::SP_SIGMASK_QUERY)] = 2_000_000;
    ruby.sigprocmask[slot!(sp_sigmask_op::SP_SIGMASK_SETMASK)] = 2_000_000;
    // its logger formats local times with TZ unset: one check of /etc/localtime each
    ruby.tzfile_stats = 60_000;
    // it daemonizes its workers with a close of every descriptor up to nofile
    ruby.fd_close_unopened = 1_048_573;
    let mut mosn = sp_counters::default();
    mosn.sleep_calls[CLOCK_NANOSLEEP][slot!(sp_clock::SP_CLOCK_MONOTONIC)][RELATIVE] = 10_000;
    mosn.timeout_buckets[CLOCK_NANOSLEEP][slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_1MS)] = 10_000;
    mosn.timeout_ns[CLOCK_NANOSLEEP] = 10_000 * 1_000_000;
    mosn.sleep_calls[NANOSLEEP][slot!(sp_clock::SP_CLOCK_MONOTONIC)][RELATIVE] = 5;
    mosn.timeout_buckets[NANOSLEEP][BUCKET_100MS] = 5;
    mosn.timeout_ns[NANOSLEEP] = 5 * 50_000_000;
    mosn.sleep_calls[CLOCK_NANOSLEEP][slot!(sp_clock::SP_CLOCK_MONOTONIC)][ABSOLUTE] = 300;
    // the sentinel-golang ticker: woken 1000 times a second, mostly from
    // the Go scheduler's futex and epoll_pwait timeouts
    mosn.timer_wakeups[slot!(sp_wait::SP_WAIT_CLOCK_NANOSLEEP)] = 2_000;
    mosn.timer_wakeups[slot!(sp_wait::SP_WAIT_FUTEX)] = 5_000;
    mosn.timer_wakeups[slot!(sp_wait::SP_WAIT_EPOLL_WAIT)] = 3_000;
    mosn.timer_wakeups[slot!(sp_wait::SP_WAIT_OTHER)] = 2;
    // every wait counted; the futex timeouts read one per jiffy (HZ 250)
    mosn.timer_waits[CLOCK_NANOSLEEP] = 10_300;
    mosn.timer_waits[NANOSLEEP] = 5;
    mosn.timer_waits[FUTEX] = 6_000;
    mosn.timer_waits[slot!(sp_wait::SP_WAIT_EPOLL_WAIT)] = 3_000;
    mosn.timeout_buckets[FUTEX][slot!(sp_sleep_bucket::SP_SLEEP_BUCKET_1MS)] = 2_500;
    mosn.timeout_ns[FUTEX] = 2_500 * 900_000;
    mosn.timer_hot_windows = 9;
    java.timer_wakeups[slot!(sp_wait::SP_WAIT_FUTEX)] = 40;
    java.timer_waits[FUTEX] = 40;
    java.timeout_buckets[FUTEX][BUCKET_100MS] = 40;
    java.timeout_ns[FUTEX] = 40 * 50_000_000;
    let mut prof = sp_counters::default();
    prof.clock_gettime[slot!(sp_clock::SP_CLOCK_PROCESS_CPUTIME)] = 900_000;
    prof.clock_gettime[slot!(sp_clock::SP_CLOCK_THREAD_CPUTIME)] = 10;
    prof.clock_gettime[slot!(sp_clock::SP_CLOCK_CPU)] = 100_000;
    prof.clock_gettime[slot!(sp_clock::SP_CLOCK_FD)] = 3;
    prof.clock_gettime[slot!(sp_clock::SP_CLOCK_INVALID)] = 1;
    prof.sigprocmask[slot!(sp_sigmask_op::SP_SIGMASK_BLOCK)] = 200_000;
    prof.sigprocmask[slot!(sp_sigmask_op::SP_SIGMASK_UNBLOCK)] = 199_000;
    prof.sigprocmask[slot!(sp_sigmask_op::SP_SIGMASK_INVALID)] = 2;
    let mut kcompactd = sp_counters::default();
    kcompactd.compaction_runs[slot!(sp_compaction_trigger::SP_COMPACTION_KCOMPACTD)] = 3;
    kcompactd.compaction_ns[slot!(sp_compaction_trigger::SP_COMPACTION_KCOMPACTD)] = 2_000_000;
    let mut sh = sp_counters::default();
    sh.compaction_runs[slot!(sp_compaction_trigger::SP_COMPACTION_MANUAL)] = 1;
    sh.compaction_ns[slot!(sp_compaction_trigger::SP_COMPACTION_MANUAL)] = 5_000_000;
    sh.thp_fault_alloc = 40;
    let mut weird = sp_counters::default();
    weird.gettimeofday = 1;
    // one of every count: every signal's families (a new signal's too, with
    // no edit here) have a series in the golden files
    let mut every = sp_counters::default();
    let words = std::mem::size_of::<sp_counters>() / std::mem::size_of::<u64>();
    let ones: Vec<(u16, u64)> = (0..words).map(|i| (i as u16, 1)).collect();
    crate::procs::add_sparse_counters(&mut every, &ones);
    vec![
        Proc {
            comm: "java",
            cgroup: POD_CGROUP,
            tgid: 101,
            pod: Some(["shop", "cart-7f9", "app"]),
            counters: java,
        },
        Proc {
            comm: "ruby",
            cgroup: "/system.slice/puppet.service",
            tgid: 202,
            pod: None,
            counters: ruby,
        },
        Proc {
            comm: "mosn",
            cgroup: "/system.slice/mosn.service",
            tgid: 303,
            pod: None,
            counters: mosn,
        },
        Proc {
            comm: "prof",
            cgroup: "/user.slice/user-1000.slice/session-3.scope",
            tgid: 404,
            pod: None,
            counters: prof,
        },
        Proc {
            comm: "kcompactd0",
            cgroup: "/",
            tgid: 55,
            pod: None,
            counters: kcompactd,
        },
        Proc {
            comm: "sh",
            cgroup: "/user.slice",
            tgid: 66,
            pod: None,
            counters: sh,
        },
        Proc {
            comm: "we\"ird\\ {x}",
            cgroup: "/",
            tgid: 77,
            pod: None,
            counters: weird,
        },
        Proc {
            comm: "every",
            cgroup: "/system.slice/every.service",
            tgid: 88,
            pod: None,
            counters: every,
        },
    ]
}

/// The snapshot the worker would publish for `procs`.
fn snapshot(procs: Vec<Proc>, pid_label: bool, pods: bool) -> Snapshot {
    let mut series: Vec<Series> = procs
        .into_iter()
        .map(|p| {
            let [namespace, pod, container] = p.pod.unwrap_or(["", "", ""]).map(String::from);
            Series {
                key: SeriesKey {
                    comm: p.comm.to_string(),
                    cgroup: Cgroup::new(p.cgroup.to_string()),
                    pid: pid_label.then_some(p.tgid),
                },
                pod: pods.then_some(PodLabels {
                    namespace,
                    pod,
                    container,
                }),
                counters: p.counters,
            }
        })
        .collect();
    series.sort_by(|a, b| a.key.cmp(&b.key));
    Snapshot {
        series,
        tracked_processes: 17,
        process_capacity: 16384,
        live_tgids: Default::default(),
        live_images: Default::default(),
        lost: [1, 2, 3, 4, 5, 6],
        folded: [7, 8],
        probes: probes(),
        recursion_misses: vec![("sys_enter", 0), ("sched_waking", 3)],
        combining_slots: Some(true),
        probe_costs: vec![
            ProbeCost {
                probe: "sys_enter",
                runs: 1_234_567,
                run_seconds: Some(0.0625),
                dispatch_seconds: Some(0.09),
                method: CostMethod::Measured,
            },
            ProbeCost {
                probe: "sched_waking",
                runs: 42,
                run_seconds: None,
                dispatch_seconds: None,
                method: CostMethod::Measured,
            },
        ],
        cost_calibration: Calibration {
            stats_floor_ns: Some(48.5),
            untraced_added_ns: Some(73.0),
            untraced_ns: Some(151.0),
            dispatch_ns: Some(72.9),
        },
        checks: vec![
            canary(vec![
                CanaryReading {
                    clock: sp_clock::SP_CLOCK_REALTIME,
                    seconds_per_read: 2.5e-8,
                    fell_back: Some(false),
                },
                CanaryReading {
                    clock: sp_clock::SP_CLOCK_MONOTONIC,
                    seconds_per_read: 3e-8,
                    fell_back: Some(true),
                },
                CanaryReading {
                    clock: sp_clock::SP_CLOCK_MONOTONIC_RAW,
                    seconds_per_read: 1e-7,
                    fell_back: None,
                },
            ]),
            std::sync::Arc::new(WakeupCost(Some(8e-6))),
        ],
    }
}

fn canary(readings: Vec<CanaryReading>) -> crate::node::Fact {
    std::sync::Arc::new(CanaryReadings(readings))
}

fn probes() -> Vec<ProbeStatus> {
    let probe = |probe, attach_type, error: Option<&str>, expected: bool| ProbeStatus {
        probe,
        attach_type,
        error: error.map(str::to_string),
        left_out: (!expected).then_some(LeftOutCause::MissingCapability),
    };
    vec![
        probe("sys_enter", AttachType::TpBtf, None, true),
        probe("sched_process_exit", AttachType::TpBtf, None, true),
        probe("sched_process_exec", AttachType::TpBtf, None, true),
        probe("mm_page_alloc", AttachType::RawTp, None, true),
        probe("mm_compaction_begin", AttachType::TpBtf, None, true),
        probe(
            "mm_compaction_end",
            AttachType::TpBtf,
            Some("refused"),
            true,
        ),
        // left out by design (a 5.10 kernel, no CAP_SYSLOG): expected 0
        probe(
            "hrtimer_expire_entry",
            AttachType::RawTp,
            Some("refused"),
            false,
        ),
    ]
}

/// A sysfs tree with a clocksource and THP settings, under the target dir.
fn sysfs(name: &str, clocksource: (&str, &str), thp: (&str, &str)) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/golden-sysfs")
        .join(name);
    let cs = root.join("devices/system/clocksource/clocksource0");
    let mm = root.join("kernel/mm/transparent_hugepage");
    std::fs::create_dir_all(&cs).unwrap();
    std::fs::create_dir_all(&mm).unwrap();
    write_atomic(&cs.join("current_clocksource"), clocksource.0);
    write_atomic(&cs.join("available_clocksource"), clocksource.1);
    write_atomic(&mm.join("enabled"), thp.0);
    write_atomic(&mm.join("defrag"), thp.1);
    root
}

/// Tests run in parallel on the same fixture: a reader never sees a file
/// half written.
fn write_atomic(path: &Path, line: &str) {
    let tmp = path.with_extension(format!("tmp{:?}", std::thread::current().id()));
    std::fs::write(&tmp, format!("{line}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn tsc_thp_always() -> PathBuf {
    sysfs(
        "tsc-always",
        ("tsc", "tsc kvm-clock "),
        (
            "[always] madvise never",
            "[always] defer defer+madvise madvise never",
        ),
    )
}

fn hpet_thp_madvise() -> PathBuf {
    sysfs(
        "hpet-madvise",
        ("hpet", "tsc hpet acpi_pm "),
        (
            "always [madvise] never",
            "always defer defer+madvise [madvise] never",
        ),
    )
}

/// Compare `actual` with the golden file `name`, or rewrite it when
/// SLOWPATH_UPDATE_GOLDEN is set.
fn check(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("SLOWPATH_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (SLOWPATH_UPDATE_GOLDEN=1 writes it)",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from the golden file at line {}:\n  golden: {:?}\n  actual: {:?}",
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

/// Fixed families behind a collector, so the real `Registry` orders and
/// encodes them as a scrape does.
struct Fixed {
    descs: Vec<Desc>,
    families: Vec<MetricFamily>,
}

impl Collector for Fixed {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        self.families.clone()
    }
}

fn exposition(families: Vec<MetricFamily>) -> String {
    let descs = families
        .iter()
        .map(|f| Desc::new(f.name().into(), f.help().into(), vec![], Default::default()).unwrap())
        .collect();
    let registry = Registry::new();
    registry
        .register(Box::new(Fixed { descs, families }))
        .unwrap();
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut out)
        .unwrap();
    // the build's commit and date change with every commit
    String::from_utf8(out).unwrap().replace(
        &format!(
            "revision=\"{}\",build_date=\"{}\"",
            crate::version::REVISION,
            crate::version::BUILD_DATE
        ),
        "revision=\"REVISION\",build_date=\"DATE\"",
    )
}

/// Every signal's node settings under `sysfs`, all collectors on.
fn read_node_settings(sysfs: &Path) -> crate::node::NodeFacts {
    crate::signals::read_node_settings(sysfs, &Collectors::default())
}

#[test]
fn golden_exposition_with_pid_and_pod_labels() {
    let snap = snapshot(recorded(), true, true);
    let fams = crate::metrics::families(
        &snap,
        read_node_settings(&tsc_thp_always()),
        Some(true),
        &Collectors::default(),
    );
    check("metrics-pid-pods.prom", &exposition(fams));
}

#[test]
fn golden_exposition_plain() {
    let snap = snapshot(recorded(), false, false);
    let fams = crate::metrics::families(
        &snap,
        read_node_settings(&hpet_thp_madvise()),
        None,
        &Collectors::default(),
    );
    check("metrics-plain.prom", &exposition(fams));
}

#[test]
fn golden_exposition_of_a_failed_read() {
    let snap = Snapshot {
        probes: probes(),
        ..Default::default()
    };
    let fams = crate::metrics::families(
        &snap,
        read_node_settings(Path::new("/nonexistent")),
        Some(false),
        &Collectors::default(),
    );
    check("metrics-empty.prom", &exposition(fams));
}

/// The doctor's JSON for an observation of 10 s: `before` holds part of the
/// JVM's counts, the rest of the processes started during the observation.
fn doctor_json(sysfs: &Path, filter: crate::doctor::Filter, canary_falls_back: bool) -> String {
    let mut after = snapshot(recorded(), true, false);
    if !canary_falls_back {
        let mut checks = crate::node::NodeFacts::default();
        checks.extend(after.checks.iter().cloned());
        let readings = checks
            .get::<CanaryReadings>()
            .unwrap()
            .0
            .iter()
            .map(|c| CanaryReading {
                fell_back: c.fell_back.map(|_| false),
                ..c.clone()
            })
            .collect();
        after.checks = vec![
            canary(readings),
            std::sync::Arc::new(WakeupCost(Some(8e-6))),
        ];
    }
    let mut early = recorded();
    early.retain(|p| p.comm == "java");
    early[0].counters = sp_counters::default();
    early[0].counters.clock_gettime[slot!(sp_clock::SP_CLOCK_MONOTONIC)] = 100_000;
    let before = snapshot(early, true, false);
    let report = golden_report(&before, &after, sysfs, filter, &SignalArgs::default());
    serde_json::to_string_pretty(&report).unwrap() + "\n"
}

/// The report of a 10 s observation between two recorded snapshots, with a
/// fixed clock benchmark and wakeup cost.
fn golden_report(
    before: &Snapshot,
    after: &Snapshot,
    sysfs: &Path,
    filter: crate::doctor::Filter,
    args: &SignalArgs,
) -> crate::doctor::Report {
    let mut node = read_node_settings(sysfs);
    node.extend(after.checks.iter().cloned());
    let bench = with_costs(&node, |clock| {
        let i = BENCHMARK_CLOCKS.iter().position(|&c| c == clock).unwrap();
        (20.0 + i as f64, 150.0 + 10.0 * i as f64)
    });
    node.extend([std::sync::Arc::new(bench) as crate::node::Fact]);
    let deltas = crate::doctor::deltas_between(before, after, &filter);
    let obs = Observation {
        deltas: &deltas,
        secs: 10.0,
        node: &node,
        args,
    };
    crate::doctor::report_from(after, &obs, false, ("node-1".into(), "6.1.0-test".into()))
}

#[test]
fn golden_doctor_tsc_thp_always() {
    let json = doctor_json(&tsc_thp_always(), Default::default(), false);
    check("doctor-tsc-always.json", &json);
}

#[test]
fn golden_doctor_tsc_canary_falls_back_one_comm() {
    let filter = crate::doctor::Filter {
        comm: Some("prof".into()),
        ..Default::default()
    };
    check(
        "doctor-tsc-canary-comm.json",
        &doctor_json(&tsc_thp_always(), filter, true),
    );
}

#[test]
fn golden_doctor_hpet_filtered() {
    let filter = crate::doctor::Filter {
        cgroup: Some("/system.slice/".into()),
        ..Default::default()
    };
    check(
        "doctor-hpet-system-slice.json",
        &doctor_json(&hpet_thp_madvise(), filter, true),
    );
}

#[test]
fn golden_doctor_one_pid() {
    let filter = crate::doctor::Filter {
        pid: Some(101),
        ..Default::default()
    };
    check(
        "doctor-hpet-pid.json",
        &doctor_json(&hpet_thp_madvise(), filter, true),
    );
}

/// The collectors with only the signals named `on` switched on.
fn only(on: &[&str]) -> Collectors {
    (crate::signals::SIGNALS.iter())
        .filter(|s| !on.contains(&s.name))
        .fold(Collectors::default(), |c, s| c.with(s.name, false))
}

#[test]
fn a_collector_switched_off_exports_none_of_its_families() {
    let snap = snapshot(recorded(), true, true);
    let names = |collectors: &Collectors| -> BTreeSet<String> {
        let settings = crate::signals::read_node_settings(&tsc_thp_always(), collectors);
        let families = crate::metrics::families(&snap, settings, Some(true), collectors);
        families.iter().map(|f| f.name().to_string()).collect()
    };
    let all = names(&Collectors::default());
    let agent_only = names(&only(&[]));
    assert!(agent_only.is_subset(&all) && agent_only.contains("slowpath_probe_attached"));
    for signal in crate::signals::SIGNALS {
        let own: BTreeSet<String> = signal.families.iter().map(|f| f.name.into()).collect();
        let without = names(&Collectors::default().with(signal.name, false));
        assert!(without.is_disjoint(&own), "{}", signal.name);
        assert_eq!(&all - &without, &all & &own, "{}", signal.name);
        assert!(
            !(&all & &own).is_empty(),
            "{}: nothing in the fixture",
            signal.name
        );
        assert_eq!(names(&only(&[signal.name])), &agent_only | &(&all & &own));
    }
}

#[test]
fn a_collector_switched_off_runs_none_of_its_rules() {
    let before = snapshot(Vec::new(), true, false);
    let after = snapshot(recorded(), true, false);
    let ids = |collectors: Collectors| -> BTreeSet<&'static str> {
        let args = SignalArgs {
            collectors,
            ..Default::default()
        };
        let report = golden_report(
            &before,
            &after,
            &tsc_thp_always(),
            Default::default(),
            &args,
        );
        report.findings.iter().map(|f| f.id).collect()
    };
    let all = ids(Collectors::default());
    assert!(
        all.contains("timer_loop") && all.contains("thp_faults"),
        "{all:?}"
    );
    for signal in crate::signals::SIGNALS {
        let own = ids(only(&[signal.name]));
        let without = ids(Collectors::default().with(signal.name, false));
        assert!(
            own.is_disjoint(&without),
            "{}: {own:?} {without:?}",
            signal.name
        );
        assert_eq!(&own | &without, all, "{}", signal.name);
    }
    assert_eq!(ids(only(&["timer"])), BTreeSet::from(["timer_loop"]));
    assert!(ids(only(&[])).is_empty());
}
