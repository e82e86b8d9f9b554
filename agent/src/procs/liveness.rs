//! Whether a process image the kernel table holds is still alive, from
//! /proc (for entries whose exit the agent did not see).

use std::fs;

/// Whether `/proc/<tgid>` is still the process that started at
/// `start_boottime_ns` (field 22 of /proc/<tgid>/stat is the same time in
/// clock ticks: nsec_to_clock_t() in fs/proc/array.c).
pub(super) fn process_alive(tgid: u32, start_boottime_ns: u64, clk_tck: u64) -> bool {
    match fs::read_to_string(format!("/proc/{tgid}/stat")) {
        Ok(stat) => stat_start_ticks(&stat) == Some(start_boottime_ns / (1_000_000_000 / clk_tck)),
        Err(_) => false,
    }
}

/// Field 22 (starttime) of a /proc/<pid>/stat line; comm may hold spaces and
/// parentheses, so fields are counted after the last ')'.
pub fn stat_start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
