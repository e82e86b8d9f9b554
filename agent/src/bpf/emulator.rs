//! Whether the agent runs on QEMU's TCG, the CPU emulator (not KVM), where
//! live patching of kernel code that other vCPUs are running is unsafe.
//!
//! Attaching or detaching an fentry program rewrites the first instruction
//! of its kernel function (ftrace direct calls, `text_poke_bp()` in
//! arch/x86/kernel/alternative.c: an int3, the new bytes, then the first
//! byte, with an IPI to serialize every CPU in between). Multi-threaded TCG
//! (QEMU's default with more than one vCPU; seen with QEMU 7.2) can keep a
//! vCPU running its old translation of those bytes: while two vCPUs made
//! the hooked syscall flat out, attaching fentry programs on it left both
//! vCPUs spinning at `__x64_sys_clock_gettime+0x0` (soft lockups, 6.1) or
//! executing the transient int3 after the patch was done (`Oops: int3` at
//! `__x64_sys_rt_sigprocmask+0x5`, 6.12), with slowpath and with a bare
//! libbpf loader alike; not with one vCPU, not with `-accel
//! tcg,thread=single`, and never with tp_btf, whose tracepoint is only
//! patched while no task runs it. On hardware and KVM the same patching is
//! what ftrace does every day. So on TCG the agent leaves fentry out of its
//! automatic choice (`--bpf.attach-type=fentry` still forces it).

/// The hypervisor's CPUID vendor (leaf 0x40000000, when leaf 1 says a
/// hypervisor is present), e.g. "KVMKVMKVM\0\0\0" or "TCGTCGTCGTCG".
#[cfg(target_arch = "x86_64")]
fn hypervisor_vendor() -> Option<[u8; 12]> {
    use std::arch::x86_64::__cpuid;
    // leaf 1 ECX bit 31: a hypervisor is present; only then is leaf
    // 0x40000000 its own (CPUID itself is on every x86_64 CPU)
    if __cpuid(1).ecx & (1 << 31) == 0 {
        return None;
    }
    let leaf = __cpuid(0x4000_0000);
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&leaf.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&leaf.ecx.to_le_bytes());
    vendor[8..].copy_from_slice(&leaf.edx.to_le_bytes());
    Some(vendor)
}

/// Why live-patching hot kernel code is unsafe here (`None`: it is safe):
/// QEMU's TCG on x86_64. Not detected on arm64 (no CPUID; its guests here
/// attach before the workloads run).
pub fn unsafe_live_patching() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    if hypervisor_vendor().as_ref() == Some(b"TCGTCGTCGTCG") {
        return Some(
            "QEMU TCG (the CPU emulator) can miss a live patch of a syscall other vCPUs run",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendor_is_read_whole_or_not_at_all() {
        #[cfg(target_arch = "x86_64")]
        if let Some(vendor) = hypervisor_vendor() {
            // a hypervisor names itself in printable ASCII (NUL-padded)
            assert!(
                vendor.iter().all(|&b| b == 0 || b.is_ascii_graphic()),
                "{vendor:?}"
            );
        }
        let _ = unsafe_live_patching();
    }
}
