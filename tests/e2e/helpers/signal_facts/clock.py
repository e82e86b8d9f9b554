"""clock: clock reads that entered the kernel (the vDSO's fallback, or raw
syscalls)."""

import ctypes

from helpers.signal_facts import BusyService

CLOCK = "slowpath_clock_syscalls_total"
N = 1000
GUEST_N = 20_000  # syscalls are slow under TCG

PRODUCIBLE = None  # raw syscalls: anywhere

WORKLOAD = ["clock-raw", N]


def workload_counted(own):
    return own(CLOCK, syscall="clock_gettime") == N


_libc = ctypes.CDLL(None, use_errno=True)
_SYS_clock_gettime = 228  # x86_64


def own_calls():
    """N raw clock_gettime(CLOCK_MONOTONIC)."""
    ts = (ctypes.c_long * 2)()
    for _ in range(N):
        _libc.syscall(_SYS_clock_gettime, 1, ts)


def kernel_counted(c):
    return c["clock_gettime"][1] >= N  # monotonic


GUEST_WORKLOADS = f"""
section w_raw sp-workload clock-raw {GUEST_N}
section w_cpu sp-workload cputime 2000
section w_thr sp-workload threads 4 5000
"""


def guest_exact(run):
    """Raw clock syscalls, CPU-time clocks (counted, not fallbacks), threads
    counted to their thread group."""
    assert run.own(CLOCK, "w_raw", clock="monotonic", fallback="true") == GUEST_N
    for clock in ["process_cputime", "thread_cputime", "cpu_clock"]:
        assert run.own(CLOCK, "w_cpu", clock=clock, fallback="false") == 2000
    assert run.own(CLOCK, "w_thr") == 4 * 5000


BUSY_NODE = BusyService("envoy", ("clock-raw", "20000"), CLOCK)

DASHBOARD_WORKLOADS = [["clock-raw", 20000]]  # vDSO fallbacks (raw syscalls)
DASHBOARD_UNIT_WORKLOADS = [["clock-raw", 5000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = {  # this machine's clocksource (tsc) is vDSO-capable
    ("slowpath-overview", "Nodes on a non-vDSO clocksource", "A"),
    ("slowpath-overview", "Nodes whose vDSO canary falls back", "A"),
    ("slowpath-overview", "vDSO canary per node and clock", "A"),
    ("slowpath-drilldown", "vDSO canary", "A"),
    ("slowpath-fleet", "Nodes on a clocksource the vDSO cannot read", "A"),
    ("slowpath-fleet", "Nodes whose vDSO canary falls back", "A"),
}
