"""fdclose: close() of descriptors that are not open (close sweeps up to the
open-files limit)."""

import os

FDCLOSE = "slowpath_fd_close_unopened_calls_total"
N = 1000
# a descriptor number past any file table this test process has
FAR_FD = 1 << 30

PRODUCIBLE = None

# two sweeps at a soft nofile of 1,000, one past the table and one inside it
# after opening every descriptor up to the limit: 2 * 997 closes of numbers
# that are not open, none of the others (sp-workload fd-sweep)
WORKLOAD = ["fd-sweep", 1, N]


def workload_counted(own):
    return own(FDCLOSE) == 2 * (N - 3)


def own_calls():
    for _ in range(N):
        try:
            os.close(FAR_FD)
        except OSError:
            pass  # EBADF: the call counted


def kernel_counted(c):
    return c["fd_close_unopened"] >= N


# the guests' init keeps the kernel's hard nofile, 4096
GUEST_WORKLOADS = """
section w_fd sp-workload fd-sweep 2 4000
section w_fd_small sp-workload fd-sweep 0 64
"""


def guest_exact(run):
    """(N + 1) sweeps of LIMIT - 3 closes each: past the table, then inside
    it once every descriptor was opened and closed (none of those counted,
    nor the close_range calls)."""
    assert run.own(FDCLOSE, "w_fd") == 3 * (4000 - 3)
    assert run.own(FDCLOSE, "w_fd_small") == 64 - 3


# None: a sweep is an event of a spawn, not a service's steady state, and the
# busy node's programs never sweep; test_series_budget.py checks that they
# add no series of the signal's counters (processes that never sweep add none)
BUSY_NODE = None

DASHBOARD_WORKLOADS = [["fd-sweep", 4, 5000]]  # 5 sweeps of 4,997 closes
DASHBOARD_UNIT_WORKLOADS = [["fd-sweep", 1, 5000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
