"""slowpath / Drill-down: one node, namespace, pod and process (comm), every
signal over time, with the node context that explains it."""

from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from common import (COUNT, DASHED, NON_VDSO_CLOCKSOURCES, NONE, OPS, PER_PROCESS_METRICS, RATIO, SECONDS, SINCE,
                    TZFILE_CHECKS_PER_SECOND, Ids,
                    cluster_variable, clocksource_switch_annotation, dashboard, datasource_variable, findings_expr, heatmap_panel,
                    link, query_variable, row, stat_panel, state_timeline_panel, table_panel, target,
                    timeseries_panel, value_mappings)

import declared

UID = "slowpath-drilldown"

# instance and comm may be All (.*): a link that names only a pod (the fleet's
# pod tables) opens on that pod's processes, wherever they run
NODE = 'cluster=~"$cluster", job="$job", instance=~"$instance"'
PROC = NODE + ', namespace=~"$namespace", pod=~"$pod", comm=~"$comm"'
RI = "$__rate_interval"
RANGE = "$__range"


def rate(metric, extra="", by=""):
    matchers = PROC + (", " + extra if extra else "")
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{matchers}}}[{RI}]))"


def increase(metric, extra="", by=""):
    matchers = PROC + (", " + extra if extra else "")
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (increase({metric}{{{matchers}}}[{RANGE}]))"


def variables():
    return [
        datasource_variable(),
        cluster_variable(),
        query_variable("job", "Job", 'label_values(slowpath_build_info{cluster=~"$cluster"}, job)',
                       "Prometheus job that scrapes the slowpath agents.", multi=False, include_all=False),
        query_variable("instance", "Node", 'label_values(slowpath_build_info{cluster=~"$cluster", job="$job"}, instance)',
                       "Scrape target of the agent on the node to look at. All: every node (a link that names "
                       "a pod alone opens there).", multi=False, include_all=True),
        query_variable("namespace", "Namespace",
                       f'label_values({{__name__=~"{PER_PROCESS_METRICS}", {NODE}}}, namespace)',
                       "Kubernetes namespace. Empty outside Kubernetes: All (.*) also matches series without it.",
                       multi=False, include_all=True),
        query_variable("pod", "Pod",
                       f'label_values({{__name__=~"{PER_PROCESS_METRICS}", {NODE}, namespace=~"$namespace"}}, pod)',
                       "Kubernetes pod. Empty outside Kubernetes and for processes outside pods: All (.*) also "
                       "matches them.", multi=False, include_all=True),
        query_variable("comm", "Process (comm)",
                       f'label_values({{__name__=~"{PER_PROCESS_METRICS}", {NODE}, namespace=~"$namespace", '
                       f'pod=~"$pod"}}, comm)',
                       "The process (comm of the thread-group leader) to look at. All: every process of the "
                       "node, namespace and pod chosen.", multi=False, include_all=True),
    ]


def build():
    ids = Ids()
    d = dashboard(
        "slowpath / Drill-down", UID,
        f"One node, namespace, pod and process (comm): {declared.cases()} over time, with the node's "
        "clocksource, canary and THP settings.",
        variables(),
        link("Overview", "/d/slowpath-overview/slowpath-overview", "Every node and the top processes"),
    )
    d = d.annotation(clocksource_switch_annotation(NODE))

    # --- Summary over the time range ---------------------------------------------------
    d = d.with_row(row(ids(), "$comm on $instance: totals over the time range"))
    d = d.with_panel(stat_panel(
        ids(), "vDSO fallback clock reads", """
Clock reads of this process that entered the kernel although the vDSO could serve them, over the dashboard's time
range. Normal on a tsc/kvm-clock node: 0. Non-zero there means the process bypasses the vDSO (static binary,
seccomp sandbox, old runtime calling syscall(2)); on a xen/hpet/acpi_pm node everything falls back (fix the
clocksource).""",
        COUNT, [target(increase("slowpath_clock_syscalls_total", 'fallback="true"'), "fallback reads", instant=True)],
        w=4, h=4, threshold_steps=[(None, "green"), (1, "orange")],
    ))
    d = d.with_panel(stat_panel(
        ids(), "rt_sigprocmask calls", """
rt_sigprocmask calls of this process over the time range. Normal: a handful. Millions mean a storm, usually
getcontext/setcontext (query ~ setmask below).""",
        COUNT, [target(increase("slowpath_rt_sigprocmask_calls_total"), "calls", instant=True)],
        w=4, h=4,
    ))
    d = d.with_panel(stat_panel(
        ids(), "Time-zone file checks", f"""
stats of /etc/localtime by this process over the time range: glibc's localtime(), mktime(), strftime() with TZ
unset make one per call. Normal: near 0. {TZFILE_CHECKS_PER_SECOND:,} per second of range or more: set
TZ=:/etc/localtime in its environment (see the time-zone file checks below).""",
        COUNT, [target(increase("slowpath_tzfile_stat_calls_total"), "checks", instant=True)],
        w=4, h=4,
    ))
    d = d.with_panel(stat_panel(
        ids(), "Timer wakeups", """
Wakeups of this process by an expiring timer over the time range, whatever it waited in. Normal: under ~50 per
second of range for an idle service. ~1000 per second of range is a 1 ms ticker (~0.7-1.2 % CPU per idle
instance).""",
        COUNT, [target(increase("slowpath_timer_wakeups_total"), "timer wakeups", instant=True)],
        w=4, h=4,
    ))
    d = d.with_panel(stat_panel(
        ids(), "THP fault allocations", """
Transparent huge pages allocated on this process's page faults over the time range. Normal for processes that use
huge pages on purpose (MADV_HUGEPAGE, or THP enabled=always).""",
        COUNT, [target(increase("slowpath_thp_fault_allocs_total"), "THP allocations", instant=True)],
        w=4, h=4,
    ))
    d = d.with_panel(stat_panel(
        ids(), "Compaction time by trigger", """
Seconds this process spent in memory compaction over the time range, by trigger. direct is allocation stall time
the process felt: normal 0; more than a few percent of the range hurts latency (see below). manual is a write to
/proc/sys/vm/compact_memory by this process.""",
        SECONDS, [target(increase("slowpath_compaction_seconds_total", by="trigger"), "{{trigger}}", instant=True)],
        w=4, h=4, text_mode=cm.BigValueTextMode.VALUE_AND_NAME,
    ))

    # --- Node context --------------------------------------------------------------------
    d = d.with_panel(table_panel(
        ids(), "Findings for $comm", """
What the agent's own diagnosis holds now for this process (slowpath_finding_info): the finding, its severity,
the known source its call sites matched (empty: none matched or not sampled yet) and since when. The known
source's cause and fix are in the runbook (Known sources); the evidence and call sites at
http://NODE:9891/debug/findings. Normal: empty.""",
        [target(findings_expr(PROC, "finding, known_source, severity"), instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=24, h=5, hide=("Time",), unit=SINCE,
    ))
    d = d.with_row(row(ids(), "Node context: $instance"))
    d = d.with_panel(stat_panel(
        ids(), "Clocksource", f"""
The node's current clocksource. Green: vDSO-capable (tsc, kvm-clock, ...). Red: {NON_VDSO_CLOCKSOURCES.replace('|', ', ')}:
the vDSO cannot read it, so every clock read of every process on this node is a syscall. Fix with
`echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource` where tsc is reliable.""",
        NONE, [target(f"max by (clocksource) (slowpath_clocksource_current_info{{{NODE}}})", "{{clocksource}}",
                      instant=True)],
        w=4, h=6, text_mode=cm.BigValueTextMode.NAME, color_mode=cm.BigValueColorMode.BACKGROUND,
    ).override_by_regexp(f"^({NON_VDSO_CLOCKSOURCES})$", [
        dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"})]))
    d = d.with_panel(stat_panel(
        ids(), "THP settings", """
The node's /sys/kernel/mm/transparent_hugepage/{enabled,defrag}. With a high THP fallback ratio: defrag=never
gives up at once, defrag=always stalls every faulting process in direct compaction; madvise or defer+madvise are
the usual compromise.""",
        NONE, [target(f"max by (enabled, defrag) (slowpath_thp_settings_info{{{NODE}}})",
                      "enabled={{enabled}} defrag={{defrag}}", instant=True)],
        w=4, h=6, text_mode=cm.BigValueTextMode.NAME,
    ))
    d = d.with_panel(state_timeline_panel(
        ids(), "vDSO canary", """
The agent's canary on this node, per clock: "vDSO" normally; "syscall" when the agent's own libc clock reads
entered the kernel, i.e. the node's clocksource forces every process into the kernel (fix the clocksource).""",
        [target(f"max by (clock) (slowpath_vdso_fallback{{{NODE}}})", "{{clock}}")],
        value_mappings({"0": ("vDSO", "green"), "1": ("syscall", "red")}),
        w=8, h=6,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Clock read cost", """
Mean seconds per libc clock read on this node, per clock. Normal: ~20-50 ns (coarse clocks less). Several times
that with the canary at "syscall": the clocksource is not vDSO-capable.""",
        SECONDS, [target(f"max by (clock) (slowpath_clock_read_seconds{{{NODE}}})", "{{clock}}")],
        w=8, h=6, threshold_steps=[(None, "green"), (2e-7, "red")],
    ))

    # --- Clock reads -------------------------------------------------------------------------
    d = d.with_row(row(ids(), "Clock reads that enter the kernel"))
    d = d.with_panel(timeseries_panel(
        ids(), "Clock syscalls by syscall, clock and fallback", """
This process's clock reads that entered the kernel, per second. fallback="true" (vDSO clocks): should be 0 on a
tsc node; if not, the process bypasses the vDSO (static binary, seccomp, old runtime): rebuild/upgrade it.
Above ~10k/s it costs real CPU. fallback="false" (CPU-time, alarm, PTP clocks) always enter the kernel: normal.""",
        OPS, [target(rate("slowpath_clock_syscalls_total", by="syscall, clock, fallback"),
                     "{{syscall}} {{clock}} fallback={{fallback}}")],
        w=12, h=8, threshold_steps=[(None, "green"), (10000, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "vDSO fallback rate per cgroup and container", """
Fallback clock reads per second of this comm, split by cgroup (and pod/container with Kubernetes), to tell which
instance or container of the program bypasses the vDSO. Normal on a tsc node: none.""",
        OPS, [target(rate("slowpath_clock_syscalls_total", 'fallback="true"', by="namespace, pod, container, cgroup"),
                     "{{pod}} {{container}} {{cgroup}}")],
        w=12, h=8,
    ))

    # --- rt_sigprocmask ----------------------------------------------------------------------
    d = d.with_row(row(ids(), "rt_sigprocmask"))
    d = d.with_panel(timeseries_panel(
        ids(), "rt_sigprocmask by op", """
This process's rt_sigprocmask calls per second by op. Normal: a few per second. query (new set NULL) is what glibc
getcontext issues, setmask what setcontext issues: both high and about equal is the getcontext/setcontext storm
(Ruby 1.8.7 with --enable-pthread: ~40 % slower). Above ~100k/s: upgrade the runtime or use a context switch that
does not save the signal mask. invalid = calls with an unknown `how` (EINVAL), a bug in the caller.""",
        OPS, [target(rate("slowpath_rt_sigprocmask_calls_total", by="op"), "{{op}}")],
        w=12, h=8, threshold_steps=[(None, "green"), (100000, "red")],
    ))
    query = rate("slowpath_rt_sigprocmask_calls_total", 'op="query"')
    setmask = rate("slowpath_rt_sigprocmask_calls_total", 'op="setmask"')
    d = d.with_panel(timeseries_panel(
        ids(), "getcontext signature: query / setmask", """
Ratio of query to setmask rt_sigprocmask calls of this process. Near 100 % at a high call rate is the
getcontext/setcontext signature (one query per save, one setmask per restore). Near 0 %: the calls come from
ordinary signal blocking (block/unblock pairs, setmask restores).""",
        RATIO, [target(f"{query} / {setmask}", "query / setmask")],
        w=12, h=8,
    ))

    # --- Time-zone file checks ------------------------------------------------------------------
    d = d.with_row(row(ids(), "Time-zone file checks"))
    check_cost = f"max by (instance) (slowpath_tzfile_check_seconds{{{NODE}}})"
    d = d.with_panel(timeseries_panel(
        ids(), "Time-zone file checks per second", f"""
This process's stats of /etc/localtime per second (`slowpath_tzfile_stat_calls_total`): with TZ unset, glibc's
localtime(), mktime(), strftime() and tzset() stat the file on every call to see whether the zone changed
(localtime_r() does not). Normal: near 0. Above {TZFILE_CHECKS_PER_SECOND:,}/s SlowpathTzfileChecks fires. Fix:
TZ=:/etc/localtime in its environment (systemd Environment=TZ=:/etc/localtime, a Kubernetes env entry); stats of
the file from a buffer (`stat /etc/localtime`, Python os.stat) are not counted here.""",
        OPS, [target(rate("slowpath_tzfile_stat_calls_total"), "checks")],
        w=12, h=8, threshold_steps=[(None, "green"), (TZFILE_CHECKS_PER_SECOND, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Estimated CPU of time-zone file checks (% of a core)", f"""
What this process's checks cost, as a fraction of one core: their rate times the node's measured cost of one stat of
/etc/localtime (`slowpath_tzfile_check_seconds`, every 30 s). The dashed line is what {TZFILE_CHECKS_PER_SECOND:,}
checks/s (the alert) would cost on this node. A lower bound of what TZ=:/etc/localtime saves: the whole
localtime() call costs more than its stat.""",
        RATIO, [
            target(f"{rate('slowpath_tzfile_stat_calls_total', by='instance')} * on (instance) {check_cost}",
                   "estimated CPU", "A"),
            target(f"{TZFILE_CHECKS_PER_SECOND} * {check_cost}", f"at {TZFILE_CHECKS_PER_SECOND:,} checks/s", "B"),
        ],
        w=12, h=8,
    ).override_by_query("B", [DASHED]))

    # --- Timer wakeups and sleeps --------------------------------------------------------------
    d = d.with_row(row(ids(), "Timer wakeups and sleeps"))
    d = d.with_panel(timeseries_panel(
        ids(), "Timer wakeups by wait", """
This process's wakeups per second by an expiring timer, by what it waited in: the syscall whose timeout expired
(nanosleep, clock_nanosleep, futex, epoll_wait, poll, select), a timerfd, a posix_timer (setitimer,
timer_create), or other. Above ~500/s sustained is a timer loop: `slowpath doctor --pid` names the runtime, its
fix and the call site.""",
        OPS, [target(rate("slowpath_timer_wakeups_total", by="wait"), "{{wait}}")],
        w=12, h=8, threshold_steps=[(None, "green"), (500, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Sleeps by syscall, clock and mode", """
This process's nanosleep/clock_nanosleep calls per second. glibc nanosleep()/usleep() show as clock_nanosleep
realtime relative. ~1000/s relative is a 1 ms ticker (~0.7 % CPU per idle instance; alert above ~500/s): block on
an event instead, or lengthen the period. Absolute sleeps (mode="absolute", Python 3.11+ time.sleep) count in the
duration histogram as their distance to the deadline.""",
        OPS, [target(rate("slowpath_sleep_calls_total", by="syscall, clock, mode"), "{{syscall}} {{clock}} {{mode}}")],
        w=12, h=8, threshold_steps=[(None, "green"), (500, "red")],
    ))
    d = d.with_panel(heatmap_panel(
        ids(), "Requested sleep durations", """
Requested durations of this process's sleeps (buckets 1 us ... 10 s, exact; absolute deadlines as their distance), in sleeps per second per
bucket. Normal: long sleeps. A hot band at <= 1 ms at hundreds per second or more is a polling ticker.""",
        [target(f"sum by (le) (rate(slowpath_sleep_requested_seconds_bucket{{{PROC}}}[{RI}]))", "{{le}}",
                fmt=pm.PromQueryFormat.HEATMAP)],
        y_unit=SECONDS, cell_unit=OPS, w=12, h=8,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Requested sleep quantiles", """
p50 and p90 of this process's requested sleep durations (bucket resolution: a decade). A median at or
below 1 ms together with a high sleep rate is the ticker case.""",
        SECONDS, [
            target(f"histogram_quantile(0.5, {rate('slowpath_sleep_requested_seconds_bucket', by='le')})", "p50", "A"),
            target(f"histogram_quantile(0.9, {rate('slowpath_sleep_requested_seconds_bucket', by='le')})", "p90", "B"),
        ],
        w=12, h=8,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Short sleeps (requested <= 1 ms) per second", """
This process's relative sleeps of 1 ms or less per second. Normal: near 0. ~1000/s is a 1 ms ticker; above ~500/s
sustained is worth fixing (event-driven wakeups, longer period).""",
        OPS, [target(rate("slowpath_sleep_requested_seconds_bucket", 'le="0.001"'), "<= 1 ms")],
        w=12, h=8, threshold_steps=[(None, "green"), (500, "red")],
    ))

    # --- THP and compaction --------------------------------------------------------------------
    d = d.with_row(row(ids(), "Transparent huge pages and compaction"))
    allocs = rate("slowpath_thp_fault_allocs_total")
    fallbacks = rate("slowpath_thp_fault_fallbacks_total")
    # Series appear on the first non-zero count: allocations without a
    # fallback series mean 0 fallbacks, shown as 0 rather than no data.
    fallbacks_or_zero = f"({fallbacks} or 0 * {allocs})"
    allocs_or_zero = f"({allocs} or 0 * {fallbacks})"
    d = d.with_panel(timeseries_panel(
        ids(), "THP fault allocations and fallbacks", """
Huge pages this process got on page faults per second, and faults that fell back to 4 KiB pages. Fallbacks mean
no free 2 MiB block: fragmented memory; see the ratio and compaction.""",
        OPS, [target(allocs, "allocations", "A"), target(fallbacks_or_zero, "fallbacks", "B")],
        w=12, h=8,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "THP fault fallback ratio", """
fallbacks / (allocations + fallbacks) for this process. Normal: near 0 %. High: memory too fragmented for the
huge pages it asks for: check the node's THP defrag setting (madvise/defer+madvise let it compact, never gives up
at once), memory pressure and compaction.""",
        RATIO, [target(f"{fallbacks_or_zero} / ({allocs_or_zero} + {fallbacks_or_zero})", "fallback ratio")],
        w=12, h=8, threshold_steps=[(None, "green"), (0.1, "orange"), (0.5, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Compaction time by trigger (seconds per second)", """
Seconds per second this process spent compacting memory, by trigger. direct is an allocation stall it felt:
normal 0; above 0.05 s/s it hurts latency (use THP defrag=defer or madvise, keep more memory free, let
kcompactd/proactive compaction work ahead). manual: its writes to /proc/sys/vm/compact_memory.""",
        SECONDS, [target(rate("slowpath_compaction_seconds_total", by="trigger"), "{{trigger}}")],
        w=12, h=8, threshold_steps=[(None, "green"), (0.05, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Compaction runs by trigger", """
Compaction runs (one per zone) this process ran per second, by trigger. Frequent direct runs: its allocations
keep hitting fragmented memory.""",
        OPS, [target(rate("slowpath_compaction_runs_total", by="trigger"), "{{trigger}}")],
        w=12, h=8,
    ))

    # --- The other signals, from their declarations --------------------------------------------
    for signal in declared.generated_signals():
        d = declared_rows(d, ids, signal)
    return d.build()


def declared_rows(d, ids, signal):
    """A signal's row from its declaration (dashboards/src/declared.py): per
    recorded rate, this process's rate and, where a cost is declared, what it
    costs."""
    d = d.with_row(row(ids(), declared.row_title(signal)))
    for r in declared.rates(signal):
        steps = [(None, "green"), (r.threshold, "red")] if r.threshold else None
        d = d.with_panel(timeseries_panel(
            ids(), f"{r.title} per second" if r.unit != RATIO else f"{r.title} (share of the time)", f"""
This process's {r.title.lower()} (`{declared.series(r)}`): {r.meaning}.{declared.alert_sentence(r)}""",
            r.unit, [target(rate(r.family, r.selector), r.title.lower())],
            w=12, h=8, threshold_steps=steps,
        ))
        if r.cost_gauge:
            cost = f"max by (instance) ({r.cost_gauge}{{{NODE}}})"
            d = d.with_panel(timeseries_panel(
                ids(), f"Estimated CPU of {r.title.lower()} (% of a core)", f"""
What this process's {r.title.lower()} cost, as a fraction of one core: the rate times the node's measured cost of
one call (`{r.cost_gauge}`), as `slowpath top` and the estimated-CPU recording rule charge them.""",
                RATIO, [target(f"{rate(r.family, r.selector, by='instance')} * on (instance) {cost}",
                               "estimated CPU")],
                w=12, h=8,
            ))
    return d
