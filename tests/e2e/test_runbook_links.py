"""Runbook links that open: every rendering of the alerts (the chart's
PrometheusRule, the plain rules file, the monitoring mixin, the Grafana
alert file) puts every runbook link on one configurable base, by default the
project's runbook at the tag of the chart's appVersion (the version the
chart deploys, not the newest sources), and every link's #anchor is a
heading of docs/runbook.md (GitHub's anchors: lowercase, punctuation but -
and _ dropped, spaces to -)."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from helpers.paths import REPO
from helpers.tools import tools_cache

pytestmark = pytest.mark.tier("full")

BASE = "https://runbooks.example.test/slowpath.md"
RENDER = REPO / "deploy" / "render.sh"
CHART = REPO / "deploy" / "helm" / "slowpath"
RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
GRAFANA_ALERTS = REPO / "dashboards" / "provisioning" / "alerting" / "slowpath-alerts.yaml"
# prometheusRule.runbookBaseURL empty (the default): derived from appVersion
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
DEFAULT_BASE = f"https://github.com/slowpath/slowpath/blob/v{APP_VERSION}/docs/runbook.md"


def anchors():
    """GitHub's anchor of every heading of the runbook."""
    headings = re.findall(r"^#{1,6} (.+?)\s*$", (REPO / "docs" / "runbook.md").read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def links(text):
    """Every runbook link of a rendered file: the runbook_url annotations
    and the links a cause gives to a known source's section."""
    found = re.findall(r"runbook_url\"?: \"?(\S+?)\"?,?$", text, re.M)
    found += re.findall(r"(\S+#)\{\{ \$labels\.known_source", text)
    return found


def render(*args, base=None):
    env = {k: v for k, v in os.environ.items() if k != "RUNBOOK_BASE_URL"}
    env.setdefault("HELM", str(tools_cache() / "bin/helm"))  # render.sh would build it
    if base:
        env["RUNBOOK_BASE_URL"] = base
    return subprocess.run([str(RENDER), *args], check=True, capture_output=True, text=True, env=env,
                          timeout=1500).stdout


def chart(base, path=CHART):
    helm = os.environ.get("HELM") or str(tools_cache() / "bin/helm")
    base_set = ["--set-string", f"prometheusRule.runbookBaseURL={base}"] if base else []
    return subprocess.run([helm, "template", "slowpath", str(path), "--set", "prometheusRule.enabled=true",
                           *base_set, "--show-only", "templates/prometheusrule.yaml"],
                          check=True, capture_output=True, text=True).stdout


def mixin(base):
    jsonnet = pytest.importorskip("_jsonnet", reason="python3-jsonnet not installed (scripts/setup.sh --test)")
    snippet = f"((import 'mixin.libsonnet') + {{ _config+:: {{ slowpathRunbookBaseURL: '{base}' }} }}).prometheusAlerts"
    return json.dumps(json.loads(jsonnet.evaluate_snippet("test", snippet, jpathdir=[str(REPO / "deploy/mixin")])),
                      indent=1)


RENDERINGS = {
    "chart": chart,
    "rules file": lambda base: render("rules", "-", base=base),
    "mixin": mixin,
    "grafana": lambda base: render("grafana-alerts", "-", base=base),
}


@pytest.mark.parametrize("name", RENDERINGS)
def test_every_link_is_on_the_base_and_opens_a_runbook_section(name):
    text = RENDERINGS[name](BASE)
    found = links(text)
    # one runbook_url per alert (a Grafana rule: one per uid), and more
    alerts = len(re.findall(r'(?:- alert:|"alert":|^\s+- uid:)', text, re.M))
    assert alerts >= 4 and len(re.findall("runbook_url", text)) == alerts, found
    sections = anchors()
    for link in found:
        assert link.startswith(BASE + "#"), f"{name}: {link}"
        anchor = link.split("#", 1)[1]
        assert anchor in sections or anchor == "", f"{name}: no runbook heading for #{anchor}"


def test_the_default_base_is_the_runbook_of_the_charts_app_version(tmp_path):
    """An empty runbookBaseURL (the default) links to the runbook of the
    release the chart deploys, tagged v<appVersion>: the chart packaged as
    another version links to that tag; a value set wins (above)."""
    assert yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]["runbookBaseURL"] == ""
    found = links(chart(None))
    assert found and all(link.startswith(DEFAULT_BASE + "#") for link in found), found
    other = tmp_path / "slowpath"
    shutil.copytree(CHART, other)
    meta = other / "Chart.yaml"
    meta.write_text(re.sub(r"(?m)^appVersion: .*$", 'appVersion: "9.8.7"', meta.read_text()))
    moved = links(chart(None, other))
    assert moved == [link.replace(f"/v{APP_VERSION}/", "/v9.8.7/") for link in found], moved


def test_the_default_base_is_absolute_and_the_shipped_files_use_it():
    assert re.fullmatch(r"https://\S+/blob/v\d+\.\d+\.\d+\S*/docs/runbook\.md", DEFAULT_BASE), DEFAULT_BASE
    for path in (RULES, GRAFANA_ALERTS, REPO / "deploy" / "mixin" / "rules.template.json"):
        text = path.read_text()
        assert "docs/runbook.md#" not in text.replace(DEFAULT_BASE + "#", ""), f"{path.name}: a relative link"
        if path.suffix != ".json":
            assert all(link.startswith(DEFAULT_BASE + "#") for link in links(text)), path.name


def test_the_grafana_alert_file_is_what_render_sh_writes():
    assert render("grafana-alerts", "-") == GRAFANA_ALERTS.read_text(), "run deploy/render.sh"
