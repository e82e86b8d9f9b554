//! Opening and loading the object.

use std::ffi::OsStr;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Btf, Link, OpenObject};
use tracing::{info, warn};

use super::attach::{attach, Attached, ProbeStatus};
use super::hooks::{classify_program, next_attach_type, probe_index, AttachType, DEPENDS, PROBES};
use super::libbpf_log::{explain_load_error, log_tail, refused_program, with_libbpf_log};
use super::plan::{describe, plans, step_down, Plan, Refused};
use super::skel::{SlowpathSkel, SlowpathSkelBuilder};

/// Settings that shape the BPF object before load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Capacity of the `procs` map (thread groups tracked at once).
    pub max_processes: u32,
    /// Capacity of `compaction_starts` (compaction runs in flight at once).
    pub max_compactions: u32,
    /// Size of the `proc_events` ring buffer in bytes (power of two, >= page size).
    pub ringbuf_bytes: u32,
    /// Force one attach type for every probe instead of probing.
    pub force_attach: Option<AttachType>,
    /// Kernel BTF used for CO-RE and for probing tracepoints.
    pub btf_path: PathBuf,
    /// Sample user stacks at the counted syscalls (`slowpath doctor`).
    pub capture_stacks: bool,
    /// Fault injection for tests: attach this probe as raw_tp to a
    /// tracepoint that does not exist, so the kernel refuses it for real.
    pub break_probe: Option<String>,
    /// Fault injection for tests: the verifier refuses both mm_page_alloc
    /// programs (`test_refuse_page_alloc` in the object).
    pub refuse_page_alloc: bool,
    /// Timer wakeups in one kernel window (2^30 ns) that mark a timer loop.
    pub timer_hot_wakeups: u32,
}

/// Length of the kernel's timer-loop window: `bpf_ktime_get_ns() >> 30`.
pub(super) const HOT_WINDOW_SECONDS: f64 = (1u64 << 30) as f64 / 1e9;

/// Wakeups per kernel window for a rate of `per_second` (at least 1).
pub fn hot_window_wakeups(per_second: f64) -> u32 {
    (per_second * HOT_WINDOW_SECONDS)
        .ceil()
        .clamp(1.0, u32::MAX as f64) as u32
}

/// The loaded object and its links. Dropping it detaches every program.
pub struct Loaded<'obj> {
    pub skel: SlowpathSkel<'obj>,
    pub probes: Vec<ProbeStatus>,
    pub(super) _links: Vec<Link>,
}

/// Most load attempts: three plans (fentry, tracepoints, raw_tp), plus per
/// hook two step downs (refused at load or at attach) and one removal.
pub const MAX_ATTEMPTS: usize = 3 + 3 * PROBES.len();

/// Storage for the open object, one slot per load attempt.
pub type ObjectStorage = [MaybeUninit<OpenObject>; MAX_ATTEMPTS];

/// Open, load and attach, trying the cheapest plan first. A program the
/// kernel refuses at load moves its hook alone to the next attach type, or
/// leaves the hook out when it has none; a refusal that names no program
/// moves every hook to the next plan. Fails only when nothing loads or
/// nothing attaches; a single hook's failure is in `probes`.
pub fn load<'obj>(storage: &'obj mut ObjectStorage, opts: &LoadOptions) -> Result<Loaded<'obj>> {
    // Parsed once: the plans and the timer callbacks both look into it.
    let btf = kernel_btf(&opts.btf_path)?;
    let mut plans = plans(opts, &btf)?.into_iter();
    let mut plan = plans.next().context("no attach plan to try")?;
    let mut refused: Refused = [const { None }; PROBES.len()];
    let timer_fns = timer_fn_addresses(&btf);
    let mut slots = storage.iter_mut();
    loop {
        let slot = slots
            .next()
            .context("the kernel kept refusing the BPF programs: see the log")?;
        let (loaded, log) =
            with_libbpf_log(|| open_and_load(slot, opts, &plan, &refused, timer_fns));
        let err = match loaded {
            Ok(skel) => match attach(skel, opts, &plan, &refused)? {
                Attached::All(loaded) => return Ok(*loaded),
                Attached::StepDown { probe, from, to } => {
                    // The kernel loads some programs it cannot attach (fentry
                    // on arm64 before 6.4: no ftrace direct calls, ENOTSUPP).
                    warn!(probe, %from, %to, "kernel cannot attach this hook's programs; \
                          trying the hook's next attach type");
                    step_down(&mut plan, plans.as_mut_slice(), probe_index(probe), to);
                    continue;
                }
            },
            Err(err) => err,
        };
        if let Some((probe, attach_type, reason)) = refused_program(&log) {
            let idx = probe_index(probe);
            match next_attach_type(probe, attach_type) {
                Some(next) => {
                    info!(probe, from = %attach_type, to = %next, reason = %reason,
                          "kernel refused this program; trying the hook's next attach type");
                    step_down(&mut plan, plans.as_mut_slice(), idx, next);
                }
                None => {
                    warn!(probe, %attach_type, reason = %reason,
                          "kernel refused every program of this hook; the others keep working");
                    refused[idx] = Some(format!("kernel refused the program: {reason}"));
                    for &(dependent, _) in DEPENDS.iter().filter(|(_, on)| *on == probe) {
                        info!(
                            probe = dependent,
                            needs = probe,
                            "left out: it only serves a refused hook"
                        );
                        refused[probe_index(dependent)] =
                            Some(format!("needs {probe}, which the kernel refused"));
                    }
                }
            }
            continue;
        }
        match plans.next() {
            Some(next) => {
                info!(plan = %describe(&plan), error = %format!("{err:#}"),
                      "kernel refused this attach plan; trying the next");
                plan = next;
            }
            None => return Err(explain_load_error(err.context(log_tail(&log)))),
        }
    }
}

/// The hrtimer callbacks the timer hooks name (`timer_fn_addrs` in the
/// object, in this order).
pub(super) const TIMER_FNS: [&str; 4] = [
    "hrtimer_wakeup",
    "timerfd_tmrproc",
    "it_real_fn",
    "posix_timer_fn",
];

/// On a kernel without `bpf_snprintf()` (before 5.13: no `BPF_FUNC_snprintf`
/// in its BTF's `enum bpf_func_id`), the timer callbacks' addresses from
/// `/proc/kallsyms`, so that `hrtimer_expire_entry` can name them without
/// it. `None` when the kernel has the helper, or when kallsyms shows no
/// addresses (without CAP_SYSLOG it shows zeros): the hook is then refused
/// on such a kernel, and the log says why.
pub(super) fn timer_fn_addresses(btf: &Btf<'_>) -> Option<[u64; 4]> {
    let has_snprintf = btf
        .type_by_name::<libbpf_rs::btf::types::Enum<'_>>("bpf_func_id")
        .is_some_and(|ids| {
            ids.iter()
                .any(|m| m.name == Some(OsStr::new("BPF_FUNC_snprintf")))
        });
    if has_snprintf {
        return None;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let addrs = kallsyms_addresses(&kallsyms, &TIMER_FNS);
    let found = addrs[0] != 0 && addrs[1] != 0;
    match found {
        true => {
            info!("kernel without bpf_snprintf: timer callbacks named by their kallsyms addresses")
        }
        false => warn!(
            "kernel without bpf_snprintf and /proc/kallsyms shows no addresses (needs CAP_SYSLOG): \
             the timer-wakeup hooks will be left out"
        ),
    }
    found.then_some(addrs)
}

/// Addresses of `names` in a /proc/kallsyms text (a name may carry an LTO
/// suffix, `name.llvm.123`); 0 for a name not found or shown as zero.
pub(super) fn kallsyms_addresses(kallsyms: &str, names: &[&str; 4]) -> [u64; 4] {
    let mut out = [0u64; 4];
    for line in kallsyms.lines() {
        let mut fields = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(symbol)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let base = symbol.split('.').next().unwrap_or(symbol);
        if let Some(i) = names.iter().position(|&n| n == base) {
            if out[i] == 0 {
                out[i] = u64::from_str_radix(addr, 16).unwrap_or(0);
            }
        }
    }
    out
}

/// The kernel's BTF at `path`, parsed.
pub(super) fn kernel_btf(path: &Path) -> Result<Btf<'static>> {
    Btf::from_path(path).with_context(|| {
        format!(
            "reading kernel BTF from {}: is it a BTF blob?",
            path.display()
        )
    })
}

pub(super) fn open_and_load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    opts: &LoadOptions,
    plan: &Plan,
    refused: &Refused,
    timer_fns: Option<[u64; 4]>,
) -> Result<SlowpathSkel<'obj>> {
    let mut builder = SlowpathSkelBuilder::default();
    builder
        .obj_builder
        .btf_custom_path(&opts.btf_path)
        .context("setting the BTF path")?;
    let mut open = builder.open(storage).context("opening the BPF object")?;
    open.maps
        .procs
        .set_max_entries(opts.max_processes)
        .context("sizing the procs map")?;
    open.maps
        .compaction_starts
        .set_max_entries(opts.max_compactions)
        .context("sizing the compaction_starts map")?;
    open.maps
        .proc_events
        .set_max_entries(opts.ringbuf_bytes)
        .context("sizing the proc_events ring buffer")?;
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        if let Some(addrs) = timer_fns {
            rodata.timer_fns_by_address = true;
            rodata.timer_fn_addrs = addrs;
        }
        rodata.capture_stacks = opts.capture_stacks;
        rodata.timer_hot_wakeups = opts.timer_hot_wakeups;
        rodata.test_refuse_page_alloc = opts.refuse_page_alloc;
    }
    if opts.capture_stacks {
        // one scratch slot per CPU (see stack_copy_scratch)
        let cpus = libbpf_rs::num_possible_cpus().context("counting the possible CPUs")?;
        open.maps
            .stack_copy_scratch
            .set_max_entries(u32::try_from(cpus).unwrap_or(u32::MAX))
            .context("sizing the stack_copy_scratch map")?;
    } else {
        // Stack tables are preallocated (4 MiB for `stacks`, 4.3 MB for
        // `stack_copies`): one entry each when nothing will be sampled, and
        // no preallocated spare copies per CPU (except on PREEMPT_RT
        // kernels, whose verifier refuses tracing programs a hash map
        // without preallocation).
        if !Path::new("/sys/kernel/realtime").exists() {
            let flags = open.maps.stack_copies.map_flags() | libbpf_sys::BPF_F_NO_PREALLOC;
            open.maps
                .stack_copies
                .set_map_flags(flags)
                .context("flagging the stack_copies map")?;
        }
        open.maps
            .stacks
            .set_max_entries(1)
            .context("sizing the stacks map")?;
        open.maps
            .callsites
            .set_max_entries(1)
            .context("sizing the callsites map")?;
        open.maps
            .stack_copies
            .set_max_entries(1)
            .context("sizing the stack_copies map")?;
    }
    for mut prog in open.open_object_mut().progs_mut() {
        let (probe, attach_type) = classify_program(prog.name())?;
        let idx = probe_index(probe);
        prog.set_autoload(plan[idx] == attach_type && refused[idx].is_none());
    }
    open.load()
        .context("loading the BPF programs into the kernel")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_callbacks_are_found_in_kallsyms_with_or_without_an_lto_suffix() {
        let text = "ffffffff81100000 t hrtimer_wakeup\n\
                    ffffffff81200000 t timerfd_tmrproc.llvm.42\n\
                    ffffffff81300000 T it_real_fn\n\
                    ffffffff81400000 t posix_timer_fn\t[kernel]\n\
                    ffffffff81500000 t hrtimer_wakeup_other\n";
        assert_eq!(
            kallsyms_addresses(text, &TIMER_FNS),
            [
                0xffffffff81100000,
                0xffffffff81200000,
                0xffffffff81300000,
                0xffffffff81400000
            ]
        );
        let hidden = "0000000000000000 t hrtimer_wakeup\n";
        assert_eq!(kallsyms_addresses(hidden, &TIMER_FNS), [0; 4]);
    }

    #[test]
    fn hot_window_is_the_threshold_over_2_to_the_30_ns() {
        assert_eq!(hot_window_wakeups(200.0), 215);
        assert_eq!(hot_window_wakeups(1e-9), 1);
    }
}
