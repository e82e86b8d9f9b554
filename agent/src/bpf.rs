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

use std::ffi::OsStr;
use std::fmt;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Btf, Link, OpenObject};
use tracing::{info, warn};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/slowpath.skel.rs"));
}
pub use skel::{types, SlowpathSkel, SlowpathSkelBuilder};

// SAFETY: these generated #[repr(C)] structs hold only integers and integer
// arrays (no pointers, no bools, no enums), so every bit pattern is a valid
// value and reading them from map bytes is sound.
unsafe impl plain::Plain for types::sp_proc {}
// SAFETY: as above.
unsafe impl plain::Plain for types::sp_proc_event {}
// SAFETY: as above (integers only, explicit padding field).
unsafe impl plain::Plain for types::sp_callsite_key {}

/// Index of an enum slot in a counter array (`types::sp_clock::SP_CLOCK_TAI`
/// -> 10): the generated enum types wrap their C value. A macro, not a
/// function, so that it works in constants and array lengths.
macro_rules! slot {
    ($value:expr) => {
        $value.0 as usize
    };
}
pub(crate) use slot;

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

/// Result of attaching one probe.
#[derive(Clone, Debug)]
pub struct ProbeStatus {
    pub probe: &'static str,
    pub attach_type: AttachType,
    /// `None` when attached; else the kernel's or libbpf's reason.
    pub error: Option<String>,
}

impl ProbeStatus {
    pub fn attached(&self) -> bool {
        self.error.is_none()
    }
}

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
const HOT_WINDOW_SECONDS: f64 = (1u64 << 30) as f64 / 1e9;

/// Wakeups per kernel window for a rate of `per_second` (at least 1).
pub fn hot_window_wakeups(per_second: f64) -> u32 {
    (per_second * HOT_WINDOW_SECONDS)
        .ceil()
        .clamp(1.0, u32::MAX as f64) as u32
}

/// Tracepoint name used by `break_probe`.
const MISSING_TRACEPOINT: &str = "slowpath_no_such_tracepoint";

/// The loaded object and its links. Dropping it detaches every program.
pub struct Loaded<'obj> {
    pub skel: SlowpathSkel<'obj>,
    pub probes: Vec<ProbeStatus>,
    _links: Vec<Link>,
}

/// Most load attempts: three plans (fentry, tracepoints, raw_tp), plus per
/// hook two step downs (refused at load or at attach) and one removal.
pub const MAX_ATTEMPTS: usize = 3 + 3 * PROBES.len();

/// Storage for the open object, one slot per load attempt.
pub type ObjectStorage = [MaybeUninit<OpenObject>; MAX_ATTEMPTS];

/// One attach type per probe, indexed like [`PROBES`].
type Plan = [AttachType; PROBES.len()];

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
const TIMER_FNS: [&str; 4] = [
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
fn timer_fn_addresses(btf: &Btf<'_>) -> Option<[u64; 4]> {
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
fn kallsyms_addresses(kallsyms: &str, names: &[&str; 4]) -> [u64; 4] {
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

/// (hook, the hook it only serves): the timer-wakeup hooks count nothing
/// without the expiring timer's frame that `hrtimer_expire_entry` records,
/// so they are left out with it rather than run for nothing on every wakeup.
const DEPENDS: [(&str, &str); 2] = [
    ("hrtimer_expire_exit", "hrtimer_expire_entry"),
    ("sched_waking", "hrtimer_expire_entry"),
];

/// Hooks left out because the kernel refused every program they have,
/// with the kernel's reason, indexed like [`PROBES`].
type Refused = [Option<String>; PROBES.len()];

fn probe_index(probe: &str) -> usize {
    PROBES
        .iter()
        .position(|&p| p == probe)
        .expect("known probe")
}

/// Run `f` with libbpf's messages captured (not printed), and return them:
/// a refused plan or program is expected on many kernels, and its verifier
/// log says which program and why.
fn with_libbpf_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    fn capture(_level: libbpf_rs::PrintLevel, msg: String) {
        LIBBPF_LOG
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_str(&msg);
    }
    LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let saved = libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, capture)));
    let out = f();
    libbpf_rs::set_print(saved);
    let log = std::mem::take(&mut *LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()));
    (out, log)
}

static LIBBPF_LOG: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// The tracepoint program the kernel refused, from libbpf's log ("prog
/// 'mm_page_alloc_raw': BPF program load failed: ..." and the verifier's
/// log after it), with the verifier's last message. `None` for fentry
/// programs (a refused fentry program moves the whole plan on) and for
/// failures that name no program.
fn refused_program(log: &str) -> Option<(&'static str, AttachType, String)> {
    let name = log.lines().find_map(|line| {
        let rest = &line[line.find("prog '")? + "prog '".len()..];
        let (name, after) = rest.split_once('\'')?;
        (after.contains("load failed") || after.contains("failed to load")).then_some(name)
    })?;
    let (probe, attach_type) = classify_program(OsStr::new(name)).ok()?;
    if attach_type == AttachType::Fentry {
        return None;
    }
    Some((probe, attach_type, verifier_reason(log)))
}

/// The verifier's message: the last line of the program's load log that is
/// not its statistics, or libbpf's own line when there is no log.
fn verifier_reason(log: &str) -> String {
    let body = log
        .split("-- BEGIN PROG LOAD LOG --")
        .nth(1)
        .and_then(|b| b.split("-- END PROG LOAD LOG --").next());
    let line = body.and_then(|b| {
        b.lines().map(str::trim).rfind(|l| {
            !l.is_empty()
                && !l.starts_with("processed ")
                && !l.starts_with("verification time")
                && !l.starts_with("stack depth")
        })
    });
    line.or_else(|| log.lines().find(|l| l.contains("load failed")))
        .unwrap_or("no reason given")
        .trim()
        .to_string()
}

/// The last lines of libbpf's log, for a load failure nothing could fix.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(4)..];
    format!("libbpf: {}", tail.join(" | "))
}

/// Add the likely cause and fix to a final load failure.
fn explain_load_error(err: anyhow::Error) -> anyhow::Error {
    let eperm = err
        .chain()
        .any(|e| e.to_string().contains("Operation not permitted"));
    if eperm {
        return err.context(
            "the kernel refused bpf() with EPERM although the capabilities are present: \
             a seccomp profile (a container runtime's default one) or kernel lockdown blocks it; \
             run the container with seccomp unconfined (Kubernetes: \
             securityContext.seccompProfile.type: Unconfined; podman/docker: \
             --security-opt seccomp=unconfined)",
        );
    }
    err
}

/// Move hook `idx` to attach type `next` in this plan and every later one.
fn step_down(plan: &mut Plan, later: &mut [Plan], idx: usize, next: AttachType) {
    plan[idx] = next;
    for later in later {
        later[idx] = later[idx].max(next);
    }
}

/// What attaching a loaded object gave.
enum Attached<'obj> {
    /// Every hook that could attach did; the others are in `probes`.
    All(Box<Loaded<'obj>>),
    /// `probe` failed to attach as `from` and has a next attach type `to`:
    /// reload with it (everything attached so far is detached on drop).
    StepDown {
        probe: &'static str,
        from: AttachType,
        to: AttachType,
    },
}

fn attach<'obj>(
    skel: SlowpathSkel<'obj>,
    opts: &LoadOptions,
    plan: &Plan,
    refused: &Refused,
) -> Result<Attached<'obj>> {
    let (links, mut probes) = attach_all(&skel, opts);
    let failed_with_next = probes
        .iter()
        .filter(|p| !p.attached() && opts.break_probe.as_deref() != Some(p.probe))
        .find_map(|p| {
            Some((
                p.probe,
                p.attach_type,
                next_attach_type(p.probe, p.attach_type)?,
            ))
        });
    if let Some((probe, from, to)) = failed_with_next {
        return Ok(Attached::StepDown { probe, from, to });
    }
    for (idx, reason) in refused.iter().enumerate() {
        if let Some(reason) = reason {
            probes.push(ProbeStatus {
                probe: PROBES[idx],
                attach_type: plan[idx],
                error: Some(reason.clone()),
            });
        }
    }
    probes.sort_by_key(|p| probe_index(p.probe));
    if links.is_empty() {
        let reasons: Vec<String> = probes
            .iter()
            .map(|p| format!("{}: {}", p.probe, p.error.as_deref().unwrap_or("?")))
            .collect();
        bail!("no BPF program could be attached ({})", reasons.join("; "));
    }
    Ok(Attached::All(Box::new(Loaded {
        skel,
        probes,
        _links: links,
    })))
}

fn describe(plan: &Plan) -> String {
    PROBES
        .iter()
        .zip(plan)
        .map(|(p, t)| format!("{p}={t}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The attach type after `current` for `probe`, if it has one.
fn next_attach_type(probe: &str, current: AttachType) -> Option<AttachType> {
    supported(probe)
        .iter()
        .skip_while(|&&t| t != current)
        .nth(1)
        .copied()
}

/// Attach types a probe has programs for, cheapest first (fentry: the
/// syscall hook, on x86_64 and arm64).
fn supported(probe: &str) -> &'static [AttachType] {
    if probe == "sys_enter" {
        &[AttachType::Fentry, AttachType::TpBtf, AttachType::RawTp]
    } else {
        &[AttachType::TpBtf, AttachType::RawTp]
    }
}

/// The plans to try, in order. A kernel that does not expose its own BTF
/// (built without CONFIG_DEBUG_INFO_BTF, run with --bpf.btf-path) gets
/// raw_tp only: fentry and tp_btf resolve their targets in the kernel's BTF.
fn plans(opts: &LoadOptions, btf: &Btf<'_>) -> Result<Vec<Plan>> {
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
fn auto_plans(btf: &Btf<'_>) -> Vec<Plan> {
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

/// The kernel's BTF at `path`, parsed.
fn kernel_btf(path: &Path) -> Result<Btf<'static>> {
    Btf::from_path(path).with_context(|| {
        format!(
            "reading kernel BTF from {}: is it a BTF blob?",
            path.display()
        )
    })
}

/// Kernel functions the fentry programs attach to (the `sys_enter_fentry_*`
/// programs of bpf/slowpath.bpf.c for this architecture).
#[cfg(target_arch = "x86_64")]
const FENTRY_TARGETS: [&str; 15] = [
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
const FENTRY_TARGETS: [&str; 11] = [
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

fn open_and_load<'obj>(
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

/// Attach every loaded program; one status per probe (a probe attached with
/// fentry is attached when all of its programs are).
fn attach_all(skel: &SlowpathSkel<'_>, opts: &LoadOptions) -> (Vec<Link>, Vec<ProbeStatus>) {
    let mut links = Vec::new();
    let mut probes: Vec<ProbeStatus> = Vec::new();
    for prog in skel.object().progs_mut() {
        if !prog.autoload() {
            continue;
        }
        let Ok((probe, attach_type)) = classify_program(prog.name()) else {
            continue;
        };
        if probes.iter().any(|p| p.probe == probe && p.error.is_some()) {
            continue; // one failed program of a hook is enough to report it
        }
        let attached = if opts.break_probe.as_deref() == Some(probe) {
            prog.attach_raw_tracepoint(MISSING_TRACEPOINT)
        } else {
            prog.attach()
        };
        let error = match attached {
            Ok(link) => {
                links.push(link);
                None
            }
            Err(err) => {
                warn!(probe, program = %prog.name().to_string_lossy(), %attach_type, error = %err,
                      "probe not attached; the others keep working");
                Some(err.to_string())
            }
        };
        match probes.iter_mut().find(|p| p.probe == probe) {
            Some(status) => status.error = status.error.take().or(error),
            None => probes.push(ProbeStatus {
                probe,
                attach_type,
                error,
            }),
        }
    }
    for p in probes.iter().filter(|p| p.attached()) {
        info!(probe = p.probe, attach_type = %p.attach_type, "attached");
    }
    probes.sort_by_key(|p| PROBES.iter().position(|&n| n == p.probe));
    (links, probes)
}

/// `sys_enter_btf` -> (`sys_enter`, TpBtf); `sys_enter_fentry_time` ->
/// (`sys_enter`, Fentry).
fn classify_program(name: &OsStr) -> Result<(&'static str, AttachType)> {
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

/// Runs of each attached probe's programs that the kernel skipped because
/// the same program was already running on that CPU (an interrupt that
/// fired while it ran): the recursion guard of `__bpf_trace_run()`
/// (kernel/trace/bpf_trace.c), counted per program in `bpf_prog_info`'s
/// `recursion_misses` (kernel 5.12+; 0 before). Each is an event not counted.
/// Summed per probe, in [`PROBES`] order; probes not loaded are left out.
pub fn recursion_misses(skel: &SlowpathSkel<'_>) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for prog in skel.object().progs() {
        let Ok((probe, _)) = classify_program(prog.name()) else {
            continue;
        };
        if !prog.autoload() {
            continue;
        }
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        // SAFETY: `info` is a zeroed bpf_prog_info and `len` its size, as the
        // call requires; the kernel writes at most `len` bytes into it. The fd
        // is the loaded program's, valid while `skel` is borrowed.
        let rc = unsafe {
            libbpf_sys::bpf_prog_get_info_by_fd(prog.as_fd().as_raw_fd(), &mut info, &mut len)
        };
        let misses = if rc == 0 { info.recursion_misses } else { 0 };
        match out.iter_mut().find(|(p, _)| *p == probe) {
            Some((_, n)) => *n += misses,
            None => out.push((probe, misses)),
        }
    }
    out.sort_by_key(|(p, _)| PROBES.iter().position(|n| n == p));
    out
}

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
    fn the_refused_program_and_the_verifiers_reason_come_from_libbpfs_log() {
        // as libbpf 1.x prints a program the 5.10 verifier refuses
        let log = "libbpf: prog 'mm_page_alloc_raw': BPF program load failed: Invalid argument\n\
                   libbpf: prog 'mm_page_alloc_raw': -- BEGIN PROG LOAD LOG --\n\
                   0: (85) call unknown#158\ninvalid func unknown#158\n\
                   processed 3 insns (limit 1000000) max_states_per_insn 0\n\
                   -- END PROG LOAD LOG --\n\
                   libbpf: prog 'mm_page_alloc_raw': failed to load: -22\n";
        let (probe, attach_type, reason) = refused_program(log).unwrap();
        assert_eq!((probe, attach_type), ("mm_page_alloc", AttachType::RawTp));
        assert_eq!(reason, "invalid func unknown#158");
        // fentry refusals and logs that name no program move the whole plan
        assert!(refused_program("libbpf: prog 'sys_enter_fentry_time': BPF program load failed: Operation not permitted").is_none());
        assert!(refused_program("libbpf: failed to load object").is_none());
    }

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
