//! Checks made before anything is attached, each failing with one line that
//! says the cause and the fix.

use anyhow::{anyhow, bail, Result};
use caps::{CapSet, Capability, CapsHashSet};
use tracing::warn;

use crate::kernel;

/// Effective capabilities of this thread (checked before any other thread
/// starts).
fn effective_caps() -> Result<CapsHashSet> {
    caps::read(None, CapSet::Effective)
        .map_err(|e| anyhow!("reading this process's capabilities: {e}"))
}

/// Names of the capabilities missing to load and attach tracing programs:
/// CAP_BPF and CAP_PERFMON (kernel 5.8+), or CAP_SYS_ADMIN.
pub fn missing_capabilities(caps: &CapsHashSet) -> Vec<String> {
    if caps.contains(&Capability::CAP_SYS_ADMIN) {
        return vec![];
    }
    missing(caps, &[Capability::CAP_BPF, Capability::CAP_PERFMON])
}

/// Names (`CAP_BPF`) of those of `wanted` that `caps` lacks, in order.
fn missing(caps: &CapsHashSet, wanted: &[Capability]) -> Vec<String> {
    wanted
        .iter()
        .filter(|c| !caps.contains(c))
        .map(Capability::to_string)
        .collect()
}

/// Names of the capabilities missing to symbolize the stacks of processes
/// of other users: CAP_SYS_PTRACE (to read their /proc/PID/maps), and to
/// open their binaries through /proc/PID/map_files (how containers' own
/// binaries are reached) CAP_DAC_READ_SEARCH (the directory is mode 0500,
/// owned by the process's user) and CAP_CHECKPOINT_RESTORE (kernel 5.9+) or
/// CAP_SYS_ADMIN (fs/proc/base.c, proc_map_files_get_link()).
pub fn missing_symbolization_capabilities(caps: &CapsHashSet) -> Vec<String> {
    let mut wanted = vec![Capability::CAP_SYS_PTRACE, Capability::CAP_DAC_READ_SEARCH];
    if !caps.contains(&Capability::CAP_SYS_ADMIN) {
        wanted.push(Capability::CAP_CHECKPOINT_RESTORE);
    }
    missing(caps, &wanted)
}

/// Warn, once, when sampled stacks will not be symbolized for lack of
/// capabilities: they then show `[no access to the process's memory map]`.
pub fn warn_if_cannot_symbolize(what: &str) {
    let missing = missing_symbolization_capabilities(&effective_caps().unwrap_or_default());
    if !missing.is_empty() {
        warn!(
            missing = %missing.join(" "),
            "{what}: call sites of other users' processes cannot be symbolized without {}; \
             grant them (the container's capabilities add: [SYS_PTRACE, DAC_READ_SEARCH, \
             CHECKPOINT_RESTORE]; Helm: agent.findings.callSites or agent.debugCallsites adds them) or run as root",
            missing.join(", ")
        );
    }
}

/// Raise CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, for symbolization
/// CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_CHECKPOINT_RESTORE, and
/// CAP_SYSLOG (the timer callbacks' addresses in /proc/kallsyms, which the
/// timer hooks need on 5.10 to 5.12), into the effective set where
/// they are permitted but not effective: the container image gives the
/// binary these as permitted-only file capabilities (`setcap ...=p`), so
/// that exec never fails where the runtime does not grant them, and the agent
/// turns them on itself. Must run before any thread is started (capability
/// sets are per thread and inherited).
pub fn raise_permitted_capabilities() {
    for cap in [
        Capability::CAP_BPF,
        Capability::CAP_PERFMON,
        Capability::CAP_SYS_ADMIN,
        Capability::CAP_SYS_PTRACE,
        Capability::CAP_DAC_READ_SEARCH,
        Capability::CAP_CHECKPOINT_RESTORE,
        Capability::CAP_SYSLOG,
    ] {
        if caps::has_cap(None, CapSet::Permitted, cap).unwrap_or(false) {
            let _ = caps::raise(None, CapSet::Effective, cap);
        }
    }
}

pub fn check_capabilities() -> Result<()> {
    raise_permitted_capabilities();
    let missing = missing_capabilities(&effective_caps()?);
    if missing.is_empty() {
        return Ok(());
    }
    bail!(
        "missing capability {}: run as root, or grant CAP_BPF and CAP_PERFMON \
         (e.g. `setcap cap_bpf,cap_perfmon=p slowpath`, AmbientCapabilities= in the \
         systemd unit, or the container's capabilities add: [BPF, PERFMON]); kernels older \
         than 5.8 need CAP_SYS_ADMIN",
        missing.join(" and ")
    )
}

/// Warn before anything is loaded when the kernel is older than 5.8. Not
/// fatal: a distribution kernel may have backported what slowpath needs;
/// when it has not, the load fails and its error says the same.
pub fn warn_if_kernel_too_old() {
    if let Some(too_old) = kernel::release().as_deref().and_then(kernel::too_old) {
        warn!("{too_old} (trying anyway: a distribution kernel may have the features backported)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Capability::*;

    fn set(caps: &[Capability]) -> CapsHashSet {
        caps.iter().copied().collect()
    }

    #[test]
    fn capabilities_needed() {
        assert!(missing_capabilities(&set(&[CAP_SYS_ADMIN])).is_empty());
        assert!(missing_capabilities(&set(&[CAP_BPF, CAP_PERFMON])).is_empty());
        assert_eq!(missing_capabilities(&set(&[CAP_BPF])), vec!["CAP_PERFMON"]);
        assert_eq!(
            missing_capabilities(&set(&[])),
            vec!["CAP_BPF", "CAP_PERFMON"]
        );
    }

    #[test]
    fn symbolization_capabilities_needed() {
        let read = [CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH];
        let with = |extra| set(&[read[0], read[1], extra]);
        assert!(missing_symbolization_capabilities(&with(CAP_CHECKPOINT_RESTORE)).is_empty());
        assert!(missing_symbolization_capabilities(&with(CAP_SYS_ADMIN)).is_empty());
        assert_eq!(
            missing_symbolization_capabilities(&set(&[CAP_BPF, CAP_PERFMON])),
            vec![
                "CAP_SYS_PTRACE",
                "CAP_DAC_READ_SEARCH",
                "CAP_CHECKPOINT_RESTORE"
            ]
        );
    }
}
