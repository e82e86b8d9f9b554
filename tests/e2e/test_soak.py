"""The soak script, short: 3 minutes of process and cgroup churn with a
scrape every second, and two long-lived storms the agent's findings must
name, must stay inside its bounds (RSS, its growth, CPU, slowest scrape, no
lost event, no scrape error, the storms' findings) and write its CSV and PNG.
The 30-minute run in docs/cost.md is the same script with --minutes 30."""

import argparse
import csv
import importlib.util
import subprocess

from helpers.paths import REPO
import pytest

pytestmark = pytest.mark.tier("full")

SOAK = REPO / "scripts" / "soak.py"


def load_soak():
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_three_minutes_of_churn_stay_inside_the_bounds(agent_bin, workload_bin, tmp_path):
    out = tmp_path / "soak"
    result = subprocess.run(
        ["/usr/bin/python3", SOAK, "--minutes", "3", "--grace", "30s", "--out", out, "--check",
         "--agent", agent_bin, "--workload", workload_bin],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = list(csv.DictReader(open(out / "soak.csv")))
    assert [int(r["minute"]) for r in rows] == [0, 1, 2, 3]
    last = rows[-1]
    # the churn really ran: about 76 processes and 5.5 cgroups a second
    assert int(last["processes"]) > 8000 and int(last["cgroups"]) > 500, last
    assert float(last["lost_events"]) == 0 and float(last["scrape_errors"]) == 0
    # the long-lived storms hold their findings, named from their call sites
    assert {"vdso_bypass/direct_clock_syscall", "timer_loop/glibc_sleep_loop"} <= set(last["storm_findings"].split())
    # series of gone cgroups are retired (30 s grace): no growth after the first minutes
    assert int(last["series"]) <= int(rows[2]["series"]) * 1.2, rows
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_check_fails_on_each_broken_bound():
    soak = load_soak()
    args = argparse.Namespace(max_rss_mib=100, max_cpu_percent=5, max_scrape_seconds=1, max_rss_growth_mib=8)
    good = {"minute": 1, "rss_mib": 30.0, "cpu_percent": 1.0, "max_scrape_seconds": 0.01,
            "lost_events": 0.0, "scrape_errors": 0.0,
            "storm_findings": "timer_loop/glibc_sleep_loop vdso_bypass/direct_clock_syscall"}
    assert soak.check([dict(good, minute=0), good, dict(good, minute=2)], args) == []
    for change, words in [({"rss_mib": 120.0}, "RSS 120.0"), ({"cpu_percent": 7.5}, "CPU 7.50"),
                          ({"max_scrape_seconds": 2.5}, "scrape took 2.500"), ({"lost_events": 3.0}, "3 events lost"),
                          ({"scrape_errors": 1.0}, "1 scrape errors"), ({"rss_mib": 40.0}, "RSS grew 10.0"),
                          ({"storm_findings": "timer_loop/"}, "the storms' findings at the end: timer_loop/")]:
        broken = soak.check([dict(good, minute=0), good, dict(good, minute=2, **change)], args)
        assert any(words in line for line in broken), (change, broken)
