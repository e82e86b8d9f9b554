//! Which runtime runs a timer loop, told from the live process, and the fix
//! for that runtime. A timer loop's syscall says little (the Go runtime, the
//! JVM and libuv all wait in futex or epoll_pwait); the runtime says where to
//! look and what to change.
//!
//! How each is told: the JVM by `libjvm.so` in `/proc/<pid>/maps`; Node by
//! the executable's name or `libnode.so`; Python by `libpython3` or the
//! executable's name; Go by the `\xff Go buildinf:` magic of the executable's
//! `.go.buildinfo` section, and sentinel-golang by its package path among
//! the executable's symbol names. The executable is read through
//! `/proc/<pid>/exe`, so a process in a container is read from its own image.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use memchr::memmem;

use crate::finding::{Finding, RuntimeNote};
use crate::procs::stat_start_ticks;

/// The processes of a finding that are looked at (reading an executable
/// costs a few ms).
const MAX_PROCESSES: usize = 5;
/// Executables larger than this are not scanned for Go strings.
const MAX_EXE_BYTES: u64 = 512 << 20;
/// Process images whose runtime is remembered; past it the memory starts
/// over (a node rarely has this many timer loops at once).
const MAX_REMEMBERED: usize = 4096;

const GO_BUILDINFO: &[u8] = b"\xff Go buildinf:";
const SENTINEL_GOLANG: &[u8] = b"github.com/alibaba/sentinel-golang/";

/// Add a runtime note to the first processes of a timer-loop finding.
pub fn enrich(finding: &mut Finding) {
    for p in finding.processes.iter_mut().take(MAX_PROCESSES) {
        if p.pid != 0 {
            p.runtime = remembered(p.pid);
        }
    }
}

/// A process image: its pid, start time (clock ticks after boot, field 22
/// of /proc/<pid>/stat) and executable (device, inode); an exec changes
/// the executable, a pid reused changes the start time.
type Image = (u32, u64, u64, u64);

/// Each image's runtime, told once: the findings engine asks again every
/// hop for the same processes, and telling reads /proc/<pid>/maps and, for
/// Go, the whole executable (it was most of a standalone `slowpath top`'s
/// CPU at 1,000 processes).
fn remembered(pid: u32) -> Option<RuntimeNote> {
    static KNOWN: OnceLock<Mutex<HashMap<Image, Option<RuntimeNote>>>> = OnceLock::new();
    let Some(image) = image_of(pid) else {
        return recognise(pid);
    };
    let known = KNOWN.get_or_init(Default::default);
    if let Some(note) = known.lock().unwrap_or_else(|e| e.into_inner()).get(&image) {
        return note.clone();
    }
    let note = recognise(pid);
    let mut known = known.lock().unwrap_or_else(|e| e.into_inner());
    if known.len() >= MAX_REMEMBERED {
        known.clear();
    }
    known.insert(image, note.clone());
    note
}

fn image_of(pid: u32) -> Option<Image> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let exe = fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((pid, stat_start_ticks(&stat)?, exe.dev(), exe.ino()))
}

fn recognise(pid: u32) -> Option<RuntimeNote> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let maps = fs::read_to_string(proc_dir.join("maps")).unwrap_or_default();
    let exe_name = fs::read_link(proc_dir.join("exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    if maps.contains("/libjvm.so") {
        return Some(note("jvm", "libjvm.so is mapped", JVM_FIX));
    }
    if exe_name == "node" || exe_name.starts_with("nodejs") || maps.contains("/libnode.so") {
        return Some(note("node", &format!("executable {exe_name}"), NODE_FIX));
    }
    if maps.contains("/libpython3") || exe_name.starts_with("python") {
        return Some(note(
            "python",
            &format!("executable {exe_name}"),
            PYTHON_FIX,
        ));
    }
    go_note(pid)
}

fn note(name: &'static str, evidence: &str, fix: &'static str) -> RuntimeNote {
    RuntimeNote {
        name,
        evidence: evidence.to_string(),
        fix,
    }
}

/// A Go executable, and whether it links sentinel-golang.
fn go_note(pid: u32) -> Option<RuntimeNote> {
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    if fs::metadata(&exe).ok()?.len() > MAX_EXE_BYTES {
        return None;
    }
    let bytes = fs::read(&exe).ok()?;
    if !contains(&bytes, GO_BUILDINFO) {
        return None;
    }
    if contains(&bytes, SENTINEL_GOLANG) {
        return Some(note(
            "sentinel-golang",
            "Go executable (.go.buildinfo) linking github.com/alibaba/sentinel-golang",
            SENTINEL_FIX,
        ));
    }
    Some(note("go", "Go executable (.go.buildinfo)", GO_FIX))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memmem::find(haystack, needle).is_some()
}

pub(super) const SENTINEL_FIX: &str =
    "sentinel-golang's cached-time ticker (UseCacheTime: true) sleeps \
    1 ms in a loop to refresh its clock: set UseCacheTime: false (its default in v1.0.4; \
    time.Now() through the vDSO costs tens of ns), or refresh the cached time from a coarser \
    ticker.";
pub(super) const GO_FIX: &str =
    "A time.Ticker, time.Sleep or context deadline loop with a short period \
    (the Go runtime waits in futex and epoll_pwait timeouts, rarely nanosleep): lengthen the \
    period, stop tickers while idle (ticker.Stop, or reset only when there is work), or block \
    on a channel instead of polling.";
pub(super) const JVM_FIX: &str =
    "A thread in Thread.sleep, Object.wait, LockSupport.parkNanos or a \
    ScheduledExecutorService with a millisecond period (the JVM waits in futex with a \
    timeout): find it with jstack or the call site, lengthen the period, or block on a queue \
    or CompletableFuture instead of polling.";
pub(super) const NODE_FIX: &str =
    "A setInterval or setTimeout chain with a delay of a few ms (libuv \
    waits in epoll_pwait with that timeout): raise the delay, clear the interval while idle, \
    or drive the work from events.";
pub(super) const PYTHON_FIX: &str =
    "time.sleep in a loop or an event loop polling with a short timeout \
    (Python 3.11+ sleeps with an absolute clock_nanosleep): sleep longer, or wait on a \
    threading.Event, a queue or an asyncio future instead.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_byte_strings() {
        assert!(contains(b"..\xff Go buildinf:..", GO_BUILDINFO));
        assert!(!contains(b"Go buildinf", GO_BUILDINFO));
    }

    /// `f(pid)` of a live `sleep 5` child, which is killed and reaped after.
    fn with_sleeping_child<T>(f: impl FnOnce(u32) -> T) -> T {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let out = f(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        out
    }

    #[test]
    fn a_c_program_is_no_known_runtime() {
        let (note, again) = with_sleeping_child(|pid| (recognise(pid), remembered(pid)));
        assert!(note.is_none(), "{note:?}");
        assert!(again.is_none(), "{again:?}");
    }

    #[test]
    fn an_image_is_its_pid_start_time_and_executable() {
        let (child, image) = with_sleeping_child(|pid| (pid, image_of(pid)));
        let mine = image_of(std::process::id());
        let (pid, _, dev, ino) = image.expect("a live child has an image");
        assert_eq!(pid, child);
        let this_test = fs::metadata("/proc/self/exe").unwrap();
        assert_ne!(
            (dev, ino),
            (this_test.dev(), this_test.ino()),
            "sleep is not this test"
        );
        assert_eq!(
            mine.map(|m| (m.2, m.3)),
            Some((this_test.dev(), this_test.ino()))
        );
    }
}
