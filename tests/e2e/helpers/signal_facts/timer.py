"""timer: timer wakeups, timed waits and their requested timeouts."""

import threading

from helpers.signal_facts import BusyService, flat

WAKEUPS = "slowpath_timer_wakeups_total"

PRODUCIBLE = None

WORKLOAD = ["wait", "futex", 20, 1000]


def workload_counted(own):
    # a few waits in 500 resume with no timer wakeup (test_timer_wakeups.py)
    return 15 <= own(WAKEUPS, wait="futex") <= 20


def own_calls():
    """20 futex waits with a 1 ms timeout that expires."""
    for _ in range(20):
        threading.Event().wait(0.001)


def kernel_counted(c):
    # timed futex waits (enum sp_wait 2) and timer wakeups
    return c["timer_waits"][2] >= 20 and flat(c["timer_wakeups"]) > 0


GUEST_WORKLOADS = """
section w_wait sp-workload wait nanosleep 200 2000
section w_fwait sp-workload wait futex 600 1000
"""


def guest_exact(run):
    """200 timer wakeups of a 2 ms nanosleep (slack as in
    test_timer_wakeups), 600 timed futex waits."""
    woken = run.own(WAKEUPS, "w_wait", wait="nanosleep")
    assert 198 <= woken <= 200, woken
    # 600 timed futex waits of 1 ms: a timer loop (>= 200 wakeups in some
    # second), so it has its own series; every wait counted, and a sample of
    # their timeouts read (at most one per jiffy on each CPU: HZ differs
    # between the guests' kernels, so only its bounds are checked)
    assert run.own("slowpath_timer_waits_total", "w_fwait", wait="futex") == 600
    read = run.own("slowpath_timer_requested_seconds_count", "w_fwait", wait="futex")
    assert 0 < read <= 600, read
    assert run.own("slowpath_timer_requested_seconds_bucket", "w_fwait", wait="futex", le="0.001") == read


# a 2 ms futex ticker: a timer loop
BUSY_NODE = BusyService("java", ("wait", "futex", "400", "2000"), WAKEUPS,
                        also=("slowpath_timer_requested_seconds_bucket",))

DASHBOARD_WORKLOADS = [["wait", "futex", 1000, 1000]]  # a timer loop in futex, ~1.1 s
DASHBOARD_UNIT_WORKLOADS = [["wait", "futex", 300, 1000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
