//! Opening, shaping (map sizes, read-only data, which programs) and loading
//! the object, one attempt after the other until the kernel takes a plan.

use std::mem::MaybeUninit;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;
use tracing::{debug, info, warn};

use super::attach::{attach, Attached};
use super::btf::KernelBtf;
use super::dispatch::{time_untraced_syscall, UntracedTiming};
use super::fit::Fit;
use super::hooks::{HookTable, KernelSetup};
use super::libbpf_log::{explain_load_error, log_tail, refused_program, with_libbpf_log};
use super::loaded::{LoadOptions, Loaded, ObjectStorage};
use super::plan::{leave_out_missing_tracepoints, plans, Search};
use super::skel::{OpenSlowpathSkel, SlowpathSkel, SlowpathSkelBuilder};
use super::types;

/// Most load attempts for `hooks` hooks: three plans (fentry, tracepoints,
/// raw_tp), plus per hook two step downs (refused at load or at attach) and
/// one removal.
fn max_attempts(hooks: usize) -> usize {
    3 + 3 * hooks
}

/// Open, load and attach the programs of the hooks `setup` asks for (with
/// the core hooks), trying the cheapest plan `btf` allows first. A program
/// the kernel refuses at load moves its hook alone to the next attach type,
/// or leaves the hook out when it has none; a refusal that names no program
/// moves every hook to the next plan. Fails only when nothing loads or
/// nothing attaches; a single hook's failure is in `probes`.
pub fn load<'obj>(
    storage: &'obj mut ObjectStorage,
    opts: &LoadOptions,
    setup: &KernelSetup,
    btf: &KernelBtf,
) -> Result<Loaded<'obj>> {
    let mut table = HookTable::new(setup);
    leave_out_missing_tracepoints(&mut table, btf);
    log_left_out_by_design(&table);
    let plans = plans(&table, opts.force_attach, btf.path(), btf)?;
    #[cfg(feature = "fault-injection")]
    let plans = super::fault::break_plans(plans, &table, opts)?;
    let mut search = Search::new(&table, plans)?;
    storage.clear();
    let attempts = max_attempts(table.len()) + Fit::max_steps();
    storage.resize_with(attempts, MaybeUninit::uninit);
    let mut slots = storage.iter_mut();
    let mut fit = Fit::new(opts.max_processes, opts.memlock.fit_tables());
    loop {
        let Some(slot) = slots.next() else {
            return Err(kept_refusing(&search, attempts));
        };
        let (loaded, log) =
            with_libbpf_log(|| open_and_load(slot, opts, &fit, setup, btf.path(), &search));
        if loaded.is_err() {
            debug!(plan = %search.describe(), "libbpf's log of the refused load:\n{log}");
        }
        let err = match loaded {
            Ok(skel) => match attach_timed(skel, opts, &search)? {
                (Attached::All(mut loaded), untraced) => {
                    loaded.process_capacity = fit.processes();
                    loaded.untraced_before = Some(untraced);
                    log_fitted(&fit, opts);
                    return Ok(*loaded);
                }
                (Attached::StepDown { idx, from, to }, _) => {
                    // The kernel loads some programs it cannot attach (fentry
                    // on arm64 before 6.4: no ftrace direct calls, ENOTSUPP).
                    warn!(probe = table.name(idx), %from, %to, "kernel cannot attach this hook's programs; \
                          trying the hook's next attach type");
                    search.step_down(idx, to);
                    continue;
                }
            },
            Err(err) => err,
        };
        if refused_for_memory(&err) && fit.shrink() {
            debug!(
                processes = fit.processes(),
                "bpf() refused with EPERM under the locked-memory \
                   limit: halving the tables"
            );
            // The refused attempt's maps and programs are freed, and
            // uncharged, by a kernel work item and an RCU callback: let them
            // run before the next attempt counts against the same limit.
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        match refused_program(&log, &table) {
            Some((idx, attach_type, reason)) => search.refuse(idx, attach_type, &reason),
            None => next_plan(&mut search, err, &log)?,
        }
    }
}

/// Attach, timing an untraced syscall right before: the loaded object is
/// in the kernel and nothing of it runs yet, so that the cost meter's
/// timing after attaching differs from this one by the hooks alone.
fn attach_timed<'obj>(
    skel: SlowpathSkel<'obj>,
    opts: &LoadOptions,
    search: &Search<'_>,
) -> Result<(Attached<'obj>, UntracedTiming)> {
    let untraced = time_untraced_syscall();
    Ok((attach(skel, opts, search)?, untraced))
}

/// Whether a load failed with EPERM: under a finite locked-memory limit that
/// the kernel charges (the only case `Fit` acts on), the charge is the
/// likely cause, whether a map or a program was refused. EACCES, which the
/// verifier gives for a program it rejects, shares EPERM's error kind, and
/// libbpf-rs keeps the errno only in the message: hence the message.
fn refused_for_memory(err: &anyhow::Error) -> bool {
    let eperm = std::io::Error::from_raw_os_error(libc::EPERM).to_string();
    err.chain().any(|e| {
        e.downcast_ref::<libbpf_rs::Error>().is_some_and(|e| {
            e.kind() == libbpf_rs::ErrorKind::PermissionDenied && e.to_string().contains(&eperm)
        })
    })
}

/// The one line that says the tables were fitted to the limit, what that
/// leaves and how to run in full.
fn log_fitted(fit: &Fit, opts: &LoadOptions) {
    if !fit.reduced() {
        return;
    }
    let limit_kib = match opts.memlock {
        crate::memlock::Memlock::Finite(bytes) => bytes / 1024,
        _ => 0,
    };
    warn!(
        limit_kib,
        processes = fit.processes(),
        requested = opts.max_processes,
        "Linux before 5.11 charges BPF maps to the locked-memory limit, shared by all processes \
         of this user, and the agent may not lift it: running with smaller tables, exact for the \
         processes they hold (slowpath_process_table_capacity; a process beyond it counts in \
         slowpath_lost_events_total{{reason=\"process_table_full\"}}); to run in full, {}",
        crate::memlock::FIX_PER_INSTALL
    );
}

/// One line per hook left out by design on this kernel, with why: the
/// kernel will refuse it, and `slowpath_probe_expected` 0 says that is no
/// failure.
fn log_left_out_by_design(table: &HookTable) {
    for idx in 0..table.len() {
        if let Some(why) = table.by_design(idx) {
            info!(probe = table.name(idx), reason = %why,
                  "hook left out by design on this kernel (slowpath_probe_expected 0, no alert)");
        }
    }
}

/// After a refusal that names no program: go on with the next plan, or
/// give up with the error, libbpf's last words and the likely fix.
fn next_plan(search: &mut Search<'_>, err: anyhow::Error, log: &str) -> Result<()> {
    let tried = search.describe();
    if !search.advance() {
        return Err(explain_load_error(err.context(log_tail(log))));
    }
    info!(plan = %tried, error = %format!("{err:#}"),
          "kernel refused this attach plan; trying the next");
    Ok(())
}

/// The error when every load attempt was used up (each one moved a hook
/// or the plan on, so this is a bug or a kernel that answers differently
/// each time): the last plan, what was left out and why, where the log has
/// each refusal, and what to do.
fn kept_refusing(search: &Search<'_>, attempts: usize) -> anyhow::Error {
    let table = search.table();
    let left_out: Vec<String> = (search.refused().iter().enumerate())
        .filter_map(|(idx, reason)| Some(format!("{}: {}", table.name(idx), reason.as_ref()?)))
        .collect();
    let left_out = match left_out.is_empty() {
        true => "no hook left out".to_string(),
        false => format!("left out: {}", left_out.join("; ")),
    };
    anyhow!(
        "the kernel kept refusing the BPF programs: {attempts} load attempts, the last with \
         {plan} ({left_out}); the log lines above that start with \"kernel refused\" or \
         \"kernel cannot\" name each hook, its attach type and the kernel's reason: run with \
         --log.level=debug for libbpf's full log of each attempt, try \
         --bpf.attach-type=raw-tp, and report it with that log",
        plan = search.describe()
    )
}

/// One load attempt: open a fresh copy of the object in `slot`, shape it
/// for this attempt and load it.
fn open_and_load<'obj>(
    slot: &'obj mut MaybeUninit<OpenObject>,
    opts: &LoadOptions,
    fit: &Fit,
    setup: &KernelSetup,
    btf_path: &Path,
    search: &Search<'_>,
) -> Result<SlowpathSkel<'obj>> {
    let mut builder = SlowpathSkelBuilder::default();
    builder
        .obj_builder
        .btf_custom_path(btf_path)
        .context("setting the BTF path")?;
    let mut open = builder.open(slot).context("opening the BPF object")?;
    size_maps(&mut open, opts, fit)?;
    size_signal_maps(&mut open, setup)?;
    write_rodata(&mut open, opts, setup);
    size_stack_tables(&mut open, opts.capture_stacks, opts.stacks_on_demand, fit)?;
    choose_programs(&mut open, search);
    open.load()
        .context("loading the BPF programs into the kernel")
}

/// The map sizes the flags set (the process table fitted by `fit`).
fn size_maps(open: &mut OpenSlowpathSkel<'_>, opts: &LoadOptions, fit: &Fit) -> Result<()> {
    let maps = &mut open.maps;
    let sizes = [
        (&mut maps.procs, fit.processes(), "the procs map"),
        (
            &mut maps.proc_events,
            opts.ringbuf_bytes,
            "the proc_events ring buffer",
        ),
    ];
    for (map, entries, what) in sizes {
        map.set_max_entries(entries)
            .with_context(|| format!("sizing {what}"))?;
    }
    Ok(())
}

/// The maps the signals size from their flags (`KernelSetup::map_sizes`).
fn size_signal_maps(open: &mut OpenSlowpathSkel<'_>, setup: &KernelSetup) -> Result<()> {
    for &(name, entries) in &setup.map_sizes {
        let mut map = open
            .open_object_mut()
            .maps_mut()
            .find(|m| m.name() == name)
            .with_context(|| format!("the BPF object has no map {name} to size"))?;
        map.set_max_entries(entries)
            .with_context(|| format!("sizing the {name} map"))?;
    }
    Ok(())
}

/// The core settings, then the setup's patches (which may read the core
/// settings), in the read-only data.
fn write_rodata(open: &mut OpenSlowpathSkel<'_>, opts: &LoadOptions, setup: &KernelSetup) {
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.capture_stacks = opts.capture_stacks;
        rodata.stacks_on_demand = opts.stacks_on_demand;
        #[cfg(feature = "fault-injection")]
        super::fault::write_rodata(rodata, opts);
        switch_syscall_groups(rodata, &setup.syscall_groups);
        for patch in &setup.rodata {
            patch(rodata);
        }
    }
}

/// Turn on the counting of `groups` of syscalls (`count_syscalls[group]`
/// in `bpf/core/syscalls.h`); the others stay off, and the verifier prunes
/// their branches.
pub fn switch_syscall_groups(rodata: &mut types::rodata, groups: &[types::sp_syscall_group]) {
    for group in groups {
        if let Some(switch) = rodata.count_syscalls.get_mut(super::slot!(*group)) {
            *switch = true;
        }
    }
}

/// Stack tables of on-demand sampling (a few processes at a time, each
/// for a few samples: see `findings::sampling`): 256 distinct stacks
/// (260 KB, preallocated), 1,024 call sites, 64 stack copies (8.3 KB each,
/// allocated as used).
const ON_DEMAND_STACKS: u32 = 256;
const ON_DEMAND_CALLSITES: u32 = 1024;
const ON_DEMAND_STACK_COPIES: u32 = 64;

/// The stack tables: sized for sampling every process (`capture_stacks`),
/// for a few on demand (`on_demand`), or shrunk to nothing; `fit` shrinks
/// them further under a locked-memory limit.
fn size_stack_tables(
    open: &mut OpenSlowpathSkel<'_>,
    capture_stacks: bool,
    on_demand: bool,
    fit: &Fit,
) -> Result<()> {
    let maps = &mut open.maps;
    if capture_stacks || on_demand {
        // one scratch slot per CPU (see stack_copy_scratch)
        let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")?;
        maps.stack_copy_scratch
            .set_max_entries(u32::try_from(cpus).unwrap_or(u32::MAX))
            .context("sizing the stack_copy_scratch map")?;
    }
    if capture_stacks {
        // the object's own sizes (bpf/core/callsites.h), fitted
        let tables = [
            (&mut maps.stacks, "stacks", false),
            (&mut maps.callsites, "callsites", false),
            (&mut maps.stack_copies, "stack_copies", true),
        ];
        for (map, name, copies) in tables {
            let entries = match copies {
                true => fit.stack_copies(map.max_entries()),
                false => fit.stack_entries(map.max_entries()),
            };
            map.set_max_entries(entries)
                .with_context(|| format!("sizing the {name} map"))?;
        }
        return Ok(());
    }
    // Stack tables are preallocated (4.3 MB each for `stacks` and
    // `stack_copies`): small or one entry each, and no preallocated spare
    // elements per CPU (except on PREEMPT_RT kernels, whose verifier refuses
    // tracing programs a hash map without preallocation).
    if !Path::new("/sys/kernel/realtime").exists() {
        for (map, name) in [
            (&mut maps.stacks, "stacks"),
            (&mut maps.stack_copies, "stack_copies"),
        ] {
            let flags = map.map_flags() | libbpf_sys::BPF_F_NO_PREALLOC;
            map.set_map_flags(flags)
                .with_context(|| format!("flagging the {name} map"))?;
        }
    }
    let size = |n: u32| if on_demand { n } else { 1 };
    let tables = [
        (
            &mut maps.stacks,
            "stacks",
            fit.stack_entries(size(ON_DEMAND_STACKS)),
        ),
        (
            &mut maps.callsites,
            "callsites",
            fit.stack_entries(size(ON_DEMAND_CALLSITES)),
        ),
        (
            &mut maps.stack_copies,
            "stack_copies",
            fit.stack_copies(size(ON_DEMAND_STACK_COPIES)),
        ),
    ];
    if !on_demand {
        // SP_MAX_STACK_TARGETS entries with on-demand sampling
        maps.stack_targets
            .set_max_entries(1)
            .context("sizing the stack_targets map")?;
    }
    for (map, name, entries) in tables {
        map.set_max_entries(entries)
            .with_context(|| format!("sizing the {name} map"))?;
    }
    Ok(())
}

/// Load only the programs the plan picks for the hooks not left out; the
/// programs of hooks and syscalls the setup does not name (those of a
/// signal switched off) are not loaded either.
fn choose_programs(open: &mut OpenSlowpathSkel<'_>, search: &Search<'_>) {
    for mut prog in open.open_object_mut().progs_mut() {
        if super::RUN_PROGRAMS.iter().any(|run| prog.name() == *run) {
            continue; // run, never attached: always loaded
        }
        let wanted = search.table().classify(prog.name()).ok();
        prog.set_autoload(wanted.is_some_and(|(idx, attach_type)| search.wants(idx, attach_type)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::hooks::tests::setup;
    use crate::bpf::hooks::AttachType::RawTp;

    #[test]
    fn only_an_eperm_from_libbpf_counts_as_refused_for_memory() {
        let refused = |errno| {
            anyhow::Error::from(libbpf_rs::Error::from_raw_os_error(errno))
                .context("loading the BPF programs into the kernel")
        };
        assert!(refused_for_memory(&refused(libc::EPERM)));
        assert!(!refused_for_memory(&refused(libc::EINVAL)));
        assert!(!refused_for_memory(&refused(libc::EACCES)));
        assert!(!refused_for_memory(&anyhow!("Operation not permitted")));
    }

    #[test]
    fn used_up_attempts_name_the_plan_the_refusals_and_the_next_step() {
        let table = HookTable::new(&setup());
        let mut search = Search::new(&table, vec![vec![RawTp; 6]]).unwrap();
        search.refuse(3, RawTp, "invalid func unknown#158");
        assert_eq!(
            kept_refusing(&search, 21).to_string(),
            "the kernel kept refusing the BPF programs: 21 load attempts, the last with \
             sys_enter=raw_tp sched_process_exit=raw_tp sched_process_exec=raw_tp \
             mm_page_alloc=raw_tp mm_compaction_end=raw_tp cgroup_mkdir=raw_tp (left out: \
             mm_page_alloc: kernel refused the program: invalid func unknown#158; \
             mm_compaction_end: needs mm_page_alloc, which the kernel refused); the log lines \
             above that start with \"kernel refused\" or \"kernel cannot\" name each hook, its \
             attach type and the kernel's reason: run with --log.level=debug for libbpf's full \
             log of each attempt, try --bpf.attach-type=raw-tp, and report it with that log"
        );
        let clean = Search::new(&table, vec![vec![RawTp; 6]]).unwrap();
        assert!(kept_refusing(&clean, 21)
            .to_string()
            .contains("(no hook left out)"));
    }
}
