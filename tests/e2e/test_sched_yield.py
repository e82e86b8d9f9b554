"""Yield spins, exact: `slowpath_sched_yield_calls_total` of a process,
summed over `runnable`, must equal the sched_yield() calls it made, and the
split must follow its CPU's runqueue: the C workload pinned alone ("none")
and pinned with a spinning sibling ("others"), each at least 99 % (kernel
threads come and go); and a JVM running the LMAX Disruptor (Maven's
com.lmax:disruptor 4.0.0) with YieldingWaitStrategy on an empty ring, whose
count bpftrace takes on syscalls:sys_enter_sched_yield in the same run. Runs
once per attach type (tp_btf and raw_tp).

Then the diagnosis, as users run the agent (no pid label, findings on a
short window): the Disruptor spin gets the `yield_spin` finding with the
JVM's known source and its fix, its measured CPU, the alert in a real
Prometheus within 120 s, and a row in `slowpath top`; the same JVM on
BlockingWaitStrategy yields nothing and is not named."""

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers.oracles import wait_ready
from helpers.tools import built
from test_findings import check_storm, stack, started, top_last_frame  # noqa: F401

pytestmark = pytest.mark.tier("fast")

YIELDS = "slowpath_sched_yield_calls_total"


@pytest.fixture(scope="module")
def disruptor():
    """The classpath of the Disruptor workload (the jar from Maven and its
    classes, tests/workloads/build.sh's)."""
    classpath = (built("disruptor-spin") / "classpath").read_text().strip()
    missing = [p for p in classpath.split(":") if not Path(p).exists()]
    assert not missing, f"{missing} gone: run scripts/setup.sh --test"
    return classpath


def run_workload(workload_bin, *args):
    out = subprocess.run([str(workload_bin), *map(str, args)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return int(re.search(r"pid=(\d+)", out).group(1)), out


@pytest.mark.parametrize("mode, n, most", [("yield-alone", 100_000, "none"), ("yield-sibling", 2000, "others")])
def test_the_c_workload_is_exact_and_split_by_its_runqueue(agent, workload_bin, mode, n, most):
    pid, out = run_workload(workload_bin, mode, n)
    assert f"yields={n}" in out, out
    time.sleep(0.5)  # the exit reaches the agent
    scrape = agent.scrape()
    assert scrape.value(YIELDS, pid=str(pid)) == n
    split = {s.labels["runnable"]: s.value for s in scrape.select(YIELDS, pid=str(pid))}
    assert split.get(most, 0) >= 0.99 * n, split
    assert "unknown" not in split, split


YIELD_COUNTER = """
tracepoint:syscalls:sys_enter_sched_yield { @yields[pid] = count(); }
BEGIN { printf("ready\\n"); }
"""


def test_the_disruptor_jvm_is_exact_against_bpftrace(agent, disruptor, tracefs):
    oracle = subprocess.Popen(["bpftrace", "-B", "line", "-e", YIELD_COUNTER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(oracle)
        jvm = subprocess.run(["java", "-cp", disruptor, "Spin", "2", "yielding"], capture_output=True,
                             text=True, timeout=120, check=True)
    finally:
        oracle.send_signal(signal.SIGINT)
        out, _ = oracle.communicate(timeout=30)
    pid = int(re.search(r"pid=(\d+)", jvm.stdout).group(1))
    counted = {int(p): int(n) for p, n in re.findall(r"@yields\[(\d+)\]: (\d+)", out)}
    assert counted.get(pid, 0) > 100_000, (counted.get(pid), jvm.stdout)  # a spin, not a few yields
    time.sleep(0.5)
    scrape = agent.scrape()
    assert scrape.value(YIELDS, pid=str(pid)) == counted[pid]
    # the consumer thread yields on a CPU of its own: nothing else of the
    # JVM is runnable (the test's other processes sleep)
    assert scrape.value(YIELDS, pid=str(pid), runnable="none") >= 0.9 * counted[pid]


@pytest.mark.tier("full")  # a finding end to end (Prometheus and its rules): the whole suite
def test_the_disruptor_spin_is_found_with_its_fix_and_shown_in_top(stack, started, disruptor, agent_bin):
    began = time.monotonic()
    _, pid = started(["java", "-cp", disruptor, "Spin", "300", "yielding"])
    _, quiet = started(["java", "-cp", disruptor, "Spin", "300", "blocking"])
    took = check_storm(stack, pid, "yield_spin", "java", "sched_yield", "jvm_thread_yield",
                       alert="SlowpathYieldSpin", started_at=began)
    print(f"Disruptor spin: finding with its known source in Prometheus {took:.1f} s after its start")
    assert took < 120, took
    agent, _ = stack
    page = json.loads(agent.get("/debug/findings")[1])
    finding = next(f for f in page["findings"] if f["id"] == "yield_spin")
    assert [p["pid"] for p in finding["processes"]] == [pid], finding["processes"]  # not the blocking one
    p = finding["processes"][0]
    assert "BlockingWaitStrategy" in p["known_source"]["fix"], p["known_source"]
    assert p["detail"]["cpu_cores"] >= 0.5, p["detail"]  # the consumer's core, measured
    assert p["detail"]["spinning_threads"] >= 1, p["detail"]
    assert "% of a CPU" in finding["title"], finding["title"]
    last = top_last_frame(agent_bin, agent, "yield")
    spinning = [r for r in last if r.get("comm") == "java" and r["rates"].get("sched_yield_alone", 0) > 10_000]
    assert spinning, last
    assert quiet not in [r.get("pid") for r in spinning]
