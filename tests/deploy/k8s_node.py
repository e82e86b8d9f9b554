"""A real Kubernetes node for the tests: kubelet, containerd, runc, CNI and
kube-proxy beside the control plane of k8s_cluster.Cluster, all inside a
network namespace made for the test.

    from k8s_cluster import Cluster, tools_bin
    from k8s_node import NetNS, Node

    bin_dir = tools_bin()                        # built by tests/deploy/k8s-tools.sh
    with NetNS("sp-node") as netns, \\
         Cluster(bin_dir, nodes=(), netns=netns, node_ip=NODE_IP) as cluster, \\
         Node(cluster, images=[archive, ...]) as node:
        cluster.kubectl("get", "nodes")          # one real node, Ready

The network: the namespace has loopback and a veth pair whose one end holds
NODE_IP (the node's InternalIP, where the API server listens and the
kubelet serves); the CNI bridge plugin makes cni0 there with the pod subnet
POD_SUBNET, and kube-proxy (iptables mode) routes the `kubernetes` Service
(10.96.0.1) to the API server. Every process that reaches a pod IP (the
control plane, Prometheus, the test's own requests through NetNS.call or
NetNS.command) runs in that namespace, so no packet leaves it.

Components (k8s-tools.sh builds them; runc is Debian's):
  containerd 2.x   its own root, state and socket under the node's directory,
                   the CRI plugin with the runc v2 shim (cgroupfs), CNI, and a
                   sandbox image of tests/deploy/pause.c (pause_image); started with
                   the limits of containerd's upstream unit (containerd.service)
                   where this host allows them (see UNIT_DEVIATIONS)
  kubelet          the control plane's version, cgroupfs driver; this host is
                   cgroup v1 (hybrid: v1 controllers, cgroup2 at
                   /sys/fs/cgroup/unified) and kubelet 1.35+ runs there only
                   with failCgroupV1: false
  kube-proxy       iptables mode
  CNI plugins      bridge + host-local (+ loopback, portmap)

Images: no registry is reachable, so every image (the sandbox's too) is a
docker-archive imported with `ctr -n k8s.io images import`.

stop() leaves the host as it was: pods deleted through the API (the kubelet
tears their sandboxes down), then kube-proxy, kubelet and containerd ended by
PID, any container left killed, every mount under the node's directory
unmounted, the kubepods cgroups removed from each hierarchy, the kernel
tunables kubelet sets (KERNEL_TUNABLES) put back, the directory removed;
NetNS's exit deletes the namespace.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path


NODE_NAME = "slowpath-node"
NODE_IP = "10.99.0.1"  # on a veth inside the test's namespace only
POD_SUBNET = "10.88.0.0/24"  # cni0's, inside the same namespace
SANDBOX_IMAGE = "localhost/slowpath-e2e/pause:1"
RUNC = "/usr/sbin/runc"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The host-wide tunables kubelet sets at start on every node unless
# protectKernelDefaults (then it refuses to start where they differ):
# setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go. stop()
# puts back what they were.
KERNEL_TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)

# Where the test's containerd cannot have its upstream unit's settings.
UNIT_DEVIATIONS = """\
- LimitNOFILE: the unit sets none (containerd 2.x), so systemd's default
  applies: soft 1024, hard 524288. This host's hard limit is 20,000 and root
  has no CAP_SYS_RESOURCE to raise it: soft 1024, hard 20,000 (containerd,
  a Go program, raises its soft limit to the hard one itself).
- LimitNPROC, LimitCORE=infinity: set where the host's hard limit allows
  (NPROC is lowered to the host's hard limit otherwise).
- LimitMEMLOCK: the unit sets none, so systemd's default (8 MiB since v253):
  8 MiB, as in this shell.
- OOMScoreAdjust=-999: root cannot lower oom_score_adj here, so containerd
  runs at the shell's and its CRI plugin has restrict_oom_score_adj = true
  (containers' adjustments are kept at or above containerd's own).
- Delegate=yes, KillMode=process, TasksMax=infinity: systemd is not PID 1
  here; containerd's cgroup is the shell's, and kubelet's cgroupfs driver
  makes the pods' cgroups itself (kubepods in each v1 hierarchy).
"""


class NetNS:
    """A network namespace made for the test (`ip netns add`), with loopback
    up and a veth pair inside it whose end `node0` holds NODE_IP/24.
    Processes join it by setns(2) of the network namespace alone (not `ip
    netns exec`, which also remounts /sys in a new mount namespace)."""

    def __init__(self, name, node_ip=NODE_IP):
        self.name = name
        self.node_ip = node_ip
        self.path = Path("/run/netns") / name

    def __enter__(self):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)  # a crashed run's
        ip = ["ip", "-n", self.name]
        for cmd in (["ip", "netns", "add", self.name],
                    [*ip, "link", "set", "lo", "up"],
                    [*ip, "link", "add", "node0", "type", "veth", "peer", "name", "node1"],
                    [*ip, "addr", "add", f"{self.node_ip}/24", "dev", "node0"],
                    [*ip, "link", "set", "node0", "up"],
                    [*ip, "link", "set", "node1", "up"]):
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        return self

    def __exit__(self, *exc):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def enter(self):
        """Moves the calling thread (a child before exec, or a thread of
        call()) into the namespace."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns {self.path}: {os.strerror(err)}")
        finally:
            os.close(fd)

    def command(self):
        """A command prefix that runs a program in the namespace."""
        return ["nsenter", f"--net={self.path}"]

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) on a thread that joined the namespace first:
        sockets it opens (urllib) live there. Returns fn's value or raises
        its exception."""
        out = {}

        def run():
            try:
                self.enter()
                out["value"] = fn(*args, **kwargs)
            except BaseException as e:  # handed to the caller
                out["error"] = e

        t = threading.Thread(target=run, name=f"netns-{self.name}")
        t.start()
        t.join()
        if "error" in out:
            raise out["error"]
        return out["value"]


def unit_limits(unit_text):
    """{RLIMIT_*: (soft, hard)} of a systemd unit's Limit* lines, capped at
    this process's hard limits (raising one needs CAP_SYS_RESOURCE), with
    systemd's defaults for NOFILE and MEMLOCK where the unit sets none."""
    names = {"NOFILE": resource.RLIMIT_NOFILE, "NPROC": resource.RLIMIT_NPROC,
             "CORE": resource.RLIMIT_CORE, "MEMLOCK": resource.RLIMIT_MEMLOCK}
    wanted = {"NOFILE": (1024, 524288), "MEMLOCK": (8 << 20, 8 << 20)}  # systemd's defaults
    for name, value in re.findall(r"^Limit([A-Z]+)=(\S+)", unit_text, re.M):
        if name in names:
            v = resource.RLIM_INFINITY if value == "infinity" else int(value)
            wanted[name] = (v, v)
    limits = {}
    for name, (soft, hard) in wanted.items():
        _, cur_hard = resource.getrlimit(names[name])

        def cap(v):
            if cur_hard == resource.RLIM_INFINITY:
                return v
            return cur_hard if v == resource.RLIM_INFINITY else min(v, cur_hard)

        limits[names[name]] = (cap(soft), cap(hard))
    return limits


def pause_image(workdir, podman, pause):
    """The sandbox image: `pause` (tests/deploy/pause.c built static, by
    tests/workloads/build.sh) alone in an image named SANDBOX_IMAGE.
    podman(*args) runs podman. Returns its docker-archive's path."""
    root = Path(workdir) / "pause-root"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(pause, root / "pause")
    tar = subprocess.run(["tar", "-C", str(root), "-c", "pause"], check=True, capture_output=True).stdout
    podman("import", "--change", 'ENTRYPOINT ["/pause"]', "-", SANDBOX_IMAGE, input=tar)
    return save_image(SANDBOX_IMAGE, Path(workdir) / "pause.tar", podman)


def save_image(name, path, podman):
    """podman's image NAME as a docker-archive (names kept) at path."""
    path = Path(path)
    path.unlink(missing_ok=True)
    podman("save", "--format", "docker-archive", "-o", str(path), name)
    return path


class Node:
    """containerd + kubelet + kube-proxy of one real node, registered with
    `cluster` (a k8s_cluster.Cluster made with netns and node_ip), run from
    the cluster's bin dir (k8s-tools.sh) and CNI plugins in bin/../cni.

    images: docker-archives to import before the kubelet starts (the sandbox
    image among them). Attributes once started: dir, containerd_socket,
    kubelet_root, pod_logs, name."""

    def __init__(self, cluster, images, name=NODE_NAME, ready_timeout=120):
        self.cluster = cluster
        self.bin = cluster.bin
        self.cni_bin = cluster.bin.parent / "cni"
        self.unit = cluster.bin.parent / "share" / "containerd.service"
        self.images = [Path(i) for i in images]
        self.name = name
        self.ready_timeout = ready_timeout
        self.dir = None
        self.netns = cluster.netns
        self._made = []  # host paths this node created (cgroups aside), removed by stop()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- lifecycle -------------------------------------------------------

    def start(self):
        # On the root filesystem (ext4): overlayfs needs a real upper dir.
        self.dir = Path(tempfile.mkdtemp(prefix="slowpath-node-", dir="/var/tmp"))
        for path in (Path("/run/containerd"), Path("/var/log/containers")):
            if not path.exists():
                self._made.append(path)  # containerd's shim sockets, kubelet's log links
        self._cgroups_before = set(self._kubepods_cgroups())
        self._tunables = {t: (Path("/proc/sys") / t).read_text() for t in KERNEL_TUNABLES}
        self._start_containerd()
        for archive in self.images:
            self.ctr("images", "import", "--local", str(archive), timeout=300)
        self._write_cni_config()
        self._start_kubelet()
        self._start_kube_proxy()
        self.cluster.wait(f"node {self.name} Ready", self._ready, timeout=self.ready_timeout, interval=1)

    def stop(self):
        if self.dir is None:
            return
        c = self.cluster
        # The kubelet tears down what it started: workloads first (a
        # DaemonSet would recreate its pods), then every pod.
        if c.procs.get("kubelet") and c.procs["kubelet"].poll() is None:
            c.kubectl("delete", "daemonsets,deployments,replicasets,jobs", "--all", "-A", "--wait=false",
                      check=False, timeout=30)
            c.kubectl("delete", "pods", "--all", "-A", "--grace-period=5", "--timeout=60s", check=False, timeout=90)
        for name in ("kube-proxy", "kubelet"):
            c.end(name, timeout=15)
        self._remove_containers()
        c.end("containerd", timeout=15)
        self._kill_shims()
        self._unmount_under(self.dir)
        self._remove_cgroups()
        for tunable, value in getattr(self, "_tunables", {}).items():
            (Path("/proc/sys") / tunable).write_text(value)
        shutil.rmtree(self.dir, ignore_errors=True)
        for path in self._made:
            shutil.rmtree(path, ignore_errors=True)
        self.dir = None

    # -- clients ---------------------------------------------------------

    def ctr(self, *args, check=True, timeout=60):
        """containerd's own client on the node's socket, namespace k8s.io."""
        proc = subprocess.run([str(self.bin / "ctr"), "--address", str(self.containerd_socket), "-n", "k8s.io",
                               *map(str, args)], capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def container_pid(self, container_id):
        """The host PID of a running container's first process (containerd's
        task list)."""
        for line in self.ctr("tasks", "list").stdout.splitlines()[1:]:
            task, pid, *_ = line.split()
            if task == container_id:
                return int(pid)
        raise LookupError(f"no running task {container_id}")

    def pod_log(self, namespace, pod, container):
        """The container's log as the kubelet keeps it (podLogsDir), newest
        instance last; '' when there is none yet."""
        out = []
        for path in sorted(self.pod_logs.glob(f"{namespace}_{pod}_*/{container}/*.log")):
            out.append(path.read_text(errors="replace"))
        return "".join(out)

    # -- containerd ------------------------------------------------------

    def _start_containerd(self):
        d = self.dir / "containerd"
        d.mkdir()
        self.containerd_socket = d / "containerd.sock"
        cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
        config = f"""\
version = 3
root = "{d / 'root'}"
state = "{d / 'state'}"

[grpc]
  address = "{self.containerd_socket}"

[plugins.'io.containerd.internal.v1.opt']
  path = "{d / 'opt'}"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{SANDBOX_IMAGE}"

[{cri_runtime}]
  # containerd's unit asks OOMScoreAdjust=-999, which root cannot set here.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true

[{cri_runtime}.containerd]
  default_runtime_name = "runc"

[{cri_runtime}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri_runtime}.containerd.runtimes.runc.options]
  BinaryName = "{RUNC}"
  Root = "{d / 'runc'}"
  SystemdCgroup = false

[{cri_runtime}.cni]
  bin_dirs = ["{self.cni_bin}"]
  conf_dir = "{self.dir / 'cni' / 'net.d'}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
"""
        (d / "config.toml").write_text(config)
        limits = unit_limits(self.unit.read_text())

        def apply_limits():
            for which, value in limits.items():
                resource.setrlimit(which, value)

        env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(d)}
        self.cluster.spawn("containerd", [str(self.bin / "containerd"), "--config", str(d / "config.toml")],
                           env=env, preexec=apply_limits)
        self.cluster.wait("containerd's socket", lambda: self.ctr("version", check=False).returncode == 0,
                          timeout=60)

    def _write_cni_config(self):
        conf_dir = self.dir / "cni" / "net.d"
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "10-slowpath-e2e.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": "slowpath-e2e",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.dir / "cni" / "ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }, indent=2))

    # -- kubelet, kube-proxy ---------------------------------------------

    def _start_kubelet(self):
        c = self.cluster
        kubeconfig = c.write_client_kubeconfig("kubelet", f"system:node:{self.name}", "system:nodes")
        self.kubelet_root = self.dir / "kubelet"
        self.pod_logs = self.dir / "pod-logs"
        self.pod_logs.mkdir()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,                  # this host is cgroup v1 (hybrid)
            "cgroupDriver": "cgroupfs",             # PID 1 is not systemd here
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": "0.0.0.0",                   # the namespace's addresses only
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(c.ca_file)}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.pod_logs),
            "failSwapOn": False,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            # A shared test machine: no eviction or image GC because of the
            # disk's or memory's level.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
        }
        (self.dir / "kubelet-config.json").write_text(json.dumps(config, indent=2))
        c.spawn("kubelet", [
            str(self.bin / "kubelet"),
            f"--config={self.dir / 'kubelet-config.json'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.dir / 'kubelet-pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={c.node_ip}",
            "--v=1",
        ])

    def _start_kube_proxy(self):
        c = self.cluster
        kubeconfig = c.write_client_kubeconfig("kube-proxy", "system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": self.name,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Leave the host-wide conntrack table size alone.
            "conntrack": {"maxPerCore": 0, "min": 0},
        }
        (self.dir / "kube-proxy-config.json").write_text(json.dumps(config, indent=2))
        c.spawn("kube-proxy", [str(self.bin / "kube-proxy"), f"--config={self.dir / 'kube-proxy-config.json'}",
                               "--v=1"])

    def _ready(self):
        node = json.loads(self.cluster.kubectl("get", "node", self.name, "-o", "json", check=False).stdout or "{}")
        conditions = node.get("status", {}).get("conditions", [])
        return any(x["type"] == "Ready" and x["status"] == "True" for x in conditions)

    # -- teardown --------------------------------------------------------

    def _remove_containers(self):
        """Containers the kubelet did not remove (a failed test's): killed
        and deleted through containerd."""
        if self.cluster.procs.get("containerd") is None or self.cluster.procs["containerd"].poll() is not None:
            return
        listed = self.ctr("containers", "list", "-q", check=False).stdout.split()
        for cid in listed:
            self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", cid, check=False)
        for cid in listed:
            self.ctr("tasks", "delete", "-f", cid, check=False)
            self.ctr("containers", "delete", cid, check=False)

    def _kill_shims(self):
        """containerd-shim-runc-v2 processes of this node's (their
        executable is ours) that outlived containerd, ended by PID."""
        shim = (self.bin / "containerd-shim-runc-v2").resolve()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                exe = Path(os.readlink(f"/proc/{pid}/exe"))
            except OSError:
                continue
            if exe == shim:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    @staticmethod
    def _unmount_under(directory):
        prefix = str(directory).rstrip("/") + "/"
        for _ in range(3):
            points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
            ours = [p.replace("\\040", " ") for p in points if p.startswith(prefix)]
            if not ours:
                return
            for point in reversed(ours):
                subprocess.run(["umount", "-l", point], capture_output=True)

    @staticmethod
    def _kubepods_cgroups():
        """Every kubepods* cgroup directory the kubelet may make: one per
        hierarchy (v1 controllers, name=systemd, cgroup2)."""
        pure_v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        hierarchies = [CGROUP_ROOT] if pure_v2 else [h for h in CGROUP_ROOT.iterdir() if h.is_dir()]
        return [h / n for h in hierarchies for n in ("kubepods", "kubepods.slice") if (h / n).is_dir()]

    def _remove_cgroups(self):
        for top in self._kubepods_cgroups():
            if top in self._cgroups_before:
                continue
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for d in [*dirs, top]:
                for _ in range(20):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:  # a task still exiting
                        time.sleep(0.1)
