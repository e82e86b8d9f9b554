//! Opening, probing, loading and attaching the BPF programs of
//! `bpf/slowpath.bpf.c`.
//!
//! Every hook has two programs in the object, `<tracepoint>_btf`
//! (`tp_btf`, cheapest) and `<tracepoint>_raw` (`raw_tp`). For each hook we
//! pick one before load: `tp_btf` when the kernel's BTF has the
//! tracepoint's `btf_trace_<name>` type, else `raw_tp`. If the kernel then
//! refuses one program at load time (the verifier names it in libbpf's log),
//! that hook alone steps down to its next attach type, or, with none left,
//! is left out; the rest of the object is loaded again as it was. A refusal
//! that names no program (fentry not allowed, a seccomp filter) moves every
//! hook to the next plan. Neither needs tracefs. A hook the kernel refuses,
//! or that loads but does not attach, is reported
//! (`slowpath_probe_attached` 0, the log) and the others keep working.
//!
//! Which hooks there are is an input ([`KernelSetup`]): the signals declare
//! theirs (only the enabled ones: the programs of the others are not
//! loaded), this module adds the core hooks that serve them all and knows
//! no signal. One concern per file: `hooks` (the hook table and program
//! names), `btf` (the kernel's BTF), `plan` (attach plans, pure), `load`
//! (shaping and loading the object), `attach`, `libbpf_log` (reading
//! libbpf's messages), `stats` (what the kernel counts about the programs),
//! `cost` (the programs' own runs and in-kernel time, per hook), `slots`
//! (the per-CPU combining slots of the syscall counters and their fold),
//! `syscall_table` (the counted syscalls and their groups, from the
//! object's BTF), `check` (the object against a setup, in the unit tests),
//! `fault`
//! (test-only fault injection, with the cargo feature `fault-injection`).

use std::path::Path;

use anyhow::{bail, Result};

mod attach;
mod btf;
#[cfg(test)]
mod check;
mod cost;
mod dispatch;
mod emulator;
#[cfg(feature = "fault-injection")]
mod fault;
mod fit;
mod hooks;
mod libbpf_log;
mod load;
mod loaded;
mod plan;
mod probe_slots;
mod run_stats;
mod self_timed;
mod slots;
mod stats;
mod syscall_table;

mod skel {
    include!(concat!(env!("OUT_DIR"), "/slowpath.skel.rs"));
}
pub use skel::types;

// SAFETY: these generated #[repr(C)] structs hold only integers and integer
// arrays (no pointers, no bools, no enums), so every bit pattern is a valid
// value and reading them from map bytes is sound.
unsafe impl plain::Plain for types::sp_proc {}
// SAFETY: as above.
unsafe impl plain::Plain for types::sp_proc_event {}
// SAFETY: as above (integers only, explicit padding field).
unsafe impl plain::Plain for types::sp_callsite_key {}
// SAFETY: as above (three u64).
unsafe impl plain::Plain for types::sp_probe_time {}

/// Index of an enum slot in a counter array (`types::sp_clock::SP_CLOCK_TAI`
/// -> 10): the generated enum types wrap their C value. A macro, not a
/// function, so that it works in constants and array lengths.
macro_rules! slot {
    ($value:expr) => {
        $value.0 as usize
    };
}
pub(crate) use slot;

pub use btf::KernelBtf;
#[cfg(test)]
pub use check::check_object;
#[cfg(test)]
pub use cost::CostMethod;
pub use cost::{Calibration, CostMeter, CostOptions, ProbeCost, FIRST_WINDOW_AFTER};
pub use hooks::{AttachType, Hook, KernelSetup, LeftOutCause, LeftOutHook, RodataPatch, SYS_ENTER};
pub use load::load;
#[cfg(test)]
pub use load::switch_syscall_groups;
pub use loaded::{LoadOptions, Loaded, ObjectStorage, ProbeStatus};
pub use slots::{enable_slots, fold_slots, set_stack_target_count, slots_on};
pub use stats::recursion_misses;
pub use syscall_table::syscalls_of;

/// The programs the agent runs itself with `BPF_PROG_TEST_RUN`, attached
/// nowhere and always loaded: the fold of the combining slots and the
/// statistics' empty program.
pub(crate) const RUN_PROGRAMS: [&str; 2] = [slots::FOLD_PROGRAM, run_stats::STATS_FLOOR_PROGRAM];

/// Where the kernel exposes its own BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Check that BTF exists at `path` before trying anything else.
pub fn check_btf(path: &Path) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    if path == Path::new(KERNEL_BTF) {
        bail!(
            "kernel BTF not found at {KERNEL_BTF}: this kernel does not expose its BTF \
             (built without CONFIG_DEBUG_INFO_BTF=y); pass a BTF file for this exact kernel with \
             --bpf.btf-path FILE: cut it out of the kernel image with scripts/extract-btf.py \
             /boot/vmlinuz-$(uname -r) FILE, or take it from BTFHub, or generate it with \
             pahole --btf_encode_detached=FILE from the kernel's debug vmlinux"
        );
    }
    bail!(
        "BTF file {} does not exist: pass the BTF of the running kernel with --bpf.btf-path \
         (default {KERNEL_BTF})",
        path.display()
    )
}
