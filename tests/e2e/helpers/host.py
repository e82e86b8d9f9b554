"""Facts of this machine the tests adapt to: a free port, the cgroup2 mount,
transparent huge pages."""

import socket
from pathlib import Path


def free_port():
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cgroup2_root():
    """Mount point of the cgroup2 hierarchy (None on a v1-only host)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def thp_enabled():
    """Whether transparent huge pages can be allocated on faults here."""
    return "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
