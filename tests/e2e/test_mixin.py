"""The monitoring mixin (deploy/mixin/mixin.libsonnet), rendered with real
jsonnet (Debian's python3-jsonnet): with its defaults it gives exactly the
shipped rules file and dashboards; its _config changes thresholds,
durations and selectors, and what it renders then still passes promtool
(Prometheus 3 and 2.42). Its rules come from the chart through
rules.template.json, which must be what deploy/render.sh renders now."""

import functools
import json
import os
import re
import subprocess

import pytest
import yaml

from helpers.paths import REPO
from helpers.tools import tools_cache

pytestmark = pytest.mark.tier("full")

_jsonnet = pytest.importorskip("_jsonnet", reason="python3-jsonnet not installed (scripts/setup.sh --test)")

MIXIN = REPO / "deploy" / "mixin"
RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
DASHBOARDS = REPO / "dashboards"


@functools.lru_cache(maxsize=None)
def _rendered(overrides):
    snippet = f"""
    local mixin = (import 'mixin.libsonnet') + {{ {overrides} }};
    {{
      alerts: mixin.prometheusAlerts,
      rules: mixin.prometheusRules,
      dashboards: mixin.grafanaDashboards,
    }}
    """
    return _jsonnet.evaluate_snippet("test", snippet, jpathdir=[str(MIXIN)])


def render(overrides=""):
    """The mixin's three fields, with `overrides` (jsonnet) added to it;
    each rendering once per run (the promtool checks render what other
    tests render already)."""
    return json.loads(_rendered(overrides))


def groups(rendered):
    return rendered["rules"]["groups"] + rendered["alerts"]["groups"]


def test_the_rules_template_is_the_rendered_chart():
    out = subprocess.run([str(REPO / "deploy/render.sh"), "rules-template"], check=True, capture_output=True,
                         text=True, timeout=1500, env={**os.environ, "HELM": str(tools_cache() / "bin/helm")})
    assert out.stdout == (MIXIN / "rules.template.json").read_text(), "run deploy/render.sh"


def test_the_defaults_render_the_shipped_rules_and_dashboards():
    rendered = render()
    shipped = yaml.safe_load(RULES.read_text())["groups"]
    by_name = {g["name"]: g for g in groups(rendered)}
    assert len(by_name) == len(groups(rendered)), "a group in both fields"
    assert by_name == {g["name"]: g for g in shipped}
    # alerts and records are split by group, as kube-prometheus expects
    for g in rendered["rules"]["groups"]:
        assert all("record" in r for r in g["rules"]), g["name"]
    assert {r["alert"] for g in rendered["alerts"]["groups"] for r in g["rules"] if "alert" in r} == \
        {r["alert"] for g in shipped for r in g["rules"] if "alert" in r}
    files = sorted(p.name for p in DASHBOARDS.glob("*.json"))
    assert sorted(rendered["dashboards"]) == files
    for name in files:
        assert rendered["dashboards"][name] == json.loads((DASHBOARDS / name).read_text()), name


CONFIG = """
_config+:: {
  slowpathSelector: 'cluster="eu1"',
  slowpathJobSelector: 'job="node-slowpath"',
  slowpathThresholds+: { clockFallbackPerProcess: 20000, directCompactionStallRatio: 0.1 },
  slowpathFor+: { timerLoop: '30m' },
  slowpathRunbookBaseURL: 'https://runbooks.example/slowpath.md',
},
"""


def test_config_sets_thresholds_durations_and_selectors():
    rendered = render(CONFIG)
    rules = [r for g in groups(rendered) for r in g["rules"]]
    alert = {r["alert"]: r for r in rules if "alert" in r}
    assert "> 20000" in alert["SlowpathClockSyscallFallback"]["expr"]
    assert "> 0.1" in alert["SlowpathDirectCompactionStalls"]["expr"]
    assert alert["SlowpathTimerLoop"]["for"] == "30m"
    assert alert["SlowpathAgentDown"]["expr"] == \
        'up{job="node-slowpath", cluster="eu1"} == 0 or absent(up{job="node-slowpath", cluster="eu1"})'
    for r in alert.values():
        assert r["annotations"]["runbook_url"].startswith("https://runbooks.example/slowpath.md#"), r["alert"]
    # every series of the agent a rule reads carries the selector (recorded
    # series, named level:metric:operations, already do)
    for r in rules:
        for name, matchers in re.findall(r"(?<![:\w])(slowpath_[a-z_]+|up|process_cpu_seconds_total)(?![\w:])(\{[^}]*\})?",
                                          r["expr"]):
            assert 'cluster="eu1"' in matchers, (r.get("alert") or r.get("record"), name, r["expr"])
    # no placeholder is left
    assert "__" not in json.dumps(groups(rendered)).replace("__name__", "")


def test_namespace_and_release_render_what_the_chart_installed_there_alerts():
    """_config.slowpathNamespace and slowpathRelease: the rules are the
    PrometheusRule of the chart installed as release `agent` in namespace
    `observability` (its kubectl commands find the agent pod by that
    namespace and release), the job selector aside (the chart's names the
    release's fullname)."""
    helm = str(tools_cache() / "bin/helm")
    chart = subprocess.run([helm, "template", "agent", str(REPO / "deploy/helm/slowpath"), "--namespace",
                            "observability", "--set", "prometheusRule.enabled=true",
                            "--show-only", "templates/prometheusrule.yaml"],
                           check=True, capture_output=True, text=True).stdout
    want = yaml.safe_load(chart)["spec"]["groups"]
    job = re.search(r"up\{(job=~\"[^\"]*\")", json.dumps(want).replace('\\"', '"')).group(1)
    rendered = render("_config+:: { slowpathNamespace: 'observability', slowpathRelease: 'agent', "
                      f"slowpathJobSelector: '{job}' }},")
    assert {g["name"]: g for g in groups(rendered)} == {g["name"]: g for g in want}
    text = json.dumps(want)
    assert "kubectl -n observability exec" in text and "app.kubernetes.io/instance=agent," in text
    assert "-n slowpath" not in text


def chart_rules(*sets):
    helm = str(tools_cache() / "bin/helm")
    args = [a for kv in sets for a in ("--set", kv)]
    return subprocess.run([helm, "template", "slowpath", str(REPO / "deploy/helm/slowpath"), "--namespace",
                           "slowpath", "--set", "prometheusRule.enabled=true", *args,
                           "--show-only", "templates/prometheusrule.yaml"], capture_output=True, text=True)


def test_cluster_label_is_kept_by_every_aggregation_and_join():
    """_config.clusterLabel and the chart's prometheusRule.clusterLabel: the
    same rules, and every grouping (by, on) that keeps a node, a namespace or
    the cluster level keeps the label, the default's name nowhere left."""
    chart = chart_rules("prometheusRule.clusterLabel=k8s_cluster")
    assert chart.returncode == 0, chart.stderr
    want = yaml.safe_load(chart.stdout)["spec"]["groups"]
    rendered = render("_config+:: { clusterLabel: 'k8s_cluster' },")
    assert {g["name"]: g for g in groups(rendered)} == {g["name"]: g for g in want}
    exprs = [r["expr"] for g in want for r in g["rules"]]
    groupings = [m for e in exprs for m in re.findall(r"\b(?:by|on) \(([^)]*)\)", e)]
    kept = [g for g in groupings if re.search(r"\b(instance|namespace)\b", g)]
    assert kept and all(g.startswith("k8s_cluster, ") for g in kept), [g for g in kept if "k8s_cluster" not in g]
    assert not [g for g in groupings if re.search(r"\bcluster\b", g)]
    assert any(re.search(r"sum by \(k8s_cluster\) \(instance:", e) for e in exprs)


def test_cluster_label_renames_the_dashboards_selections_alike_in_the_chart_and_the_mixin():
    """The dashboards' cluster variable selects, groups and joins by
    `cluster`; with another label the mixin's dashboards and the chart's
    ConfigMaps both use that label in each of those places, and are the
    same (with the default they are the shipped files: the test above)."""
    helm = str(tools_cache() / "bin/helm")
    out = subprocess.run([helm, "template", "slowpath", str(REPO / "deploy/helm/slowpath"), "--namespace",
                          "slowpath", "--set", "grafanaDashboards.enabled=true",
                          "--set", "prometheusRule.clusterLabel=k8s_cluster",
                          "--show-only", "templates/grafana-dashboards.yaml"],
                         check=True, capture_output=True, text=True).stdout
    chart = {name: json.loads(text) for doc in yaml.safe_load_all(out) if doc
             for name, text in doc["data"].items()}
    mixin = render("_config+:: { clusterLabel: 'k8s_cluster' },")["dashboards"]
    assert chart == mixin
    for name, dash in mixin.items():
        text = json.dumps(dash)
        shipped = (DASHBOARDS / name).read_text()
        assert text.count('k8s_cluster=~\\"$cluster\\"') == shipped.count('cluster=~\\"$cluster\\"') > 10, name
        assert not re.search(r'(?<![\w$])cluster=~|(?:by|on) \(cluster,|, cluster\)', text), name


def test_an_empty_cluster_label_is_refused_with_its_fix():
    out = chart_rules("prometheusRule.clusterLabel=")
    assert out.returncode != 0 and "prometheusRule.clusterLabel must name a label" in out.stderr, out.stderr


@pytest.mark.parametrize("overrides", ["", CONFIG], ids=["defaults", "config"])
def test_promtool_checks_what_the_mixin_renders(release, tmp_path, overrides):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups(render(overrides))}))
    out = subprocess.run([release.promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
