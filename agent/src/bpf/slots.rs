//! The per-CPU combining slots of the syscall counters (`sys_slots`,
//! `struct sp_slot` in bpf/slowpath.h). The tp_btf `sys_enter` program adds
//! a process image's syscall counts to its CPU's slot while the same image
//! keeps counting there, and moves them to the image's `procs` entry when
//! another image takes the slot or the image exits or execs on that CPU.
//! What is still in a slot reaches `procs` when the agent folds it: before
//! every read of `procs`, [`fold_slots`] runs the fold program
//! (`fold_cpu_slot`) on each online CPU with `BPF_PROG_TEST_RUN` (raw_tp,
//! `BPF_F_TEST_RUN_ON_CPU`, kernel 5.10+), so a read sees every event
//! counted before it. Slots are used only once [`enable_slots`] has folded
//! every CPU, and only on x86_64; elsewhere the programs count in `procs`
//! as before.

use std::fs;

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::ProgramInput;
use tracing::{debug, info, warn};

use super::Loaded;

/// Name of the fold program in the object.
pub(crate) const FOLD_PROGRAM: &str = "fold_cpu_slot";

/// `BPF_F_TEST_RUN_ON_CPU` (include/uapi/linux/bpf.h): run on `cpu`.
const TEST_RUN_ON_CPU: u32 = 1;

/// Tries per CPU while a program there holds its slot (a window of a few
/// instructions: one retry is almost always enough).
const BUSY_TRIES: usize = 1000;

/// The fold program's return values (`fold_cpu_slot` in slowpath.bpf.c).
const FOLDED: u32 = 0;
const BUSY: u32 = 1;
const RING_FULL: u32 = 2;

/// Switch the slots on once every online CPU's can be folded; log why not
/// otherwise (the programs then count in `procs`, as on a kernel without
/// tp_btf). Needs nothing beyond the program's fd.
pub fn enable_slots(loaded: &mut Loaded<'_>) {
    if !cfg!(target_arch = "x86_64") {
        // The handshake between a fold and an exit (entry_fold_begin() in
        // bpf/core/slots.h) needs the full barrier of x86's locked add; the
        // arm64 JIT's atomic add without fetch is relaxed.
        info!("per-CPU combining slots off on this architecture: the syscall and timer wakeup counters take a table lookup and an atomic add per event");
        return;
    }
    if let Err(err) = fold_slots_on_cpus(loaded) {
        warn!(error = %format!("{err:#}"),
              "per-CPU combining slots off: the syscall counters take a table lookup and an atomic add per event");
        return;
    }
    if let Some(bss) = loaded.skel.maps.bss_data.as_deref_mut() {
        bss.slots_on = true;
        info!("per-CPU combining slots on");
    }
}

/// Set `stack_target_count` in .bss: the entries of `stack_targets` the
/// findings' on-demand sampling wrote (0: no program looks the table up).
/// Kept next to `slots_on`, whose cache line sys_enter loads anyway.
pub fn set_stack_target_count(loaded: &mut Loaded<'_>, n: u32) {
    if let Some(bss) = loaded.skel.maps.bss_data.as_deref_mut() {
        bss.stack_target_count = n;
    }
}

/// Whether the programs count in the slots (`slowpath_combining_slots_enabled`).
pub fn slots_on(loaded: &Loaded<'_>) -> bool {
    (loaded.skel.maps.bss_data.as_deref()).is_some_and(|b| b.slots_on)
}

/// Fold every online CPU's slot into `procs` (no-op while slots are off).
/// Errors are logged: the counts stay in the slots until the next fold.
pub fn fold_slots(loaded: &Loaded<'_>) {
    if !slots_on(loaded) {
        return;
    }
    if let Err(err) = fold_slots_on_cpus(loaded) {
        warn!(error = %format!("{err:#}"), "folding the per-CPU slots");
    }
}

fn fold_slots_on_cpus(loaded: &Loaded<'_>) -> Result<()> {
    let online = fs::read_to_string("/sys/devices/system/cpu/online")
        .context("reading /sys/devices/system/cpu/online")?;
    for cpu in parse_cpu_list(&online)? {
        fold_cpu(loaded, cpu)?;
    }
    Ok(())
}

fn fold_cpu(loaded: &Loaded<'_>, cpu: u32) -> Result<()> {
    let prog = &loaded.skel.progs.fold_cpu_slot;
    for _ in 0..BUSY_TRIES {
        let input = ProgramInput {
            cpu,
            flags: TEST_RUN_ON_CPU,
            ..Default::default()
        };
        let out = prog
            .test_run(input)
            .with_context(|| format!("running {FOLD_PROGRAM} on CPU {cpu}"))?;
        match out.return_value {
            FOLDED => return Ok(()),
            BUSY => std::hint::spin_loop(),
            RING_FULL => {
                debug!(
                    cpu,
                    "ring buffer full: a slot's late counts wait for the next fold"
                );
                return Ok(());
            }
            other => bail!("{FOLD_PROGRAM} returned {other} on CPU {cpu}"),
        }
    }
    Err(anyhow!(
        "CPU {cpu}'s slot stayed busy for {BUSY_TRIES} tries"
    ))
}

/// The CPUs of a kernel CPU list (`0-3,5,7-8`: cpu-list(7) in
/// Documentation/admin-guide/cputopology.rst).
fn parse_cpu_list(list: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || anyhow!("bad CPU list {list:?}");
        let (lo, hi): (u32, u32) = match part.split_once('-') {
            Some((lo, hi)) => (
                lo.parse().map_err(|_| bad())?,
                hi.parse().map_err(|_| bad())?,
            ),
            None => {
                let cpu = part.parse().map_err(|_| bad())?;
                (cpu, cpu)
            }
        };
        if lo > hi {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_give_every_cpu_once() {
        assert_eq!(parse_cpu_list("0\n").unwrap(), vec![0]);
        assert_eq!(
            parse_cpu_list("0-3,5,7-8\n").unwrap(),
            vec![0, 1, 2, 3, 5, 7, 8]
        );
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
    }
}
