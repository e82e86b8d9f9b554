"""The BPF objects in the kernel: those a process holds open, and the
programs named like slowpath's, whoever loaded them."""

import json
import re
import subprocess
import time
from pathlib import Path


def bpf_fd_ids(pid, kind):
    """Ids of the BPF objects of `kind` ("prog" or "map") that process `pid`
    holds open, from its fdinfo."""
    ids = set()
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            m = re.search(rf"^{kind}_id:\s+(\d+)$", fd.read_text(), re.M)
        except OSError:  # closed meanwhile
            continue
        if m:
            ids.add(int(m.group(1)))
    return ids


# Our programs as bpftool shows them (names are cut at 15 characters).
OUR_PROGRAMS = ("sys_enter_", "sched_process_e", "mm_page_alloc_", "mm_compaction_b", "mm_compaction_e", "cgroup_mkdir_")


def our_program_ids():
    """Ids of loaded BPF programs named like ours (any slowpath instance)."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"] for p in json.loads(out) if p.get("name", "").startswith(OUR_PROGRAMS)}


def wait_unloaded(ids, timeout=5.0):
    """The kernel frees a closed program after an RCU grace period: poll."""
    deadline = time.monotonic() + timeout
    while ids & our_program_ids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
