"""Shared building blocks of the slowpath dashboards (grafana-foundation-sdk).

Every panel and every query points at the `${datasource}` template variable:
no datasource uid is hard-coded, so the JSON imports into any Grafana whose
Prometheus scrapes slowpath.
"""

import json
import os
from pathlib import Path

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# The agent's signals, from its declarations (`slowpath signals`) in the form
# deploy/signals.py gives the chart: collector names, recorded rates, costs,
# alerts, fleet rows. ../generate.sh writes the file and names it here.
if not os.environ.get("SLOWPATH_SIGNALS_JSON"):
    raise SystemExit("common.py: SLOWPATH_SIGNALS_JSON unset: run dashboards/generate.sh")
SIGNALS = json.loads(Path(os.environ["SLOWPATH_SIGNALS_JSON"]).read_text())["signals"]

# Counters that carry the per-process labels (comm, cgroup, unit; namespace,
# pod, container with Kubernetes; pid with --metrics.pid-label): the variables
# of the per-process filters take their values from these series, the
# counters of every signal's recorded rates (a recording rule keeps those
# labels).
PER_PROCESS_METRICS = "({})".format("|".join(sorted({r["family"] for s in SIGNALS for r in s["recorded"]})))

# Time-zone file checks (stats of /etc/localtime, glibc's localtime() and
# friends with TZ unset) per second of one process above which the doctor's
# tzfile_checks finding and the SlowpathTzfileChecks alert fire.
TZFILE_CHECKS_PER_SECOND = 1000

# A reference series drawn dashed (a threshold that differs per node).
DASHED = dm.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})

# Clocksources the vDSO cannot read: every clock_gettime/gettimeofday/time
# then enters the kernel (docs/metrics.md, case 1).
NON_VDSO_CLOCKSOURCES = "xen|hpet|acpi_pm|jiffies"

# Grafana unit ids used here.
OPS = "ops"  # per-second rates
SECONDS = "s"
RATIO = "percentunit"
BYTES = "bytes"
COUNT = "short"
NONE = "none"  # text-like panels (info metrics mapped to words)
SINCE = "dateTimeFromNow"  # Unix time in ms, shown as "5 minutes ago"

# The agent's findings with since when they hold: slowpath_finding_start_time_seconds
# (in ms) carrying slowpath_finding_info's severity and known_source, one row per
# finding and process. `selector` narrows both.
FINDING_LABELS = "cluster, instance, finding, comm, cgroup, unit, namespace, pod, container"

# The cluster a series comes from: the label kubernetes-mixin calls clusterLabel
# (the chart's prometheusRule.clusterLabel, the mixin's _config.clusterLabel,
# which rewrite it in the dashboards they ship), set by a central Prometheus,
# Thanos or Mimir. With one Prometheus no series has it, and the variable's
# All (.*) matches them all.
CLUSTER = 'cluster=~"$cluster"'


def findings_expr(selector, by):
    return (f"1000 * max by ({by}) (slowpath_finding_start_time_seconds{{{selector}}}"
            f" * on ({FINDING_LABELS}) group_left (severity, known_source) slowpath_finding_info{{{selector}}})")


class Ids:
    """Panel ids, unique within one dashboard, in layout order."""

    def __init__(self):
        self.last = 0

    def __call__(self):
        self.last += 1
        return self.last


def datasource_variable():
    return (
        db.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .description("The Prometheus that scrapes the slowpath agents.")
    )


def cluster_variable():
    """The first variable of every dashboard: the clusters of the agents' nodes."""
    return query_variable(
        "cluster", "Cluster", "label_values(slowpath_build_info, cluster)",
        "The cluster of the nodes (the cluster label of a central Prometheus, Thanos or Mimir: the chart's "
        "prometheusRule.clusterLabel). Empty with one Prometheus: All (.*) also matches series without it.",
        multi=True, include_all=True)


def query_variable(name, label, query, description, *, multi, include_all, all_value=".*"):
    var = (
        db.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC)
        .multi(multi)
        .include_all(include_all)
    )
    if include_all:
        # all_value `.*` also matches the empty value: namespace="" and pod=""
        # outside Kubernetes (or a missing label) still pass the filter. None:
        # Grafana's own All, the regex of every listed value (for job, so that
        # `up` and `process_*` only ever select slowpath's targets).
        if all_value is not None:
            var = var.all_value(all_value)
        var = var.current(
            dm.VariableOption(selected=True, text=["All"] if multi else "All",
                              value=["$__all"] if multi else "$__all")
        )
    return var


def target(expr, legend="", ref="A", *, instant=False, fmt=None):
    q = (
        prometheus.Dataquery()
        .expr(expr)
        .ref_id(ref)
        .datasource(DATASOURCE)
        .editor_mode(pm.QueryEditorMode.CODE)
        .legend_format(legend or "__auto")
    )
    q = q.instant() if instant else q.range()
    if fmt is not None:
        q = q.format(fmt)
    return q


def _common(panel, pid, title, description, unit, targets, w, h):
    panel = (
        panel.id(pid)
        .title(title)
        .description(" ".join(description.split()))
        .datasource(DATASOURCE)
        .unit(unit)
        .span(w)
        .height(h)
    )
    for t in targets:
        panel = panel.with_target(t)
    return panel


def thresholds(*steps):
    """steps: (value or None, color) pairs, the first with None (base)."""
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def timeseries_panel(pid, title, description, unit, targets, *, w=12, h=8,
                     threshold_steps=None, stack=False, min_zero=True, links=()):
    panel = _common(timeseries.Panel(), pid, title, description, unit, targets, w, h)
    panel = (
        panel.line_width(1)
        .fill_opacity(10)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .calcs(["mean", "max", "lastNotNull"])
            .sort_by("Max")
            .sort_desc(True)
        )
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if min_zero:
        panel = panel.min(0)
    if stack:
        panel = panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    if threshold_steps:
        panel = panel.thresholds(thresholds(*threshold_steps)).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    if links:
        panel = panel.data_links(list(links))
    return panel


def stat_panel(pid, title, description, unit, targets, *, w=6, h=4, threshold_steps=None,
               text_mode=cm.BigValueTextMode.AUTO, color_mode=cm.BigValueColorMode.VALUE,
               mappings=None, calc="lastNotNull"):
    panel = _common(stat.Panel(), pid, title, description, unit, targets, w, h)
    panel = (
        panel.text_mode(text_mode)
        .color_mode(color_mode)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .reduce_options(cb.ReduceDataOptions().calcs([calc]).values(False))
        .thresholds(thresholds(*(threshold_steps or [(None, "green")])))
    )
    if mappings:
        panel = panel.mappings(mappings)
    return panel


def state_timeline_panel(pid, title, description, targets, mappings, *, w=12, h=8):
    panel = _common(statetimeline.Panel(), pid, title, description, NONE, targets, w, h)
    return (
        panel.mappings(mappings)
        .show_value(cm.VisibilityMode.AUTO)
        .merge_values(True)
        .row_height(0.8)
        .fill_opacity(70)
        .thresholds(thresholds((None, "green")))
        .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
    )


def table_panel(pid, title, description, targets, *, w=12, h=6, hide=("Time", "Value"),
                overrides=(), unit=NONE):
    panel = _common(table.Panel(), pid, title, description, unit, targets, w, h)
    panel = panel.with_transformation(
        dm.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {name: True for name in hide}, "indexByName": {}, "renameByName": {}},
        )
    )
    for name, props in overrides:
        panel = panel.override_by_name(name, props)
    return panel


def heatmap_panel(pid, title, description, targets, *, y_unit, cell_unit, w=12, h=8):
    panel = _common(heatmap.Panel(), pid, title, description, cell_unit, targets, w, h)
    return (
        panel.calculate(False)
        .y_axis(heatmap.YAxisConfig().unit(y_unit).axis_placement(cm.AxisPlacement.LEFT))
        .cell_values(heatmap.CellValues().unit(cell_unit))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(hm.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .fill("dark-orange")
            .scale(hm.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
        )
        .rows_frame(heatmap.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.LE))
        .show_legend()
        .mode(cm.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
    )


def value_mappings(values):
    """values: {value: (text, color)} for a value-to-text mapping."""
    return [
        dm.ValueMap(options={k: dm.ValueMappingResult(text=t, color=c, index=i)
                             for i, (k, (t, c)) in enumerate(values.items())})
    ]


def regex_mapping(pattern, text, color):
    return dm.RegexMap(options=dm.DashboardRegexMapOptions(pattern=pattern,
                                                           result=dm.ValueMappingResult(text=text, color=color, index=0)))


def row(pid, title):
    return db.Row(title).id(pid).collapsed(False)


def dashboard(title, uid, description, variables, other):
    """A slowpath dashboard: shared tags, range, refresh and cursor, a link to
    the `other` dashboard (a `link(...)`), the given variables, and Grafana's
    built-in annotations (alerts_annotation)."""
    return (
        db.Dashboard(title)
        .uid(uid)
        .annotation(alerts_annotation())
        .description(description)
        .tags(["slowpath", "ebpf", "kernel"])
        .time("now-1h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .link(other)
        .variables(variables)
    )


def alerts_annotation():
    """Grafana's built-in "Annotations & Alerts": the state changes of the
    Grafana-managed alerts linked to this dashboard's panels (dashboardUid and
    panelId in provisioning/alerting/slowpath-alerts.yaml, dashboards/src/
    alerts.py) and annotations made on it, as Grafana adds to a new dashboard."""
    return (db.AnnotationQuery().name("Annotations & Alerts").built_in(1)
            .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True).hide(True).icon_color("rgba(0, 211, 255, 1)").type("dashboard"))


def clocksource_switch_annotation(selector):
    """A Grafana annotation at each clocksource switch of the nodes that
    `selector` (PromQL label matchers) picks, over the two minutes after
    it: a jump of the fallback panels lines up with it (from, to and reason
    are in slowpath_clocksource_last_change_info and the alert; the SDK's
    annotation has no tagKeys to show them)."""
    expr = (f"max by (instance, from, to, reason) (slowpath_clocksource_last_change_info{{{selector}}}) "
            f"and on (instance) (changes(slowpath_clocksource_changes_total{{{selector}}}[2m]) > 0)")
    return (db.AnnotationQuery().name("Clocksource switch").datasource(DATASOURCE).enable(True)
            .hide(False).icon_color("red").expr(expr))


def link(title, url, tooltip):
    return db.DashboardLink(title).type(dm.DashboardLinkType.LINK).url(url).tooltip(tooltip) \
        .include_vars(True).keep_time(True).target_blank(False).as_dropdown(False).icon("dashboard").tags([])


def data_link(title, url):
    return db.DashboardLink(title).url(url).target_blank(False)
