"""Grafana-managed alert rules (file provisioning) from the Prometheus rules
file deploy/prometheus/slowpath-rules.yaml, which the chart renders from the
agent's declarations: one Grafana rule per Prometheus alert, with its name,
severity, `for`, expression (and so its threshold) and annotations.

What changes on the way, and why:
- the recorded series an alert reads are replaced by the expressions that
  record them, so the rules work against a Prometheus that was not given the
  recording rules (teams that alert from Grafana often load none);
- the condition is Grafana's test for "the query returned this series"
  (`is_number($A) || is_nan($A) || is_inf($A)`), so a series fires exactly
  when the Prometheus expression, comparison included, returns it;
- `$value` in the annotations becomes `$values.A.Value`, the query's value
  (Grafana's `$value` is a description of every query's result);
- an alert name the Prometheus rules use twice (SlowpathEventsLost, warning
  and info) gets its severity in the Grafana title: Grafana before 12 wants
  titles unique in a folder. Its `alertname` is then the title;
- each rule is linked to a panel (dashboardUid, panelId: the SDK's rule has
  no such fields, so they are added to its JSON) of the dashboard its
  dashboard_url opens: the first time series (else any panel) that reads a
  family of the agent the alert's expression reads, so the alert's state
  changes show on that panel through the dashboard's built-in annotations.
"""

import json
import re

from grafana_foundation_sdk.builders import alerting as ab
from grafana_foundation_sdk.builders import expr as eb
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import alerting as am

# The uid provisioning/datasources/slowpath-prometheus.yaml gives the data source.
DATASOURCE_UID = "slowpath-prometheus"
FOLDER = "slowpath"
GROUP = "slowpath"
INTERVAL = "1m"
# How far back the instant query may look: the longest range in the rules (5m) with room.
LOOKBACK_SECONDS = 600
# Keys of Grafana's rule API that file provisioning takes from the group instead.
API_ONLY = ("folderUID", "orgID", "ruleGroup", "id", "updated", "provenance")


def recording_rules(rules):
    """{recorded name: expression} of a parsed rules file."""
    return {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"] if "record" in r}


def alert_rules(rules):
    return [r for g in rules["groups"] for r in g["rules"] if "alert" in r]


def inlined(expr, records):
    """`expr` with every recorded series replaced by its recording
    expression, in parentheses; recording rules read others, so repeat."""
    pattern = re.compile("|".join(re.escape(n) for n in sorted(records, key=len, reverse=True)))
    while True:
        new = pattern.sub(lambda m: f"({records[m.group(0)]})", expr)
        if new == expr:
            return " ".join(expr.split())
        expr = new


def grafana_template(text):
    """A Prometheus alert template as Grafana's: `$value` is query A's value."""
    return re.sub(r"\$value\b", "$values.A.Value", text)


def uid(name, severity, repeated):
    words = re.findall(r"[A-Z][a-z0-9]*", name.removeprefix("Slowpath"))
    base = "slowpath-" + "-".join(w.lower() for w in words)
    return f"{base}-{severity}" if repeated else base


def rule(alert, records, repeated):
    severity = alert["labels"]["severity"]
    title = f"{alert['alert']} ({severity})" if repeated else alert["alert"]
    query = (ab.Query("A").datasource_uid(DATASOURCE_UID)
             .relative_time_range(am.RelativeTimeRange(from_val=LOOKBACK_SECONDS, to=0))
             .model(pb.Dataquery().ref_id("A").expr(inlined(alert["expr"], records)).instant()))
    fires = (ab.Query("B").datasource_uid("__expr__")
             .model(eb.TypeMath().ref_id("B").expression("is_number($A) || is_nan($A) || is_inf($A)")))
    return (ab.Rule(title).uid(uid(alert["alert"], severity, repeated))
            .queries([query, fires]).condition("B")
            .for_val(alert.get("for", "0s"))
            .no_data_state("OK").exec_err_state("Error")
            .labels(dict(alert["labels"]))
            .annotations({k: grafana_template(v) for k, v in alert["annotations"].items()}))


FAMILY = re.compile(r"(?<![\w:])(slowpath_[a-z_]+?|up|process_[a-z_]+)(?:_bucket|_count|_sum)?(?![\w:])")
LINKED_TYPES = ("timeseries", "state-timeline")


def panels(dashboard):
    """Every panel of a dashboard's JSON, rows' panels included, in order."""
    for p in dashboard["panels"]:
        yield p
        yield from panels({"panels": p.get("panels", [])})


def families(expr):
    return set(FAMILY.findall(expr))


def linked_panel(alert, expr, dashboards):
    """(dashboard uid, panel id) for an alert with its recorded series
    inlined in `expr`: the dashboard its dashboard_url opens, and there the
    first panel of LINKED_TYPES, else of any type, whose queries read one of
    the families `expr` reads (else a family of the same subject, the word
    after slowpath_). Raises ValueError when none does: every alert
    has a panel to show it on."""
    uid = alert["annotations"]["dashboard_url"].split("/d/", 1)[1].split("/", 1)[0]
    plotted = [(p, {f for t in p.get("targets", []) for f in families(t.get("expr", ""))})
               for p in panels(dashboards[uid])]
    reads = families(expr)
    candidates = [p for p, plots in plotted if reads & plots]
    if not candidates:
        # a family no panel plots (the clocksource's switches are an
        # annotation): a panel of its subject, slowpath_<subject>_...
        subjects = tuple({"_".join(f.split("_")[:2]) + "_" for f in reads})
        candidates = [p for p, plots in plotted if any(f.startswith(subjects) for f in plots)]
    if not candidates:
        raise ValueError(f"{alert['alert']}: no panel of {uid} reads {sorted(reads)}")
    best = next((p for p in candidates if p["type"] in LINKED_TYPES), candidates[0])
    return uid, best["id"]


def build(rules, dashboards):
    """The provisioning document (apiVersion 1, one group) for a parsed
    Prometheus rules file; `dashboards` maps each dashboard's uid to its
    JSON, for the panel each rule is linked to."""
    records = recording_rules(rules)
    alerts = alert_rules(rules)
    names = [a["alert"] for a in alerts]
    built = []
    for a in alerts:
        r = json.loads(json.dumps(rule(a, records, names.count(a["alert"]) > 1).build(), cls=JSONEncoder))
        r["dashboardUid"], r["panelId"] = linked_panel(a, inlined(a["expr"], records), dashboards)
        built.append(r)
    # file provisioning takes the folder and group from the group; the
    # identity first, for whoever reads the file
    order = ["uid", "title", "condition", "data", "dashboardUid", "panelId", "for", "noDataState", "execErrState",
             "labels", "annotations"]
    built = [{k: r[k] for k in order if k in r} | {k: v for k, v in r.items() if k not in order and k not in API_ONLY}
             for r in built]
    return {"apiVersion": 1,
            "groups": [{"orgId": 1, "name": GROUP, "folder": FOLDER, "interval": INTERVAL, "rules": built}]}
