"""sigmask: rt_sigprocmask calls (getcontext/setcontext, signal masks)."""

import signal

from helpers.signal_facts import BusyService, flat

SIGMASK = "slowpath_rt_sigprocmask_calls_total"
N = 1000

PRODUCIBLE = None

WORKLOAD = ["raw-sigmask", N // 2]  # two calls each


def workload_counted(own):
    return own(SIGMASK) == N


def own_calls():
    for _ in range(N):
        signal.pthread_sigmask(signal.SIG_BLOCK, [])


def kernel_counted(c):
    return flat(c["sigprocmask"]) >= N


GUEST_WORKLOADS = """
section w_ctx sp-workload context 5000
section w_churn sp-workload churn-par 200 10 8
"""


def guest_exact(run):
    """getcontext/setcontext pairs; 200 short processes (renamed sp-churnp),
    10 calls each."""
    assert run.own(SIGMASK, "w_ctx", op="query") == 5000
    assert run.own(SIGMASK, "w_ctx", op="setmask") == 5000
    assert run.scrape.value(SIGMASK, comm="sp-churnp") == 200 * 10


BUSY_NODE = BusyService("ruby", ("context", "3000"), SIGMASK)

DASHBOARD_WORKLOADS = [["context", 20000]]  # getcontext/setcontext: query + setmask
DASHBOARD_UNIT_WORKLOADS = [["context", 5000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
