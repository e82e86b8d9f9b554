"""Grafana dashboards (dashboards/): generated from code, well formed, and every
panel query proven on real data.

(a) the committed JSON is what dashboards/generate.sh produces now;
(b) structure, without the library: stable uids, unique panel ids, the
    `${datasource}` variable everywhere, every variable used, descriptions,
    units, metric names of docs/metrics.md and docs/alerts.md;
(c) end to end: the real agent (default flags, as users run it) and a real
    Prometheus on loopback scraping it every second, the workloads of
    tests/workloads running, and every panel query of both dashboards run
    through Prometheus's HTTP API with the variables substituted: each must be
    valid and return data, except the few in EMPTY_ALLOWED.
"""

import itertools
import json
import math
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from helpers.agent import Agent
from helpers.host import cgroup2_root
from helpers.paths import REPO
from helpers.prometheus import prometheus_server
from helpers.signal_facts import declared, producible
from helpers.signals import declarations
from helpers.workload import run_workload

pytestmark = pytest.mark.tier("full")

DASHBOARDS_DIR = REPO / "dashboards"
DASHBOARDS = {  # file -> uid: uids are stable, links and bookmarks depend on them
    "slowpath-overview.json": "slowpath-overview",
    "slowpath-drilldown.json": "slowpath-drilldown",
    "slowpath-fleet.json": "slowpath-fleet",
}
VARIABLES = {  # per dashboard uid
    "slowpath-overview": {"datasource", "cluster", "job", "instance", "namespace", "pod", "comm"},
    "slowpath-drilldown": {"datasource", "cluster", "job", "instance", "namespace", "pod", "comm"},
    # the recorded series keep no job label: the fleet is every node of the clusters chosen
    "slowpath-fleet": {"datasource", "cluster", "namespace"},
}
RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
# The systemd unit (a cgroup named like one) some of the workloads run in, so
# the fleet dashboard's per-unit tables have data.
UNIT = f"sp-fleet-{os.getpid()}.service"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Panel types that show numbers, hence need a unit; and the Grafana unit ids used.
NUMERIC_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "state-timeline",
                 "status-history", "barchart", "histogram"}
UNITS = {"ops", "s", "percentunit", "bytes", "short", "none", "dateTimeFromNow"}

JOB = "slowpath"
RATE_INTERVAL = "15s"  # what Grafana's $__rate_interval is with a 1 s scrape interval, rounded up
RANGE = "1m"           # $__range: the test's "time range"

# What each signal's workloads do and which of its panels stay empty or at
# zero here (helpers/signal_facts/).
FACTS = declared()
WORKLOADS = [args for facts in FACTS.values() for args in facts.DASHBOARD_WORKLOADS]
UNIT_WORKLOADS = [args for facts in FACTS.values() for args in facts.DASHBOARD_UNIT_WORKLOADS]

# Panel queries that may return no data in this test, and why. Everything else
# must return at least one finite sample. Keep this list short: each entry is a
# signal the test machine cannot produce on demand (each signal's
# DASHBOARD_EMPTY_ALLOWED says why).
EMPTY_ALLOWED = {key for facts in FACTS.values() for key in facts.DASHBOARD_EMPTY_ALLOWED}
# Namespaces and pods come from the Kubernetes API (--kubernetes.enabled),
# which this host's agent does not have: the fleet dashboard's namespace and
# pod tables stay empty here. promtool's cases (tests/prometheus) compute
# those recorded levels from pod-labelled input, and the query text is the
# same as for the unit and node tables, which do have data here.
# The fleet rows are the signals' declared ones (`slowpath signals`).
for _title in (r["fleet"]["title"] for d in declarations() for r in d["recorded"] if r["fleet"]):
    for _level in ["namespaces", "pods"]:
        EMPTY_ALLOWED.add(("slowpath-fleet", f"{_title}: top {_level}", "A"))
EMPTY_ALLOWED.add(("slowpath-fleet", "Estimated CPU: top pods", "A"))
# a series only while an agent's web config cannot be read (test_web_config.py)
EMPTY_ALLOWED.add(("slowpath-overview", "Lost events and scrape errors", "D"))
for _facts in FACTS.values():
    # a signal this machine cannot produce (memory without THP): nothing to show
    if not producible(_facts):
        EMPTY_ALLOWED |= _facts.DASHBOARD_EMPTY_UNLESS_PRODUCIBLE

# Queries whose normal value is 0 (health signals, fallbacks this machine does
# not have: each signal's DASHBOARD_ZERO_NORMAL). Every other query must show
# a positive value: data the workloads produced, not just a stale series.
ZERO_NORMAL = {key for facts in FACTS.values() for key in facts.DASHBOARD_ZERO_NORMAL} | {
    ("slowpath-overview", "Agents up / down", "B"),                      # none down
    ("slowpath-overview", "Lost events and scrape errors", "A"),
    ("slowpath-overview", "Lost events and scrape errors", "B"),
    ("slowpath-overview", "Lost events and scrape errors", "C"),  # no series limit reached
    ("slowpath-overview", "slowpath's own cost (% of a core)", "B"),  # 10 ms CPU-time ticks: an idle agent may show 0
}


def load(name):
    return json.loads((DASHBOARDS_DIR / name).read_text())


def all_panels(dash):
    """Every panel, rows and panels nested in collapsed rows included."""
    for panel in dash.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def data_panels(dash):
    return [p for p in all_panels(dash) if p["type"] != "row"]


def targets(dash):
    """(panel, target) for every query of every panel."""
    return [(p, t) for p in data_panels(dash) for t in p.get("targets", [])]


def variables(dash):
    return dash.get("templating", {}).get("list", [])


@pytest.fixture(params=sorted(DASHBOARDS), scope="module")
def dashboard(request):
    return request.param, load(request.param)


# --- (a) generated from code -----------------------------------------------------------


def test_committed_json_is_what_the_generator_produces(tmp_path):
    # the pinned library's virtualenv is scripts/setup.sh --test's (generate.sh would install it)
    venv = subprocess.run([str(DASHBOARDS_DIR / "generate.sh"), "--check"], capture_output=True, text=True)
    if venv.returncode != 0:
        pytest.fail(f"grafana-foundation-sdk missing: {venv.stderr.strip()[-2000:]}", pytrace=False)
    result = subprocess.run([str(DASHBOARDS_DIR / "generate.sh"), str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(DASHBOARDS)
    assert sorted(p.name for p in DASHBOARDS_DIR.glob("*.json")) == sorted(DASHBOARDS)
    for name in DASHBOARDS:
        fresh = (tmp_path / name).read_text()
        assert (DASHBOARDS_DIR / name).read_text() == fresh, \
            f"dashboards/{name} differs from dashboards/src/: run dashboards/generate.sh and commit the JSON"


def panel_exprs(dash):
    return [t.get("expr", "") for _, t in targets(dash)]


def reads(exprs, family, selector):
    """Whether one of the queries reads `family` with `selector`, or with
    the selector's labels as a grouping (by (trigger) shows trigger="direct")."""
    matchers = [m for m in selector.split(", ") if m]
    return any(family in e and all(m in e or re.search(rf"by \([^)]*\b{m.split('=')[0]}\b", e) for m in matchers)
               for e in exprs)


def test_every_declared_rate_has_panels_in_overview_and_drilldown():
    """Each signal's recorded rates, as the chart's signals.json declares
    them (test_helm holds it to `slowpath signals`), are read with their
    selector by a panel of Overview and of Drill-down; the fleet has a pod table
    of every fleet row."""
    signals = json.loads((REPO / "deploy/helm/slowpath/files/signals.json").read_text())["signals"]
    assert {s["name"] for s in signals} == {d["name"] for d in declarations()}
    for name in ("slowpath-overview.json", "slowpath-drilldown.json"):
        exprs = panel_exprs(load(name))
        for s in signals:
            for r in s["recorded"]:
                assert reads(exprs, r["family"], r["selector"]), f"{name}: no panel reads {s['name']}'s {r['name']}"
    fleet = panel_exprs(load("slowpath-fleet.json"))
    for s in signals:
        for r in s["recorded"]:
            if r["fleet"]:
                assert any(f"namespace_pod:{r['name']}:rate5m" in e for e in fleet), r["name"]


def test_a_new_signal_gets_its_panels_with_no_edit_under_dashboards(tmp_path):
    """A scratch signal appended to a copy of signals.json (as deploy/render.sh
    would write it for a new declaration): the generator gives it a row in
    Overview and in Drill-down, with its top processes, its alert's threshold
    and its estimated CPU."""
    signals = json.loads((REPO / "deploy/helm/slowpath/files/signals.json").read_text())
    scratch = {"name": "scratch", "summary": "scratch calls, a signal made up by the test", "case": "scratch storms",
               "recorded": [{"name": "slowpath_scratch_calls", "family": "slowpath_scratch_calls_total",
                             "selector": 'kind="slow"', "fleet": {"title": "Scratch calls",
                                                                  "meaning": "scratch calls per second"}}],
               "cost": [{"slow_path": "scratch", "kind": "gauge", "gauge": "slowpath_syscall_seconds",
                         "recorded": "slowpath_scratch_calls", "family": "slowpath_scratch_calls_total",
                         "selector": 'kind="slow"'}],
               "syscalls": True,
               "alert": {"name": "SlowpathScratchStorm", "rate": "slowpath_scratch_calls",
                         "threshold": {"key": "scratchPerProcess", "default": "1234", "why": ""},
                         "for": {"key": "scratch", "default": "10m", "why": ""}, "findings": "scratch",
                         "summary": "", "description": "", "runbook": "scratch-storms"}}
    signals["signals"].append(scratch)
    copy = tmp_path / "signals.json"
    copy.write_text(json.dumps(signals))
    out = tmp_path / "out"
    result = subprocess.run([str(DASHBOARDS_DIR / "generate.sh"), str(out)], capture_output=True, text=True,
                            timeout=900, env={**os.environ, "SLOWPATH_SIGNALS_JSON": str(copy)})
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("slowpath-overview.json", "slowpath-drilldown.json"):
        dash = json.loads((out / name).read_text())
        assert "scratch storms" in dash["description"], dash["description"]  # the cases it covers, named
        rows = [p["title"] for p in all_panels(dash) if p["type"] == "row"]
        assert "Scratch calls: scratch calls, a signal made up by the test" in rows, (name, rows)
        panels = [p for p in data_panels(dash) if "slowpath_scratch_calls_total" in json.dumps(p.get("targets"))]
        assert len(panels) == 2, (name, [p["title"] for p in panels])
        rate_panel, cost_panel = panels
        assert 'kind="slow"' in rate_panel["targets"][0]["expr"]
        assert "SlowpathScratchStorm fires above 1234/s" in rate_panel["description"]
        steps = rate_panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps] == [None, 1234], steps
        assert "slowpath_syscall_seconds" in cost_panel["targets"][0]["expr"], cost_panel["title"]
    fleet = json.dumps(json.loads((out / "slowpath-fleet.json").read_text()))
    assert "cluster:slowpath_scratch_calls:rate5m" in fleet and "namespace_pod:slowpath_scratch_calls:rate5m" in fleet


# --- (b) structure ----------------------------------------------------------------------------


def test_uid_title_and_schema_version(dashboard):
    name, dash = dashboard
    assert dash["uid"] == DASHBOARDS[name]
    assert dash["title"].startswith("slowpath")
    assert isinstance(dash.get("schemaVersion"), int) and dash["schemaVersion"] >= 39
    assert "id" not in dash or dash["id"] is None  # instance-specific: never committed


def test_panel_ids_are_unique(dashboard):
    _, dash = dashboard
    ids = [p["id"] for p in all_panels(dash)]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_layout_fits_the_grid_without_overlaps(dashboard):
    _, dash = dashboard
    cells = {}
    for p in dash["panels"]:  # expanded rows: panels live at the top level
        if p["type"] == "row":
            assert p.get("collapsed") is False and p.get("panels", []) == [], \
                f"row {p['title']!r}: Grafana drops panels nested in an expanded row"
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def walk(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + "/" + k, k, v
            yield from walk(v, path + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


def test_every_panel_and_query_uses_the_datasource_variable(dashboard):
    _, dash = dashboard
    ds_vars = [v for v in variables(dash) if v["type"] == "datasource"]
    assert [(v["name"], v["query"]) for v in ds_vars] == [("datasource", "prometheus")]
    for panel in data_panels(dash):
        assert panel.get("datasource") == DATASOURCE, panel["title"]
        assert panel.get("targets"), f"{panel['title']!r} has no query"
        for t in panel["targets"]:
            assert t.get("datasource") == DATASOURCE, (panel["title"], t["refId"])
            assert t.get("expr", "").strip(), (panel["title"], t["refId"])
    for v in variables(dash):
        if v["type"] == "query":
            assert v.get("datasource") == DATASOURCE, v["name"]
    # Nowhere a hard-coded data source: every datasource reference is the
    # variable, but for Grafana's own built-in annotations (first).
    builtin = [a for a in dash["annotations"]["list"] if a.get("builtIn") == 1]
    assert builtin == dash["annotations"]["list"][:1], dash["annotations"]["list"]
    for path, key, value in walk(dash):
        if key == "datasource" and not path.startswith(("/templating/list[0]", "/annotations/list[0]")):
            assert value == DATASOURCE, f"{path}: {value}"


# A series named in a query (a family, a recorded series, up, process_*) and
# its matchers, if any; the quoted strings of the query are blanked first (a
# __name__ regex names families too).
SERIES = re.compile(r'(?<![\w:])((?:[a-z_]+:)?(?:slowpath_[a-z0-9_]+|process_[a-z0-9_]+|up)(?::[a-z0-9_]+)?)'
                    r'(?![\w:])(\{[^}]*\})?')


def test_every_series_is_selected_by_the_cluster_variable(dashboard):
    """The cluster variable comes first and every series any query, variable
    or annotation reads is selected by it (cluster=~"$cluster"): under a
    central Prometheus, Thanos or Mimir a dashboard shows the clusters
    chosen, and with one Prometheus (no such label) All matches every
    series."""
    _, dash = dashboard
    names = [v["name"] for v in variables(dash)]
    assert names[:2] == ["datasource", "cluster"], names
    (cluster,) = [v for v in variables(dash) if v["name"] == "cluster"]
    assert cluster["query"] == "label_values(slowpath_build_info, cluster)" and cluster["allValue"] == ".*"
    texts = [(p["title"], t["expr"]) for p, t in targets(dash)]
    texts += [(f"variable {v['name']}", v.get("query", "")) for v in variables(dash) if v["name"] != "cluster"]
    texts += [(f"annotation {a['name']}", a.get("expr", "")) for a in dash["annotations"]["list"]]
    unselected = []
    for where, text in texts:
        blanked = re.sub(r'"[^"]*"', '""', text)
        unselected += [(where, m.group(1)) for m in SERIES.finditer(blanked)
                       if 'cluster=~""' not in (m.group(2) or "")]
        unselected += [(where, m) for m in re.findall(r'(?<![\w:])\{__name__[^}]*\}', text)
                       if 'cluster=~"$cluster"' not in m]
    assert not unselected, unselected
    assert all('cluster=~"$cluster"' in text for _, text in texts if 'cluster=~""' in re.sub(r'"[^"]*"', '""', text))


def test_every_variable_is_defined_and_used(dashboard):
    _, dash = dashboard
    names = [v["name"] for v in variables(dash)]
    assert len(names) == len(set(names))
    assert set(names) == VARIABLES[dash["uid"]]
    for i, v in enumerate(variables(dash)):
        rest = dict(dash)
        rest["templating"] = {"list": variables(dash)[:i] + variables(dash)[i + 1:]}
        text = json.dumps(rest)
        name = re.escape(v["name"])
        assert re.search(rf"\$(\{{{name}[}}:]|{name}\b)|\[\[{name}\]\]", text), f"${v['name']} is never used"


def test_namespace_and_pod_match_hosts_without_kubernetes(dashboard):
    """namespace/pod are empty (absent) outside Kubernetes: All must be `.*`."""
    _, dash = dashboard
    for v in variables(dash):
        if v["name"] in ("namespace", "pod"):
            assert v["includeAll"] is True and v["allValue"] == ".*", v["name"]
            assert v["current"]["value"] in ("$__all", ["$__all"]), v["name"]
        if v["name"] == "job":
            # `up` and `process_*` are not slowpath's own metrics: job=~".*"
            # would select every target of the Prometheus. Grafana's default
            # All is the regex of the listed (slowpath) jobs.
            assert v.get("allValue") in (None, ""), v


def expected_unit(panel):
    """The unit a panel's queries call for, where that is unambiguous."""
    exprs = [t["expr"] for t in panel["targets"]]
    joined = " ".join(exprs)
    if "process_cpu_seconds_total" in joined:
        return "percentunit"  # CPU seconds per second: a fraction of a core
    if "process_resident_memory_bytes" in joined:
        return "bytes"
    if re.search(r"histogram_quantile|slowpath_compaction_seconds_total|slowpath_clock_read_seconds|"
                 r"scrape_duration_seconds", joined):
        return "s"
    if " / " in joined:
        return "percentunit"
    if re.search(r"rate\(slowpath_\w+_seconds_total", joined):
        return "percentunit"  # seconds per second: a share of the time
    if re.search(r"\* on \(instance\)(?: group_left)? max by \(instance\) \(slowpath_\w+_seconds\b", joined):
        return "percentunit"  # events per second times seconds per event: a fraction of a core
    if panel["type"] != "heatmap" and all("rate(" in e for e in exprs):
        return "ops"
    if all("increase(" in e for e in exprs):
        return "short"
    return None


def test_every_panel_has_a_description_and_a_unit(dashboard):
    _, dash = dashboard
    for panel in data_panels(dash):
        assert len(panel.get("description", "").strip()) >= 80, f"{panel['title']!r}: no useful description"
        if panel["type"] in NUMERIC_TYPES:
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
            assert unit in UNITS, f"{panel['title']!r}: unit {unit!r}"
            want = expected_unit(panel)
            assert want is None or unit == want, f"{panel['title']!r}: unit {unit!r}, queries call for {want!r}"
        if panel["type"] == "heatmap":
            assert panel["options"]["yAxis"]["unit"] == "s"
            assert panel["options"]["calculate"] is False  # Prometheus buckets, not Grafana's


def test_queries_name_only_documented_metrics(dashboard):
    """Catches typos in metric names that an empty result would not (a panel
    whose series do not exist yet): every name must be in docs/metrics.md (the
    families) or docs/alerts.md (the recording rules)."""
    _, dash = dashboard
    readme = (REPO / "docs" / "metrics.md").read_text() + (REPO / "docs" / "alerts.md").read_text()
    documented = set(re.findall(r"\b(slowpath_[a-z_]+)", readme)) | {"up", "process_cpu_seconds_total",
                                                                     "process_resident_memory_bytes"}
    assert "process_*" in readme
    texts = [t["expr"] for _, t in targets(dash)] + [v.get("query", "") for v in variables(dash)] \
        + [a.get("expr", "") for a in dash.get("annotations", {}).get("list", [])]
    for text in texts:
        for name in re.findall(r"\b((?:slowpath|process)_[a-z_]+)", text):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in documented or base in documented, f"{name} in {text}"
        for regex in re.findall(r'__name__=~"([^"]+)"', text):
            for name in ["slowpath_clock_syscalls_total", "slowpath_thp_fault_fallbacks_total"]:
                assert re.fullmatch(regex, name), (regex, name)


def test_provisioning_examples():
    yaml = pytest.importorskip("yaml")
    ds = yaml.safe_load((DASHBOARDS_DIR / "provisioning/datasources/slowpath-prometheus.yaml").read_text())
    assert ds["apiVersion"] == 1
    [source] = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
    dash = yaml.safe_load((DASHBOARDS_DIR / "provisioning/dashboards/slowpath.yaml").read_text())
    assert dash["apiVersion"] == 1
    [provider] = dash["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


# --- (c) every query on real data ------------------------------------------------------------


@pytest.fixture(scope="module")
def agent(agent_bin, tmp_path_factory):
    """The agent as users run it: default flags (no pid label, default canary),
    but findings judged on an 8 s window (the findings tables show the
    workloads' storms within seconds, not minutes)."""
    a = Agent(agent_bin, ["--findings.window=8s"], tmp_path_factory.mktemp("agent") / "agent.log")
    yield a
    assert a.stop() == 0, a.log_text()


@pytest.fixture(scope="module")
def prometheus(agent, tmp_path_factory):
    """Prometheus 3 (the release users run) with the shipped recording rules."""
    work = tmp_path_factory.mktemp("prometheus")
    (work / "rules.yaml").write_text(RULES.read_text())  # the fleet dashboard reads the recording rules
    with prometheus_server(work, agent.port, job=JOB, rule_files=["rules.yaml"]) as base:
        yield base


def api(base, endpoint, **params):
    """GET /api/v1/<endpoint>; returns the decoded body, errors (HTTP 400/422) included."""
    url = f"{base}/api/v1/{endpoint}?" + urllib.parse.urlencode(params, doseq=True)
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}") | {"http_status": e.code}


@pytest.fixture(scope="module")
def live(prometheus, workload_bin, tmp_path_factory):
    """Workloads that produce every signal (each signal's
    DASHBOARD_WORKLOADS), running while the queries run."""
    # Manual compaction by a process whose comm is the workload's: a bash
    # started through a symlink named sp-workload (comm is the exec'd name), so
    # the drill-down on comm=sp-workload has compaction data too.
    bindir = tmp_path_factory.mktemp("bin")
    (bindir / "sp-workload").symlink_to(shutil.which("bash"))
    stop = threading.Event()
    errors = []

    unit_cgroup = cgroup2_root() / "slowpath-test.slice" / UNIT
    unit_cgroup.mkdir(parents=True)

    def in_unit(*args):
        """A workload run in the unit's cgroup (the fleet's per-unit tables)."""
        subprocess.run([str(workload_bin), *map(str, args)], check=True, stdout=subprocess.DEVNULL, timeout=120,
                       preexec_fn=lambda: (unit_cgroup / "cgroup.procs").write_text("0\n"))

    def compact():
        subprocess.run([str(bindir / "sp-workload"), "-c", "echo 1 > /proc/sys/vm/compact_memory"],
                       check=True, timeout=120)

    compact()

    def loop():
        try:
            for i in itertools.count():
                if stop.is_set():
                    break
                if i % 10 == 5:
                    compact()  # again, so that rates and increases see it (a new series starts at its 1st count)
                # each signal's workloads, then some again in a systemd unit
                for args in WORKLOADS:
                    run_workload(workload_bin, *args)
                for args in UNIT_WORKLOADS:
                    in_unit(*args)
        except Exception as e:  # reported by the tests
            errors.append(e)

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    try:
        yield errors
    finally:
        stop.set()
        worker.join(timeout=60)
        assert not worker.is_alive()
        unit_cgroup.rmdir()
        unit_cgroup.parent.rmdir()


def substitute(text, values):
    text = text.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", RANGE)
    text = text.replace("$__interval", RATE_INTERVAL)
    for name, value in values.items():
        text = re.sub(rf"\$\{{{name}\}}|\$\{{{name}:[a-z]+\}}|\${name}\b", lambda _: value, text)
    assert "$" not in text, f"unsubstituted variable in {text}"
    return text


def values_for(uid, agent):
    if uid == "slowpath-fleet":
        return {"cluster": ".*", "namespace": ".*"}
    common = {"cluster": ".*", "job": JOB, "instance": f"127.0.0.1:{agent.port}", "namespace": ".*", "pod": ".*"}
    if uid == "slowpath-drilldown":
        return common | {"comm": "sp-workload"}  # one process: the workload's
    return common | {"comm": ".*"}                # All


def result_values(result):
    """Float values of an instant (vector/scalar) or range (matrix) result."""
    data = result["data"]
    if data["resultType"] == "scalar":
        return [float(data["result"][1])]
    out = []
    for series in data["result"]:
        points = series.get("values") or [series["value"]]
        out += [float(v) for _, v in points]
    return out


def run_panel_queries(base, dash, values):
    """{(uid, title, refId): problem or None} for every query of the dashboard,
    as an instant query at now and, for range targets, as a range query."""
    now = time.time()
    report = {}
    for panel, t in targets(dash):
        key = (dash["uid"], panel["title"], t["refId"])
        expr = substitute(t["expr"], values)
        problem = None
        calls = [("query", {"query": expr, "time": now})]
        if t.get("range", True) and not t.get("instant", False):
            calls.append(("query_range", {"query": expr, "start": now - 30, "end": now, "step": 5}))
        for endpoint, params in calls:
            body = api(base, endpoint, **params)
            if body.get("status") != "success":
                problem = f"invalid ({endpoint}): {body.get('error', body)}\n    {expr}"
                break
            finite = [v for v in result_values(body) if math.isfinite(v)]
            if not finite and key not in EMPTY_ALLOWED:
                problem = f"no data ({endpoint}): {body['data']['result']}\n    {expr}"
                break
            if finite and not any(v > 0 for v in finite) and key not in ZERO_NORMAL | EMPTY_ALLOWED:
                problem = f"only zeros ({endpoint}): {body['data']['result']}\n    {expr}"
                break
        report[key] = problem
    return report


def test_every_annotation_query_is_valid(prometheus, live, agent):
    """The annotations' queries (the clocksource switch) run: valid PromQL
    on every dashboard that has them. Empty here: this node's clocksource
    does not change during the test (test_guest.py switches one). Grafana's
    built-in annotations have no query (test_alerts.py checks them)."""
    annotated = 0
    for dash in [load(n) for n in sorted(DASHBOARDS)]:
        for note in dash.get("annotations", {}).get("list", []):
            if note.get("builtIn") == 1:
                continue
            assert note["datasource"] == DATASOURCE, note
            expr = substitute(note["expr"], values_for(dash["uid"], agent))
            body = api(prometheus, "query_range", query=expr, start=time.time() - 60, end=time.time(), step=5)
            assert body.get("status") == "success", (dash["uid"], note["name"], body)
            annotated += 1
    assert annotated == 2  # overview and drill-down


def test_every_variable_query_resolves(prometheus, live, agent):
    for name in sorted(DASHBOARDS):
        dash = load(name)
        values = values_for(dash["uid"], agent)
        for v in variables(dash):
            if v["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((?:(.*),\s*)?(\w+)\)", v["query"])
            assert m, v["query"]
            selector, label = m.groups()
            params = {"match[]": substitute(selector, values)} if selector else {}
            deadline = time.monotonic() + 30
            while True:
                body = api(prometheus, f"label/{label}/values", **params)
                assert body["status"] == "success", (v["name"], body)
                found = body["data"]
                want = {"job": JOB, "instance": values.get("instance"), "comm": "sp-workload"}.get(label)
                # namespace and pod: no Kubernetes here, so no values (All = .* matches).
                if want is None or want in found or time.monotonic() > deadline:
                    break
                time.sleep(1)
            if want is not None:
                assert want in found, (name, v["name"], found)


def test_allowlist_names_existing_queries():
    keys = {(load(n)["uid"], p["title"], t["refId"]) for n in DASHBOARDS for p, t in targets(load(n))}
    assert EMPTY_ALLOWED <= keys, EMPTY_ALLOWED - keys
    assert ZERO_NORMAL <= keys, ZERO_NORMAL - keys


def test_every_panel_query_returns_data(prometheus, live, agent):
    dashboards = [load(n) for n in sorted(DASHBOARDS)]
    deadline = time.monotonic() + 120
    while True:
        assert not live, f"workload failed: {live}"
        report = {}
        for dash in dashboards:
            report |= run_panel_queries(prometheus, dash, values_for(dash["uid"], agent))
        failing = {k: v for k, v in report.items() if v}
        if not failing or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert len(report) == sum(len(targets(d)) for d in dashboards)
    assert not failing, "\n".join(f"{uid} / {title} / {ref}: {problem}"
                                  for (uid, title, ref), problem in sorted(failing.items()))
