//! Where yield spins come from, most specific first: the frames of a sampled
//! `sched_yield()` with nothing else runnable (call kind `sched_yield`).

use crate::sources::{KnownSource, Pattern};

/// What the fix gives back: the spinning thread's CPU, most of it user time
/// between the calls (a thread that yields alone never gives its CPU away).
pub const SPIN_GAIN: &str = "the spinning thread's CPU (up to a whole core per spinning thread, \
                             and the pod's CPU quota with it); reported for BLAS pools at about \
                             40,000 yields a second, a 4 % gain when the yield was replaced";

pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "jvm_thread_yield",
        frames: &[
            Pattern::FunctionContains("naked_yield"),
            Pattern::Function("JVM_Yield"),
            Pattern::FunctionContains("SpinYield"),
            Pattern::Module("libjvm.so"),
        ],
        cause: "A JVM thread spins on Thread.yield() (one sched_yield system call each) while \
                it waits: a busy-spin wait strategy such as the LMAX Disruptor's \
                YieldingWaitStrategy, whose own documentation warns that it burns a core while \
                its ring is empty, or a hand-written `while (!ready) Thread.yield();`.",
        fix: "Wait without spinning: the Disruptor's BlockingWaitStrategy (or \
              SleepingWaitStrategy, or TimeoutBlockingWaitStrategy) in place of \
              YieldingWaitStrategy and BusySpinWaitStrategy unless the consumer has a core of \
              its own; elsewhere a blocking queue, LockSupport.park, or a condition instead of \
              a Thread.yield() loop.",
        expected_gain: Some(SPIN_GAIN),
        example: (
            "os::naked_yield()",
            "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
        ),
    },
    KnownSource {
        id: "openmp_spin_wait",
        frames: &[
            Pattern::FunctionPrefix("gomp_"),
            Pattern::Module("libgomp.so"),
            Pattern::FunctionPrefix("__kmp_"),
            Pattern::Module("libomp.so"),
            Pattern::Module("libiomp5.so"),
        ],
        cause: "An OpenMP runtime's worker threads spin, yielding, between parallel regions \
                (OMP_WAIT_POLICY active, or the default spin count before they sleep): with \
                more threads than the CPUs or the container's quota, they burn CPU waiting \
                for the next region.",
        fix: "OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=0 for libgomp, KMP_BLOCKTIME=0 for \
              LLVM's and Intel's libomp), and OMP_NUM_THREADS no higher than the CPUs the \
              process may use (its container's CPU quota).",
        expected_gain: Some(SPIN_GAIN),
        example: (
            "gomp_team_barrier_wait_end",
            "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0",
        ),
    },
    KnownSource {
        id: "blas_thread_pool",
        frames: &[
            Pattern::FunctionPrefix("blas_thread_server"),
            Pattern::Module("libopenblas"),
            Pattern::Module("libblis"),
        ],
        cause: "A BLAS library's thread pool (OpenBLAS's blas_thread_server) spins on \
                sched_yield while it waits for the next job: each idle worker calls it in a \
                loop, tens of thousands of times a second during a matrix multiply.",
        fix: "Size the pool to the CPUs the process may use: OPENBLAS_NUM_THREADS (or \
              OMP_NUM_THREADS for the OpenMP build) no higher than the container's CPU quota; \
              threadpoolctl's threadpool_limits() from Python; an OpenMP build with \
              OMP_WAIT_POLICY=passive.",
        expected_gain: Some(SPIN_GAIN),
        example: (
            "blas_thread_server",
            "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
        ),
    },
    KnownSource {
        id: "go_runtime_osyield",
        frames: &[Pattern::FunctionPrefix("runtime.osyield")],
        cause: "The Go runtime yields while it spins for work or for a lock (runtime.osyield): \
                with GOMAXPROCS above the CPUs the container may use, its idle Ps spin and \
                yield instead of parking.",
        fix: "Set GOMAXPROCS to the container's CPU quota (Go 1.25 does so by itself; before \
              it, go.uber.org/automaxprocs or the GOMAXPROCS variable from the pod's CPU \
              limit).",
        expected_gain: Some(SPIN_GAIN),
        example: ("runtime.osyield.abi0", "/usr/local/bin/app"),
    },
];
