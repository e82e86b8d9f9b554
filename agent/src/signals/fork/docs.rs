//! The fork signal's words in the docs: docs/metrics.md's rows for its
//! families and its case in PromQL, and its section of docs/runbook.md.

use super::{FORK_COPIES, FORK_DURATION, FORK_EXECS, FORK_MAPPED, FORK_PAGE_TABLES, FORK_SECONDS};
use crate::signals::FamilyDoc;

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
pub const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &FORK_COPIES,
        labels: "none but the process's",
        counts: "forks that copied the process's address space: `clone()`, `clone3()` or (x86_64) `fork()` without `CLONE_VM`, as glibc's `fork()`, Python's `os.fork()` and Redis's `BGSAVE` make them, counted once the child exists. Not counted: `vfork()`, `posix_spawn()` and threads (`CLONE_VM`), a fork that fails before its child is made, and kernel threads. A process's fork series appear once its copies held it 10 ms in all, at 1 ms or more each on average (about 50 MiB touched: shells and process churners, whose forks copy a few MiB, add none however often they fork); the first values then hold every fork",
        hook: "the fork's entry (fentry on `clone`, `clone3`, `fork`, or `raw_syscalls:sys_enter`: x86_64 56, 435, 57; arm64 220, 435) for its time, then `task:task_newtask`, which runs only on forks, at the end of `copy_process()`, in the parent",
    },
    FamilyDoc {
        family: &FORK_SECONDS,
        labels: "as `slowpath_fork_copies_total`",
        counts: "the time the copying forks held the process, from the fork's syscall entry to its new task (the page tables copied, before the child is woken): what Redis's `latest_fork_usec` and `strace -T` show, less the wakeup",
        hook: "same",
    },
    FamilyDoc {
        family: &FORK_DURATION,
        labels: "as `slowpath_fork_copies_total`, and `le` (0.001, 0.0025, 0.01, 0.025, 0.1, 0.25, 1, 2.5, 10, +Inf)",
        counts: "the same forks by the time each held the process (counted in the kernel, bucket by bucket)",
        hook: "same",
    },
    FamilyDoc {
        family: &FORK_MAPPED,
        labels: "as `slowpath_fork_copies_total`",
        counts: "the process's mapped memory at each copying fork (`mm->total_vm` in pages, times the page size), summed: every mapping, reserved or touched; over `slowpath_fork_copies_total`, the size of a fork",
        hook: "`task:task_newtask`",
    },
    FamilyDoc {
        family: &FORK_PAGE_TABLES,
        labels: "as `slowpath_fork_copies_total`",
        counts: "the process's page-table bytes at each copying fork (`mm->pgtables_bytes`), summed: the tables `dup_mmap()` copies, which grow with the memory touched (a reserved, untouched heap adds none)",
        hook: "`task:task_newtask`",
    },
    FamilyDoc {
        family: &FORK_EXECS,
        labels: "as `slowpath_fork_copies_total`",
        counts: "copying forks whose child exec'd before it exited (its first exec): the spawn pattern, fork then exec, which `posix_spawn()` or `vfork()` make copy nothing; the rest lived on as copies (a snapshot, a worker)",
        hook: "`sched:sched_process_exec` of a child `task:task_newtask` saw made",
    },
];

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
pub const PROMQL: &[&str] = &[
    r#"forks of a large address space: the share of the time each process spends stalled in
#    forks that copy it, the time per fork, the GiB mapped per fork, and how many of its
#    children exec right after (1: spawns, 0: copies that live on)
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_fork_copy_seconds_total[5m])))
sum by (instance, comm, cgroup) (rate(slowpath_fork_copy_seconds_total[5m]))
  / sum by (instance, comm, cgroup) (rate(slowpath_fork_copies_total[5m]))
sum by (instance, comm, cgroup) (rate(slowpath_fork_mapped_bytes_total[5m]))
  / sum by (instance, comm, cgroup) (rate(slowpath_fork_copies_total[5m])) / 2^30
sum by (instance, comm, cgroup) (rate(slowpath_fork_execs_total[5m]))
  / sum by (instance, comm, cgroup) (rate(slowpath_fork_copies_total[5m]))
# the 99th percentile of a fork's time, per process
histogram_quantile(0.99, sum by (instance, comm, le) (rate(slowpath_fork_copy_duration_seconds_bucket[5m])))"#,
];

/// Its section of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`crate::signals::SIGNALS`] order): what fired,
/// why the threshold is where it is, how to find the cause, and the fix.
pub const RUNBOOK: &str = r##"## Forks of a large address space

`SlowpathLargeForks`: one process spends more than 1 % of the time stalled in forks that copy its
address space, for 10 min (`slowpath_fork_copy_seconds_total`; Helm
`prometheusRule.thresholds.forkCopySecondsPerProcess`, `prometheusRule.for.largeForks`).

What it means: a fork without `CLONE_VM` (glibc's `fork()`, Python's `os.fork()`, Redis's
`BGSAVE`, a JVM with `launchMechanism=FORK`) copies the process's page tables, and the process
waits the whole time: about 10 to 20 ms per GiB it has touched with 4 KiB pages, seconds on Xen PV
guests (a Redis fork took 3.46 s at 11.5 GB there). The child then tears the copy down again at
exec or exit. A process that spawns commands this way pays it on every spawn; one that forks for
snapshots pays it at each.

The count: every fork without `CLONE_VM` once its child exists (`task:task_newtask`), timed from the
fork's syscall entry, with the process's mapped bytes and page-table bytes at the fork
(`slowpath_fork_mapped_bytes_total`, `slowpath_fork_page_table_bytes_total`) and how many children
exec'd (`slowpath_fork_execs_total`). `vfork()`, `posix_spawn()` and threads are not counted: they
copy nothing.

Threshold: 1 % of the time. A 10 GiB process spawning a helper every 10 s (about 150 ms a copy)
loses 1.5 %; one that forks for a snapshot every few minutes stays below. The doctor's finding
also needs 1 ms or more a fork, so that a shell forking often (a copy of a few MiB each) is not
named, or names any single fork of 1 s or more:

```promql
topk(10, sum by (instance, comm, cgroup) (rate(slowpath_fork_copy_seconds_total[5m])))
sum by (instance, comm, cgroup) (rate(slowpath_fork_execs_total[5m]))
  / sum by (instance, comm, cgroup) (rate(slowpath_fork_copies_total[5m]))
```

Confirm on the node:
- `strace -f -T -e trace=clone,clone3,fork,vfork -p PID` for a while, then `Ctrl-C`: each fork's
  flags (no `CLONE_VM`) and its time in `<...>`. Redis: `redis-cli INFO stats | grep
  latest_fork_usec`.
- [The doctor](#running-the-doctor) (`slowpath doctor --comm NAME` in the node's agent pod, or
  `sudo slowpath doctor --comm NAME` on a VM) names the `large_forks` finding with the size, the
  time per fork, the pattern, the call sites and the runtime.

Fix, by pattern (the finding says which):
- Spawn (the children exec, `slowpath_fork_execs_total` near `slowpath_fork_copies_total`):
  `posix_spawn()` or `vfork()` in place of `fork()` then `exec()`. Java:
  `-Djdk.lang.Process.launchMechanism=POSIX_SPAWN` (or `VFORK`). Python: `subprocess` without
  `preexec_fn` on 3.10+ (it uses vfork) or `os.posix_spawn`; multiprocessing's `forkserver` start
  method. Ruby: `Process.spawn`. Go: 1.9 or later. C: `posix_spawn()`, or glibc 2.29+ for
  `system()` and `popen()`. Or a small helper process forked at start that spawns for the big one.
- Copy (the children live on: snapshots, workers): less memory in the process that forks
  (shard, `maxmemory`), transparent huge pages off for it (Redis asks for it), fewer snapshots
  (Redis save points, snapshots from a replica), workers forked once at start; and no Xen PV guest.
"##;
