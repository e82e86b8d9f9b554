"""The agent's privileges and limits as a node gives them to the shipped
chart's pod, read from what ships (the rendered manifest, the image build),
for the tests that must start it that way and never with friendlier ones.

- chart_capabilities(*sets): the DaemonSet's capabilities.add, after drop ALL
  (with chart values set, rendered by the pinned helm).
- image_file_capabilities(): the setcap argument of deploy/build-image.sh.
- container_exec(): tests/workloads/sp-container-exec.c built statically
  (it repeats runc's steps: rlimits, bounding set, uid, capset, no_new_privs,
  exec), for a guest or the host; pod_prefix(): its command line for the
  chart's pod on this host; image_binary(): a copy of the agent with the
  image's file capabilities, where uid 65534 can run it.
- RUNTIME_MEMLOCK_KIB: the locked-memory limit a container inherits from a
  runtime whose unit does not set LimitMEMLOCK (containerd's and CRI-O's do
  not): systemd's default, 8 MiB since systemd 251 (64 KiB before).
"""

import contextlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from helpers.paths import REPO
from helpers.tools import built, tools_cache

RUNTIME_MEMLOCK_KIB = 8 * 1024


def chart_capabilities(*sets):
    """The capabilities the rendered DaemonSet adds, lower-case without CAP_
    (as sp-container-exec takes them); checks the rest of what the pod is
    started with: uid 65534, no privilege escalation, drop ALL. With `sets`
    (helm --set values, e.g. "agent.readKernelAddresses=true") the chart is
    rendered with them by the pinned helm; without, the committed default
    render deploy/kubernetes/slowpath.yaml is read."""
    if sets:
        cmd = [str(tools_cache() / "bin" / "helm"), "template", "slowpath", str(REPO / "deploy/helm/slowpath"),
               "--namespace", "slowpath", "--show-only", "templates/daemonset.yaml"]
        for value in sets:
            cmd += ["--set", value]
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    else:
        text = (REPO / "deploy/kubernetes/slowpath.yaml").read_text()
    docs = yaml.safe_load_all(text)
    daemonset = next(d for d in docs if d and d.get("kind") == "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    security = container["securityContext"]
    assert security["runAsUser"] == 65534 and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    return [c.lower() for c in security["capabilities"]["add"]]


def image_file_capabilities():
    """The setcap argument of deploy/build-image.sh (`cap_bpf,...=p`)."""
    m = re.search(r"^\s*setcap (\S+=p) ", (REPO / "deploy/build-image.sh").read_text(), re.M)
    assert m, "deploy/build-image.sh sets no file capabilities"
    return m.group(1)


def container_exec():
    """Path of sp-container-exec (tests/workloads/sp-container-exec.c, static),
    as tests/workloads/build.sh built it."""
    return built("sp-container-exec")


# The capabilities by number (linux/capability.h), for the host's sets.
CAPABILITY_BITS = {"dac_read_search": 2, "sys_ptrace": 19, "sys_admin": 21, "sys_resource": 24, "syslog": 34,
                   "perfmon": 38, "bpf": 39, "checkpoint_restore": 40}


def host_capabilities():
    """Names (of CAPABILITY_BITS) in this process's bounding set: a sandbox's
    root can lack some (CAP_SYS_RESOURCE here), which no child can then get."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapBnd:"))
    bits = int(line.split()[1], 16)
    return {name for name, bit in CAPABILITY_BITS.items() if bits >> bit & 1}


@contextlib.contextmanager
def image_binary(agent_bin):
    """A copy of `agent_bin` with the image's file capabilities, in a
    directory uid 65534 can reach; removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="slowpath-image-"))
    try:
        home.chmod(0o755)
        binary = home / "slowpath"
        shutil.copy2(agent_bin, binary)
        subprocess.run(["setcap", image_file_capabilities(), str(binary)], check=True)
        yield binary
    finally:
        shutil.rmtree(home)


def pod_prefix(launcher, memlock_kib=RUNTIME_MEMLOCK_KIB, nofile=None, cgroups=()):
    """sp-container-exec's command line (before the agent's) for the chart's
    pod: uid 65534, the chart's capabilities that this host can give,
    no_new_privs, the runtime's locked-memory limit."""
    caps = [c for c in chart_capabilities() if c in host_capabilities()]
    prefix = [str(launcher), *[a for d in cgroups for a in ("--cgroup", str(d))], "--memlock", str(memlock_kib)]
    if nofile:
        prefix += ["--nofile", f"{nofile[0]}:{nofile[1]}"]
    return prefix + ["--uid", "65534", "--caps", ",".join(caps), "--no-new-privs", "--"]
