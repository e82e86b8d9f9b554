"""The rendered chart against a real Kubernetes API server.

A real control plane (etcd, kube-apiserver with RBAC, kube-controller-manager,
kube-scheduler) runs on loopback, with kwok playing the kubelet of two fake
nodes (tests/deploy/k8s_cluster.py; binaries built and cached by
tests/deploy/k8s-tools.sh, which scripts/setup.sh --test runs).

  (a) deploy/kubernetes/slowpath.yaml applies server-side (every object valid
      for the real API server, admission included), twice (no field conflicts);
  (b) the DaemonSet rolls out: one Ready pod on each of the 2 nodes, bound by
      the scheduler (kwok fakes the containers' readiness: nothing runs);
  (c) the chart's ServiceAccount, through a real token and the chart's RBAC,
      can list and watch pods cluster-wide (the agent's spec.nodeName watch
      works as that identity) and can do nothing else asked here.

The components are tests/deploy/k8s-tools.sh's, built by scripts/setup.sh
--test; without them the tests fail naming that command.
"""

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "kubernetes" / "slowpath.yaml"
sys.path.insert(0, str(REPO / "tests" / "deploy"))

from helpers.agent import Agent  # noqa: E402
from helpers.host import cgroup2_root  # noqa: E402
from k8s_cluster import Cluster, ToolsUnavailable, tools_bin  # noqa: E402

pytestmark = pytest.mark.tier("full")

ROLLOUT_TIMEOUT = 90


@pytest.fixture(scope="module")
def cluster():
    try:
        bin_dir = tools_bin()
    except ToolsUnavailable as e:
        pytest.fail(f"Kubernetes tools unavailable: {e}")
    with Cluster(bin_dir) as c:
        print(f"cluster started in {c.start_seconds:.1f} s ({c.server})")
        yield c


@pytest.fixture(scope="module")
def objects(request):
    """The manifest's objects, parsed by the cluster's own kubectl (no YAML
    library needed; client-side only). Checked before starting the cluster."""
    if not MANIFEST.exists():
        pytest.skip(f"{MANIFEST.relative_to(REPO)} does not exist yet (rendered chart)")
    cluster = request.getfixturevalue("cluster")
    out = cluster.kubectl("create", "--dry-run=client", "-o", "json", "-f", MANIFEST).stdout
    # One JSON document per object, concatenated.
    items, pos, dec = [], 0, json.JSONDecoder()
    while out[pos:].strip():
        doc, end = dec.raw_decode(out, len(out) - len(out[pos:].lstrip()))
        items += doc["items"] if doc.get("kind") == "List" else [doc]
        pos = end
    assert items, f"{MANIFEST} holds no objects"
    return items


@pytest.fixture(scope="module")
def applied(objects, cluster):
    """Creates the namespaces the manifest uses but does not define (a chart
    rendered for `helm install -n NS` does not create NS), then applies it
    server-side. Returns the CompletedProcess; test (a) judges it."""
    defined = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    used = {o["metadata"].get("namespace") for o in objects} - {None, ""} - defined
    for ns in sorted(used):
        cluster.apply_objects({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return cluster.kubectl(
        "apply", "--server-side", "--field-manager=slowpath-e2e", "-f", MANIFEST, check=False
    )


def _need_applied(applied):
    if applied.returncode != 0:
        pytest.skip("the manifest did not apply (see test_server_side_apply)")


def _daemonsets(objects):
    ds = [o for o in objects if o["kind"] == "DaemonSet"]
    assert ds, "the manifest has no DaemonSet"
    return ds


def _ns(obj):
    return obj["metadata"].get("namespace") or "default"


def test_server_side_apply(objects, cluster, applied):
    assert applied.returncode == 0, f"server-side apply failed:\n{applied.stdout}{applied.stderr}"
    # Every object is there, as the server stored it.
    stored = cluster.kubectl_json("get", "-f", MANIFEST)
    stored = stored["items"] if stored.get("kind") == "List" else [stored]
    key = lambda o: (o["kind"], o["metadata"].get("namespace") or "", o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, stored)) == sorted(map(key, objects))
    # Applying again is a no-op without conflicts (one field manager owns it all).
    again = cluster.kubectl("apply", "--server-side", "--field-manager=slowpath-e2e", "-f", MANIFEST, check=False)
    assert again.returncode == 0, f"second apply failed:\n{again.stdout}{again.stderr}"


def test_daemonset_rolls_out_on_every_node(objects, cluster, applied):
    _need_applied(applied)
    nodes = set(cluster.node_names)
    for ds in _daemonsets(objects):
        name, ns = ds["metadata"]["name"], _ns(ds)
        deadline = time.monotonic() + ROLLOUT_TIMEOUT
        status = {}
        while time.monotonic() < deadline:
            status = cluster.kubectl_json("get", "daemonset", name, "-n", ns).get("status", {})
            if (status.get("desiredNumberScheduled") == len(nodes)
                    and status.get("numberReady") == len(nodes)
                    and status.get("updatedNumberScheduled") == len(nodes)):
                break
            time.sleep(0.5)
        else:
            diag = cluster.kubectl("describe", "daemonset", name, "-n", ns, check=False).stdout
            diag += cluster.kubectl("get", "pods,events", "-n", ns, "-o", "wide", check=False).stdout
            pytest.fail(f"DaemonSet {ns}/{name} not rolled out in {ROLLOUT_TIMEOUT} s: {status}\n{diag}\n"
                        + cluster.diagnostics(15))

        selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
        pods = cluster.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
        assert sorted(p["spec"].get("nodeName") for p in pods) == sorted(nodes), \
            f"expected one pod per node {sorted(nodes)}: {[(p['metadata']['name'], p['spec'].get('nodeName')) for p in pods]}"
        for p in pods:
            assert p["status"]["phase"] == "Running", p["status"]
            want_sa = ds["spec"]["template"]["spec"].get("serviceAccountName", "default")
            assert p["spec"].get("serviceAccountName") == want_sa


def test_serviceaccount_rbac(objects, cluster, applied):
    _need_applied(applied)
    ds = _daemonsets(objects)[0]
    ns = _ns(ds)
    sa = ds["spec"]["template"]["spec"].get("serviceAccountName", "default")
    kc = cluster.serviceaccount_kubeconfig(sa, ns)

    who = cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc)
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:{sa}"

    def can_i(*args):
        proc = cluster.kubectl("auth", "can-i", *args, kubeconfig=kc, check=False)
        answer = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else proc.stderr.strip()
        assert answer in ("yes", "no"), f"can-i {args}: {proc.stdout}{proc.stderr}"
        return answer

    allowed = [("list", "pods", "--all-namespaces"), ("watch", "pods", "--all-namespaces"),
               ("get", "pods", "-n", ns)]
    denied = [("create", "pods", "-n", ns), ("create", "pods", "--all-namespaces"),
              ("get", "secrets", "-n", ns), ("get", "secrets", "--all-namespaces"),
              ("list", "secrets", "--all-namespaces"), ("delete", "pods", "--all-namespaces"),
              ("update", "nodes"), ("create", "serviceaccounts", "--subresource=token", "-n", ns)]
    got = {args: can_i(*args) for args in allowed + denied}
    wrong = {args: v for args, v in got.items() if v != ("yes" if args in allowed else "no")}
    assert not wrong, f"unexpected authorization for {ns}/{sa}: {wrong}"

    # What the agent does at start: list (then watch) the pods of its node,
    # across namespaces, by field selector, as its ServiceAccount.
    for node in cluster.node_names:
        pods = cluster.kubectl_json("get", "pods", "--all-namespaces",
                                    "--field-selector", f"spec.nodeName={node}", kubeconfig=kc)["items"]
        mine = [p for p in pods if p["metadata"]["namespace"] == ns
                and any(r.get("kind") == "DaemonSet" and r.get("name") == ds["metadata"]["name"]
                        for r in p["metadata"].get("ownerReferences", []))]
        assert len(mine) == 1, f"{node}: {[p['metadata']['name'] for p in pods]}"
        assert all(p["spec"]["nodeName"] == node for p in pods)


# ---- the agent's pod labels, end to end ------------------------------------

CONTAINER_ID = "5f" * 32  # what a container runtime would report


NODE = "slowpath-e2e-host"  # the node name the agent and the view are told


def bind_pod(cluster, namespace, name):
    """A Pod object bound to this host (no kubelet here: its status is set as
    a kubelet would), with one container `cart`; its uid."""
    cluster.apply_objects({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    cluster.apply_objects({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": NODE, "containers": [{"name": "cart", "image": "cart:1"}]},
    })
    uid = cluster.kubectl_json("get", "pod", "-n", namespace, name)["metadata"]["uid"]
    status = {"status": {"phase": "Running", "containerStatuses": [{
        "name": "cart", "image": "cart:1", "imageID": "", "ready": True, "restartCount": 0,
        "containerID": f"containerd://{CONTAINER_ID}", "state": {"running": {}}}]}}
    cluster.kubectl("patch", "pod", "-n", namespace, name, "--subresource=status", "--type=merge",
                    "-p", json.dumps(status))
    return uid


@contextlib.contextmanager
def container_cgroup(uid):
    """A kubelet-style cgroup on this host for the container of pod `uid`
    (systemd driver, containerd), removed afterwards with its parents if
    empty."""
    root = cgroup2_root()
    if root is None:
        pytest.skip("no cgroup2 mount")
    pod_slice = root / "kubepods.slice" / "kubepods-besteffort.slice" / \
        f"kubepods-besteffort-pod{uid.replace('-', '_')}.slice"
    scope = pod_slice / f"cri-containerd-{CONTAINER_ID}.scope"
    scope.mkdir(parents=True)
    try:
        yield scope
    finally:
        scope.rmdir()
        pod_slice.rmdir()
        for parent in [pod_slice.parent, pod_slice.parent.parent]:
            try:
                parent.rmdir()
            except OSError:
                pass


def run_in(scope, workload_bin, *args, wait=True):
    """sp-workload with `args` inside the cgroup `scope`: its pid (it prints
    it first)."""
    proc = subprocess.Popen(["sh", "-c", f'echo $$ > {scope}/cgroup.procs && exec "$0" "$@"', str(workload_bin),
                             *args], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline().split("pid=")[1].split()[0])
    if wait:
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    return pid, proc


def test_agent_labels_a_pods_processes_and_drops_them_after_deletion(
    cluster, applied, tmp_path, agent_bin, workload_bin
):
    """A Pod object bound to this host, a kubelet-style cgroup for its
    container on this host, a workload inside it, and the real agent
    watching the API server as the chart's ServiceAccount."""
    uid = bind_pod(cluster, "shop", "cart-0")
    with container_cgroup(uid) as scope:
        agent = Agent(agent_bin, ["--metrics.pid-label", "--kubernetes.enabled",
                                  f"--kubeconfig={cluster.serviceaccount_kubeconfig('slowpath', 'slowpath')}",
                                  f"--kubernetes.node-name={NODE}", "--kubernetes.deleted-pod-grace=2s"],
                      tmp_path / "agent.log")
        try:
            pid, _ = run_in(scope, workload_bin, "clock-raw", "4242")
            deadline = time.monotonic() + 30
            while True:
                scrape = agent.scrape()
                assert scrape.value("slowpath_kubernetes_up") in (0, 1)
                series = scrape.select("slowpath_clock_syscalls_total", pid=pid, comm="sp-workload")
                if series and series[0].labels["pod"]:
                    break
                assert time.monotonic() < deadline, (series, agent.log_text())
                time.sleep(0.2)
            assert scrape.value("slowpath_kubernetes_up") == 1
            labels = series[0].labels
            assert (labels["namespace"], labels["pod"], labels["container"]) == ("shop", "cart-0", "cart")
            assert series[0].value == 4242

            cluster.kubectl("delete", "pod", "-n", "shop", "cart-0", "--grace-period=0", "--force")
            time.sleep(3)  # past the 2 s grace
            deadline = time.monotonic() + 20
            while agent.scrape().select("slowpath_clock_syscalls_total", pid=pid, comm="sp-workload"):
                assert time.monotonic() < deadline, "series of the deleted pod were not dropped"
                time.sleep(0.5)
        finally:
            assert agent.stop() == 0


def test_standalone_top_names_a_pods_processes(cluster, applied, agent_bin, workload_bin):
    """`slowpath top --source standalone --kubernetes.enabled` (no agent: the
    view loads the programs and watches the API server itself, as the
    chart's ServiceAccount) names a workload in a pod's container cgroup by
    its namespace, pod and container, in its JSON rows and in a text frame's
    place column, at the rate of its clock syscalls."""
    uid = bind_pod(cluster, "shop", "cart-1")
    view = None
    try:
        with container_cgroup(uid) as scope:
            pid, load = run_in(scope, workload_bin, "clock-raw", str(10**12), wait=False)
            try:
                kube = ["--kubernetes.enabled", f"--kubernetes.node-name={NODE}",
                        f"--kubeconfig={cluster.serviceaccount_kubeconfig('slowpath', 'slowpath')}"]
                view = subprocess.run([str(agent_bin), "top", "--source", "standalone", "--batch", "--json",
                                       "-n", "3", "-d", "2", "--rows", "0", *kube],
                                      capture_output=True, text=True, timeout=60)
                text = subprocess.run([str(agent_bin), "top", "--source", "standalone", "--batch", "-n", "1",
                                       "-d", "2", *kube], capture_output=True, text=True, timeout=60)
            finally:
                load.kill()
                load.wait()
    finally:
        cluster.kubectl("delete", "pod", "-n", "shop", "cart-1", "--grace-period=0", "--force")
    assert view.returncode == 0 and text.returncode == 0, (view.stderr, text.stderr)
    rows = [r for r in map(json.loads, view.stdout.splitlines()) if r.get("pid") == str(pid)]
    assert rows, view.stdout[-2000:]
    last = rows[-1]
    assert (last.get("namespace"), last.get("pod"), last.get("container")) == ("shop", "cart-1", "cart"), last
    assert last["rates"].get("clock_fallbacks", 0) > 1000, last
    row = next((l for l in text.stdout.splitlines() if l.split()[:1] == [str(pid)]), None)
    assert row and "shop/cart-1" in row, text.stdout
