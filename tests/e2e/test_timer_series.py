"""The timer signal's series budget. Nearly every process on a node has
timer wakeups (every Go, JVM and Node runtime waits with timeouts), so the
signal must stay near two series per process: one wakeup counter per `wait`
kind the process used, and no per-process histogram unless the process is a
timer loop. Simulated with 300 processes that wait like idle runtimes (one
thread in 50 ms futex timeouts, one in 100 ms epoll_wait timeouts)."""

import re
import subprocess
import time
from collections import Counter

from helpers.agent import Agent
import pytest

pytestmark = pytest.mark.tier("full")

PROCESSES = 300
TIMER_FAMILIES = ("slowpath_timer_wakeups_total", "slowpath_timer_requested_seconds")


def test_300_idle_runtimes_cost_two_timer_series_each(agent_bin, workload_bin, tmp_path):
    agent = Agent(agent_bin, ["--metrics.pid-label"], tmp_path / "agent.log")
    procs = []
    try:
        for _ in range(PROCESSES):
            procs.append(subprocess.Popen([str(workload_bin), "idle-runtime", "10"], stdout=subprocess.PIPE,
                                          text=True))
        pids = {re.search(r"pid=(\d+)", p.stdout.readline()).group(1) for p in procs}
        time.sleep(4)  # several 100 ms epoll timeouts in every process
        scrape = agent.scrape()
        ours = [s for s in scrape.samples
                if s.name.startswith(TIMER_FAMILIES) and s.labels.get("pid") in pids]
        per_process = Counter(s.labels["pid"] for s in ours)
        waits = Counter(s.labels["wait"] for s in ours)
        print(f"{len(ours)} timer series for {PROCESSES} processes, by wait: {dict(waits)}")
        assert len(per_process) == PROCESSES, "every process was woken by its timers"
        assert [s for s in ours if s.name.startswith("slowpath_timer_requested_seconds")] == [], \
            "no per-process histogram below the timer-loop threshold"
        assert len(ours) / PROCESSES <= 2.1, dict(waits)
        assert {"futex", "epoll_wait"} <= set(waits)
        # and the node-level histogram: one per wait kind seen on the node, not per process
        node = {s.labels["wait"] for s in scrape.select("slowpath_node_timer_requested_seconds_count")}
        assert {"futex", "epoll_wait"} <= node
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        assert agent.stop() == 0, agent.log_text()
