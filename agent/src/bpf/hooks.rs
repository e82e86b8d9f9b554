//! The hook table: which kernel tracepoints the object's programs hook, how
//! those programs are named, and which attach types each hook has.
//!
//! The table is an input, not a constant: the signals declare the hooks
//! they need ([`KernelSetup`]) and this module only adds the core hooks that
//! serve every signal (the syscall hook when some signal counts syscalls,
//! process exit and exec, cgroup creation) around them. Nothing here knows
//! a signal.

use std::ffi::OsStr;
use std::fmt;

use anyhow::{bail, Result};

use super::types;

/// A tracepoint hook: programs `<name>_btf` (`SEC("tp_btf/<name>")`) and
/// `<name>_raw` (`SEC("raw_tp/<name>")`) in the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hook {
    /// The tracepoint's name, as in `slowpath_probe_attached{probe}`.
    pub name: &'static str,
    /// The hook this one only serves (its programs count nothing without
    /// that one's): left out when the kernel refuses that one.
    pub needs: Option<&'static str>,
}

impl Hook {
    /// A hook that needs no other.
    pub const fn new(name: &'static str) -> Self {
        Self { name, needs: None }
    }
}

/// Writes settings into the object's read-only data (the `const volatile`
/// globals of `bpf/`) before each load attempt; it may run
/// several times, once per attempt, always on a fresh copy.
pub type RodataPatch = Box<dyn Fn(&mut types::rodata) + Send + Sync>;

/// What the signals ask of the kernel side.
#[derive(Default)]
pub struct KernelSetup {
    /// Hooks beyond the core ones, in report order (the order of
    /// `slowpath_probe_attached` and of the log).
    pub hooks: Vec<Hook>,
    /// Syscall names (`"clock_gettime"`, ...) of this architecture whose
    /// kernel functions have an fentry twin of the `sys_enter` hook:
    /// programs `sys_enter_fentry_<name>`, `SEC("fentry/__x64_sys_<name>")`
    /// on x86_64, `__arm64_sys_<name>` on arm64. These are the syscalls of
    /// `syscall_groups`: without any, the `sys_enter` hook is left out.
    pub fentry_syscalls: Vec<&'static str>,
    /// The groups of counted syscalls the signals count: their switches
    /// (`count_syscalls[group]`) are turned on before load.
    pub syscall_groups: Vec<types::sp_syscall_group>,
    /// Settings of the object's read-only data, applied in this order.
    pub rodata: Vec<RodataPatch>,
    /// Capacities of maps only a signal uses, from its flags: (the map's
    /// name in the object, max entries).
    pub map_sizes: Vec<(&'static str, u32)>,
    /// Hooks the kernel is expected to refuse on this node, by design, with
    /// why (a signal knows it from the kernel and the agent's privileges):
    /// `slowpath_probe_expected` 0, so that their refusal is no alert.
    pub left_out: Vec<LeftOutHook>,
}

/// Why a hook is left out by design on this node: the `reason` of
/// `slowpath_collector_counting` for the signals that need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftOutCause {
    /// The agent lacks a privilege this kernel asks for the hook (the timer
    /// hooks on 5.10 to 5.12 without CAP_SYSLOG): a capability would bring
    /// it back.
    MissingCapability,
    /// The kernel was built without the hook's tracepoint
    /// (`CONFIG_COMPACTION=n` and the compaction hooks).
    NoKernelHook,
}

impl LeftOutCause {
    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::MissingCapability => "missing_capability",
            Self::NoKernelHook => "no_kernel_hook",
        }
    }
}

/// A hook left out by design, why in one line and of which kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOutHook {
    /// The hook (`slowpath_probe_expected{probe}`).
    pub hook: &'static str,
    pub cause: LeftOutCause,
    /// For the log: what the kernel lacks and what would bring it back.
    pub why: String,
}

/// The core hook of the counted syscalls; the only one with fentry twins.
pub const SYS_ENTER: &str = "sys_enter";

/// Core hooks reported before the signals' hooks (the syscall hook first,
/// when the setup has syscalls to count).
const CORE_FIRST: [Hook; 2] = [
    Hook::new("sched_process_exit"),
    Hook::new("sched_process_exec"),
];

/// Core hooks reported after the signals' hooks.
const CORE_LAST: [Hook; 1] = [Hook::new("cgroup_mkdir")];

/// Prefix of the kernel's syscall functions, the fentry targets of the
/// syscalls with arguments (`SP_SYSCALL_FN_PREFIX` in `bpf/core/arch.h`).
#[cfg(target_arch = "x86_64")]
pub(super) const SYSCALL_FN_PREFIX: &str = "__x64_sys_";
/// Prefix of the kernel's syscall functions, the fentry targets
/// (`SP_SYSCALL_FN_PREFIX` in `bpf/core/arch.h`).
#[cfg(target_arch = "aarch64")]
pub(super) const SYSCALL_FN_PREFIX: &str = "__arm64_sys_";

/// Prefix of the fentry programs' names; the syscall follows it.
pub(super) const FENTRY_PROGRAM_PREFIX: &str = "sys_enter_fentry_";

/// How a program is attached (the `attach_type` label).
/// Ordered cheapest first: a larger value is a fallback of a smaller one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum AttachType {
    /// fentry on the kernel function itself (`SEC("fentry/...")`), kernel
    /// 5.5+ where allowed; only the syscall hook has fentry programs.
    Fentry,
    /// BTF-enabled raw tracepoint (`SEC("tp_btf/...")`), kernel 5.5+.
    TpBtf,
    /// Raw tracepoint (`SEC("raw_tp/...")`), kernel 4.17+.
    RawTp,
}

impl AttachType {
    /// The program name's suffix (`sys_enter_btf`).
    pub(super) fn suffix(self) -> &'static str {
        match self {
            AttachType::Fentry => "_fentry",
            AttachType::TpBtf => "_btf",
            AttachType::RawTp => "_raw",
        }
    }

    /// The label value; also libbpf's section prefix (`tp_btf/<hook>`).
    pub fn as_str(self) -> &'static str {
        match self {
            AttachType::Fentry => "fentry",
            AttachType::TpBtf => "tp_btf",
            AttachType::RawTp => "raw_tp",
        }
    }
}

impl fmt::Display for AttachType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kernel function of syscall `name` on this architecture, as its
/// fentry program's section in the object names it (`clock_gettime` ->
/// `__x64_sys_clock_gettime`, `sched_yield` -> `__do_sys_sched_yield` on
/// x86_64); `__x64_sys_<name>`/`__arm64_sys_<name>` for a name the object
/// has no program for.
pub(super) fn fentry_target(syscall: &str) -> String {
    super::syscall_table::counted_syscalls()
        .iter()
        .find(|s| s.name == syscall)
        .and_then(|s| s.function.clone())
        .unwrap_or_else(|| format!("{SYSCALL_FN_PREFIX}{syscall}"))
}

/// The full hook table: the core hooks, the signals' hooks, the last core
/// hooks. Plans and refusals are indexed like it.
#[derive(Clone, Debug)]
pub(super) struct HookTable {
    hooks: Vec<Hook>,
    /// Kernel functions of the fentry programs, from the setup's syscalls.
    fentry_targets: Vec<String>,
    /// Why each hook is left out by design on this kernel (`None`: it is
    /// expected to attach), indexed like `hooks`.
    by_design: Vec<Option<(LeftOutCause, String)>>,
}

impl HookTable {
    pub(super) fn new(setup: &KernelSetup) -> Self {
        let sys_enter = Some(Hook::new(SYS_ENTER)).filter(|_| !setup.fentry_syscalls.is_empty());
        let hooks: Vec<Hook> = sys_enter
            .iter()
            .chain(&CORE_FIRST)
            .chain(&setup.hooks)
            .chain(&CORE_LAST)
            .copied()
            .collect();
        let fentry_targets = setup.fentry_syscalls.iter().map(|s| fentry_target(s));
        let mut table = Self {
            by_design: vec![None; hooks.len()],
            hooks,
            fentry_targets: fentry_targets.collect(),
        };
        for left_out in &setup.left_out {
            if let Some(idx) = table.index(left_out.hook) {
                table.leave_out_by_design(idx, left_out.cause, left_out.why.clone());
            }
        }
        table
    }

    /// Hook `idx` is not expected to attach on this kernel, for `why` of
    /// kind `cause`; nor are the hooks that only serve it.
    pub(super) fn leave_out_by_design(&mut self, idx: usize, cause: LeftOutCause, why: String) {
        let name = self.name(idx);
        for dependent in self.dependents(idx).collect::<Vec<_>>() {
            self.by_design[dependent]
                .get_or_insert_with(|| (cause, format!("it only serves {name}: {why}")));
        }
        self.by_design[idx].get_or_insert((cause, why));
    }

    /// Why hook `idx` is left out by design here, if it is.
    pub(super) fn by_design(&self, idx: usize) -> Option<&str> {
        self.by_design[idx].as_ref().map(|(_, why)| why.as_str())
    }

    /// Of which kind hook `idx`'s leaving out is, if it is left out.
    pub(super) fn left_out_cause(&self, idx: usize) -> Option<LeftOutCause> {
        self.by_design[idx].as_ref().map(|&(cause, _)| cause)
    }

    pub(super) fn len(&self) -> usize {
        self.hooks.len()
    }

    /// The hooks, in table order (for the object check).
    #[cfg(test)]
    pub(super) fn hooks(&self) -> &[Hook] {
        &self.hooks
    }

    /// The name of hook `idx`.
    pub(super) fn name(&self, idx: usize) -> &'static str {
        self.hooks[idx].name
    }

    /// Every hook's name, in table order.
    pub(super) fn names(&self) -> Vec<&'static str> {
        self.hooks.iter().map(|h| h.name).collect()
    }

    /// Index of the hook named `name`.
    pub(super) fn index(&self, name: &str) -> Option<usize> {
        self.hooks.iter().position(|h| h.name == name)
    }

    /// Kernel functions the fentry programs attach to.
    pub(super) fn fentry_targets(&self) -> &[String] {
        &self.fentry_targets
    }

    /// Attach types hook `idx` has programs for, cheapest first: fentry for
    /// the syscall hook when the setup names syscalls, then the tracepoints.
    pub(super) fn attach_types(&self, idx: usize) -> &'static [AttachType] {
        if self.name(idx) == SYS_ENTER && !self.fentry_targets.is_empty() {
            &[AttachType::Fentry, AttachType::TpBtf, AttachType::RawTp]
        } else {
            &[AttachType::TpBtf, AttachType::RawTp]
        }
    }

    /// The attach type after `current` for hook `idx`, if it has one.
    pub(super) fn next_attach_type(&self, idx: usize, current: AttachType) -> Option<AttachType> {
        self.attach_types(idx)
            .iter()
            .skip_while(|&&t| t != current)
            .nth(1)
            .copied()
    }

    /// Indexes of the hooks that only serve hook `idx`.
    pub(super) fn dependents(&self, idx: usize) -> impl Iterator<Item = usize> + '_ {
        let name = self.name(idx);
        (0..self.len()).filter(move |&i| self.hooks[i].needs == Some(name))
    }

    /// `sys_enter_btf` -> (index of `sys_enter`, TpBtf);
    /// `sys_enter_fentry_time` -> (index of `sys_enter`, Fentry). Errors for
    /// a name that is none of these, names a hook not in the table or a
    /// syscall not in the setup (a program of a signal switched off).
    pub(super) fn classify(&self, program: &OsStr) -> Result<(usize, AttachType)> {
        let name = program.to_string_lossy();
        let found = if let Some(syscall) = name.strip_prefix(FENTRY_PROGRAM_PREFIX) {
            let target = fentry_target(syscall);
            self.index(SYS_ENTER)
                .filter(|_| self.fentry_targets.contains(&target))
                .map(|idx| (idx, AttachType::Fentry))
        } else {
            [AttachType::TpBtf, AttachType::RawTp]
                .into_iter()
                .find_map(|t| Some((self.index(name.strip_suffix(t.suffix())?)?, t)))
        };
        match found {
            Some(found) => Ok(found),
            None => bail!(
                "BPF program {name} is not named <probe>_btf, <probe>_raw or \
                 sys_enter_fentry_<syscall> of a hook or syscall of this setup"
            ),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A setup as the signals might declare it: two hooks, the second only
    /// serving the first, and two fentry syscalls.
    pub(in crate::bpf) fn setup() -> KernelSetup {
        KernelSetup {
            hooks: vec![
                Hook::new("mm_page_alloc"),
                Hook {
                    name: "mm_compaction_end",
                    needs: Some("mm_page_alloc"),
                },
            ],
            fentry_syscalls: vec!["clock_gettime", "futex"],
            syscall_groups: Vec::new(),
            rodata: Vec::new(),
            map_sizes: Vec::new(),
            left_out: Vec::new(),
        }
    }

    #[test]
    fn a_hook_left_out_by_design_takes_the_hooks_it_serves_with_it() {
        let mut setup = setup();
        setup.left_out = vec![LeftOutHook {
            hook: "mm_page_alloc",
            cause: LeftOutCause::MissingCapability,
            why: "no such tracepoint".into(),
        }];
        let table = HookTable::new(&setup);
        assert_eq!(table.by_design(3), Some("no such tracepoint"));
        assert_eq!(
            table.left_out_cause(4),
            Some(LeftOutCause::MissingCapability)
        );
        assert_eq!(
            table.by_design(4),
            Some("it only serves mm_page_alloc: no such tracepoint")
        );
        assert!((0..3).chain(5..6).all(|idx| table.by_design(idx).is_none()));
    }

    #[test]
    fn the_table_is_the_core_hooks_around_the_signals_hooks() {
        let table = HookTable::new(&setup());
        assert_eq!(
            table.names(),
            [
                "sys_enter",
                "sched_process_exit",
                "sched_process_exec",
                "mm_page_alloc",
                "mm_compaction_end",
                "cgroup_mkdir"
            ]
        );
        assert_eq!(
            table.fentry_targets(),
            [
                format!("{SYSCALL_FN_PREFIX}clock_gettime"),
                format!("{SYSCALL_FN_PREFIX}futex")
            ]
        );
        assert_eq!(table.dependents(3).collect::<Vec<_>>(), [4]);
        assert_eq!(table.dependents(4).count(), 0);
    }

    #[test]
    fn without_syscalls_to_count_there_is_no_syscall_hook() {
        let mut setup = setup();
        setup.fentry_syscalls.clear();
        let table = HookTable::new(&setup);
        assert_eq!(
            table.names(),
            [
                "sched_process_exit",
                "sched_process_exec",
                "mm_page_alloc",
                "mm_compaction_end",
                "cgroup_mkdir"
            ]
        );
        assert!(table.classify(OsStr::new("sys_enter_btf")).is_err());
        assert!(table
            .classify(OsStr::new("sys_enter_fentry_futex"))
            .is_err());
    }

    #[test]
    fn program_names_split_into_probe_and_attach_type() {
        let table = HookTable::new(&setup());
        let classify = |n: &str| table.classify(OsStr::new(n));
        assert_eq!(classify("sys_enter_btf").unwrap(), (0, AttachType::TpBtf));
        assert_eq!(
            classify("sys_enter_fentry_clock_gettime").unwrap(),
            (0, AttachType::Fentry)
        );
        assert_eq!(
            classify("mm_compaction_end_raw").unwrap(),
            (4, AttachType::RawTp)
        );
        assert!(classify("handler").is_err());
        assert!(classify("unknown_btf").is_err());
        assert!(classify("sched_waking_btf").is_err()); // not in this table
        assert!(classify("sys_enter_fentry_poll").is_err()); // not in this setup
    }

    #[test]
    fn only_the_syscall_hook_has_fentry_and_only_with_syscalls() {
        let table = HookTable::new(&setup());
        assert_eq!(
            table.next_attach_type(0, AttachType::Fentry),
            Some(AttachType::TpBtf)
        );
        assert_eq!(
            table.attach_types(3),
            [AttachType::TpBtf, AttachType::RawTp]
        );
        assert_eq!(table.next_attach_type(3, AttachType::RawTp), None);
        let none = HookTable::new(&KernelSetup::default());
        assert_eq!(none.attach_types(0), [AttachType::TpBtf, AttachType::RawTp]);
    }
}
