"""slowpath's own cost, as metrics: the runs of each hook's programs, which the
programs count themselves (`slowpath_probe_runs_total`), their in-kernel time
(`slowpath_probe_run_seconds_total`: every run charged at the time per run the
kernel measured in the agent's statistics windows, less what the statistics
add to a run, `slowpath_probe_stats_overhead_seconds`) against the kernel's
own accounting read by bpftool (`run_cnt`, `run_time_ns`) over the same
interval, with `kernel.bpf_stats_enabled` on throughout so that the kernel
times every run; and what the syscall hook adds outside the programs
(`slowpath_untraced_syscall_added_seconds`, `slowpath_probe_dispatch_seconds_total`)
against the benchmark's own timing of an untraced syscall without and with the
agent."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers.agent import Agent, error_line, run_agent, start_doctor
from helpers.costs import STATS, clock_load, kernel_stats_on, kernel_totals, untraced_figures
from helpers.tools import built

pytestmark = pytest.mark.tier("full")

RUNS = "slowpath_probe_runs_total"
SECONDS = "slowpath_probe_run_seconds_total"
DISPATCH = "slowpath_probe_dispatch_seconds_total"
STATS_OVERHEAD = "slowpath_probe_stats_overhead_seconds"
UNTRACED_ADDED = "slowpath_untraced_syscall_added_seconds"


def test_runs_and_time_match_the_kernels_accounting(agent_bin, workload_bin, tmp_path):
    with kernel_stats_on():
        agent = Agent(agent_bin, ["--bpf.stats-interval=2s", "--bpf.stats-window=500ms"],
                      tmp_path / "agent.log")
        try:
            with clock_load(workload_bin):
                time.sleep(3)  # windows measured under the load
                # each scrape between two reads of the kernel's figures: on
                # a busy machine a read takes milliseconds, a million runs
                k0, s0, k0_after = kernel_totals(agent.proc.pid), agent.scrape(), kernel_totals(agent.proc.pid)
                time.sleep(8)
                k1_before, s1, k1 = kernel_totals(agent.proc.pid), agent.scrape(), kernel_totals(agent.proc.pid)
        finally:
            assert agent.stop() == 0, agent.log_text()
    runs = s1.value(RUNS, probe="sys_enter") - s0.value(RUNS, probe="sys_enter")
    secs = s1.value(SECONDS, probe="sys_enter") - s0.value(SECONDS, probe="sys_enter")
    kernel_ns = k1["sys_enter"][0] - k0["sys_enter"][0]
    kernel_runs = k1["sys_enter"][1] - k0["sys_enter"][1]
    assert kernel_runs > 1_000_000, kernel_runs  # the load ran
    # the runs the programs counted between the scrapes: within the kernel's
    # count between the inner and the outer reads around them
    inner = k1_before["sys_enter"][1] - k0_after["sys_enter"][1]
    assert inner <= runs <= kernel_runs, (inner, runs, kernel_runs)
    # the statistics' own time per run (its latest 500 ms window): a few tens
    # of ns, the empty program's. Against the kernel's 8 s average it moves
    # with the host (a full suite run on an Intel Xeon read 80 ns against
    # 52): tests/bench/estimates.py stats prints both; here a figure in the
    # wrong unit (us as ns, s) is caught
    overhead = s1.value(STATS_OVERHEAD) * 1e9
    assert 0 < overhead < 1000, overhead
    # the kernel's time less the statistics' own for every run: some time,
    # less than the kernel's whole (estimates.py stats holds it to the
    # kernel's less the empty program's time for every run)
    assert 0 < secs < kernel_ns / 1e9, ("the statistics' own time is not subtracted", secs, kernel_ns / 1e9)
    for probe, (_, n) in k1.items():
        if probe == "stats_floor":
            continue
        # every attached hook has both series, and no hook counts runs the kernel did not see
        assert s1.select(RUNS, probe=probe), probe
        assert s1.value(RUNS, probe=probe) >= n - k0.get(probe, (0, 0))[1], probe


def test_windows_turn_the_kernels_statistics_on_and_off(agent_bin, workload_bin, tmp_path):
    """Without the sysctl, the agent's own windows measure the time per run
    (it runs as root here), and leave the statistics off between windows."""
    assert STATS.read_text().strip() == "0", "kernel.bpf_stats_enabled is on outside this test"
    agent = Agent(agent_bin, ["--bpf.stats-interval=1s", "--bpf.stats-window=300ms"], tmp_path / "agent.log")
    try:
        with clock_load(workload_bin):
            time.sleep(2.5)
            scrape = agent.scrape()
        # measured: the series exists (its value is the programs' time less
        # the statistics' own, a few ns a run of a traced clock read)
        assert scrape.select(SECONDS, probe="sys_enter")
        assert scrape.value(STATS_OVERHEAD) > 0
        assert "measured in a statistics window" in agent.log_text()
    finally:
        assert agent.stop() == 0, agent.log_text()


def test_no_windows_an_estimate(agent_bin, workload_bin, tmp_path):
    """--bpf.stats-interval=0 takes the path of a node where the statistics
    are not allowed: the programs' time is estimated from their own timing of
    one run in 1,024, method="estimated", once 8 runs of a hook were timed
    (here within a second). How close it comes to the kernel's measure moves with the host:
    tests/bench/estimates.py --only estimate prints both, busynode.sh
    COST_METHOD=estimated holds it to 25 %; here a figure in the wrong unit
    (ns as s), a clock read not subtracted (the read alone is ~20-40 ns) or a
    rate never taken fails."""
    assert STATS.read_text().strip() == "0", "kernel.bpf_stats_enabled is on outside this test"
    agent = Agent(agent_bin, ["--bpf.stats-interval=0"], tmp_path / "agent.log")
    try:
        with clock_load(workload_bin):
            time.sleep(2)
            s0 = agent.scrape()
            time.sleep(3)
            s1 = agent.scrape()
    finally:
        assert agent.stop() == 0, agent.log_text()
    assert {s.labels["method"] for s in s1.select(SECONDS)} == {"estimated"}
    assert "estimated from their own timing" in agent.log_text()
    runs = s1.value(RUNS, probe="sys_enter") - s0.value(RUNS, probe="sys_enter")
    secs = s1.value(SECONDS, probe="sys_enter") - s0.value(SECONDS, probe="sys_enter")
    assert runs > 100_000, runs  # the load ran
    # a counted clock read's program: ~10 ns over an empty one in
    # tests/bench/hotpath.sh, on Intel and AMD
    assert 1 < secs * 1e9 / runs < 200, (secs, runs)
    # the dispatch, estimated from the same timing at start (tp_btf here);
    # a disturbed timing at start (CI once) leaves 0, which the agent says
    if s1.value(DISPATCH, probe="sys_enter") == 0:
        assert "timed no slower with sys_enter's tracepoint attached" in agent.log_text()
    assert not s1.select(STATS_OVERHEAD), "no window ran, so nothing to subtract"


def test_a_window_as_long_as_the_interval_is_refused(agent_bin):
    result = run_agent(agent_bin, "--bpf.stats-interval=1s", "--bpf.stats-window=1s")
    assert result.returncode == 2  # a wrong command line, as for any bad value
    assert error_line(result).startswith("slowpath: error: --bpf.stats-window (1s) must be shorter")


def test_the_doctor_reports_its_own_cost(agent_bin, workload_bin, tmp_path):
    """One statistics window at the end of the observation gives the time per
    run; the runs over the whole observation, at that time, are its cost."""
    log = tmp_path / "doctor.log"
    doc = start_doctor(agent_bin, log, "--duration=4s")
    subprocess.run([str(workload_bin), "clock-raw", "200000"], check=True, capture_output=True)
    out, _ = doc.communicate(timeout=60)
    assert doc.returncode == 0, log.read_text()
    cost = json.loads(out)["own_cost"]
    by_probe = {p["probe"]: p for p in cost["probes"]}
    assert by_probe["sys_enter"]["runs"] >= 200_000
    assert 0 < by_probe["sys_enter"]["ns_per_run"] < 100_000
    assert 0 < cost["cpu_share"] < 1
    assert cost["method"] == "measured"  # as root: the kernel's statistics
    assert STATS.read_text().strip() == "0", "the window left the kernel's statistics on"


@pytest.fixture(scope="module")
def overhead_bin():
    """tests/bench/overhead.c, as tests/workloads/build.sh built it."""
    return built("overhead")


# Agent starts, each between two timings without it: one noisy timing (CI
# once read 231 ns before an agent and 170 after it) then moves one of
# three, not the median.
UNTRACED_CYCLES = 3


def test_the_untraced_syscall_costs_what_the_benchmark_times(agent_bin, overhead_bin, tmp_path):
    """What the agent measures at start for an untraced syscall
    (slowpath_untraced_syscall_added_seconds) and for one with its programs
    attached (slowpath_syscall_seconds), with the benchmark's timing with
    the agent less its mean without it (before and after) beside them, over
    a few agent starts. Both are timings of a ~170-250 ns syscall that drift
    with the host, so how close they come is tests/bench/estimates.py
    untraced's figure (CI once read 231 ns before an agent and 170 after
    it); here each figure is some ns, in the benchmark's range (a figure in
    the wrong unit is 1,000x off), and with sys_enter as a tracepoint every
    run of it is charged that dispatch less the program's own time, never
    more, or charged nothing with the agent's warning that the timing was
    disturbed."""
    figures, scrape = untraced_figures(agent_bin, overhead_bin, tmp_path, UNTRACED_CYCLES)
    ours, during, whole = figures["ours"], figures["during"], figures["whole"]
    print(figures)
    mid = lambda v: sorted(v)[len(v) // 2]
    assert all(0 <= x < 10 * mid(during) for x in ours), figures
    assert all(mid(during) / 10 < x < 10 * mid(during) for x in whole), figures
    (attached,) = scrape.select("slowpath_probe_attached", probe="sys_enter")
    if attached.labels["attach_type"] == "fentry":
        assert not scrape.select(DISPATCH), "fentry: no syscall pays a tracepoint's dispatch"
        return
    runs, dispatch = scrape.value(RUNS, probe="sys_enter"), scrape.value(DISPATCH, probe="sys_enter")
    assert runs > 0 and 0 <= dispatch / runs <= ours[-1] / 1e9 + 1e-12, (dispatch, runs, ours)
    if dispatch == 0:
        # a slow timing before attaching (CI once read "added" 0 ns) leaves
        # nothing to charge: the agent must say so rather than stay silent
        log = (tmp_path / f"agent{UNTRACED_CYCLES - 1}.log").read_text()
        assert "timed no slower with sys_enter's tracepoint attached" in log, (ours, log)


def test_process_cpu_seconds_match_the_kernels_utime_plus_stime(agent):
    """`process_cpu_seconds_total` of the running agent against the kernel's
    own `utime + stime` in /proc/<pid>/stat, read right after the scrape:
    within 0.05 s and with its fraction (a counter in whole seconds, as the
    prometheus crate's process collector gave, misses by up to 1 s). Scrapes
    make the agent use some CPU first, so the figure is not a constant 0."""
    for _ in range(20):
        agent.scrape()
    scrape = agent.scrape()
    fields = Path(f"/proc/{agent.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15
    kernel = ticks / os.sysconf("SC_CLK_TCK")
    ours = scrape.value("process_cpu_seconds_total")
    assert ours > 0 and abs(ours - kernel) <= 0.05, (ours, kernel)
    assert ours == pytest.approx(round(ours * os.sysconf("SC_CLK_TCK")) / os.sysconf("SC_CLK_TCK"))
    # the start time keeps its fraction too: boot time plus starttime (field 22)
    btime = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime "))
    start = btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    assert scrape.value("process_start_time_seconds") == pytest.approx(start, abs=1e-6)
