"""tzfile: stat calls of the time-zone file (glibc's localtime() with TZ
unset)."""

from helpers.signal_facts import BusyService

TZ = "slowpath_tzfile_stat_calls_total"
N = 1000

PRODUCIBLE = None

WORKLOAD = ["localtime", N]


def workload_counted(own):
    # every localtime() but the first, which reads the file (test_tzfile.py)
    return own(TZ) == N - 1


own_calls = None  # this test's process does not stat the zone file through glibc
kernel_counted = None

GUEST_WORKLOADS = """
section w_tz sp-workload localtime 5000
section w_tz_set env TZ=:/etc/localtime sp-workload localtime 5000
section w_tz_raw sp-workload tz-stat 1000
"""


def guest_exact(run):
    # static glibc: its "/etc/localtime" literal and its stat wrapper are in
    # the binary; every localtime() but the first (which reads the file)
    # stats it, none with TZ set (the host tests check both against strace)
    assert run.own(TZ, "w_tz") == 5000 - 1
    assert run.scrape.select(TZ, pid=run.pid("w_tz_set")) == []
    # raw stat and lstat (x86_64's syscalls 4 and 6: sys_newstat, sys_newlstat)
    assert run.own(TZ, "w_tz_raw") == 2 * 1000


# local times formatted with TZ unset (busynode.run unsets it)
BUSY_NODE = BusyService("rsyslogd", ("localtime", "3000"), TZ)

DASHBOARD_WORKLOADS = [["localtime", 20000]]  # time-zone file checks (TZ unset)
DASHBOARD_UNIT_WORKLOADS = [["localtime", 5000]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
