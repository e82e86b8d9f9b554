"""fork: forks that copy the address space (no CLONE_VM), timed, with the
parent's size and whether the child execs (forks of a large address space)."""

import os

COPIES = "slowpath_fork_copies_total"
SECONDS = "slowpath_fork_copy_seconds_total"
EXECS = "slowpath_fork_execs_total"
MAPPED = "slowpath_fork_mapped_bytes_total"
N = 20

PRODUCIBLE = None

# N forks, each child exec'ing, of a process that touched 256 MiB: a few ms
# each, past the 10 ms in all and 1 ms each a process's fork series wait for
WORKLOAD = ["forks", "fork-exec", 256, N]


def workload_counted(own):
    return own(COPIES) == N and own(EXECS) == N and own(MAPPED) >= N * (256 << 20)


def own_calls():
    for _ in range(N):
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)


def kernel_counted(c):
    return sum(c["fork_copies"]) >= N and c["fork_copy_ns"] > 0


# static binaries in the guests; 1 GiB of guest memory
GUEST_WORKLOADS = """
section w_fork sp-workload forks fork 256 20
section w_fork_exec sp-workload forks fork-exec 256 20
section w_fork_clone3 sp-workload forks clone3 256 20
section w_fork_vfork sp-workload forks vfork 256 20
section w_fork_spawn sp-workload forks spawn 256 20
"""


def guest_exact(run):
    """20 copying forks each of glibc's fork, fork then exec, and a raw
    clone3, with the execs of the second; vfork and posix_spawn none."""
    for section in ("w_fork", "w_fork_exec", "w_fork_clone3"):
        assert run.own(COPIES, section) == 20, (section, run.secs[section])
        assert run.own(SECONDS, section) > 0, section
        assert run.own(MAPPED, section) >= 20 * (256 << 20), section
    assert run.own(EXECS, "w_fork_exec") == 20
    assert run.own(EXECS, "w_fork") == 0
    for section in ("w_fork_vfork", "w_fork_spawn"):
        assert run.own(COPIES, section) == 0, section


# None: the busy node's services fork rarely and small, below the 10 ms a
# process's series wait for; test_series_budget.py checks they add none
BUSY_NODE = None

DASHBOARD_WORKLOADS = [["forks", "fork-exec", 256, 500]]
DASHBOARD_UNIT_WORKLOADS = [["forks", "fork-exec", 256, 200]]
DASHBOARD_EMPTY_ALLOWED = set()
DASHBOARD_EMPTY_UNLESS_PRODUCIBLE = set()
DASHBOARD_ZERO_NORMAL = set()
