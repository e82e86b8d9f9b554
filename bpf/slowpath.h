/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Types shared by the BPF programs (slowpath.bpf.c, core/, signals/) and
 * the agent.
 *
 * This is the only definition of these layouts: the agent gets them as
 * Rust types from the skeleton that libbpf-cargo generates (agent/build.rs),
 * never from a hand-copied twin. Every counter is a __u64 so a counter block
 * can be summed element by element.
 *
 * The enums below fix the array index of every label value. They reach the
 * agent as Rust constants through the object's BTF (struct sp_enums, anchored
 * in slowpath.bpf.c); each signal module (agent/src/signals/) lists the label
 * names of its enums' slots in the same order.
 */
#ifndef SLOWPATH_H
#define SLOWPATH_H

/* Clock classes: the clockid as the kernel sees it in clock_gettime(2),
 * clock_nanosleep(2). Values 0..9 are the kernel's own CLOCK_* ids. */
enum sp_clock {
	SP_CLOCK_REALTIME = 0,
	SP_CLOCK_MONOTONIC = 1,
	SP_CLOCK_PROCESS_CPUTIME = 2,
	SP_CLOCK_THREAD_CPUTIME = 3,
	SP_CLOCK_MONOTONIC_RAW = 4,
	SP_CLOCK_REALTIME_COARSE = 5,
	SP_CLOCK_MONOTONIC_COARSE = 6,
	SP_CLOCK_BOOTTIME = 7,
	SP_CLOCK_REALTIME_ALARM = 8,
	SP_CLOCK_BOOTTIME_ALARM = 9,
	SP_CLOCK_TAI = 10,	/* kernel id 11 */
	SP_CLOCK_CPU = 11,	/* negative id: pthread_getcpuclockid(3), clock_getcpuclockid(3) */
	SP_CLOCK_FD = 12,	/* negative id with CLOCKFD bits: dynamic posix clock (PTP) */
	SP_CLOCK_INVALID = 13,	/* anything else: the kernel returns EINVAL */
	SP_CLOCK_COUNT = 14,
};

/* rt_sigprocmask(2) operations. QUERY is a call whose new-set pointer is
 * NULL (the glibc getcontext(3) signature): `how` is ignored then. */
enum sp_sigmask_op {
	SP_SIGMASK_BLOCK = 0,	/* SIG_BLOCK */
	SP_SIGMASK_UNBLOCK = 1, /* SIG_UNBLOCK */
	SP_SIGMASK_SETMASK = 2, /* SIG_SETMASK */
	SP_SIGMASK_QUERY = 3,	/* set == NULL */
	SP_SIGMASK_INVALID = 4, /* set != NULL and an unknown `how`: EINVAL */
	SP_SIGMASK_OP_COUNT = 5,
};

enum sp_sleep_syscall {
	SP_SLEEP_NANOSLEEP = 0,
	SP_SLEEP_CLOCK_NANOSLEEP = 1,
	SP_SLEEP_SYSCALL_COUNT = 2,
};

enum sp_sleep_mode {
	SP_SLEEP_RELATIVE = 0,
	SP_SLEEP_ABSOLUTE = 1, /* clock_nanosleep(2) with TIMER_ABSTIME */
	SP_SLEEP_MODE_COUNT = 2,
};

/* What a timed wait was waiting in, or which timer woke it: the `wait`
 * label. The first SP_WAIT_SYSCALL_COUNT are syscalls whose timeout the
 * sys_enter hook reads (requested-timeout histogram); the others are known
 * only from the expiring timer. */
enum sp_wait {
	SP_WAIT_NANOSLEEP = 0,
	SP_WAIT_CLOCK_NANOSLEEP = 1,
	SP_WAIT_FUTEX = 2,	/* futex, futex_waitv */
	SP_WAIT_EPOLL_WAIT = 3, /* epoll_wait, epoll_pwait, epoll_pwait2 */
	SP_WAIT_POLL = 4,	/* poll, ppoll */
	SP_WAIT_SELECT = 5,	/* select, pselect6 */
	SP_WAIT_SYSCALL_COUNT = 6,
	SP_WAIT_TIMERFD = 6,	 /* a timerfd expired (timerfd_tmrproc) */
	SP_WAIT_POSIX_TIMER = 7, /* setitimer(2) (it_real_fn) or timer_create(2) (posix_timer_fn) */
	SP_WAIT_OTHER = 8,	 /* any other timer, or a sleeper in another syscall */
	SP_WAIT_COUNT = 9,
};

/* What an expiring hrtimer's function is (hrtimer->function, named once
 * per address with bpf_snprintf("%ps")). */
enum sp_timer_fn {
	SP_TIMER_FN_OTHER = 0,
	SP_TIMER_FN_SLEEPER = 1, /* hrtimer_wakeup: a task sleeping with a timeout */
	SP_TIMER_FN_TIMERFD = 2, /* timerfd_tmrproc */
	SP_TIMER_FN_POSIX = 3,	 /* it_real_fn, posix_timer_fn */
};

/* Requested timeout histogram: bucket i holds requests with
 * duration <= 10^(i-6) s (1 us .. 10 s) and above the previous bound;
 * the last bucket holds everything above 10 s. Not cumulative. */
enum sp_sleep_bucket {
	SP_SLEEP_BUCKET_1MS = 3, /* (100 us, 1 ms]: the 1 ms ticker's bucket */
	SP_SLEEP_BUCKET_INF = 8, /* above 10 s */
	SP_SLEEP_BUCKET_COUNT = 9,
};

enum sp_compaction_trigger {
	SP_COMPACTION_DIRECT = 0,    /* a task stalled in the page allocator */
	SP_COMPACTION_KCOMPACTD = 1, /* the kcompactdN kernel thread */
	SP_COMPACTION_MANUAL = 2,    /* /proc/sys/vm/compact_memory, sysfs node compact */
	SP_COMPACTION_TRIGGER_COUNT = 3,
};

/* The time a fork that copies the address space held its caller, from the
 * fork's syscall entry to task:task_newtask at the end of copy_process()
 * (signals/fork.bpf.h): bucket i holds the forks that took at most
 * bound i (enum sp_fork_bound_us) and more than bound i-1; the last
 * bucket those above 10 s. Not cumulative. */
enum sp_fork_bucket {
	SP_FORK_BUCKET_INF = 9,
	SP_FORK_BUCKET_COUNT = 10,
};

/* The upper bounds of enum sp_fork_bucket's finite buckets, in us: a copy
 * costs about 10 to 20 ms per GiB mapped with 4 KiB pages. */
enum sp_fork_bound_us {
	SP_FORK_BOUND_0_US = 1000,
	SP_FORK_BOUND_1_US = 2500,
	SP_FORK_BOUND_2_US = 10000,
	SP_FORK_BOUND_3_US = 25000,
	SP_FORK_BOUND_4_US = 100000,
	SP_FORK_BOUND_5_US = 250000,
	SP_FORK_BOUND_6_US = 1000000,
	SP_FORK_BOUND_7_US = 2500000,
	SP_FORK_BOUND_8_US = 10000000,
};

/* What else the CPU had to run when a thread called sched_yield(2): its
 * runqueue's nr_running at the call, the caller included (read from the
 * caller's CFS runqueue, task->se.cfs_rq->rq: signals/sched_yield.bpf.h). */
enum sp_yield_runnable {
	SP_YIELD_RUNNABLE_NONE = 0,   /* the caller alone: the yield returns at once */
	SP_YIELD_RUNNABLE_OTHERS = 1, /* another task was runnable on that CPU */
	/* not told: a kernel without CONFIG_FAIR_GROUP_SCHED (no se.cfs_rq),
	 * or a runqueue that could not be read */
	SP_YIELD_RUNNABLE_UNKNOWN = 2,
	SP_YIELD_RUNNABLE_COUNT = 3,
};

/* Calls that give a process's memory back to the kernel, by what they ask
 * (signals/purge.bpf.h). The advice values are the kernel's
 * (include/uapi/asm-generic/mman-common.h, the same on x86_64 and arm64);
 * madvise calls with any other advice give nothing back and are not
 * counted. */
enum sp_purge_call {
	/* madvise(MADV_DONTNEED, 4): the pages are unmapped at once and the
	 * next touch faults in a zeroed page (what jemalloc, glibc's arena trim
	 * and the Go runtime use) */
	SP_PURGE_MADV_DONTNEED = 0,
	/* madvise(MADV_FREE, 8): freed lazily, when memory runs short */
	SP_PURGE_MADV_FREE = 1,
	/* MADV_REMOVE (9), MADV_PAGEOUT (21), MADV_DONTNEED_LOCKED (24) */
	SP_PURGE_MADV_OTHER = 2,
	SP_PURGE_MUNMAP = 3, /* munmap(2): the mapping itself goes */
	SP_PURGE_CALL_COUNT = 4,
};

/* Groups of counted syscalls (bpf/core/syscall_table.h), each switched on
 * by the signals that count it (count_syscalls[group] in the object's
 * read-only data). The syscalls of a group reach the agent through the
 * object's BTF (enum sp_counted_syscall, made from the table). */
enum sp_syscall_group {
	SP_SYSCALLS_CLOCK_READS = 0, /* clock_gettime, gettimeofday, time */
	SP_SYSCALLS_SIGPROCMASK = 1, /* rt_sigprocmask */
	SP_SYSCALLS_SLEEPS = 2,	     /* nanosleep, clock_nanosleep */
	SP_SYSCALLS_TIMED_WAITS = 3, /* futex, epoll, poll, select */
	SP_SYSCALLS_TZFILE_CHECKS = 4, /* stat, lstat, newfstatat, statx */
	SP_SYSCALLS_FD_CLOSES = 5,     /* close */
	SP_SYSCALLS_YIELDS = 6,	       /* sched_yield */
	SP_SYSCALLS_PURGES = 7,	       /* madvise, munmap */
	SP_SYSCALLS_FORKS = 8,	       /* clone, clone3, fork: their entry time */
	SP_SYSCALL_GROUP_COUNT = 9,
};

/* Indexes of the lost-event counters (the `lost` per-CPU array). */
enum sp_lost_reason {
	SP_LOST_PROCESS_TABLE_FULL = 0,	   /* event dropped: `procs` map full */
	SP_LOST_COMPACTION_TABLE_FULL = 1, /* run not timed: `compaction_starts` full */
	SP_LOST_RINGBUF_FULL = 2,	   /* exec split not recorded: counts stay with the new image */
	SP_LOST_SLEEP_UNREADABLE = 3,	   /* timed wait counted, timeout unreadable: not in the histogram */
	/* event of a process on a recycled pid dropped: the pid's previous
	 * owner exited with the ring buffer full and its entry waits for the agent */
	SP_LOST_PID_REUSE_PENDING = 4,
	SP_LOST_CGROUP_NAME = 5,	   /* a new cgroup's path not recorded (cgroup_events full) */
	SP_LOST_REASON_COUNT = 6,
};

/* The hooks, as slots of the per-CPU run counters (`probe_runs`): every
 * program adds one to its hook's slot on every run, so the agent knows the
 * runs of each hook at all times and charges them the in-kernel time per run
 * that the kernel measures in its statistics windows. The agent finds a
 * hook's slot by name: SP_PROBE_<HOOK NAME IN CAPITALS>. */
enum sp_probe {
	SP_PROBE_SYS_ENTER = 0, /* raw_syscalls:sys_enter and its fentry twins */
	SP_PROBE_SCHED_PROCESS_EXIT = 1,
	SP_PROBE_SCHED_PROCESS_EXEC = 2,
	SP_PROBE_SCHED_WAKING = 3,
	SP_PROBE_HRTIMER_EXPIRE_ENTRY = 4,
	SP_PROBE_HRTIMER_EXPIRE_EXIT = 5,
	SP_PROBE_MM_PAGE_ALLOC = 6,
	SP_PROBE_MM_COMPACTION_BEGIN = 7,
	SP_PROBE_MM_COMPACTION_END = 8,
	SP_PROBE_CGROUP_MKDIR = 9,
	SP_PROBE_TLB_FLUSH = 10, /* x86 only: arm64 flushes other CPUs' TLBs without IPIs */
	SP_PROBE_TASK_NEWTASK = 11,
	SP_PROBE_COUNT = 12,
};

/* One in every SP_SELF_TIMED_EVERY runs of a hook on a CPU times itself
 * (a power of two: the run counter's low bits pick it). The agent estimates
 * the programs' in-kernel time from these samples where the kernel's
 * run-time statistics are not allowed (no CAP_SYS_ADMIN, sysctl off); the
 * other runs pay one test of a counter they already hold. */
#define SP_SELF_TIMED_EVERY 1024

/* A timed run longer than this was interrupted or preempted: its time is
 * someone else's, and it is left out (no program runs for even 10 us). */
#define SP_SELF_TIMED_MAX_NS 65536

/* The self-timed runs of one hook on one CPU (`probe_time`, a per-CPU array
 * by enum sp_probe), each timed with bpf_ktime_get_ns(): three reads, a b c,
 * with the program between b and c. b - a is what one read adds to the
 * span (its own cost), so (ns - clock_ns) / runs is the program's time per
 * run. All sums over the runs kept, monotonic. */
struct sp_probe_time {
	__u64 ns;	/* c - b, summed */
	__u64 clock_ns; /* b - a, summed */
	__u64 runs;	/* runs timed (SP_SELF_TIMED_MAX_NS or less) */
};

/* Counters of one thread group. All __u64, all monotonic. */
struct sp_counters {
	__u64 clock_gettime[SP_CLOCK_COUNT]; /* by enum sp_clock */
	__u64 gettimeofday;
	__u64 time;
	__u64 sigprocmask[SP_SIGMASK_OP_COUNT]; /* by enum sp_sigmask_op */
	/* [syscall][clock][mode]; nanosleep(2) is always relative on CLOCK_MONOTONIC */
	__u64 sleep_calls[SP_SLEEP_SYSCALL_COUNT][SP_CLOCK_COUNT][SP_SLEEP_MODE_COUNT];
	/* Requested timeouts of timed waits by enum sp_wait (syscalls only),
	 * relative or converted from an absolute deadline at the call:
	 * non-cumulative buckets (enum sp_sleep_bucket) and the sum in ns. */
	__u64 timeout_buckets[SP_WAIT_SYSCALL_COUNT][SP_SLEEP_BUCKET_COUNT];
	__u64 timeout_ns[SP_WAIT_SYSCALL_COUNT];
	/* Timed waits by enum sp_wait (syscalls only): every call with a
	 * timeout, exact. The histogram above holds every sleep's request but
	 * only a sample of the other waits' (at most one per process per jiffy
	 * on each CPU: count_wait() in core/timeouts.h). */
	__u64 timer_waits[SP_WAIT_SYSCALL_COUNT];
	/* Wakeups by an expiring timer, by enum sp_wait, counted for the woken
	 * process (timer:hrtimer_expire_entry .. _exit, sched:sched_waking). */
	__u64 timer_wakeups[SP_WAIT_COUNT];
	/* stat-family calls on the default time-zone file, /etc/localtime,
	 * whose path is in the calling code's own image (signals/tzfile.bpf.h) */
	__u64 tzfile_stats;
	/* close() of a descriptor the process does not have open (EBADF): the
	 * close sweep up to the open-files limit (signals/fdclose.bpf.h) */
	__u64 fd_close_unopened;
	/* sched_yield(2) calls by enum sp_yield_runnable: a spin that yields
	 * with nothing else to run burns its CPU (signals/sched_yield.bpf.h) */
	__u64 sched_yield[SP_YIELD_RUNNABLE_COUNT];
	/* calls that give memory back, and the bytes they ask for (their
	 * length argument), by enum sp_purge_call (signals/purge.bpf.h) */
	__u64 purge_calls[SP_PURGE_CALL_COUNT];
	__u64 purge_bytes[SP_PURGE_CALL_COUNT];
	/* 1 s windows (HZ jiffies; 2^30 ns without HZ) in which the process was woken by timers at
	 * least `timer_hot_wakeups` times: non-zero marks a timer loop, whose
	 * requested timeouts get per-process series. */
	__u64 timer_hot_windows;
	__u64 thp_fault_alloc;
	__u64 thp_fault_fallback;
	__u64 compaction_runs[SP_COMPACTION_TRIGGER_COUNT];
	__u64 compaction_ns[SP_COMPACTION_TRIGGER_COUNT];
	/* remote TLB flushes the process's threads asked for (x86: tlb_flush
	 * with reason TLB_REMOTE_SEND_IPI, on the sender's CPU): the shootdown
	 * IPIs of its purges, unmaps and protection changes (signals/purge.bpf.h) */
	__u64 tlb_shootdowns;
	/* forks that copied the address space (no CLONE_VM), counted at
	 * task:task_newtask for the parent (signals/fork.bpf.h): by the time
	 * they held it (enum sp_fork_bucket), that time's sum in ns, the
	 * parent's mapped pages (mm->total_vm) and page-table bytes
	 * (mm->pgtables_bytes) at each, summed, and those whose child exec'd
	 * before it exited (the spawn pattern) */
	__u64 fork_copies[SP_FORK_BUCKET_COUNT];
	__u64 fork_copy_ns;
	__u64 fork_mapped_pages;
	__u64 fork_page_table_bytes;
	__u64 fork_execs;
};

/* Bits of sp_proc.flags. */
enum sp_proc_flag {
	SP_PROC_EXITED = 1, /* group died but the exit record did not fit the ring buffer */
};

/* Value of the `procs` map, keyed by tgid. */
struct sp_proc {
	struct sp_counters c;
	/* group leader's start time (ns since boot, CLOCK_BOOTTIME): with the
	 * tgid it names one process; /proc/<tgid>/stat field 22 is the same
	 * value in clock ticks */
	__u64 start_boottime_ns;
	__u64 cgroup_id; /* cgroup v2 id (inode number in cgroup2fs) at first event */
	/* group leader's self_exec_id (bumped by every exec): tells the image
	 * after an exec from the one before, which has the same tgid and start */
	__u64 exec_id;
	__u32 flags;	 /* SP_PROC_* */
	char comm[16];	 /* group leader's comm at first event (after exec) */
	/* jiffies (low 28 bits) of the last sampled user stack, shifted above one
	 * bit per enum sp_callsite_kind sampled in that jiffy (stack_due()) */
	__u32 stack_jiffy;
	/* jiffies (low 32 bits) of the last timed wait whose requested
	 * timeout was read for this entry (count_wait() in core/timeouts.h) */
	__u32 timeout_jiffy;
	__u32 timer_window; /* number of the current timer window: jiffies / HZ (or ns >> 30) */
	__u32 timer_window_wakeups; /* timer wakeups in that window */
	/* timer wakeups in the window before it: a CPU's slot hands a window's
	 * wakeups in late, after another CPU began the next one (window_add()) */
	__u32 timer_prev_window_wakeups;
	__u32 tgid;	 /* set when parked (SP_PARKED_KEY_BASE): its key is not the tgid then */
	/* A fold from another CPU's slot (struct sp_slot) and the image's exit
	 * or exec must not overlap: a fold counts itself in `folders` and adds
	 * only while `retiring` is 0; the exit or exec sets `retiring`, waits
	 * for `folders` to drop to 0, and only then copies and deletes the
	 * entry (slot_fold() in compose/slots.h, entry_retiring() in core/lifecycle.h). */
	__u32 folders;
	__u32 retiring;
};

/* Keys of `procs` at or above this are no tgid (pid_max is at most 2^22):
 * they hold the entries of exited processes whose exit record did not fit
 * the ring buffer, parked there for the agent so that their pid is free at
 * once (proc_park() in core/lifecycle.h). */
enum sp_proc_key {
	SP_PARKED_KEY_SHIFT = 31,
};
#define SP_PARKED_KEY_BASE (1u << SP_PARKED_KEY_SHIFT)

/* A CPU's combining slot (`sys_slots`, one per CPU): the syscall counters
 * of the process image that last counted on this CPU, added without atomics
 * and without a `procs` lookup while the same image keeps counting here. They
 * move to the image's entry (or, when it is gone, to a SP_EVENT_LATE record)
 * when another image takes the slot, when the image exits or execs on this
 * CPU, and before every read of `procs` by the agent, which runs the fold
 * program on each CPU (fold_cpu_slot). Two slots per CPU: `sys_slots` for
 * the syscall counters of the current image (tp_btf sys_enter), and
 * `wake_slots` for the timer wakeups of the woken image (tp_btf
 * sched_waking). Only the counters up to `timer_hot_windows` are ever
 * non-zero here. */
struct sp_slot {
	__u32 tgid;  /* owner's thread group; 0: none */
	__u32 busy;  /* non-zero while a program on this CPU changes the slot */
	__u64 start_boottime_ns; /* owner's group leader start: with exec_id, */
	__u64 exec_id;		 /* the identity of the image (as in sp_proc) */
	__u64 cgroup_id;	 /* the owner entry's, for a late record */
	__u64 pending;		 /* events counted since the last fold */
	__u64 dirty;		 /* groups of counters touched since then (enum sp_dirty in core/counting.h) */
	__u64 misses;		 /* calls of other images that found the slot taken */
	/* sys slots: the task that entered the last syscall on this CPU, by
	 * the address of its user registers (task_pt_regs(): no other live
	 * task has them), `task_events` then, and its image (tgid, leader
	 * start, exec id): while the registers and the count match, a task of
	 * that image calls again, with no helper call to ask (current_image()
	 * in core/slots.h) */
	__u64 task_regs;
	__u64 task_events;
	__u64 task_start;
	__u64 task_exec_id;
	__u32 task_tgid;
	/* sys slots: jiffies (low 32 bits) of the owner's last timed wait
	 * whose requested timeout was read here (count_wait()) */
	__u32 timeout_jiffy;
	__u32 win;		 /* wake slots: the timer-loop window of win_wakeups */
	__u32 win_wakeups;	 /* wake slots: the owner's timer wakeups in it, not yet in its entry */
	char comm[16];		 /* the owner entry's, for a late record */
	struct sp_counters c;
};

/* What a sampled call site was doing (callsites map key). */
enum sp_callsite_kind {
	SP_CALLSITE_CLOCK = 0,	   /* clock_gettime, gettimeofday, time */
	SP_CALLSITE_SIGPROCMASK = 1,
	SP_CALLSITE_SLEEP = 2,	   /* nanosleep, clock_nanosleep, and timed futex/epoll/poll/select waits */
	SP_CALLSITE_THP_FAULT = 3, /* a THP fault allocation (the user code that touched the page) */
	SP_CALLSITE_TZFILE = 4,	   /* a stat of /etc/localtime (localtime, mktime, tzset) */
	SP_CALLSITE_FD_CLOSE = 5,  /* a close() of a descriptor that is not open */
	SP_CALLSITE_SCHED_YIELD = 6, /* a sched_yield() with nothing else runnable */
	SP_CALLSITE_PURGE = 7,	     /* a madvise() or munmap() that gives memory back */
	SP_CALLSITE_FORK = 8,	     /* a fork that copies the address space */
	SP_CALLSITE_KIND_COUNT = 9,
};

/* Key of the `callsites` map: one user stack of one process doing one kind
 * of call. `stack_top` holds the two words at the user stack pointer at
 * syscall entry: one is the return address into the caller when the syscall
 * is made from a leaf function (glibc's getcontext, setcontext and syscall
 * wrappers push no frame pointer, so the frame-pointer walk skips their
 * caller; setcontext pushes one register first). */
struct sp_callsite_key {
	__u32 tgid;
	__u32 kind; /* enum sp_callsite_kind */
	__u64 stack_id; /* key of the stack in the `stacks` map: a hash of its frames */
	__u64 stack_top[2];
	char comm[16]; /* group leader's comm (sp_proc.comm): names the
			* process after it exits, splits samples at exec */
};

/* Deepest user stack walked for a call site (the kernel's default
 * kernel.perf_event_max_stack). */
#define SP_MAX_STACK_DEPTH 127

/* Value of `stacks`: a sampled user stack, innermost frame first, the
 * frame-pointer walk of bpf_get_stack() (BPF_F_USER_STACK); zeros past the
 * last frame. */
struct sp_stack {
	__u64 ips[SP_MAX_STACK_DEPTH];
};

/* Bytes of user stack kept with an exemplar (struct sp_stack_copy): the
 * rest of the page the stack pointer is in, then the next page, so 4 to 8
 * KiB. Enough for the frames between a syscall wrapper and main() in C
 * programs; frames beyond come from the frame-pointer walk where it gets
 * there. Two pages because a read never crosses into a third page: one
 * unmapped page ends the copy, not a fault. */
#define SP_STACK_COPY_PAGE 4096
#define SP_STACK_COPY_BYTES (2 * SP_STACK_COPY_PAGE)

/* Value of `stack_copies`, keyed like `callsites`: the user registers and
 * the top of the user stack of the first sample of a call site, taken when
 * its `callsites` entry is created. User space unwinds it with the
 * binaries' .eh_frame (DWARF CFI), which the kernel's frame-pointer walk
 * cannot use: it recovers callers of code built without frame pointers. */
struct sp_stack_copy {
	__u64 ip;
	__u64 sp;
	__u64 fp;  /* rbp on x86_64, x29 on arm64 */
	__u64 lr;  /* x30 on arm64 (the return address of a leaf); 0 on x86_64 */
	__u32 len; /* bytes of data[] read, from sp up: 0 if none could be */
	__u32 _pad;
	__u8 data[SP_STACK_COPY_BYTES];
};

enum sp_proc_event_kind {
	SP_EVENT_EXIT = 1, /* the whole thread group exited */
	SP_EVENT_EXEC = 2, /* the group exec'd: counts so far belong to the old image */
	/* Counts of an image that is gone (exited, exec'd, or its entry parked
	 * or swept), found later in a CPU's combining slot (struct sp_slot):
	 * they add to that image's final counts. Sent any number of times. */
	SP_EVENT_LATE = 3,
};

/* Ring buffer record: the final counts of a process image, sent once when
 * it exits or execs, before its `procs` entry is deleted; or its late
 * counts (SP_EVENT_LATE), whose record holds the syscall counters only. */
struct sp_proc_event {
	__u32 tgid;
	__u32 kind; /* enum sp_proc_event_kind */
	struct sp_proc proc;
};

/* Longest cgroup path recorded at mkdir (a Kubernetes container's path,
 * kubepods.slice/.../cri-containerd-<64 hex>.scope, is ~200 bytes); a longer
 * path is cut and the agent marks it so. */
#define SP_CGROUP_PATH_MAX 256

/* Ring buffer record (`cgroup_events`): a cgroup v2 directory was created.
 * Sent from cgroup:cgroup_mkdir, while the cgroup exists, so that a cgroup
 * removed before the agent walks cgroupfs still gets its path. */
struct sp_cgroup_event {
	__u64 id;			/* kernfs node id: the directory's inode number */
	char path[SP_CGROUP_PATH_MAX];	/* NUL-terminated, relative to the cgroup2 root */
};

/* An hrtimer expiring on this CPU (between hrtimer_expire_entry and _exit). */
struct sp_timer_frame {
	__u64 hrtimer;	     /* struct hrtimer * */
	__u64 start_jiffies; /* bpf_jiffies64() at expire_entry */
	__u32 fn;	     /* enum sp_timer_fn */
	__u32 _pad;
};

/* A frame older than this many jiffies was left by an _exit event that was
 * never seen (a program attached between a callback's entry and exit, or
 * skipped by the kernel's recursion guard): callbacks run for microseconds.
 * Jiffies, not a clock read: bpf_jiffies64() is a plain load where
 * bpf_ktime_get_ns() is a helper call (and a clocksource read) on every
 * expiry and timer wakeup. The price: a stale frame is dropped 2 to 3
 * jiffies after its entry (2-3 ms at HZ=1000, 8-12 ms at HZ=250) instead of
 * 1 ms, and a callback is taken for stale only if jiffies advanced 3 times
 * while it ran (not two ticks of a callback a few microseconds long; the
 * vCPU descheduled for that long would have passed 1 ms as well). */
#define SP_TIMER_FRAME_MAX_JIFFIES 2

/* hrtimer callbacks may nest once: a hard-irq timer inside a softirq one. */
#define SP_TIMER_MAX_DEPTH 2

/* Entries of the per-CPU cache of hrtimer callback kinds (struct
 * sp_timer_cpu): a CPU expires few distinct callbacks (the tick, sleepers,
 * a timerfd or two), so an expiry is mostly a compare, not a lookup in the
 * `timer_fns` hash. A power of two. */
#define SP_TIMER_FN_CACHE 8

/* Value of the per-CPU `timer_cpu` array: the timers expiring now, and the
 * kinds of the callbacks expired last (a cache of `timer_fns`). */
struct sp_timer_cpu {
	__u32 depth;
	__u32 fn_next; /* cache slot replaced at the next miss (mod SP_TIMER_FN_CACHE) */
	struct sp_timer_frame frames[SP_TIMER_MAX_DEPTH];
	__u64 fn_addr[SP_TIMER_FN_CACHE]; /* hrtimer->function; 0: empty */
	__u32 fn_kind[SP_TIMER_FN_CACHE]; /* enum sp_timer_fn of fn_addr[i] */
};

/* Value of `compaction_starts`, keyed by tid: a run in progress. */
struct sp_compaction_start {
	__u64 start_ns; /* bpf_ktime_get_ns() at mm_compaction_begin */
	__u32 trigger;	/* enum sp_compaction_trigger */
	__u32 _pad;
};

/* One field per enum above: a variable of this type (slowpath.bpf.c) puts
 * every enum into the object's BTF, so the skeleton generates their Rust
 * constants and no index is copied into the agent by hand. Never read. */
struct sp_enums {
	enum sp_clock clock;
	enum sp_sigmask_op sigmask_op;
	enum sp_sleep_syscall sleep_syscall;
	enum sp_sleep_mode sleep_mode;
	enum sp_sleep_bucket sleep_bucket;
	enum sp_wait wait;
	enum sp_timer_fn timer_fn;
	enum sp_compaction_trigger compaction_trigger;
	enum sp_yield_runnable yield_runnable;
	enum sp_purge_call purge_call;
	enum sp_fork_bucket fork_bucket;
	enum sp_fork_bound_us fork_bound_us;
	enum sp_lost_reason lost_reason;
	enum sp_proc_flag proc_flag;
	enum sp_proc_key proc_key;
	enum sp_callsite_kind callsite_kind;
	enum sp_proc_event_kind proc_event_kind;
	enum sp_probe probe;
	enum sp_syscall_group syscall_group;
};

#endif /* SLOWPATH_H */
