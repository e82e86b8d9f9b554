//! Who reads the clock: the known sources of clock reads that enter the
//! kernel, matched against the sampled call sites of a clock finding.

use crate::sources::{KnownSource, Pattern};

/// Who reads the clock, most specific first.
pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "jvm_clock",
        frames: &[
            Pattern::FunctionContains("os::javaTimeMillis"),
            Pattern::FunctionContains("os::javaTimeNanos"),
            Pattern::FunctionContains("os::javaTimeSystemUTC"),
            Pattern::Function("JVM_CurrentTimeMillis"),
            Pattern::Function("JVM_NanoTime"),
            Pattern::Module("libjvm.so"),
        ],
        cause: "The JVM reads the clock for System.currentTimeMillis(), System.nanoTime() and \
                Instant.now() in os::javaTimeMillis/javaTimeNanos (libjvm), through glibc's \
                clock_gettime and the vDSO: every read the application makes is a clock read \
                here.",
        fix: "Read the time once per request or batch instead of per event (loggers, metrics \
              and caches that timestamp every call are the usual readers), or keep a cached \
              clock refreshed by one thread.",
        expected_gain: Some(
            "Netflix: a Java loop of 100M currentTimeMillis() took 68 s on the xen clocksource \
             and 3.3 s on tsc; Cassandra used 30 % less CPU after the switch",
        ),
        example: (
            "os::javaTimeMillis()",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        ),
    },
    KnownSource {
        id: "go_runtime_clock",
        frames: &[
            Pattern::FunctionPrefix("runtime.walltime"),
            Pattern::FunctionPrefix("runtime.nanotime"),
            Pattern::FunctionPrefix("runtime.vdsoCall"),
            Pattern::Function("time.now"),
            Pattern::Function("time.Now"),
        ],
        cause: "Go's time.Now() and time.Since() read the clock through the runtime's own \
                vDSO call (runtime.walltime, runtime.nanotime): the Go scheduler and timers \
                read it too, so every goroutine's time reads are clock reads here.",
        fix: "Nothing to change in Go code once the clocksource is fixed; until then keep \
              time.Now() out of per-event hot loops (a coarse time refreshed by a ticker).",
        expected_gain: Some(
            "Go's time.Now() went from ~80 ns to ~2 us on AWS Xen hosts (xen clocksource)",
        ),
        example: ("runtime.walltime", "/usr/local/bin/app"),
    },
    KnownSource {
        id: "direct_clock_syscall",
        frames: &[
            Pattern::Function("syscall"),
            Pattern::FunctionPrefix("syscall.Syscall"),
            Pattern::FunctionPrefix("syscall.RawSyscall"),
        ],
        cause: "{caller} makes the clock system call directly through syscall() \
                (syscall(SYS_clock_gettime, ...)), which never goes through the vDSO.",
        fix: "Call clock_gettime()/gettimeofday() through libc, which uses the vDSO.",
        expected_gain: Some(
            "about 150 ns per read on bare metal, ~2 us on Xen, against ~30 ns through the vDSO",
        ),
        example: ("syscall", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
    KnownSource {
        id: "glibc_clock",
        frames: &[
            Pattern::Function("clock_gettime"),
            Pattern::Function("clock_gettime64"),
            Pattern::Function("gettimeofday"),
            Pattern::Function("time"),
        ],
        cause: "{caller} reads the clock through glibc (clock_gettime, gettimeofday or time), \
                and the read enters the kernel instead of staying in the vDSO.",
        fix: "Read the clock less often in that code (once per batch or request), or use \
              CLOCK_REALTIME_COARSE/CLOCK_MONOTONIC_COARSE where jiffy resolution is \
              enough: the vDSO serves them from the tick on every clocksource.",
        expected_gain: None,
        example: ("__clock_gettime", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
];
