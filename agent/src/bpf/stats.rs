//! Statistics of the loaded programs.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::skel::Skel;

use super::hooks::{classify_program, PROBES};
use super::skel::SlowpathSkel;

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
