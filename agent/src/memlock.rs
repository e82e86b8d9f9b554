//! The locked-memory limit (`RLIMIT_MEMLOCK`) and the kernel's BPF memory.
//!
//! Linux before 5.11 charges every BPF map and program to the locked-memory
//! limit of the user that created it (kernel/bpf/syscall.c:
//! `bpf_map_charge_init()`, `bpf_prog_charge_memlock()`): one budget per
//! uid, shared by every process of that uid on the node (the old and the new
//! agent pod during a rollout). 5.11 and later charge the memory cgroup
//! instead and ignore the limit. A container inherits the runtime's limit:
//! neither containerd's nor CRI-O's unit sets `LimitMEMLOCK`, so it is
//! systemd's default (8 MiB since systemd 251, 64 KiB before), and
//! Kubernetes cannot set a pod's rlimits.
//!
//! So, at start and before any thread exists ([`settle`]): where the kernel
//! charges the limit and `CAP_SYS_RESOURCE` is permitted, the agent lifts the
//! limit; then, on every kernel, it gives `CAP_SYS_RESOURCE` up (permitted,
//! effective, inheritable and ambient sets; the bounding set needs
//! `CAP_SETPCAP`). Where the limit stays finite, the loader fits its tables
//! to it (`bpf::load`, `bpf::TableSizes`).

use caps::{CapSet, Capability};
use tracing::{info, warn};

/// The first kernel that charges BPF memory to the memory cgroup, not to
/// `RLIMIT_MEMLOCK` (5.11's memcg accounting series).
const MEMCG_BPF_ACCOUNTING: (u32, u32) = (5, 11);

/// Whether a kernel `release` charges BPF maps and programs to
/// `RLIMIT_MEMLOCK` (before 5.11); `false` for a release that cannot be read.
pub fn kernel_charges_memlock(release: &str) -> bool {
    crate::kernel::version(release).is_some_and(|v| v < MEMCG_BPF_ACCOUNTING)
}

/// The soft `RLIMIT_MEMLOCK` in bytes; `None` when unlimited or unreadable.
pub fn limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return None;
    }
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// What [`settle`] found and did, for the loader and the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memlock {
    /// The kernel charges the memory cgroup (5.11+): the limit does not matter.
    NotCharged,
    /// The kernel charges the limit, and it is unlimited (raised by the
    /// agent, or given so).
    Unlimited,
    /// The kernel charges the limit, this many bytes, and the agent may not
    /// raise it: the loader fits its tables.
    Finite(u64),
}

impl Memlock {
    /// Whether the loader should fit its tables to the limit, shrinking them
    /// when the kernel refuses `bpf()` with EPERM.
    pub fn fit_tables(self) -> bool {
        matches!(self, Memlock::Finite(_))
    }
}

/// Lift `RLIMIT_MEMLOCK` where the kernel charges it and the agent may
/// (`CAP_SYS_RESOURCE` permitted), then drop `CAP_SYS_RESOURCE` from this
/// thread's permitted, effective, inheritable and ambient sets, used or not.
/// Also tells libbpf not to raise the limit itself (it would try, and warn,
/// at the first load). Must run before any thread is started (capability
/// sets are per thread and inherited). One info line when it raised the
/// limit; the loader says what a finite one leaves.
pub fn settle(release: &str) -> Memlock {
    // SAFETY: a plain setter of libbpf's global; 0 turns its own raise off.
    // Called before any thread exists and before libbpf's first load.
    unsafe { libbpf_sys::libbpf_set_memlock_rlim(0) };
    let state = match (kernel_charges_memlock(release), limit()) {
        (false, _) => Memlock::NotCharged,
        (true, None) => Memlock::Unlimited,
        (true, Some(bytes)) => match raise_to_unlimited() {
            Ok(()) => {
                info!(
                    from_kib = bytes / 1024,
                    "Linux before 5.11 charges BPF maps to the locked-memory limit: \
                     raised it to unlimited with CAP_SYS_RESOURCE (then dropped)"
                );
                Memlock::Unlimited
            }
            Err(_) => Memlock::Finite(bytes),
        },
    };
    drop_sys_resource();
    state
}

/// `setrlimit(RLIMIT_MEMLOCK, unlimited)` with `CAP_SYS_RESOURCE` raised
/// into the effective set where it is permitted (the image's file
/// capabilities grant it permitted-only).
fn raise_to_unlimited() -> std::io::Result<()> {
    let permitted = caps::has_cap(None, CapSet::Permitted, Capability::CAP_SYS_RESOURCE);
    if permitted.unwrap_or(false) {
        let _ = caps::raise(None, CapSet::Effective, Capability::CAP_SYS_RESOURCE);
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we own.
    match unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Drop `CAP_SYS_RESOURCE` from every set this process may change: it lets a
/// process exceed every resource limit and quota, and the agent needs it
/// only for [`raise_to_unlimited`]. Ambient first (it must stay a subset of
/// permitted and inheritable), permitted last (effective must stay a subset
/// of it).
fn drop_sys_resource() {
    for set in [
        CapSet::Ambient,
        CapSet::Effective,
        CapSet::Inheritable,
        CapSet::Permitted,
    ] {
        if let Err(err) = caps::drop(None, set, Capability::CAP_SYS_RESOURCE) {
            warn!(set = ?set, error = %err, "could not drop CAP_SYS_RESOURCE");
        }
    }
}

/// Where each install path sets what the agent needs on a kernel that
/// charges BPF memory to the locked-memory limit.
pub const FIX_PER_INSTALL: &str = "let the agent lift the limit with CAP_SYS_RESOURCE \
     (Helm chart: on by default, the image's binary carries it; plain manifests: \
     securityContext.capabilities.add: [SYS_RESOURCE]; podman/docker: --cap-add SYS_RESOURCE \
     or --ulimit memlock=-1), or raise the limit for it (systemd: LimitMEMLOCK=infinity, as the \
     shipped unit has; a shell: `ulimit -l unlimited`; a container runtime: LimitMEMLOCK=infinity \
     in its systemd unit)";

/// The plain statement when a kernel `release` charges BPF memory to
/// `RLIMIT_MEMLOCK` and the soft limit `memlock` (bytes; `None`: unlimited
/// or unreadable) is finite: even the smallest tables did not fit, so
/// `bpf()` refused with EPERM. `None` otherwise.
pub fn too_low(release: &str, memlock: Option<u64>) -> Option<String> {
    let limit = memlock?;
    kernel_charges_memlock(release).then(|| {
        format!(
            "Linux before 5.11 (this is {release}) charges BPF maps and programs to the \
             locked-memory limit, shared by all processes of the agent's user: here {} KiB, too \
             little even for the smallest tables (about 2 MiB; 26 MiB in full): {FIX_PER_INSTALL}",
            limit / 1024
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_before_5_11_charge_the_limit() {
        assert!(kernel_charges_memlock("5.10.0-28-amd64"));
        assert!(kernel_charges_memlock("5.8.0"));
        assert!(!kernel_charges_memlock("5.11.0"));
        assert!(!kernel_charges_memlock("6.18.44"));
        assert!(!kernel_charges_memlock("unparsable"));
    }

    #[test]
    fn a_finite_limit_is_the_cause_before_5_11_only_and_the_fix_names_every_install_path() {
        let said = too_low("5.10.0-28-amd64", Some(64 * 1024)).unwrap();
        assert!(
            said.starts_with(
                "Linux before 5.11 (this is 5.10.0-28-amd64) charges BPF maps and programs to \
                 the locked-memory limit, shared by all processes of the agent's user: here \
                 64 KiB"
            ),
            "{said}"
        );
        for install in [
            "Helm chart",
            "plain manifests",
            "podman",
            "systemd",
            "ulimit -l",
        ] {
            assert!(said.contains(install), "{install}: {said}");
        }
        assert!(too_low("5.10.0-28-amd64", None).is_none());
        assert!(too_low("5.11.0", Some(64 * 1024)).is_none());
        assert!(too_low("6.18.0", Some(8 << 20)).is_none());
        assert!(too_low("unparsable", Some(64 * 1024)).is_none());
    }

    #[test]
    fn only_a_finite_charged_limit_fits_the_tables() {
        assert!(Memlock::Finite(8 << 20).fit_tables());
        assert!(!Memlock::Unlimited.fit_tables());
        assert!(!Memlock::NotCharged.fit_tables());
    }
}
