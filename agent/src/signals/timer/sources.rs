//! What waits with a short timeout: the known sources of timer loops,
//! matched against the sampled call sites of a timer_loop finding.

use super::runtime;
use crate::sources::{KnownSource, Pattern};

/// The expected gain of removing a short ticker, as MOSN measured it.
pub(super) const MOSN_GAIN: &str =
    "MOSN: removing the 1 ms ticker saved 0.7 % to 1.2 % CPU on every idle pod of the fleet";

/// What waits with a short timeout, runtimes first, then the libc calls.
pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "jvm_timed_park",
        frames: &[
            Pattern::FunctionContains("JVM_Sleep"),
            Pattern::FunctionContains("Unsafe_Park"),
            Pattern::FunctionContains("Parker::park"),
            Pattern::FunctionContains("PlatformEvent::park"),
            Pattern::FunctionContains("ObjectMonitor::wait"),
            Pattern::FunctionContains("JVM_MonitorWait"),
            Pattern::Module("libjvm.so"),
        ],
        cause: "A JVM thread sleeps or parks with a short timeout in a loop (Thread.sleep, \
                LockSupport.parkNanos, Object.wait with a timeout, a scheduled executor's \
                tick): libjvm waits in futex with that timeout and wakes each time.",
        fix: runtime::JVM_FIX,
        expected_gain: None,
        example: (
            "JVM_Sleep",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        ),
    },
    KnownSource {
        id: "go_runtime_timers",
        frames: &[Pattern::FunctionPrefix("runtime.")],
        cause: "The Go runtime's scheduler sleeps until its next timer (futex or epoll_pwait \
                with the timer's deadline as timeout): a time.Ticker, time.Sleep, time.After \
                or context deadline with a short period in some goroutine, as \
                sentinel-golang's 1 ms ticker in MOSN.",
        fix: runtime::GO_FIX,
        expected_gain: Some(MOSN_GAIN),
        example: ("runtime.futexsleep", "/usr/local/bin/app"),
    },
    KnownSource {
        id: "node_libuv_timers",
        frames: &[
            Pattern::FunctionPrefix("uv_"),
            Pattern::FunctionPrefix("uv__"),
            Pattern::Module("libuv.so"),
            Pattern::Module("libnode.so"),
            Pattern::ModuleIs("node"),
            Pattern::ModuleIs("nodejs"),
        ],
        cause: "Node's libuv event loop (uv_run) waits in epoll_pwait with the nearest \
                timer's delay as timeout: a setInterval or setTimeout chain with a delay of a \
                few ms wakes it each time.",
        fix: runtime::NODE_FIX,
        expected_gain: None,
        example: ("uv__io_poll", "/usr/lib/x86_64-linux-gnu/libuv.so.1.0.0"),
    },
    KnownSource {
        id: "python_sleep",
        frames: &[
            Pattern::Function("pysleep"),
            Pattern::Function("time_sleep"),
            Pattern::Module("libpython"),
            Pattern::Module("python"),
        ],
        cause: "A Python thread sleeps or polls with a short timeout in a loop (time.sleep, \
                or a selector's timeout): the interpreter waits in clock_nanosleep (an \
                absolute deadline on 3.11+) or select/epoll each time.",
        fix: runtime::PYTHON_FIX,
        expected_gain: None,
        example: ("?", "/usr/bin/python3.11"),
    },
    KnownSource {
        id: "glibc_sleep_loop",
        frames: &[
            Pattern::Function("nanosleep"),
            Pattern::Function("clock_nanosleep"),
            Pattern::FunctionPrefix("clock_nanosleep_time64"),
            Pattern::Function("usleep"),
            Pattern::Function("sleep"),
            Pattern::Function("thrd_sleep"),
        ],
        cause: "{caller} sleeps for a short time in a loop (nanosleep, clock_nanosleep or \
                usleep through glibc), waking whether or not there is work.",
        fix: "Block on what ends the wait (a condition variable, an eventfd, a pipe, a \
              queue) instead of polling, or lengthen the period; a larger timer slack \
              (prctl PR_SET_TIMERSLACK) lets wakeups coalesce.",
        expected_gain: Some(MOSN_GAIN),
        example: (
            "__GI___clock_nanosleep",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ),
    },
    KnownSource {
        id: "timed_condvar",
        frames: &[
            Pattern::FunctionPrefix("pthread_cond_timedwait"),
            Pattern::FunctionPrefix("pthread_cond_clockwait"),
            Pattern::FunctionPrefix("sem_timedwait"),
            Pattern::FunctionPrefix("sem_clockwait"),
            Pattern::FunctionPrefix("pthread_mutex_timedlock"),
            Pattern::FunctionPrefix("futex_abstimed_wait"),
        ],
        cause: "{caller} waits on a condition variable, semaphore or lock with a short \
                timeout in a loop (a timed futex wait), waking on the timeout rather than \
                on a signal.",
        fix: "Wait without a timeout, or with one as long as the real deadline, and signal \
              the condition when there is work.",
        expected_gain: None,
        example: (
            "__pthread_cond_timedwait64",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ),
    },
    KnownSource {
        id: "event_loop_timeout",
        frames: &[
            Pattern::Function("epoll_wait"),
            Pattern::Function("epoll_pwait"),
            Pattern::Function("epoll_pwait2"),
            Pattern::Function("poll"),
            Pattern::Function("ppoll"),
            Pattern::Function("select"),
            Pattern::Function("pselect"),
            Pattern::Function("pselect64"),
        ],
        cause: "{caller} runs an event loop whose poll/epoll/select timeout is a few ms: \
                it wakes to check timers or flags even when no event arrives.",
        fix: "Compute the timeout from the next real deadline (or block without one) and \
              wake the loop with an eventfd or a pipe when work arrives.",
        expected_gain: None,
        example: ("epoll_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];
