"""memory: THP faults (huge page allocated or fallen back) and compaction."""

from helpers.host import thp_enabled
from helpers.oracles import populated_zones

# Without THP no huge page is ever allocated on a fault: nothing to show.
PRODUCIBLE = thp_enabled

WORKLOAD = ["thp", 64]


def workload_counted(own):
    # one fault per 2 MiB of the 64 MiB region
    return own("slowpath_thp_fault_allocs_total") + own("slowpath_thp_fault_fallbacks_total") == 32


own_calls = None  # a process of this test makes no THP faults of its own on demand
kernel_counted = None

GUEST_WORKLOADS = """
section vm_before cat /proc/vmstat
section w_thp sp-workload thp 64
section vm_after cat /proc/vmstat
section zoneinfo cat /proc/zoneinfo
section w_compact sh -c 'echo pid=$$; echo 1 > /proc/sys/vm/compact_memory'
"""


def vmstat(text):
    return {k: int(v) for k, v in (line.split() for line in text.strip().splitlines())}


def guest_exact(run):
    """THP against /proc/vmstat, a manual compaction."""
    # the w_thp workload's THP faults equal the /proc/vmstat deltas around it
    before, after = vmstat(run.secs["vm_before"]), vmstat(run.secs["vm_after"])
    pid = run.pid("w_thp")
    allocs = after["thp_fault_alloc"] - before["thp_fault_alloc"]
    fallbacks = after["thp_fault_fallback"] - before["thp_fault_fallback"]
    assert allocs + fallbacks >= 32  # 64 MiB of MADV_HUGEPAGE memory
    assert run.scrape.value("slowpath_thp_fault_allocs_total", pid=pid) == allocs
    assert run.scrape.value("slowpath_thp_fault_fallbacks_total", pid=pid) == fallbacks
    # a manual compaction, by the shell that wrote compact_memory: one run per populated zone
    compact = run.pid("w_compact")
    assert run.scrape.value("slowpath_compaction_runs_total", pid=compact, trigger="manual") == \
        populated_zones(run.secs["zoneinfo"]) > 0
    assert run.scrape.value("slowpath_compaction_seconds_total", pid=compact, trigger="manual") > 0


# The busy node runs no THP program: docs/fleet.md's budget was measured
# without one.
BUSY_NODE = None

# test_dashboards' workloads also compact memory by hand (a process named
# like the workload), which no sp-workload mode does.
DASHBOARD_WORKLOADS = [["thp", 16]]  # 8 THP fault allocations
DASHBOARD_UNIT_WORKLOADS = []
DASHBOARD_EMPTY_ALLOWED = {
    # Direct compaction is an allocation stall on fragmented memory; with 20+ GiB
    # free it does not happen here, and no workload can force it safely (manual
    # compaction via /proc/sys/vm/compact_memory, which the test does, is
    # trigger="manual"). The series appears on the first direct compaction only.
    ("slowpath-overview", "Direct compaction stall time per process", "A"),
    # The same on the fleet dashboard (`> 0` keeps only those that stall).
    ("slowpath-fleet", "Direct compaction stalls: top systemd units", "A"),
    ("slowpath-fleet", "Direct compaction stalls: top nodes", "A"),
    # No THP fault falls back with this much free memory (`> 0`); the overview
    # shows the same zero as a value.
    ("slowpath-fleet", "THP fault fallbacks: top systemd units", "A"),
    ("slowpath-fleet", "THP fault fallbacks: top nodes", "A"),
    ("slowpath-fleet", "Slow-path calls per second, whole fleet", "D"),  # no fallback series at all
}
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = {
    (uid, title, ref)
    for uid, title in [
        ("slowpath-overview", "THP fault allocations and fallbacks per node"),
        ("slowpath-overview", "THP fault fallback ratio per node"),
        ("slowpath-overview", "Top processes by THP fault allocations"),
        ("slowpath-drilldown", "THP fault allocations"),
        ("slowpath-drilldown", "THP fault allocations and fallbacks"),
        ("slowpath-drilldown", "THP fault fallback ratio"),
    ]
    for ref in "AB"
}
DASHBOARD_ZERO_NORMAL = {  # 0 fallbacks
    ("slowpath-overview", "THP fault allocations and fallbacks per node", "B"),
    ("slowpath-overview", "THP fault fallback ratio per node", "A"),
    ("slowpath-drilldown", "THP fault allocations and fallbacks", "B"),
    ("slowpath-drilldown", "THP fault fallback ratio", "A"),
}
