"""The C workloads of tests/workloads, run to completion."""

import re
import subprocess
from pathlib import Path

from helpers.oracles import perf_stat_command, perf_stat_counts, strace_counts


def run_workload(workload_bin, *args, strace=None, perf=None):
    """Run the workload to completion; returns its pid, and with an oracle
    (pid, {syscall: calls}): `strace` a path for `strace -f -c -o` (every
    syscall, slow: a ptrace stop per call), or `perf` a pair (syscall names,
    path) for perf stat on those syscalls' tracepoints (fast, exact, only
    the names given)."""
    cmd = [str(workload_bin), *map(str, args)]
    if strace is not None:
        cmd = ["strace", "-f", "-c", "-o", str(strace), *cmd]
    elif perf is not None:
        cmd = [*perf_stat_command(perf[0], perf[1]), *cmd]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    pid = int(re.search(r"pid=(\d+)", out).group(1))
    if strace is not None:
        return pid, strace_counts(Path(strace).read_text())
    if perf is not None:
        return pid, perf_stat_counts(Path(perf[1]).read_text())
    return pid
