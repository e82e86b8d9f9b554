"""The fleet simulation's two backends give the fleet dashboard the same
answers: one Prometheus 3 scraping every node and evaluating the shipped
rules, and two Prometheus 3 agents (hashmod shards) remote-writing to two
thanos receive, with thanos query answering and thanos rule evaluating the
same rules. scripts/fleet-sim.py --backend both --check runs both at once on
the same 20 recorded busy nodes (the real agent's page) and compares every
fleet dashboard query at one instant (and at up to two later ones while
some differ: an evaluation that raced a scrape's append reads short, once);
it fails on an answer that differs at the last, a rule that fails to
evaluate, a target down or a component that exits.

The answers are compared with every 5-minute rate window full, as after six
minutes of scraping, without waiting for them: --backfill 6 gives both
backends the same six minutes of each node's history (backdated samples on
the line the live counters continue) through their own remote-write
endpoints before the nodes answer a scrape; then both scrape live for half a
minute, and for the half minute of measuring, so the rules evaluate over
windows that end in live samples. A full window's rate() of a linearly
growing counter is its slope whenever the samples were taken, so the two
backends agree to rounding (within 1 %); one that lost its live samples
would answer lower rates and differ, and the targets counted up come from
live scrapes only (on Thanos, through the agents' remote write)."""

import re
import subprocess
from pathlib import Path

from helpers.prometheus import prometheus_release
from helpers.signal_facts import declared
from helpers.signals import declarations
from helpers.tools import tools_cache
import pytest

pytestmark = pytest.mark.tier("full")

FLEET_SIM = Path(__file__).resolve().parents[2] / "scripts" / "fleet-sim.py"
# The fleet rows of the signals with no busy-node program (helpers/signal_facts/):
# no recorded busy node makes their events, so their panels stay empty.
QUIET_FLEET_ROWS = [r for d in declarations() if not declared()[d["name"]].BUSY_NODE
                    for r in d["recorded"] if r["fleet"]]
PANELS_PER_FLEET_ROW = 4


def quiet_queries():
    """The fleet dashboard's queries of the quiet rows: their 4 tables, and
    their line in the fleet totals where they count events per second."""
    return sum(PANELS_PER_FLEET_ROW + (0 if r["family"].endswith("_seconds_total") else 1) for r in QUIET_FLEET_ROWS)


def test_single_prometheus_and_thanos_answer_the_fleet_dashboard_alike(agent_bin, workload_bin, tmp_path):
    thanos = tools_cache() / "thanos" / "bin" / "thanos"
    result = subprocess.run(
        ["/usr/bin/python3", FLEET_SIM, "--backend", "both", "--nodes", "20", "--minutes", "0.5",
         "--backfill", "6", "--check",
         "--out", tmp_path / "fleet", "--agent", agent_bin, "--workload", workload_bin,
         "--prometheus", prometheus_release("3").server, "--thanos", thanos],
        capture_output=True, text=True, timeout=600,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "fleet-sim: backfilled 6 minutes (24 samples a series) of 20 nodes into prometheus, thanos" in out, out
    m = re.search(r"(\d+) fleet dashboard queries compared at one instant: (\d+) alike \((\d+) with data\), "
                  r"(\d+) differ", out)
    assert m, out
    total, alike, with_data, differ = map(int, m.groups())
    assert (alike, differ) == (total, 0), out
    # Empty on both, as on any node like the busy one: the rows of the signals
    # it has no program for (today compaction stalls, THP fallbacks and close
    # sweeps, yield spins: 4 tables each and a line of the totals), systemd
    # units (5: its processes run in pods) and findings (its storms are too
    # short to hold one).
    quiet = [r["fleet"]["title"] for r in QUIET_FLEET_ROWS]
    assert with_data >= total - quiet_queries() - 6, (quiet, out)
    for backend in ("prometheus", "thanos"):
        assert f"fleet-sim: {backend}, 20 nodes:" in out and "20 targets up" in out, out
