"""sched_yield: sched_yield() calls by what else was runnable on the CPU
(yield spins)."""

import os

from helpers.signal_facts import flat

YIELDS = "slowpath_sched_yield_calls_total"
N = 1000

PRODUCIBLE = None

WORKLOAD = ["yield-alone", N]


def workload_counted(own):
    # every yield, whatever its runnable label (the split is test_sched_yield's)
    return own(YIELDS) == N


def own_calls():
    for _ in range(N):
        os.sched_yield()


def kernel_counted(c):
    return flat(c["sched_yield"]) >= N


# TCG: each of the sibling's yields hands it the vCPU for a slice, so few
GUEST_WORKLOADS = """
section w_yield_alone sp-workload yield-alone 5000
section w_yield_sibling sp-workload yield-sibling 100
"""


def guest_exact(run):
    """Every yield counted, and the split by the pinned vCPU's runqueue: the
    workload alone there ("none"), and with its spinning child ("others"),
    each at least 99 % (kernel threads come and go)."""
    for section, n, most in (("w_yield_alone", 5000, "none"), ("w_yield_sibling", 100, "others")):
        assert run.own(YIELDS, section) == n, section
        assert run.own(YIELDS, section, runnable=most) >= 0.99 * n, (section, run.secs[section])


# None: a yield spin burns a core, which no busy-node pod should; processes
# that never yield add no series (test_series_budget.py checks it)
BUSY_NODE = None

DASHBOARD_WORKLOADS = [["yield-alone", 1_000_000]]
DASHBOARD_UNIT_WORKLOADS = [["yield-alone", 1_000_000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
