//! What loading gives and takes: the settings that shape the object
//! ([`LoadOptions`]), the loaded object with its links ([`Loaded`]) and the
//! storage its open copies live in. Its own module, so that the loader, the
//! attach step, the cost meter and the test-only fault injection share these
//! types without importing each other.

use std::mem::MaybeUninit;

use libbpf_rs::{Link, OpenObject};

use super::dispatch::UntracedTiming;
use super::hooks::{AttachType, HookTable, LeftOutCause};
use super::skel::SlowpathSkel;

/// Settings that shape the BPF object before load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Capacity of the `procs` map (thread groups tracked at once).
    pub max_processes: u32,
    /// Size of the `proc_events` ring buffer in bytes (power of two, >= page size).
    pub ringbuf_bytes: u32,
    /// Force one attach type for every probe instead of probing.
    pub force_attach: Option<AttachType>,
    /// Sample user stacks at the counted syscalls (`slowpath doctor`).
    pub capture_stacks: bool,
    /// Whether the kernel charges BPF memory to a finite locked-memory
    /// limit the agent could not lift (`crate::memlock::settle`): then the
    /// tables shrink until they fit (`fit.rs`).
    pub memlock: crate::memlock::Memlock,
    /// Size the stack tables for sampling the thread groups the agent asks
    /// for (`stack_targets`: its findings), without `capture_stacks`.
    pub stacks_on_demand: bool,
    /// Fault injection for tests: attach this probe as raw_tp to a
    /// tracepoint that does not exist, so the kernel refuses it for real.
    #[cfg(feature = "fault-injection")]
    pub break_probe: Option<String>,
    /// Fault injection for tests: the verifier refuses both mm_page_alloc
    /// programs (`test_refuse_page_alloc` in the object).
    #[cfg(feature = "fault-injection")]
    pub refuse_page_alloc: bool,
}

/// The loaded object and its links. Dropping it detaches every program.
pub struct Loaded<'obj> {
    /// The loaded object: its maps are what the worker reads.
    pub skel: SlowpathSkel<'obj>,
    /// One status per hook of the table, in its order.
    pub probes: Vec<ProbeStatus>,
    /// Entries of the `procs` map: `--bpf.max-processes`, or fewer where
    /// the tables were fitted to the locked-memory limit.
    pub process_capacity: u32,
    /// An untraced syscall's time taken right before the programs were
    /// attached (with the object already loaded), to which the cost meter
    /// compares one taken after (`cost.rs`).
    pub(super) untraced_before: Option<UntracedTiming>,
    /// The hook table it was loaded with.
    pub(super) table: HookTable,
    /// Held for their drop: a program stays attached while its link lives.
    pub(super) _links: Vec<Link>,
}

/// Storage for the open object, one slot per load attempt; [`load`] sizes
/// it. Create it empty (`ObjectStorage::new()`) and keep it as long as the
/// [`Loaded`] object.
pub type ObjectStorage = Vec<MaybeUninit<OpenObject>>;

/// Result of attaching one probe.
#[derive(Clone, Debug)]
pub struct ProbeStatus {
    /// The hook's tracepoint name (`slowpath_probe_attached{probe}`).
    pub probe: &'static str,
    /// How its programs were attached, or were to be when refused.
    pub attach_type: AttachType,
    /// `None` when attached; else the kernel's or libbpf's reason.
    pub error: Option<String>,
    /// Why the hook is left out by design on this kernel with these
    /// privileges; `None` when it is expected to attach
    /// (`slowpath_probe_expected` 0 when left out: its refusal is no alert).
    pub left_out: Option<LeftOutCause>,
}

impl ProbeStatus {
    /// Whether the hook is expected to attach on this kernel with these
    /// privileges (`slowpath_probe_expected`).
    pub fn expected(&self) -> bool {
        self.left_out.is_none()
    }

    /// Whether every program of the hook attached.
    pub fn attached(&self) -> bool {
        self.error.is_none()
    }
}
