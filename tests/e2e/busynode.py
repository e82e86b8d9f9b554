"""A busy node, as the series-budget test and the fleet simulation
(scripts/fleet-sim.sh) make it: PODS cgroups, each running a program per
signal under real program names (the comm is the name a program is run
by; each signal's BUSY_NODE in helpers/signal_facts/: raw clock reads,
getcontext/setcontext, 1 ms sleeps, a 2 ms futex ticker (a timer loop),
local times formatted with TZ unset) and a burst of short-lived children.
40 pods are 400 processes."""

import os
import subprocess
from pathlib import Path

from helpers.signal_facts import every_module

PODS = 40
# (comm, sp-workload arguments): every signal's program, and the churn
SERVICES = [(f.BUSY_NODE.comm, list(f.BUSY_NODE.args)) for f in every_module().values() if f.BUSY_NODE] + [
    ("nginx", ["churn", "5", "100"]),
]
PROCESSES_PER_POD = len(SERVICES) + 4  # nginx's five children besides it


def make_pods(cgroup_root, pods=PODS):
    """PODS fresh cgroups under a parent of our own; returns (parent, dirs)."""
    base = Path(cgroup_root) / f"slowpath-busy-node-{os.getpid()}"
    base.mkdir()
    dirs = [base / f"pod{i}" for i in range(pods)]
    for d in dirs:
        d.mkdir()
    return base, dirs


def remove_pods(base, dirs):
    for d in dirs:
        d.rmdir()
    base.rmdir()


def run(workload_bin, dirs, bindir):
    """Run every service of every pod at once, each in its pod's cgroup, and
    wait for all; returns the number of processes made."""
    bindir = Path(bindir)
    bindir.mkdir(exist_ok=True)
    for comm, _ in SERVICES:
        link = bindir / comm
        if not link.exists():
            link.symlink_to(workload_bin)
    procs = []
    env = {k: v for k, v in os.environ.items() if k != "TZ"}  # glibc checks the zone file
    for cgroup in dirs:
        for comm, args in SERVICES:
            procs.append(subprocess.Popen(
                [str(bindir / comm), *args], stdout=subprocess.DEVNULL, env=env,
                preexec_fn=lambda c=cgroup: (c / "cgroup.procs").write_text("0\n")))
    for p in procs:
        if p.wait(timeout=300) != 0:
            raise RuntimeError(f"{p.args} exited {p.returncode}")
    return len(dirs) * PROCESSES_PER_POD
