//! Whether each signal counts on this node, and if not why:
//! `slowpath_collector_counting{collector, reason, hook}`, one series per
//! declared signal whether it is switched on or not, as node_exporter
//! reports each of its collectors (`node_scrape_collector_success`).
//!
//! A signal counts when it is switched on and every kernel hook it needs is
//! attached: its own tracepoints (`KernelNeeds::hooks`) and, when it counts
//! syscalls, `sys_enter`. The core hooks every signal shares (process exit
//! and exec, cgroup creation) are left to `SlowpathProbeNotAttached`.

use crate::bpf::{ProbeStatus, SYS_ENTER};

use super::{Collectors, Signal, SIGNALS};

/// Why a signal does not count (the `reason` label; `""` when it counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotCounting {
    /// `--no-collector.<name>` (Helm `agent.collectors`).
    SwitchedOff,
    /// A hook it needs is left out by design on this node (see
    /// `bpf::LeftOutCause`: `missing_capability`, `no_kernel_hook`).
    LeftOut(crate::bpf::LeftOutCause),
    /// The kernel refused a hook it was expected to take
    /// (`SlowpathProbeNotAttached`, the agent log names the kernel's reason).
    KernelRefused,
}

impl NotCounting {
    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::SwitchedOff => "switched_off",
            Self::LeftOut(cause) => cause.label(),
            Self::KernelRefused => "kernel_refused",
        }
    }
}

/// One signal's state on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counting {
    /// The signal's name (the `collector` label, as in `--collector.<name>`).
    pub collector: &'static str,
    /// `None`: it counts.
    pub not: Option<NotCounting>,
    /// The first hook it needs that is not attached (`""` when it counts or
    /// is switched off).
    pub hook: &'static str,
}

/// Every declared signal's state, in [`SIGNALS`] order, from the switches
/// and the hooks' attach results.
pub fn counting(collectors: &Collectors, probes: &[ProbeStatus]) -> Vec<Counting> {
    SIGNALS
        .into_iter()
        .map(|signal| {
            let on = collectors.enabled().any(|s| s.name == signal.name);
            let (not, hook) = match on {
                false => (Some(NotCounting::SwitchedOff), ""),
                true => missing_hook(signal, probes),
            };
            Counting {
                collector: signal.name,
                not,
                hook,
            }
        })
        .collect()
}

/// The first hook `signal` needs that is not attached, and why; `(None, "")`
/// when every one is. A hook with no status at all was never asked for,
/// which for a switched-on signal means its programs were left out of the
/// load: counted as the kernel's refusal.
fn missing_hook(signal: &Signal, probes: &[ProbeStatus]) -> (Option<NotCounting>, &'static str) {
    let sys_enter = (!signal.kernel.syscall_groups.is_empty()).then_some(SYS_ENTER);
    let needed = sys_enter
        .into_iter()
        .chain(signal.kernel.hooks.iter().map(|h| h.name));
    for hook in needed {
        match probes.iter().find(|p| p.probe == hook) {
            Some(p) if p.attached() => continue,
            Some(p) => {
                let why = p
                    .left_out
                    .map_or(NotCounting::KernelRefused, NotCounting::LeftOut);
                return (Some(why), hook);
            }
            None => return (Some(NotCounting::KernelRefused), hook),
        }
    }
    (None, "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::{AttachType, LeftOutCause};

    fn status(
        probe: &'static str,
        error: Option<&str>,
        left_out: Option<LeftOutCause>,
    ) -> ProbeStatus {
        ProbeStatus {
            probe,
            attach_type: AttachType::RawTp,
            error: error.map(str::to_string),
            left_out,
        }
    }

    /// Every hook any signal needs, attached.
    fn all_attached() -> Vec<ProbeStatus> {
        let mut hooks = vec![SYS_ENTER];
        hooks.extend(
            SIGNALS
                .iter()
                .flat_map(|s| s.kernel.hooks.iter().map(|h| h.name)),
        );
        hooks.into_iter().map(|h| status(h, None, None)).collect()
    }

    fn of<'a>(all: &'a [Counting], name: &str) -> &'a Counting {
        all.iter().find(|c| c.collector == name).unwrap()
    }

    #[test]
    fn every_declared_signal_has_one_state_and_all_count_when_all_attach() {
        let all = counting(&Collectors::default(), &all_attached());
        assert_eq!(all.len(), SIGNALS.len());
        assert!(
            all.iter().all(|c| c.not.is_none() && c.hook.is_empty()),
            "{all:?}"
        );
    }

    #[test]
    fn a_switched_off_signal_says_so_and_the_others_still_count() {
        let collectors = Collectors::default().with("timer", false);
        let all = counting(&collectors, &all_attached());
        assert_eq!(of(&all, "timer").not, Some(NotCounting::SwitchedOff));
        assert_eq!(of(&all, "timer").not.unwrap().label(), "switched_off");
        assert!(of(&all, "clock").not.is_none());
    }

    #[test]
    fn the_timer_hooks_left_out_for_a_capability_name_the_first_missing_hook() {
        let mut probes = all_attached();
        for p in probes
            .iter_mut()
            .filter(|p| p.probe.starts_with("hrtimer") || p.probe == "sched_waking")
        {
            p.error = Some("left out".into());
            p.left_out = Some(LeftOutCause::MissingCapability);
        }
        let all = counting(&Collectors::default(), &probes);
        let timer = of(&all, "timer");
        assert_eq!(timer.not.unwrap().label(), "missing_capability");
        assert!(
            timer.hook.starts_with("hrtimer") || timer.hook == "sched_waking",
            "{timer:?}"
        );
        assert!(of(&all, "memory").not.is_none());
    }

    #[test]
    fn a_refused_syscall_hook_stops_every_syscall_signal() {
        let mut probes = all_attached();
        probes[0] = status(SYS_ENTER, Some("refused"), None);
        let all = counting(&Collectors::default(), &probes);
        for signal in SIGNALS
            .iter()
            .filter(|s| !s.kernel.syscall_groups.is_empty())
        {
            let c = of(&all, signal.name);
            assert_eq!(
                (c.not, c.hook),
                (Some(NotCounting::KernelRefused), SYS_ENTER)
            );
        }
    }

    #[test]
    fn a_kernel_without_a_tracepoint_is_no_kernel_hook() {
        let mut probes = all_attached();
        let compaction = probes
            .iter_mut()
            .find(|p| p.probe == "mm_compaction_begin")
            .unwrap();
        compaction.error = Some("left out".into());
        compaction.left_out = Some(LeftOutCause::NoKernelHook);
        let all = counting(&Collectors::default(), &probes);
        assert_eq!(of(&all, "memory").not.unwrap().label(), "no_kernel_hook");
        assert_eq!(of(&all, "memory").hook, "mm_compaction_begin");
    }
}
