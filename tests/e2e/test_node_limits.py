"""The agent under the limits and defaults a Kubernetes node gives the shipped
chart's pod, not test-friendly ones, on a busy node (tests/e2e/busynode.py:
400 processes in 40 cgroups hitting every signal) with a flood of idle
connections on its endpoint.

How the pod is started (tests/workloads/sp-container-exec.c, as runc does):
- its memory cgroup limited to the chart's resources.limits.memory, read
  from the rendered manifest (BPF maps are charged to it on 5.11+), and its
  pids cgroup to 1024 tasks (Kubernetes sets none unless the kubelet's
  podPidsLimit does; 1024 is a tight one a cluster may choose);
- open files 1024 soft, 524288 hard: systemd's default, which a container
  inherits from containerd 2.x (its unit no longer sets LimitNOFILE); the
  hard limit no higher than this machine's (raising it needs
  CAP_SYS_RESOURCE, which a sandbox's root can lack);
- locked memory 8 MiB (systemd's default; 5.11+ ignores it for BPF);
- uid 65534, the chart's capabilities permitted and effective (less any the
  machine's own root lacks), none inheritable or ambient, no_new_privs, the
  image's file capabilities on the binary.
The read-only root filesystem and the runtime's default seccomp profile
(podman's, from containers-common) are the container tests'
(test_container.py: the documented podman command, test_default_seccomp_profile_...).

Checked: the agent serves throughout and counts every pod's processes;
never reaches its memory limit (no failed charge, no OOM kill), with its
peak reported; stays far under the pids limit; raised its open-files soft
limit to the hard one, and capped its connections at --web.max-connections.
"""

import os
import resource
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import busynode
from as_shipped import container_exec, image_binary, pod_prefix
from helpers.agent import Agent, Scrape
from helpers.host import cgroup2_root
from helpers.paths import REPO

pytestmark = pytest.mark.tier("full")

PIDS_MAX = 1024
NOFILE = (1024, min(524288, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
IDLE_CONNECTIONS = 2000


def chart_memory_limit():
    """resources.limits.memory of the rendered DaemonSet, in bytes."""
    docs = yaml.safe_load_all((REPO / "deploy/kubernetes/slowpath.yaml").read_text())
    daemonset = next(d for d in docs if d and d.get("kind") == "DaemonSet")
    limit = daemonset["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    return int(limit[:-2]) * units[limit[-2:]] if limit[-2:] in units else int(limit)


def controller_dir(name):
    """Where the `name` controller's cgroups live: the cgroup2 mount if it
    offers the controller, else the v1 hierarchy mounted with it."""
    v2 = Path(cgroup2_root())
    if name in (v2 / "cgroup.controllers").read_text().split():
        return v2, 2
    out = subprocess.run(["findmnt", "-n", "-t", "cgroup", "-O", name, "-o", "TARGET"],
                         capture_output=True, text=True).stdout.split()
    assert out, f"no cgroup hierarchy has the {name} controller"
    return Path(out[0]), 1


class PodCgroup:
    """The pod's memory and pids cgroups, with the limits written."""

    def __init__(self, memory_max):
        tag = f"slowpath-node-limits-{os.getpid()}"
        (mem_root, self.mem_v), (pids_root, _) = controller_dir("memory"), controller_dir("pids")
        self.memory, self.pids = mem_root / tag, pids_root / tag
        for d in {self.memory, self.pids}:
            d.mkdir()
        if self.mem_v == 2:
            if self.memory.parent != mem_root:
                raise RuntimeError("nested cgroup2 parents are not handled")
            (self.memory / "memory.max").write_text(str(memory_max))
            (self.memory / "memory.swap.max").write_text("0")
        else:
            (self.memory / "memory.limit_in_bytes").write_text(str(memory_max))
        (self.pids / "pids.max").write_text(str(PIDS_MAX))

    def dirs(self):
        return sorted({str(self.memory), str(self.pids)})

    def memory_peak(self):
        name = "memory.peak" if self.mem_v == 2 else "memory.max_usage_in_bytes"
        return int((self.memory / name).read_text())

    def limit_hits(self):
        """Times the memory limit refused a charge, and OOM kills."""
        if self.mem_v == 2:
            events = dict(line.split() for line in (self.memory / "memory.events").read_text().splitlines())
            return int(events["max"]), int(events["oom_kill"])
        control = dict(line.split() for line in (self.memory / "memory.oom_control").read_text().splitlines())
        return int((self.memory / "memory.failcnt").read_text()), int(control.get("oom_kill", 0))

    def pids_current(self):
        return int((self.pids / "pids.current").read_text())

    def remove(self):
        for d in {self.memory, self.pids}:
            d.rmdir()


@pytest.fixture
def pod_agent(agent_bin, tmp_path):
    """The agent started as the node starts the chart's pod; yields (Agent, PodCgroup)."""
    pod = PodCgroup(chart_memory_limit())
    agent = None
    try:
        with image_binary(agent_bin) as binary:
            prefix = pod_prefix(container_exec(), nofile=NOFILE, cgroups=pod.dirs())
            agent = Agent(str(binary), ["--canary.interval=1s"], tmp_path / "agent.log", prefix=prefix)
            yield agent, pod
    finally:
        rc = agent.stop() if agent else None
        time.sleep(0.5)  # the agent's tasks leave the cgroups
        pod.remove()
        assert rc in (0, None), agent.log_text()


@pytest.fixture
def pods():
    base, dirs = busynode.make_pods(cgroup2_root())
    yield dirs
    busynode.remove_pods(base, dirs)


def idle_connections(port, n):
    """`n` connections to the agent that send nothing (the agent evicts the
    longest idle ones past its cap); closed by the caller."""
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        conns.append(s)
    return conns


def test_a_busy_node_within_the_charts_limits_and_the_nodes_defaults(pod_agent, workload_bin, pods, tmp_path):
    agent, pod = pod_agent
    pid = agent.proc.pid
    limits = Path(f"/proc/{pid}/limits").read_text()
    nofile = next(line for line in limits.splitlines() if line.startswith("Max open files")).split()
    assert nofile[3:5] == [str(NOFILE[1])] * 2, "the soft file limit was not raised to the hard one"
    status = Path(f"/proc/{pid}/status").read_text()
    assert "Uid:\t65534" in status and "NoNewPrivs:\t1" in status, status
    conns = idle_connections(agent.port, IDLE_CONNECTIONS)
    try:
        processes = busynode.run(workload_bin, pods, tmp_path / "bin")
        time.sleep(1.5)
        scrape = Scrape(agent.get("/metrics")[1])
        tasks = len(os.listdir(f"/proc/{pid}/task"))
        pids_now = pod.pids_current()
    finally:
        for c in conns:
            c.close()
    in_pods = lambda name, comm: {s.labels["cgroup"] for s in scrape.select(name, comm=comm)  # noqa: E731
                                  if "/slowpath-busy-node-" in s.labels["cgroup"]}
    assert len(in_pods("slowpath_clock_syscalls_total", "envoy")) == busynode.PODS
    assert len(in_pods("slowpath_timer_wakeups_total", "java")) == busynode.PODS
    assert {s.value for s in scrape.select("slowpath_probe_attached")} == {1}
    assert scrape.value("slowpath_lost_events_total") == 0
    closed = scrape.value("slowpath_http_connections_closed_total", reason="evicted")
    assert closed >= IDLE_CONNECTIONS - 512, closed  # --web.max-connections' default
    peak, limit = pod.memory_peak(), chart_memory_limit()
    hits, oom_kills = pod.limit_hits()
    print(f"node limits: {processes} processes, agent {tasks} tasks (pids {pids_now} of {PIDS_MAX}), "
          f"memory peak {peak / 2**20:.1f} MiB of {limit / 2**20:.0f} MiB (kernel tables included)")
    assert (hits, oom_kills) == (0, 0), f"memory limit hit {hits} times, {oom_kills} OOM kills"
    assert peak < limit * 0.8, f"memory peak {peak} within 20 % of the chart's limit {limit}"
    assert pids_now <= 32 < PIDS_MAX, pids_now
    # the pod has no CAP_SYS_ADMIN, so the kernel's run-time statistics are
    # refused: the programs' in-kernel time is the agent's estimate, on every
    # hook that ran 8,192 times on a CPU
    deadline = time.monotonic() + 15
    while not (estimated := scrape.select("slowpath_probe_run_seconds_total", probe="sys_enter")):
        assert time.monotonic() < deadline, "no estimate of the programs' time 15 s on"
        time.sleep(1)
        scrape = Scrape(agent.get("/metrics")[1])
    assert [s.labels["method"] for s in estimated] == ["estimated"]
    assert estimated[0].value > 0
    assert not scrape.select("slowpath_probe_run_seconds_total", method="measured")
