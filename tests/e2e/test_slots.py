"""Exact counts where the per-CPU combining slots of the syscall counters
change hands (struct sp_slot in bpf/slowpath.h): processes taking turns on
one CPU, a process whose threads counted on every CPU exiting on one of
them, an exec whose old image still has counts in another CPU's slot. Only
the tp_btf sys_enter and sched_waking programs use the slots; under raw_tp
the same cases check the plain path. The oracles are strace -c (each
workload's own calls) and bpftrace on the timer tracepoints (TimerOracle)."""

import os
import re
import subprocess

from helpers.oracles import TimerOracle, strace_counts
from helpers.workload import run_workload
import pytest

pytestmark = pytest.mark.tier("fast")

CLOCK = "slowpath_clock_syscalls_total"
WAKEUPS = "slowpath_timer_wakeups_total"
REQUESTED = "slowpath_timer_requested_seconds"


def clock_calls(scrape, pid, comm="sp-workload"):
    return scrape.value(CLOCK, comm=comm, pid=pid)


def test_slots_are_switched_on_after_a_fold_of_every_cpu(agent):
    # the agent switches them on only after running the fold on every CPU;
    # only the tp_btf program counts in them, but they are on either way
    assert "per-CPU combining slots on" in agent.log_text()
    assert agent.scrape().value("slowpath_combining_slots_enabled") == 1


def test_processes_taking_turns_on_one_cpu_count_exactly(agent, workload_bin, tmp_path):
    """Three processes on CPU 0, each yielding after every clock read: the
    slot changes owner on nearly every call and folds each time."""
    n = 20_000
    procs = []
    for i in range(3):
        cmd = ["taskset", "-c", "0", "strace", "-f", "-c", "-o", str(tmp_path / f"st{i}"),
               str(workload_bin), "clock-yield", str(n)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    pids = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        pids.append(int(out.split("pid=")[1].split()[0]))
    scrape = agent.scrape()
    for i, pid in enumerate(pids):
        assert strace_counts((tmp_path / f"st{i}").read_text())["clock_gettime"] == n
        assert clock_calls(scrape, pid) == n, pid


def test_counts_left_on_other_cpus_reach_the_exited_process(agent, workload_bin):
    """Threads on every CPU, then the process exits on one: what the other
    CPUs' slots still hold arrives after the exit record (a late record)
    and joins the same series. Repeated, so that some exits race the fold."""
    for _ in range(5):
        pid = run_workload(workload_bin, "threads", os.cpu_count() * 2, 10_000)
        assert clock_calls(agent.scrape(), pid) == os.cpu_count() * 2 * 10_000


def test_exec_splits_counts_between_images(agent, workload_bin, tmp_path):
    """2 x N calls on two CPUs by the first image, then M by the image it
    execs (named sp-after-exec, so its series differs): each image keeps
    exactly its own, though the old image's last counts sit in a slot of
    another CPU when the new one starts."""
    n, m = 30_000, 7_000
    renamed = tmp_path / "sp-after-exec"
    renamed.symlink_to(workload_bin)
    out = subprocess.run(
        ["strace", "-f", "-c", "-o", str(tmp_path / "st"), str(workload_bin), "exec-split", str(n),
         str(m), str(renamed)],
        check=True, capture_output=True, text=True).stdout
    pid = int(out.split("pid=")[1].split()[0])
    assert strace_counts((tmp_path / "st").read_text())["clock_gettime"] == 2 * n + m
    scrape = agent.scrape()
    assert clock_calls(scrape, pid) == 2 * n
    assert clock_calls(scrape, pid, comm="sp-after-exec") == m


def test_timer_wakeups_of_processes_taking_turns_count_exactly(agent, workload_bin, tracefs):
    """Three timer loops on CPU 0 (1 ms nanosleeps): the wakeup slot of CPU 0
    changes owner at nearly every wakeup, each is still counted for its own
    process, and each is still found to be a timer loop (its requested
    timeouts get series: the slot hands its window's wakeups in)."""
    n = 600
    with TimerOracle() as oracle:
        procs = [subprocess.Popen(["taskset", "-c", "0", str(workload_bin), "wait", "nanosleep",
                                   str(n), "1000"], stdout=subprocess.PIPE, text=True)
                 for _ in range(3)]
        pids = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            pids.append(int(re.search(r"pid=(\d+)", out).group(1)))
    scrape = agent.scrape()
    for pid in pids:
        wakeups = scrape.value(WAKEUPS, comm="sp-workload", pid=pid, wait="nanosleep")
        independent = oracle.wakeups([pid])
        assert abs(wakeups - independent) <= 2, (pid, wakeups, independent)
        assert n - 10 <= wakeups <= n, (pid, wakeups)
        assert scrape.value(REQUESTED + "_count", comm="sp-workload", pid=pid, wait="nanosleep") == n


def test_exits_while_other_processes_take_the_slots_lose_nothing(agent, workload_bin):
    """Processes whose threads counted on both CPUs exit one after another
    while two others (one per CPU) take the slots at every call: folds from
    other CPUs race the exits, and the exit waits for them (the handshake of
    entry_fold_begin() and entry_retiring())."""
    ncpu = os.cpu_count()
    pressure = [subprocess.Popen(["taskset", "-c", str(cpu % ncpu), str(workload_bin), "clock-yield",
                                  "100000000"], stdout=subprocess.DEVNULL)
                for cpu in range(2)]
    try:
        pids = [run_workload(workload_bin, "threads", 2 * ncpu, 3_000) for _ in range(40)]
    finally:
        for p in pressure:
            p.kill()
            p.wait()
    scrape = agent.scrape()
    for pid in pids:
        assert clock_calls(scrape, pid) == 2 * ncpu * 3_000, pid


def test_ia32_syscalls_of_a_64_bit_task_are_not_counted(agent, workload_bin, tmp_path):
    """A 64-bit task alternates the SYSCALL instruction's clock_gettime (228)
    with ia32 syscall 228 (fsetxattr) by int $0x80, on one CPU: the counting
    path remembers the task of the last syscall (current_image()), yet every
    ia32 call is told apart and only the clock reads count."""
    n = 20_000
    out = subprocess.run(
        ["strace", "-f", "-c", "-o", str(tmp_path / "st"), str(workload_bin), "clock-int80", str(n)],
        check=True, capture_output=True, text=True).stdout
    pid = int(out.split("pid=")[1].split()[0])
    assert "int80=-14" in out  # the ia32 calls did run (EFAULT)
    assert strace_counts((tmp_path / "st").read_text())["clock_gettime"] == n
    assert clock_calls(agent.scrape(), pid) == n


def test_children_reusing_an_exited_childs_stack_count_for_themselves(agent, workload_bin):
    """Children forked one after another on one CPU, each making K clock reads
    and exiting: a child often gets the kernel stack of the one before it
    (the kernel keeps freed stacks per CPU for the next fork), so the address
    of its user registers, which the counting path remembers, is the dead
    child's. Each child's series still holds exactly its own K."""
    procs, k = 60, 2_000
    seen = {s.labels["pid"] for s in agent.scrape().select(CLOCK, comm="sp-churn")}
    subprocess.run(["taskset", "-c", "0", str(workload_bin), "churn", str(procs), str(k)],
                   check=True, capture_output=True)
    new = [s for s in agent.scrape().select(CLOCK, comm="sp-churn") if s.labels["pid"] not in seen]
    per_pid = {}
    for s in new:
        per_pid[s.labels["pid"]] = per_pid.get(s.labels["pid"], 0) + s.value
    assert len(per_pid) == procs, per_pid
    assert set(per_pid.values()) == {k}, per_pid
