"""A real, small Kubernetes control plane on loopback for the tests.

    from k8s_cluster import Cluster, tools_bin

    bin_dir = tools_bin()                    # built by tests/deploy/k8s-tools.sh
    with Cluster(bin_dir) as c:              # etcd, apiserver, controller-manager,
        c.kubectl("get", "nodes")            # scheduler, kwok and 2 fake nodes
        kc = c.serviceaccount_kubeconfig("slowpath", "slowpath")
        c.kubectl("auth", "can-i", "list", "pods", "-A", kubeconfig=kc, check=False)

Everything listens on 127.0.0.1 on free ports and lives in one temporary
directory (certificates, keys, kubeconfigs, etcd data, one log per component);
stop() (or leaving the `with` block) terminates the processes it started, by
PID, and removes that directory (unless keep_dir=True, for debugging).

Real components (built from the Go module proxy by k8s-tools.sh): etcd,
kube-apiserver with RBAC, kube-controller-manager (the DaemonSet controller
creates the pods), kube-scheduler (it binds them: the DaemonSet controller only
pins each pod to its node with a node affinity) and kwok, which plays the
kubelet of every Node annotated kwok.x-k8s.io/node=fake: it keeps those nodes
Ready (status + lease heartbeats) and marks their pods Running and Ready
without running any container.

With nodes=() and a network namespace (netns, node_ip) it is the control
plane of a real node instead (k8s_node.Node): every component runs in that
namespace, the API server listens on node_ip too and is the `kubernetes`
Service's endpoint, and authorizes kubelets with Node,RBAC.

Identities (all certificates from one throw-away CA, made with openssl):
  admin       client cert CN=slowpath-e2e-admin, O=system:masters  -> .kubeconfig
  controller  CN=system:kube-controller-manager (bootstrap RBAC), one
              ServiceAccount per controller (--use-service-account-credentials)
  scheduler   CN=system:kube-scheduler (bootstrap RBAC)
  kwok        CN=kwok-controller, O=system:masters (it writes node and pod status)
  workloads   ServiceAccount tokens (TokenRequest API): create_token(),
              serviceaccount_kubeconfig()
  a node      write_client_kubeconfig(): its kubelet (system:node:NAME in
              system:nodes), kube-proxy (system:kube-proxy)

Only the standard library is used (JSON for the objects it creates).
"""

from __future__ import annotations

import ctypes
import json
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS_SCRIPT = HERE / "k8s-tools.sh"

# Node objects the cluster starts with (kwok plays their kubelets).
DEFAULT_NODES = ("kwok-node-0", "kwok-node-1")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"

SERVICE_CIDR = "10.96.0.0/16"  # kubernetes Service gets 10.96.0.1
POD_CIDR = "10.244.0.0/16"  # kwok hands out fake pod IPs from here
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ToolsUnavailable(Exception):
    """The control-plane binaries are not built (what is missing in the message)."""


def tools_bin():
    """The bin dir of the components k8s-tools.sh built (scripts/setup.sh
    --test runs it; nothing is built here: a cold build takes 20-25 min).

    Raises ToolsUnavailable naming what is missing or stale and the setup
    command.
    """
    proc = subprocess.run(["bash", str(TOOLS_SCRIPT), "--check"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolsUnavailable(f"{TOOLS_SCRIPT.name} --check: {proc.stderr.strip()[-2000:]}\n"
                               "build them with: scripts/setup.sh --test")
    bin_dir = Path(proc.stdout.strip().splitlines()[-1])
    missing = [
        b
        for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
        if not (bin_dir / b).exists()
    ]
    if missing:
        raise ToolsUnavailable(f"{TOOLS_SCRIPT.name} left no {', '.join(missing)} in {bin_dir}: "
                               "run scripts/setup.sh --test")
    return bin_dir


def _free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent():
    """preexec_fn: SIGTERM the component if the test process dies (even by
    SIGKILL), so that an aborted run leaves nothing behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Cluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok.

    Attributes once started: kubeconfig (admin, Path), server (URL), ca_file,
    dir (the temp dir), logs (component -> log file Path), nodes (names).
    """

    def __init__(self, bin_dir, nodes=DEFAULT_NODES, keep_dir=False, start_timeout=90, netns=None, node_ip=None):
        """nodes: the fake (kwok) nodes to make; none: no kwok. netns: a
        k8s_node.NetNS to run every component in (its loopback; the test's
        requests go there too), with node_ip an address of that namespace the
        API server advertises (the `kubernetes` Service's endpoint, which
        kube-proxy routes pods to) and the kubelets' authorization mode
        (Node,RBAC): for a real node (k8s_node.Node)."""
        self.bin = Path(bin_dir)
        self.netns = netns
        self.node_ip = node_ip
        self.stages = self.bin.parent / "share" / "kwok-stages.yaml"
        self.node_names = tuple(nodes)
        self.keep_dir = keep_dir
        self.start_timeout = start_timeout
        self.dir = None
        self.procs = {}  # component -> Popen
        self.logs = {}  # component -> Path
        self.kubeconfig = None
        self.server = None
        self.ca_file = None
        self.start_seconds = None

    # -- lifecycle -------------------------------------------------------

    def __enter__(self):
        for attempt in (1, 2):
            try:
                self.start()
                return self
            except BaseException as e:
                clash = "address already in use" in str(e)
                self.stop()
                if not (clash and attempt == 1):  # a free port was taken meanwhile: once more
                    raise

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        t0 = time.monotonic()
        self.logs = {}
        self.dir = Path(tempfile.mkdtemp(prefix="slowpath-k8s-"))
        (etcd_client, etcd_peer, api_port, kcm_port, sched_port) = _free_ports(5)
        self.server = f"https://127.0.0.1:{api_port}"
        self._make_pki()
        self._start_etcd(etcd_client, etcd_peer)
        self._start_apiserver(api_port, etcd_client)
        self._start_controller_manager(kcm_port)
        self._start_scheduler(sched_port)
        if self.node_names:
            self._start_kwok()
            self._create_nodes()
        self._wait_controllers()
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self):
        """Terminates what start() started, by PID, one at a time in reverse
        order (SIGTERM, SIGKILL after 10 s): etcd last, or the API server's
        graceful shutdown would hang on it. Then removes the temp dir."""
        for name in reversed(list(self.procs)):
            self.end(name)
        self.procs.clear()
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def end(self, name, timeout=10):
        """Ends one component started here, if it still runs: SIGTERM, then
        SIGKILL after `timeout` seconds."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # -- clients ---------------------------------------------------------

    def kubectl(self, *args, kubeconfig=None, check=True, input=None, timeout=60):
        """Runs the cluster's kubectl (same version as the server) as admin, or
        with another kubeconfig. Returns the CompletedProcess (text)."""
        cmd = [*self.in_netns(), str(self.bin / "kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig),
               *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def kubectl_json(self, *args, **kw):
        return json.loads(self.kubectl(*args, "-o", "json", **kw).stdout)

    def apply_objects(self, *objs):
        """Server-side applies Kubernetes objects given as dicts."""
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        return self.kubectl("apply", "--server-side", "--field-manager=slowpath-e2e", "-f", "-", input=doc)

    def create_token(self, serviceaccount, namespace, duration="1h"):
        """A bound token for the ServiceAccount (TokenRequest API), as its pods get."""
        return self.kubectl(
            "create", "token", serviceaccount, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()

    def kubeconfig_for_token(self, token, name, namespace="default"):
        """Writes a kubeconfig that authenticates with a bearer token; returns its path."""
        path = self.dir / f"kubeconfig-{name}"
        self._write_kubeconfig(path, name, {"token": token}, namespace=namespace)
        return path

    def serviceaccount_kubeconfig(self, serviceaccount, namespace, duration="1h"):
        """A kubeconfig acting as system:serviceaccount:NAMESPACE:SERVICEACCOUNT
        (what the agent gets in its pod), to run kubectl or the agent with."""
        token = self.create_token(serviceaccount, namespace, duration)
        return self.kubeconfig_for_token(token, f"sa-{namespace}-{serviceaccount}", namespace)

    def in_netns(self):
        """The command prefix that runs a program in the cluster's network
        namespace ([] without one)."""
        return self.netns.command() if self.netns else []

    def spawn(self, name, argv, env=None, preexec=None):
        """Starts a long-running process of the cluster's (in its network
        namespace, logging to NAME.log in the cluster's directory); stop()
        ends it, in reverse order of starting. Returns the Popen."""
        return self._spawn(name, argv, env=env, preexec=preexec)

    def wait(self, what, predicate, timeout=None, interval=0.2):
        """Polls predicate() until true; fails early when a component exits."""
        self._wait(what, predicate, timeout=timeout, interval=interval)

    def diagnostics(self, tail=40):
        """Recent log lines of every component and whether it is still running."""
        out = []
        for name, path in self.logs.items():
            proc = self.procs.get(name)
            state = "running" if proc and proc.poll() is None else f"exited {proc.returncode if proc else '?'}"
            try:
                lines = path.read_text(errors="replace").splitlines()[-tail:]
            except OSError:
                lines = []
            out.append(f"--- {name} ({state}): {path}\n" + "\n".join(lines))
        return "\n".join(out)

    # -- internals -------------------------------------------------------

    def _make_pki(self):
        pki = self.pki_dir = self.dir / "pki"
        pki.mkdir()
        ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
        self._key(ca_key)
        c = self._cnf("ca", [("CN", "slowpath-e2e-ca")],
                      "basicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign,digitalSignature\n"
                      "subjectKeyIdentifier = hash\n")
        _run(["openssl", "req", "-x509", "-new", "-key", str(ca_key), "-days", "3", "-config", str(c),
              "-extensions", "ext", "-out", str(ca_crt)])
        self.ca_file, self.ca_key = ca_crt, ca_key
        sans = "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc," \
               "DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1"
        if self.node_ip:
            sans += f",IP:{self.node_ip}"
        self.pki = {
            "apiserver": self.issue_cert("apiserver", [("CN", "kube-apiserver")],
                                         f"extendedKeyUsage = serverAuth\nsubjectAltName = {sans}\n"),
            "admin": self.issue_client_cert("admin", "slowpath-e2e-admin", "system:masters"),
            "controller-manager": self.issue_client_cert("controller-manager", "system:kube-controller-manager"),
            "scheduler": self.issue_client_cert("scheduler", "system:kube-scheduler"),
            # kubectl logs/exec through the kubelets (bootstrap RBAC: system:masters)
            "apiserver-kubelet-client": self.issue_client_cert("apiserver-kubelet-client",
                                                               "kube-apiserver-kubelet-client", "system:masters"),
        }
        if self.node_names:
            self.pki["kwok"] = self.issue_client_cert("kwok", "kwok-controller", "system:masters")
        # ServiceAccount token signing key pair (apiserver signs, verifies; the
        # controller-manager's legacy token controller signs too).
        self.sa_key, self.sa_pub = pki / "sa.key", pki / "sa.pub"
        self._key(self.sa_key)
        _run(["openssl", "pkey", "-in", str(self.sa_key), "-pubout", "-out", str(self.sa_pub)])

        self.kubeconfig = self.dir / "kubeconfig"
        self._write_kubeconfig(self.kubeconfig, "admin", self._cert_user("admin"))
        for name in ("controller-manager", "scheduler", "kwok"):
            if name in self.pki:
                self._write_kubeconfig(self.dir / f"kubeconfig-{name}", name, self._cert_user(name))

    @staticmethod
    def _key(path):  # ECDSA P-256: instant to generate, accepted everywhere here
        _run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)])

    def _cnf(self, name, dn, ext):
        path = self.pki_dir / f"{name}.cnf"
        path.write_text(
            "[req]\ndistinguished_name = dn\nprompt = no\n"
            "[dn]\n" + "".join(f"{k} = {v}\n" for k, v in dn) + "[ext]\n" + ext
        )
        return path

    def issue_cert(self, name, dn, ext):
        """A key and a certificate signed by the cluster's CA: (crt, key) paths.
        dn: [(field, value)], ext: extra openssl extension lines."""
        pki = self.pki_dir
        k, csr, crt = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.crt"
        self._key(k)
        c = self._cnf(name, dn, "basicConstraints = critical,CA:FALSE\n"
                      "keyUsage = critical,digitalSignature,keyEncipherment\n"
                      "authorityKeyIdentifier = keyid\n" + ext)
        _run(["openssl", "req", "-new", "-key", str(k), "-config", str(c), "-out", str(csr)])
        _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(self.ca_file), "-CAkey", str(self.ca_key),
              "-CAcreateserial", "-days", "2", "-extfile", str(c), "-extensions", "ext", "-out", str(crt)])
        return crt, k

    def issue_client_cert(self, name, cn, org=None):
        """A client certificate for user `cn` in group `org`: (crt, key)."""
        dn = ([("O", org)] if org else []) + [("CN", cn)]
        return self.issue_cert(name, dn, "extendedKeyUsage = clientAuth\n")

    def write_client_kubeconfig(self, name, cn, org=None):
        """A kubeconfig for a new client certificate (a node's kubelet, kube-proxy): its path."""
        path = self.dir / f"kubeconfig-{name}"
        self.pki[name] = self.issue_client_cert(name, cn, org)
        self._write_kubeconfig(path, name, self._cert_user(name))
        return path

    def _cert_user(self, name):
        crt, key = self.pki[name]
        return {"client-certificate": str(crt), "client-key": str(key)}

    def _write_kubeconfig(self, path, user, credentials, namespace="default"):
        path.write_text(json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "slowpath-e2e", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {
                "cluster": "slowpath-e2e", "user": user, "namespace": namespace}}],
            "current-context": user,
        }, indent=2))
        path.chmod(0o600)

    def _spawn(self, name, argv, env=None, preexec=None):
        log = self.dir / f"{name}.log"
        self.logs[name] = log
        netns = self.netns

        def before_exec():
            _die_with_parent()
            if netns:
                netns.enter()
            if preexec:
                preexec()

        with open(log, "wb") as f:
            # New session: a Ctrl-C aimed at pytest does not hit the components
            # first; stop() ends them in order.
            self.procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                cwd=self.dir, start_new_session=True, preexec_fn=before_exec, env=env,
            )
        return self.procs[name]

    def _wait(self, what, predicate, timeout=None, interval=0.2):
        deadline = time.monotonic() + (timeout or self.start_timeout)
        last = None
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}\n"
                                       + self.diagnostics())
            try:
                if predicate():
                    return
            except Exception as e:  # not up yet
                last = e
            time.sleep(interval)
        raise TimeoutError(f"timed out waiting for {what} (last: {last})\n" + self.diagnostics())

    def _get(self, url, context):
        def get():
            with urllib.request.urlopen(url, context=context, timeout=5) as r:
                return r.status, r.read().decode()

        return self.netns.call(get) if self.netns else get()

    def _start_etcd(self, client, peer):
        url_c, url_p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._spawn("etcd", [
            str(self.bin / "etcd"),
            "--name=e2e",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={url_c}",          # plain HTTP, loopback only
            f"--advertise-client-urls={url_c}",
            f"--listen-peer-urls={url_p}",            # single member: peer port unused but required
            f"--initial-advertise-peer-urls={url_p}",
            f"--initial-cluster=e2e={url_p}",
            "--unsafe-no-fsync",                      # throw-away data: skip fsync (faster)
            "--log-level=warn",
        ])
        self._wait("etcd /health", lambda: '"health":"true"' in self._get(url_c + "/health", None)[1])
        self.etcd_url = url_c

    def _start_apiserver(self, port, etcd_client):
        crt, key = self.pki["apiserver"]
        if self.node_ip:  # a real node: pods reach the API server through the kubernetes Service
            kubelet_crt, kubelet_key = self.pki["apiserver-kubelet-client"]
            where = ["--bind-address=0.0.0.0",        # the node's namespace only (loopback, node_ip)
                     f"--advertise-address={self.node_ip}",
                     "--authorization-mode=Node,RBAC",  # kubelets as real clusters authorize them
                     f"--kubelet-client-certificate={kubelet_crt}",
                     f"--kubelet-client-key={kubelet_key}",
                     # exec, attach, port-forward and logs reach the kubelet at its
                     # node IP, as kubeadm's clusters do: the node's name resolves
                     # nowhere in the test's namespace
                     "--kubelet-preferred-address-types=InternalIP,Hostname"]
        else:
            where = ["--bind-address=127.0.0.1",      # loopback only
                     "--advertise-address=127.0.0.1",
                     "--endpoint-reconciler-type=none",  # no Endpoints for the kubernetes Service (loopback IP)
                     "--authorization-mode=RBAC"]     # RBAC only: the chart's ClusterRole is what counts
        self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            f"--secure-port={port}",
            *where,
            f"--tls-cert-file={crt}",                 # serving cert: SAN 127.0.0.1, localhost
            f"--tls-private-key-file={key}",
            f"--cert-dir={self.dir / 'apiserver'}",
            f"--client-ca-file={self.ca_file}",       # client certs (admin, components)
            f"--service-account-issuer={SA_ISSUER}",  # TokenRequest (kubectl create token)
            f"--service-account-key-file={self.sa_pub}",
            f"--service-account-signing-key-file={self.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",                # the agent's DaemonSet may run privileged
            "--profiling=false",
        ])
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(*map(str, self.pki["admin"]))
        self._wait("kube-apiserver /readyz", lambda: self._get(self.server + "/readyz", ctx)[0] == 200)

    def _component_ctx(self):
        ctx = ssl.create_default_context()  # components serve self-signed certs (--cert-dir)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _start_controller_manager(self, port):
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"),
            f"--kubeconfig={self.dir / 'kubeconfig-controller-manager'}",
            "--bind-address=127.0.0.1",               # healthz/metrics, loopback only
            f"--secure-port={port}",
            f"--cert-dir={self.dir / 'controller-manager'}",  # self-signed serving cert
            "--leader-elect=false",                   # single instance: start at once
            "--use-service-account-credentials=true",  # each controller as its own SA (as kubeadm)
            f"--service-account-private-key-file={self.sa_key}",
            f"--root-ca-file={self.ca_file}",         # published as kube-root-ca.crt ConfigMaps
        ])
        self.kcm_port = port

    def _start_scheduler(self, port):
        self._spawn("kube-scheduler", [
            str(self.bin / "kube-scheduler"),
            f"--kubeconfig={self.dir / 'kubeconfig-scheduler'}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
        ])
        self.sched_port = port

    def _start_kwok(self):
        if not self.stages.exists():
            raise RuntimeError(f"{self.stages} missing: run {TOOLS_SCRIPT}")
        self._spawn("kwok", [
            str(self.bin / "kwok"),
            f"--kubeconfig={self.dir / 'kubeconfig-kwok'}",
            f"--config={self.stages}",                # Stage objects: node/pod lifecycle to fake
            "--manage-all-nodes=false",               # only nodes annotated as fake:
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",       # heartbeats through Leases, like a kubelet
            f"--cidr={POD_CIDR}",                     # fake pod IPs
            "--node-ip=127.0.0.1",
        ])

    def _create_nodes(self):
        nodes = []
        for name in self.node_names:
            nodes.append({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_ANNOTATION: "fake"},
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                },
                # kwok's node-initialize stage fills in the rest of the status.
                "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                           "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
            })
        # Plain create: a Node's status is kept on create only.
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})
        self.kubectl("create", "-f", "-", input=doc)

        def ready():
            items = self.kubectl_json("get", "nodes")["items"]
            ok = {
                n["metadata"]["name"]
                for n in items
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
                and not any(t["key"].startswith("node.kubernetes.io/") for t in n.get("spec", {}).get("taints", []))
            }
            return ok >= set(self.node_names)

        self._wait("kwok nodes Ready and untainted", ready)

    def _wait_controllers(self):
        ctx = self._component_ctx()
        for name, port in (("kube-controller-manager", self.kcm_port), ("kube-scheduler", self.sched_port)):
            self._wait(f"{name} /healthz",
                       lambda port=port: self._get(f"https://127.0.0.1:{port}/healthz", ctx)[0] == 200)
        # The ServiceAccount controller is running once "default" exists.
        self._wait("ServiceAccount default/default",
                   lambda: self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0)
