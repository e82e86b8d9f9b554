"""sleep: nanosleep/clock_nanosleep calls and their requested lengths."""

import time

from helpers.signal_facts import BusyService, flat

SLEEPS = "slowpath_sleep_calls_total"

PRODUCIBLE = None

WORKLOAD = ["sleep", 20, 1000]


def workload_counted(own):
    return own(SLEEPS) == 20 and own("slowpath_sleep_requested_seconds_count") == 20


def own_calls():
    """20 sleeps of 1 ms (clock_nanosleep)."""
    for _ in range(20):
        time.sleep(0.001)


def kernel_counted(c):
    return flat(c["sleep_calls"]) >= 20


GUEST_WORKLOADS = """
section w_sleep sp-workload sleep 100 1000
"""


def guest_exact(run):
    assert run.own(SLEEPS, "w_sleep", syscall="clock_nanosleep", mode="relative") == 100


BUSY_NODE = BusyService("python3", ("sleep", "100", "1000"), SLEEPS)

DASHBOARD_WORKLOADS = [
    ["sleep", 200, 1000],  # the 1 ms ticker, ~0.2 s
    ["sleep", 5, 50000],   # a few longer sleeps for the heatmap
]
DASHBOARD_UNIT_WORKLOADS = []
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
