//! What the timer signal asks of the kernel side: its hooks, and the
//! settings of its BPF code (`bpf/signals/timer_wakeups.bpf.h`) in the
//! object's read-only data: the switches of the timed waits in the syscall
//! hook, the timer-loop threshold per kernel window, and on kernels without
//! `bpf_snprintf()` the addresses of the hrtimer callbacks it names.

use tracing::{info, warn};

use crate::bpf::types::sp_timer_fn;
use crate::bpf::{Hook, KernelBtf, LeftOutCause, LeftOutHook, RodataPatch};
use crate::signals::SignalArgs;

/// The hook that records which timer is expiring; the others need it.
const EXPIRE_ENTRY: &str = "hrtimer_expire_entry";

/// The timer signal's hooks, in report order: `hrtimer_expire_entry`
/// records the expiring timer's callback per CPU; `hrtimer_expire_exit` and
/// `sched_waking` count nothing without that frame, so they are left out
/// with it rather than run for nothing on every wakeup.
pub const HOOKS: [Hook; 3] = [
    Hook::new(EXPIRE_ENTRY),
    Hook {
        name: "hrtimer_expire_exit",
        needs: Some(EXPIRE_ENTRY),
    },
    Hook {
        name: "sched_waking",
        needs: Some(EXPIRE_ENTRY),
    },
];

/// The settings of the timer hooks: the timed waits (sleeps included)
/// switched on in the syscall hook, `timer_hot_wakeups` from
/// `loop_per_sec` (`--timer.loop-threshold`, wakeups per second of one
/// process), and on a kernel whose BTF (`btf`) has no `bpf_snprintf()` the
/// callbacks' kallsyms addresses (`timer_fn_addrs`, read from
/// /proc/kallsyms once, now, with a log line saying how it went).
pub fn rodata(args: &SignalArgs, btf: &KernelBtf) -> RodataPatch {
    let hz = jiffies_per_second();
    let hot_wakeups = hot_window_wakeups(args.timer.loop_threshold, hz);
    let addrs = logged_timer_fn_addresses(btf);
    Box::new(move |rodata| {
        if let Some(addrs) = addrs {
            rodata.timer_fns_by_address = true;
            rodata.timer_fn_addrs = addrs;
        }
        rodata.timer_hot_wakeups = hot_wakeups;
        rodata.timer_window_jiffies = hz.unwrap_or(0);
    })
}

/// The hrtimer callbacks the timer hooks name by address, in the order of
/// `timer_fn_addrs` in the object, with the `enum sp_timer_fn` kind
/// `timer_fn_kind()` gives each (checked against the C source in a test;
/// the compiler checks the length against the generated `rodata`).
const TIMER_FNS: [(&str, sp_timer_fn); 4] = [
    ("hrtimer_wakeup", sp_timer_fn::SP_TIMER_FN_SLEEPER),
    ("timerfd_tmrproc", sp_timer_fn::SP_TIMER_FN_TIMERFD),
    ("it_real_fn", sp_timer_fn::SP_TIMER_FN_POSIX),
    ("posix_timer_fn", sp_timer_fn::SP_TIMER_FN_POSIX),
];

/// Why `hrtimer_expire_entry` cannot name timer callbacks on this kernel
/// with these privileges: no `bpf_snprintf()` and no kallsyms addresses.
const UNNAMED: &str = "kernel without bpf_snprintf() (before 5.13) and /proc/kallsyms shows no \
     addresses (needs CAP_SYSLOG): the timer callbacks cannot be named";

/// The timer hooks left out by design here: `hrtimer_expire_entry` (and
/// the two hooks that only serve it) on a kernel without `bpf_snprintf()`
/// whose kallsyms shows this agent no addresses; the kernel refuses it.
pub fn left_out(btf: &KernelBtf) -> Vec<LeftOutHook> {
    match timer_fn_addresses(btf) {
        Naming::Unnamed => vec![LeftOutHook {
            hook: EXPIRE_ENTRY,
            cause: LeftOutCause::MissingCapability,
            why: UNNAMED.to_string(),
        }],
        Naming::Helper | Naming::Addresses(_) => Vec::new(),
    }
}

/// How `hrtimer_expire_entry` names the expiring timer's callback.
enum Naming {
    /// With `bpf_snprintf()` (5.13+).
    Helper,
    /// By the callbacks' kallsyms addresses.
    Addresses([u64; 4]),
    /// It cannot: the kernel refuses the hook.
    Unnamed,
}

/// On a kernel without `bpf_snprintf()` (before 5.13: no `BPF_FUNC_snprintf`
/// in its BTF's `enum bpf_func_id`), the timer callbacks' addresses from
/// `/proc/kallsyms`, so that `hrtimer_expire_entry` can name them without
/// it; unnamed when kallsyms shows no addresses (without CAP_SYSLOG it
/// shows zeros): the hook is then refused on such a kernel.
fn timer_fn_addresses(btf: &KernelBtf) -> Naming {
    if btf.has_helper("snprintf") {
        return Naming::Helper;
    }
    match kallsyms_timer_fns() {
        Some(addrs) => Naming::Addresses(addrs),
        None => Naming::Unnamed,
    }
}

/// The timer callbacks' addresses from `/proc/kallsyms`, read once per
/// process: both the expected hooks ([`left_out`]) and the object's rodata
/// ask, and the file is megabytes. `None` when it cannot be read or shows
/// no addresses.
fn kallsyms_timer_fns() -> Option<[u64; 4]> {
    static ADDRS: std::sync::OnceLock<Option<[u64; 4]>> = std::sync::OnceLock::new();
    *ADDRS.get_or_init(|| {
        let kallsyms = std::fs::read_to_string("/proc/kallsyms").ok()?;
        let addrs = kallsyms_addresses(&kallsyms, &TIMER_FNS.map(|(name, _)| name));
        (addrs[0] != 0 && addrs[1] != 0).then_some(addrs)
    })
}

/// The addresses for the object, with a log line saying how it went.
fn logged_timer_fn_addresses(btf: &KernelBtf) -> Option<[u64; 4]> {
    match timer_fn_addresses(btf) {
        Naming::Helper => None,
        Naming::Addresses(addrs) => {
            info!("kernel without bpf_snprintf: timer callbacks named by their kallsyms addresses");
            Some(addrs)
        }
        Naming::Unnamed => {
            warn!("{UNNAMED}: the timer-wakeup hooks will be left out");
            None
        }
    }
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

/// Length of the kernel's timer-loop window without HZ: `bpf_ktime_get_ns() >> 30`.
const CLOCK_WINDOW_SECONDS: f64 = (1u64 << 30) as f64 / 1e9;

/// Wakeups per kernel window for a rate of `per_second` (at least 1): the
/// window is one second with `hz` known (`jiffies / HZ`), else 2^30 ns.
fn hot_window_wakeups(per_second: f64, hz: Option<u32>) -> u32 {
    let window = if hz.is_some() {
        1.0
    } else {
        CLOCK_WINDOW_SECONDS
    };
    (per_second * window).ceil().clamp(1.0, u32::MAX as f64) as u32
}

/// The kernel's HZ: one jiffy is the resolution of `CLOCK_MONOTONIC_COARSE`
/// (`LOW_RES_NSEC`, kernel/time/posix-timers.c). `None` when the clock has
/// no resolution or it is no tick length of a kernel (HZ 24 to 10,000).
fn jiffies_per_second() -> Option<u32> {
    let mut res = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `res` is a valid, writable timespec; clock_getres only writes it.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut res) };
    if rc != 0 {
        return None;
    }
    hz_of_tick(res.tv_sec as u64 * 1_000_000_000 + res.tv_nsec as u64)
}

/// HZ from one jiffy in ns (TICK_NSEC, rounded: 4,000,000 -> 250; 3,333,333 -> 300).
fn hz_of_tick(tick_ns: u64) -> Option<u32> {
    if tick_ns == 0 {
        return None;
    }
    let hz = (1_000_000_000 + tick_ns / 2) / tick_ns;
    (24..=10_000).contains(&hz).then_some(hz as u32)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn timer_callbacks_are_found_in_kallsyms_with_or_without_an_lto_suffix() {
        let text = "ffffffff81100000 t hrtimer_wakeup\n\
                    ffffffff81200000 t timerfd_tmrproc.llvm.42\n\
                    ffffffff81300000 T it_real_fn\n\
                    ffffffff81400000 t posix_timer_fn\t[kernel]\n\
                    ffffffff81500000 t hrtimer_wakeup_other\n";
        let names = TIMER_FNS.map(|(name, _)| name);
        assert_eq!(
            kallsyms_addresses(text, &names),
            [
                0xffffffff81100000,
                0xffffffff81200000,
                0xffffffff81300000,
                0xffffffff81400000
            ]
        );
        let hidden = "0000000000000000 t hrtimer_wakeup\n";
        assert_eq!(kallsyms_addresses(hidden, &names), [0; 4]);
    }

    #[test]
    fn hot_window_is_the_threshold_over_one_second_or_2_to_the_30_ns() {
        assert_eq!(hot_window_wakeups(200.0, None), 215);
        assert_eq!(hot_window_wakeups(200.0, Some(250)), 200);
        assert_eq!(hot_window_wakeups(1e-9, None), 1);
    }

    #[test]
    fn hz_is_one_second_over_a_jiffy() {
        assert_eq!(hz_of_tick(4_000_000), Some(250));
        assert_eq!(hz_of_tick(1_000_000), Some(1000));
        assert_eq!(hz_of_tick(3_333_333), Some(300));
        assert_eq!(hz_of_tick(10_000_000), Some(100));
        assert_eq!(hz_of_tick(0), None);
        assert_eq!(hz_of_tick(1), None); // a high-resolution clock, no tick

        // this machine's coarse clock ticks at its HZ
        assert!(jiffies_per_second().is_some());
    }

    /// `enum sp_timer_fn` of `bpf/slowpath.h`: constant name -> value.
    fn c_timer_fn_values() -> HashMap<String, u32> {
        let header = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../bpf/slowpath.h"));
        let body = header.split("enum sp_timer_fn {").nth(1).unwrap();
        let body = body.split("};").next().unwrap();
        let mut values = HashMap::new();
        for line in body.lines() {
            let Some((name, rest)) = line.split_once('=') else {
                continue;
            };
            let value = rest.trim().split(',').next().unwrap().trim();
            values.insert(name.trim().to_string(), value.parse().unwrap());
        }
        values
    }

    /// Each line of `timer_fn_kind()` in `bpf/signals/timer_wakeups.bpf.h` that tests
    /// `fn == timer_fn_addrs[i]` or `SP_FN_IS(name, "...")`, with the
    /// `SP_TIMER_FN_*` constant of the line after it.
    fn c_classification() -> Vec<(String, String)> {
        let source = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../bpf/signals/timer_wakeups.bpf.h"
        ));
        let body = source.split("timer_fn_kind(__u64 fn)").nth(1).unwrap();
        let body = body.split("\n}\n").next().unwrap();
        let lines: Vec<&str> = body.lines().collect();
        let mut out = Vec::new();
        for pair in lines.windows(2) {
            let Some(at) = pair[1].find("SP_TIMER_FN_") else {
                continue;
            };
            let kind: String = pair[1][at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((pair[0].to_string(), kind));
        }
        out
    }

    #[test]
    fn the_callback_table_agrees_with_the_bpf_code() {
        let values = c_timer_fn_values();
        let classified = c_classification();
        let kind_of = |needle: &str| -> Option<u32> {
            let (_, kind) = classified.iter().find(|(test, _)| test.contains(needle))?;
            Some(values[kind])
        };
        for (slot, (name, kind)) in TIMER_FNS.iter().enumerate() {
            let by_address = kind_of(&format!("fn == timer_fn_addrs[{slot}]"));
            assert_eq!(by_address, Some(kind.0), "timer_fn_addrs[{slot}] ({name})");
            let by_name = kind_of(&format!("SP_FN_IS(name, \"{name}\")"));
            assert_eq!(by_name, Some(kind.0), "{name} by its kallsyms name");
        }
    }
}
