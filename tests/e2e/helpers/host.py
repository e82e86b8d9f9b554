"""Facts of this machine the tests adapt to: a free port, the cgroup2 mount,
transparent huge pages."""

import ctypes
import os
import random
import socket
from pathlib import Path


_handed_out = set()


def _ephemeral_low():
    """The lowest port the kernel gives outgoing connections (and bind to 0)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port():
    """A free TCP port on loopback, below the kernel's ephemeral range: a
    port bind(0) returns is one the kernel may give the next outgoing
    connection (a scrape, a remote write) before the server that was to
    listen on it binds it (a CI run lost thanos receive so). Ports are drawn
    at random from the 10,000 below that range, not handed out twice by this
    process, and checked free by a bind."""
    high = _ephemeral_low()
    low = max(1024, high - 10_000)
    for _ in range(1000):
        port = random.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free TCP port in {low}..{high - 1}")


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


def without_transparent_huge_pages():
    """This process and every process it starts from now on get no
    transparent huge page (prctl PR_SET_THP_DISABLE, inherited over fork and
    exec): QEMU asks for them on guest memory (MADV_HUGEPAGE), and host-lane
    tests running meanwhile would compare thp_fault_alloc in /proc/vmstat,
    which counts the whole machine's, exactly."""
    pr_set_thp_disable = 41  # include/uapi/linux/prctl.h
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_thp_disable, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_THP_DISABLE): {os.strerror(ctypes.get_errno())}")
