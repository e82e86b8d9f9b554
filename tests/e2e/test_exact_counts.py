"""Exact per-process counts: each workload's own series must move by exactly
what it did, checked against strace -c, perf stat on the syscalls'
tracepoints (where a loop makes 100,000 calls: strace would stop each one,
20 s a test), /proc/vmstat and /proc/zoneinfo. Runs once per attach type
(tp_btf and raw_tp)."""

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from helpers.host import thp_enabled, cgroup2_root
from helpers.oracles import populated_zones, vmstat
from helpers.signals import every_hook
from helpers.workload import run_workload

pytestmark = pytest.mark.tier("fast")

CLOCK = "slowpath_clock_syscalls_total"
SIGMASK = "slowpath_rt_sigprocmask_calls_total"
SLEEPS = "slowpath_sleep_calls_total"
HIST = "slowpath_sleep_requested_seconds"
N = 100_000
# The clock syscalls the agent counts, as the perf oracle counts them.
CLOCK_SYSCALLS = ["clock_gettime", "gettimeofday", "time"]


def own(scrape, name, pid, **labels):
    return scrape.value(name, comm="sp-workload", pid=pid, **labels)


def test_probes_use_the_requested_attach_type(agent):
    scrape = agent.scrape()
    attached = scrape.select("slowpath_probe_attached")
    assert len(attached) == len(every_hook())
    assert {s.labels["probe"] for s in attached} == every_hook()
    for sample in attached:
        assert sample.value == 1, sample
        assert sample.labels["attach_type"] == agent.attach_type
    # the kernel's count of runs it skipped, one series per hook, read from bpf_prog_info
    misses = scrape.select("slowpath_probe_recursion_misses_total")
    assert {s.labels["probe"] for s in misses} == {s.labels["probe"] for s in attached}


def test_vdso_clock_reads_never_enter_the_kernel(agent, workload_bin, tmp_path):
    pid, calls = run_workload(workload_bin, "clock-vdso", N, strace=tmp_path / "st")
    assert calls.get("clock_gettime", 0) == 0  # the oracle agrees: the vDSO served them
    assert agent.scrape().select(CLOCK, pid=pid) == []


@pytest.mark.parametrize(
    "mode,syscall",
    [("clock-raw", "clock_gettime"), ("gettimeofday-raw", "gettimeofday"), ("time-raw", "time")],
)
def test_raw_clock_syscalls_are_exact_fallbacks(agent, workload_bin, tmp_path, mode, syscall):
    pid, calls = run_workload(workload_bin, mode, N, perf=(CLOCK_SYSCALLS, tmp_path / "perf.csv"))
    assert calls == {s: N if s == syscall else 0 for s in CLOCK_SYSCALLS}
    scrape = agent.scrape()
    assert own(scrape, CLOCK, pid, syscall=syscall, clock="realtime" if syscall != "clock_gettime" else "monotonic", fallback="true") == N
    assert own(scrape, CLOCK, pid) == N  # nothing else counted for it


def test_cpu_time_clocks_are_counted_but_not_fallbacks(agent, workload_bin, tmp_path):
    pid, calls = run_workload(workload_bin, "cputime", 20_000, perf=(CLOCK_SYSCALLS, tmp_path / "perf.csv"))
    assert calls == {"clock_gettime": 3 * 20_000, "gettimeofday": 0, "time": 0}
    scrape = agent.scrape()
    for clock in ["process_cputime", "thread_cputime", "cpu_clock"]:
        assert own(scrape, CLOCK, pid, clock=clock, fallback="false") == 20_000, clock
    assert own(scrape, CLOCK, pid, fallback="true") == 0


def test_threads_count_to_their_thread_group(agent, workload_bin):
    pid = run_workload(workload_bin, "threads", 8, 25_000)
    series = agent.scrape().select(CLOCK, comm="sp-workload", pid=pid)
    assert len(series) == 1
    assert series[0].value == 8 * 25_000
    assert series[0].labels["clock"] == "monotonic"


def test_getcontext_setcontext_pairs(agent, workload_bin, tmp_path):
    pid, calls = run_workload(workload_bin, "context", N, perf=(["rt_sigprocmask"], tmp_path / "perf.csv"))
    assert calls["rt_sigprocmask"] == 2 * N
    scrape = agent.scrape()
    assert own(scrape, SIGMASK, pid, op="query") == N
    assert own(scrape, SIGMASK, pid, op="setmask") == N
    assert own(scrape, SIGMASK, pid) == 2 * N


def test_one_ms_ticker(agent, workload_bin, tmp_path):
    pid, calls = run_workload(workload_bin, "sleep", 1000, 1000, strace=tmp_path / "st")
    assert calls["clock_nanosleep"] == 1000  # glibc nanosleep() is clock_nanosleep
    scrape = agent.scrape()
    assert own(scrape, SLEEPS, pid, syscall="clock_nanosleep", clock="realtime", mode="relative") == 1000
    assert own(scrape, SLEEPS, pid) == 1000

    def bucket(le):
        return own(scrape, HIST + "_bucket", pid, syscall="clock_nanosleep", le=le)

    assert bucket("0.001") == 1000
    assert bucket("0.0001") == 0
    assert bucket("+Inf") == 1000
    assert own(scrape, HIST + "_count", pid) == 1000
    assert own(scrape, HIST + "_sum", pid) == pytest.approx(1.0, abs=1e-9)


def test_absolute_sleeps_count_their_distance_to_the_deadline(agent, workload_bin):
    """Deadlines 100 us ahead (Python 3.11+ sleeps this way): each request
    is the deadline minus the clock's time at the call, a little under 100 us."""
    pid = run_workload(workload_bin, "sleep-abs", 200, 100)
    scrape = agent.scrape()
    assert own(scrape, SLEEPS, pid, syscall="clock_nanosleep", clock="monotonic", mode="absolute") == 200

    def bucket(le):
        return own(scrape, HIST + "_bucket", pid, syscall="clock_nanosleep", le=le)

    assert bucket("0.0001") == 200
    assert bucket("0.00001") == 0
    assert own(scrape, HIST + "_count", pid) == 200
    assert own(scrape, HIST + "_sum", pid) == pytest.approx(200 * 100e-6, rel=0.1)


@pytest.mark.skipif(not thp_enabled(), reason="THP is disabled on this kernel")
def test_thp_faults_match_vmstat(agent, workload_bin):
    before = vmstat()
    pid = run_workload(workload_bin, "thp", 256)
    after = vmstat()
    scrape = agent.scrape()
    allocs = after["thp_fault_alloc"] - before["thp_fault_alloc"]
    fallbacks = after["thp_fault_fallback"] - before["thp_fault_fallback"]
    assert allocs + fallbacks == 128  # one per 2 MiB of the 256 MiB region
    assert own(scrape, "slowpath_thp_fault_allocs_total", pid) == allocs
    assert own(scrape, "slowpath_thp_fault_fallbacks_total", pid) == fallbacks


def test_manual_compaction_is_attributed_to_the_writer(agent):
    out = subprocess.run(
        ["bash", "-c", "echo pid=$$; echo 1 > /proc/sys/vm/compact_memory"],
        check=True, capture_output=True, text=True,
    ).stdout
    pid = int(re.search(r"pid=(\d+)", out).group(1))
    scrape = agent.scrape()
    runs = scrape.value("slowpath_compaction_runs_total", pid=pid, trigger="manual")
    assert runs == populated_zones(Path("/proc/zoneinfo").read_text())
    assert scrape.value("slowpath_compaction_seconds_total", pid=pid, trigger="manual") > 0
    assert scrape.select("slowpath_compaction_runs_total", pid=pid, trigger="direct") == []


def churn_total(scrape):
    return scrape.value(CLOCK, comm="sp-churn")


def test_churn_of_short_lived_processes_loses_nothing(agent, workload_bin):
    procs, k = 500, 100
    before = churn_total(agent.scrape())
    run_workload(workload_bin, "churn", procs, k)
    scrape = agent.scrape()
    assert churn_total(scrape) - before == procs * k
    assert sum(s.value for s in scrape.select("slowpath_lost_events_total")) == 0


def test_counters_never_go_backwards_while_processes_exit(agent, workload_bin):
    """Scrape as fast as possible while 400 processes come and go."""
    done = threading.Event()
    worker = threading.Thread(
        target=lambda: (run_workload(workload_bin, "churn", 400, 5000), done.set())
    )
    worker.start()
    last = {}
    scrapes = 0
    while not done.is_set() or scrapes < 3:
        for s in agent.scrape().select(CLOCK):
            key = tuple(sorted(s.labels.items()))
            assert s.value >= last.get(key, 0), f"{key} went from {last[key]} to {s.value}"
            last[key] = s.value
        scrapes += 1
    worker.join()
    assert scrapes > 3


def test_own_canary_reports_no_fallback_on_tsc(agent):
    time.sleep(1.2)  # one canary period
    scrape = agent.scrape()
    current = [s.labels["clocksource"] for s in scrape.select("slowpath_clocksource_current_info")]
    if current != ["tsc"]:
        pytest.skip(f"clocksource is {current}")
    fallback = scrape.select("slowpath_vdso_fallback")
    assert {s.labels["clock"] for s in fallback} >= {"realtime", "monotonic", "boottime"}
    assert all(s.value == 0 for s in fallback)
    for s in scrape.select("slowpath_clock_read_seconds"):
        assert 0 < s.value < 2e-6, s


@pytest.mark.skipif(cgroup2_root() is None, reason="no cgroup2 mount")
def test_cgroup_and_unit_labels_come_from_the_cgroup2_path(agent, workload_bin):
    name = f"slowpath-test-{agent.port}"
    cg = cgroup2_root() / name / "demo.service"
    cg.mkdir(parents=True)
    try:
        # Join the cgroup, then exec the workload: its image starts there.
        out = subprocess.run(
            ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$0" clock-raw 777', str(workload_bin)],
            check=True, capture_output=True, text=True,
        ).stdout
        pid = int(re.search(r"pid=(\d+)", out).group(1))
        series = agent.scrape().select(CLOCK, pid=pid, comm="sp-workload")
        assert [s.labels["cgroup"] for s in series] == [f"/{name}/demo.service"]
        assert series[0].labels["unit"] == "demo.service"  # the systemd unit the path names
        assert series[0].value == 777
    finally:
        cg.rmdir()
        cg.parent.rmdir()
