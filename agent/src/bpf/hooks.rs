//! The hooks: tracepoints, their programs and attach types.

use std::ffi::OsStr;
use std::fmt;

use anyhow::{bail, Result};

/// The kernel tracepoints slowpath hooks, as named in `slowpath_probe_attached{probe}`.
pub const PROBES: [&str; 10] = [
    "sys_enter",
    "sched_process_exit",
    "sched_process_exec",
    "mm_page_alloc",
    "mm_compaction_begin",
    "mm_compaction_end",
    "hrtimer_expire_entry",
    "hrtimer_expire_exit",
    "sched_waking",
    "cgroup_mkdir",
];

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
    fn suffix(self) -> &'static str {
        match self {
            AttachType::Fentry => "_fentry",
            AttachType::TpBtf => "_btf",
            AttachType::RawTp => "_raw",
        }
    }
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

/// (hook, the hook it only serves): the timer-wakeup hooks count nothing
/// without the expiring timer's frame that `hrtimer_expire_entry` records,
/// so they are left out with it rather than run for nothing on every wakeup.
pub(super) const DEPENDS: [(&str, &str); 2] = [
    ("hrtimer_expire_exit", "hrtimer_expire_entry"),
    ("sched_waking", "hrtimer_expire_entry"),
];

pub(super) fn probe_index(probe: &str) -> usize {
    PROBES
        .iter()
        .position(|&p| p == probe)
        .expect("known probe")
}

/// The attach type after `current` for `probe`, if it has one.
pub(super) fn next_attach_type(probe: &str, current: AttachType) -> Option<AttachType> {
    supported(probe)
        .iter()
        .skip_while(|&&t| t != current)
        .nth(1)
        .copied()
}

/// Attach types a probe has programs for, cheapest first (fentry: the
/// syscall hook, on x86_64 and arm64).
pub(super) fn supported(probe: &str) -> &'static [AttachType] {
    if probe == "sys_enter" {
        &[AttachType::Fentry, AttachType::TpBtf, AttachType::RawTp]
    } else {
        &[AttachType::TpBtf, AttachType::RawTp]
    }
}

/// Kernel functions the fentry programs attach to (the `sys_enter_fentry_*`
/// programs of bpf/slowpath.bpf.c for this architecture).
#[cfg(target_arch = "x86_64")]
pub(super) const FENTRY_TARGETS: [&str; 15] = [
    "__x64_sys_clock_gettime",
    "__x64_sys_gettimeofday",
    "__x64_sys_time",
    "__x64_sys_rt_sigprocmask",
    "__x64_sys_nanosleep",
    "__x64_sys_clock_nanosleep",
    "__x64_sys_futex",
    "__x64_sys_futex_waitv",
    "__x64_sys_epoll_wait",
    "__x64_sys_epoll_pwait",
    "__x64_sys_epoll_pwait2",
    "__x64_sys_poll",
    "__x64_sys_ppoll",
    "__x64_sys_select",
    "__x64_sys_pselect6",
];
/// arm64 has no time, epoll_wait, poll or select syscall.
#[cfg(target_arch = "aarch64")]
pub(super) const FENTRY_TARGETS: [&str; 11] = [
    "__arm64_sys_clock_gettime",
    "__arm64_sys_gettimeofday",
    "__arm64_sys_rt_sigprocmask",
    "__arm64_sys_nanosleep",
    "__arm64_sys_clock_nanosleep",
    "__arm64_sys_futex",
    "__arm64_sys_futex_waitv",
    "__arm64_sys_epoll_pwait",
    "__arm64_sys_epoll_pwait2",
    "__arm64_sys_ppoll",
    "__arm64_sys_pselect6",
];

/// `sys_enter_btf` -> (`sys_enter`, TpBtf); `sys_enter_fentry_time` ->
/// (`sys_enter`, Fentry).
pub(super) fn classify_program(name: &OsStr) -> Result<(&'static str, AttachType)> {
    let name = name.to_string_lossy();
    if name.starts_with("sys_enter_fentry_") {
        return Ok(("sys_enter", AttachType::Fentry));
    }
    for attach_type in [AttachType::TpBtf, AttachType::RawTp] {
        if let Some(probe) = name.strip_suffix(attach_type.suffix()) {
            if let Some(&known) = PROBES.iter().find(|&&p| p == probe) {
                return Ok((known, attach_type));
            }
        }
    }
    bail!("BPF program {name} is not named <probe>_btf, <probe>_raw or sys_enter_fentry_<syscall>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_names_split_into_probe_and_attach_type() {
        let classify = |n: &str| classify_program(OsStr::new(n));
        assert_eq!(
            classify("sys_enter_btf").unwrap(),
            ("sys_enter", AttachType::TpBtf)
        );
        assert_eq!(
            classify("sys_enter_fentry_clock_gettime").unwrap(),
            ("sys_enter", AttachType::Fentry)
        );
        assert_eq!(
            classify("mm_compaction_end_raw").unwrap(),
            ("mm_compaction_end", AttachType::RawTp)
        );
        assert!(classify("handler").is_err());
        assert!(classify("unknown_btf").is_err());
    }
}
