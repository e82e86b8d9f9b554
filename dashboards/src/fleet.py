"""slowpath / Fleet: which namespaces, pods, systemd units and nodes pay for
each slow path across every node a Prometheus scrapes, read from the
recording rules (deploy/prometheus/slowpath-rules.yaml: a few series per
node and pod, not every process), with links into the node and process
dashboards; and the node settings that make a whole node slow (clocksource,
THP)."""

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import prometheus as pm

from common import (CLUSTER, COUNT, NON_VDSO_CLOCKSOURCES, OPS, RATIO, SECONDS, SIGNALS, SINCE, Ids, dashboard, data_link,
                    cluster_variable, datasource_variable, findings_expr, link, query_variable, row, stat_panel, table_panel,
                    target, timeseries_panel)

UID = "slowpath-fleet"
CL = CLUSTER
NS = CLUSTER + ', namespace=~"$namespace"'


def fleet_rows():
    """[(recorded metric, title, unit, what one unit is and why it matters)]:
    each signal's recorded rates that declare a fleet row, in the agents'
    order of signals."""
    return [(r["name"], r["fleet"]["title"], SECONDS if r["family"].endswith("_seconds_total") else OPS,
             r["fleet"]["meaning"])
            for s in SIGNALS for r in s["recorded"] if r["fleet"]]


TO_NODE = data_link(
    "Node ${__data.fields.instance} in the overview",
    "/d/slowpath-overview/slowpath-overview?${__url_time_range}&${datasource:queryparam}"
    "&var-instance=${__data.fields.instance:percentencode}",
)
TO_POD = data_link(
    "Pod ${__data.fields.namespace}/${__data.fields.pod} in the drill-down",
    "/d/slowpath-drilldown/slowpath-drilldown?${__url_time_range}&${datasource:queryparam}"
    "&var-namespace=${__data.fields.namespace:percentencode}&var-pod=${__data.fields.pod:percentencode}",
)


def variables():
    return [
        datasource_variable(),
        cluster_variable(),
        query_variable("namespace", "Namespace",
                       f"label_values(namespace:slowpath_timer_wakeups:rate5m{{{CL}}}, namespace)",
                       "Kubernetes namespaces of the pod and namespace tables. Empty outside Kubernetes: "
                       "All (.*) also matches series without it.", multi=True, include_all=True),
    ]


def top_table(pid, level, metric, title, unit, description, links, ns=True):
    """The ten largest series of a recorded level, largest first."""
    expr = f"topk(10, {level}:{metric}:rate5m{{{NS if ns else CL}}} > 0)"
    panel = table_panel(
        pid, title, description,
        [target(expr, instant=True, fmt=pm.PromQueryFormat.TABLE)],
        w=6, h=8, hide=("Time",), unit=unit,
    )
    if links:
        panel = panel.data_links(links)
    return panel.sort_by([cb.TableSortByFieldState().display_name("Value").desc(True)])


def signal_rows(d, ids):
    for metric, name, unit, meaning in fleet_rows():
        d = d.with_row(row(ids(), name))
        why = f"{name}: {meaning}, as a 5-minute rate from the recording rules."
        d = d.with_panel(top_table(
            ids(), "namespace", metric, f"{name}: top namespaces", unit,
            f"{why} Summed over each Kubernetes namespace (agents with --kubernetes.enabled): the teams to talk "
            "to first.", []))
        d = d.with_panel(top_table(
            ids(), "namespace_pod", metric, f"{name}: top pods", unit,
            f"{why} Summed over each pod, on whatever node it runs. The link opens the pod in the drill-down "
            "dashboard.", [TO_POD]))
        d = d.with_panel(top_table(
            ids(), "instance_unit", metric, f"{name}: top systemd units", unit,
            f"{why} Summed over each systemd unit of each node (plain hosts and VMs, and the node's own "
            "daemons). The link opens the node in the overview.", [TO_NODE], ns=False))
        d = d.with_panel(top_table(
            ids(), "instance", metric, f"{name}: top nodes", unit,
            f"{why} Summed over each node. A node far above the rest with the same workloads is usually a "
            "node setting (clocksource, THP) rather than the code. The link opens the node in the overview.",
            [TO_NODE], ns=False))
    return d


def build():
    ids = Ids()
    d = dashboard(
        "slowpath / Fleet", UID,
        "Which namespaces, pods, systemd units and nodes pay for each slow path across the fleet, from the "
        "slowpath recording rules, and the node settings that slow a whole node down.",
        variables(),
        link("Overview", "/d/slowpath-overview/slowpath-overview", "One node at a time, every process"),
    )
    d = d.with_row(row(ids(), "Fleet totals"))
    d = d.with_panel(timeseries_panel(
        ids(), "Slow-path calls per second, whole fleet", """
Every node summed (cluster: recording rules, one series per signal and per `cluster` label if your
Prometheus sets one). Normal: flat; a step up is a rollout or a node change. Drill into the tables below for who.""",
        OPS,
        # every declared fleet row counted in calls (or events) per second
        [target(f"cluster:{metric}:rate5m{{{CL}}}", title.lower(), chr(ord("A") + i))
         for i, (metric, title, _, _) in enumerate(r for r in fleet_rows() if r[2] == OPS)],
        w=12, h=8,
    ))
    d = d.with_panel(stat_panel(
        ids(), "Nodes on a clocksource the vDSO cannot read", f"""
Nodes whose current clocksource is {NON_VDSO_CLOCKSOURCES.replace('|', ', ')}: every clock read of every process
on them is a syscall. Normal: 0. The table below names them; fix with tsc where it is reliable
(or arch_sys_counter on arm64).""",
        COUNT,
        [target(f'count(max by (cluster, instance) (slowpath_clocksource_current_info{{{CL}, '
                f'clocksource=~"{NON_VDSO_CLOCKSOURCES}"}}) == 1) or vector(0)', "nodes", instant=True)],
        w=6, h=8, color_mode=cm.BigValueColorMode.BACKGROUND, threshold_steps=[(None, "green"), (1, "red")],
    ))
    d = d.with_panel(stat_panel(
        ids(), "Nodes whose vDSO canary falls back", """
Nodes where the agent's own libc clock reads entered the kernel (slowpath_vdso_fallback): the whole node pays a
syscall per clock read, whatever the clocksource is called. Normal: 0.""",
        COUNT,
        [target(f"count(max by (cluster, instance) (slowpath_vdso_fallback{{{CL}}}) == 1) or vector(0)", "nodes",
                instant=True)],
        w=6, h=8, color_mode=cm.BigValueColorMode.BACKGROUND, threshold_steps=[(None, "green"), (1, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "slowpath's own cost (% of a core), costliest nodes", """
slowpath's own CPU per node (recording rule instance:slowpath_own_cpu:rate5m: its BPF programs' in-kernel time
beyond an empty program's on the same hooks, and the agent process), the ten costliest nodes, as a fraction of one
core; dashed, the floor the attach type forces on the same nodes (instance:slowpath_dispatch_floor_cpu:rate5m: with
sys_enter as a tracepoint every syscall takes the traced path, whatever program is on it; none with fentry).
Normal: own part well under 1 % on every node; above 1 % for 15 min fires SlowpathOverheadHigh. A floor above 5 %
fires SlowpathDispatchFloorHigh (info), whose fix is fentry, not slowpath. The overview's panel of the same name
splits a node by hook.""",
        RATIO,
        [target(f"topk(10, instance:slowpath_own_cpu:rate5m{{{CL}}})", "{{instance}}", "A"),
         target(f"instance:slowpath_dispatch_floor_cpu:rate5m{{{CL}}} and on (cluster, instance) "
                f"topk(10, instance:slowpath_own_cpu:rate5m{{{CL}}})", "{{instance}} floor", "B")],
        w=12, h=8, threshold_steps=[(None, "green"), (0.01, "orange"), (0.05, "red")],
    ))
    d = d.with_row(row(ids(), "Findings: what is wrong, and the known source"))
    d = d.with_panel(table_panel(
        ids(), "Findings across the fleet", """
Every finding the agents' own diagnosis holds now (slowpath_finding_info: the rules of `slowpath doctor` judged
on a sliding window, --findings.window), per node, pod and process, with its severity, the known source its call
sites matched (empty: none matched or not sampled) and since when it holds. The cause and fix of each known
source are in the runbook (Known sources) and in the alerts' annotations; the findings in full, with call sites,
at http://NODE:9891/debug/findings. The link opens the node in the overview.""",
        [target(findings_expr(NS, "cluster, instance, namespace, pod, comm, finding, known_source, severity"), instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=24, h=8, hide=("Time",), unit=SINCE,
    ).data_links([TO_NODE]).sort_by([cb.TableSortByFieldState().display_name("Value").desc(False)]))
    d = d.with_row(row(ids(), "Estimated CPU: the costliest pods and nodes"))
    estimated = "instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m"
    why = ("what the slow paths cost, as a fraction of one core: each event's rate times its node's measured cost "
           f"of one, every slow path summed (recording rule {estimated}, the charge of `slowpath top`'s CPU column)")
    d = d.with_panel(table_panel(
        ids(), "Estimated CPU: top pods", f"Per pod, {why}. The link opens the pod in the drill-down dashboard.",
        [target(f'topk(10, sum by (cluster, namespace, pod) ({estimated}{{{NS}, pod!=""}}) > 0)', instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=12, h=8, hide=("Time",), unit=RATIO,
    ).data_links([TO_POD]).sort_by([cb.TableSortByFieldState().display_name("Value").desc(True)]))
    d = d.with_panel(table_panel(
        ids(), "Estimated CPU: top nodes", f"Per node, {why}. The link opens the node in the overview.",
        [target(f"topk(10, instance:slowpath_estimated_cpu_seconds:rate5m{{{CL}}} > 0)", instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=12, h=8, hide=("Time",), unit=RATIO,
    ).data_links([TO_NODE]).sort_by([cb.TableSortByFieldState().display_name("Value").desc(True)]))
    d = signal_rows(d, ids)
    d = d.with_row(row(ids(), "Node settings"))
    d = d.with_panel(table_panel(
        ids(), "Clocksource of every node", f"""
Each node's current clocksource. Nodes on {NON_VDSO_CLOCKSOURCES.replace('|', ', ')} fall back to syscalls for
every clock read (the Xen EC2 case: 30 % more CPU for Cassandra). The link opens the node in the overview.""",
        [target(f"max by (cluster, instance, clocksource) (slowpath_clocksource_current_info{{{CL}}}) == 1", instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=12, h=8, hide=("Time", "Value"),
    ).data_links([TO_NODE]))
    d = d.with_panel(table_panel(
        ids(), "THP settings across nodes", """
How many nodes run each transparent huge page setting (enabled, defrag). `enabled=always` with
`defrag=always` lets every fault stall in direct compaction: the case where system time passed user time. Normal:
one setting fleet-wide, chosen on purpose (madvise is the safe default).""",
        [target(f"count by (enabled, defrag) (slowpath_thp_settings_info{{{CL}}} == 1)", instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=12, h=8, hide=("Time",), unit=COUNT,
    ))
    return d.build()
