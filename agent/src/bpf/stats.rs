//! Statistics the kernel keeps about the loaded programs.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use libbpf_rs::skel::Skel;

use super::loaded::Loaded;

/// Runs of each attached probe's programs that the kernel skipped because
/// the same program was already running on that CPU (an interrupt that
/// fired while it ran): the recursion guard of `__bpf_trace_run()`
/// (kernel/trace/bpf_trace.c), counted per program in `bpf_prog_info`'s
/// `recursion_misses` (kernel 5.12+; 0 before). Each is an event not counted.
/// Summed per probe, in hook-table order; probes not loaded are left out.
pub fn recursion_misses(loaded: &Loaded<'_>) -> Vec<(&'static str, u64)> {
    per_hook(loaded, |i| i.recursion_misses)
        .into_iter()
        .enumerate()
        .filter_map(|(idx, misses)| Some((loaded.table.name(idx), misses?)))
        .collect()
}

/// `f` of the `bpf_prog_info` of every loaded program, summed per hook, in
/// hook-table order; `None` for a hook with no loaded program.
pub(super) fn per_hook<T: Default + std::ops::AddAssign>(
    loaded: &Loaded<'_>,
    f: impl Fn(&libbpf_sys::bpf_prog_info) -> T,
) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..loaded.table.len()).map(|_| None).collect();
    for prog in loaded.skel.object().progs() {
        let Ok((idx, _)) = loaded.table.classify(prog.name()) else {
            continue;
        };
        if !prog.autoload() {
            continue;
        }
        let sum = out[idx].get_or_insert_with(T::default);
        if let Some(info) = prog_info(prog.as_fd().as_raw_fd()) {
            *sum += f(&info);
        }
    }
    out
}

/// The kernel's `bpf_prog_info` of the loaded program `fd` (`None` when
/// the kernel does not give it): `recursion_misses` (5.12+), and
/// `run_time_ns`/`run_cnt`, which grow only while run-time statistics are on.
pub(super) fn prog_info(fd: RawFd) -> Option<libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: `info` is a zeroed bpf_prog_info and `len` its size, as the
    // call requires; the kernel writes at most `len` bytes into it. The
    // caller's fd is a loaded program's, valid while its object is borrowed.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    (rc == 0).then_some(info)
}
