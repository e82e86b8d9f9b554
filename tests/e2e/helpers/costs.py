"""The kernel's own figures of what a process and the agent's programs cost,
read by the tests of the agent's cost metrics (test_self_cost.py,
test_top.py) and by tests/bench/estimates.py, which holds those metrics to
them side by side: the kernel's BPF run statistics (bpftool's run_cnt and
run_time_ns), a process's time on a CPU (/proc/PID/schedstat) and the
overhead benchmark's timing of an untraced syscall."""

import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

from helpers.bpf import bpf_fd_ids

STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


@contextmanager
def kernel_stats_on():
    """kernel.bpf_stats_enabled on for the block (the kernel times every
    program run), then as it was."""
    old = STATS.read_text().strip()
    STATS.write_text("1")
    try:
        yield
    finally:
        STATS.write_text(old)


def probe_of(program):
    """The hook of one of our programs, from its full (BTF) name, or None."""
    if program.startswith("sys_enter_fentry_"):
        return "sys_enter"
    for suffix in ("_btf", "_raw"):
        if program.endswith(suffix):
            return program[: -len(suffix)]
    return None


def kernel_totals(agent_pid):
    """(run_time_ns, run_cnt) per hook of the agent's programs, from bpftool;
    the agent's empty program, test-run in its windows, as "stats_floor"."""
    totals = {}
    for prog_id in bpf_fd_ids(agent_pid, "prog"):
        out = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog_id)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            continue
        info = json.loads(out.stdout)
        name = info.get("name", "")
        probe = "stats_floor" if name == "stats_floor" else probe_of(name)
        if probe:
            t, n = totals.get(probe, (0, 0))
            totals[probe] = (t + info.get("run_time_ns", 0), n + info.get("run_cnt", 0))
    return totals


@contextmanager
def clock_load(workload_bin):
    """Raw clock_gettime syscalls in a loop (sp-workload clock-raw) until the
    block ends; yields the process."""
    proc = subprocess.Popen([str(workload_bin), "clock-raw", "1000000000"], stdout=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def on_cpu_seconds(pid):
    """The kernel's exact time on a CPU of a single-threaded process, in
    seconds (/proc/PID/schedstat, first field, in ns)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def untraced_syscall_ns(overhead_bin):
    """The overhead benchmark's (tests/bench/overhead.c) own figure for an
    untraced syscall (getppid), in ns: its fastest repetition (the least
    disturbed by the rest of the machine, as the agent keeps its least
    disturbed slices), timed with the vDSO clock."""
    out = subprocess.run([str(overhead_bin), "-r", "15"], capture_output=True, text=True, check=True).stdout
    return next(float(line.split()[1]) for line in out.splitlines() if line.startswith("getppid_min "))
