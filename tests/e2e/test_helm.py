"""The Helm chart (deploy/helm/slowpath) and the plain manifests rendered from
it (deploy/kubernetes/slowpath.yaml), checked without a cluster:

- `helm lint --strict` with the default values and with every switch;
- every rendered object against the Kubernetes API's JSON schemas, strictly
  (unknown fields are errors), for the oldest, a middle and the newest
  bundled Kubernetes version, by two validators (kubeconform and
  kubernetes-validate); the Prometheus operator's objects against its Go API
  types; negative controls prove each validator rejects a bad object;
- the committed plain manifests equal a fresh render;
- what the agent needs is really there: host PID namespace, the capabilities
  each value adds (or privileged when asked), probes, mounts, RBAC;
- (the alert rules are tested in test_alerts.py);
- the real agent, given the DaemonSet's environment as uid 65534 with its
  capabilities and no_new_privs, attaches and serves.

The tools come from tests/deploy/install-tools.sh (cached outside the repo,
built by scripts/setup.sh --test). Without them the tests fail naming that
command.
"""

import copy
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from as_shipped import container_exec, image_binary, pod_prefix
from helpers.signals import agent_path, declarations
from helpers.agent import Agent
from helpers.tools import tools_cache

pytestmark = pytest.mark.tier("full")

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "slowpath"
PLAIN = REPO / "deploy" / "kubernetes" / "slowpath.yaml"
RENDER = REPO / "deploy" / "render.sh"

NAMESPACE = "slowpath"
# Oldest bundled schema (the chart's kubeVersion floor), a middle one, newest.
K8S_VERSIONS = ["1.25.0", "1.31.0", "1.37.0"]
# Custom resources: no schema in the Kubernetes bundles, checked by sp-crdcheck.
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

# Values exercising every template branch. "custom" flips the remaining
# switches and fills every list/map value.
VALUE_SETS = {
    "default": {},
    "privileged": {"privileged": True},
    # findings without call sites, the memlock limit not lifted: the least
    # privileges the chart grants
    "no-call-sites": {"agent": {"findings": {"callSites": False}, "liftMemlockLimit": False}},
    "monitors": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    },
    "custom": {
        "image": {"repository": "registry.example.com/slowpath", "digest": "sha256:" + "0" * 64},
        "imagePullSecrets": [{"name": "regcred"}],
        "seccompProfile": {"type": "Unconfined"},
        "agent": {"logLevel": "debug", "pidLabel": True, "maxProcesses": 65536, "debugCallsites": True,
                  "collectors": {"timer": False, "memory": False}},
        "kubernetes": {"enabled": False},
        "extraArgs": ["--bpf.attach-type=raw-tp"],
        "extraEnv": [{"name": "SLOWPATH_BPF_RINGBUF_BYTES", "value": "4194304"}],
        "extraVolumes": [{"name": "btf", "hostPath": {"path": "/var/lib/btf", "type": "Directory"}}],
        "extraVolumeMounts": [{"name": "btf", "mountPath": "/btf", "readOnly": True}],
        "serviceAccount": {"create": False, "name": "existing"},
        "rbac": {"create": False},
        "nodeSelector": {"kubernetes.io/os": "linux", "pool": "general"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "priorityClassName": "",
        "podAnnotations": {"example.com/a": "b"},
        "podLabels": {"team": "perf"},
        "updateStrategy": {"maxUnavailable": 1},
        "service": {"port": 9100, "headless": False, "annotations": {"example.com/c": "d"}},
        "serviceMonitor": {"enabled": True, "relabelings": [
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}],
            "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "process_.*", "action": "drop"}]},
        "prometheusRule": {"enabled": True, "additionalLabels": {"severity": "info", "team": "perf"}},
        "fullnameOverride": "agent",
    },
    "webconfig": {
        "webConfig": {"secretName": "slowpath-web", "tls": True},
        "serviceMonitor": {"enabled": True, "tlsConfig": {"ca": {"secret": {"name": "slowpath-ca", "key": "ca.crt"}},
                                                          "serverName": "slowpath"},
                           "basicAuth": {"username": {"name": "scrape", "key": "username"},
                                         "password": {"name": "scrape", "key": "password"}}},
        "podMonitor": {"enabled": True},
    },
    # The dashboards for Grafana's sidecar, in Grafana's namespace, in a folder.
    "dashboards": {"grafanaDashboards": {"enabled": True, "namespace": "monitoring",
                                         "annotations": {"grafana_folder": "slowpath"}}},
    "mtls": {
        "webConfig": {"secretName": "slowpath-web", "configKey": "config.yml", "tls": True,
                      "clientCertificateRequired": True},
        "extraContainers": [{"name": "sidecar", "image": "registry.example.com/sidecar:1"}],
    },
}


# ---------------------------------------------------------------- tools


class Tools:
    def __init__(self, cache):
        self.cache = Path(cache)
        self.helm = self.cache / "bin" / "helm"
        self.kubeconform = self.cache / "bin" / "kubeconform"
        self.crdcheck = self.cache / "bin" / "sp-crdcheck"
        self.kubernetes_validate = self.cache / "venv" / "bin" / "kubernetes-validate"
        self.schemas = self.cache / "schemas"


@pytest.fixture(scope="session")
def tools():
    t = Tools(tools_cache())
    for tool in (t.helm, t.kubeconform, t.crdcheck, t.kubernetes_validate):
        assert tool.exists(), f"install-tools.sh did not provide {tool}"
    return t


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


def values_file(tmp_path, name):
    path = tmp_path / f"values-{name}.yaml"
    path.write_text(yaml.safe_dump(VALUE_SETS[name]))
    return path


def render_text(tools, tmp_path, name, *extra):
    res = run([tools.helm, "template", "slowpath", CHART, "--namespace", NAMESPACE,
               "-f", values_file(tmp_path, name), *extra])
    assert res.returncode == 0, res.stderr
    return res.stdout


def docs_of(text):
    return [d for d in yaml.safe_load_all(text) if d]


def render(tools, tmp_path, name="default"):
    return docs_of(render_text(tools, tmp_path, name))


def only(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def container_of(docs):
    ds = only(docs, "DaemonSet")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container):
    return {e["name"]: e for e in container["env"]}


# ---------------------------------------------------------------- lint


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_strict(tools, tmp_path, name):
    res = run([tools.helm, "lint", "--strict", CHART, "--namespace", NAMESPACE,
               "-f", values_file(tmp_path, name)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 chart(s) failed" in res.stdout
    assert "[WARNING]" not in res.stdout and "[ERROR]" not in res.stdout, res.stdout


# ---------------------------------------------------------------- schemas


def manifests(tools, tmp_path, name, version):
    """A file of the objects to validate: a render of value set `name` for
    Kubernetes `version`, or the committed plain manifests for "plain"."""
    if name == "plain":
        return PLAIN, docs_of(PLAIN.read_text())
    text = render_text(tools, tmp_path, name, "--kube-version", version)
    path = tmp_path / f"{name}-{version}.yaml"
    path.write_text(text)
    return path, docs_of(text)


def kubeconform(tools, path, version):
    location = str(tools.schemas) + \
        "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"
    res = run([tools.kubeconform, "-strict", "-output", "json", "-verbose",
               "-kubernetes-version", version, "-schema-location", location,
               "-skip", ",".join(sorted(CRD_KINDS)), path])
    return res, json.loads(res.stdout)["resources"]


def kubernetes_validate(tools, tmp_path, docs, path, version):
    """kubernetes-validate over the non-custom objects only (it merely warns
    about kinds it has no schema for), written beside the test's other files
    (never beside the repository's manifest)."""
    core = tmp_path / f"{path.stem}-{version}.core.yaml"
    core.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] not in CRD_KINDS]))
    return run([tools.kubernetes_validate, "--strict", "-k", version, core])


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", ["plain", *VALUE_SETS])
def test_objects_valid_kubeconform(tools, tmp_path, name, version):
    path, docs = manifests(tools, tmp_path, name, version)
    res, results = kubeconform(tools, path, version)
    assert res.returncode == 0, res.stdout + res.stderr
    statuses = {(r["kind"], r["name"]): r["status"] for r in results}
    # Every object was seen, each Kubernetes one valid against a schema (an
    # object without a schema would be "statusError", not silently skipped).
    assert len(results) == len(docs)
    for (kind, obj), status in statuses.items():
        want = "statusSkipped" if kind in CRD_KINDS else "statusValid"
        assert status == want, f"{kind}/{obj}: {status}"


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", ["plain", *VALUE_SETS])
def test_objects_valid_kubernetes_validate(tools, tmp_path, name, version):
    path, docs = manifests(tools, tmp_path, name, version)
    res = kubernetes_validate(tools, tmp_path, docs, path, version)
    assert res.returncode == 0, res.stdout + res.stderr
    passed = [l for l in res.stdout.splitlines() if " passed for resource " in l]
    assert len(passed) == sum(d["kind"] not in CRD_KINDS for d in docs), res.stdout
    assert "WARN" not in res.stdout, res.stdout


@pytest.mark.parametrize("name", ["monitors", "custom", "webconfig"])
def test_custom_resources_strict(tools, tmp_path, name):
    text = render_text(tools, tmp_path, name)
    path = tmp_path / "rendered.yaml"
    path.write_text(text)
    res = run([tools.crdcheck, path])
    assert res.returncode == 0, res.stdout + res.stderr
    checked = {l.split()[2].split("/")[0] for l in res.stdout.splitlines() if l.startswith("ok ")}
    rendered = {d["kind"] for d in docs_of(text)} & CRD_KINDS
    assert rendered and checked == rendered, res.stdout


def test_validators_reject_bad_objects(tools, tmp_path):
    """Negative controls: a misspelt field, a field at the wrong level and a
    wrong type are each rejected, so the passes above mean something."""
    docs = render(tools, tmp_path, "monitors")
    ds = only(docs, "DaemonSet")
    bad = {
        "unknown field": lambda d: d["spec"]["template"]["spec"].__setitem__("hostPid", True),
        "misplaced field": lambda d: d["spec"].__setitem__("hostPID", True),
        "wrong type": lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0]
        .__setitem__("containerPort", "9891"),
    }
    for what, spoil in bad.items():
        obj = copy.deepcopy(ds)
        spoil(obj)
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(obj))
        for version in (K8S_VERSIONS[0], K8S_VERSIONS[-1]):
            res, results = kubeconform(tools, path, version)
            assert res.returncode != 0 and results[0]["status"] == "statusInvalid", (what, results)
            res = kubernetes_validate(tools, tmp_path, [obj], path, version)
            assert res.returncode != 0 and "did not validate" in res.stdout, (what, res.stdout)
    for kind, spoil in {
        "ServiceMonitor": lambda d: d["spec"]["endpoints"][0].__setitem__("scrapeInterval", "30s"),
        "PodMonitor": lambda d: d["spec"].__setitem__("endpoints", d["spec"]["podMetricsEndpoints"]),
        "PrometheusRule": lambda d: d["spec"]["groups"][0]["rules"][0].__setitem__("labels", ["warning"]),
    }.items():
        obj = copy.deepcopy(only(docs, kind))
        spoil(obj)
        path = tmp_path / "bad-cr.yaml"
        path.write_text(yaml.safe_dump(obj))
        res = run([tools.crdcheck, path])
        assert res.returncode == 1 and res.stdout.startswith("FAIL "), (kind, res.stdout)


# ---------------------------------------------------------------- plain manifests


def test_plain_manifests_equal_a_fresh_render(tools):
    res = run([RENDER, "-"], env={**os.environ, "HELM": str(tools.helm)})
    assert res.returncode == 0, res.stderr
    assert res.stdout == PLAIN.read_text(), \
        "deploy/kubernetes/slowpath.yaml is stale: run deploy/render.sh"


def test_plain_manifests_create_a_privileged_namespace():
    docs = docs_of(PLAIN.read_text())
    ns = docs[0]
    assert (ns["kind"], ns["metadata"]["name"]) == ("Namespace", NAMESPACE)
    # hostPID and hostPath are admitted only at the "privileged" level.
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for d in docs[1:]:
        if d["kind"] not in cluster_scoped:
            assert d["metadata"]["namespace"] == NAMESPACE, d["kind"]


# ---------------------------------------------------------------- structure


def test_daemonset_least_privilege(tools, tmp_path):
    docs = render(tools, tmp_path)
    ds = only(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = container_of(docs)
    sc = c["securityContext"]

    assert pod["hostPID"] is True
    assert not pod.get("hostNetwork") and not pod.get("hostIPC")
    # BPF and PERFMON to count; SYS_RESOURCE to lift the locked-memory limit
    # before 5.11 (agent.liftMemlockLimit, on); the three that symbolize
    # other processes' stacks for the findings' call sites
    # (agent.findings.callSites, on)
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "DAC_READ_SEARCH",
                                                           "CHECKPOINT_RESTORE"]}
    minimal = container_of(render(tools, tmp_path, "no-call-sites"))["securityContext"]
    assert minimal["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}
    assert not sc.get("privileged")
    assert sc["runAsUser"] == 65534 and sc["runAsGroup"] == 65534
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert "securityContext" not in pod or "runAsUser" not in pod["securityContext"]


def test_daemonset_privileged_switch(tools, tmp_path):
    c = container_of(render(tools, tmp_path, "privileged"))
    sc = c["securityContext"]
    assert sc["privileged"] is True
    assert "capabilities" not in sc
    # Kubernetes rejects privileged with allowPrivilegeEscalation: false.
    assert sc.get("allowPrivilegeEscalation", True) is True
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["readOnlyRootFilesystem"] is True


def test_daemonset_environment_probes_and_scheduling(tools, tmp_path):
    docs = render(tools, tmp_path)
    ds = only(docs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = container_of(docs)
    env = env_of(c)

    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["SLOWPATH_KUBERNETES_ENABLED"]["value"] == "true"
    assert env["SLOWPATH_PATH_SYSFS"]["value"] == "/host/sys"
    assert env["SLOWPATH_BPF_BTF_PATH"]["value"] == "/host/sys/kernel/btf/vmlinux"
    assert env["SLOWPATH_WEB_LISTEN_ADDRESS"]["value"] == ":9891"
    assert "SLOWPATH_METRICS_PID_LABEL" not in env
    assert "SLOWPATH_DEBUG_CALLSITES" not in env  # off by default
    assert not [name for name in env if name.startswith("SLOWPATH_COLLECTOR_")]  # all on
    assert pod["automountServiceAccountToken"] is True  # the pod watch needs the token
    assert "args" not in c  # flags an older agent does not know would be fatal

    assert c["ports"] == [{"name": "metrics", "containerPort": 9891, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}

    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]

    res = c["resources"]
    assert res["requests"] == {"cpu": "10m", "memory": "64Mi"}
    assert res["limits"] == {"cpu": "200m", "memory": "160Mi"}


def test_daemonset_mounts_only_what_the_agent_reads(tools, tmp_path):
    docs = render(tools, tmp_path)
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    c = container_of(docs)
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert host == {"sys": "/sys", "cgroup": "/sys/fs/cgroup"}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert {p: host[m["name"]] for p, m in mounts.items()} == {
        "/host/sys": "/sys",
        "/sys/fs/cgroup": "/sys/fs/cgroup",
    }
    assert all(m.get("readOnly") is True for m in mounts.values())


def test_custom_values_reach_the_daemonset(tools, tmp_path):
    docs = render(tools, tmp_path, "custom")
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    c = container_of(docs)
    env = env_of(c)
    assert c["image"] == "registry.example.com/slowpath@sha256:" + "0" * 64
    assert c["args"] == ["--bpf.attach-type=raw-tp"]
    assert env["SLOWPATH_METRICS_PID_LABEL"]["value"] == "true"
    assert env["SLOWPATH_DEBUG_CALLSITES"]["value"] == "true"
    # symbolizing other processes' stacks
    assert c["securityContext"]["capabilities"]["add"] == ["BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE",
                                                           "DAC_READ_SEARCH", "CHECKPOINT_RESTORE"]
    assert env["SLOWPATH_BPF_MAX_PROCESSES"]["value"] == "65536"
    assert env["SLOWPATH_KUBERNETES_ENABLED"]["value"] == "false"
    assert env["SLOWPATH_WEB_LISTEN_ADDRESS"]["value"] == ":9100"
    assert env["SLOWPATH_BPF_RINGBUF_BYTES"]["value"] == "4194304"
    # only the collectors switched off are passed
    collectors = {name: e["value"] for name, e in env.items() if name.startswith("SLOWPATH_COLLECTOR_")}
    assert collectors == {"SLOWPATH_COLLECTOR_TIMER": "false", "SLOWPATH_COLLECTOR_MEMORY": "false"}
    assert c["ports"][0]["containerPort"] == 9100
    assert c["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "existing"
    assert "priorityClassName" not in pod
    assert {d["kind"] for d in docs}.isdisjoint({"ServiceAccount", "ClusterRole", "ClusterRoleBinding"})
    svc = only(docs, "Service")
    assert svc["spec"].get("clusterIP") != "None" and svc["spec"]["ports"][0]["port"] == 9100


def test_the_chart_and_the_unit_name_every_collector_the_agent_declares(tools, tmp_path):
    """The collectors of values.yaml (each with its summary as comment), the
    names the DaemonSet accepts and says in its error, and the switches of
    the systemd unit's defaults file are the signals the agent declares
    (`slowpath signals`), in its order; each one switched off in values
    reaches the pod as its environment variable."""
    decls = declarations()
    names = [d["name"] for d in decls]
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)["agent"]["collectors"]
    assert list(values) == names
    for d in decls:
        assert f"    # {d['summary']}\n    {d['name']}: true\n" in text, d["name"]
    res = run([tools.helm, "template", "slowpath", CHART, "--namespace", NAMESPACE,
               "--set", "agent.collectors.nosuch=false"])
    said = re.search(r"agent.collectors.nosuch: no such collector \(([^)]*)\)", res.stderr)
    assert res.returncode != 0 and said, res.stderr
    assert said[1].split(", ") == names
    default = (REPO / "deploy" / "systemd" / "slowpath.default").read_text()
    assert re.findall(r"^#?SLOWPATH_COLLECTOR_(\w+)=", default, re.M) == [n.upper() for n in names]
    off = [arg for n in names for arg in ("--set", f"agent.collectors.{n}=false")]
    env = env_of(container_of(docs_of(render_text(tools, tmp_path, "default", *off))))
    assert {f"SLOWPATH_COLLECTOR_{n.upper()}" for n in names} <= set(env), env


def test_the_signal_files_are_what_the_agent_declares():
    """deploy/helm/slowpath/files/signals.json (the chart's collectors,
    recorded rates and estimated-CPU terms) and the generated collector
    blocks of values.yaml and the systemd defaults are what deploy/signals.py
    makes of `slowpath signals` now: a signal added, renamed or given another
    recorded rate fails here until deploy/render.sh runs."""
    res = run(["python3", REPO / "deploy" / "signals.py", "--check", "--bin", agent_path()])
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("collectors, error", [
    ({"thp": False}, "agent.collectors.thp: no such collector"),
    ({"timer": "false"}, "agent.collectors.timer: true or false, not false"),
])
def test_unknown_or_misspelt_collectors_are_refused(tools, tmp_path, collectors, error):
    path = tmp_path / "values-collectors.yaml"
    path.write_text(yaml.safe_dump({"agent": {"collectors": collectors}}))
    res = run([tools.helm, "template", "slowpath", CHART, "--namespace", NAMESPACE, "-f", path])
    assert res.returncode != 0 and error in res.stderr, res.stderr


def test_web_config_secret_is_mounted_and_probes_and_monitors_follow_it(tools, tmp_path):
    docs = render(tools, tmp_path, "webconfig")
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    c = container_of(docs)
    assert env_of(c)["SLOWPATH_WEB_CONFIG_FILE"]["value"] == "/etc/slowpath/web/web.yml"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "web-config"]
    assert volume["secret"]["secretName"] == "slowpath-web"
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "web-config"]
    assert mount == {"name": "web-config", "mountPath": "/etc/slowpath/web", "readOnly": True}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", "scheme": "HTTPS"}
    (sm_endpoint,) = only(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert sm_endpoint["scheme"] == "https"
    assert sm_endpoint["tlsConfig"]["serverName"] == "slowpath"
    assert sm_endpoint["basicAuth"]["password"] == {"name": "scrape", "key": "password"}
    (pm_endpoint,) = only(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert pm_endpoint["scheme"] == "https" and "basicAuth" not in pm_endpoint


def test_required_client_certificates_make_tcp_probes(tools, tmp_path):
    docs = render(tools, tmp_path, "mtls")
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    agent, sidecar = pod["containers"]
    assert sidecar["name"] == "sidecar"
    assert env_of(agent)["SLOWPATH_WEB_CONFIG_FILE"]["value"] == "/etc/slowpath/web/config.yml"
    assert agent["livenessProbe"]["tcpSocket"] == {"port": "metrics"}
    assert "httpGet" not in agent["readinessProbe"]


def readme_rbac_proxy_values():
    """The kube-rbac-proxy values of docs/security.md, as written there."""
    text = (REPO / "docs" / "security.md").read_text()
    after = text[text.index("**kube-rbac-proxy instead.**"):]
    block = after[after.index("```yaml\n") + len("```yaml\n"):]
    return yaml.safe_load(block[:block.index("```")])


def test_readme_kube_rbac_proxy_values_render(tools, tmp_path):
    path = tmp_path / "values-rbac-proxy.yaml"
    path.write_text(yaml.safe_dump(readme_rbac_proxy_values()))
    res = run([tools.helm, "template", "slowpath", CHART, "--namespace", NAMESPACE, "-f", path])
    assert res.returncode == 0, res.stderr
    docs = docs_of(res.stdout)
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    agent, proxy = pod["containers"]
    assert agent["args"] == ["--web.listen-address=127.0.0.1:9892"]
    assert "--upstream=http://127.0.0.1:9892/" in proxy["args"]
    assert agent["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    rules = only(docs, "ClusterRole")["rules"]
    assert {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]} in rules
    assert {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]} in rules
    (endpoint,) = only(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    manifest = tmp_path / "rbac-proxy.yaml"
    manifest.write_text(res.stdout)
    for version in K8S_VERSIONS:
        res, results = kubeconform(tools, manifest, version)
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(results) == len(docs)


def test_default_render_is_plain_http(tools, tmp_path):
    docs = render(tools, tmp_path)
    c = container_of(docs)
    assert "SLOWPATH_WEB_CONFIG_FILE" not in env_of(c)
    assert all(m["name"] != "web-config" for m in c["volumeMounts"])


def test_rbac_reads_pods_only(tools, tmp_path):
    docs = render(tools, tmp_path)
    role = only(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = only(docs, "ClusterRoleBinding")
    sa = only(docs, "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")]


def test_default_render_has_no_monitoring_objects(tools, tmp_path):
    kinds = sorted(d["kind"] for d in render(tools, tmp_path))
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service", "ServiceAccount"]


def test_service_and_monitors_select_the_agent(tools, tmp_path):
    docs = render(tools, tmp_path, "monitors")
    ds = only(docs, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in container_of(docs)["ports"]}

    def matches(selector, labels):
        return all(labels.get(k) == v for k, v in selector.items())

    assert matches(ds["spec"]["selector"]["matchLabels"], pod_labels)
    svc = only(docs, "Service")
    assert svc["spec"]["clusterIP"] == "None"
    assert matches(svc["spec"]["selector"], pod_labels)
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9891, "targetPort": "metrics", "protocol": "TCP"}]

    sm = only(docs, "ServiceMonitor")
    assert matches(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"

    pm = only(docs, "PodMonitor")
    assert matches(pm["spec"]["selector"]["matchLabels"], pod_labels)
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= port_names
    for endpoint in sm["spec"]["endpoints"] + pm["spec"]["podMetricsEndpoints"]:
        assert endpoint["path"] == "/metrics" and endpoint["interval"] == "30s"
        # The workload's namespace, pod and container the agent exports win
        # over the target's (the agent pod's): not exported_namespace, ...
        assert endpoint["honorLabels"] is True
        assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance",
                "action": "replace"} in endpoint["relabelings"]


def test_chart_dashboards_are_the_dashboards():
    """The chart's copies (files/dashboards/, which Helm can read) are
    byte for byte dashboards/*.json (which test_dashboards.py checks against
    a fresh generation): dashboards/generate.sh writes both."""
    dashboards = {p.name: p.read_bytes() for p in (REPO / "dashboards").glob("*.json")}
    copies = {p.name: p.read_bytes() for p in (CHART / "files" / "dashboards").glob("*.json")}
    assert dashboards, "no dashboards/*.json"
    assert sorted(copies) == sorted(dashboards), "run dashboards/generate.sh"
    for name in dashboards:
        assert copies[name] == dashboards[name], f"{name}: run dashboards/generate.sh"


def test_grafana_dashboards_are_configmaps_the_sidecar_loads(tools, tmp_path):
    """grafanaDashboards.enabled: one ConfigMap per dashboard, in the
    namespace asked for, labelled as the sidecar selects (grafana_dashboard:
    "1"), annotated as asked, each holding one dashboard's JSON under its
    file name, unchanged."""
    docs = render(tools, tmp_path, "dashboards")
    maps = [d for d in docs if d["kind"] == "ConfigMap"]
    files = {p.name: json.loads(p.read_text()) for p in (REPO / "dashboards").glob("*.json")}
    assert len(maps) == len(files) == 3
    loaded = {}
    for cm in maps:
        meta = cm["metadata"]
        assert meta["namespace"] == "monitoring"
        assert meta["labels"]["grafana_dashboard"] == "1"
        assert meta["labels"]["app.kubernetes.io/instance"] == "slowpath"
        assert meta["annotations"] == {"grafana_folder": "slowpath"}
        ((name, text),) = cm["data"].items()
        assert meta["name"] == "slowpath-dashboard-" + name.removeprefix("slowpath-").removesuffix(".json")
        loaded[name] = json.loads(text)
    assert loaded == files
    # Off by default (test_default_render_has_no_monitoring_objects: no
    # ConfigMap); in the release's namespace when none is given.
    docs = render_text(tools, tmp_path, "default", "--set", "grafanaDashboards.enabled=true")
    assert {d["metadata"]["namespace"] for d in docs_of(docs) if d["kind"] == "ConfigMap"} == {NAMESPACE}


# ---------------------------------------------------------------- alert rules
# The chart's PrometheusRule is rendered to deploy/prometheus/slowpath-rules.yaml
# and tested there: tests/e2e/test_alerts.py.


# ---------------------------------------------------------------- the real agent


def test_agent_accepts_the_daemonset_environment(tools, tmp_path, agent_bin, monkeypatch):
    """The real agent with the DaemonSet's environment, the container's paths
    mapped back to the host paths its volumes mount, as uid 65534 with the
    default securityContext's capabilities (those this host can give) and
    no_new_privs, attaches, serves and reads the node's settings there."""
    docs = render(tools, tmp_path)
    pod = only(docs, "DaemonSet")["spec"]["template"]["spec"]
    c = container_of(docs)
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    to_host = {m["mountPath"]: host[m["name"]] for m in c["volumeMounts"]}

    def host_path(value):
        for inside, outside in sorted(to_host.items(), key=lambda kv: -len(kv[0])):
            if value == inside or value.startswith(inside + "/"):
                return outside + value[len(inside):]
        return value

    for e in c["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], host_path(e["value"]))
    monkeypatch.setenv("NODE_NAME", "test-node")  # the downward API's value
    # No API server here: the Kubernetes watch (when the agent has it) stays off.
    monkeypatch.setenv("SLOWPATH_KUBERNETES_ENABLED", "false")
    assert os.environ["SLOWPATH_PATH_SYSFS"] == "/sys"

    # Started as runc starts the pod: uid 65534, the chart's capabilities
    # permitted (none ambient), no_new_privs, the image's file capabilities.
    prefix = pod_prefix(container_exec())
    # The listen address is the test's own port (a flag wins over the
    # environment); the chart's ":9891" is checked above.
    with image_binary(agent_bin) as binary:
        agent_in_pod(binary, prefix, tmp_path)


def agent_in_pod(binary, prefix, tmp_path):
    agent = Agent(binary, [], tmp_path / "agent.log", prefix=prefix)
    try:
        scrape = agent.scrape()
        assert {s.value for s in scrape.select("slowpath_probe_attached")} == {1}
        current = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
        assert scrape.value("slowpath_clocksource_current_info", clocksource=current) == 1
        status, _ = agent.get("/healthz")
        assert status == 200
    finally:
        assert agent.stop() == 0, agent.log_text()
