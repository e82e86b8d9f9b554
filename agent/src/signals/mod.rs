//! The slow paths slowpath watches, one module (or folder) each. A signal
//! owns everything it knows: its label values (the names of the BPF enums'
//! slots), its metric families, its doctor rules with their thresholds, flags
//! and prose, its known sources, its call-site kinds, what it reads or
//! measures about the node ([`NodeNeeds`]: sysfs settings, the agent's own
//! checks, the doctor's measurements) and what it asks of the kernel side
//! ([`KernelNeeds`]). The kernel side counts into `struct sp_counters`
//! (`bpf/slowpath.h`).
//!
//! Everything outside this folder works on [`SIGNALS`] and the [`Signal`]
//! interface and names no signal. Adding a signal: its counters and hook in
//! `bpf/`, one module here, one line in [`SIGNALS`] (and in [`SignalArgs`]
//! if it has flags), its tests and docs (see ARCHITECTURE.md).
//!
//! Each signal can be switched off (`--no-collector.<name>`,
//! [`Collectors`]): the agent then runs only the enabled ones
//! ([`SignalArgs::enabled`]) and asks the kernel side only for their needs.

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus::proto::MetricFamily;

use crate::bpf::types::{bss, sp_callsite_kind, sp_counters, sp_syscall_group};
use crate::bpf::{syscalls_of, Hook, KernelBtf, KernelSetup, LeftOutHook, RodataPatch};
use crate::exposition::{Family, Labels};
use crate::finding::{Delta, Finding, ProcessRate};
use crate::node::{Fact, NodeFacts, SettingsReader};
use crate::snapshot::{Series, Snapshot};

pub use alert::{ProcessAlert, Setting};
pub use collectors::{log_left_out, Collectors};
pub use counting::counting;
pub use family_docs::FamilyDoc;
pub use finding_rules::FindingRule;
pub use recorded::{FleetRow, Recorded};
pub use top::{node_words, Cell, EventCost, NodeGauges, Top, TopColumn, TopNode};

mod alert;
pub mod clock;
mod collectors;
mod counting;
pub mod declaration;
mod family_docs;
pub mod fdclose;
mod finding_rules;
pub mod fork;
pub mod memory;
pub mod purge;
mod recorded;
pub mod sched_yield;
pub mod sigmask;
pub mod sleep;
pub mod timer;
mod top;
pub mod tzfile;
pub mod vocabulary;

/// What the metrics of one scrape are made from.
pub struct Scrape<'a> {
    pub snapshot: &'a Snapshot,
    /// The node's settings read for this scrape, then the worker's checks.
    pub node: &'a NodeFacts,
    /// Label pairs of each series of `snapshot`, in the same order: made
    /// once per scrape, shared by every signal.
    labels: Vec<Labels>,
}

impl<'a> Scrape<'a> {
    pub fn new(snapshot: &'a Snapshot, node: &'a NodeFacts) -> Self {
        let labels = snapshot.series.iter().map(Series::labels).collect();
        Self {
            snapshot,
            node,
            labels,
        }
    }

    /// Every per-process series with its label pairs.
    pub fn series(&self) -> impl Iterator<Item = (&Labels, &Series)> {
        self.labels.iter().zip(&self.snapshot.series)
    }
}

/// One signal: its families, how it exports them, how it diagnoses, and
/// what it needs from the node and the kernel. Serialized, it is what
/// `slowpath signals` prints for the generators and tests
/// ([`declaration`]): every field but the functions and the node's needs,
/// the families as name, type and help, and the kernel's needs as the
/// hooks and the syscalls counted on this architecture.
#[derive(serde::Serialize)]
pub struct Signal {
    /// Short name, as in the collector flags of docs/flags.md.
    pub name: &'static str,
    /// What it watches, in one line (the comment of its collector switch in
    /// the chart's values and the systemd unit's defaults).
    pub summary: &'static str,
    /// The slow path's name in the README's table of cases (docs/generate.py,
    /// which takes `summary` for the row's "what").
    pub case: &'static str,
    /// What the slow path cost the cases that found it, in one Markdown
    /// paragraph: the README's line for the case under "What and why"
    /// (docs/generate.py); `None` for a signal that is no slow path of its
    /// own (it feeds another's figures).
    pub story: Option<&'static str>,
    /// Every family [`export`](Self::export) may produce.
    #[serde(serialize_with = "declaration::family_views")]
    pub families: &'static [&'static Family],
    /// This signal's metric families for one scrape (empty ones included).
    #[serde(skip)]
    pub export: fn(&Scrape<'_>) -> Vec<MetricFamily>,
    /// This signal's findings for one observation, in the order of its rules.
    #[serde(skip)]
    pub diagnose: fn(&Observation<'_>) -> Vec<Finding>,
    /// Sharpen one of this signal's findings by looking at the live
    /// processes it names (`/proc`); run by the doctor only, not in tests
    /// of recorded observations.
    #[serde(skip)]
    pub enrich: Option<fn(&mut Finding)>,
    /// The known sources its findings' call sites are matched against
    /// (generated from `slowpath signals` into the chart's
    /// `files/known-sources.yaml`, which the alert annotations read, and into
    /// docs/runbook.md and docs/doctor.md).
    pub sources: &'static [crate::sources::KnownSource],
    /// The call kinds (`enum sp_callsite_kind`) under which the kernel side
    /// samples user stacks at this signal's events, with their names in
    /// folded stacks and in `/debug/callsites?kind=`.
    pub call_sites: &'static [CallKind],
    #[serde(skip)]
    pub node: NodeNeeds,
    /// Serialized as `hooks` and `syscalls` beside the other fields.
    #[serde(flatten)]
    pub kernel: KernelNeeds,
    /// How `slowpath top` shows it: its columns, the histogram of
    /// requested timeouts it adds to, its counters with no column and why.
    pub top: Top,
    /// The rates of its counters the chart's recording rules record, per
    /// process and per node, which its alerts, the dashboards and the
    /// estimated-CPU record read.
    pub recorded: &'static [Recorded],
    /// The findings its [`diagnose`](Self::diagnose) makes, each with its
    /// severities and when it holds.
    pub finding_rules: &'static [FindingRule],
    /// How its per-process families read: labels, what a count is, the
    /// hook (docs/metrics.md's table of labels and hooks).
    pub family_docs: &'static [FamilyDoc],
    /// Its case in docs/metrics.md's PromQL, each part a title line (after
    /// "# N. ") and then its queries and comments, verbatim.
    pub promql: &'static [&'static str],
    /// Its per-process alert, made by the chart from this declaration
    /// (threshold and duration in its values); `None` for a signal with
    /// none (or with alerts of another shape only, written in the chart).
    pub alert: Option<ProcessAlert>,
    /// Its sections of docs/runbook.md, Markdown, each from a `## ` heading
    /// (the anchor its alerts' `runbook_url` names) to the next: what fired,
    /// why the threshold is where it is, how to find the cause, the fix.
    /// docs/generate.py writes every signal's, in [`SIGNALS`] order; empty
    /// for a signal with no alert of its own.
    pub runbook: &'static str,
}

/// What a signal reads or measures about the node as a whole; each result
/// is a [`Fact`] the signal finds again by type in [`NodeFacts`].
pub struct NodeNeeds {
    /// sysfs settings, read on every scrape and report.
    pub settings: Option<SettingsReader>,
    /// A check the agent runs on itself in the BPF worker, with its own
    /// counters from the kernel's process table (`None` when the syscall
    /// hook is not attached); its last result goes into every snapshot.
    pub check: Option<NodeCheck>,
    /// A measurement the doctor makes before its report, given the facts
    /// gathered so far (settings, the checks).
    pub measure: Option<fn(&NodeFacts) -> Fact>,
}

impl NodeNeeds {
    /// A signal that needs nothing about the node.
    pub const NONE: NodeNeeds = NodeNeeds {
        settings: None,
        check: None,
        measure: None,
    };
}

/// A periodic check of the node the agent runs on itself.
pub struct NodeCheck {
    /// How often, from the signal's flags.
    pub every: fn(&SignalArgs) -> Duration,
    /// Run it, with a view of the loaded object's tables.
    pub run: fn(&dyn KernelView) -> Fact,
}

/// What a node check may read of the kernel side (the BPF worker's view of
/// the loaded object).
pub trait KernelView {
    /// The agent's own counters in the kernel's process table (zero before
    /// its first counted event; `None` when the syscall hook is not
    /// attached, so syscalls are not counted).
    fn own_counters(&self) -> Option<sp_counters>;
}

/// What a signal asks of the kernel side beyond counting into
/// `struct sp_counters`. `bpf/` adds the core hooks every signal shares
/// (`sys_enter` when some signal counts syscalls, process exit and exec,
/// cgroup creation). A signal switched off asks none of it.
pub struct KernelNeeds {
    /// Tracepoint hooks only this signal counts at, in report order.
    pub hooks: &'static [Hook],
    /// The groups of syscalls it counts at the `sys_enter` hook (their
    /// switches in the object are turned on while it runs); which syscalls
    /// are in a group comes from the object's table
    /// (`bpf/core/syscall_table.h`, read by `bpf::counted_syscalls`). Two
    /// signals may count the same group (it is hooked while either runs).
    pub syscall_groups: &'static [sp_syscall_group],
    /// Its settings in the object's read-only data, made once per start
    /// from its flags and the kernel's BTF; among them the switches
    /// (`count_*`) of the syscall groups it counts, which stay off for a
    /// signal switched off.
    pub rodata: Option<fn(&SignalArgs, &KernelBtf) -> RodataPatch>,
    /// Keeps the object's writable data current, on every pass of the BPF
    /// worker (at most 500 ms apart).
    pub upkeep: Option<fn(&mut bss)>,
    /// Capacities of the maps only it uses, from its flags: (map name in
    /// the object, max entries).
    pub map_sizes: Option<MapSizes>,
    /// Its hooks the kernel will refuse by design on this node, with why,
    /// from the kernel's BTF and the agent's privileges (checked once per
    /// start): `slowpath_probe_expected` 0 for them, not an alert.
    pub left_out: Option<LeftOut>,
}

/// Only what the generators and tests read: `hooks`, the tracepoints' names,
/// and `syscalls`, the names of the syscalls its groups count on this
/// architecture (the object's table; another signal may count some of
/// them too).
impl serde::Serialize for KernelNeeds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("KernelNeeds", 2)?;
        let hooks: Vec<&str> = self.hooks.iter().map(|h| h.name).collect();
        out.serialize_field("hooks", &hooks)?;
        out.serialize_field("syscalls", &syscalls_of(self.syscall_groups))?;
        out.end()
    }
}

/// Each hook of a signal left out by design on this kernel, with why.
pub type LeftOut = fn(&KernelBtf) -> Vec<LeftOutHook>;

/// (map name in the object, max entries) of each map a signal sizes, from
/// its flags.
pub type MapSizes = fn(&SignalArgs) -> Vec<(&'static str, u32)>;

/// What every enabled signal asks of the kernel side, for `bpf::load` (and
/// for the check of the embedded object against it): a syscall two signals
/// count at is named once, as is a group two signals count.
pub fn kernel_setup(args: &SignalArgs, btf: &KernelBtf) -> KernelSetup {
    let needs = || args.enabled().map(|s| &s.kernel);
    let mut syscall_groups: Vec<sp_syscall_group> = Vec::new();
    for &group in needs().flat_map(|k| k.syscall_groups) {
        if !syscall_groups.contains(&group) {
            syscall_groups.push(group);
        }
    }
    KernelSetup {
        hooks: needs().flat_map(|k| k.hooks.iter().copied()).collect(),
        fentry_syscalls: syscalls_of(&syscall_groups),
        syscall_groups,
        rodata: needs()
            .filter_map(|k| k.rodata)
            .map(|patch| patch(args, btf))
            .collect(),
        map_sizes: needs()
            .filter_map(|k| k.map_sizes)
            .flat_map(|sizes| sizes(args))
            .collect(),
        left_out: needs()
            .filter_map(|k| k.left_out)
            .flat_map(|left_out| left_out(btf))
            .collect(),
    }
}

/// What every doctor rule sees.
pub struct Observation<'a> {
    /// The processes selected, with their counter growth.
    pub deltas: &'a [Delta],
    /// Length of the observation in seconds.
    pub secs: f64,
    /// What the signals read and measured about the node (each signal
    /// finds its own facts by type).
    pub node: &'a NodeFacts,
    /// The signals' flags (thresholds).
    pub args: &'a SignalArgs,
}

impl Observation<'_> {
    /// The processes `rate` picks (rate per second and break-down), highest first.
    pub fn ranked(
        &self,
        mut rate: impl FnMut(&Delta) -> Option<(f64, BTreeMap<String, f64>)>,
    ) -> Vec<ProcessRate> {
        let mut processes: Vec<ProcessRate> = self
            .deltas
            .iter()
            .filter_map(|d| {
                rate(d).map(|(per_second, detail)| ProcessRate::of(d, per_second, detail))
            })
            .collect();
        processes.sort_by(|a, b| b.per_second.total_cmp(&a.per_second));
        processes
    }
}

/// The signals' flags, flattened into the agent's command line (which
/// signals run, then each signal's own `Args` struct; every flag also has an
/// environment variable).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SignalArgs {
    #[command(flatten)]
    pub collectors: Collectors,
    #[command(flatten)]
    pub timer: timer::TimerArgs,
    #[command(flatten)]
    pub clock: clock::ClockArgs,
    #[command(flatten)]
    pub memory: memory::MemoryArgs,
}

impl SignalArgs {
    /// The signals switched on, in [`SIGNALS`] order.
    pub fn enabled(&self) -> impl Iterator<Item = &'static Signal> + '_ {
        self.collectors.enabled()
    }
}

/// Every signal, in the order the doctor runs their rules.
pub const SIGNALS: [&Signal; 10] = [
    &clock::SIGNAL,
    &sigmask::SIGNAL,
    &sleep::SIGNAL,
    &timer::SIGNAL,
    &memory::SIGNAL,
    &tzfile::SIGNAL,
    &fdclose::SIGNAL,
    &sched_yield::SIGNAL,
    &purge::SIGNAL,
    &fork::SIGNAL,
];

/// Every column of `slowpath top`, in display order: each signal's, in
/// [`SIGNALS`] order.
pub fn top_columns() -> impl Iterator<Item = &'static TopColumn> {
    SIGNALS.into_iter().flat_map(|s| s.top.columns.iter())
}

/// The values of `slowpath top --sort`: the estimated CPU, all events, then
/// each column's.
pub fn top_sort_names() -> Vec<&'static str> {
    let columns = top_columns().map(|c| c.sort);
    ["cpu", "events"].into_iter().chain(columns).collect()
}

/// Every family of every signal.
#[cfg(test)]
pub fn families() -> impl Iterator<Item = &'static Family> {
    SIGNALS.into_iter().flat_map(|s| s.families.iter().copied())
}

/// The node settings of every enabled signal, read under the sysfs root
/// `sysfs`, in [`SIGNALS`] order.
pub fn read_node_settings(sysfs: &std::path::Path, collectors: &Collectors) -> NodeFacts {
    NodeFacts::read_settings(sysfs, collectors.enabled().filter_map(|s| s.node.settings))
}

/// Warn, once per file at start, about the enabled signals' node settings files
/// (`NodeNeeds::settings`) that cannot be read under `sysfs` (`--path.sysfs`): their
/// metrics will be missing, and each scrape counts
/// `slowpath_scrape_errors_total{source="sysfs"}`. Not fatal: every per-process
/// signal still works.
pub fn warn_if_sysfs_unreadable(sysfs: &std::path::Path, collectors: &Collectors) {
    for file in read_node_settings(sysfs, collectors).unreadable.iter() {
        tracing::warn!(
            path = %file.path.display(),
            error = %file.error,
            "cannot read this node setting: its metrics will be missing; check --path.sysfs \
             (in a container, mount the host's /sys and pass --path.sysfs=/host/sys)"
        );
    }
}

/// A kind of call under which the kernel side samples user stacks at a
/// signal's events (`enum sp_callsite_kind`).
#[derive(serde::Serialize)]
pub struct CallKind {
    #[serde(skip)]
    pub kind: sp_callsite_kind,
    /// Its name in folded stacks and `/debug/callsites?kind=`.
    pub name: &'static str,
    /// The calls it samples, a few words of Markdown (docs/doctor.md).
    pub what: &'static str,
}

/// Names of the call kinds, indexed by `enum sp_callsite_kind` ("?" for a
/// kind no signal names).
pub fn callsite_kinds() -> Vec<&'static str> {
    let count = crate::bpf::slot!(sp_callsite_kind::SP_CALLSITE_KIND_COUNT);
    let mut names = vec!["?"; count];
    for call in SIGNALS.iter().flat_map(|s| s.call_sites) {
        names[crate::bpf::slot!(call.kind)] = call.name;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::follows_conventions;

    /// The setup of the default flags on the running kernel.
    fn setup() -> KernelSetup {
        setup_without(&[])
    }

    /// The setup on the running kernel with the signals named `off`
    /// switched off.
    fn setup_without(off: &[&str]) -> KernelSetup {
        let btf = KernelBtf::open(std::path::Path::new(crate::bpf::KERNEL_BTF)).unwrap();
        let collectors = (off.iter()).fold(Collectors::default(), |c, name| c.with(name, false));
        let args = SignalArgs {
            collectors,
            ..Default::default()
        };
        kernel_setup(&args, &btf)
    }

    fn hook_names(setup: &KernelSetup) -> Vec<&'static str> {
        setup.hooks.iter().map(|h| h.name).collect()
    }

    #[test]
    fn the_embedded_object_has_the_programs_the_signals_declare() {
        assert_eq!(crate::bpf::check_object(&setup()), Ok(()));
    }

    #[test]
    fn every_signal_name_is_a_unique_collector_name() {
        let mut names = std::collections::HashSet::new();
        for s in SIGNALS {
            assert!(names.insert(s.name), "{} twice", s.name);
            assert!(s.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        }
    }

    #[test]
    fn a_signal_switched_off_asks_for_none_of_its_own_hooks_syscalls_or_maps() {
        let all = setup();
        for signal in SIGNALS {
            let without = setup_without(&[signal.name]);
            let others = || SIGNALS.into_iter().filter(|s| s.name != signal.name);
            for hook in signal.kernel.hooks {
                assert!(
                    !without.hooks.contains(hook),
                    "{}: {}",
                    signal.name,
                    hook.name
                );
            }
            for group in signal.kernel.syscall_groups {
                let shared = others().any(|s| s.kernel.syscall_groups.contains(group));
                assert_eq!(
                    without.syscall_groups.contains(group),
                    shared,
                    "{}",
                    signal.name
                );
                for syscall in syscalls_of(&[*group]) {
                    let hooked = without.fentry_syscalls.contains(&syscall);
                    assert_eq!(hooked, shared, "{}: {syscall}", signal.name);
                }
            }
            let own_maps = signal
                .kernel
                .map_sizes
                .map_or(0, |m| m(&SignalArgs::default()).len());
            assert_eq!(without.map_sizes.len(), all.map_sizes.len() - own_maps);
            let own_patch = usize::from(signal.kernel.rodata.is_some());
            assert_eq!(without.rodata.len(), all.rodata.len() - own_patch);
        }
        let no_timer = setup_without(&["timer", "purge", "fork"]);
        assert_eq!(
            hook_names(&no_timer),
            ["mm_page_alloc", "mm_compaction_begin", "mm_compaction_end"]
        );
        assert!(!no_timer.fentry_syscalls.contains(&"futex"));
        assert!(no_timer.fentry_syscalls.contains(&"nanosleep")); // the sleep signal's
        let no_memory = setup_without(&["memory", "purge", "fork"]);
        let timer_hooks = [
            "hrtimer_expire_entry",
            "hrtimer_expire_exit",
            "sched_waking",
        ];
        assert_eq!(hook_names(&no_memory), timer_hooks);
        assert!(no_memory.map_sizes.is_empty());
        let no_sleeps = setup_without(&["sleep", "timer"]);
        assert!(!no_sleeps.fentry_syscalls.contains(&"nanosleep"));
        let only_memory = setup_without(&test_support::signal_names_but(&["memory"]));
        assert!(only_memory.fentry_syscalls.is_empty()); // so no sys_enter hook
    }

    #[test]
    fn a_syscall_two_signals_count_at_is_named_once() {
        let all = setup();
        let mut seen = std::collections::HashSet::new();
        for syscall in &all.fentry_syscalls {
            assert!(seen.insert(syscall), "{syscall} twice");
        }
        assert_eq!(&all.fentry_syscalls[..6], CLOCK_THEN_SIGMASK_THEN_SLEEPS);
    }

    /// The first syscalls of the default setup, in signal order.
    #[cfg(target_arch = "x86_64")]
    const CLOCK_THEN_SIGMASK_THEN_SLEEPS: [&str; 6] = [
        "clock_gettime",
        "gettimeofday",
        "time",
        "rt_sigprocmask",
        "nanosleep",
        "clock_nanosleep",
    ];
    #[cfg(target_arch = "aarch64")]
    const CLOCK_THEN_SIGMASK_THEN_SLEEPS: [&str; 6] = [
        "clock_gettime",
        "gettimeofday",
        "rt_sigprocmask",
        "nanosleep",
        "clock_nanosleep",
        "futex",
    ];

    #[test]
    fn the_syscall_groups_are_switched_on_by_the_signals_that_count_them() {
        // (clock reads, sigprocmask, sleeps, sleep calls, timed waits)
        let switches = |off: &[&str]| {
            let setup = setup_without(off);
            // SAFETY: the generated struct holds only integers, bools and
            // integer arrays, for which all zeroes is a valid value (false, 0).
            let mut rodata: crate::bpf::types::rodata = unsafe { std::mem::zeroed() };
            crate::bpf::switch_syscall_groups(&mut rodata, &setup.syscall_groups);
            for patch in setup.rodata {
                patch(&mut rodata);
            }
            let group = |g: sp_syscall_group| rodata.count_syscalls[crate::bpf::slot!(g)];
            [
                group(sp_syscall_group::SP_SYSCALLS_CLOCK_READS),
                group(sp_syscall_group::SP_SYSCALLS_SIGPROCMASK),
                group(sp_syscall_group::SP_SYSCALLS_SLEEPS),
                rodata.count_sleep_calls,
                group(sp_syscall_group::SP_SYSCALLS_TIMED_WAITS),
            ]
        };
        assert_eq!(switches(&[]), [true; 5]);
        assert_eq!(switches(&["clock"]), [false, true, true, true, true]);
        assert_eq!(switches(&["sigmask"]), [true, false, true, true, true]);
        // a sleep is a timed wait to the timer signal: its length still counts
        assert_eq!(switches(&["sleep"]), [true, true, true, false, true]);
        assert_eq!(switches(&["timer"]), [true, true, true, true, false]);
        assert_eq!(
            switches(&["sleep", "timer"]),
            [true, true, false, false, false]
        );
        assert_eq!(switches(&["memory"]), [true; 5]);
    }

    #[test]
    fn a_setup_with_a_hook_or_syscall_too_many_or_too_few_fails_the_check() {
        let problems = |change: fn(&mut KernelSetup)| {
            let mut setup = setup();
            change(&mut setup);
            crate::bpf::check_object(&setup).unwrap_err()
        };
        let no_compaction_end = problems(|s| s.hooks.retain(|h| h.name != "mm_compaction_end"));
        assert_eq!(no_compaction_end.len(), 2, "{no_compaction_end:?}");
        assert!(no_compaction_end[0].starts_with("program mm_compaction_end_btf"));
        let extra_hook = problems(|s| s.hooks.push(Hook::new("no_such_hook")));
        assert_eq!(extra_hook.len(), 3, "{extra_hook:?}");
        assert!(extra_hook[0].starts_with("hook no_such_hook has no program no_such_hook_btf"));
        assert!(extra_hook[2].starts_with("hook no_such_hook has no member SP_PROBE_NO_SUCH_HOOK"));
        let no_futex = problems(|s| s.fentry_syscalls.retain(|&n| n != "futex"));
        assert_eq!(no_futex.len(), 1, "{no_futex:?}");
        assert!(no_futex[0].starts_with("program sys_enter_fentry_futex (fentry/"));
        assert!(no_futex[0].ends_with("is accounted for by no hook and no fentry syscall"));
        let extra_syscall = problems(|s| s.fentry_syscalls.push("no_such_syscall"));
        assert_eq!(extra_syscall.len(), 1, "{extra_syscall:?}");
        let no_group = problems(|s| s.syscall_groups.push(sp_syscall_group(99)));
        assert_eq!(no_group.len(), 1, "{no_group:?}");
        assert!(no_group[0].starts_with("syscall group 99 has no syscall"));
        let no_map = problems(|s| s.map_sizes.push(("no_such_map", 16)));
        assert_eq!(no_map, ["the object has no map no_such_map to size"]);
    }

    #[test]
    fn every_call_kind_has_one_name() {
        let kinds = callsite_kinds();
        assert!(!kinds.contains(&"?"), "a kind no signal names: {kinds:?}");
        let declared: Vec<_> = SIGNALS.iter().flat_map(|s| s.call_sites).collect();
        assert_eq!(declared.len(), kinds.len(), "a kind declared twice");
        let mut names = kinds.clone();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), kinds.len(), "a name given twice: {kinds:?}");
        assert_eq!(
            kinds[crate::bpf::slot!(sp_callsite_kind::SP_CALLSITE_CLOCK)],
            "clock"
        );
    }

    #[test]
    fn every_family_follows_prometheus_conventions_and_is_unique() {
        let mut names = std::collections::HashSet::new();
        for f in families() {
            assert!(follows_conventions(f), "{}", f.name);
            assert!(names.insert(f.name), "{} exported twice", f.name);
        }
    }
}

/// Observations for the rules' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::Observation;
    use crate::bpf::types::sp_counters;
    use crate::finding::Delta;
    use crate::node::NodeFacts;
    use crate::snapshot::{Cgroup, SeriesKey};

    /// The names of every signal but those in `off`, in `SIGNALS` order: what
    /// a test expects switched on, without a list a new signal must edit.
    pub fn signal_names_but(off: &[&str]) -> Vec<&'static str> {
        let names: Vec<&'static str> = super::SIGNALS.iter().map(|s| s.name).collect();
        assert!(
            off.iter().all(|o| names.contains(o)),
            "no such signal in {off:?}"
        );
        names.into_iter().filter(|n| !off.contains(n)).collect()
    }

    /// Process `comm` (tgid 42) whose counters grew as `f` sets them.
    pub fn delta(comm: &str, f: impl FnOnce(&mut sp_counters)) -> Delta {
        let mut c = sp_counters::default();
        f(&mut c);
        Delta {
            key: SeriesKey {
                comm: comm.into(),
                cgroup: Cgroup::new("/".into()),
                pid: Some(42),
            },
            pod: None,
            c,
        }
    }

    /// The families `SIGNAL` exports for one series made of `d`'s counters,
    /// on a node with no settings read.
    pub fn export_one_of(signal: &super::Signal, d: Delta) -> Vec<prometheus::proto::MetricFamily> {
        let snapshot = crate::snapshot::Snapshot {
            series: vec![crate::snapshot::Series {
                key: d.key,
                pod: d.pod,
                counters: d.c,
            }],
            ..Default::default()
        };
        let node = NodeFacts::default();
        (signal.export)(&super::Scrape::new(&snapshot, &node))
    }

    /// `rule` applied to a one-second observation of `deltas` on a node with
    /// no settings read, with the default flags.
    pub fn observe<T>(deltas: &[Delta], rule: impl Fn(&Observation<'_>) -> T) -> T {
        observe_on(&NodeFacts::default(), deltas, rule)
    }

    /// `rule` applied to a one-second observation of `deltas` on a node
    /// with the facts `node`, with the default flags.
    pub fn observe_on<T>(
        node: &NodeFacts,
        deltas: &[Delta],
        rule: impl Fn(&Observation<'_>) -> T,
    ) -> T {
        rule(&Observation {
            deltas,
            secs: 1.0,
            node,
            args: &super::SignalArgs::default(),
        })
    }
}
