//! Attach plans: one attach type per hook.

use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::Btf;
use tracing::info;

use super::hooks::{supported, AttachType, FENTRY_TARGETS, PROBES};
use super::load::LoadOptions;
use super::KERNEL_BTF;

/// One attach type per probe, indexed like [`PROBES`].
pub(super) type Plan = [AttachType; PROBES.len()];

/// Hooks left out because the kernel refused every program they have,
/// with the kernel's reason, indexed like [`PROBES`].
pub(super) type Refused = [Option<String>; PROBES.len()];

/// Move hook `idx` to attach type `next` in this plan and every later one.
pub(super) fn step_down(plan: &mut Plan, later: &mut [Plan], idx: usize, next: AttachType) {
    plan[idx] = next;
    for later in later {
        later[idx] = later[idx].max(next);
    }
}

pub(super) fn describe(plan: &Plan) -> String {
    PROBES
        .iter()
        .zip(plan)
        .map(|(p, t)| format!("{p}={t}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The plans to try, in order. A kernel that does not expose its own BTF
/// (built without CONFIG_DEBUG_INFO_BTF, run with --bpf.btf-path) gets
/// raw_tp only: fentry and tp_btf resolve their targets in the kernel's BTF.
pub(super) fn plans(opts: &LoadOptions, btf: &Btf<'_>) -> Result<Vec<Plan>> {
    let kernel_has_btf = Path::new(KERNEL_BTF).exists();
    let mut plans = match opts.force_attach {
        Some(forced) if !kernel_has_btf && forced != AttachType::RawTp => bail!(
            "--bpf.attach-type={} needs the kernel's own BTF ({KERNEL_BTF}), which this \
             kernel does not expose: use --bpf.attach-type=raw-tp or leave it to the agent",
            clap::ValueEnum::to_possible_value(&forced)
                .map_or(forced.to_string(), |v| v.get_name().into())
        ),
        None if !kernel_has_btf => {
            info!(
                btf = %opts.btf_path.display(),
                "the kernel exposes no BTF ({KERNEL_BTF}): raw_tp for every hook, \
                 field offsets from the BTF file"
            );
            vec![[AttachType::RawTp; PROBES.len()]]
        }
        // Forced: that type where the probe has it, else the next cheaper one.
        Some(forced) => vec![PROBES.map(|probe| {
            let types = supported(probe);
            let at = types.iter().position(|&t| t == forced).unwrap_or(0);
            types[at]
        })],
        None => auto_plans(btf),
    };
    if let Some(broken) = &opts.break_probe {
        let idx = PROBES
            .iter()
            .position(|p| p == broken)
            .with_context(|| format!("--bpf.test-break-probe {broken}: not one of {PROBES:?}"))?;
        for plan in &mut plans {
            plan[idx] = AttachType::RawTp;
        }
    }
    plans.dedup();
    Ok(plans)
}

/// Cheapest plan the kernel's BTF allows, then without fentry, then raw_tp
/// everywhere. fentry needs the syscall functions in BTF (and may still be
/// refused at load, e.g. under lockdown); tp_btf needs `btf_trace_<name>`.
pub(super) fn auto_plans(btf: &Btf<'_>) -> Vec<Plan> {
    let has = |name: &str| {
        btf.type_by_name::<libbpf_rs::btf::BtfType<'_>>(name)
            .is_some()
    };
    let fentry_ok = FENTRY_TARGETS.iter().all(|f| has(f));
    let tracepoint = PROBES.map(|probe| {
        if has(&format!("btf_trace_{probe}")) {
            AttachType::TpBtf
        } else {
            info!(probe, "no btf_trace_{probe} in kernel BTF: using raw_tp");
            AttachType::RawTp
        }
    });
    let mut cheapest = tracepoint;
    if fentry_ok {
        for (i, probe) in PROBES.iter().enumerate() {
            if supported(probe).contains(&AttachType::Fentry) {
                cheapest[i] = AttachType::Fentry;
            }
        }
    }
    vec![cheapest, tracepoint, [AttachType::RawTp; PROBES.len()]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::load::kernel_btf;

    fn opts(force: Option<AttachType>, broken: Option<&str>) -> LoadOptions {
        LoadOptions {
            max_processes: 64,
            max_compactions: 16,
            ringbuf_bytes: 4096,
            force_attach: force,
            btf_path: KERNEL_BTF.into(),
            capture_stacks: false,
            break_probe: broken.map(str::to_string),
            refuse_page_alloc: false,
            timer_hot_wakeups: 215,
        }
    }

    #[test]
    fn forced_attach_types_fall_back_per_probe() {
        let btf = kernel_btf(Path::new(KERNEL_BTF)).unwrap();
        let fentry = plans(&opts(Some(AttachType::Fentry), None), &btf).unwrap();
        assert_eq!(fentry.len(), 1);
        assert_eq!(fentry[0][0], AttachType::Fentry);
        assert!(fentry[0][1..].iter().all(|&t| t == AttachType::TpBtf));
        let raw = plans(&opts(Some(AttachType::RawTp), Some("mm_page_alloc")), &btf).unwrap();
        assert_eq!(raw, vec![[AttachType::RawTp; PROBES.len()]]);
        assert!(plans(&opts(None, Some("no_such_probe")), &btf).is_err());
    }
}
