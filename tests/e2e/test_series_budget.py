"""The series budget of a busy node: the agent with the flags a fleet runs
(no pid label) while hundreds of processes in dozens of cgroups hit every
signal (clock fallbacks, rt_sigprocmask, sleeps, timer loops, short-lived
churn), and the number of series it exposes must stay under the budget the
docs/fleet.md states ("A busy node"), family by family."""

import re
import time

import pytest

import busynode
from helpers.agent import Agent, Scrape
from helpers.host import cgroup2_root
from helpers.paths import REPO
from helpers.signal_facts import declared
from helpers.signals import declarations

pytestmark = pytest.mark.tier("full")

# Each declared signal's program on the busy node (helpers/signal_facts/).
BUSY = {name: facts.BUSY_NODE for name, facts in declared().items() if facts.BUSY_NODE}
# The counters of the signals with no busy-node program: the busy node's
# processes never make their events, so they must add none of their series.
QUIET = {r["family"]: d["name"] for d in declarations() for r in d["recorded"] if d["name"] not in BUSY}


def budget_from_readme():
    """The busy-node budget written in docs/fleet.md, "A busy node"."""
    text = (REPO / "docs" / "fleet.md").read_text()
    m = re.search(r"busy-node budget: at most ([\d,]+) series", text)
    assert m, "docs/fleet.md states no busy-node budget"
    return int(m.group(1).replace(",", ""))


def families(text):
    """{metric family: number of samples} of an exposition."""
    counts = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            name = re.sub(r"_(bucket|sum|count)$", "", name)
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.fixture
def pods():
    base, dirs = busynode.make_pods(cgroup2_root())
    yield dirs
    busynode.remove_pods(base, dirs)


def test_a_busy_node_stays_under_the_budget(agent_bin, workload_bin, pods, tmp_path):
    agent = Agent(agent_bin, ["--canary.interval=1s"], tmp_path / "agent.log")
    try:
        processes = busynode.run(workload_bin, pods, tmp_path / "bin")
        time.sleep(1.5)  # exits drained
        text = agent.get("/metrics")[1]
        scrape = Scrape(text)
        counts = families(text)
        total = sum(counts.values())
        (tmp_path / "busy-node.prom").write_text(text)
        # every signal with a busy-node program is there, from every pod
        cg = lambda name, comm: {s.labels["cgroup"] for s in scrape.select(name, comm=comm)  # noqa: E731
                                 if "/slowpath-busy-node-" in s.labels["cgroup"]}
        for name, service in BUSY.items():
            assert len(cg(service.family, service.comm)) == busynode.PODS, name
            for family in service.also:
                assert scrape.select(family, comm=service.comm), (name, family)
        for family, name in QUIET.items():
            assert not any("/slowpath-busy-node-" in s.labels["cgroup"] for s in scrape.select(family)), \
                f"{name}: {family} has series of busy-node processes, which never make its events"
        budget = budget_from_readme()
        report = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        print(f"busy node: {processes} processes in {busynode.PODS} cgroups: {total} series ({report})")
        assert total <= budget, f"{total} series > budget {budget}: {report}"
        # and not far under it: the budget is a measured figure, not a wish
        assert total >= budget * 0.6, f"{total} series: the budget {budget} of docs/fleet.md is stale: {report}"
    finally:
        assert agent.stop() == 0, agent.log_text()
