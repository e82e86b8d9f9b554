//! The purge signal's words in the docs: docs/metrics.md's rows for its
//! families and its case in PromQL, and its section of docs/runbook.md.

use super::{PURGE_BYTES, PURGE_CALLS, TLB_SHOOTDOWNS};
use crate::signals::FamilyDoc;

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
pub const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &PURGE_CALLS,
        labels: "`syscall` (`madvise`, `munmap`), `advice` (`dontneed`, `free`, `other`; `none` for `munmap`)",
        counts: "calls that give the process's memory back to the kernel, read at syscall entry: `madvise()` whose advice drops pages (`MADV_DONTNEED`; `MADV_FREE`; `other`: `MADV_REMOVE`, `MADV_PAGEOUT`, `MADV_DONTNEED_LOCKED`), and every `munmap()`. Other advice (`MADV_HUGEPAGE`, `MADV_WILLNEED`, ...) is not counted. A call the kernel refuses is counted as made, as strace shows it. A process's series appear once it has made 64 such calls in its life (every program unmaps the loader's cache at start); the first value then holds them all",
        hook: "fentry on `madvise` and `munmap`, or `raw_syscalls:sys_enter`: x86_64 `madvise` (28), `munmap` (11); arm64 `madvise` (233), `munmap` (215); the advice is the third argument, the length the second",
    },
    FamilyDoc {
        family: &PURGE_BYTES,
        labels: "as `slowpath_memory_purge_calls_total`",
        counts: "the length argument of the same calls, as passed (the kernel rounds it up to a page): the memory the process asks to give back, which the next allocations fault in again",
        hook: "same",
    },
    FamilyDoc {
        family: &TLB_SHOOTDOWNS,
        labels: "none but the process's",
        counts: "remote TLB flushes the process's threads asked for: each time the kernel must flush the TLB of other CPUs that ran the process (after a purge, an unmap, a protection change or a page migration in its address space), counted once per flush on the CPU of the thread that asked, before the IPIs go out (a CPU idle in lazy TLB mode may then be skipped). The flush of the process's own teardown at exit is not counted (it comes after the process's exit record). x86_64 only: arm64 broadcasts TLB invalidations in hardware, with no IPI. A process's series appear at its 64th",
        hook: "`tlb:tlb_flush` with `reason` 4 (`TLB_REMOTE_SEND_IPI`, traced by `native_flush_tlb_multi()`); its runs on every switch between processes (reason 0) leave at the first test. Not on Xen PV guests, whose flushes are hypercalls",
    },
];

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
pub const PROMQL: &[&str] = &[
    r#"allocator purge storms: calls per second that give memory back, per process, the MiB per
#    second they give back, and the calls' CPU at the node's measured cost of one system call
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_memory_purge_calls_total[5m])))
sum by (instance, comm, cgroup) (rate(slowpath_memory_purge_bytes_total[5m])) / 2^20
sum by (instance, comm, cgroup) (rate(slowpath_memory_purge_calls_total[5m]))
  * on (instance) group_left max by (instance) (slowpath_syscall_seconds)
# the TLB shootdowns per second those purges (and other unmaps) send, x86_64
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_tlb_shootdowns_total[5m])))"#,
];

/// Its section of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`crate::signals::SIGNALS`] order): what fired,
/// why the threshold is where it is, how to find the cause, and the fix.
pub const RUNBOOK: &str = r##"## Allocator purge storms

`SlowpathAllocatorPurgeStorm`: one process makes more than 1,000 calls per second that give memory
back to the kernel, for 10 min (`slowpath_memory_purge_calls_total`; Helm
`prometheusRule.thresholds.memoryPurgePerProcess`, `prometheusRule.for.purgeStorm`).

What it means: the process's allocator returns freed memory to the kernel at once, with
`madvise(MADV_DONTNEED)` or `madvise(MADV_FREE)` or `munmap()`, and the next allocations fault it in
again. Each round costs the system call, a TLB shootdown IPI to every CPU that ran the process's
threads, and a zeroed page for every 4 KiB refaulted. A jemalloc service at `dirty_decay_ms:0`
spent about 18 % of its CPU on it; here one Python loop freeing 256 KiB buffers under jemalloc
with `dirty_decay_ms:0` made 3,274 purges a second and ran 1.8 times slower than under glibc.

The count: every `madvise()` whose advice drops pages (`advice="dontneed"`, `"free"`, `"other"`
for `MADV_REMOVE`, `MADV_PAGEOUT`, `MADV_DONTNEED_LOCKED`) and every `munmap()`
(`syscall="munmap"`), read at syscall entry, with the length each asks for
(`slowpath_memory_purge_bytes_total`). On x86_64 the remote TLB flushes each process asks for are
counted too (`slowpath_tlb_shootdowns_total`, at the `tlb:tlb_flush` tracepoint): each sends an
IPI to every other CPU that ran its threads, which stops there to flush.

Threshold: 1,000 calls a second. Allocators purge by design a few to a few hundred times a second
(the Go scavenger paced to 1 % of a CPU, jemalloc's 10 s decay, glibc trimming the top of a heap).
At about 1 us a call and a 64 KiB refault each, 1,000 a second is 1 to 5 % of a CPU before the
shootdowns. The finding estimates the CPU at the node's measured cost of a system call and of a page
refault, counting every page given back as faulted in again, and names the allocator from the
call sites:

```promql
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_memory_purge_calls_total[5m])))
sum by (instance, comm, cgroup, syscall, advice) (rate(slowpath_memory_purge_bytes_total[5m])) / 2^20
```

Confirm on the node:
- `strace -f -c -e trace=madvise,munmap -p PID` for a few seconds, then `Ctrl-C`: the calls (strace
  slows the process, so the rate it shows is low). `strace -f -e trace=madvise -p PID` shows the
  advice and length of each.
- `grep TLB /proc/interrupts` twice, a few seconds apart: the shootdown IPIs each CPU received, on
  x86_64.
- [The doctor](#running-the-doctor) (`slowpath doctor --comm NAME` in the node's agent pod, or
  `sudo slowpath doctor --comm NAME` on a VM) names the `purge_storm` finding with the rate, the
  bytes a second, the estimated CPU, the call sites and the allocator.

Fix, by allocator (the finding's known source says which):
- jemalloc: `MALLOC_CONF=background_thread:true,dirty_decay_ms:10000,muzzy_decay_ms:10000` (its
  defaults, with the purge on a thread of its own), never a decay of 0; a Rust binary with
  tikv-jemallocator reads `_RJEM_MALLOC_CONF`.
- glibc malloc: `MALLOC_MMAP_THRESHOLD_` above the buffers the program frees in a loop (e.g.
  `67108864`) and `MALLOC_TRIM_THRESHOLD_` above the heap's swing (e.g. `268435456`); setting either
  turns off the adaptive mmap threshold. No `malloc_trim()` in a loop.
- Go: no `debug.FreeOSMemory()` in a loop or a ticker; `GOMEMLIMIT` well above the live heap (or
  unset), a higher `GOGC` if the heap swings every cycle; `GODEBUG=madvdontneed=0` defers the work to
  memory pressure with `MADV_FREE`.
- tcmalloc: a lower `TCMALLOC_RELEASE_RATE`. mimalloc: `MIMALLOC_PURGE_DELAY` of 10 ms or more.
- Code of your own: keep the buffers and reuse them.
"##;
