"""The chart as shipped, on a real Kubernetes node: a real kubelet and
containerd run the agent's DaemonSet pod and real workload pods.

The node (tests/deploy/k8s_node.py): the control plane of test_k8s.py
(etcd, kube-apiserver with Node,RBAC authorization, controller manager,
scheduler) with a real kubelet (the same version, cgroupfs driver), containerd
2.x with Debian's runc, the CNI bridge and host-local plugins and kube-proxy
(iptables), everything built by tests/deploy/k8s-tools.sh and run inside a
network namespace made for the test: pod IPs, the API server, Prometheus and
the test's own requests exist there only. Images (the agent's, as
deploy/build-image.sh builds it for this architecture; the workloads', from
Debian's python3, OpenJDK and perl; the sandbox's, tests/deploy/pause.c) are
built here and imported with `ctr -n k8s.io images import`.

In order (one node, one release, as an operator would go):
  1. `helm install` with the chart's defaults, the image reference alone
     changed (and the dashboards on, into Grafana's namespace): the pod
     Ready within 60 s; from the host, its uid, no_new_privs,
     seccomp mode and capability sets as docs/security.md gives them; /metrics
     through the pod IP; the Service's endpoints naming the pod; its image the
     one build-image.sh made; the sidecar's label query lists the
     dashboards' ConfigMaps.
  2. Four workload pods counted against oracles on the host and labelled by
     namespace, pod and container from the real kubelet's cgroup paths: a raw
     clock_gettime loop and a perl logger with TZ unset exactly (bpftrace on
     the syscall tracepoints, by the container's cgroup), a Python
     time.sleep(0.001) loop at bpftrace's wakeup rate, a JVM pre-touching a
     THP heap against /proc/vmstat; the findings name the pods.
  3. A real Prometheus discovering the agent through the API server with
     the scrape configuration the Prometheus Operator generates for the
     chart's ServiceMonitor (tests/deploy/opconfig: the operator's own code;
     a ServiceAccount token), evaluating the chart's rules (only its copy's
     `for:` and 5-minute windows cut): the timer-loop alert fires for the Python pod with its
     namespace, pod, cause and fix; the workload's namespace, pod and
     container survive the operator's target labels (honorLabels), through
     the PodMonitor's configuration too.
  4. `helm upgrade` with a changed value rolls the pod: the old pod's BPF
     programs and links gone, the new one counting exactly.
  5. A deleted workload pod's series retired as docs/metrics.md says.
  6. The agent pod deleted: the DaemonSet makes a new one, nothing left of the
     old.
  7. Seccomp both ways: RuntimeDefault (the chart's default) runs, read in
     step 1; a profile that denies bpf(2) stops the agent with an error that
     names the chart's override.
  8. `helm uninstall`: no slowpath process, BPF program, link or pinned
     object left, and no object of the release in any namespace.

Where this host cannot be a real node, and what the test does instead:
  - root's bounding set here lacks CAP_SYS_RESOURCE (MACHINE.md), so no
    container can be given it and runc refuses a pod that asks for it: the
    release sets agent.liftMemlockLimit=false, which removes exactly that
    capability (kernel 6.18 charges BPF memory to the memory cgroup, not to
    RLIMIT_MEMLOCK: the limit it lifts does not apply here), and the sets
    read from the host are docs/security.md's without CAP_SYS_RESOURCE;
  - containerd's upstream unit's limits: k8s_node.UNIT_DEVIATIONS.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "deploy"))

from as_shipped import CAPABILITY_BITS, host_capabilities  # noqa: E402
from helpers.agent import Scrape  # noqa: E402
from helpers.bpf import bpf_fd_ids  # noqa: E402
from helpers.host import cgroup2_root  # noqa: E402
from helpers.oracles import TimerOracle, vmstat, wait_ready  # noqa: E402
from helpers.prometheus import prom_get, prom_query, prometheus_release, prometheus_server  # noqa: E402
from helpers.tools import base_image, built, tools_cache  # noqa: E402
from k8s_cluster import Cluster, ToolsUnavailable, tools_bin  # noqa: E402
from k8s_node import NODE_IP, NetNS, Node, pause_image, save_image  # noqa: E402
from test_doctor_sources import pretouch_class  # noqa: E402,F401

pytestmark = pytest.mark.tier("full")

CHART = REPO / "deploy" / "helm" / "slowpath"
RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
SECURITY_DOC = REPO / "docs" / "security.md"
CONTAINERS_CONF = REPO / "tests" / "deploy" / "containers.conf"

NAMESPACE = RELEASE = "slowpath"
WORKLOADS = "workloads"
AGENT_IMAGE = "localhost/slowpath:e2e-node"  # build-image.sh names the amd64 one AGENT_IMAGE-amd64
WORKLOAD_IMAGE = "localhost/slowpath-e2e/workloads:1"
# Where Grafana (and its dashboard sidecar) would run.
GRAFANA_NAMESPACE = "monitoring"
# The image reference, the one capability this host cannot give (above), and
# the dashboards for Grafana's sidecar in Grafana's namespace (first-hour.md).
INSTALL_VALUES = ["--set", "image.repository=localhost/slowpath", "--set", "image.tag=e2e-node-amd64",
                  "--set", "agent.liftMemlockLimit=false", "--set", "grafanaDashboards.enabled=true",
                  "--set", f"grafanaDashboards.namespace={GRAFANA_NAMESPACE}"]
READY_WITHIN = 60
PORT = 9891
CLOCK_CALLS = 200_000
TZ_CALLS = 20_000
UPGRADE_CLOCK_CALLS = 50_000
SELECTOR = f"app.kubernetes.io/name=slowpath,app.kubernetes.io/instance={RELEASE}"


def podman(*args, input=None):
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return subprocess.run(["podman", *args], check=True, capture_output=True, env=env, input=input)


@pytest.fixture(scope="module")
def images(agent_bin, workload_bin, pretouch_class, tmp_path_factory):  # noqa: F811
    """docker-archives of the agent's image (deploy/build-image.sh, this
    architecture), the workloads' and the sandbox's."""
    work = tmp_path_factory.mktemp("node-images")
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF), "BASE_amd64": "localhost/slowpath-base:bookworm"}
    for kind in ("amd64", "runtimes"):
        base_image(kind)
    subprocess.run([str(REPO / "deploy/build-image.sh"), "--arch", "amd64", "--no-build", AGENT_IMAGE],
                   cwd=REPO, env=env, check=True, capture_output=True)
    context = work / "workloads"
    context.mkdir()
    (context / "sp-workload").write_bytes(Path(workload_bin).read_bytes())
    (context / "sp-workload").chmod(0o755)
    (context / "PreTouchHeap.class").write_bytes((Path(pretouch_class) / "PreTouchHeap.class").read_bytes())
    (context / "Containerfile").write_text(
        "FROM localhost/slowpath-runtimes:bookworm\nCOPY sp-workload PreTouchHeap.class /opt/slowpath-e2e/\n")
    podman("build", "-t", WORKLOAD_IMAGE, str(context))
    return {
        "agent": save_image(f"{AGENT_IMAGE}-amd64", work / "agent.tar", podman),
        "workloads": save_image(WORKLOAD_IMAGE, work / "workloads.tar", podman),
        "pause": pause_image(work, podman, built("pause")),
    }


@pytest.fixture(scope="module")
def node(images):
    try:
        bin_dir = tools_bin()
    except ToolsUnavailable as e:
        pytest.fail(f"Kubernetes tools unavailable: {e}")
    with NetNS("slowpath-e2e-node") as netns, \
            Cluster(bin_dir, nodes=(), netns=netns, node_ip=NODE_IP) as cluster, \
            Node(cluster, images.values()) as n:
        yield n


class Helm:
    """The chart's helm (tools cache) against the node's cluster."""

    def __init__(self, node):
        self.node = node
        self.binary = tools_cache() / "bin" / "helm"

    def __call__(self, *args, timeout=180):
        c = self.node.cluster
        proc = subprocess.run([*c.in_netns(), str(self.binary), "--kubeconfig", str(c.kubeconfig), *args],
                              capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stdout}{proc.stderr}"
        return proc


@pytest.fixture(scope="module")
def helm(node):
    return Helm(node)


# -- the agent's pod -------------------------------------------------------------


def agent_pods(node):
    return node.cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]


def is_ready(pod):
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def wait_agent_ready(node, timeout, other_than=()):
    """The agent's Ready pod (not one of the uids `other_than`), waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = [p for p in agent_pods(node) if is_ready(p) and p["metadata"]["uid"] not in other_than]
        if ready:
            return ready[0]
        time.sleep(0.5)
    raise AssertionError(f"no Ready agent pod within {timeout} s:\n{describe(node)}")


def describe(node):
    """What to read when a pod does not come: the agent's pods, their
    containers' logs, the node components' logs."""
    c = node.cluster
    out = [c.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout,
           c.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout[-4000:]]
    for p in agent_pods(node):
        out.append(f"--- log of {p['metadata']['name']}:\n" + node.pod_log(NAMESPACE, p["metadata"]["name"],
                                                                          "slowpath")[-3000:])
    return "\n".join(out) + "\n" + c.diagnostics(tail=15)


def container_id(pod, container):
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    return status["containerID"].split("://", 1)[1]


def agent_pid(node, pod):
    return node.container_pid(container_id(pod, "slowpath"))


def get(node, url):
    return node.netns.call(lambda: urllib.request.urlopen(url, timeout=10).read().decode())


def scrape(node, pod):
    return Scrape(get(node, f"http://{pod['status']['podIP']}:{PORT}/metrics"))


def status_fields(pid):
    return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())


def capability_names(hex_mask):
    bits = int(hex_mask, 16)
    names = {name for name, bit in CAPABILITY_BITS.items() if bits >> bit & 1}
    unknown = bits & ~sum(1 << b for b in CAPABILITY_BITS.values())
    assert not unknown, f"capabilities outside CAPABILITY_BITS: {unknown:#x}"
    return names


def documented_capability_sets():
    """docs/security.md's table of the chart's pod's sets as read from the
    host: {CapBnd: {names}, ...}, names lower-case without CAP_."""
    text = SECURITY_DOC.read_text()
    sets = {}
    # The /proc/PID/status fields (CapBnd, ...), not the systemd unit's
    # CapabilityBoundingSet of the table beside it.
    for field, caps in re.findall(r"^\| `(Cap(?:Bnd|Prm|Eff|Amb|Inh))` \|([^|]*)\|", text, re.M):
        sets[field] = {c.lower() for c in re.findall(r"CAP_(\w+)", caps)}
    assert set(sets) == {"CapBnd", "CapPrm", "CapEff", "CapAmb"}, sets
    return sets


# -- 1. as shipped ------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(node, helm):
    """The release, installed once with the chart's defaults and this node's
    image; (pod, seconds to Ready). Grafana's namespace exists first, as it
    would (the chart creates no namespace but its own)."""
    node.cluster.kubectl("create", "namespace", GRAFANA_NAMESPACE)
    t0 = time.monotonic()
    helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", *INSTALL_VALUES)
    pod = wait_agent_ready(node, READY_WITHIN)
    return pod, time.monotonic() - t0


def test_agent_pod_is_ready_as_shipped_with_the_documented_privileges(node, installed):
    pod, seconds = installed
    print(f"agent pod Ready {seconds:.1f} s after helm install")
    pid = agent_pid(node, pod)
    status = status_fields(pid)
    assert status["Name"].strip() == "slowpath"
    assert status["Uid"].split() == ["65534"] * 4, status["Uid"]
    assert status["NoNewPrivs"].strip() == "1"
    # The chart's default seccompProfile is RuntimeDefault: containerd's profile, a filter.
    assert yaml.safe_load((CHART / "values.yaml").read_text())["seccompProfile"] == {"type": "RuntimeDefault"}
    assert status["Seccomp"].strip() == "2", status["Seccomp"]
    documented = documented_capability_sets()
    for field in ("CapBnd", "CapPrm", "CapEff", "CapAmb"):
        want = documented[field] & host_capabilities()
        assert capability_names(status[field].strip()) == want, (field, status[field], want)


def test_metrics_through_the_pod_ip_and_the_service_names_the_pod(node, installed):
    pod, _ = installed
    page = scrape(node, pod)
    assert page.value("slowpath_probe_attached") > 0
    slices = node.cluster.kubectl_json("get", "endpointslices", "-n", NAMESPACE, "-l",
                                       f"kubernetes.io/service-name={RELEASE}")["items"]
    targets = {(e["targetRef"]["name"], tuple(e["addresses"])) for s in slices for e in s.get("endpoints", [])}
    assert targets == {(pod["metadata"]["name"], (pod["status"]["podIP"],))}, targets


def test_the_pod_runs_the_image_build_image_made(installed):
    """containerd's image id is the image config's digest, as podman's is."""
    pod, _ = installed
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "slowpath")
    built = podman("image", "inspect", "--format", "{{.Id}}", f"{AGENT_IMAGE}-amd64").stdout.decode().strip()
    assert (status["image"], status["imageID"]) == (f"{AGENT_IMAGE}-amd64", f"sha256:{built}"), status


def sidecar_dashboards(node):
    """What Grafana's dashboard sidecar lists in its namespace: the
    ConfigMaps labelled grafana_dashboard=1, {name: {file: JSON text}}."""
    items = node.cluster.kubectl_json("get", "configmaps", "-n", GRAFANA_NAMESPACE,
                                      "-l", "grafana_dashboard=1")["items"]
    return {cm["metadata"]["name"]: cm["data"] for cm in items}


def test_the_dashboards_reach_grafanas_namespace_for_its_sidecar(node, installed):
    """The API server hands the sidecar's label query the three dashboards,
    each the JSON of dashboards/ unchanged."""
    listed = {file: json.loads(text) for data in sidecar_dashboards(node).values() for file, text in data.items()}
    files = {p.name: json.loads(p.read_text()) for p in (REPO / "dashboards").glob("*.json")}
    assert listed == files, sorted(listed)


# -- 2. real pods, counted and named ------------------------------------------------

BPFTRACE_COUNTS = """
tracepoint:raw_syscalls:sys_enter /args->id == 228/ { @clock[cgroup] = count(); }
tracepoint:syscalls:sys_enter_newfstatat /str(args->filename) == "/etc/localtime"/ { @tz[cgroup] = count(); }
BEGIN { printf("ready\\n"); }
"""

def clock_reads_then_sleep(calls):
    """A container command: `calls` raw clock_gettime, then asleep (the
    container, and so its cgroup and series, stays)."""
    return ["sh", "-c", f"/opt/slowpath-e2e/sp-workload clock-raw {calls} && exec sleep infinity"]


PODS = {
    # name: (container, command)
    "python-timer": ("python", ["python3", "-c", "import time\nwhile True:\n    time.sleep(0.001)\n"]),
    "clock-raw": ("clock", clock_reads_then_sleep(CLOCK_CALLS)),
    "tz-logger": ("logger", ["perl", "-e", f"my @t; @t = localtime($_) for 1..{TZ_CALLS}; sleep"]),
    "jvm-thp": ("jvm", ["java", "-XX:+UseTransparentHugePages", "-XX:+AlwaysPreTouch", "-Xms512m", "-Xmx512m",
                        "-cp", "/opt/slowpath-e2e", "PreTouchHeap", "100000"]),
}


def pod_object(name, container, command):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOADS},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": container, "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
                                 "command": command}]},
    }


def wait_running(node, names, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = {p["metadata"]["name"]: p for p in node.cluster.kubectl_json("get", "pods", "-n", WORKLOADS)["items"]}
        if all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names):
            return pods
        time.sleep(0.5)
    raise AssertionError(f"workload pods not Running within {timeout} s:\n{describe(node)}")


def proc_cgroup(pid, controller=None):
    """A process's cgroup directory as the host sees it: its cgroup2 one (the
    `0::` line), or with `controller` that v1 controller's (this host: v1
    controllers, kubelet's cgroupfs driver)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if controller is None and hierarchy == "0":
            return cgroup2_root() / path.lstrip("/")
        if controller is not None and controller in controllers.split(","):
            return Path("/sys/fs/cgroup") / controller / path.lstrip("/")
    raise AssertionError(f"pid {pid}: no {controller or 'cgroup2'} cgroup")


def container_cgroup(node, pod, container):
    """The container's cgroup2 directory, from its process (kubelet's and
    containerd's path, not one the test makes)."""
    return proc_cgroup(node.container_pid(container_id(pod, container)))


def wait_log(node, pod, container, pattern, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, node.pod_log(WORKLOADS, pod, container))
        if m:
            return m
        time.sleep(0.5)
    raise AssertionError(f"{pod}: no {pattern!r} in its log within {timeout} s")


@pytest.fixture(scope="module")
def workloads(node, installed, prometheus, tracefs):
    """The four pods, started under the oracles: {name: pod}, the bpftrace
    counts by cgroup id, the THP faults /proc/vmstat counted meanwhile."""
    node.cluster.kubectl("create", "namespace", WORKLOADS)
    counter = start_counter()
    thp_before = vmstat()
    node.cluster.apply_objects(*(pod_object(n, c, cmd) for n, (c, cmd) in PODS.items()))
    pods = wait_running(node, PODS)
    wait_log(node, "jvm-thp", "jvm", r"pid=\d+")  # the heap is touched before main runs
    thp_after = vmstat()
    thp_grown = {k: thp_after[k] - thp_before[k] for k in ("thp_fault_alloc", "thp_fault_fallback")}
    cgroups = {n: container_cgroup(node, pods[n], c) for n, (c, _) in PODS.items()}
    time.sleep(2)  # the clock and logger pods are done within a second (now asleep)
    counts = stop_counter(counter)
    return {"pods": pods, "cgroups": cgroups, "counts": counts, "thp_grown": thp_grown}


def start_counter():
    """bpftrace counting BPFTRACE_COUNTS, once it is attached."""
    counter = subprocess.Popen(["bpftrace", "-B", "line", "-e", BPFTRACE_COUNTS], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_ready(counter)
    return counter


def stop_counter(counter):
    """{(kind, cgroup id): count} of a start_counter() bpftrace, ended."""
    counter.send_signal(signal.SIGINT)
    out, _ = counter.communicate(timeout=30)
    return {(kind, int(cg)): int(n) for kind, cg, n in re.findall(r"@(\w+)\[(\d+)\]: (\d+)", out)}


def pod_value(page, family, name, container=None):
    """The agent's count for a workload pod's container, from its labels."""
    container = container or PODS[name][0]
    return page.value(family, namespace=WORKLOADS, pod=name, container=container)


def wait_for_value(node, family, name, want=None, timeout=30, container=None):
    """The agent's count for a pod once it reaches `want` (once above 0 with
    None), or at the timeout."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = pod_value(scrape(node, wait_agent_ready(node, 5)), family, name, container)
        if got == want or (want is None and got > 0):
            return got
        time.sleep(1)
    return got


def test_the_pods_cgroups_are_kubelets_cgroupfs_layout(workloads):
    """The paths pod labelling reads, as the real kubelet and containerd made
    them (docs/install.md): /kubepods/besteffort/pod<uid>/<container id>."""
    for name, (container, _) in PODS.items():
        pod = workloads["pods"][name]
        path = workloads["cgroups"][name].relative_to(cgroup2_root())
        want = Path("kubepods", "besteffort", f"pod{pod['metadata']['uid']}", container_id(pod, container))
        assert path == want, (name, path)


def test_raw_clock_reads_and_time_zone_checks_of_pods_are_exact_and_named(node, workloads):
    oracle = {kind: workloads["counts"].get((kind, workloads["cgroups"][name].stat().st_ino), 0)
              for kind, name in (("clock", "clock-raw"), ("tz", "tz-logger"))}
    assert oracle["clock"] == CLOCK_CALLS, oracle  # bpftrace: the pod's cgroup made exactly these
    # glibc reads the zone file at the first call and stats it at each later one
    assert TZ_CALLS - 1 <= oracle["tz"] <= TZ_CALLS, oracle
    assert wait_for_value(node, "slowpath_clock_syscalls_total", "clock-raw", oracle["clock"]) == oracle["clock"]
    assert wait_for_value(node, "slowpath_tzfile_stat_calls_total", "tz-logger", oracle["tz"]) == oracle["tz"]


def python_tids(cgroup):
    pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    return [int(t) for p in pids for t in os.listdir(f"/proc/{p}/task")]


def test_a_python_pods_timer_wakeups_are_bpftraces_rate(node, workloads, tracefs):
    pod = wait_agent_ready(node, 5)
    with TimerOracle() as oracle:
        o0 = time.monotonic()
        t0, before = time.monotonic(), pod_value(scrape(node, pod), "slowpath_timer_wakeups_total", "python-timer")
        time.sleep(5)
        t1, after = time.monotonic(), pod_value(scrape(node, pod), "slowpath_timer_wakeups_total", "python-timer")
        o1 = time.monotonic()
    agent_rate = (after - before) / (t1 - t0)
    oracle_rate = oracle.wakeups(python_tids(workloads["cgroups"]["python-timer"])) / (o1 - o0)
    print(f"python pod: agent {agent_rate:.0f}/s, bpftrace {oracle_rate:.0f}/s")
    assert agent_rate > 500
    assert agent_rate == pytest.approx(oracle_rate, rel=0.15)


def test_a_jvm_pods_thp_faults_are_what_vmstat_counts(node, workloads):
    """The JVM's heap is 256 huge pages: each fault on it is a huge page
    allocated or, where none was free, a fallback; /proc/vmstat counted the
    node's over the JVM's start."""
    grown = workloads["thp_grown"]
    page = scrape(node, wait_agent_ready(node, 5))
    allocs = pod_value(page, "slowpath_thp_fault_allocs_total", "jvm-thp")
    fallbacks = pod_value(page, "slowpath_thp_fault_fallbacks_total", "jvm-thp")
    print(f"jvm pod: {allocs} THP faults, {fallbacks} fallbacks; /proc/vmstat grew by {grown}")
    assert allocs <= grown["thp_fault_alloc"] and fallbacks <= grown["thp_fault_fallback"], (allocs, fallbacks, grown)
    assert allocs + fallbacks >= 512 / 2 / 2, (allocs, fallbacks, grown)


def test_the_findings_name_the_pods(node, workloads):
    deadline = time.monotonic() + 120  # the chart's findings window is 1 min
    named = set()
    while time.monotonic() < deadline:
        pod = wait_agent_ready(node, 5)
        findings = json.loads(get(node, f"http://{pod['status']['podIP']}:{PORT}/debug/findings"))
        named = {(f["id"], p["namespace"], p["pod"], p["container"])
                 for f in findings["findings"] for p in f["processes"]}
        if ("timer_loop", WORKLOADS, "python-timer", "python") in named:
            return
        time.sleep(5)
    raise AssertionError(f"no timer_loop finding naming {WORKLOADS}/python-timer: {named}")


# -- 3. Prometheus as users run it in a cluster ------------------------------------


def prometheus_identity(node, work):
    """A ServiceAccount for Prometheus with the rights the operator's
    Prometheus has for its discovery (get/list/watch services, endpoints,
    endpointslices, pods): its token file."""
    c = node.cluster
    verbs = ["get", "list", "watch"]
    c.apply_objects(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus", "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "e2e-prometheus"},
         "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": verbs},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": verbs}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-prometheus"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "e2e-prometheus"},
         "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": NAMESPACE}]},
    )
    token = work / "token"
    token.write_text(c.create_token("prometheus", NAMESPACE))
    return token


# The monitors as the release would have them, scraped every 2 s.
MONITOR_VALUES = [arg for kind in ("serviceMonitor", "podMonitor") for value in
                  ("enabled=true", "interval=2s", "scrapeTimeout=2s") for arg in ("--set", f"{kind}.{value}")]
# The operator's job names, and the job label each gives the agent's series
# (the Service's name; the PodMonitor's namespace/name).
SERVICE_MONITOR_JOB, SERVICE_MONITOR_JOB_LABEL = f"serviceMonitor/{NAMESPACE}/{RELEASE}/0", RELEASE
POD_MONITOR_JOB, POD_MONITOR_JOB_LABEL = f"podMonitor/{NAMESPACE}/{RELEASE}/0", f"{NAMESPACE}/{RELEASE}"


@pytest.fixture(scope="module")
def operator_scrape_configs(node, helm, installed, tmp_path_factory):
    """The scrape configuration the Prometheus Operator generates for the
    chart's ServiceMonitor and PodMonitor (rendered with the release's values
    and MONITOR_VALUES), by its own code (tests/deploy/opconfig, built into
    the tools cache): {job_name: scrape config}. The operator's Prometheus
    runs in the cluster and reaches the API server in-cluster; this one runs
    outside it, so the Prometheus object sets spec.apiserverConfig (the API
    server, its CA, a ServiceAccount's token), the operator's setting for
    that. Its config reloader replaces $(SHARD) by the shard's number: 0,
    the only one."""
    c = node.cluster
    token = prometheus_identity(node, tmp_path_factory.mktemp("prometheus-identity"))
    rendered = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *INSTALL_VALUES, *MONITOR_VALUES).stdout
    proc = subprocess.run(
        [str(tools_cache() / "bin" / "sp-opconfig"), "-namespace", NAMESPACE,
         "-prometheus-version", prometheus_release("3").version(),
         "-api-server", c.server, "-ca-file", str(c.ca_file), "-token-file", str(token)],
        input=rendered, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    configs = yaml.safe_load(proc.stdout.replace("$(SHARD)", "0"))["scrape_configs"]
    return {config["job_name"]: config for config in configs}


@pytest.fixture(scope="module")
def prometheus(node, installed, operator_scrape_configs, tmp_path_factory):
    """Prometheus 3 in the node's namespace, discovering the agent through the
    API server, evaluating the shipped rules with every `for:` cut to 2 s and
    every 5-minute window to 1 minute (names, expressions and thresholds as
    shipped; promtool tests the shipped windows, test_mixin.py and
    test_alerts.py): a 5-minute rate reaches the timer-loop alert's 500/s on a
    1 ms loop's ~900/s only after about 170 s of samples, a 1-minute one
    after about 35 s. Started before the workloads. Yields its base URL
    (query it through node.netns)."""
    work = tmp_path_factory.mktemp("prometheus")
    spec = yaml.safe_load(RULES.read_text())
    for group in spec["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
            rule["expr"] = rule["expr"].replace("[5m]", "[1m]")
    (work / "rules.yaml").write_text(yaml.safe_dump(spec))
    with prometheus_server(work, None, job=SERVICE_MONITOR_JOB_LABEL, rule_files=["rules.yaml"],
                           scrape_configs=[operator_scrape_configs[SERVICE_MONITOR_JOB]], netns=node.netns) as base:
        yield base


def test_prometheus_discovers_the_agent_and_the_timer_loop_alert_names_the_pod(node, prometheus, workloads):
    up = prom_query(prometheus, "up", node.netns)
    assert [(r["metric"]["instance"], r["value"][1]) for r in up] == [(node.name, "1")], up
    # instance_cgroup_comm:slowpath_timer_wakeups:rate5m > 500 holds once about
    # 35 s of the loop's ~900/s are in its window (1 minute in this copy).
    deadline = time.monotonic() + 300
    alerts = seen = []
    while time.monotonic() < deadline:
        seen = prom_get_alerts(prometheus, node)
        alerts = [a for a in seen if a["labels"]["alertname"] == "SlowpathTimerLoop"
                  and a["labels"].get("pod") == "python-timer" and a["state"] == "firing"]
        if alerts:
            break
        time.sleep(2)
    rates = prom_query(prometheus, 'instance_cgroup_comm:slowpath_timer_wakeups:rate5m{pod="python-timer"}',
                       node.netns)
    assert alerts, f"SlowpathTimerLoop did not fire for the Python pod: rate5m {rates}, alerts {seen}"
    labels, annotations = alerts[0]["labels"], alerts[0]["annotations"]
    assert (labels["namespace"], labels["container"], labels["instance"]) == (WORKLOADS, "python", node.name)
    assert annotations["cause"] and annotations["fix"], annotations
    assert "pod workloads/python-timer" in annotations["description"], annotations


def assert_workload_labels_kept(base, node, job_label, workloads):
    """The stored slowpath_timer_wakeups_total series of the Python pod's
    container (found by its cgroup, whatever their labels) have the workload's
    namespace, pod and container, no exported_* label, and the target's job,
    instance and endpoint; those of processes outside pods have none of the
    three; the agent's node-wide series have the agent pod's."""
    pod = workloads["pods"]["python-timer"]
    cgroup = f'.*/pod{pod["metadata"]["uid"]}/{container_id(pod, "python")}'
    series = prom_query(base, f'slowpath_timer_wakeups_total{{cgroup=~"{cgroup}"}}', node.netns)
    assert series, "no series of the Python pod"
    for s in series:
        labels = s["metric"]
        assert (labels.get("namespace"), labels.get("pod"), labels.get("container")) == \
            (WORKLOADS, "python-timer", "python"), labels
        assert not [k for k in labels if k.startswith("exported_")], labels
        assert (labels["job"], labels["instance"], labels["endpoint"]) == (job_label, node.name, "metrics"), labels
    # Processes outside pods export the three labels empty: the agent pod's stay off them.
    outside = prom_query(base, 'slowpath_timer_wakeups_total{cgroup!~".*kubepods.*"}', node.netns)
    assert outside, "no series of a process outside pods"
    assert not [s["metric"] for s in outside if {"namespace", "pod", "container"} & set(s["metric"])], outside
    agent = wait_agent_ready(node, 5)["metadata"]["name"]
    build = prom_query(base, "slowpath_build_info", node.netns)
    assert [(s["metric"]["namespace"], s["metric"]["pod"], s["metric"]["container"]) for s in build] == \
        [(NAMESPACE, agent, "slowpath")], build


def test_the_operators_scrape_keeps_the_workloads_namespace_pod_and_container(
        node, prometheus, workloads, operator_scrape_configs, tmp_path_factory):
    """Through the configuration the operator generates for the chart's
    monitors (honorLabels: true), the target's namespace, pod and container
    (the agent pod's) do not replace the workload's: the Python pod's series
    and the namespace_pod: recording rules name it; the same through the
    PodMonitor's configuration, in a Prometheus of its own (both jobs in one
    would count every process twice)."""
    for job in (SERVICE_MONITOR_JOB, POD_MONITOR_JOB):
        assert operator_scrape_configs[job]["honor_labels"] is True, operator_scrape_configs[job]
    assert_workload_labels_kept(prometheus, node, SERVICE_MONITOR_JOB_LABEL, workloads)
    rate = prom_query(prometheus, 'namespace_pod:slowpath_timer_wakeups:rate5m'
                      f'{{namespace="{WORKLOADS}",pod="python-timer"}}', node.netns)
    assert len(rate) == 1 and float(rate[0]["value"][1]) > 500, rate
    work = tmp_path_factory.mktemp("prometheus-podmonitor")
    with prometheus_server(work, None, job=POD_MONITOR_JOB_LABEL,
                           scrape_configs=[operator_scrape_configs[POD_MONITOR_JOB]], netns=node.netns) as base:
        assert_workload_labels_kept(base, node, POD_MONITOR_JOB_LABEL, workloads)


def prom_get_alerts(base, node):
    return prom_get(f"{base}/api/v1/alerts", node.netns)["data"]["alerts"]


# -- 3b. from the alert to the fix, as its reader goes ------------------------------

# The commands an alert's description gives (the chart's helpers
# slowpath.doctorCommand and slowpath.findingsCommand, rendered with the
# alert's labels): the doctor in the node's agent pod, the agent's findings
# through the API server's pod proxy.
ALERT_DOCTOR = re.compile(r"kubectl -n \S+ exec \$\(.*?\) -c slowpath -- slowpath doctor --comm '[^']*'")
ALERT_FINDINGS = re.compile(r"kubectl get --raw /api/v1/namespaces/\S+?/pods/(?:https:)?\$\(.*?\):\d+/proxy/debug/findings")
RUNBOOK = REPO / "docs" / "runbook.md"
KNOWN_SOURCES = CHART / "files" / "known-sources.yaml"


def as_the_reader(node, command, timeout=120, while_running=lambda: None):
    """A command as written, run by a shell that has the cluster's kubectl on
    PATH and its kubeconfig in KUBECONFIG, where the alert's reader is; its
    output. while_running() is called every 0.2 s until it exits."""
    c = node.cluster
    env = {**os.environ, "KUBECONFIG": str(c.kubeconfig), "PATH": f"{c.bin}:{os.environ['PATH']}"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([*c.in_netns(), "bash", "-c", command], env=env, stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
            while_running()
            time.sleep(0.2)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    assert proc.returncode == 0, f"{command}\n{stdout}{stderr}"
    return stdout


class PodUsage:
    """The agent container's memory (peak, v1 memory.max_usage_in_bytes,
    reset at the start) and CPU (cpuacct.usage, CFS throttling) while a
    command runs in it, and the peak RSS of the other slowpath process in it
    (the doctor), polled."""

    def __init__(self, pid):
        self.memory, self.cpuacct, self.cpu = (proc_cgroup(pid, c) for c in ("memory", "cpuacct", "cpu"))
        self.agent_pid = pid
        self.doctor_hwm_kib = 0

    def __enter__(self):
        self.before = self.read()
        (self.memory / "memory.max_usage_in_bytes").write_text("0")
        self.t0 = time.monotonic()
        return self

    def read(self):
        stat = dict(l.split() for l in (self.cpu / "cpu.stat").read_text().splitlines())
        oom = dict(l.split() for l in (self.memory / "memory.oom_control").read_text().splitlines())
        return {"usage": int((self.memory / "memory.usage_in_bytes").read_text()),
                "cpu_ns": int((self.cpuacct / "cpuacct.usage").read_text()),
                "throttled": int(stat["nr_throttled"]), "oom_kill": int(oom.get("oom_kill", 0))}

    def poll(self):
        """The doctor's VmHWM, while it runs."""
        for pid in (int(p) for p in (self.memory / "cgroup.procs").read_text().split()):
            if pid != self.agent_pid:
                with contextlib.suppress(OSError, KeyError):
                    status = status_fields(pid)
                    if status["Name"].strip() == "slowpath":
                        self.doctor_hwm_kib = max(self.doctor_hwm_kib, int(status["VmHWM"].split()[0]))

    def __exit__(self, *exc):
        self.seconds = time.monotonic() - self.t0
        self.after = self.read()
        self.peak = int((self.memory / "memory.max_usage_in_bytes").read_text())
        self.limit = int((self.memory / "memory.limit_in_bytes").read_text())

    def summary(self):
        mib = 1 << 20
        cpu = (self.after["cpu_ns"] - self.before["cpu_ns"]) / 1e9
        return (f"agent container: {self.before['usage'] / mib:.1f} MiB before, peak {self.peak / mib:.1f} MiB of "
                f"{self.limit / mib:.0f} MiB with the doctor; doctor VmHWM {self.doctor_hwm_kib / 1024:.1f} MiB; "
                f"CPU {cpu:.2f} s in {self.seconds:.1f} s ({cpu / self.seconds * 1000:.0f}m), "
                f"throttled {self.after['throttled'] - self.before['throttled']} periods, "
                f"oom_kill {self.after['oom_kill'] - self.before['oom_kill']}")


def firing(node, prometheus, alertname, pod):
    return [a for a in prom_get_alerts(prometheus, node) if a["labels"]["alertname"] == alertname
            and a["labels"].get("pod") == pod and a["state"] == "firing"]


def test_the_timer_loop_alerts_commands_run_as_written_and_name_the_finding_and_its_fix(node, prometheus, workloads):
    """The alert the test above waited for: the doctor command its
    description gives, run as written from where kubectl works, runs in the
    node's agent pod (its privileges as uid 65534, within its memory limit,
    the agent undisturbed) and names the timer loop of the Python pod and
    its fix; the findings command gives the agent's findings as JSON."""
    alerts = firing(node, prometheus, "SlowpathTimerLoop", "python-timer")
    assert alerts, "SlowpathTimerLoop no longer fires (see the test above)"
    labels, notes = alerts[0]["labels"], alerts[0]["annotations"]
    description = notes["description"]
    doctor = ALERT_DOCTOR.findall(description)
    assert len(doctor) == 1 and f"spec.nodeName={node.name} " in doctor[0], description
    assert "--comm 'python3'" in doctor[0], doctor
    pod = wait_agent_ready(node, 5)
    pid = agent_pid(node, pod)
    with PodUsage(pid) as usage:
        report = as_the_reader(node, doctor[0], while_running=usage.poll)
    print(usage.summary())
    print(report)
    assert usage.peak < usage.limit and usage.after["oom_kill"] == usage.before["oom_kill"], usage.summary()
    assert agent_pid(node, wait_agent_ready(node, 5)) == pid, "the agent was restarted"
    # the doctor names processes by comm and cgroup (the container's), as the alert does
    assert re.search(r"\] python3 is woken by a short timer", report), report
    assert re.search(rf"^\s+\d+\s+python3\s+[\d.]+\s+{re.escape(labels['cgroup'])}$", report, re.M), report
    fix = re.search(r"^   fix:   (.+)$", report, re.M).group(1)
    if labels.get("known_source"):
        # the alert's fix (its known source's row) is the doctor's
        assert f"known source {labels['known_source']}:" in report, report
        row = next(r for r in yaml.safe_load(KNOWN_SOURCES.read_text())["timer"] if r["id"] == labels["known_source"])
        assert notes["fix"] == fix == row["fix"], (notes["fix"], fix)
        assert f"Fix: {fix}" in description, description

    # the findings, from SlowpathFindingHeld's description (its `for:` is cut
    # too), else from the rule's template with the same node
    held = [a for a in firing(node, prometheus, "SlowpathFindingHeld", "python-timer")
            if a["labels"]["finding"] == "timer_loop"]
    if held:
        command = ALERT_FINDINGS.findall(held[0]["annotations"]["description"])
    else:
        rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                    if r.get("alert") == "SlowpathFindingHeld")
        command = ALERT_FINDINGS.findall(rule["annotations"]["description"].replace("{{ $labels.instance }}", node.name))
    assert len(command) == 1 and command == ALERT_FINDINGS.findall(description), (command, description)
    findings = json.loads(as_the_reader(node, command[0]))
    named = {(f["id"], p["pod"]) for f in findings["findings"] for p in f["processes"]}
    assert ("timer_loop", "python-timer") in named, named


def test_the_runbooks_kubernetes_commands_run_as_written(node, workloads):
    """docs/runbook.md's "Running the doctor" block, its first line set to
    this node and the Python pod's comm, each command as written: the doctor
    and top in the agent's pod, the findings through the pod proxy."""
    section = RUNBOOK.read_text().split("\n## Running the doctor\n", 1)[1]
    lines = re.search(r"```sh\n(.*?)```", section, re.S).group(1).splitlines()
    assert lines[0].startswith("NODE=node-1 COMM=python3 "), lines[0]
    assert lines[1].startswith("POD=$(kubectl "), lines[1]
    setup = f"NODE={node.name} COMM=python3\n{lines[1]}\n"
    doctor, top, findings = lines[2:]
    report = as_the_reader(node, setup + doctor)
    cgroup = "/" + str(workloads["cgroups"]["python-timer"].relative_to(cgroup2_root()))
    assert re.search(r"\] python3 is woken by a short timer", report), report
    assert re.search(rf"^\s+\d+\s+python3\s+[\d.]+\s+{re.escape(cgroup)}$", report, re.M), report
    frame = as_the_reader(node, setup + top)
    assert frame.startswith("slowpath top - ") and f"http://127.0.0.1:{PORT}/metrics" in frame, frame
    assert re.search(rf"^\s*-\s+python3\s.*{WORKLOADS}/python-timer.*timer_loop", frame, re.M), frame
    named = {(f["id"], p["pod"]) for f in json.loads(as_the_reader(node, setup + findings))["findings"]
             for p in f["processes"]}
    assert ("timer_loop", "python-timer") in named, named


# -- 4-6. lifecycle ------------------------------------------------------------------


def bpf_ids(kind):
    out = subprocess.run(["bpftool", "-j", kind, "show"], capture_output=True, text=True, check=True).stdout
    return {o["id"] for o in json.loads(out or "[]")}


def held_objects(pid):
    return {"prog": bpf_fd_ids(pid, "prog"), "link": bpf_fd_ids(pid, "link")}


def assert_released(held, timeout=10):
    """None of the BPF programs and links a gone agent held are loaded."""
    deadline = time.monotonic() + timeout
    while True:
        left = {kind: ids & bpf_ids(kind) for kind, ids in held.items()}
        if not any(left.values()):
            return
        assert time.monotonic() < deadline, f"left loaded: {left}"
        time.sleep(0.2)


def clock_pod_counts_exactly(node, name, calls):
    """A new clock pod's raw reads, as the running agent counts them, equal
    the calls it made (the pod's own cgroup, bpftrace)."""
    counter = start_counter()
    node.cluster.apply_objects(pod_object(name, "clock", clock_reads_then_sleep(calls)))
    pod = wait_running(node, [name])[name]
    cgroup = container_cgroup(node, pod, "clock")
    wait_log(node, name, "clock", r"pid=\d+")
    time.sleep(1)
    assert stop_counter(counter).get(("clock", cgroup.stat().st_ino)) == calls
    assert wait_for_value(node, "slowpath_clock_syscalls_total", name, calls, container="clock") == calls


@pytest.fixture(scope="module")
def upgraded(node, helm, installed, workloads):
    """helm upgrade with one value changed (the series' retirement grace, which
    step 5 then waits out): (old pod, the BPF objects it held, new pod)."""
    old = wait_agent_ready(node, 5)
    held = held_objects(agent_pid(node, old))
    assert held["prog"] and held["link"], held
    helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, *INSTALL_VALUES,
         "--set", "agent.retiredSeriesGrace=15s")
    new = wait_agent_ready(node, READY_WITHIN, other_than={old["metadata"]["uid"]})
    return old, held, new


def test_an_upgrade_rolls_the_pod_frees_the_old_programs_and_counts_exactly(node, upgraded):
    old, held, new = upgraded
    assert new["metadata"]["name"] != old["metadata"]["name"]
    envs = {e["name"]: e.get("value") for e in new["spec"]["containers"][0]["env"]}
    assert envs["SLOWPATH_METRICS_RETIRED_SERIES_GRACE"] == "15s"
    assert_released(held)
    clock_pod_counts_exactly(node, "clock-after-upgrade", UPGRADE_CLOCK_CALLS)


def test_a_deleted_workload_pods_series_are_retired_after_the_grace(node, upgraded):
    """docs/metrics.md: a series with no live process is dropped the grace
    (here 15 s, the upgraded value) after its last change once its cgroup is
    gone; one whose cgroup lives on keeps its total. A pod reading the clock
    until it is deleted: its series outlives the deletion by the grace, not
    much more; the clock pod that finished earlier keeps its count."""
    name = "clock-until-deleted"
    node.cluster.apply_objects(pod_object(name, "clock", ["/opt/slowpath-e2e/sp-workload", "clock-paced",
                                                          "100000000", "10"]))
    wait_running(node, [name])
    assert wait_for_value(node, "slowpath_clock_syscalls_total", name, timeout=10, container="clock") > 0
    deleted = time.monotonic()
    node.cluster.kubectl("delete", "pod", "-n", WORKLOADS, name, "--wait=true", timeout=60)
    while True:
        page = scrape(node, wait_agent_ready(node, 5))
        served = time.monotonic() - deleted
        if not page.select("slowpath_clock_syscalls_total", pod=name):
            break
        assert served < 15 + 20, f"{name}'s series still served {served:.0f} s after its deletion"
        time.sleep(1)
    print(f"{name}'s series dropped {served:.1f} s after its deletion")
    assert served >= 15 - 2, f"{name}'s series dropped {served:.1f} s after its deletion, within the 15 s grace"
    # counted by this agent, done long before the grace, its cgroup alive
    assert pod_value(page, "slowpath_clock_syscalls_total", "clock-after-upgrade", "clock") == UPGRADE_CLOCK_CALLS


def test_a_deleted_agent_pod_is_recreated_and_leaves_nothing(node, upgraded):
    old = wait_agent_ready(node, 5)
    held = held_objects(agent_pid(node, old))
    node.cluster.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--wait=true", timeout=60)
    new = wait_agent_ready(node, READY_WITHIN, other_than={old["metadata"]["uid"]})
    assert_released(held)
    assert scrape(node, new).value("slowpath_probe_attached") > 0


# -- 7. seccomp, both ways --------------------------------------------------------------

DENY_BPF = {"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["bpf"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}


def test_a_seccomp_profile_denying_bpf_stops_the_agent_naming_the_override(node, helm, upgraded):
    profile = node.kubelet_root / "seccomp" / "slowpath-e2e-deny-bpf.json"
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(json.dumps(DENY_BPF))
    old = wait_agent_ready(node, 5)
    helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, *INSTALL_VALUES,
         "--set", "seccompProfile.type=Localhost", "--set", f"seccompProfile.localhostProfile={profile.name}")
    deadline = time.monotonic() + 60
    last = ""
    while time.monotonic() < deadline:
        pods = [p for p in agent_pods(node) if p["metadata"]["uid"] != old["metadata"]["uid"]]
        logs = [node.pod_log(NAMESPACE, p["metadata"]["name"], "slowpath") for p in pods]
        lines = [l for log in logs for l in log.splitlines() if "slowpath: error:" in l]
        if lines:
            last = lines[-1]
            break
        time.sleep(1)
    assert "seccomp" in last and "seccompProfile" in last, last or describe(node)
    helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, *INSTALL_VALUES)
    wait_agent_ready(node, READY_WITHIN)


# -- 8. uninstall ----------------------------------------------------------------------


def slowpath_processes():
    """The host's slowpath processes but the test session's own agents
    (children of this process: the agent fixture shared by other modules
    lives until the session ends)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            status = status_fields(pid)
            if status["Name"].strip() == "slowpath" and int(status["PPid"]) != os.getpid():
                found.append(int(pid))
    return found


def test_uninstall_leaves_no_process_program_link_or_pinned_object(node, helm, upgraded):
    pod = wait_agent_ready(node, 5)
    held = held_objects(agent_pid(node, pod))
    pinned = set(Path("/sys/fs/bpf").rglob("*")) if Path("/sys/fs/bpf").is_dir() else set()
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "60s")
    deadline = time.monotonic() + 30
    while agent_pods(node) or slowpath_processes():
        assert time.monotonic() < deadline, (agent_pods(node), slowpath_processes())
        time.sleep(0.5)
    assert_released(held)
    # Nothing of the release is left in the API either, in any namespace
    # (the dashboards lived in Grafana's).
    left = node.cluster.kubectl_json(
        "get", "daemonsets,pods,services,serviceaccounts,configmaps,clusterroles,clusterrolebindings",
        "-A", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    assert not left, [(o["kind"], o["metadata"]["name"]) for o in left]
    assert sidecar_dashboards(node) == {}
    now_pinned = set(Path("/sys/fs/bpf").rglob("*")) if Path("/sys/fs/bpf").is_dir() else set()
    assert now_pinned == pinned
