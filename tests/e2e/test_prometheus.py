"""A real Prometheus scrapes the real agent; promtool lints the page."""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import Agent, prometheus_server, run_workload

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed")


@pytest.fixture(scope="module")
def agent(agent_bin, tmp_path_factory):
    a = Agent(agent_bin, ["--metrics.pid-label"], tmp_path_factory.mktemp("agent") / "agent.log")
    yield a
    assert a.stop() == 0


def test_promtool_accepts_the_metrics_page(agent, workload_bin):
    run_workload(workload_bin, "sleep", 10, 100)  # makes histogram series exist
    _, text = agent.get("/metrics")
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def prometheus(agent, tmp_path_factory):
    with prometheus_server(tmp_path_factory.mktemp("prometheus"), agent.port) as base:
        yield base


def query(base, promql):
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)["data"]["result"]


def wait_for(base, promql, want, timeout=30):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = query(base, promql)
            if last and float(last[0]["value"][1]) == want:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{promql}: wanted {want}, last result {last}")


def test_prometheus_scrapes_exact_counts(agent, prometheus, workload_bin):
    wait_for(prometheus, 'up{job="slowpath"}', 1)
    pid = run_workload(workload_bin, "clock-raw", 54321)
    wait_for(
        prometheus,
        f'sum(slowpath_clock_syscalls_total{{pid="{pid}",fallback="true",clock="monotonic"}})',
        54321,
    )
    wait_for(prometheus, 'sum(slowpath_probe_attached{job="slowpath"})', 10)
