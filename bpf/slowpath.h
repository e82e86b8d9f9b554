/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Types shared by the BPF programs (slowpath.bpf.c) and the agent.
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

/* Requested relative sleep histogram: bucket i holds requests with
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

/* Indexes of the lost-event counters (the `lost` per-CPU array). */
enum sp_lost_reason {
	SP_LOST_PROCESS_TABLE_FULL = 0,	   /* event dropped: `procs` map full */
	SP_LOST_COMPACTION_TABLE_FULL = 1, /* run not timed: `compaction_starts` full */
	SP_LOST_RINGBUF_FULL = 2,	   /* exec split not recorded: counts stay with the new image */
	SP_LOST_SLEEP_UNREADABLE = 3,	   /* sleep counted, duration unreadable: not in the histogram */
	SP_LOST_REASON_COUNT = 4,
};

/* Counters of one thread group. All __u64, all monotonic. */
struct sp_counters {
	__u64 clock_gettime[SP_CLOCK_COUNT]; /* by enum sp_clock */
	__u64 gettimeofday;
	__u64 time;
	__u64 sigprocmask[SP_SIGMASK_OP_COUNT]; /* by enum sp_sigmask_op */
	/* [syscall][clock][mode]; nanosleep(2) is always relative on CLOCK_MONOTONIC */
	__u64 sleep_calls[SP_SLEEP_SYSCALL_COUNT][SP_CLOCK_COUNT][SP_SLEEP_MODE_COUNT];
	/* relative requests only, by syscall: non-cumulative buckets and the sum in ns */
	__u64 sleep_buckets[SP_SLEEP_SYSCALL_COUNT][SP_SLEEP_BUCKET_COUNT];
	__u64 sleep_requested_ns[SP_SLEEP_SYSCALL_COUNT];
	__u64 thp_fault_alloc;
	__u64 thp_fault_fallback;
	__u64 compaction_runs[SP_COMPACTION_TRIGGER_COUNT];
	__u64 compaction_ns[SP_COMPACTION_TRIGGER_COUNT];
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
	__u32 flags;	 /* SP_PROC_* */
	char comm[16];	 /* group leader's comm at first event (after exec) */
	__u32 stack_jiffy; /* jiffies (low 32 bits) of the last sampled user stack (capture_stacks only) */
};

/* What a sampled call site was doing (callsites map key). */
enum sp_callsite_kind {
	SP_CALLSITE_CLOCK = 0,	   /* clock_gettime, gettimeofday, time */
	SP_CALLSITE_SIGPROCMASK = 1,
	SP_CALLSITE_SLEEP = 2,	   /* nanosleep, clock_nanosleep */
	SP_CALLSITE_KIND_COUNT = 3,
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
	__s32 stack_id; /* in the `stacks` map */
	__u32 _pad;
	__u64 stack_top[2];
	char comm[16]; /* group leader's comm (sp_proc.comm): names the
			* process after it exits, splits samples at exec */
};

enum sp_proc_event_kind {
	SP_EVENT_EXIT = 1, /* the whole thread group exited */
	SP_EVENT_EXEC = 2, /* the group exec'd: counts so far belong to the old image */
};

/* Ring buffer record: the final counts of a process image, sent once when
 * it exits or execs, before its `procs` entry is deleted. */
struct sp_proc_event {
	__u32 tgid;
	__u32 kind; /* enum sp_proc_event_kind */
	struct sp_proc proc;
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
	enum sp_compaction_trigger compaction_trigger;
	enum sp_lost_reason lost_reason;
	enum sp_proc_flag proc_flag;
	enum sp_callsite_kind callsite_kind;
	enum sp_proc_event_kind proc_event_kind;
};

#endif /* SLOWPATH_H */
