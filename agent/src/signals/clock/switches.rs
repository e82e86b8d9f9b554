//! Clocksource switches: when the node's clocksource changed, from what to
//! what, and why. On bare metal and KVM a clocksource the vDSO can read
//! (tsc) is usually lost at run time: the kernel's clocksource watchdog
//! (kernel/time/clocksource.c) finds it skewed, logs
//! `clocksource: timekeeping watchdog on CPU1: Marking clocksource 'tsc' as
//! unstable because the skew is too large:` and then `clocksource: Switched
//! to clocksource hpet`, and every clock read of every process is a system
//! call from that second on.
//!
//! The source is the kernel log, read from `/dev/kmsg` by a thread that
//! blocks on it (no polling): the "Switched to clocksource" lines
//! (`__clocksource_select()`), with the "Marking clocksource '...' as
//! unstable" line of the watchdog and the "Marking TSC unstable due to ..."
//! line of arch/x86/kernel/tsc.c before them as the reason. Reading it needs
//! CAP_SYSLOG when `kernel.dmesg_restrict` is 1 (root has it) and the host's
//! `/dev/kmsg` (a privileged container has it). Without it the agent sees
//! a change in sysfs `current_clocksource` at the next scrape, with the
//! scrape's time and reason `unknown`, and says so once in its log.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tracing::{info, warn};

/// The kernel log device (Documentation/ABI/testing/dev-kmsg).
pub const KMSG: &str = "/dev/kmsg";

/// Why the clocksource changed (the `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The clocksource watchdog marked the old clocksource unstable (its
    /// skew against the watchdog clocksource was too large).
    Watchdog,
    /// Its driver marked the old clocksource unstable (x86: "Marking TSC
    /// unstable due to ...", e.g. a TSC that stops in deep C-states or
    /// differs between CPUs).
    Unstable,
    /// No unstable mark before it: a write to sysfs `current_clocksource`,
    /// a `clocksource=` boot parameter, or a better clocksource registered
    /// (at boot, jiffies to tsc-early to tsc).
    Selected,
    /// The kernel log could not be read: seen in sysfs only.
    Unknown,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Watchdog => "watchdog",
            Reason::Unstable => "unstable",
            Reason::Selected => "selected",
            Reason::Unknown => "unknown",
        }
    }
}

/// One clocksource switch.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Switch {
    /// Unix time of the switch in seconds (the kernel log record's
    /// timestamp, since boot on the kernel's local clock, turned into wall
    /// time with the current offset: exact to a few ms unless the node
    /// suspended since; the scrape's time when seen in sysfs).
    pub at: f64,
    /// The clocksource before (empty when the kernel log no longer holds
    /// the switch to it and sysfs was not read before).
    pub from: String,
    /// The clocksource after.
    pub to: String,
    pub reason: Reason,
    /// The kernel's own words for the reason (the unstable line), if any.
    pub detail: String,
}

/// What the agent knows of the node's clocksource switches.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Switches {
    /// Switches since the agent started (those the kernel log held before
    /// are not counted: a restarted agent must not count the boot's again).
    pub changes: u64,
    /// The last switch the kernel log holds (since boot, the boot's own
    /// included) or that the agent saw.
    pub last: Option<Switch>,
    /// Whether the kernel log is read (else sysfs at scrapes only).
    pub from_kernel_log: bool,
}

/// The state behind [`Switches`]: the kernel log's lines as they come.
#[derive(Debug, Default)]
struct Tracker {
    seen: Switches,
    /// The clocksource the last switch went to (or sysfs last showed).
    current: Option<String>,
    /// The last unstable mark not yet followed by a switch.
    unstable: Option<(Reason, String)>,
    /// Whether the reader has read the records the log held at start.
    backlog_read: bool,
}

impl Tracker {
    /// One kernel log message logged `at` (unix seconds); `count` is false
    /// for the lines the log held when the agent started.
    fn message(&mut self, at: f64, msg: &str, count: bool) {
        if let Some(to) = msg.strip_prefix("clocksource: Switched to clocksource ") {
            let to = to.trim().to_string();
            let (reason, detail) = self
                .unstable
                .take()
                .unwrap_or((Reason::Selected, String::new()));
            let from = self.current.replace(to.clone()).unwrap_or_default();
            self.seen.last = Some(Switch {
                at,
                from,
                to,
                reason,
                detail,
            });
            self.seen.changes += u64::from(count);
        } else if let Some(rest) = msg.strip_prefix("clocksource: ") {
            // "timekeeping watchdog on CPU1: Marking clocksource 'tsc' as
            // unstable because the skew is too large:"
            if let Some(at_mark) = rest.find("Marking clocksource '") {
                let why = rest[at_mark..]
                    .split_once(" because ")
                    .map_or("", |(_, why)| why);
                let detail = why.trim_end_matches(':').trim().to_string();
                self.unstable = Some((Reason::Watchdog, detail));
            }
        } else if let Some(why) = msg.strip_prefix("tsc: Marking TSC unstable due to ") {
            // a watchdog mark is the more precise one: keep it
            if self.unstable.is_none() {
                self.unstable = Some((Reason::Unstable, why.trim().to_string()));
            }
        }
    }

    /// Sysfs showed `current` at a scrape (unix time `at`): without the
    /// kernel log, a change since the last scrape is a switch.
    fn sysfs(&mut self, at: f64, current: &str) {
        if self.seen.from_kernel_log {
            // the log no longer holds the switch to it: the next one's `from`
            self.current.get_or_insert_with(|| current.to_string());
            return;
        }
        match &self.current {
            Some(before) if before != current => {
                self.seen.last = Some(Switch {
                    at,
                    from: before.clone(),
                    to: current.to_string(),
                    reason: Reason::Unknown,
                    detail: String::new(),
                });
                self.seen.changes += 1;
            }
            Some(_) => return,
            None => {}
        }
        self.current = Some(current.to_string());
    }
}

/// The message and timestamp (microseconds since boot) of one `/dev/kmsg`
/// record: `"<prio>,<seq>,<usec>,<flags>[,...];<message>\n"` then
/// continuation lines starting with a space (Documentation/ABI/testing/
/// dev-kmsg); `None` for anything else. Non-printable bytes arrive as
/// `\xNN`, which no line read here has.
fn parse_record(record: &str) -> Option<(u64, &str)> {
    let (head, rest) = record.split_once(';')?;
    let usec = head.split(',').nth(2)?.parse().ok()?;
    Some((usec, rest.lines().next().unwrap_or_default()))
}

/// Unix seconds of a kernel timestamp in microseconds since boot: the
/// kernel's log clock (local_clock()) runs with CLOCK_MONOTONIC.
fn wall_of(usec: u64) -> f64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let monotonic = ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
    now - (monotonic - usec as f64 * 1e-6)
}

type Shared = Arc<Mutex<Tracker>>;

/// The tracker of the node under sysfs root `sysfs`, started with the first
/// read of its settings (by the agent, or by `slowpath doctor`) and kept
/// for the process's lifetime. Only the live node's (`/sys`) reads the
/// kernel log; any other root (a test's tree) is seen through sysfs alone.
fn tracker_of(sysfs: &Path) -> Shared {
    static TRACKERS: OnceLock<Mutex<HashMap<PathBuf, Shared>>> = OnceLock::new();
    let mut trackers = TRACKERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    trackers
        .entry(sysfs.to_path_buf())
        .or_insert_with(|| {
            let tracker = Arc::new(Mutex::new(Tracker::default()));
            if sysfs == Path::new(LIVE_SYSFS) {
                start_reader(tracker.clone());
            }
            tracker
        })
        .clone()
}

/// The sysfs root whose clocksource the kernel log speaks of.
const LIVE_SYSFS: &str = "/sys";

/// Read the kernel log on a thread of its own: first the records it holds
/// (not counted), then each new one as it comes.
fn start_reader(tracker: Shared) {
    let file = match File::open(KMSG) {
        Ok(f) => f,
        Err(err) => {
            // info, not a warning: the shipped least-privilege deployments
            // (systemd's ProtectKernelLogs, a container without the host's
            // devices) are in this state by design
            info!(
                path = KMSG,
                error = %err,
                "kernel log unreadable: clocksource changes are seen in sysfs at scrapes, without \
                 their time or reason (to have them: CAP_SYSLOG, and the host's /dev/kmsg, e.g. \
                 the chart's privileged: true; systemd: ProtectKernelLogs=no)"
            );
            return;
        }
    };
    let mut backlog = true;
    set_nonblocking(&file, true);
    lock(&tracker).seen.from_kernel_log = true;
    let reader = tracker.clone();
    let spawned = std::thread::Builder::new()
        .name("clocksource-log".into())
        .spawn(move || {
            let tracker = reader;
            let mut file = file;
            // a record is at most 8 KiB (CONSOLE_EXT_LOG_MAX)
            let mut buf = vec![0u8; 8192];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        let record = String::from_utf8_lossy(&buf[..n]);
                        if let Some((usec, msg)) = parse_record(&record) {
                            if msg.starts_with("clocksource: ") || msg.starts_with("tsc: ") {
                                lock(&tracker).message(wall_of(usec), msg, !backlog);
                            }
                        }
                    }
                    // records overwritten before they were read: go on
                    Err(err) if err.raw_os_error() == Some(libc::EPIPE) => {}
                    Err(err) if err.kind() == ErrorKind::WouldBlock && backlog => {
                        backlog = false;
                        set_nonblocking(&file, false);
                        let mut t = lock(&tracker);
                        t.backlog_read = true;
                        if let Some(s) = &t.seen.last {
                            info!(
                                to = %s.to,
                                from = %s.from,
                                reason = s.reason.label(),
                                "clocksource: the last switch the kernel log holds"
                            );
                        }
                    }
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(err) => {
                        warn!(error = %err, "reading the kernel log stopped: clocksource changes are seen in sysfs from now on");
                        lock(&tracker).seen.from_kernel_log = false;
                        return;
                    }
                }
            }
        });
    if let Err(err) = spawned {
        warn!(error = %err, "no thread for the kernel log: clocksource changes are seen in sysfs");
        lock(&tracker).seen.from_kernel_log = false;
    }
}

fn set_nonblocking(file: &File, on: bool) {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns; F_GETFL/F_SETFL take and
    // return plain flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        libc::fcntl(fd, libc::F_SETFL, flags);
    }
}

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Tracker> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// The switches so far of the node under sysfs root `sysfs`, given the
/// clocksource it shows now (read at every scrape and report). The first
/// call starts the kernel log reader and waits up to 100 ms for it to read
/// the log's backlog, so that the first scrape already shows the last
/// switch.
pub fn observe(sysfs: &Path, current: Option<&str>) -> Switches {
    let tracker = tracker_of(sysfs);
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    for _ in 0..10 {
        let t = lock(&tracker);
        if !t.seen.from_kernel_log || t.backlog_read {
            break;
        }
        drop(t);
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut t = lock(&tracker);
    if let Some(current) = current {
        t.sysfs(at, current);
    }
    t.seen.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watchdog switch as the kernel logs it (6.x, lines from a real log).
    const WATCHDOG: [&str; 6] = [
        "clocksource: timekeeping watchdog on CPU1: Marking clocksource 'tsc' as unstable because the skew is too large:",
        "clocksource:                       'hpet' wd_nsec: 505942541 wd_now: 1b3c5a2 wd_last: 1426b0b mask: ffffffff",
        "clocksource:                       'tsc' cs_nsec: 499850183 cs_now: 2a5d1e7d95e cs_last: 2a5b5b1a6a6 mask: ffffffffffffffff",
        "tsc: Marking TSC unstable due to clocksource watchdog",
        "clocksource: Checking clocksource tsc synchronization from CPU 0 to CPUs 1.",
        "clocksource: Switched to clocksource hpet",
    ];

    fn boot(t: &mut Tracker) {
        t.message(1.0, "clocksource: Switched to clocksource kvm-clock", false);
        t.message(2.0, "clocksource: Switched to clocksource tsc", false);
    }

    #[test]
    fn the_boot_switches_are_the_last_but_not_counted() {
        let mut t = Tracker::default();
        boot(&mut t);
        assert_eq!(t.seen.changes, 0);
        let last = t.seen.last.unwrap();
        assert_eq!((last.from.as_str(), last.to.as_str()), ("kvm-clock", "tsc"));
        assert_eq!(last.reason, Reason::Selected);
    }

    #[test]
    fn a_watchdog_switch_carries_its_reason() {
        let mut t = Tracker::default();
        boot(&mut t);
        for line in WATCHDOG {
            t.message(10.0, line, true);
        }
        assert_eq!(t.seen.changes, 1);
        let last = t.seen.last.clone().unwrap();
        assert_eq!((last.from.as_str(), last.to.as_str()), ("tsc", "hpet"));
        assert_eq!(last.reason, Reason::Watchdog);
        assert_eq!(last.detail, "the skew is too large");
        // a write to sysfs later: no unstable mark before it
        t.message(20.0, "clocksource: Switched to clocksource tsc", true);
        let last = t.seen.last.unwrap();
        assert_eq!(
            (last.from.as_str(), last.reason),
            ("hpet", Reason::Selected)
        );
        assert_eq!(t.seen.changes, 2);
    }

    #[test]
    fn a_driver_mark_alone_is_unstable() {
        let mut t = Tracker::default();
        boot(&mut t);
        t.message(
            5.0,
            "tsc: Marking TSC unstable due to check_tsc_sync_source failed",
            true,
        );
        t.message(5.0, "clocksource: Switched to clocksource hpet", true);
        let last = t.seen.last.unwrap();
        assert_eq!(last.reason, Reason::Unstable);
        assert_eq!(last.detail, "check_tsc_sync_source failed");
    }

    #[test]
    fn without_the_kernel_log_sysfs_changes_count() {
        let mut t = Tracker::default();
        t.sysfs(1.0, "tsc");
        assert_eq!((t.seen.changes, t.seen.last.is_none()), (0, true));
        t.sysfs(2.0, "tsc");
        t.sysfs(3.0, "acpi_pm");
        let last = t.seen.last.clone().unwrap();
        assert_eq!(
            (last.from.as_str(), last.to.as_str(), last.reason),
            ("tsc", "acpi_pm", Reason::Unknown)
        );
        assert_eq!((t.seen.changes, last.at), (1, 3.0));
        // with the kernel log read, sysfs adds nothing
        t.seen.from_kernel_log = true;
        t.sysfs(4.0, "tsc");
        assert_eq!(t.seen.changes, 1);
    }

    #[test]
    fn records_parse_as_the_kernel_writes_them() {
        let rec = "6,1234,379386,-;clocksource: Switched to clocksource tsc\n SUBSYSTEM=x\n";
        assert_eq!(
            parse_record(rec),
            Some((379_386, "clocksource: Switched to clocksource tsc"))
        );
        assert_eq!(parse_record("garbage"), None);
        assert_eq!(parse_record("6,1,x,-;m"), None);
    }
}
