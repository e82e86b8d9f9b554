//! Opening, probing, loading and attaching the BPF programs of
//! `bpf/slowpath.bpf.c`.
//!
//! Every hook has two programs in the object, `<tracepoint>_btf`
//! (`tp_btf`, cheapest) and `<tracepoint>_raw` (`raw_tp`). For each hook we
//! pick one before load: `tp_btf` when the kernel's BTF has the
//! tracepoint's `btf_trace_<name>` type, else `raw_tp`. If the kernel then
//! refuses the `tp_btf` programs at load time, the whole object is reopened
//! with `raw_tp` everywhere. Neither needs tracefs. A program that loads but
//! does not attach is reported (`slowpath_probe_attached` 0) and the others
//! keep working.

use std::ffi::OsStr;
use std::fmt;
use std::mem::MaybeUninit;
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

/// The kernel tracepoints slowpath hooks, as named in `slowpath_probe_attached{probe}`.
pub const PROBES: [&str; 6] = [
    "sys_enter",
    "sched_process_exit",
    "sched_process_exec",
    "mm_page_alloc",
    "mm_compaction_begin",
    "mm_compaction_end",
];

/// How a program is attached (the `attach_type` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachType {
    /// BTF-enabled raw tracepoint (`SEC("tp_btf/...")`), kernel 5.5+.
    TpBtf,
    /// Raw tracepoint (`SEC("raw_tp/...")`), kernel 4.17+.
    RawTp,
}

impl AttachType {
    fn suffix(self) -> &'static str {
        match self {
            AttachType::TpBtf => "_btf",
            AttachType::RawTp => "_raw",
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
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
    /// Fault injection for tests: attach this probe as raw_tp to a
    /// tracepoint that does not exist, so the kernel refuses it for real.
    pub break_probe: Option<String>,
}

/// Tracepoint name used by `break_probe`.
const MISSING_TRACEPOINT: &str = "slowpath_no_such_tracepoint";

/// The loaded object and its links. Dropping it detaches every program.
pub struct Loaded<'obj> {
    pub skel: SlowpathSkel<'obj>,
    pub probes: Vec<ProbeStatus>,
    _links: Vec<Link>,
}

/// Storage for the open object: a second slot is used only when the kernel
/// refuses the `tp_btf` programs and the object is opened again.
pub type ObjectStorage = [MaybeUninit<OpenObject>; 2];

/// Open, load and attach. Fails only when nothing could be loaded or
/// nothing attached; a single probe's failure is reported in `probes`.
pub fn load<'obj>(storage: &'obj mut ObjectStorage, opts: &LoadOptions) -> Result<Loaded<'obj>> {
    let chosen = choose_attach_types(opts)?;
    let [first, second] = storage;
    let skel = match open_and_load(first, opts, &chosen) {
        Ok(skel) => skel,
        Err(err) if opts.force_attach.is_none() && chosen.contains(&AttachType::TpBtf) => {
            warn!(error = %format!("{err:#}"), "tp_btf programs refused; falling back to raw_tp");
            let fallback = [AttachType::RawTp; PROBES.len()];
            open_and_load(second, opts, &fallback)
                .context("loading the BPF programs as raw_tp after tp_btf failed")?
        }
        Err(err) => return Err(err),
    };
    let (links, probes) = attach_all(&skel, &chosen_after_load(&skel), opts);
    if links.is_empty() {
        let reasons: Vec<String> = probes
            .iter()
            .map(|p| format!("{}: {}", p.probe, p.error.as_deref().unwrap_or("?")))
            .collect();
        bail!("no BPF program could be attached ({})", reasons.join("; "));
    }
    Ok(Loaded {
        skel,
        probes,
        _links: links,
    })
}

/// For each probe, the cheapest attach type the kernel's BTF says will work.
fn choose_attach_types(opts: &LoadOptions) -> Result<[AttachType; PROBES.len()]> {
    let mut chosen = probe_attach_types(opts)?;
    if let Some(broken) = &opts.break_probe {
        let idx = PROBES
            .iter()
            .position(|p| p == broken)
            .with_context(|| format!("--bpf.test-break-probe {broken}: not one of {PROBES:?}"))?;
        chosen[idx] = AttachType::RawTp;
    }
    Ok(chosen)
}

fn probe_attach_types(opts: &LoadOptions) -> Result<[AttachType; PROBES.len()]> {
    if let Some(forced) = opts.force_attach {
        return Ok([forced; PROBES.len()]);
    }
    let btf = Btf::from_path(&opts.btf_path).with_context(|| {
        format!(
            "reading kernel BTF from {}: is it a BTF blob?",
            opts.btf_path.display()
        )
    })?;
    Ok(PROBES.map(|probe| {
        let has_btf_trace = btf
            .type_by_name::<libbpf_rs::btf::BtfType<'_>>(&format!("btf_trace_{probe}"))
            .is_some();
        if has_btf_trace {
            AttachType::TpBtf
        } else {
            info!(probe, "no btf_trace_{probe} in kernel BTF: using raw_tp");
            AttachType::RawTp
        }
    }))
}

fn open_and_load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    opts: &LoadOptions,
    chosen: &[AttachType; PROBES.len()],
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
    for mut prog in open.open_object_mut().progs_mut() {
        let (probe, attach_type) = split_program_name(prog.name())?;
        let idx = PROBES.iter().position(|&p| p == probe).expect("checked");
        prog.set_autoload(chosen[idx] == attach_type);
    }
    open.load()
        .context("loading the BPF programs into the kernel")
}

/// Which twin of each probe the loaded object carries.
fn chosen_after_load(skel: &SlowpathSkel<'_>) -> Vec<(&'static str, AttachType)> {
    skel.object()
        .progs()
        .filter(|prog| prog.autoload())
        .filter_map(|prog| split_program_name(prog.name()).ok())
        .collect()
}

fn attach_all(
    skel: &SlowpathSkel<'_>,
    chosen: &[(&'static str, AttachType)],
    opts: &LoadOptions,
) -> (Vec<Link>, Vec<ProbeStatus>) {
    let mut links = Vec::new();
    let mut probes = Vec::new();
    for prog in skel.object().progs_mut() {
        let Ok((probe, attach_type)) = split_program_name(prog.name()) else {
            continue;
        };
        if !chosen.contains(&(probe, attach_type)) {
            continue;
        }
        let attached = if opts.break_probe.as_deref() == Some(probe) {
            prog.attach_raw_tracepoint(MISSING_TRACEPOINT)
        } else {
            prog.attach()
        };
        let error = match attached {
            Ok(link) => {
                links.push(link);
                info!(probe, %attach_type, "attached");
                None
            }
            Err(err) => {
                warn!(probe, %attach_type, error = %err, "probe not attached; the others keep working");
                Some(err.to_string())
            }
        };
        probes.push(ProbeStatus {
            probe,
            attach_type,
            error,
        });
    }
    probes.sort_by_key(|p| PROBES.iter().position(|&n| n == p.probe));
    (links, probes)
}

/// `sys_enter_btf` -> (`sys_enter`, TpBtf).
fn split_program_name(name: &OsStr) -> Result<(&'static str, AttachType)> {
    let name = name.to_string_lossy();
    for attach_type in [AttachType::TpBtf, AttachType::RawTp] {
        if let Some(probe) = name.strip_suffix(attach_type.suffix()) {
            if let Some(&known) = PROBES.iter().find(|&&p| p == probe) {
                return Ok((known, attach_type));
            }
        }
    }
    bail!("BPF program {name} is not named <probe>_btf or <probe>_raw")
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
            "kernel BTF not found at {KERNEL_BTF}: this kernel was built without \
             CONFIG_DEBUG_INFO_BTF=y; use a kernel with BTF (most distributions since 2020) \
             or pass a BTF file for this exact kernel with --bpf.btf-path"
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
        assert_eq!(
            split_program_name(OsStr::new("sys_enter_btf")).unwrap(),
            ("sys_enter", AttachType::TpBtf)
        );
        assert_eq!(
            split_program_name(OsStr::new("mm_compaction_end_raw")).unwrap(),
            ("mm_compaction_end", AttachType::RawTp)
        );
        assert!(split_program_name(OsStr::new("handler")).is_err());
        assert!(split_program_name(OsStr::new("unknown_btf")).is_err());
    }
}
