//! Statistics the kernel keeps about the loaded programs.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use libbpf_rs::skel::Skel;

use super::load::Loaded;

/// Runs of each attached probe's programs that the kernel skipped because
/// the same program was already running on that CPU (an interrupt that
/// fired while it ran): the recursion guard of `__bpf_trace_run()`
/// (kernel/trace/bpf_trace.c), counted per program in `bpf_prog_info`'s
/// `recursion_misses` (kernel 5.12+; 0 before). Each is an event not counted.
/// Summed per probe, in hook-table order; probes not loaded are left out.
pub fn recursion_misses(loaded: &Loaded<'_>) -> Vec<(&'static str, u64)> {
    let table = &loaded.table;
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for prog in loaded.skel.object().progs() {
        let Ok((idx, _)) = table.classify(prog.name()) else {
            continue;
        };
        if !prog.autoload() {
            continue;
        }
        let probe = table.name(idx);
        let misses = prog_info(prog.as_fd().as_raw_fd()).map_or(0, |i| i.recursion_misses);
        match out.iter_mut().find(|(p, _)| *p == probe) {
            Some((_, n)) => *n += misses,
            None => out.push((probe, misses)),
        }
    }
    out.sort_by_key(|(p, _)| table.index(p));
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
