"""The signals as the agent declares them (`slowpath signals`, hidden): the
lists a test would otherwise keep by hand. A test that takes its rows from
here checks them against the kernel or a real scrape beside, so the agent
is not its own oracle."""

import functools
import json
import os
import subprocess
from pathlib import Path

from helpers.paths import REPO


def agent_path():
    """The agent under test: $SLOWPATH_BIN, else the release build."""
    return Path(os.environ.get("SLOWPATH_BIN", REPO / "target" / "release" / "slowpath"))


@functools.cache
def declarations():
    """Every signal's declaration, in the agent's order: [{name, families:
    [{name, type, help}], hooks, syscalls (this architecture's), call_sites ([{name, what}]),
    top: {columns, timeouts, not_shown}}]. Read at collection time too (for
    parametrizing), hence a clear error when the agent is not built."""
    path = agent_path()
    if not path.exists():
        raise RuntimeError(f"{path} missing: build it with cargo build --release")
    out = subprocess.run([str(path), "signals"], check=True, capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout)["signals"]


def by_name():
    return {d["name"]: d for d in declarations()}


# The hooks the agent attaches whatever signals it collects: process exits
# and execs, new cgroups.
CORE_HOOKS = {"sched_process_exit", "sched_process_exec", "cgroup_mkdir"}


# The hooks the signals declare on x86_64 only (`slowpath signals` of this
# host's build lists them): arm64 flushes other CPUs' TLBs without IPIs,
# so the purge signal has no shootdown hook there.
X86_ONLY_HOOKS = {"tlb_flush"}


def every_hook(arch="x86_64"):
    """The probes of an agent with every collector on, on `arch`: the
    core's, the syscall hook, and the hooks the signals declare."""
    syscall = {"sys_enter"} if any(d["syscalls"] for d in declarations()) else set()
    hooks = CORE_HOOKS | syscall | {h for d in declarations() for h in d["hooks"]}
    return hooks if arch == "x86_64" else hooks - X86_ONLY_HOOKS
