"""Alert rules (deploy/prometheus/slowpath-rules.yaml, rendered from the
chart's PrometheusRule, and its host twin slowpath-rules-host.yaml, the same
rules with prometheusRule.fixCommands=host: the commands in the annotations
run on the node, not through kubectl): promtool checks both, promtool's unit
tests show each alert firing and a near miss staying quiet in both, the
annotations name the process and the rate, every runbook link has its
section, and end to end a real
Prometheus evaluating the rules against the real agent fires the fallback
alert while a raw-syscall clock workload runs and stays quiet while only a
vDSO workload runs. promtool and the server: Prometheus 3 and Debian's 2.42
(`release` in conftest.py)."""

import json
import os
import re
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from helpers.agent import Agent
from helpers.paths import REPO
from helpers.prometheus import prometheus_server
from helpers.signals import declarations
from helpers.tools import tools_cache
from test_runbook_links import DEFAULT_BASE as RUNBOOK_BASE  # the chart's default runbook

pytestmark = pytest.mark.tier("full")

RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
# The same rules for the systemd unit, the .deb and a bare binary: only the
# commands in the annotations differ (host_text, below).
HOST_RULES = REPO / "deploy" / "prometheus" / "slowpath-rules-host.yaml"
UNIT_TESTS = REPO / "tests" / "prometheus" / "slowpath-rules.test.yaml"
RUNBOOK = REPO / "docs" / "runbook.md"
KNOWN_SOURCES = REPO / "deploy" / "helm" / "slowpath" / "files" / "known-sources.yaml"

def rules():
    return yaml.safe_load(RULES.read_text())


def alerts():
    return [r for g in rules()["groups"] for r in g["rules"] if "alert" in r]


def records():
    """Recording rules: {name: expr}."""
    return {r["record"]: r["expr"] for g in rules()["groups"] for r in g["rules"] if "record" in r}


def expanded(expr):
    """`expr` with each recorded series it reads replaced by the expression
    that records it (the recording rules nest: repeat until none is left)."""
    recs = records()
    pattern = re.compile("|".join(re.escape(name) for name in sorted(recs, key=len, reverse=True)))
    while True:
        new = pattern.sub(lambda m: recs[m.group(0)], expr)
        if new == expr:
            return expr
        expr = new


def condition(expr):
    """The threshold condition of an alert: a per-process alert joined with
    the agent's finding (`(COND) + on (...) group_left (known_source) ...
    or on (...) (COND)`) is judged on COND."""
    m = re.match(r"\((.*?)\)\s*\+ on \(", expr, re.S)
    return m.group(1) if m else expr


# The commands the Kubernetes file's annotations give, and what the host
# file (prometheusRule.fixCommands=host) gives instead: the doctor in the
# node's agent pod or as root on the node, the findings through the API
# server's pod proxy or from the agent's port on the node.
AGENT_POD = (r"\$\(kubectl -n slowpath get pod -l app\.kubernetes\.io/instance=slowpath,app\.kubernetes\.io/name=slowpath "
             r"--field-selector spec\.nodeName=.+? -o jsonpath='\{\.items\[0\]\.metadata\.name\}'\)")
KUBECTL_DOCTOR = re.compile(rf"kubectl -n slowpath exec {AGENT_POD} -c slowpath -- slowpath doctor --comm ('[^']*')")
KUBECTL_FINDINGS = re.compile(rf"kubectl get --raw /api/v1/namespaces/slowpath/pods/{AGENT_POD}:9891/proxy/debug/findings")
HOST_FINDINGS = "curl -s http://localhost:9891/debug/findings"
# After the findings, a per-process alert's description on a host names top
# and the journal; the agent's alerts name the journal as its log.
HOST_DESCRIPTION_END = (" The node's processes, costliest first, with their findings: slowpath top. The agent's log, "
                        "which names what it could not read: journalctl -u slowpath.")
HOST_LOG = {"The agent's log names": "The agent's log (journalctl -u slowpath) names",
            "Its log names": "Its log (journalctl -u slowpath) names",
            "that node's slow paths are not being reported.":
                "that node's slow paths are not being reported. On the node: systemctl status slowpath; "
                "journalctl -u slowpath"}


def host_text(key, text):
    """An annotation of the Kubernetes rules (`key`: its name) as the host
    rules give it: each kubectl command replaced by the one a person on the
    node runs, and the journal named. Exact: the unit tests compare it."""
    text = KUBECTL_DOCTOR.sub(r"sudo slowpath doctor --comm \1", text)
    text = KUBECTL_FINDINGS.sub(HOST_FINDINGS, text)
    if key == "description" and text.endswith(HOST_FINDINGS):
        text += HOST_DESCRIPTION_END
    for kube, host in HOST_LOG.items():
        text = text.replace(kube, host)
    return text


def same_text(key, text):
    return text


# Each rules file with what its annotations say where the Kubernetes file's
# name kubectl.
RULE_FILES = [pytest.param(RULES, same_text, id="kubernetes"), pytest.param(HOST_RULES, host_text, id="host")]


@pytest.mark.parametrize("mode,path", [("rules", RULES), ("rules-host", HOST_RULES)], ids=["kubernetes", "host"])
def test_rules_file_is_the_rendered_chart(mode, path):
    # the pinned helm, checked built (render.sh would build it)
    out = subprocess.run([str(REPO / "deploy/render.sh"), mode, "-"], check=True, capture_output=True, text=True,
                         timeout=1500, env={**os.environ, "HELM": str(tools_cache() / "bin/helm")})
    assert out.stdout == path.read_text(), "run deploy/render.sh"


@pytest.mark.parametrize("path", [RULES, HOST_RULES], ids=["kubernetes", "host"])
def test_promtool_checks_the_rules(release, path):
    out = subprocess.run([release.promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts()) + len(records())} rules found" in out.stdout


def test_host_rules_are_the_kubernetes_rules_with_host_commands():
    """The host file has the Kubernetes file's groups, rules, expressions,
    labels and durations, and the same annotations but for the commands:
    host_text of each, exactly. None names kubectl; the per-process alerts
    give the doctor on the node and the journal."""
    kube, host = rules(), yaml.safe_load(HOST_RULES.read_text())
    assert [g["name"] for g in host["groups"]] == [g["name"] for g in kube["groups"]]
    changed = 0
    for kg, hg in zip(kube["groups"], host["groups"]):
        assert len(hg["rules"]) == len(kg["rules"]), kg["name"]
        for k, h in zip(kg["rules"], hg["rules"]):
            assert {n: v for n, v in h.items() if n != "annotations"} == \
                   {n: v for n, v in k.items() if n != "annotations"}, k.get("alert", k.get("record"))
            notes = k.get("annotations", {})
            assert h.get("annotations", {}) == {n: host_text(n, v) for n, v in notes.items()}, k.get("alert")
            changed += h.get("annotations", {}) != notes
    assert "kubectl" not in HOST_RULES.read_text()
    text = " ".join(v for g in host["groups"] for r in g["rules"] for v in r.get("annotations", {}).values())
    assert "sudo slowpath doctor --comm '{{ $labels.comm }}'" in text
    assert "journalctl -u slowpath" in text and HOST_FINDINGS in text and "slowpath top" in text
    per_process = [a for a in alerts() if "known_source" in a["expr"]]
    assert per_process and "kubectl" in RULES.read_text()
    # every per-process alert, and the agent's alerts that point at its log
    assert changed >= len(per_process) + 4, changed


@pytest.mark.parametrize("skip_schema", [False, True], ids=["schema", "template"])
def test_unknown_fix_commands_fail_the_render(skip_schema):
    """prometheusRule.fixCommands other than kubernetes or host fails the
    render: the values schema says so when there is one, the template
    (slowpath.fixCommands) when it is skipped."""
    out = subprocess.run([str(tools_cache() / "bin/helm"), "template", "slowpath", str(REPO / "deploy/helm/slowpath"),
                          "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.fixCommands=vm",
                          *(["--skip-schema-validation"] if skip_schema else [])],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "fixCommands" in out.stderr, out.stderr
    if skip_schema:
        assert "prometheusRule.fixCommands must be kubernetes" in out.stderr and "not vm" in out.stderr, out.stderr


def test_every_alert_has_summary_description_and_a_runbook_section():
    anchors = {
        re.sub(r"[^a-z0-9_ -]", "", h.lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", RUNBOOK.read_text(), re.M)
    }
    for alert in alerts():
        notes = alert["annotations"]
        assert notes["summary"] and notes["description"], alert["alert"]
        anchor = notes["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"{alert['alert']}: no runbook section #{anchor}"


@pytest.mark.parametrize("path,text", RULE_FILES)
def test_every_alert_fires_and_its_near_miss_does_not(release, path, text, tmp_path):
    """promtool's unit tests (tests/prometheus/slowpath-rules.test.yaml), run
    as a user runs them: the file as written, annotations and all (promtool
    compares them exactly). For the host rules, a copy that reads them and
    expects each annotation as host_text gives it."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    fired = [t for case in tests["tests"] for t in case.get("alert_rule_test", []) if t["exp_alerts"]]
    assert {t["alertname"] for t in fired} == {a["alert"] for a in alerts()}, "an alert without a firing case"
    for t in fired:
        for alert in t["exp_alerts"]:
            notes = set(alert.get("exp_annotations", {}))
            # alerts that carry a known_source also say its cause and fix
            assert notes in ({"summary", "description", "runbook_url", "dashboard_url"},
                             {"summary", "description", "runbook_url", "dashboard_url", "cause", "fix"}), t
    if path == RULES:
        out = subprocess.run([release.promtool, "test", "rules", UNIT_TESTS.name], cwd=UNIT_TESTS.parent,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        return
    assert tests["rule_files"] == ["../../deploy/prometheus/slowpath-rules.yaml"]
    tests["rule_files"] = [str(path)]
    changed = 0
    for t in fired:
        for alert in t["exp_alerts"]:
            notes = alert.get("exp_annotations", {})
            host = {key: text(key, value) for key, value in notes.items()}
            changed += host != notes
            alert["exp_annotations"] = host
    assert changed >= 5 and "kubectl" not in yaml.safe_dump(tests), changed
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    out = subprocess.run([release.promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# The agent pod on node n1, as the plain rules file's commands find it (the
# release and namespace of deploy/kubernetes/slowpath.yaml).
AGENT_POD_OF_N1 = ("$(kubectl -n slowpath get pod -l app.kubernetes.io/instance=slowpath,app.kubernetes.io/name=slowpath "
                   "--field-selector spec.nodeName=n1 -o jsonpath='{.items[0].metadata.name}')")


@pytest.mark.parametrize("path,text", RULE_FILES)
def test_fallback_alert_names_the_process_the_rate_and_the_known_source(tmp_path, release, path, text):
    """The per-process alert joins the agent's finding on the process's labels
    (pod labels included): it gains known_source, and the cause and fix of
    that row of the known-source table (generated from the agent's)."""
    (tmp_path / "rules.yaml").write_text(path.read_text())
    jvm_clock = next(r for r in yaml.safe_load(KNOWN_SOURCES.read_text())["clock"] if r["id"] == "jvm_clock")
    labels = 'instance="n1",comm="java",cgroup="/app",unit="app.service",namespace="shop",pod="cart-0",container="cart"'
    case = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": f'slowpath_clock_syscalls_total{{{labels},fallback="true"}}',
                              "values": "0+1200000x30"},
                             # the agent's finding for the same process, by its labels
                             {"series": f'slowpath_finding_info{{{labels},job="slowpath",finding="vdso_bypass",'
                                        'severity="warning",known_source="jvm_clock"}',
                              "values": "1x30"}],
            "alert_rule_test": [{
                "eval_time": "20m", "alertname": "SlowpathClockSyscallFallback",
                "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "instance": "n1", "comm": "java", "cgroup": "/app",
                                   "unit": "app.service", "namespace": "shop", "pod": "cart-0",
                                   "container": "cart", "known_source": "jvm_clock"},
                    "exp_annotations": {
                        "summary": "java on n1 makes 20k clock syscalls/s the vDSO could serve",
                        "description": "Process java (pod shop/cart-0, unit app.service, cgroup /app) on n1 "
                                       "reads the clock through real system calls at 20k/s. If slowpath_vdso_fallback "
                                       "is 0 on the node, the process bypasses the vDSO (static binary, seccomp "
                                       "sandbox, old runtime); otherwise see SlowpathClocksourceNotVdsoCapable. "
                                       f"Fix: {jvm_clock['fix']} The doctor for the process on its node: "
                                       f"kubectl -n slowpath exec {AGENT_POD_OF_N1} -c slowpath -- slowpath doctor "
                                       "--comm 'java' The agent's findings on the node, with their call sites: "
                                       "kubectl get --raw /api/v1/namespaces/slowpath/pods/"
                                       f"{AGENT_POD_OF_N1}:9891/proxy/debug/findings",
                        "cause": jvm_clock["cause"],
                        "fix": jvm_clock["fix"],
                        "runbook_url": f"{RUNBOOK_BASE}#clock-syscall-fallback",
                        # Drill-down on the process, its labels URL-escaped
                        "dashboard_url": "/d/slowpath-drilldown/slowpath-drilldown?var-instance=n1"
                                         "&var-namespace=shop&var-pod=cart-0&var-comm=java",
                    },
                }],
            }],
        }],
    }
    # the host file's commands in place of kubectl's
    (expected,) = case["tests"][0]["alert_rule_test"][0]["exp_alerts"]
    expected["exp_annotations"] = {key: text(key, value) for key, value in expected["exp_annotations"].items()}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(case))
    out = subprocess.run([release.promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# ---- end to end: real Prometheus, real agent, real workloads ----------------


@pytest.fixture(scope="module")
def stack(agent_bin, release, tmp_path_factory):
    """The agent (default labels, as users run it) and Prometheus evaluating
    the shipped rules every second, with every `for` cut to 2 s."""
    work = tmp_path_factory.mktemp("alerts")
    agent = Agent(agent_bin, [], work / "agent.log")
    spec = rules()
    for group in spec["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
    (work / "rules.yaml").write_text(yaml.safe_dump(spec))
    with prometheus_server(work, agent.port, rule_files=["rules.yaml"], release=release) as base:
        yield agent, base
    assert agent.stop() == 0


def fallback_alerts(base, comm="sp-workload"):
    with urllib.request.urlopen(f"{base}/api/v1/alerts", timeout=5) as resp:
        found = json.load(resp)["data"]["alerts"]
    return [a["state"] for a in found
            if a["labels"]["alertname"] == "SlowpathClockSyscallFallback" and a["labels"].get("comm") == comm]


def wait_up(base):
    deadline = time.monotonic() + 30
    query = urllib.parse.urlencode({"query": 'up{job="slowpath"}'})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/api/v1/query?{query}", timeout=5) as resp:
                result = json.load(resp)["data"]["result"]
            if result and result[0]["value"][1] == "1":
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("Prometheus never scraped the agent")


def test_fallback_alert_fires_on_raw_syscalls_and_not_on_vdso_reads(stack, workload_bin):
    agent, base = stack
    wait_up(base)
    # vDSO reads only: several evaluations, no alert.
    vdso = subprocess.Popen([str(workload_bin), "clock-vdso", "150000000"], stdout=subprocess.DEVNULL)
    try:
        for _ in range(8):
            assert fallback_alerts(base) == []
            time.sleep(0.5)
    finally:
        vdso.wait(timeout=60)
    # Raw clock_gettime: pending, then firing, while it runs.
    raw = subprocess.Popen([str(workload_bin), "clock-raw", "200000000"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 45
        while "firing" not in fallback_alerts(base):
            assert time.monotonic() < deadline, f"no firing alert: {fallback_alerts(base)}"
            assert raw.poll() is None, "the workload ended before the alert fired"
            time.sleep(0.5)
    finally:
        raw.kill()
        raw.wait()


GRAFANA_ALERTS = REPO / "dashboards" / "provisioning" / "alerting" / "slowpath-alerts.yaml"


def test_grafana_managed_alerts_are_every_prometheus_alert():
    """dashboards/generate.sh makes them from the rules file: every alert,
    in order, by name (its severity in the title where a name repeats), with
    its severity, for and annotations (`$value` read as query A's value), and
    its expression with the recorded series inlined; a series fires when the
    expression returns it. No link leads to the agent's own port."""
    text = GRAFANA_ALERTS.read_text()
    doc = yaml.safe_load(text)
    datasource = yaml.safe_load(
        (REPO / "dashboards/provisioning/datasources/slowpath-prometheus.yaml").read_text()
    )["datasources"][0]["uid"]
    (group,) = doc["groups"]
    rules, wanted = group["rules"], alerts()
    assert len(rules) == len(wanted) >= 20
    assert len({r["uid"] for r in rules}) == len({r["title"] for r in rules}) == len(rules)
    names = [a["alert"] for a in wanted]
    for alert, rule in zip(wanted, rules):
        severity = alert["labels"]["severity"]
        title = f"{alert['alert']} ({severity})" if names.count(alert["alert"]) > 1 else alert["alert"]
        assert rule["title"] == title
        assert rule["labels"] == alert["labels"], title
        assert rule["for"] == alert.get("for", "0s"), title
        assert rule["annotations"] == {k: re.sub(r"\$value\b", "$values.A.Value", v)
                                       for k, v in alert["annotations"].items()}, title
        refs = {d["refId"]: d for d in rule["data"]}
        assert rule["condition"] == "B"
        assert refs["B"]["model"] == {"refId": "B", "type": "math",
                                      "expression": "is_number($A) || is_nan($A) || is_inf($A)"}, title
        query = refs["A"]
        assert query["datasourceUid"] == datasource and query["model"]["instant"], title
        expr = query["model"]["expr"]
        assert not [name for name in records() if name in expr], title  # works without the recording rules
        bare = lambda e: re.sub(r"[()\s]", "", e)  # noqa: E731 (inlined records come in parentheses)
        assert bare(expr) == bare(expanded(alert["expr"])), title
    assert "http://{{" not in text  # the agent's port is not reachable from a browser


def test_every_alert_links_the_dashboard_of_its_subject():
    """dashboard_url (prometheusRule.grafanaURL, empty by default, then the
    path): Drill-down on the process for an alert on a process (its labels
    name a comm), Overview on the node for the others; every variable the
    link sets is one of that dashboard's."""
    dashboards = {json.loads(p.read_text())["uid"]: json.loads(p.read_text())
                  for p in (REPO / "dashboards").glob("*.json")}
    for a in alerts():
        url = urllib.parse.urlsplit(a["annotations"]["dashboard_url"])
        uid = url.path.split("/")[2]
        per_process = "comm" in a["annotations"]["summary"]
        assert uid == ("slowpath-drilldown" if per_process else "slowpath-overview"), a["alert"]
        names = {v["name"] for v in dashboards[uid]["templating"]["list"]}
        params = [k.removeprefix("var-") for k, _ in urllib.parse.parse_qsl(url.query, keep_blank_values=True)]
        assert params and set(params) <= names, (a["alert"], params)
        assert ("comm" in params) == per_process, a["alert"]
        assert all(f"{{{{ $labels.{p} | urlquery }}}}" in url.query for p in params), url.query


def test_every_grafana_alert_shows_on_a_panel_of_its_dashboard():
    """Each Grafana-managed rule is linked (dashboardUid, panelId) to a time
    series or state timeline where one exists, of the dashboard its
    dashboard_url opens, whose queries read a family of the agent the
    rule's query reads (or of its subject: the clocksource's switches are
    an annotation, not a panel), and every dashboard has Grafana's built-in
    annotations, which show those rules' state changes on their panels."""
    dashboards = {json.loads(p.read_text())["uid"]: json.loads(p.read_text())
                  for p in (REPO / "dashboards").glob("*.json")}
    for d in dashboards.values():
        builtin = [a for a in d["annotations"]["list"] if a.get("builtIn") == 1]
        assert [(a["type"], a["datasource"]["uid"], a["enable"]) for a in builtin] == \
            [("dashboard", "-- Grafana --", True)], d["uid"]

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    family = re.compile(r"(?<![\w:])(slowpath_[a-z_]+?|up|process_[a-z_]+)(?:_bucket|_count|_sum)?(?![\w:])")
    reads = lambda text: set(family.findall(text))  # noqa: E731
    linked = set()
    for rule in yaml.safe_load(GRAFANA_ALERTS.read_text())["groups"][0]["rules"]:
        uid = rule["annotations"]["dashboard_url"].split("/d/")[1].split("/")[0]
        assert rule["dashboardUid"] == uid, rule["title"]
        (panel,) = [p for p in panels(dashboards[uid]["panels"]) if p["id"] == rule["panelId"]]
        plotted = reads(" ".join(t.get("expr", "") for t in panel.get("targets", [])))
        queried = reads(rule["data"][0]["model"]["expr"])
        subjects = tuple({"_".join(f.split("_")[:2]) + "_" for f in queried})
        assert plotted & queried or any(f.startswith(subjects) for f in plotted), (rule["title"], panel["title"])
        linked.add(panel["type"])
    assert "timeseries" in linked


def test_grafana_alert_queries_run_on_real_prometheus(stack):
    _, base = stack
    wait_up(base)
    for rule in yaml.safe_load(GRAFANA_ALERTS.read_text())["groups"][0]["rules"]:
        expr = rule["data"][0]["model"]["expr"]
        query = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{base}/api/v1/query?{query}", timeout=5) as resp:
            assert json.load(resp)["status"] == "success", expr


# Every signal's recorded rates, as the agent declares them (`slowpath
# signals`); test_recorded_rates_read_what_the_agent_exports holds them to the
# golden exposition.
SIGNALS = [r["name"] for d in declarations() for r in d["recorded"]]
LEVELS = ["instance_cgroup_comm", "instance", "namespace_pod", "namespace", "instance_unit", "cluster"]


def test_recording_rules_cover_every_signal_at_every_level_and_the_tests_cover_both():
    """level:metric:operations names (the monitoring-mixin convention), one
    per signal and level, and promtool cases (tests/prometheus) that read
    every signal and every level at least once."""
    names = set(records())
    for name in names:
        assert re.fullmatch(r"[a-z_]+:slowpath_[a-z_]+:[a-z0-9_]+", name), name
    expected = {f"{level}:{signal}:rate5m" for level in LEVELS for signal in SIGNALS}
    assert expected <= names, sorted(expected - names)
    assert names - expected == {"instance:slowpath_thp_fault_fallback:ratio_rate5m", "instance:slowpath_own_cpu:rate5m",
                                "instance:slowpath_dispatch_floor_cpu:rate5m",
                                "instance_cgroup_comm:slowpath_timer_wakeup_cpu_seconds:rate5m",
                                "instance:slowpath_timer_wakeup_cpu_seconds:rate5m",
                                "instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m",
                                "instance:slowpath_estimated_cpu_seconds:rate5m"}
    tested = " ".join(t["expr"] for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
                      for t in case.get("promql_expr_test", []))
    tested += " ".join(a["expr"] for a in alerts())
    for signal in SIGNALS:
        assert f":{signal}:" in tested, signal
    for level in LEVELS:
        assert f"{level}:" in tested, level


def test_recorded_rates_read_what_the_agent_exports():
    """Each signal's recording rule reads a counter the agent really
    exports, with the label value it selects: the golden exposition of a busy
    node (agent/tests/golden/metrics-plain.prom, written by the exporter, not
    by the declarations) has the family as a counter and a series with that
    label pair; and each level's rule sums exactly that selection, keeping the cluster label."""
    exposition = (REPO / "agent" / "tests" / "golden" / "metrics-plain.prom").read_text()
    counters = set(re.findall(r"^# TYPE (\w+) counter$", exposition, re.M))
    recs = records()
    # the chart's default cluster label, which every level keeps
    cluster = yaml.safe_load((REPO / "deploy/helm/slowpath/values.yaml").read_text())["prometheusRule"]["clusterLabel"]
    assert SIGNALS, "no recorded rate declared"
    for d in declarations():
        for r in d["recorded"]:
            assert r["family"] in counters, r
            selector = ""
            if r["only"]:
                label, value = r["only"]
                selector = f'{{{label}="{value}"}}'
                series = re.findall(rf"^{r['family']}{{([^}}]*)}} ", exposition, re.M)
                assert any(re.search(rf'(^|,){label}="{value}"(,|$)', s) for s in series), r
            rate = f"rate({r['family']}{selector}[5m])"
            assert recs[f"instance_cgroup_comm:{r['name']}:rate5m"] == \
                f"sum by ({cluster}, instance, namespace, pod, container, unit, cgroup, comm) ({rate})", r
            assert recs[f"instance:{r['name']}:rate5m"] == f"sum by ({cluster}, instance) ({rate})", r


def test_the_estimated_cpu_record_charges_what_top_charges():
    """instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m adds one
    term per top column the signals declare a cost for (`slowpath signals`),
    each labelled slow_path=<its --sort value> (the clock's two: a read the
    canary saw fall back, and a system call), and no other. The chart makes
    the terms from files/signals.json: this holds the rendered rules to the
    agent now; promtool's cases (tests/prometheus) check what they add up to."""
    expr = records()["instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m"]
    terms = set(re.findall(r'"slow_path", "([a-z_-]+)"', expr))
    want = set()
    for column in (c for d in declarations() for c in d["top"]["columns"]):
        if isinstance(column["cost"], dict) and "clock_read" in column["cost"]:
            want |= {"clock_read", "clock_syscall"}
        elif column["cost"] != "none":
            want.add(column["sort"])
    assert terms == want, (terms, want)


# The doctor's finding behind each alert that reports one: a per-process
# alert joins its findings' slowpath_finding_info (slowpath.withFinding), the
# first of which is its own; node-level alerts that match a finding name it
# here.
NODE_FINDING_OF_ALERT = {
    "SlowpathClocksourceNotVdsoCapable": "clocksource_not_vdso_capable",
}


def finding_of_alert():
    """{alert: the doctor's finding behind it}, from the rules themselves."""
    found = dict(NODE_FINDING_OF_ALERT)
    for alert in alerts():
        joined = re.findall(r'slowpath_finding_info\{finding=~?"(\w+)', alert["expr"])
        if joined:
            found[alert["alert"]] = joined[0]
    return found


def test_the_alerts_carry_the_doctors_severities():
    """The doctor (each signal's declared findings: id and severities,
    which the findings' constructors take their id from) and the alerts
    agree on severity, and the runbook says it where it is not warning."""
    doctor = {r["id"]: r["severities"] for d in declarations() for r in d["finding_rules"]}
    by_name = {a["alert"]: a for a in alerts()}
    runbook = RUNBOOK.read_text()
    pairs = finding_of_alert()
    # every signal's alert that a doctor rule stands behind (a guard: the
    # join's form changing would empty this silently)
    assert {"SlowpathClockSyscallFallback", "SlowpathTimerLoop", "SlowpathTzfileChecks"} <= set(pairs), pairs
    for alert, finding in pairs.items():
        assert len(doctor[finding]) == 1, (finding, "one severity for an alert to carry")
        severity = doctor[finding][0]
        assert by_name[alert]["labels"]["severity"] == severity, (alert, finding, severity)
        if severity != "warning":
            assert f"`{alert}` (severity `{severity}`" in runbook, alert


def test_the_readme_names_the_shipped_alerts():
    """README's alert pointers name rules that exist (no second copy of
    their thresholds to drift)."""
    readme = (REPO / "README.md").read_text()
    named = set(re.findall(r"`(Slowpath[A-Za-z]+)`", readme))
    assert {"SlowpathScrapeErrors", "SlowpathEventsLost", "SlowpathProbeNotAttached"} <= named
    assert named <= {a["alert"] for a in alerts()}, named - {a["alert"] for a in alerts()}


# Each finding of docs/alerts.md's two-level table: the agent's constant (in
# agent/src/signals) its threshold comes from.
FINDING_CONSTANT = {
    "vdso_bypass": "VDSO_BYPASS_PER_SEC",
    "rt_sigprocmask_storm": "SIGPROCMASK_PER_SEC",
    "tzfile_checks": "CHECKS_PER_SEC",
    "timer_loop": "DEFAULT_LOOP_PER_SEC",
    "direct_compaction_stalls": "DIRECT_COMPACTION_RATIO",
    "thp_faults": "THP_FAULTS_PER_SEC",
}


def test_the_two_levels_table_is_the_agents_and_the_charts():
    """docs/alerts.md's table of findings' and alerts' thresholds: the left
    number is the agent's constant, the right the chart's default."""
    source = "\n".join(p.read_text() for p in (REPO / "agent" / "src" / "signals").rglob("*.rs"))
    constants = {name: float(value.replace("_", "")) for name, value in
                 re.findall(r"const (\w+): f64 = ([\d_.]+);", source)}
    thresholds = yaml.safe_load((REPO / "deploy/helm/slowpath/values.yaml").read_text())["prometheusRule"]["thresholds"]
    text = (REPO / "docs" / "alerts.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([\d.]+) [^|]*\| `(Slowpath\w+)` \| ([\d.]+) [^|]*\(`(\w+)`\) \|$", text, re.M)
    assert {r[0] for r in rows} == set(FINDING_CONSTANT), rows
    alerts_by_name = {a["alert"] for a in alerts()}
    for finding, left, alert, right, key in rows:
        assert float(left) == constants[FINDING_CONSTANT[finding]], (finding, left)
        assert float(right) == float(thresholds[key]), (alert, right, key)
        assert alert in alerts_by_name, alert
    held = [a for a in alerts() if a["alert"] == "SlowpathFindingHeld"]
    assert [a["labels"]["severity"] for a in held] == ["info"], held
