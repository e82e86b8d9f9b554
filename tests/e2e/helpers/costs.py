"""The kernel's own figures of what a process and the agent's programs cost,
read by the tests of the agent's cost metrics (test_self_cost.py,
test_top.py) and by tests/bench/estimates.py, which holds those metrics to
them side by side: the kernel's BPF run statistics (bpftool's run_cnt and
run_time_ns), a process's time on a CPU (/proc/PID/schedstat) and the
overhead benchmark's timing of an untraced syscall."""

import json
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from helpers.agent import Agent
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


def top_cpu_share(agent_bin, workload_bin, log_path, mode, args):
    """`slowpath top`'s estimated CPU of an sp-workload `mode` process over
    three 1 s frames, and the share of a CPU the kernel ran it over the
    same frames (schedstat): (estimated, actual, the process's rows), the
    agent and the view checked to exit 0."""
    agent = Agent(agent_bin, ["--metrics.pid-label"], log_path)
    load = subprocess.Popen([str(workload_bin), mode, *args], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        view = subprocess.Popen([str(agent_bin), "top", "--batch", "--json", "-n", "3", "-d", "1",
                                 f"--agent.url={agent.url}/metrics"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the frames cover 3 s from top's first read, about when it starts
        start, t0 = on_cpu_seconds(load.pid), time.monotonic()
        out, err = view.communicate(timeout=60)
        ran, wall = on_cpu_seconds(load.pid) - start, time.monotonic() - t0
    finally:
        load.kill()
        load.wait()
        assert agent.stop() == 0, agent.log_text()
    assert view.returncode == 0, err
    rows = [r for r in map(json.loads, out.splitlines()) if r.get("pid") == str(load.pid)]
    assert len(rows) == 3, out
    estimated = sum(r["estimated_cpu_share"] * r["interval_seconds"] for r in rows) / sum(
        r["interval_seconds"] for r in rows)
    return estimated, ran / wall, rows


def untraced_figures(agent_bin, overhead_bin, work, cycles):
    """The agent's figures for an untraced syscall, in ns, over `cycles`
    agent starts, each between two timings of the benchmark without it:
    ({ours: slowpath_untraced_syscall_added_seconds, whole:
    slowpath_syscall_seconds, without, during: the benchmark's getppid
    without and with the agent}, the last agent's scrape)."""
    without, during, ours, whole = [untraced_syscall_ns(overhead_bin)], [], [], []
    for cycle in range(cycles):
        agent = Agent(agent_bin, [], Path(work) / f"agent{cycle}.log")
        try:
            during.append(untraced_syscall_ns(overhead_bin))
            scrape = agent.scrape()
        finally:
            assert agent.stop() == 0, agent.log_text()
        without.append(untraced_syscall_ns(overhead_bin))
        assert scrape.select("slowpath_untraced_syscall_added_seconds"), "no untraced syscall figure"
        ours.append(scrape.value("slowpath_untraced_syscall_added_seconds") * 1e9)
        whole.append(scrape.value("slowpath_syscall_seconds") * 1e9)
    return dict(ours=ours, without=without, during=during, whole=whole), scrape
