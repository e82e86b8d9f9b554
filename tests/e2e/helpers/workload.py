"""The C workloads of tests/workloads, run to completion."""

import re
import subprocess
from pathlib import Path

from helpers.oracles import strace_counts


def run_workload(workload_bin, *args, strace=None):
    """Run the workload to completion; returns its pid (and strace counts
    by syscall when `strace` is a path for `strace -f -c -o`)."""
    cmd = [str(workload_bin), *map(str, args)]
    if strace is not None:
        cmd = ["strace", "-f", "-c", "-o", str(strace), *cmd]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    pid = int(re.search(r"pid=(\d+)", out).group(1))
    if strace is None:
        return pid
    return pid, strace_counts(Path(strace).read_text())
