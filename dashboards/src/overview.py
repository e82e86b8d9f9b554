"""slowpath / Overview: every node of the fleet, the processes that fall off
the kernel's fast paths, and the agent's own health."""

from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from common import (COUNT, DASHED, NON_VDSO_CLOCKSOURCES, OPS, PER_PROCESS_METRICS, RATIO, SECONDS, SINCE, BYTES,
                    TZFILE_CHECKS_PER_SECOND, Ids,
                    cluster_variable, clocksource_switch_annotation, dashboard, data_link, datasource_variable, findings_expr, heatmap_panel, link,
                    query_variable, regex_mapping, row, stat_panel, state_timeline_panel, table_panel, target,
                    timeseries_panel, value_mappings)

import declared

UID = "slowpath-overview"

NODE = 'cluster=~"$cluster", job=~"$job", instance=~"$instance"'
PROC = NODE + ', namespace=~"$namespace", pod=~"$pod", comm=~"$comm"'
BY_PROC = "instance, namespace, pod, cgroup, comm"
# Recorded per-process series keep no job label (the rules sum by the process's labels).
RECORDED_PROC = 'cluster=~"$cluster", instance=~"$instance", namespace=~"$namespace", pod=~"$pod", comm=~"$comm"'
LEGEND_PROC = "{{comm}} {{pod}} {{cgroup}} @ {{instance}}"
RI = "$__rate_interval"

DRILLDOWN = data_link(
    "Drill down into ${__field.labels.comm} on ${__field.labels.instance}",
    "/d/slowpath-drilldown/slowpath-drilldown?${__url_time_range}&${datasource:queryparam}"
    "&var-instance=${__field.labels.instance:percentencode}"
    "&var-comm=${__field.labels.comm:percentencode}",
)


def rate(metric, extra="", by=BY_PROC, sel=PROC):
    matchers = sel + (", " + extra if extra else "")
    return f"sum by ({by}) (rate({metric}{{{matchers}}}[{RI}]))"


def top(metric, extra="", k=10):
    return f"topk({k}, {rate(metric, extra)})"


def variables():
    return [
        datasource_variable(),
        cluster_variable(),
        query_variable("job", "Job", 'label_values(slowpath_build_info{cluster=~"$cluster"}, job)',
                       "Prometheus job(s) that scrape the slowpath agents. All is the list of these jobs (not .*), "
                       "so that up and process_* select only slowpath's targets.",
                       multi=True, include_all=True, all_value=None),
        query_variable("instance", "Node", 'label_values(slowpath_build_info{cluster=~"$cluster", job=~"$job"}, instance)',
                       "Scrape target of the agent: one per node.", multi=True, include_all=True),
        query_variable("namespace", "Namespace",
                       f'label_values({{__name__=~"{PER_PROCESS_METRICS}", {NODE}}}, namespace)',
                       "Kubernetes namespace (agents with --kubernetes.enabled). Empty outside Kubernetes: "
                       "All (.*) also matches series without it.", multi=True, include_all=True),
        query_variable("pod", "Pod",
                       f'label_values({{__name__=~"{PER_PROCESS_METRICS}", {NODE}, namespace=~"$namespace"}}, pod)',
                       "Kubernetes pod. Empty outside Kubernetes and for processes outside pods: All (.*) "
                       "also matches them.", multi=True, include_all=True),
        query_variable("comm", "Process (comm)",
                       f'label_values({{__name__=~"{PER_PROCESS_METRICS}", {NODE}, namespace=~"$namespace", '
                       f'pod=~"$pod"}}, comm)',
                       "Process name (comm of the thread-group leader) of the per-process panels.",
                       multi=True, include_all=True),
    ]


def build():
    ids = Ids()
    d = dashboard(
        "slowpath / Overview", UID,
        f"Processes that fall off the Linux kernel's fast paths ({declared.cases()}), per node, per "
        "process and per pod, from the slowpath eBPF agent.",
        variables(),
        link("Drill-down", "/d/slowpath-drilldown/slowpath-drilldown",
             "One node, namespace, pod and process over time"),
    )
    d = d.annotation(clocksource_switch_annotation(NODE))

    # --- What is wrong now ---------------------------------------------------------
    d = d.with_row(row(ids(), "What is wrong now: findings and the costliest processes"))
    d = d.with_panel(table_panel(
        ids(), "Findings held now", """
What the agents' findings engines judge wrong now (`slowpath_finding_info`, one row per finding and process, on a
sliding window, --findings.window), with its severity, the known source its call sites matched (empty: none
matched or not sampled yet) and since when. Each finding's fix is in the alert it raises and in the runbook (Known
sources); `slowpath doctor --pid` on the node shows the call sites. Normal: empty.""",
        [target(findings_expr(PROC, "cluster, instance, namespace, pod, comm, finding, known_source, severity"),
                instant=True, fmt=pm.PromQueryFormat.TABLE)],
        w=12, h=9, hide=("Time",), unit=SINCE,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Estimated CPU per process, every slow path (% of a core)", f"""
The day's costliest processes: what each process's slow paths cost, summed over them, as a fraction of one core
(recording rule instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m, the same charge `slowpath top`'s CPU
column makes: each event's rate times the node's measured cost of one), top 10. Needs the chart's recording rules
(prometheusRule.enabled, or deploy/prometheus/slowpath-rules.yaml). Normal: well under 1 %.""",
        RATIO,
        [target(f"topk(10, sum by ({BY_PROC}) (instance_cgroup_comm:slowpath_estimated_cpu_seconds:rate5m"
                f"{{{RECORDED_PROC}}}))", LEGEND_PROC)],
        w=12, h=9, links=[DRILLDOWN],
    ))

    # --- Nodes: clocksource and the vDSO -------------------------------------
    d = d.with_row(row(ids(), "Nodes: clocksource and the vDSO"))
    d = d.with_panel(stat_panel(
        ids(), "Nodes on a non-vDSO clocksource", f"""
Number of nodes whose current clocksource is one the vDSO cannot read ({NON_VDSO_CLOCKSOURCES.replace('|', ', ')}).
Normal: 0. On such a node every clock_gettime/gettimeofday/time of every process enters the kernel (on Xen EC2
this cost Cassandra 30 % more CPU). Fix: `echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource`
where the TSC is reliable (and `clocksource=tsc` on the kernel command line), or move to an instance type with a
vDSO-capable clocksource (e.g. kvm-clock, tsc).""",
        COUNT,
        [target(f'sum(max by (instance) (slowpath_clocksource_current_info{{{NODE}, '
                f'clocksource=~"{NON_VDSO_CLOCKSOURCES}"}}) or max by (instance) '
                f'(slowpath_clocksource_current_info{{{NODE}}}) * 0)', "non-vDSO nodes", instant=True)],
        w=6, h=6, color_mode=cm.BigValueColorMode.BACKGROUND, threshold_steps=[(None, "green"), (1, "red")],
    ))
    d = d.with_panel(stat_panel(
        ids(), "Nodes whose vDSO canary falls back", """
Number of nodes where the agent's own canary (1000 libc reads of each clock) showed up as syscalls in its BPF
counts, i.e. the whole node falls back for that clock. Normal: 0. A node-wide fallback means the clocksource is
not vDSO-capable (see "Clocksource per node"): fix the clocksource (tsc). Alert on
`max by (instance) (slowpath_vdso_fallback) == 1 for 10m`.""",
        COUNT,
        [target(f"sum(max by (instance) (slowpath_vdso_fallback{{{NODE}}}))", "falling back", instant=True)],
        w=6, h=6, color_mode=cm.BigValueColorMode.BACKGROUND, threshold_steps=[(None, "green"), (1, "red")],
    ))
    d = d.with_panel(table_panel(
        ids(), "Clocksource per node", f"""
Current clocksource of each node (/sys/devices/system/clocksource/clocksource0/current_clocksource).
Normal: tsc, kvm-clock, arch_sys_counter or another vDSO-capable source. Flagged in red:
{NON_VDSO_CLOCKSOURCES.replace('|', ', ')}, which the vDSO cannot read, so every clock read of every process is a
syscall. Fix with `echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource` where tsc is
reliable; check `slowpath_clocksource_available_info` for what the node offers.""",
        [target(f"max by (instance, clocksource) (slowpath_clocksource_current_info{{{NODE}}})",
                instant=True, fmt=pm.PromQueryFormat.TABLE)],
        w=12, h=6,
        overrides=[("clocksource", [
            dm.DynamicConfigValue(id_val="mappings", value=[
                regex_mapping(f"^({NON_VDSO_CLOCKSOURCES})$", "$1 (not vDSO-capable)", "red")]),
            dm.DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"}),
            dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "green"}),
        ])],
    ))
    d = d.with_panel(state_timeline_panel(
        ids(), "vDSO canary per node and clock", """
State of the agent's vDSO canary (`slowpath_vdso_fallback`) per node and clock, every --canary.interval.
Normal: "vDSO" everywhere. "syscall" means the agent's own libc reads of that clock entered the kernel: the node's
clocksource is not vDSO-capable, so every process on it pays a syscall per clock read. Fix the clocksource (tsc);
the clock read cost panel shows what it costs.""",
        [target(f"max by (instance, clock) (slowpath_vdso_fallback{{{NODE}}})", "{{instance}} {{clock}}")],
        value_mappings({"0": ("vDSO", "green"), "1": ("syscall", "red")}),
        w=12, h=8,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Clock read cost per node", """
Measured mean seconds per libc read of each clock on each node (`slowpath_clock_read_seconds`, the canary's batch).
Normal: about 20-50 ns for a vDSO read (coarse clocks less). Several times that (above ~200 ns for monotonic)
together with a canary in "syscall" means the clocksource forces syscalls (xen, hpet, acpi_pm): switch to tsc.""",
        SECONDS,
        [target(f"max by (instance, clock) (slowpath_clock_read_seconds{{{NODE}}})", "{{instance}} {{clock}}")],
        w=12, h=8, threshold_steps=[(None, "green"), (2e-7, "red")],
    ))

    # --- vDSO fallback per process ---------------------------------------------
    d = d.with_row(row(ids(), "vDSO fallback: clock reads that enter the kernel"))
    d = d.with_panel(timeseries_panel(
        ids(), "Top processes by vDSO fallback rate", """
Clock reads per second that entered the kernel although the vDSO could have served them
(`slowpath_clock_syscalls_total{fallback="true"}`), top 10 processes (comm, cgroup, pod).
Normal on a tsc/kvm-clock node: none at all. Any fallback rate on such a node means the process bypasses the vDSO:
a statically linked binary, a seccomp sandbox or emulation layer, or an old runtime calling syscall(2) directly;
rebuild or upgrade it. If every process on a node shows it, the clocksource is the cause (fix with tsc).
Above ~10k/s sustained it costs real CPU (a Java loop of 100M currentTimeMillis() took 68 s instead of 3.3 s).""",
        OPS,
        [target(top("slowpath_clock_syscalls_total", 'fallback="true"'), LEGEND_PROC)],
        w=12, h=9, threshold_steps=[(None, "green"), (10000, "red")], links=[DRILLDOWN],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Clock syscalls per node by syscall, clock and fallback", """
All clock reads that entered the kernel, per node, by syscall, clock and fallback. fallback="true": clocks the
vDSO serves (realtime, monotonic, boottime, ..., every gettimeofday/time); should be ~0 on tsc nodes, see the
top-processes panel. fallback="false": CPU-time clocks (process/thread CPU time, pthread_getcpuclockid), alarm and
PTP clocks, which always enter the kernel: normal, worth a look only at very high rates (profilers, JVM CPU-time
accounting).""",
        OPS,
        [target(rate("slowpath_clock_syscalls_total", by="instance, syscall, clock, fallback"),
                "{{instance}} {{syscall}} {{clock}} fallback={{fallback}}")],
        w=12, h=9,
    ))

    # --- rt_sigprocmask -------------------------------------------------------------
    d = d.with_row(row(ids(), "rt_sigprocmask storms"))
    d = d.with_panel(timeseries_panel(
        ids(), "Top processes by rt_sigprocmask rate", """
rt_sigprocmask calls per second, top 10 processes. Normal: a few per second (a fork+exec from a shell costs ~10).
Above ~100k/s per process sustained is a storm: usually glibc getcontext/setcontext (coroutines, green threads;
Ruby 1.8.7 with --enable-pthread ran ~40 % slower) or a library that blocks signals around every operation. Check
the query-vs-setmask panel for the getcontext signature, then upgrade the runtime or switch it to a context switch
that does not save the signal mask (e.g. swapcontext-free coroutines, Boost.Context fcontext).""",
        OPS,
        [target(top("slowpath_rt_sigprocmask_calls_total"), LEGEND_PROC)],
        w=12, h=9, threshold_steps=[(None, "green"), (100000, "red")], links=[DRILLDOWN],
    ))
    query_top = top("slowpath_rt_sigprocmask_calls_total", 'op="query"')
    setmask = rate("slowpath_rt_sigprocmask_calls_total", 'op="setmask"')
    d = d.with_panel(timeseries_panel(
        ids(), "getcontext/setcontext signature: query vs setmask", f"""
Per process, rt_sigprocmask calls with op="query" (new set NULL: what glibc getcontext issues) and op="setmask"
(what setcontext issues), for the top 10 processes by query rate. query ~ setmask at a high rate is the
getcontext/setcontext signature: one syscall per context save and one per restore. Normal: query near 0.
Fix as for storms: a runtime or coroutine library that does not save/restore the signal mask.""",
        OPS,
        [
            target(query_top, "query {{comm}} {{pod}} {{cgroup}} @ {{instance}}", "A"),
            target(f"{setmask} and on ({BY_PROC}) {query_top}",
                   "setmask {{comm}} {{pod}} {{cgroup}} @ {{instance}}", "B"),
        ],
        w=12, h=9, links=[DRILLDOWN],
    ))

    # --- Time-zone file checks -------------------------------------------------------------
    d = d.with_row(row(ids(), "Time-zone file checks"))
    checks_top = top("slowpath_tzfile_stat_calls_total")
    check_cost = f"max by (instance) (slowpath_tzfile_check_seconds{{{NODE}}})"
    d = d.with_panel(timeseries_panel(
        ids(), "Top processes by time-zone file checks", f"""
stats of /etc/localtime per second, top 10 processes (`slowpath_tzfile_stat_calls_total`): with TZ unset, glibc's
localtime(), mktime(), strftime() and tzset() check whether the time zone changed on every call, one system call
each (a C localtime() took 3.9-4.9 us instead of 0.11-0.14 us). Normal: near 0. Above
{TZFILE_CHECKS_PER_SECOND:,}/s per process the SlowpathTzfileChecks alert fires: usually a logger or date formatter
(Perl's localtime, C localtime/strftime) in a service without TZ. Fix: TZ=:/etc/localtime in its environment
(systemd Environment=, a Kubernetes env entry); `slowpath doctor --pid` names the call site.""",
        OPS,
        [target(checks_top, LEGEND_PROC)],
        w=8, h=9, threshold_steps=[(None, "green"), (TZFILE_CHECKS_PER_SECOND, "red")], links=[DRILLDOWN],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Estimated CPU of time-zone file checks (% of a core)", f"""
What the checks of the top 10 processes cost, as a fraction of one core: their rate times the measured cost of one
stat of /etc/localtime on their node (`slowpath_tzfile_check_seconds`). The dashed series per node is what a process
at the alert's {TZFILE_CHECKS_PER_SECOND:,} checks/s would cost there. The whole localtime() call costs more than its
stat: read it as a lower bound of what TZ=:/etc/localtime saves.""",
        RATIO,
        [target(f"topk(10, {rate('slowpath_tzfile_stat_calls_total')} * on (instance) group_left {check_cost})",
                LEGEND_PROC, "A"),
         target(f"{TZFILE_CHECKS_PER_SECOND} * {check_cost}",
                f"{{{{instance}}}} at {TZFILE_CHECKS_PER_SECOND:,} checks/s", "B")],
        w=8, h=9, links=[DRILLDOWN],
    ).override_by_query("B", [DASHED]))
    d = d.with_panel(timeseries_panel(
        ids(), "Cost of one time-zone file check per node", """
Measured seconds per stat of /etc/localtime on each node (`slowpath_tzfile_check_seconds`: the agent's batch of 100
every 30 s, median of 10 slices). Normal: about 1-3 us; it is the syscall and the path walk through the symlink,
so it grows with CPU mitigations and a slow root file system. No series on a node without /etc/localtime.""",
        SECONDS,
        [target(check_cost, "{{instance}}")],
        w=8, h=9,
    ))

    # --- Timer loops and sleeps --------------------------------------------------------
    d = d.with_row(row(ids(), "Timer loops and sleeps"))
    d = d.with_panel(timeseries_panel(
        ids(), "Top processes by sleep rate", """
nanosleep/clock_nanosleep calls per second (relative and absolute), top 10 processes. Normal: idle services
sleep rarely. ~1000/s for one process is a 1 ms ticker polling loop: on a large fleet such a ticker cost 0.7 % CPU
on every idle pod. Fix: block on an event (epoll, futex, channel) instead of polling, or lengthen the period.""",
        OPS,
        [target(top("slowpath_sleep_calls_total"), LEGEND_PROC)],
        w=12, h=9, threshold_steps=[(None, "green"), (500, "red")], links=[DRILLDOWN],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Top processes by timer wakeups", """
Wakeups per second by an expiring timer, whatever the process waits in (sleeps, futex/epoll/poll/select timeouts,
timerfds, itimers), top 10 processes (`slowpath_timer_wakeups_total`). Normal: idle services under ~50/s. ~1000/s is
a 1 ms ticker (the sentinel-golang case: 0.7-1.2 % CPU per idle pod); the SlowpathTimerLoop alert fires above 500/s.
`slowpath doctor --pid` names the runtime and its fix.""",
        OPS,
        [target(top("slowpath_timer_wakeups_total"), LEGEND_PROC)],
        w=12, h=9, threshold_steps=[(None, "green"), (500, "red")], links=[DRILLDOWN],
    ))
    wakeup_cost = f"max by (instance) (slowpath_timer_wakeup_cost_seconds{{{NODE}}})"
    d = d.with_panel(timeseries_panel(
        ids(), "Estimated CPU of timer wakeups (% of a core)", """
What the timer wakeups of the top 10 processes cost, as a fraction of one core: their rate times the measured
cost of one wakeup on their node (`slowpath_timer_wakeup_cost_seconds`, the same figure `slowpath top` and the
recording rule instance_cgroup_comm:slowpath_timer_wakeup_cpu_seconds:rate5m use). The dashed series per node is
what a process at the SlowpathTimerLoop threshold of 500 wakeups/s would cost there. Normal: well under 1 %;
a 1 ms ticker is about 1000 wakeups/s, 1-3 % of a core on most nodes.""",
        RATIO,
        [target(f"topk(10, {rate('slowpath_timer_wakeups_total')} * on (instance) group_left {wakeup_cost})",
                LEGEND_PROC, "A"),
         target(f"500 * {wakeup_cost}", "{{instance}} at 500 wakeups/s", "B")],
        w=12, h=9, links=[DRILLDOWN],
    ).override_by_query("B", [DASHED]))
    d = d.with_panel(timeseries_panel(
        ids(), "Cost of one timer wakeup per node", """
Measured CPU seconds of one timer wakeup on each node (`slowpath_timer_wakeup_cost_seconds`: the agent's thread
CPU time over 200 sleeps of 200 us, every 5 min): the expiry, the switch in and out, the return to user space.
Normal: about 5-30 us; more with CPU mitigations, on virtual machines and with deep idle states.""",
        SECONDS,
        [target(wakeup_cost, "{{instance}}")],
        w=12, h=9,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Timer wakeups by what the processes wait in", """
Timer wakeups per second of the selected processes, by `wait`: the syscall whose timeout expired (Go and the JVM
wait in futex, Node in epoll_wait, Python 3.11+ in clock_nanosleep), timerfd, posix_timer or other. Tells which
runtime's tickers dominate a node.""",
        OPS,
        [target(rate("slowpath_timer_wakeups_total", by="instance, wait"), "{{wait}} @ {{instance}}")],
        w=12, h=9,
    ))
    d = d.with_panel(heatmap_panel(
        ids(), "Requested timeouts of timed waits (node)", """
Heatmap of the timeouts processes ask for in timed waits (sleeps, futex, epoll, poll, select; absolute
deadlines as their distance at the call), summed over each node's processes, in requests read per second per
bucket (`slowpath_node_timer_requested_seconds`): every sleep, and of the other waits the first of each process
in each jiffy, so the band's shape is right and its height is at most HZ per process and CPU (the exact rate of
waits is `slowpath_node_timer_waits_total`). Normal: mass at 10 ms and above. A hot band at <= 1 ms is a ticker;
find it in "Top processes by timer wakeups".""",
        [target(f"sum by (le) (rate(slowpath_node_timer_requested_seconds_bucket{{{NODE}}}[{RI}]))", "{{le}}",
                fmt=pm.PromQueryFormat.HEATMAP)],
        y_unit=SECONDS, cell_unit=OPS, w=12, h=9,
    ))
    d = d.with_panel(heatmap_panel(
        ids(), "Requested sleep durations", """
Heatmap of the requested durations of sleeps (buckets 1 us ... 10 s, classified exactly in the kernel),
for the selected nodes and processes, in sleeps per second per bucket. Normal: mass at 100 ms and above. A hot
band at <= 1 ms is a polling loop (the 1 ms ticker case); find its owner in "Top processes by timer wakeups".""",
        [target(f"sum by (le) (rate(slowpath_sleep_requested_seconds_bucket{{{PROC}}}[{RI}]))", "{{le}}",
                fmt=pm.PromQueryFormat.HEATMAP)],
        y_unit=SECONDS, cell_unit=OPS, w=12, h=9,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Median requested sleep of the busiest sleepers", """
Median requested sleep duration of the 10 processes with the most sleeps per second
(histogram_quantile(0.5) of `slowpath_sleep_requested_seconds`). Normal: tens of milliseconds or more. A median of
1 ms or less at a high rate is a ticker: see "Top processes by timer wakeups".""",
        SECONDS,
        [target(f"histogram_quantile(0.5, sum by ({BY_PROC}, le) (rate(slowpath_sleep_requested_seconds_bucket"
                f"{{{PROC}}}[{RI}]))) and on ({BY_PROC}) topk(10, "
                f"{rate('slowpath_sleep_requested_seconds_count')})", LEGEND_PROC)],
        w=12, h=9, threshold_steps=[(None, "red"), (0.001001, "green")], links=[DRILLDOWN],
    ))

    # --- THP and compaction ------------------------------------------------------------
    d = d.with_row(row(ids(), "Transparent huge pages and compaction"))
    allocs = rate("slowpath_thp_fault_allocs_total", by="instance")
    fallbacks = rate("slowpath_thp_fault_fallbacks_total", by="instance")
    # Series appear on the first non-zero count: a node with THP allocations and
    # no fallback series has had 0 fallbacks, shown as 0 rather than no data.
    fallbacks_or_zero = f"({fallbacks} or 0 * {allocs})"
    allocs_or_zero = f"({allocs} or 0 * {fallbacks})"
    d = d.with_panel(timeseries_panel(
        ids(), "THP fault allocations and fallbacks per node", """
Transparent huge pages allocated on page faults, and faults whose huge-page allocation failed and fell back to
4 KiB pages, per second per node. Allocations are normal for THP users (JVMs, databases with MADV_HUGEPAGE).
Fallbacks mean no free 2 MiB block was available: memory is fragmented, see the fallback ratio and compaction.""",
        OPS,
        [target(allocs, "{{instance}} allocations", "A"),
         target(fallbacks_or_zero, "{{instance}} fallbacks", "B")],
        w=8, h=8,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "THP fault fallback ratio per node", """
fallbacks / (allocations + fallbacks) of THP page faults per node. Normal: near 0 %. High (above ~10-20 %
sustained) means huge pages are requested but memory is too fragmented to provide them: check the node's THP
settings (`defrag`: "defer+madvise" or "madvise" let MADV_HUGEPAGE users compact; "never" gives up at once),
proactive compaction (vm.compaction_proactiveness), memory pressure, and the direct-compaction stalls below.""",
        RATIO,
        [target(f"{fallbacks_or_zero} / ({allocs_or_zero} + {fallbacks_or_zero})", "{{instance}}")],
        w=8, h=8, threshold_steps=[(None, "green"), (0.1, "orange"), (0.5, "red")],
    ))
    d = d.with_panel(table_panel(
        ids(), "THP settings per node", """
The bracketed choices of /sys/kernel/mm/transparent_hugepage/{enabled,defrag} per node. Read together with the
fallback ratio: enabled=always gives huge pages to every large anonymous mapping (more faults, more compaction);
defrag=always makes faulting processes compact synchronously (direct-compaction stalls); madvise or defer+madvise
limit that to processes that asked for huge pages.""",
        [target(f"max by (instance, enabled, defrag) (slowpath_thp_settings_info{{{NODE}}})",
                instant=True, fmt=pm.PromQueryFormat.TABLE)],
        w=8, h=8,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Top processes by THP fault allocations", """
THP fault allocations per second, top 10 processes. Normal for processes that use huge pages on purpose. A
process with many allocations and a high node fallback ratio suffers fragmentation; one you did not expect may be
getting huge pages because enabled=always.""",
        OPS,
        [target(top("slowpath_thp_fault_allocs_total"), LEGEND_PROC)],
        w=8, h=8, links=[DRILLDOWN],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Compaction time by trigger (seconds per second)", """
Seconds spent compacting memory per second, per node and trigger: direct (an allocating process stalls until
compaction ends), kcompactd (background kernel thread) and manual (/proc/sys/vm/compact_memory or sysfs).
Normal: direct near 0; kcompactd a little under pressure. direct above 0.05 s/s hurts latency: see the
per-process panel, reduce fragmentation (THP defrag=defer or madvise, vm.compaction_proactiveness, more free memory
via vm.min_free_kbytes / watermark_scale_factor).""",
        SECONDS,
        [target(rate("slowpath_compaction_seconds_total", by="instance, trigger"), "{{instance}} {{trigger}}")],
        w=8, h=8, threshold_steps=[(None, "green"), (0.05, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Direct compaction stall time per process", """
Seconds per second each process spent stalled in direct compaction (`slowpath_compaction_seconds_total{trigger="direct"}`),
top 10. Normal: 0 (no series at all). Above 0.05 s/s the process loses noticeable time in its allocations
(latency spikes): make huge-page allocations non-blocking (THP defrag=defer or madvise), keep more memory free, or
let kcompactd/proactive compaction work ahead.""",
        SECONDS,
        [target(top("slowpath_compaction_seconds_total", 'trigger="direct"'), LEGEND_PROC)],
        w=8, h=8, threshold_steps=[(None, "green"), (0.05, "red")], links=[DRILLDOWN],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Compaction runs by trigger", """
Compaction runs (one per zone) per second, per node and trigger. Normal: rare. Frequent direct runs mean
allocations keep failing on fragmented memory (see stall time); frequent kcompactd runs mean the node is working
to keep high-order pages available.""",
        OPS,
        [target(rate("slowpath_compaction_runs_total", by="instance, trigger"), "{{instance}} {{trigger}}")],
        w=8, h=8,
    ))

    # --- The other signals, from their declarations ----------------------------------------
    for signal in declared.generated_signals():
        d = declared_rows(d, ids, signal)

    # --- Agent health --------------------------------------------------------------------
    d = d.with_row(row(ids(), "Agent health"))
    d = d.with_panel(stat_panel(
        ids(), "Agents up / down", """
Scrape targets of the selected jobs that Prometheus reaches (`up`). Normal: down = 0. A down agent means no data
from that node: check the DaemonSet/unit (`systemctl status slowpath`, `kubectl -n slowpath get pods`), its
/healthz and its log.""",
        COUNT,
        [target(f"sum(up{{{NODE}}})", "up", "A", instant=True),
         target(f"sum(1 - up{{{NODE}}})", "down", "B", instant=True)],
        w=6, h=6, text_mode=cm.BigValueTextMode.VALUE_AND_NAME,
    ).override_by_name("down", [dm.DynamicConfigValue(id_val="thresholds", value={
        "mode": "absolute", "steps": [{"value": None, "color": "green"}, {"value": 1, "color": "red"}]})]))
    d = d.with_panel(state_timeline_panel(
        ids(), "Probes attached", """
Each kernel hook of each agent (`slowpath_probe_attached`): attached (with its attach type in the name) or refused
by the kernel. Normal: every hook attached (the syscall hook, process exit and exec, cgroup creation, and the
hooks of each signal switched on). A refused probe's signals are missing on that node: the agent log names the
reason (kernel version, BTF, lockdown, seccomp); try `--bpf.attach-type=raw-tp`. Hooks left out by design
(`slowpath_probe_expected` 0) show as refused: "Signals counting" says which signal they stop, and why.""",
        [target(f"min by (instance, probe, attach_type) (slowpath_probe_attached{{{NODE}}})",
                "{{instance}} {{probe}} ({{attach_type}})")],
        value_mappings({"1": ("attached", "green"), "0": ("refused", "red")}),
        w=18, h=6,
    ))
    d = d.with_panel(state_timeline_panel(
        ids(), "Signals counting", """
Whether each signal counts on each node (`slowpath_collector_counting`): counts, or cannot, with why and the first
hook it lacks. Normal: every signal switched on counts. missing_capability: a privilege the kernel asks for the hook (the timer signal on 5.10 to
5.12 without CAP_SYSLOG: Helm agent.readKernelAddresses=true); no_kernel_hook: a tracepoint the kernel was built
without; kernel_refused: see "Probes attached" and the agent log. Alert SlowpathCollectorCannotCount (info; runbook:
collector-cannot-count); switched_off: --no-collector.<name>, no alert.""",
        [target(f'min by (instance, collector, reason, hook) (slowpath_collector_counting{{{NODE}}})',
                "{{instance}} {{collector}} {{reason}} {{hook}}")],
        value_mappings({"1": ("counts", "green"), "0": ("cannot count", "orange")}),
        w=24, h=5,
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Lost events and scrape errors", """
Events the agent could not record, per second, by reason, and failed scrapes. Normal: 0 everywhere; any increase
is also logged. process_table_full: raise --bpf.max-processes; compaction_table_full: raise --bpf.max-compactions;
ringbuf_full: raise --bpf.ringbuf-bytes (counts of exec'ing processes were merged, not lost);
sleep_request_unreadable: a sleep whose duration could not be read (counted, not classified);
pid_reuse_pending: events of a process on a recycled pid while ring buffer and table were full: raise --bpf.max-processes;
cgroup_name: a new cgroup's path not recorded (it may show as unknown).
Also processes counted in an over-the-limit series (slowpath_series_folded_total: --metrics.max-comms-per-cgroup,
--metrics.max-series; totals stay exact), and a 1 for an agent whose --web.config.file changed and cannot be read
(it keeps the settings it read last: SlowpathWebConfigInvalid).""",
        OPS,
        [target(rate("slowpath_lost_events_total", by="instance, reason", sel=NODE), "{{instance}} {{reason}}", "A"),
         target(rate("slowpath_scrape_errors_total", by="instance", sel=NODE), "{{instance}} scrape errors", "B"),
         target(rate("slowpath_series_folded_total", by="instance, limit", sel=NODE),
                "{{instance}} folded over {{limit}} limit", "C"),
         target(f"(1 - slowpath_web_config_last_reload_successful{{{NODE}}}) > 0",
                "{{instance}} web config unreadable (1)", "D")],
        w=8, h=8, threshold_steps=[(None, "green"), (1e-9, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Agent scrape duration", """
Time the agent takes to answer a scrape (reading the kernel tables and rendering the page): p99 and mean per
node. Normal: a few milliseconds. Growing with the number of series: check cardinality (--metrics.pid-label is for
debugging only) and the tracked processes.""",
        SECONDS,
        [target(f"histogram_quantile(0.99, {rate('slowpath_scrape_duration_seconds_bucket', by='instance, le', sel=NODE)})",
                "{{instance}} p99", "A"),
         target(f"{rate('slowpath_scrape_duration_seconds_sum', by='instance', sel=NODE)} / "
                f"{rate('slowpath_scrape_duration_seconds_count', by='instance', sel=NODE)}", "{{instance}} mean", "B")],
        w=8, h=8, threshold_steps=[(None, "green"), (0.1, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Tracked processes", """
Thread groups in the agent's kernel process table now. Normal: about the number of processes on the node that hit
a counted event. Near --bpf.max-processes (default 16384) events start to be dropped (lost events:
process_table_full): raise the flag.""",
        COUNT,
        [target(f"max by (instance) (slowpath_tracked_processes{{{NODE}}})", "{{instance}}")],
        w=8, h=8, threshold_steps=[(None, "green"), (14000, "orange"), (16384, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "slowpath's own cost (% of a core)", """
What slowpath costs each node, as a fraction of one core. Its own part: the in-kernel time of its BPF programs per
hook beyond an empty program's (`slowpath_probe_run_seconds_total`: every run charged at the time per run the kernel
measured in the agent's statistics windows, less an empty program's, which is the statistics' own clock reads,
"measured"; without CAP_SYS_ADMIN, the programs' own timing of one run in 1,024, "estimated") and the agent process (`process_cpu_seconds_total`: user time and its own syscalls). The floor
its attach type forces, "dispatch" (`slowpath_probe_dispatch_seconds_total`: with sys_enter as a tracepoint every
syscall of the node takes the traced path, whatever program is on it; none with fentry). Normal: own part well under
1 % of a core; it grows with what the node does (syscalls, wakeups, timers, page allocations), not with what
slowpath finds. "own part, share of the node" divides it by the node's CPUs (`slowpath_node_cpus`): above 2 % for
30 min, alert SlowpathOverheadHigh (runbook: overhead-high); floor above 5 % of a core: SlowpathDispatchFloorHigh,
whose fix is fentry (runbook: dispatch-floor-high).""",
        RATIO,
        [target(rate("slowpath_probe_run_seconds_total", by="instance, probe, method", sel=NODE),
                "{{instance}} {{probe}} ({{method}})", "A"),
         target(rate("slowpath_probe_dispatch_seconds_total", by="instance, probe", sel=NODE),
                "{{instance}} {{probe}} dispatch", "C"),
         target(f"rate(process_cpu_seconds_total{{{NODE}}}[{RI}])", "{{instance}} agent process", "B"),
         # one sum over both families, as instance:slowpath_own_cpu:rate5m: an `or` of two sums
         # by instance would keep the programs' and drop the agent process
         target(f"sum by (instance) (rate(slowpath_probe_run_seconds_total{{{NODE}}}[{RI}]) "
                f"or rate(process_cpu_seconds_total{{{NODE}}}[{RI}])) "
                f"/ on (instance) max by (instance) (slowpath_node_cpus{{{NODE}}})",
                "{{instance}} own part, share of the node", "D")],
        w=8, h=8, threshold_steps=[(None, "green"), (0.01, "orange"), (0.05, "red")],
    ))
    d = d.with_panel(timeseries_panel(
        ids(), "Agent memory", """
Resident memory of the agent. Normal: tens of MiB (the kernel tables are preallocated BPF maps, not counted here).
The systemd unit caps it at 128 MiB; steady growth means growing series cardinality.""",
        BYTES,
        [target(f"process_resident_memory_bytes{{{NODE}}}", "{{instance}}")],
        w=8, h=8,
    ))
    d = d.with_panel(table_panel(
        ids(), "Agent versions", """
Version and architecture of each running agent (`slowpath_build_info`). Normal: one version across the fleet
after a rollout; mixed versions mean the rollout is incomplete.""",
        [target(f"max by (instance, version, arch) (slowpath_build_info{{{NODE}}})", instant=True,
                fmt=pm.PromQueryFormat.TABLE)],
        w=8, h=8,
    ))
    return d.build()


def declared_rows(d, ids, signal):
    """A signal's row from its declaration (dashboards/src/declared.py): per
    recorded rate, the top processes and what they cost (or the rate per
    node where no cost is declared)."""
    d = d.with_row(row(ids(), declared.row_title(signal)))
    for r in declared.rates(signal):
        steps = [(None, "green"), (r.threshold, "red")] if r.threshold else None
        d = d.with_panel(timeseries_panel(
            ids(), f"Top processes by {r.title.lower()}", f"""
{r.title} per process, top 10 (`{declared.series(r)}`): {r.meaning}.{declared.alert_sentence(r)}""",
            r.unit,
            [target(f"topk(10, {rate(r.family, r.selector)})", LEGEND_PROC)],
            w=12, h=9, threshold_steps=steps, links=[DRILLDOWN],
        ))
        if r.cost_gauge:
            cost = f"max by (instance) ({r.cost_gauge}{{{NODE}}})"
            d = d.with_panel(timeseries_panel(
                ids(), f"Estimated CPU of {r.title.lower()} (% of a core)", f"""
What the {r.title.lower()} of the top 10 processes cost, as a fraction of one core: their rate times the node's
measured cost of one call (`{r.cost_gauge}`), as `slowpath top` and the estimated-CPU recording rule charge them.""",
                RATIO,
                [target(f"topk(10, {rate(r.family, r.selector)} * on (instance) group_left {cost})", LEGEND_PROC)],
                w=12, h=9, links=[DRILLDOWN],
            ))
        else:
            d = d.with_panel(timeseries_panel(
                ids(), f"{r.title} per node", f"""
{r.title} per node, every process summed (`{declared.series(r)}`): {r.meaning}.""",
                r.unit,
                [target(rate(r.family, r.selector, by="instance"), "{{instance}}")],
                w=12, h=9,
            ))
    return d
