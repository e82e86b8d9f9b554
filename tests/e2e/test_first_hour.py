"""docs/first-hour.md, run as written: every PromQL block against a real
Prometheus 3 that scrapes the real agent and evaluates the shipped rules
while a real timer loop runs, and its scrape job through promtool. A block
that follows a line saying *empty when healthy* must return nothing; every
other block must return at least one series."""

import re
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from helpers.agent import Agent
from helpers.prometheus import prom_get, prom_query, prometheus_release, prometheus_server

pytestmark = pytest.mark.tier("full")

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "first-hour.md"
RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
FINDINGS_WINDOW = 8  # seconds: --findings.window, so that a finding holds within the test
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(lang):
    """[(text before the block, block)] of the page's fenced blocks in `lang`."""
    text = PAGE.read_text()
    return [(text[:m.start()], m.group(2).strip()) for m in BLOCK.finditer(text) if m.group(1) == lang]


def queries():
    """[(query, expect_empty)]: a query is expected empty when the paragraph
    just before it says "empty when healthy" or "empty outside Kubernetes"
    (the test's agent runs on a host with no pods)."""
    found = []
    for before, body in blocks("promql"):
        paragraph = before.rstrip().rsplit("\n\n", 1)[-1]
        empty = "empty when healthy" in paragraph or "empty outside Kubernetes" in paragraph
        found.append((" ".join(body.split()), empty))
    return found


def test_the_page_has_queries_of_both_kinds():
    kinds = {empty for _, empty in queries()}
    assert kinds == {True, False}, queries()


@pytest.fixture(scope="module")
def stack(agent_bin, workload_bin, tmp_path_factory):
    """The agent with a short findings window, a 1 ms sleep loop (a timer
    loop: about 900 wakeups/s), a loop of raw clock_gettime syscalls between
    1 ms sleeps (a copy of the workload named sp-clock: clock fallbacks) and
    Prometheus 3 with the shipped rules (every
    `for` as shipped: the page's queries read no alert). Yields the base URL
    once the loop's recorded rate and its finding are stored."""
    work = tmp_path_factory.mktemp("first-hour")
    agent = Agent(agent_bin, [f"--findings.window={FINDINGS_WINDOW}s"], work / "agent.log")
    (work / "rules.yaml").write_text(RULES.read_text())
    clock_bin = work / "sp-clock"
    shutil.copy(workload_bin, clock_bin)
    loop = subprocess.Popen([workload_bin, "sleep", "1000000", "1000"], stdout=subprocess.DEVNULL)
    clock = subprocess.Popen([clock_bin, "clock-paced", "1000000", "10"], stdout=subprocess.DEVNULL)
    try:
        with prometheus_server(work, agent.port, rule_files=["rules.yaml"]) as base:
            # A 5-minute rate of a series younger than 5 minutes is a fraction
            # of the real one (rate() divides by the range): any value will do.
            wait_for(base, 'instance_cgroup_comm:slowpath_timer_wakeups:rate5m{comm="sp-workload"} > 0')
            wait_for(base, 'slowpath_finding_info{finding="timer_loop", comm="sp-workload"} == 1')
            wait_for(base, 'instance_cgroup_comm:slowpath_clock_fallbacks:rate5m{comm="sp-clock"} > 0')
            wait_for(base, 'instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m{comm="sp-workload"} > 0')
            yield base
    finally:
        for proc in (loop, clock):
            proc.kill()
            proc.wait()
        assert agent.stop() == 0


def wait_for(base, expr, timeout=60):
    deadline = time.monotonic() + timeout
    while not prom_query(base, expr):
        assert time.monotonic() < deadline, f"{expr}: still empty after {timeout} s"
        time.sleep(1)


@pytest.mark.parametrize("query,expect_empty", queries(), ids=[q for q, _ in queries()])
def test_every_query_runs_and_answers(stack, query, expect_empty):
    url = f"{stack}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    answer = prom_get(url)
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    if expect_empty:
        assert result == [], f"{query}: expected nothing on a healthy node, got {result}"
    else:
        assert result, f"{query}: no series"


def test_the_loops_are_among_the_costliest_processes(stack):
    """The day's costliest processes (section 4) include both loops; the
    timer loop's estimated CPU is all its wakeups' (the recorded rate times
    the node's measured cost of one, evaluated with it: the arithmetic of
    every term is checked exactly by tests/prometheus)."""
    [query] = [q for _, q in blocks("promql") if q.startswith("topk(10, avg_over_time(")]
    comms = {r["metric"].get("comm") for r in prom_query(stack, query)}
    assert {"sp-workload", "sp-clock"} <= comms, comms
    ratio = prom_query(stack, 'instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m{comm="sp-workload"}'
                              ' / instance_cgroup_comm:slowpath_timer_wakeup_cpu_seconds:rate5m')
    assert [float(r["value"][1]) for r in ratio] == [pytest.approx(1.0)], ratio


def test_the_scrape_job_is_valid_prometheus_configuration(tmp_path):
    [config] = [body for _, body in blocks("yaml") if body.startswith("scrape_configs:")]
    spec = yaml.safe_load(config)
    assert spec["scrape_configs"][0]["honor_labels"] is True
    (tmp_path / "prometheus.yml").write_text(config + "\n")
    res = subprocess.run([prometheus_release("3").promtool, "check", "config", str(tmp_path / "prometheus.yml")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_doctor_commands_are_the_runbooks_which_the_real_node_runs():
    """Section 5's commands are the runbook's "Running the doctor" block,
    which tests/e2e/test_real_node.py runs as written on a real node."""
    runbook = (REPO / "docs" / "runbook.md").read_text()
    section = runbook[runbook.index("## Running the doctor"):]
    [ours] = [body for _, body in blocks("sh") if "slowpath doctor --comm" in body]
    theirs = BLOCK.search(section).group(2).strip()
    assert ours == theirs
