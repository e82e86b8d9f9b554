"""Timer wakeups, exact: N timed waits that only their timer ends give the
wakeups an independent count sees (bpftrace on the timer and sched
tracepoints, `TimerOracle`), all under the right `wait` label, whatever
syscall carries the wait; a wait ended early by an event gives none.

N alone is not the reference: on this kernel about 1 wait in 500 blocks
(ru_nvcsw counts it) and resumes with no timer wakeup traced at all, which
bpftrace sees the same way (no recursion miss either: both counts lose the
same waits); on a busy CI runner 3 in 500 were seen, in 3 of 24 runs. So N
bounds both counts loosely (`N_SLACK`) while the oracle bounds slowpath
tightly (`SLACK`). Nor is the oracle exact: its classic-tracepoint
programs are skipped while another such program runs on the CPU (the global
bpf_prog_active guard), so under nesting it can miss a wakeup that slowpath's
BTF tracepoints count. Both agree within `SLACK`, and N bounds both.
Timed waits are counted exactly (`slowpath_timer_waits_total`); their
requested timeouts are a sample of at most one per process per jiffy on each
CPU, except the sleeps', which are all read.
Runs once per attach type (tp_btf and raw_tp)."""

import os
import re
import resource
import subprocess
import time

import pytest

from helpers.agent import Agent
from helpers.oracles import TimerOracle

pytestmark = pytest.mark.tier("fast")

WAKEUPS = "slowpath_timer_wakeups_total"
REQUESTED = "slowpath_timer_requested_seconds"
WAITS = "slowpath_timer_waits_total"
SLEEPS = ("nanosleep", "clock_nanosleep")  # every request read
CLOCK_MONOTONIC_COARSE = 6  # include/uapi/linux/time.h; not in the time module
HZ = round(1 / time.clock_getres(CLOCK_MONOTONIC_COARSE))  # one jiffy is its resolution
N = 500
SLACK = 2  # slowpath against the oracle (see above); seen: 0 or 1
N_SLACK = 10  # both counts against N: waits resumed with no traced wakeup; seen 0 to 3

# workload kind -> (wait label, whether its timeout is read from the syscall)
KINDS = {
    "nanosleep": ("nanosleep", True),
    "clock_nanosleep": ("clock_nanosleep", True),
    "clock_nanosleep-abs": ("clock_nanosleep", True),
    "futex": ("futex", True),
    "futex-abs": ("futex", True),
    "epoll_wait": ("epoll_wait", True),
    "poll": ("poll", True),
    "ppoll": ("poll", True),
    "select": ("select", True),
    "pselect6": ("select", True),
    "timerfd": ("timerfd", False),
    "itimer": ("posix_timer", False),
}


def run_wait(workload_bin, *args):
    out = subprocess.run([str(workload_bin), *map(str, args)], check=True,
                         capture_output=True, text=True).stdout
    pid = int(re.search(r"pid=(\d+)", out).group(1))
    nvcsw = re.search(r"nvcsw=(\d+)", out)
    return pid, int(nvcsw.group(1)) if nvcsw else None


def own(scrape, name, pid, **labels):
    return scrape.value(name, comm="sp-workload", pid=pid, **labels)


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_wait_kind_counts_exactly(agent, workload_bin, tracefs, kind):
    wait, timed_syscall = KINDS[kind]
    with TimerOracle() as oracle:
        t0 = time.monotonic()
        pid, blocked = run_wait(workload_bin, "wait", kind, N, 1000)
        elapsed = time.monotonic() - t0
    independent = oracle.wakeups([pid])  # single-threaded: tid == pid
    scrape = agent.scrape()
    wakeups = own(scrape, WAKEUPS, pid, wait=wait)
    assert abs(wakeups - independent) <= SLACK, (wakeups, independent)
    assert N - N_SLACK <= wakeups <= N, (wakeups, independent)
    assert own(scrape, WAKEUPS, pid) == wakeups, "nothing else woke it by a timer"
    if timed_syscall:
        # ~1000 wakeups/s: a timer loop, so its requested timeouts have series
        def bucket(le):
            return own(scrape, REQUESTED + "_bucket", pid, wait=wait, le=le)

        assert own(scrape, WAITS, pid, wait=wait) == N, "every timed wait, exactly"
        read = own(scrape, REQUESTED + "_count", pid, wait=wait)
        if wait in SLEEPS:
            assert read == N
        else:
            # the first wait of each jiffy: a jiffy holds several 1 ms waits
            # here (HZ 250); one more per jiffy for a move to the other CPU
            bound = 2 * (elapsed * HZ + 1)
            assert 0 < read <= min(N, bound), (read, N, elapsed, HZ)
        assert bucket("0.001") == read  # 1 ms requested (an absolute deadline: a bit less)
        assert bucket("0.0001") == 0
        assert own(scrape, REQUESTED + "_sum", pid, wait=wait) == pytest.approx(read * 1e-3, rel=0.05)


def test_a_timer_loop_that_exits_on_another_cpu_is_still_one(agent, workload_bin):
    """500 epoll_wait timeouts of 1 ms with their timers firing on CPU 1,
    then the exit on CPU 0 (SP_EXIT_CPU): what CPU 1's slot still holds of
    the process leaves in a late record after the exit, and the process
    keeps its timer-loop series, exact. (CI once lost the waits series of
    such a loop: a window whose wakeups were all still in a slot at the
    exit was never tested. Here other images take CPU 1's slot often
    enough that the loss did not show in six runs without the fix, so
    this holds the path, not that case.)"""
    out = subprocess.run(["taskset", "-c", "1", str(workload_bin), "wait", "epoll_wait", str(N), "1000"],
                         env={**os.environ, "SP_EXIT_CPU": "0"}, check=True, capture_output=True, text=True)
    pid = int(re.search(r"pid=(\d+)", out.stdout).group(1))
    scrape = agent.scrape()
    assert N - N_SLACK <= own(scrape, WAKEUPS, pid, wait="epoll_wait") <= N
    assert own(scrape, WAITS, pid, wait="epoll_wait") == N, scrape.select(WAITS, pid=str(pid))


@pytest.mark.parametrize("kind,wait", [("poll", "poll"), ("futex", "futex")])
def test_a_wait_ended_by_an_event_is_no_timer_wakeup(agent, workload_bin, kind, wait):
    pid, _ = run_wait(workload_bin, "wait-early", kind, 200)
    scrape = agent.scrape()
    assert own(scrape, WAKEUPS, pid, wait=wait) == 0
    # the other thread's own 1 ms sleeps (glibc nanosleep is clock_nanosleep)
    assert 196 <= own(scrape, WAKEUPS, pid, wait="clock_nanosleep") <= 200


def test_a_slow_waiter_gets_no_per_process_histogram(agent, workload_bin, tracefs):
    """20 waits of 20 ms: 50 wakeups/s, below the timer-loop threshold: only
    the wakeup counter and the node-level histogram carry it."""
    with TimerOracle() as oracle:
        pid, _ = run_wait(workload_bin, "wait", "futex", 20, 20_000)
    scrape = agent.scrape()
    wakeups = own(scrape, WAKEUPS, pid, wait="futex")
    assert abs(wakeups - oracle.wakeups([pid])) <= SLACK, (wakeups, oracle.by_tid.get(pid))
    assert 20 - SLACK <= wakeups <= 20
    assert scrape.select(REQUESTED + "_count", pid=pid) == []
    assert scrape.select(WAITS, pid=pid) == []
    assert scrape.value("slowpath_node_timer_waits_total", wait="futex") >= 20
    # 20 ms apart: each wait is the first of its jiffy, so each is read
    assert scrape.value("slowpath_node_timer_requested_seconds_count", wait="futex") >= 20


def children_cpu_seconds(argv):
    """CPU seconds (the kernel's utime + stime, from its exact runtime) of
    one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def kernel_wakeup_cost(workload_bin):
    """CPU seconds the kernel charges a C program per 200 us sleep: the
    difference of 4,200 and 200 sleeps, which leaves out its start and exit;
    the median of three."""
    run = lambda n: children_cpu_seconds([str(workload_bin), "sleep", str(n), "200"])
    return sorted((run(4200) - run(200)) / 4000 for _ in range(3))[1]


@pytest.mark.tier("full")  # its own agent, bracketed by the kernel's charge: the whole suite
def test_the_wakeup_cost_is_what_the_kernel_charges_a_sleeping_process(
        agent, agent_bin, workload_bin, tmp_path):
    """slowpath_timer_wakeup_cost_seconds (an agent's own timed sleeps, at its
    start) against what the kernel charges a sleeping C program, measured
    just before and just after that agent starts. What one wakeup costs on a
    virtual machine drifts with its host by 2x within minutes (CI: the
    module's agent read 24 us at its start, the kernel charged 51 us minutes
    later; this machine reads 34 to 58 us within a minute), so the agent is
    one started here and the oracle brackets its moment. Within a factor of
    2 of the bracket: the agent's start-up keeps the CPU warm while it times
    its sleeps."""
    before = kernel_wakeup_cost(workload_bin)
    fresh = Agent(agent_bin, [f"--bpf.attach-type={agent.attach_type.replace('_', '-')}"],
                  tmp_path / "agent.log")
    try:
        ours = fresh.scrape().value("slowpath_timer_wakeup_cost_seconds")
    finally:
        assert fresh.stop() == 0, fresh.log_text()
    after = kernel_wakeup_cost(workload_bin)
    low, high = sorted((before, after))
    assert 1e-7 < ours < 1e-3 and low / 2 <= ours <= 2 * high, (ours, before, after)
