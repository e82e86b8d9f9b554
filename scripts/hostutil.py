"""Helpers the standalone scripts (soak.py, fleet-sim.py) share."""

import socket
import sys
from pathlib import Path


def free_port():
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cgroup2_root():
    """Mount point of the cgroup2 hierarchy; exits when there is none."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    sys.exit(f"{Path(sys.argv[0]).name}: no cgroup2 mount")
