"""A real Prometheus scrapes the real agent; promtool lints the page. Each
test runs against Prometheus 3 and Debian's 2.42 (`release` in conftest.py):
3.x negotiates the format (Accept: protobuf, OpenMetrics, text) and fails a
scrape whose content type it cannot read unless the job names a fallback."""

import json
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from helpers.agent import Agent
from helpers.prometheus import prom_query, prometheus_server
from helpers.signals import every_hook
from helpers.workload import run_workload

pytestmark = pytest.mark.tier("full")

@pytest.fixture(scope="module")
def agent(agent_bin, tmp_path_factory):
    a = Agent(agent_bin, ["--metrics.pid-label"], tmp_path_factory.mktemp("agent") / "agent.log")
    yield a
    assert a.stop() == 0


def test_promtool_accepts_the_metrics_page(agent, workload_bin, release):
    run_workload(workload_bin, "sleep", 10, 100)  # makes histogram series exist
    _, text = agent.get("/metrics")
    result = subprocess.run([release.promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def prometheus(agent, release, tmp_path_factory):
    with prometheus_server(tmp_path_factory.mktemp("prometheus"), agent.port, release=release) as base:
        yield base


def test_the_release_is_the_one_named(release):
    version = release.version()
    assert version.split(".")[0] == release.name.split(".")[0], (release, version)
    if release.name == "2.42":
        assert version.startswith("2.42."), version


def wait_for_value(base, promql, want, timeout=30):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = prom_query(base, promql)
            if last and float(last[0]["value"][1]) == want:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{promql}: wanted {want}, last result {last}")


def test_prometheus_scrapes_exact_counts(agent, prometheus, workload_bin):
    wait_for_value(prometheus, 'up{job="slowpath"}', 1)
    pid = run_workload(workload_bin, "clock-raw", 54321)
    wait_for_value(
        prometheus,
        f'sum(slowpath_clock_syscalls_total{{pid="{pid}",fallback="true",clock="monotonic"}})',
        54321,
    )
    # every hook of every signal, attached (the declarations say which)
    wait_for_value(prometheus, 'sum(slowpath_probe_attached{job="slowpath"})', len(every_hook()))


def test_the_scrape_is_healthy_with_no_fallback(agent, prometheus):
    """The target is up with no scrape error, and every sample parsed: a
    Prometheus 3 that could not read the content type would have failed
    the scrape (no fallback_scrape_protocol is configured)."""
    wait_for_value(prometheus, 'up{job="slowpath"}', 1)
    with urllib.request.urlopen(f"{prometheus}/api/v1/targets", timeout=5) as resp:
        targets = json.load(resp)["data"]["activeTargets"]
    assert [(t["labels"]["job"], t["health"], t["lastError"]) for t in targets] == [("slowpath", "up", "")]
    scraped = prom_query(prometheus, 'scrape_samples_scraped{job="slowpath"}')
    assert float(scraped[0]["value"][1]) > 100, scraped
