//! Test-only fault injection (cargo feature `fault-injection`, never in the
//! product): the hidden flags `--bpf.test-break-probe` and
//! `--bpf.test-refuse-probe` make the kernel refuse one hook for real, so
//! that the end-to-end tests see the agent degrade instead of dying.

use anyhow::{Context, Result};
use libbpf_rs::{Link, ProgramMut};

use super::hooks::{AttachType, HookTable};
use super::loaded::LoadOptions;
use super::plan::Plan;
use super::types;

/// Tracepoint name used by `break_probe`: no kernel has it.
const MISSING_TRACEPOINT: &str = "slowpath_no_such_tracepoint";

/// `break_probe` is raw_tp in every plan (it is then attached to a
/// tracepoint that does not exist). Errors when no hook has that name.
pub(super) fn break_plans(
    mut plans: Vec<Plan>,
    table: &HookTable,
    opts: &LoadOptions,
) -> Result<Vec<Plan>> {
    if let Some(broken) = &opts.break_probe {
        let names = table.names();
        let idx = table
            .index(broken)
            .with_context(|| format!("--bpf.test-break-probe {broken}: not one of {names:?}"))?;
        for plan in &mut plans {
            plan[idx] = AttachType::RawTp;
        }
        plans.dedup();
    }
    Ok(plans)
}

/// Whether hook `probe` is broken on purpose: its failure to attach is the
/// point, not a reason to step down.
pub(super) fn broken_on_purpose(opts: &LoadOptions, probe: &str) -> bool {
    opts.break_probe.as_deref() == Some(probe)
}

/// Attach one program of hook `probe` where its section says, or, for the
/// hook broken on purpose, to a tracepoint that does not exist.
pub(super) fn attach_program(
    prog: &ProgramMut<'_>,
    probe: &str,
    opts: &LoadOptions,
) -> libbpf_rs::Result<Link> {
    if broken_on_purpose(opts, probe) {
        return prog.attach_raw_tracepoint(MISSING_TRACEPOINT);
    }
    prog.attach()
}

/// `refuse_page_alloc`: the mm_page_alloc programs call a helper no kernel
/// has (`test_refuse_page_alloc` in the object).
pub(super) fn write_rodata(rodata: &mut types::rodata, opts: &LoadOptions) {
    rodata.test_refuse_page_alloc = opts.refuse_page_alloc;
}
