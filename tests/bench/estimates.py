#!/usr/bin/python3
"""The agent's own cost estimates against the kernel's figures over the same
interval, side by side. Each of these once sat in the test suite as a bound
and failed CI when the host drifted (a wakeup's or a syscall's cost moves 2x
within minutes on a virtual machine): here they are figures, printed with
the CPU and its mitigations, and judged by a person.

  top       `slowpath top`'s CPU column (the node's measured cost of one event
            times the process's rate) against the time the kernel ran the
            process (/proc/PID/schedstat) over the same three frames, for a
            raw clock_gettime loop and a 1 ms sleep loop. Expected: an
            estimate, and low (0.4-0.85x seen: a raw clock_gettime does more
            than the getppid the syscall figure times, a 1 ms sleep wakes
            colder than the agent's 200 us ones)
  stats     with kernel.bpf_stats_enabled on throughout, the agent's
            statistics overhead per run (its last 500 ms window) against the
            empty program's time per run the kernel counted over 8 s, and
            slowpath_probe_run_seconds_total against the kernel's time less
            that floor for every run. Expected: about 1x both
  estimate  two agents under the same clock loop, the statistics off: one
            with windows (method="measured"), one without
            (--bpf.stats-interval=0, method="estimated", as where the
            statistics are not allowed); each hook's time per run in both
            over 8 s. Expected: within 25 % on the busy hooks (busynode.sh
            COST_METHOD=estimated gives the figure that counts)
  untraced  slowpath_untraced_syscall_added_seconds (timed by the agent at
            start) against the overhead benchmark's getppid with the agent
            less without it, and slowpath_syscall_seconds against the
            benchmark's getppid with the agent; medians of CYCLES agent
            starts. Expected: about 1x

    sudo tests/bench/estimates.py [--only top|stats|estimate|untraced] [--cycles 3]

Starts its own agents (target/release/slowpath, or SLOWPATH_BIN) on free
loopback ports and the workloads of tests/workloads/bin (scripts/setup.sh
--test builds them; or SP_WORKLOAD and OVERHEAD_BIN); ends them by pid.
Exits 0 when it ran: a benchmark reports, it does not judge."""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from helpers.agent import Agent  # noqa: E402
from helpers.costs import clock_load, kernel_stats_on, kernel_totals, top_cpu_share, untraced_figures  # noqa: E402

AGENT = Path(os.environ.get("SLOWPATH_BIN", REPO / "target" / "release" / "slowpath"))
WORKLOAD = Path(os.environ.get("SP_WORKLOAD", REPO / "tests" / "workloads" / "bin" / "sp-workload"))
OVERHEAD = Path(os.environ.get("OVERHEAD_BIN", REPO / "tests" / "workloads" / "bin" / "overhead"))


def cpu_line():
    """The CPU model and its mitigations, as every benchmark prints them."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), "unknown CPU")
    vulns = Path("/sys/devices/system/cpu/vulnerabilities")
    notes = [f"{p.name}: {p.read_text().strip()}" for p in sorted(vulns.iterdir())
             if p.name in ("spectre_v2", "spec_rstack_overflow", "retbleed")] if vulns.exists() else []
    return f"{model}, {os.cpu_count()} CPUs, kernel {os.uname().release}; " + "; ".join(notes)


def row(name, ours, theirs, unit):
    ratio = ours / theirs if theirs else float("nan")
    print(f"  {name:<44} ours {ours:>12.4f} {unit:<6} kernel/bench {theirs:>12.4f} {unit:<6} x{ratio:.2f}")


def top_cpu_column(work):
    """`slowpath top`'s CPU column against schedstat, per workload."""
    print("top: the CPU column against the kernel's time on a CPU (3 frames of 1 s)")
    for mode, args in [("clock-raw", ["100000000"]), ("sleep", ["100000", "1000"])]:
        estimated, actual, _ = top_cpu_share(AGENT, WORKLOAD, work / f"top-{mode}.log", mode, args)
        row(f"{mode} loop: share of a CPU", estimated, actual, "CPU")


def statistics_windows(work):
    """The statistics overhead and the programs' time against the kernel's
    accounting, with the kernel timing every run."""
    print("stats: the agent's statistics windows against bpf_stats_enabled=1 over 8 s (a clock loop)")
    with kernel_stats_on():
        agent = Agent(AGENT, ["--bpf.stats-interval=2s", "--bpf.stats-window=500ms"], work / "stats.log")
        try:
            with clock_load(WORKLOAD):
                time.sleep(3)
                k0, s0 = kernel_totals(agent.proc.pid), agent.scrape()
                time.sleep(8)
                s1, k1 = agent.scrape(), kernel_totals(agent.proc.pid)
        finally:
            agent.stop()
    secs = (s1.value("slowpath_probe_run_seconds_total", probe="sys_enter")
            - s0.value("slowpath_probe_run_seconds_total", probe="sys_enter"))
    kernel_ns = k1["sys_enter"][0] - k0["sys_enter"][0]
    kernel_runs = k1["sys_enter"][1] - k0["sys_enter"][1]
    floor_ns = (k1["stats_floor"][0] - k0["stats_floor"][0]) / max(k1["stats_floor"][1] - k0["stats_floor"][1], 1)
    row("statistics overhead per run", s1.value("slowpath_probe_stats_overhead_seconds") * 1e9, floor_ns, "ns")
    row("sys_enter time less the statistics'", secs, max(0.0, (kernel_ns - kernel_runs * floor_ns) / 1e9), "s")


def estimate_against_measure(work):
    """The estimated time per run against the measured one, side by side."""
    print("estimate: method=estimated against method=measured, two agents under one clock loop over 8 s")
    seconds, runs = "slowpath_probe_run_seconds_total", "slowpath_probe_runs_total"
    measured = Agent(AGENT, ["--bpf.stats-interval=2s", "--bpf.stats-window=500ms"], work / "measured.log")
    estimated = Agent(AGENT, ["--bpf.stats-interval=0"], work / "estimated.log")
    try:
        with clock_load(WORKLOAD):
            time.sleep(11)  # past both first figures
            m0, e0 = measured.scrape(), estimated.scrape()
            time.sleep(8)
            m1, e1 = measured.scrape(), estimated.scrape()
    finally:
        measured.stop()
        estimated.stop()

    def per_run(s0, s1, probe, method):
        n = s1.value(runs, probe=probe) - s0.value(runs, probe=probe)
        if n <= 0 or not s1.select(seconds, probe=probe, method=method) or not s0.select(seconds, probe=probe):
            return None, n
        return (s1.value(seconds, probe=probe) - s0.value(seconds, probe=probe)) * 1e9 / n, n

    for sample in e1.select(seconds):
        probe = sample.labels["probe"]
        est, n = per_run(e0, e1, probe, "estimated")
        meas, _ = per_run(m0, m1, probe, "measured")
        if est is not None and meas:
            row(f"{probe} ns per run ({n:.0f} runs)", est, meas, "ns")


def untraced_syscall(work, cycles):
    """The agent's figures for an untraced syscall against the benchmark's."""
    print(f"untraced: getppid as the agent times it at start and as tests/bench/overhead.c does ({cycles} starts)")
    figures, _ = untraced_figures(AGENT, OVERHEAD, work, cycles)
    ours, without, during, whole = (figures[k] for k in ("ours", "without", "during", "whole"))
    outside = [d - (b + a) / 2 for d, b, a in zip(during, without, without[1:])]
    row("added to an untraced syscall (median)", statistics.median(ours), statistics.median(outside), "ns")
    row("an untraced syscall with the agent (median)", statistics.median(whole), statistics.median(during), "ns")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["top", "stats", "estimate", "untraced"])
    parser.add_argument("--cycles", type=int, default=3, help="agent starts of the untraced comparison")
    args = parser.parse_args()
    for path in (AGENT, WORKLOAD, OVERHEAD):
        if not path.exists():
            sys.exit(f"estimates.py: {path} missing: cargo build --release and scripts/setup.sh --test")
    print(cpu_line())
    with tempfile.TemporaryDirectory(prefix="sp-estimates-") as tmp:
        work = Path(tmp)
        if args.only in (None, "top"):
            top_cpu_column(work)
        if args.only in (None, "stats"):
            statistics_windows(work)
        if args.only in (None, "estimate"):
            estimate_against_measure(work)
        if args.only in (None, "untraced"):
            untraced_syscall(work, args.cycles)


if __name__ == "__main__":
    main()
