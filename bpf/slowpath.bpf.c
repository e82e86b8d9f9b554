// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * slowpath: per-process counters of kernel slow paths, aggregated in the
 * kernel. User space reads the `procs` map at scrape time; the only records
 * sent through the ring buffer are the final counts of a process image when
 * it exits or execs (not per event).
 *
 * Every hook has two twins: a BTF raw tracepoint (tp_btf, cheapest: direct
 * loads of arguments) and a plain raw tracepoint (raw_tp, for kernels that
 * refuse tp_btf). The agent probes at start and sets autoload on one twin.
 * Both twins run the same __always_inline handler with `btf` a compile-time
 * constant that picks direct loads or CO-RE probe reads.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "slowpath.h"
#include "classify.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl,
 * include/uapi/asm-generic/unistd.h). */
#if defined(__TARGET_ARCH_x86)
#define SP_NR_rt_sigprocmask 14
#define SP_NR_nanosleep 35
#define SP_NR_gettimeofday 96
#define SP_NR_time 201
#define SP_NR_clock_gettime 228
#define SP_NR_clock_nanosleep 230
#define SP_NR_madvise 28
#define SP_NR_process_madvise 440
#define SP_NR_futex 202
#define SP_NR_futex_waitv 449
#define SP_NR_epoll_wait 232
#define SP_NR_epoll_pwait 281
#define SP_NR_epoll_pwait2 441
#define SP_NR_poll 7
#define SP_NR_ppoll 271
#define SP_NR_select 23
#define SP_NR_pselect6 270
#define SP_TS_COMPAT 0x0002 /* arch/x86/include/asm/thread_info.h: in an ia32 syscall */
#define SP_USER_CS 0x33	    /* arch/x86/include/asm/segment.h: __USER_CS, 64-bit user code */
#define SP_SYSCALL_NR(regs) BPF_CORE_READ(regs, orig_ax)
#define SP_SYSCALL_NR_BTF(regs) ((regs)->orig_ax) /* a BTF pointer: direct load */
#elif defined(__TARGET_ARCH_arm64)
#define SP_NR_rt_sigprocmask 135
#define SP_NR_nanosleep 101
#define SP_NR_gettimeofday 169
#define SP_NR_time (-1000) /* no time(2) on arm64 */
#define SP_NR_clock_gettime 113
#define SP_NR_clock_nanosleep 115
#define SP_NR_madvise 233
#define SP_NR_process_madvise 440
#define SP_NR_futex 98
#define SP_NR_futex_waitv 449
#define SP_NR_epoll_wait (-1001) /* arm64 has only epoll_pwait */
#define SP_NR_epoll_pwait 22
#define SP_NR_epoll_pwait2 441
#define SP_NR_poll (-1002) /* only ppoll */
#define SP_NR_ppoll 73
#define SP_NR_select (-1003) /* only pselect6 */
#define SP_NR_pselect6 72
#define SP_SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)
#define SP_SYSCALL_NR_BTF(regs) ((regs)->syscallno) /* a BTF pointer: direct load */
/* arch/arm64/include/asm/thread_info.h (4.x to 6.12): an AArch32 task, whose
 * syscalls use the arm numbers */
#define SP_TIF_32BIT (1UL << 22)
#else
#error "slowpath supports x86_64 and arm64"
#endif

#define SP_EEXIST 17

/* include/uapi/linux/futex.h */
#define SP_FUTEX_WAIT 0
#define SP_FUTEX_LOCK_PI 6
#define SP_FUTEX_WAIT_BITSET 9
#define SP_FUTEX_WAIT_REQUEUE_PI 11
#define SP_FUTEX_LOCK_PI2 13
#define SP_FUTEX_PRIVATE_FLAG 128
#define SP_FUTEX_CLOCK_REALTIME 256
#define SP_PF_KTHREAD 0x00200000 /* include/linux/sched.h */
#define SP_MADV_COLLAPSE 25

/*
 * THP fault allocations are recognised on kmem:mm_page_alloc by order and
 * gfp mask. The kernel has no tracepoint on the THP fault path itself
 * (do_huge_pmd_anonymous_page); fentry/kprobe on it would be exact too but
 * are not allowed everywhere, and mm_page_alloc is a tracepoint that exists
 * on every kernel with BTF. Its cost on ordinary 4 KiB faults is one
 * compare on `order` (see the benchmark).
 *
 * gfp bit values from include/linux/gfp_types.h, unchanged from v4.x to
 * v6.18 for the bits used here.
 */
#define SP_HPAGE_PMD_ORDER 9 /* 2 MiB with 4 KiB pages */
#define SP_GFP_HIGHMEM 0x02u
#define SP_GFP_DIRECT_RECLAIM 0x400u
#define SP_GFP_NOWARN 0x2000u
#define SP_GFP_COMP 0x40000u
#define SP_GFP_NOMEMALLOC 0x80000u
#define SP_GFP_HARDWALL 0x100000u
#define SP_GFP_THISNODE 0x200000u
/*
 * Bits every THP fault mask has: vma_thp_gfp_mask() builds it from
 * GFP_TRANSHUGE_LIGHT = GFP_HIGHUSER_MOVABLE | __GFP_COMP | __GFP_NOMEMALLOC
 * | __GFP_NOWARN. __GFP_IO/__GFP_FS/__GFP_MOVABLE are left out because
 * memalloc_nofs/noio/pin scopes may clear them. hugetlbfs masks lack
 * __GFP_NOMEMALLOC, so hugetlb pages never match.
 */
#define SP_GFP_THP_FAULT_BITS                                                  \
	(SP_GFP_HIGHMEM | SP_GFP_HARDWALL | SP_GFP_COMP | SP_GFP_NOMEMALLOC |    \
	 SP_GFP_NOWARN)

/* Default capacities; the agent overrides them with set_max_entries. */
#define SP_DEFAULT_MAX_PROCS 16384
#define SP_DEFAULT_MAX_COMPACTIONS 4096
#define SP_DEFAULT_RINGBUF_BYTES (1 << 20)
#define SP_DEFAULT_MAX_STACKS 4096	/* distinct user stacks (1016 bytes each) */
#define SP_DEFAULT_MAX_CALLSITES 16384 /* (process, kind, stack) keys */
/* Exemplar stack copies (struct sp_stack_copy, 8232 bytes); see stack_copies */
#define SP_DEFAULT_MAX_STACK_COPIES 512
/* Thread groups sampled on demand at once (`stack_targets`). */
#define SP_MAX_STACK_TARGETS 64

/* Counters per thread group (tgid). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct sp_proc);
} procs SEC(".maps");

/* Runs of each hook's programs on each CPU, by enum sp_probe: a plain add
 * to a per-CPU slot (no atomic, no shared line; the lookup of a constant key
 * is inlined by the verifier on kernels 6.10+ on x86_64 and arm64, a helper
 * call before). The agent sums the CPUs: the exact runs of every hook, which
 * the kernel's own run_cnt gives only while its statistics are enabled. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_PROBE_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} probe_runs SEC(".maps");

/* This CPU's combining slot (struct sp_slot). Used once the agent has
 * checked that it can fold every CPU's slot (slots_on). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_slot);
} sys_slots SEC(".maps");

/* This CPU's combining slot for timer wakeups, for the woken process image
 * (sched_waking under tp_btf, in the timer's interrupt). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_slot);
} wake_slots SEC(".maps");

/* Compaction runs in progress, by tid (begin/end come from the same task). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_COMPACTIONS);
	__type(key, __u32);
	__type(value, struct sp_compaction_start);
} compaction_starts SEC(".maps");

/* Lost-event counters by enum sp_lost_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_LOST_REASON_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Final counts of exited or exec'd process images (struct sp_proc_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SP_DEFAULT_RINGBUF_BYTES);
} proc_events SEC(".maps");

/* Paths of new cgroups (struct sp_cgroup_event: ~240 records of 272 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} cgroup_events SEC(".maps");

/* Entries parked or flagged SP_PROC_EXITED so far (their exit record did
 * not fit the ring buffer): the agent scans the table when this grows. */
__u64 exited_flagged = 0;

/* Sampled user stacks of every process: `slowpath doctor` and the agent's
 * `--debug.callsites` (capture_stacks). */
const volatile bool capture_stacks = false;

/* Sample the user stack of THP faults of every process (at most one per
 * jiffy each), without being asked: set with the agent's findings. A huge
 * page fault zeroes 2 MiB (tens of us at least), so a stack walk adds little
 * to it, and the burst that makes a finding (a JVM pre-touching its heap) is
 * usually over before the agent could ask for that process's stacks. */
const volatile bool sample_thp_faults = false;

/* Thread groups whose user stacks the agent asked for (its findings: a
 * process that crossed a finding's threshold), tgid -> samples still wanted.
 * Written by the agent only; a sample takes one with a plain store (two
 * threads racing may both take the last one: one more sample, never a
 * wrap-around). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_STACK_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} stack_targets SEC(".maps");

/* At most one user stack per jiffy per kind of call per process
 * (stack_due()): a bounded cost (a stack walk is ~1 us) however hot the
 * path, and no aliasing with calls that alternate (getcontext, setcontext). */
#define SP_MAX_STACK_DEPTH 127

/* Both tables are sized at load: 1 entry when stacks are not captured (no
 * kernel memory for a feature that is off), the defaults below otherwise. A
 * stack trace map is direct-mapped: a stack whose bucket holds another one
 * is dropped (bpf_get_stackid() -EEXIST), and counted in `stack_drops`. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, SP_DEFAULT_MAX_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, SP_MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_CALLSITES);
	__type(key, struct sp_callsite_key);
	__type(value, __u64);
} callsites SEC(".maps");

/* One exemplar of each call site's registers and top of stack (struct
 * sp_stack_copy), stored when its `callsites` entry is created: user space
 * unwinds it with .eh_frame past the frames without a frame pointer. The
 * first sites of a run get one; when the table is full, later sites keep
 * their frame-pointer stack only. Preallocated like every hash map here
 * (8328 bytes an element: the 8232-byte value, the 48-byte key and the
 * element header; plus one spare element per possible CPU): 4,289,696 bytes
 * measured at 512 entries on 2 CPUs (bpftool's bytes_memlock). When stacks
 * are not captured the agent sizes it 1 entry and loads it without
 * preallocation (BPF_F_NO_PREALLOC; never written then), so that a feature
 * that is off costs no per-CPU memory. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_STACK_COPIES);
	__type(key, struct sp_callsite_key);
	__type(value, struct sp_stack_copy);
} stack_copies SEC(".maps");

/* Scratch to build a `stack_copies` value (16 times the 512-byte BPF
 * stack), one slot per CPU: a plain array the agent sizes to the possible
 * CPUs when stacks are captured and to 1 slot otherwise (a per-CPU array
 * always costs a value per possible CPU). Indexed by the current CPU, like a
 * per-CPU array; a CPU beyond the slots finds none and keeps no copy. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_stack_copy);
} stack_copy_scratch SEC(".maps");

/* Sampled stacks not kept: the stacks bucket was taken, the stack could not
 * be walked, or `callsites` was full. Slot 0 only. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stack_drops SEC(".maps");

/* Scratch to build `procs` values off the 512-byte BPF stack: slot 0 a new
 * entry (proc_create(); its counters are never written, so they stay zero),
 * slot 1 a parked copy (proc_park()). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sp_proc);
} proc_scratch SEC(".maps");

/* Timers expiring on each CPU now (struct sp_timer_cpu): a wakeup seen
 * by sched_waking while one expires was made by that timer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_timer_cpu);
} timer_cpu SEC(".maps");

/* enum sp_timer_fn of each hrtimer function address seen: the name is
 * formatted once per address (bpf_snprintf "%ps"), not per expiry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, __u64);
	__type(value, __u32);
} timer_fns SEC(".maps");

/* Offsets of CLOCK_REALTIME and CLOCK_TAI from CLOCK_MONOTONIC in ns, kept
 * current by the agent (every 500 ms), to turn absolute deadlines on those
 * clocks into requested lengths. BPF has no realtime clock before 6.1. */
__s64 realtime_offset_ns = 0;
__s64 tai_offset_ns = 0;
/* Timer wakeups in one ~1 s window that make a process a timer loop
 * (struct sp_counters.timer_hot_windows); the agent sets it from
 * --timer.loop-threshold. */
const volatile __u32 timer_hot_wakeups = 200;
/* Which syscall groups the sys_enter hook and its fentry twins count, one
 * switch per group, set by the signals that count them (the agent leaves a
 * switched-off collector's switch false; the verifier then prunes its
 * branches). nanosleep and clock_nanosleep are entered when either the
 * sleep signal (their calls, count_sleep_calls, and requested lengths) or
 * the timer signal (their timeouts, as timed waits) counts them. */
const volatile bool count_clock_reads = false;	/* clock_gettime, gettimeofday, time */
const volatile bool count_sigprocmask = false;	/* rt_sigprocmask */
const volatile bool count_sleeps = false;	/* nanosleep, clock_nanosleep */
const volatile bool count_sleep_calls = false;	/* their calls by clock and mode */
const volatile bool count_timed_waits = false;	/* futex, epoll, poll, select */
/* Where a task's user registers sit in its kernel stack (task_pt_regs()
 * minus task->stack: the same for every task), learned by the raw_tp
 * sys_enter program from its own arguments; raw_tp programs cannot call
 * bpf_task_pt_regs() on a task they did not get as a BTF pointer. 0 until
 * the first counted syscall (and for good when no collector counts
 * syscalls, so sys_enter is not attached). */
__u64 pt_regs_offset = 0;
/* Task exits (every thread's, sched_process_exit) and execs so far: a
 * task's stack, and so the address of its user registers, goes to another
 * task only after the first one exited, and a task changes image only by an
 * exec; either changes this count (see current_image()). */
__u64 task_events = 0;
/* Set by the agent once it has folded every CPU's slot (fold_cpu_slot):
 * until then, and for good where it cannot, sys_enter counts in `procs`. */
bool slots_on = false;
/* Entries in `stack_targets`, set by the agent's BPF worker (it owns .bss)
 * when the findings ask for stacks; next to slots_on, which sys_enter loads
 * anyway. While 0 (no finding waits for call sites, nearly always) a
 * counted syscall pays this load and a branch; while not, every process
 * counts in its entry (on_sys_enter), where the targets are sampled. */
__u32 stack_target_count = 0;

/* Whether the agent may ask for stacks at all (its findings are on): when
 * false, the verifier drops every target check below as dead code. */
const volatile bool stacks_on_demand = false;

static __always_inline bool stack_targets_on(void)
{
	return stacks_on_demand && stack_target_count;
}

/* Keeps struct sp_proc_event in the object's BTF so that the skeleton
 * generates its Rust type (ring buffer records have no map value type). */
struct sp_proc_event sp_proc_event_btf_anchor SEC(".bss");
struct sp_cgroup_event sp_cgroup_event_btf_anchor SEC(".bss");
/* Likewise for every enum of slowpath.h (see struct sp_enums). */
struct sp_enums sp_enums_btf_anchor SEC(".bss");

/* *ptr += v: atomic on a line other CPUs add to (`shared`: a `procs`
 * entry), a plain add on this CPU's own combining slot (struct sp_slot).
 * `shared` is a constant at every use, so one of the two is compiled. */
#define SP_ADD(shared, ptr, v)                                                 \
	do {                                                                   \
		if (shared)                                                    \
			__sync_fetch_and_add((ptr), (v));                      \
		else                                                           \
			*(ptr) += (v);                                         \
	} while (0)

/* arr[idx] += 1 with a bounds check the verifier can follow: barrier_var()
 * stops the compiler from checking one copy of idx and indexing with another. */
#define SP_INC_AT(shared, arr, idx)                                            \
	do {                                                                   \
		__u32 __i = (idx);                                             \
		barrier_var(__i);                                              \
		if (__i < sizeof(arr) / sizeof((arr)[0]))                      \
			SP_ADD(shared, &(arr)[__i], 1);                        \
	} while (0)

/* One more run of a program of hook `probe` (enum sp_probe) on this CPU. */
static __always_inline void probe_ran(__u32 probe)
{
	__u64 *n = bpf_map_lookup_elem(&probe_runs, &probe);

	if (n)
		*n += 1; /* per-CPU slot: no atomic needed */
}

static __always_inline void lost_inc(__u32 reason)
{
	__u64 *v = bpf_map_lookup_elem(&lost, &reason);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

/* Submit flag for a ring buffer record: wake the agent only once a quarter
 * of the ring is used. At low churn records wait for its periodic drain (no
 * wakeup per exit); at high churn it drains long before the ring is full. */
static __always_inline __u64 ring_wakeup(void *ring)
{
	__u64 used = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);

	return used >= bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / 4 ? BPF_RB_FORCE_WAKEUP
								      : BPF_RB_NO_WAKEUP;
}

/* Send the final counts of `p`, the entry of `tgid`, to user space, then
 * free the entry. The record is submitted before the delete, so a reader
 * that misses the entry in the map finds the record in the ring buffer.
 * False when the ring buffer is full: the entry is left as it is. */
static __always_inline bool proc_send(__u32 tgid, struct sp_proc *p, __u32 kind)
{
	struct sp_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);

	if (!e)
		return false;
	e->tgid = tgid;
	e->kind = kind;
	bpf_probe_read_kernel(&e->proc, sizeof(e->proc), p);
	bpf_ringbuf_submit(e, ring_wakeup(&proc_events));
	bpf_map_delete_elem(&procs, &tgid);
	return true;
}

/* Insert a zeroed entry for the thread group of `task` (the current task
 * when NULL). Slow path: once per process image. An entry already there
 * that is flagged SP_PROC_EXITED belongs to a dead process whose pid was
 * recycled: its record is sent first, so the new process never inherits
 * its counts, comm or cgroup; while the ring buffer stays full the new
 * process's events are counted as lost. */
static __noinline struct sp_proc *proc_create(__u32 tgid, struct task_struct *task)
{
	bool current = !task;
	__u32 zero = 0;
	struct sp_proc *tmpl, *old;
	long err;

	old = bpf_map_lookup_elem(&procs, &tgid);
	if (old && (old->flags & SP_PROC_EXITED) && !proc_send(tgid, old, SP_EVENT_EXIT)) {
		lost_inc(SP_LOST_PID_REUSE_PENDING);
		return NULL;
	}
	if (current)
		task = (struct task_struct *)bpf_get_current_task();
	tmpl = bpf_map_lookup_elem(&proc_scratch, &zero);
	if (!tmpl)
		return NULL;
	tmpl->start_boottime_ns = BPF_CORE_READ(task, group_leader, start_boottime);
	tmpl->exec_id = BPF_CORE_READ(task, group_leader, self_exec_id);
	/* the cgroup v2 id: what bpf_get_current_cgroup_id() returns for current */
	tmpl->cgroup_id = current ? bpf_get_current_cgroup_id()
				  : BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	BPF_CORE_READ_INTO(&tmpl->comm, task, group_leader, comm);
	err = bpf_map_update_elem(&procs, &tgid, tmpl, BPF_NOEXIST);
	if (err && err != -SP_EEXIST) {
		lost_inc(SP_LOST_PROCESS_TABLE_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&procs, &tgid);
}

/* The entry of the thread group of `tgid`, created on its first event. With
 * the exit hook attached, an entry of a dead process is either deleted or
 * flagged at its exit, so the flag check is all a recycled pid needs. */
static __always_inline struct sp_proc *proc_of(__u32 tgid, struct task_struct *task)
{
	struct sp_proc *p = bpf_map_lookup_elem(&procs, &tgid);

	if (p && !(p->flags & SP_PROC_EXITED))
		return p;
	return proc_create(tgid, task);
}

static __always_inline struct sp_proc *proc_current(void)
{
	return proc_of(bpf_get_current_pid_tgid() >> 32, NULL);
}

/* ---- syscalls: clock reads, rt_sigprocmask, sleeps ---------------------- */

/* Syscall argument n of the user registers: direct load under tp_btf,
 * CO-RE probe read under raw_tp. */
#define SP_SYSCALL_ARG(btf, regs, n)                                           \
	((btf) ? (unsigned long)PT_REGS_PARM##n##_SYSCALL(regs)                \
	       : (unsigned long)PT_REGS_PARM##n##_CORE_SYSCALL(regs))

/* Whether task `p` is in a compat syscall (x86: ia32; arm64: an AArch32
 * task): those use other syscall numbers, so they are never counted as ours. */
static __always_inline bool task_in_compat_syscall(struct task_struct *p)
{
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(p, thread_info.status) & SP_TS_COMPAT;
#else
	return BPF_CORE_READ(p, thread_info.flags) & SP_TIF_32BIT;
#endif
}

/* The same for a BTF task pointer (tp_btf, fentry): a direct load, no
 * helper call. */
static __always_inline bool task_btf_in_compat_syscall(struct task_struct *p)
{
#if defined(__TARGET_ARCH_x86)
	return p->thread_info.status & SP_TS_COMPAT;
#else
	return p->thread_info.flags & SP_TIF_32BIT;
#endif
}

/* Add one requested timeout of `rel_ns` (>= 0) to the histogram of `wait`
 * in counters `c` (`shared`: see SP_ADD). */
static __always_inline void count_timeout(struct sp_counters *c, const bool shared, __u32 wait,
					  __u64 rel_ns)
{
	int b;

	/* cap at ~136 years so the sum cannot wrap on absurd requests */
	if (rel_ns > 0xffffffffULL * SP_NSEC_PER_SEC)
		rel_ns = 0xffffffffULL * SP_NSEC_PER_SEC;
	/* a zero timeout of poll/select/epoll/futex never sleeps: no timer */
	if (rel_ns == 0 && wait >= SP_WAIT_FUTEX)
		return;
	b = sp_timeout_bucket(rel_ns); /* compares only: no division per wait */
	if (wait >= SP_WAIT_SYSCALL_COUNT)
		return;
	SP_INC_AT(shared, c->timeout_buckets[wait], b);
	SP_ADD(shared, &c->timeout_ns[wait], rel_ns);
}

/* Now on `clock` (enum sp_clock) in ns, or -1 for a clock BPF cannot read. */
static __always_inline __s64 clock_now_ns(__u32 clock)
{
	switch (clock) {
	case SP_CLOCK_MONOTONIC:
		return bpf_ktime_get_ns();
	case SP_CLOCK_BOOTTIME:
		return bpf_ktime_get_boot_ns();
	case SP_CLOCK_REALTIME:
		return bpf_ktime_get_ns() + realtime_offset_ns;
	case SP_CLOCK_TAI:
		return bpf_ktime_get_ns() + tai_offset_ns;
	}
	return -1;
}

/* The timeout of `wait` in the user timespec at `uts`: relative when
 * `abs_clock` is negative, else a deadline on that enum sp_clock (made
 * relative to the clock's time now; a deadline already past counts as 0).
 * `timeval`: the struct holds microseconds (select). Returns -1 when the
 * request is invalid or unreadable (the wait still counts as a call). */
static __always_inline int timeout_from_user(struct sp_counters *c, const bool shared, __u32 wait,
					     const void *uts, int abs_clock, bool timeval)
{
	struct __kernel_timespec ts;
	__s64 ns, now;

	if (bpf_probe_read_user(&ts, sizeof(ts), uts)) {
		lost_inc(SP_LOST_SLEEP_UNREADABLE);
		return -1;
	}
	if (timeval) {
		if (ts.tv_nsec < 0 || ts.tv_nsec >= 1000000)
			return -1;
		ts.tv_nsec *= 1000;
	}
	if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= (__s64)SP_NSEC_PER_SEC)
		return -1; /* EINVAL */
	if (ts.tv_sec > 0xffffffffLL)
		ts.tv_sec = 0xffffffffLL;
	ns = ts.tv_sec * (__s64)SP_NSEC_PER_SEC + ts.tv_nsec;
	if (abs_clock >= 0) {
		now = clock_now_ns(abs_clock);
		if (now < 0) {
			lost_inc(SP_LOST_SLEEP_UNREADABLE);
			return -1;
		}
		ns = ns > now ? ns - now : 0;
	}
	count_timeout(c, shared, wait, ns);
	return 0;
}

static __always_inline void count_sleep(struct sp_counters *c, const bool shared, __u32 syscall,
					__u32 clock, __u32 mode, const void *rqtp)
{
	__u64 *calls;
	__u32 slot;

	if (syscall >= SP_SLEEP_SYSCALL_COUNT)
		return;
	if (count_sleep_calls) {
		/* one flat, bounds-checked index into sleep_calls[syscall][clock][mode] */
		calls = &c->sleep_calls[syscall][0][0];
		slot = clock * SP_SLEEP_MODE_COUNT + mode;
		barrier_var(slot);
		if (slot >= SP_CLOCK_COUNT * SP_SLEEP_MODE_COUNT)
			return;
		SP_ADD(shared, &calls[slot], 1);
	}
	/* enum sp_sleep_syscall and enum sp_wait agree on the two sleeps */
	timeout_from_user(c, shared, syscall, rqtp, mode == SP_SLEEP_ABSOLUTE ? (int)clock : -1, false);
}

/* futex(2) ops that wait with a timeout: the deadline's clock (enum sp_clock)
 * when absolute, -1 when relative (FUTEX_WAIT: kernel/futex/syscalls.c,
 * futex_init_timeout()), -2 when the op does not wait with a timer. */
static __always_inline int futex_timeout_clock(__u32 op)
{
	bool realtime = op & SP_FUTEX_CLOCK_REALTIME;

	switch (op & ~(SP_FUTEX_PRIVATE_FLAG | SP_FUTEX_CLOCK_REALTIME)) {
	case SP_FUTEX_WAIT:
		return -1;
	case SP_FUTEX_LOCK_PI:
		return SP_CLOCK_REALTIME;
	case SP_FUTEX_WAIT_BITSET:
	case SP_FUTEX_WAIT_REQUEUE_PI:
	case SP_FUTEX_LOCK_PI2:
		return realtime ? SP_CLOCK_REALTIME : SP_CLOCK_MONOTONIC;
	}
	return -2;
}

/* Whether syscall `id` is a wait that arms a timer: a timed wait with no
 * timeout (or a zero one, which never sleeps) is not counted at all. */
static __always_inline bool wait_is_timed(struct pt_regs *regs, long id, const bool btf)
{
	switch (id) {
	case SP_NR_futex:
		return SP_SYSCALL_ARG(btf, regs, 4) &&
		       futex_timeout_clock(SP_SYSCALL_ARG(btf, regs, 2)) != -2;
	case SP_NR_futex_waitv:
	case SP_NR_epoll_pwait2:
		return SP_SYSCALL_ARG(btf, regs, 4);
	case SP_NR_epoll_wait:
	case SP_NR_epoll_pwait:
		return (int)SP_SYSCALL_ARG(btf, regs, 4) > 0;
	case SP_NR_poll:
		return (int)SP_SYSCALL_ARG(btf, regs, 3) > 0;
	case SP_NR_ppoll:
		return SP_SYSCALL_ARG(btf, regs, 3);
	case SP_NR_select:
	case SP_NR_pselect6:
		return SP_SYSCALL_ARG(btf, regs, 5);
	}
	return true; /* not a wait: counted as it is */
}

/* The requested timeout of a timed wait (`wait_is_timed()`). */
static __always_inline void count_wait(struct sp_counters *c, const bool shared,
				       struct pt_regs *regs, long id, const bool btf)
{
	__s32 ms;

	switch (id) {
	case SP_NR_futex:
		timeout_from_user(c, shared, SP_WAIT_FUTEX, (const void *)SP_SYSCALL_ARG(btf, regs, 4),
				  futex_timeout_clock(SP_SYSCALL_ARG(btf, regs, 2)), false);
		break;
	case SP_NR_futex_waitv:
		timeout_from_user(c, shared, SP_WAIT_FUTEX, (const void *)SP_SYSCALL_ARG(btf, regs, 4),
				  sp_classify_clockid((__s32)SP_SYSCALL_ARG(btf, regs, 5)), false);
		break;
	case SP_NR_epoll_wait:
	case SP_NR_epoll_pwait:
		ms = (__s32)SP_SYSCALL_ARG(btf, regs, 4);
		count_timeout(c, shared, SP_WAIT_EPOLL_WAIT, (__u64)ms * 1000000);
		break;
	case SP_NR_epoll_pwait2:
		timeout_from_user(c, shared, SP_WAIT_EPOLL_WAIT, (const void *)SP_SYSCALL_ARG(btf, regs, 4),
				  -1, false);
		break;
	case SP_NR_poll:
		ms = (__s32)SP_SYSCALL_ARG(btf, regs, 3);
		count_timeout(c, shared, SP_WAIT_POLL, (__u64)ms * 1000000);
		break;
	case SP_NR_ppoll:
		timeout_from_user(c, shared, SP_WAIT_POLL, (const void *)SP_SYSCALL_ARG(btf, regs, 3), -1,
				  false);
		break;
	case SP_NR_select:
		timeout_from_user(c, shared, SP_WAIT_SELECT, (const void *)SP_SYSCALL_ARG(btf, regs, 5), -1,
				  true);
		break;
	case SP_NR_pselect6:
		timeout_from_user(c, shared, SP_WAIT_SELECT, (const void *)SP_SYSCALL_ARG(btf, regs, 5), -1,
				  false);
		break;
	}
}

/* Whether this call's user stack is sampled: the first call of each kind
 * (enum sp_callsite_kind) in each jiffy (1 ms at HZ=1000, 4 ms at HZ=250)
 * per process. Per kind, because a process that makes several kinds of
 * call in a fixed order would otherwise give every sample to the first one:
 * a loop of clock reads and a 1 ms sleep wakes up, reads the clock first
 * in every jiffy, and its sleep was never sampled. `stack_jiffy` holds the
 * jiffy (its low 28 bits) above the kinds sampled in it (one bit each).
 * bpf_jiffies64() is a plain load, unlike a clock read: the calls not
 * sampled pay next to nothing. The store is plain: a race between threads
 * lets one more stack through. */
#define SP_STACK_KIND_BITS ((1u << SP_CALLSITE_KIND_COUNT) - 1)
static __always_inline bool stack_due(struct sp_proc *p, __u32 kind)
{
	__u32 now = (__u32)bpf_jiffies64() << SP_CALLSITE_KIND_COUNT;
	__u32 bit = (1u << kind) & SP_STACK_KIND_BITS;
	__u32 last = p->stack_jiffy;

	if ((last & ~SP_STACK_KIND_BITS) != now)
		last = now; /* a new jiffy: no kind sampled in it yet */
	else if (last & bit)
		return false;
	p->stack_jiffy = last | bit;
	return true;
}

/* Keep the user registers and the top of the user stack of a call site's
 * first sample under `key`: the rest of the stack pointer's page, then the
 * next page if it is mapped (the copy stops at the first read that fails,
 * and `len` says how far it got). Runs once per new distinct stack, never
 * per call: two bpf_probe_read_user() of at most 4 KiB each. */
static __always_inline void copy_stack(struct pt_regs *regs, const struct sp_callsite_key *key)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct sp_stack_copy *c;
	__u64 first;

	c = bpf_map_lookup_elem(&stack_copy_scratch, &cpu);
	if (!c)
		return;
	c->ip = PT_REGS_IP_CORE(regs);
	c->sp = PT_REGS_SP_CORE(regs);
	c->fp = PT_REGS_FP_CORE(regs);
#if defined(__TARGET_ARCH_arm64)
	c->lr = PT_REGS_RET_CORE(regs); /* x30 */
#else
	c->lr = 0;
#endif
	/* 1..SP_STACK_COPY_PAGE bytes up to the end of the page; the bound
	 * check is for the verifier (older ones lose the range of the
	 * subtraction), so that both reads stay inside data[] */
	first = SP_STACK_COPY_PAGE - (c->sp & (SP_STACK_COPY_PAGE - 1));
	barrier_var(first);
	if (first == 0 || first > SP_STACK_COPY_PAGE)
		return;
	if (bpf_probe_read_user(c->data, first, (void *)c->sp))
		return; /* no stack to keep */
	c->len = first;
	if (!bpf_probe_read_user(c->data + first, SP_STACK_COPY_PAGE, (void *)(c->sp + first)))
		c->len += SP_STACK_COPY_PAGE;
	/* fails when full (see stack_copies) or when another CPU stored this
	 * key first: either way the site keeps its frame-pointer stack */
	bpf_map_update_elem(&stack_copies, key, c, BPF_NOEXIST);
}

/* Sample the user stack of this call. */
static __noinline void sample_stack(void *ctx, struct sp_proc *p, __u32 kind, struct pt_regs *regs)
{
	struct sp_callsite_key key = {};
	__u64 one = 1, *count, *drops;
	__u32 zero = 0;
	long err;

	if (!p)
		return;
	key.tgid = bpf_get_current_pid_tgid() >> 32;
	key.kind = kind;
	__builtin_memcpy(key.comm, p->comm, sizeof(key.comm));
	key.stack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (key.stack_id < 0)
		goto dropped;
	bpf_probe_read_user(&key.stack_top, sizeof(key.stack_top), (void *)PT_REGS_SP_CORE(regs));
	count = bpf_map_lookup_elem(&callsites, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return;
	}
	/* -EEXIST: another thread added it first (its sample counts; this
	 * one is not worth a retry) */
	err = bpf_map_update_elem(&callsites, &key, &one, BPF_NOEXIST);
	if (!err) {
		copy_stack(regs, &key); /* a new distinct stack */
		return;
	}
	if (err == -SP_EEXIST)
		return;
dropped:
	drops = bpf_map_lookup_elem(&stack_drops, &zero);
	if (drops)
		*drops += 1; /* per-CPU slot */
}

/* Sample this call's user stack if the agent asked for thread group
 * `tgid`'s stacks (`stack_targets`) and wants more: one per jiffy at most.
 * Out of line: called only while some target waits, so that the paths
 * carry two loads and a branch, not this code. */
static __noinline void sample_if_wanted(void *ctx, struct sp_proc *p, __u32 tgid, __u32 kind,
					struct pt_regs *regs)
{
	__u32 *left;

	if (!p)
		return;
	left = bpf_map_lookup_elem(&stack_targets, &tgid);
	if (!left || *left == 0 || !stack_due(p, kind))
		return;
	*left -= 1;
	sample_stack(ctx, p, kind, regs);
}

/* Sample this call's user stack when due: every process's with
 * capture_stacks (the doctor, --debug.callsites), else the targets'. */
static __always_inline void maybe_sample(void *ctx, struct sp_proc *p, __u32 tgid, __u32 kind,
					 struct pt_regs *regs)
{
	if (capture_stacks) {
		if (stack_due(p, kind))
			sample_stack(ctx, p, kind, regs);
	} else if (stack_targets_on()) {
		sample_if_wanted(ctx, p, tgid, kind, regs);
	}
}

static __always_inline __u32 callsite_kind(long id)
{
	switch (id) {
	case SP_NR_rt_sigprocmask:
		return SP_CALLSITE_SIGPROCMASK;
	case SP_NR_clock_gettime:
	case SP_NR_gettimeofday:
	case SP_NR_time:
		return SP_CALLSITE_CLOCK;
	}
	return SP_CALLSITE_SLEEP; /* sleeps and timed waits */
}

/* Count one of our syscalls, `id`, entered with user registers `regs`, in
 * counters `c` (`shared`: see SP_ADD); a wait only when `wait_is_timed()`,
 * which the callers check first. */
static __always_inline void count_into(struct sp_counters *c, const bool shared,
				       struct pt_regs *regs, long id, const bool btf)
{
	__u32 idx;

	switch (id) {
	case SP_NR_clock_gettime:
		idx = sp_classify_clockid((__s32)SP_SYSCALL_ARG(btf, regs, 1));
		SP_INC_AT(shared, c->clock_gettime, idx);
		break;
	case SP_NR_gettimeofday:
		SP_ADD(shared, &c->gettimeofday, 1);
		break;
	case SP_NR_time:
		SP_ADD(shared, &c->time, 1);
		break;
	case SP_NR_rt_sigprocmask:
		idx = sp_classify_sigmask((__s32)SP_SYSCALL_ARG(btf, regs, 1),
					  SP_SYSCALL_ARG(btf, regs, 2) == 0);
		SP_INC_AT(shared, c->sigprocmask, idx);
		break;
	case SP_NR_nanosleep: /* hrtimer_nanosleep(..., CLOCK_MONOTONIC) */
		count_sleep(c, shared, SP_SLEEP_NANOSLEEP, SP_CLOCK_MONOTONIC, SP_SLEEP_RELATIVE,
			    (const void *)SP_SYSCALL_ARG(btf, regs, 1));
		break;
	case SP_NR_clock_nanosleep:
		count_sleep(c, shared, SP_SLEEP_CLOCK_NANOSLEEP,
			    sp_classify_clockid((__s32)SP_SYSCALL_ARG(btf, regs, 1)),
			    (SP_SYSCALL_ARG(btf, regs, 2) & SP_TIMER_ABSTIME) ? SP_SLEEP_ABSOLUTE
									      : SP_SLEEP_RELATIVE,
			    (const void *)SP_SYSCALL_ARG(btf, regs, 3));
		break;
	default:
		count_wait(c, shared, regs, id, btf);
		break;
	}
}

/* Count one of our syscalls in the `procs` entry of thread group `tgid`,
 * with atomic adds: the path of raw_tp and fentry programs, of the doctor
 * (which samples stacks per entry), and of a slot that cannot be taken. */
static __always_inline int count_syscall(void *ctx, struct pt_regs *regs, long id, __u32 tgid,
					 const bool btf)
{
	struct sp_proc *p;

	p = proc_of(tgid, NULL);
	if (!p)
		return 0;
	maybe_sample(ctx, p, tgid, callsite_kind(id), regs);
	count_into(&p->c, true, regs, id, btf);
	return 0;
}

/* ---- timer-loop windows ------------------------------------------------ */

/* Jiffies in one timer-loop window: HZ, so one second, set by the agent
 * (the resolution of CLOCK_MONOTONIC_COARSE is one jiffy: kernel/time/
 * posix-timers.c, LOW_RES_NSEC). 0 when the agent could not tell: windows
 * of 2^30 ns from the clock then. Not CONFIG_HZ through __kconfig: libbpf
 * reads that only from a kernel config file and refuses the whole object
 * where there is none, even for a __weak extern. */
const volatile __u32 timer_window_jiffies = 0;

/* The number of the current timer-loop window. bpf_jiffies64() is a load
 * (inlined on 64-bit arches): no clock read on the wakeup path. */
static __always_inline __u32 timer_window_now(void)
{
	if (timer_window_jiffies)
		return bpf_jiffies64() / timer_window_jiffies;
	return bpf_ktime_get_ns() >> 30;
}

/* Add `n` timer wakeups of window `win` to the window count of entry `p`,
 * and count a `hot` window the first time the count reaches
 * timer_hot_wakeups (the agent scales the threshold to a 2^30 ns window
 * without HZ). The entry keeps the current window and the one before: a
 * CPU's slot hands a window's wakeups in when its CPU sees the next window
 * or at a fold, often after another CPU began the next window (a process
 * that moved CPUs mid-window; a 500-wakeup loop split 100/150 between two
 * slots was not hot before). Counts of an older window are dropped: the
 * wakeups themselves are counted elsewhere, only the window test can miss
 * them. Plain stores: a race between CPUs can only shift a few wakeups
 * between windows. */
static __always_inline void window_add(struct sp_proc *p, __u32 win, __u32 n)
{
	__u32 *count, before;

	if (p->timer_window == win) {
		count = &p->timer_window_wakeups;
	} else if (p->timer_window == win + 1) {
		count = &p->timer_prev_window_wakeups;
	} else if ((__s32)(win - p->timer_window) > 0) {
		p->timer_prev_window_wakeups =
			win == p->timer_window + 1 ? p->timer_window_wakeups : 0;
		p->timer_window = win;
		p->timer_window_wakeups = 0;
		count = &p->timer_window_wakeups;
	} else {
		return;
	}
	before = *count;
	*count = before + n;
	if (before < timer_hot_wakeups && before + n >= timer_hot_wakeups)
		__sync_fetch_and_add(&p->c.timer_hot_windows, 1);
}

/* ---- per-CPU combining slots ------------------------------------------- */

/* The counters a slot holds (those sys_enter and timer wakeups count):
 * struct sp_counters up to timer_hot_windows, as __u64 words. */
#define SP_SLOT_WORDS (__builtin_offsetof(struct sp_counters, timer_hot_windows) / sizeof(__u64))

/* Groups of slot counters, one bit each in sp_slot.dirty: a fold visits
 * only the groups an image touched (a clock-reading process: 14 words, not
 * all SP_SLOT_WORDS). */
enum sp_dirty {
	SP_DIRTY_CLOCK = 1 << 0,	 /* clock_gettime[] */
	SP_DIRTY_TOD = 1 << 1,		 /* gettimeofday, time */
	SP_DIRTY_SIGMASK = 1 << 2,	 /* sigprocmask[] */
	SP_DIRTY_SLEEP_CALLS = 1 << 3, /* sleep_calls[0..1], SP_DIRTY_SLEEP_CALLS << syscall */
	SP_DIRTY_TIMEOUTS = 1 << 5,	 /* timeout_buckets[w], SP_DIRTY_TIMEOUTS << w, and timeout_ns[] */
	SP_DIRTY_WAKEUPS = 1 << 11,	 /* timer_wakeups[] */
};

/* The dirty groups of syscall `id` (what count_into() may add to). */
static __always_inline __u64 slot_dirty_bits(long id)
{
	switch (id) {
	case SP_NR_clock_gettime:
		return SP_DIRTY_CLOCK;
	case SP_NR_gettimeofday:
	case SP_NR_time:
		return SP_DIRTY_TOD;
	case SP_NR_rt_sigprocmask:
		return SP_DIRTY_SIGMASK;
	case SP_NR_nanosleep:
		return (SP_DIRTY_SLEEP_CALLS << SP_SLEEP_NANOSLEEP) |
		       (SP_DIRTY_TIMEOUTS << SP_WAIT_NANOSLEEP);
	case SP_NR_clock_nanosleep:
		return (SP_DIRTY_SLEEP_CALLS << SP_SLEEP_CLOCK_NANOSLEEP) |
		       (SP_DIRTY_TIMEOUTS << SP_WAIT_CLOCK_NANOSLEEP);
	case SP_NR_futex:
	case SP_NR_futex_waitv:
		return SP_DIRTY_TIMEOUTS << SP_WAIT_FUTEX;
	case SP_NR_epoll_wait:
	case SP_NR_epoll_pwait:
	case SP_NR_epoll_pwait2:
		return SP_DIRTY_TIMEOUTS << SP_WAIT_EPOLL_WAIT;
	case SP_NR_poll:
	case SP_NR_ppoll:
		return SP_DIRTY_TIMEOUTS << SP_WAIT_POLL;
	}
	return SP_DIRTY_TIMEOUTS << SP_WAIT_SELECT; /* select, pselect6 */
}

/* Add the non-zero words of `from` to `to` (atomic: other CPUs add there
 * too) and zero them; `n` is a constant, so the loop unrolls. */
#define SP_FOLD_WORDS(from, to, n)                                             \
	do {                                                                   \
		__u64 *__f = (__u64 *)(from), *__t = (__u64 *)(to), __v;       \
		_Pragma("unroll") for (int __i = 0; __i < (n); __i++)          \
		{                                                              \
			__v = __f[__i];                                        \
			if (__v) {                                             \
				__sync_fetch_and_add(&__t[__i], __v);          \
				__f[__i] = 0;                                  \
			}                                                      \
		}                                                              \
	} while (0)
#define SP_WORDS(field) (sizeof(field) / sizeof(__u64))

/* Fold the groups `dirty` names from counters `from` into `to`. */
static __always_inline void fold_dirty(struct sp_counters *from, struct sp_counters *to,
				       __u64 dirty)
{
	if (dirty & SP_DIRTY_CLOCK)
		SP_FOLD_WORDS(from->clock_gettime, to->clock_gettime, SP_WORDS(from->clock_gettime));
	if (dirty & SP_DIRTY_TOD) {
		SP_FOLD_WORDS(&from->gettimeofday, &to->gettimeofday, 1);
		SP_FOLD_WORDS(&from->time, &to->time, 1);
	}
	if (dirty & SP_DIRTY_SIGMASK)
		SP_FOLD_WORDS(from->sigprocmask, to->sigprocmask, SP_WORDS(from->sigprocmask));
	if (dirty & (SP_DIRTY_SLEEP_CALLS << SP_SLEEP_NANOSLEEP))
		SP_FOLD_WORDS(from->sleep_calls[0], to->sleep_calls[0], SP_WORDS(from->sleep_calls[0]));
	if (dirty & (SP_DIRTY_SLEEP_CALLS << SP_SLEEP_CLOCK_NANOSLEEP))
		SP_FOLD_WORDS(from->sleep_calls[1], to->sleep_calls[1], SP_WORDS(from->sleep_calls[1]));
#pragma unroll
	for (int w = 0; w < SP_WAIT_SYSCALL_COUNT; w++)
		if (dirty & (SP_DIRTY_TIMEOUTS << w))
			SP_FOLD_WORDS(from->timeout_buckets[w], to->timeout_buckets[w],
				      SP_WORDS(from->timeout_buckets[w]));
	if (dirty & (((SP_DIRTY_TIMEOUTS << SP_WAIT_SYSCALL_COUNT) - 1) & ~(SP_DIRTY_TIMEOUTS - 1)))
		SP_FOLD_WORDS(from->timeout_ns, to->timeout_ns, SP_WORDS(from->timeout_ns));
	if (dirty & SP_DIRTY_WAKEUPS)
		SP_FOLD_WORDS(from->timer_wakeups, to->timer_wakeups, SP_WORDS(from->timer_wakeups));
}

/* Whether slot `s` may add its counts to entry `p`, which it found under its
 * owner's tgid: the same image, not exited, not retiring. True with
 * p->folders counted up: the caller counts it down when its adds are done.
 * With entry_retiring() this is Dekker's handshake: each side writes its
 * flag with a locked instruction (a full barrier on x86_64, the only arch
 * the agent switches the slots on for), then reads the other's, so either
 * the fold sees `retiring` and sends a late record instead, or the exit sees
 * `folders` and waits for the adds before it copies the entry. The
 * identity is checked after the count too: an entry deleted meanwhile can
 * be reused by another process. */
static __always_inline bool entry_fold_begin(struct sp_proc *p, struct sp_slot *s)
{
	if (p->flags & SP_PROC_EXITED)
		return false;
	__sync_fetch_and_add(&p->folders, 1);
	if (*(volatile __u32 *)&p->retiring == 0 && p->start_boottime_ns == s->start_boottime_ns &&
	    p->exec_id == s->exec_id && !(p->flags & SP_PROC_EXITED))
		return true;
	__sync_fetch_and_add(&p->folders, -1);
	return false;
}

/* Send the counts of slot `s`, whose image has no live entry any more, as
 * a SP_EVENT_LATE record. False when the ring buffer is full. */
static __always_inline bool slot_send_late(struct sp_slot *s)
{
	struct sp_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	__u32 zero = 0;
	struct sp_proc *tmpl;

	if (!e)
		return false;
	/* the template's counters are all zero (see proc_scratch) */
	tmpl = bpf_map_lookup_elem(&proc_scratch, &zero);
	if (!tmpl) {
		bpf_ringbuf_discard(e, 0);
		return false;
	}
	bpf_probe_read_kernel(&e->proc, sizeof(e->proc), tmpl);
	bpf_probe_read_kernel(&e->proc.c, SP_SLOT_WORDS * sizeof(__u64), &s->c);
	bpf_probe_read_kernel(e->proc.comm, sizeof(e->proc.comm), s->comm);
	e->tgid = s->tgid;
	e->kind = SP_EVENT_LATE;
	e->proc.start_boottime_ns = s->start_boottime_ns;
	e->proc.exec_id = s->exec_id;
	e->proc.cgroup_id = s->cgroup_id;
	e->proc.flags = 0;
	e->proc.tgid = s->tgid;
	bpf_ringbuf_submit(e, ring_wakeup(&proc_events));
	bpf_probe_read_kernel(&s->c, SP_SLOT_WORDS * sizeof(__u64), &tmpl->c);
	return true;
}

/* Move the counts of slot `s` to its image's entry, with atomic adds of the
 * words that are not zero in the groups it touched (an image counts a few
 * kinds of syscalls: a few adds), or, when that entry is gone, flagged or
 * another image's, to a late record. The caller holds s->busy. False when nothing could move (the ring
 * buffer is full): the counts stay, the slot keeps its owner. */
static __noinline bool slot_fold(struct sp_slot *s)
{
	struct sp_proc *p;
	__u32 tgid;

	if (!s || !s->pending)
		return true;
	tgid = s->tgid;
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (p && entry_fold_begin(p, s)) {
		fold_dirty(&s->c, &p->c, s->dirty);
		if (s->win_wakeups)
			window_add(p, s->win, s->win_wakeups);
		__sync_fetch_and_add(&p->folders, -1);
	} else if (!slot_send_late(s)) {
		return false;
	}
	s->pending = 0;
	s->dirty = 0;
	s->win_wakeups = 0;
	return true;
}

/* What slot_take() did. */
enum sp_take {
	SP_TAKEN = 0,	   /* the slot is the current image's */
	SP_TAKE_ENTRY = 1, /* not taken: count in the image's entry */
	SP_TAKE_LOST = 2,  /* no entry could be made: the event is counted as lost */
};

/* Give slot `s` to the image of `task` (the current task when NULL; thread
 * group `tgid`, its leader's start and exec id): fold what it holds, find or create the image's
 * entry. Not taken when the fold could not move the counts or when the
 * entry under `tgid` is another image's (only after an exec whose split did
 * not fit the ring buffer). The caller holds s->busy. */
static __noinline int slot_take(struct sp_slot *s, __u32 tgid, __u64 start, __u64 exec_id,
				struct task_struct *task)
{
	struct sp_proc *p;

	if (!s || !slot_fold(s))
		return SP_TAKE_ENTRY;
	p = proc_of(tgid, task);
	if (!p)
		return SP_TAKE_LOST; /* proc_create() counted it */
	if (p->start_boottime_ns != start || p->exec_id != exec_id)
		return SP_TAKE_ENTRY;
	s->tgid = tgid;
	s->start_boottime_ns = start;
	s->exec_id = exec_id;
	s->cgroup_id = p->cgroup_id;
	__builtin_memcpy(s->comm, p->comm, sizeof(s->comm));
	return SP_TAKEN;
}

/* Whether another image's call should take slot `s`. Taking costs a fold
 * and a second `procs` lookup, worth it when images keep the CPU for more
 * than a call each. Where they take turns call by call (processes that each
 * make one timed wait and block), the owner has counted a single call since
 * it took the slot: then only every SP_TAKE_EVERY-th such call takes it, the
 * others count in their entry (the cost without slots, plus a few loads). */
#define SP_TAKE_EVERY 8
static __always_inline bool slot_worth_taking(struct sp_slot *s)
{
	s->misses += 1;
	return s->pending > 1 || (s->misses % SP_TAKE_EVERY) == 0;
}

/* Whether user registers `regs` were saved by a 64-bit SYSCALL instruction
 * (entry_SYSCALL_64 in arch/x86/entry/entry_64.S: the instruction puts the
 * return address in rcx and the flags in r11, so the return address lands
 * in both ip and cx, the flags in both flags and r11), not by an ia32 entry
 * (int $0x80, sysenter, a 32-bit SYSCALL), whose numbers are not ours: those
 * enter with the 32-bit code segment, or from 64-bit code by int $0x80 with
 * rcx and r11 holding whatever the caller left there (only a caller that
 * sets them to the return address and flags on purpose passes for a SYSCALL).
 * A tracer changing the registers at the syscall-entry stop, and FRED, which
 * leaves rcx and r11 alone, make this false: current_image() then asks the
 * task. */
static __always_inline bool entered_by_syscall_insn(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return regs->cs == SP_USER_CS && regs->cx == regs->ip && regs->r11 == regs->flags;
#else
	return false; /* no cache off x86_64 (the slots are off there) */
#endif
}

/* The image (thread group, its leader's start and exec id) of the current
 * task, entering a syscall with user registers `regs`: from the cache in
 * this CPU's slot `s` when the same task entered the last syscall here and
 * no task exited or exec'd since (loads and compares, no helper call),
 * else from the task (bpf_get_current_task_btf()), then cached. False for a
 * compat syscall, which is not counted. */
static __always_inline bool current_image(struct sp_slot *s, struct pt_regs *regs, __u32 *tgid,
					  __u64 *start, __u64 *exec_id)
{
	__u64 events = task_events;
	struct task_struct *task, *leader;

	if (s->task_regs == (__u64)regs && s->task_events == events &&
	    entered_by_syscall_insn(regs)) {
		*tgid = s->task_tgid;
		*start = s->task_start;
		*exec_id = s->task_exec_id;
		return true;
	}
	task = bpf_get_current_task_btf();
	if (task_btf_in_compat_syscall(task))
		return false;
	leader = task->group_leader;
	*tgid = task->tgid;
	*start = leader->start_boottime;
	*exec_id = leader->self_exec_id;
	s->task_regs = (__u64)regs;
	s->task_events = events;
	s->task_tgid = *tgid;
	s->task_start = *start;
	s->task_exec_id = *exec_id;
	return true;
}

/* Count one of our syscalls, made by the current task with user registers
 * `regs`, in this CPU's slot `s` (sys_slots): while the same image keeps counting on this
 * CPU, a few plain adds with no map lookup beyond the slot's (inlined on
 * 6.10+), no locked instruction and, while the same task keeps calling, no
 * helper call. Only where the program cannot be preempted: tp_btf sys_enter
 * (the kernel disables preemption around tracepoint programs; fentry
 * programs run preemptible). s->busy keeps the fold program, which the
 * agent runs on this CPU in an interrupt, off a slot being changed (the
 * task cache is this program's alone). */
static __always_inline int count_syscall_slot(void *ctx, struct pt_regs *regs, long id,
					      struct sp_slot *s)
{
	__u64 start, exec_id;
	int took = SP_TAKEN;
	__u32 tgid;

	if (!current_image(s, regs, &tgid, &start, &exec_id))
		return 0;
	if (s->busy)
		return count_syscall(ctx, regs, id, tgid, true);
	s->busy = 1;
	barrier();
	if (s->tgid != tgid || s->start_boottime_ns != start || s->exec_id != exec_id)
		took = slot_worth_taking(s) ? slot_take(s, tgid, start, exec_id, NULL) : SP_TAKE_ENTRY;
	if (took == SP_TAKEN) {
		count_into(&s->c, false, regs, id, true);
		s->pending += 1;
		s->dirty |= slot_dirty_bits(id);
	}
	barrier();
	s->busy = 0;
	if (took == SP_TAKE_ENTRY)
		return count_syscall(ctx, regs, id, tgid, true);
	return 0;
}

/* Fold slot `s` unless a program on this CPU holds it: 0 when folded,
 * 1 when busy, 2 when the counts could not move (ring buffer full). */
static __always_inline int slot_fold_unless_busy(struct sp_slot *s)
{
	bool folded;

	if (!s)
		return 0;
	if (s->busy)
		return 1;
	s->busy = 1;
	barrier();
	folded = slot_fold(s);
	barrier();
	s->busy = 0;
	return folded ? 0 : 2;
}

/* Fold this CPU's slots (the caller is not preemptible): at an exit or exec
 * on this CPU, so that the final record carries the counts made here. */
static __always_inline void slot_fold_here(void)
{
	__u32 zero = 0;

	slot_fold_unless_busy(bpf_map_lookup_elem(&sys_slots, &zero));
	slot_fold_unless_busy(bpf_map_lookup_elem(&wake_slots, &zero));
}

/* Run by the agent on every CPU (BPF_PROG_TEST_RUN, BPF_F_TEST_RUN_ON_CPU:
 * in an interrupt on that CPU, or here with preemption off when it is the
 * agent's own) before it reads `procs`; folds both slots of the CPU, so that a read sees every event
 * counted before it. Returns 0 when folded, 1 when the slot is busy (a
 * program on that CPU is changing it: the agent tries again), 2 when the
 * ring buffer had no room for a late record (the counts wait in the slot). */
SEC("raw_tp")
int fold_cpu_slot(void *ctx)
{
	__u32 zero = 0;
	int sys, wake;

	sys = slot_fold_unless_busy(bpf_map_lookup_elem(&sys_slots, &zero));
	wake = slot_fold_unless_busy(bpf_map_lookup_elem(&wake_slots, &zero));
	if (sys == 1 || wake == 1)
		return 1; /* again: the other one's fold is a no-op then */
	return sys | wake;
}

/* Whether syscall `id` is one of ours and its group is switched on. */
static __always_inline bool syscall_counted(long id)
{
	switch (id) {
	case SP_NR_clock_gettime:
	case SP_NR_gettimeofday:
	case SP_NR_time:
		return count_clock_reads;
	case SP_NR_rt_sigprocmask:
		return count_sigprocmask;
	case SP_NR_nanosleep:
	case SP_NR_clock_nanosleep:
		return count_sleeps;
	case SP_NR_futex:
	case SP_NR_futex_waitv:
	case SP_NR_epoll_wait:
	case SP_NR_epoll_pwait:
	case SP_NR_epoll_pwait2:
	case SP_NR_poll:
	case SP_NR_ppoll:
	case SP_NR_select:
	case SP_NR_pselect6:
		return count_timed_waits;
	}
	return false;
}

static __always_inline int on_sys_enter(void *ctx, struct pt_regs *regs, long id, const bool btf)
{
	struct task_struct *task;
	struct sp_slot *slot;
	__u32 zero = 0;

	/* Untraced syscalls leave here: this is the cost every syscall pays. */
	if (!syscall_counted(id))
		return 0;
	if (!wait_is_timed(regs, id, btf))
		return 0; /* the untimed futex, poll, epoll and select calls leave here */
	if (btf) {
		/* While the findings sample some process (stack_targets_on(),
		 * seconds at a time), every process counts in its entry, where
		 * the targets are sampled: the slot path stays as it was. */
		slot = slots_on && !capture_stacks && !stack_targets_on() ?
			       bpf_map_lookup_elem(&sys_slots, &zero) :
			       NULL;
		if (slot)
			return count_syscall_slot(ctx, regs, id, slot);
		/* one helper call: the compat flag and the tgid are direct loads */
		task = bpf_get_current_task_btf();
		if (task_btf_in_compat_syscall(task))
			return 0;
		return count_syscall(ctx, regs, id, task->tgid, true);
	}
	/* raw_tp cannot dereference the task: probe reads, and the tgid from
	 * bpf_get_current_pid_tgid() (one call, cheaper than a probe read) */
	task = (struct task_struct *)bpf_get_current_task();
	if (task_in_compat_syscall(task))
		return 0;
	if (!pt_regs_offset)
		pt_regs_offset = (__u64)regs - (__u64)BPF_CORE_READ(task, stack);
	return count_syscall(ctx, regs, id, bpf_get_current_pid_tgid() >> 32, false);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id)
{
	probe_ran(SP_PROBE_SYS_ENTER);
	return on_sys_enter(ctx, regs, id, true);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id)
{
	probe_ran(SP_PROBE_SYS_ENTER);
	return on_sys_enter(ctx, regs, id, false);
}

/*
 * fentry twins of sys_enter: one program on each of the syscall functions.
 * Cheaper where the kernel allows fentry: no syscall tracepoint is enabled,
 * so the other syscalls keep the fast syscall path and pay nothing, and
 * compat syscalls enter other functions (__ia32_sys_*, __arm64_compat_sys_*).
 * The argument is the user register set, as for sys_enter. arm64 has
 * fentry from 6.0 (its BPF trampoline), and no time, epoll_wait, poll or
 * select syscall. The tgid is read from bpf_get_current_task_btf(): one
 * call like bpf_get_current_pid_tgid(), and one the arm64 JIT inlines.
 */
#if defined(__TARGET_ARCH_x86)
#define SP_SYSCALL_FN_PREFIX "__x64_sys_"
#else
#define SP_SYSCALL_FN_PREFIX "__arm64_sys_"
#endif
#define SP_SYSCALL_FENTRY(name)                                                \
	SEC("fentry/" SP_SYSCALL_FN_PREFIX #name)                              \
	int BPF_PROG(sys_enter_fentry_##name, struct pt_regs *regs)            \
	{                                                                      \
		probe_ran(SP_PROBE_SYS_ENTER);                                 \
		if (!syscall_counted(SP_NR_##name))                            \
			return 0;                                              \
		if (!wait_is_timed(regs, SP_NR_##name, true))                 \
			return 0;                                              \
		return count_syscall(ctx, regs, SP_NR_##name,                  \
				     bpf_get_current_task_btf()->tgid, true);  \
	}

SP_SYSCALL_FENTRY(clock_gettime)
SP_SYSCALL_FENTRY(gettimeofday)
SP_SYSCALL_FENTRY(rt_sigprocmask)
SP_SYSCALL_FENTRY(nanosleep)
SP_SYSCALL_FENTRY(clock_nanosleep)
SP_SYSCALL_FENTRY(futex)
SP_SYSCALL_FENTRY(futex_waitv)
SP_SYSCALL_FENTRY(epoll_pwait)
SP_SYSCALL_FENTRY(epoll_pwait2)
SP_SYSCALL_FENTRY(ppoll)
SP_SYSCALL_FENTRY(pselect6)
#if defined(__TARGET_ARCH_x86)
SP_SYSCALL_FENTRY(time)
SP_SYSCALL_FENTRY(epoll_wait)
SP_SYSCALL_FENTRY(poll)
SP_SYSCALL_FENTRY(select)
#endif

/* ---- timer wakeups ------------------------------------------------------ */

/*
 * A wakeup is a timer wakeup when sched:sched_waking fires on a CPU between
 * timer:hrtimer_expire_entry and timer:hrtimer_expire_exit: the expiring
 * timer's callback made it (kernel/time/hrtimer.c, __run_hrtimer()). That
 * covers the sleepers (hrtimer_wakeup: nanosleep, clock_nanosleep, and the
 * timeouts of futex, epoll, poll and select, via schedule_hrtimeout_range())
 * and timers that wake a task indirectly (timerfd_tmrproc wakes the reader
 * or poller of a timerfd; it_real_fn and posix_timer_fn signal the process).
 * try_to_wake_up() traces sched_waking only for a task that really sleeps,
 * so a timer that fires after its task woke up otherwise counts nothing, and
 * a wait ended early by an event cancels its timer and counts nothing.
 */

/* bpf_snprintf formats need a read-only map. */
static const char timer_fn_format[] = "%ps";

/* Whether `name` (a kallsyms name, maybe with an LTO ".llvm.N" suffix)
 * is `want`. */
static __always_inline bool fn_name_is(const char *name, const char *want, int len)
{
	for (int i = 0; i < len; i++)
		if (name[i] != want[i])
			return false;
	return name[len] == '\0' || name[len] == '.';
}

#define SP_FN_IS(name, lit) fn_name_is(name, lit, sizeof(lit) - 1)

/* Kernels without bpf_snprintf() (before 5.13): the agent gives the
 * callbacks' addresses from /proc/kallsyms (hrtimer_wakeup, timerfd_tmrproc,
 * it_real_fn, posix_timer_fn, in that order) and sets timer_fns_by_address;
 * the verifier then prunes the bpf_snprintf() call as dead code. */
const volatile bool timer_fns_by_address = false;
const volatile __u64 timer_fn_addrs[4] = {};

/* enum sp_timer_fn of an hrtimer callback address: by name, once per address. */
static __noinline __u32 timer_fn_kind(__u64 fn)
{
	char name[32] = {};
	__u32 *known, kind;

	if (timer_fns_by_address) {
		if (fn == timer_fn_addrs[0])
			return SP_TIMER_FN_SLEEPER;
		if (fn == timer_fn_addrs[1])
			return SP_TIMER_FN_TIMERFD;
		if (fn == timer_fn_addrs[2] || fn == timer_fn_addrs[3])
			return SP_TIMER_FN_POSIX;
		return SP_TIMER_FN_OTHER;
	}
	known = bpf_map_lookup_elem(&timer_fns, &fn);
	if (known)
		return *known;
	if (bpf_snprintf(name, sizeof(name), timer_fn_format, &fn, sizeof(fn)) < 0)
		return SP_TIMER_FN_OTHER;
	if (SP_FN_IS(name, "hrtimer_wakeup"))
		kind = SP_TIMER_FN_SLEEPER;
	else if (SP_FN_IS(name, "timerfd_tmrproc"))
		kind = SP_TIMER_FN_TIMERFD;
	else if (SP_FN_IS(name, "it_real_fn") || SP_FN_IS(name, "posix_timer_fn"))
		kind = SP_TIMER_FN_POSIX;
	else
		kind = SP_TIMER_FN_OTHER;
	bpf_map_update_elem(&timer_fns, &fn, &kind, BPF_ANY); /* a full cache only costs a format */
	return kind;
}

/* enum sp_timer_fn of the hrtimer callback at `fn`, from this CPU's cache
 * in `t` (a few compares, no call), else from timer_fn_kind() (a hash
 * lookup, or a format on the first expiry of `fn`), then cached. */
static __always_inline __u32 timer_fn_kind_cached(struct sp_timer_cpu *t, __u64 fn)
{
	__u32 slot, kind;

#pragma unroll
	for (int i = 0; i < SP_TIMER_FN_CACHE; i++)
		if (t->fn_addr[i] == fn)
			return t->fn_kind[i];
	kind = timer_fn_kind(fn);
	slot = t->fn_next++ & (SP_TIMER_FN_CACHE - 1);
	barrier_var(slot);
	if (slot < SP_TIMER_FN_CACHE) {
		t->fn_addr[slot] = fn;
		t->fn_kind[slot] = kind;
	}
	return kind;
}

/* The innermost timer expiring on this CPU, or NULL; drops frames whose
 * _exit was never seen (SP_TIMER_FRAME_MAX_JIFFIES), so one lost event
 * cannot make every later wakeup on the CPU look like a timer's. `now`:
 * bpf_jiffies64(). */
static __always_inline struct sp_timer_frame *timer_top(struct sp_timer_cpu *t, __u64 now)
{
	__u32 depth = t->depth, top;

	if (depth == 0)
		return NULL;
	top = depth - 1;
	barrier_var(top);
	if (top >= SP_TIMER_MAX_DEPTH)
		return NULL;
	if (now - t->frames[top].start_jiffies > SP_TIMER_FRAME_MAX_JIFFIES) {
		t->depth = 0;
		return NULL;
	}
	return &t->frames[top];
}

static __always_inline int on_hrtimer_expire_entry(struct hrtimer *timer, const bool btf)
{
	struct sp_timer_cpu *t;
	__u32 zero = 0, depth;
	__u64 now, fn;

	t = bpf_map_lookup_elem(&timer_cpu, &zero);
	if (!t)
		return 0;
	now = bpf_jiffies64();
	timer_top(t, now); /* drop stale frames first */
	depth = t->depth;
	barrier_var(depth);
	if (depth >= SP_TIMER_MAX_DEPTH)
		return 0; /* deeper than hrtimer callbacks nest */
	fn = btf ? (__u64)timer->function : (__u64)BPF_CORE_READ(timer, function);
	t->frames[depth].hrtimer = (__u64)timer;
	t->frames[depth].start_jiffies = now;
	t->frames[depth].fn = timer_fn_kind_cached(t, fn);
	t->depth = depth + 1;
	return 0;
}

static __always_inline int on_hrtimer_expire_exit(struct hrtimer *timer)
{
	struct sp_timer_cpu *t;
	__u32 zero = 0, depth, top;

	t = bpf_map_lookup_elem(&timer_cpu, &zero);
	if (!t || t->depth == 0)
		return 0;
	depth = t->depth;
	top = depth - 1;
	barrier_var(top);
	/* only the exit of the timer on top: an exit whose entry was not seen
	 * (attached in between, or skipped) leaves the frames alone */
	if (top < SP_TIMER_MAX_DEPTH && t->frames[top].hrtimer == (__u64)timer)
		t->depth = top;
	return 0;
}

/* The user registers of `task` (not running, or current): with a BTF
 * pointer from bpf_task_pt_regs() (kernel 5.15+), else at the offset in its
 * kernel stack that the raw_tp sys_enter program learned (any kernel; NULL
 * until it has counted a syscall). */
static __always_inline struct pt_regs *task_user_regs(struct task_struct *task, const bool btf)
{
	if (btf)
		return (struct pt_regs *)bpf_task_pt_regs(task);
	if (!pt_regs_offset)
		return NULL;
	return (struct pt_regs *)((__u64)BPF_CORE_READ(task, stack) + pt_regs_offset);
}

/* The syscall a sleeping task `p` waits in, from its user registers:
 * direct loads from BTF pointers under tp_btf (no helper call but
 * bpf_task_pt_regs()), probe reads under raw_tp. */
static __always_inline __u32 sleeper_wait(struct task_struct *p, const bool btf)
{
	struct pt_regs *regs;
	long nr;

	if ((btf ? p->flags : BPF_CORE_READ(p, flags)) & SP_PF_KTHREAD)
		return SP_WAIT_OTHER; /* no user registers */
	if (btf ? task_btf_in_compat_syscall(p) : task_in_compat_syscall(p))
		return SP_WAIT_OTHER; /* ia32 or AArch32 syscall numbers */
	regs = task_user_regs(p, btf);
	if (!regs)
		return SP_WAIT_OTHER; /* no syscall counted yet */
	nr = btf ? SP_SYSCALL_NR_BTF(regs) : SP_SYSCALL_NR(regs);
	switch (nr) {
	case SP_NR_nanosleep:
		return SP_WAIT_NANOSLEEP;
	case SP_NR_clock_nanosleep:
		return SP_WAIT_CLOCK_NANOSLEEP;
	case SP_NR_futex:
	case SP_NR_futex_waitv:
		return SP_WAIT_FUTEX;
	case SP_NR_epoll_wait:
	case SP_NR_epoll_pwait:
	case SP_NR_epoll_pwait2:
		return SP_WAIT_EPOLL_WAIT;
	case SP_NR_poll:
	case SP_NR_ppoll:
		return SP_WAIT_POLL;
	case SP_NR_select:
	case SP_NR_pselect6:
		return SP_WAIT_SELECT;
	}
	return SP_WAIT_OTHER;
}


/* Count a timer wakeup of task `p` (thread group `tgid`) by `wait` in its
 * `procs` entry, with atomic adds (the path without slots). */
static __always_inline int count_wakeup_entry(__u32 tgid, struct task_struct *p, __u32 wait)
{
	struct sp_proc *proc = proc_of(tgid, p); /* counts a full table as lost */

	if (!proc)
		return 0;
	SP_INC_AT(true, proc->c.timer_wakeups, wait);
	window_add(proc, timer_window_now(), 1);
	return 0;
}

/* Count a timer wakeup of task `p` (a BTF pointer) by `wait` in this CPU's
 * wakeup slot: as count_syscall_slot(), for the woken image rather than the
 * current one. Runs in the timer's interrupt (or softirq: a nested run of
 * this program is skipped by the kernel, and the fold honours `busy`). The
 * slot keeps its owner's wakeups of the current timer-loop window and hands
 * them to the entry when the window changes, so the entry's window test
 * sees them once a second, not per wakeup. */
static __always_inline int count_wakeup_slot(struct task_struct *p, __u32 wait)
{
	struct task_struct *leader = p->group_leader;
	__u64 start = leader->start_boottime;
	__u64 exec_id = leader->self_exec_id;
	__u32 tgid = p->tgid, zero = 0, win;
	struct sp_slot *s = bpf_map_lookup_elem(&wake_slots, &zero);
	struct sp_proc *proc;
	int took = SP_TAKEN;

	if (!s || s->busy)
		goto entry;
	s->busy = 1;
	barrier();
	if (s->tgid != tgid || s->start_boottime_ns != start || s->exec_id != exec_id)
		took = slot_worth_taking(s) ? slot_take(s, tgid, start, exec_id, p) : SP_TAKE_ENTRY;
	if (took == SP_TAKEN) {
		SP_INC_AT(false, s->c.timer_wakeups, wait);
		s->pending += 1;
		s->dirty |= SP_DIRTY_WAKEUPS;
		win = timer_window_now();
		if (s->win != win) {
			/* hand the last window's wakeups to the entry (once a second) */
			proc = s->win_wakeups ? bpf_map_lookup_elem(&procs, &tgid) : NULL;
			if (proc && proc->start_boottime_ns == start && proc->exec_id == exec_id)
				window_add(proc, s->win, s->win_wakeups);
			s->win = win;
			s->win_wakeups = 0;
		}
		s->win_wakeups += 1;
	}
	barrier();
	s->busy = 0;
	if (took != SP_TAKE_ENTRY)
		return 0;
entry:
	return count_wakeup_entry(tgid, p, wait);
}

static __always_inline int on_sched_waking(struct task_struct *p, const bool btf)
{
	struct sp_timer_frame *top;
	struct sp_timer_cpu *t;
	__u32 zero = 0, wait;
	__u64 now;

	t = bpf_map_lookup_elem(&timer_cpu, &zero);
	if (!t || t->depth == 0)
		return 0; /* every wakeup not made by a timer leaves here */
	now = bpf_jiffies64();
	top = timer_top(t, now);
	if (!top)
		return 0;
	switch (top->fn) {
	case SP_TIMER_FN_SLEEPER:
		wait = sleeper_wait(p, btf);
		break;
	case SP_TIMER_FN_TIMERFD:
		wait = SP_WAIT_TIMERFD;
		break;
	case SP_TIMER_FN_POSIX:
		wait = SP_WAIT_POSIX_TIMER;
		break;
	default:
		wait = SP_WAIT_OTHER;
	}
	if (btf && slots_on)
		return count_wakeup_slot(p, wait);
	return count_wakeup_entry(btf ? p->tgid : BPF_CORE_READ(p, tgid), p, wait);
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(hrtimer_expire_entry_btf, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_ENTRY);
	return on_hrtimer_expire_entry(timer, true);
}

SEC("raw_tp/hrtimer_expire_entry")
int BPF_PROG(hrtimer_expire_entry_raw, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_ENTRY);
	return on_hrtimer_expire_entry(timer, false);
}

SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(hrtimer_expire_exit_btf, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_EXIT);
	return on_hrtimer_expire_exit(timer);
}

SEC("raw_tp/hrtimer_expire_exit")
int BPF_PROG(hrtimer_expire_exit_raw, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_EXIT);
	return on_hrtimer_expire_exit(timer);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct *p)
{
	probe_ran(SP_PROBE_SCHED_WAKING);
	return on_sched_waking(p, true);
}

SEC("raw_tp/sched_waking")
int BPF_PROG(sched_waking_raw, struct task_struct *p)
{
	probe_ran(SP_PROBE_SCHED_WAKING);
	return on_sched_waking(p, false);
}

/* ---- THP faults -------------------------------------------------------- */

/* MADV_COLLAPSE allocates huge pages in process context with a THP-like
 * mask but is a collapse, not a fault: recognise it by the syscall the
 * task is in. */
static __always_inline bool in_madv_collapse(struct task_struct *task, const bool btf)
{
	struct pt_regs *regs = task_user_regs(task, btf);
	long nr;

	if (!regs)
		return false;
	nr = SP_SYSCALL_NR(regs);

	if (nr == SP_NR_madvise)
		return PT_REGS_PARM3_CORE_SYSCALL(regs) == SP_MADV_COLLAPSE;
	if (nr == SP_NR_process_madvise)
		return PT_REGS_PARM4_CORE_SYSCALL(regs) == SP_MADV_COLLAPSE;
	return false;
}

#ifdef SP_FAULT_INJECTION
/* Tests only (--bpf.test-refuse-probe mm_page_alloc, in the agent built
 * with the cargo feature fault-injection, which defines SP_FAULT_INJECTION):
 * call a helper no kernel has, so the verifier refuses both programs of
 * this hook for real, as 5.10 refuses bpf_get_current_task_btf(). False,
 * the verifier prunes the call as dead code. */
const volatile bool test_refuse_page_alloc = false;
static long (*const sp_no_such_helper)(void) = (void *)0x7fff;
#endif

/* `btf`: the tp_btf program, which may use the BTF-pointer helpers
 * (bpf_get_current_task_btf() 5.11+, bpf_task_pt_regs() 5.15+); the raw_tp
 * one reads the same fields with probe reads, so it loads on 5.10. */
static __always_inline int on_page_alloc(void *ctx, bool failed, unsigned int order, gfp_t gfp,
					 const bool btf)
{
	struct task_struct *task;
	struct sp_proc *p;
	__u32 tgid;

#ifdef SP_FAULT_INJECTION
	if (test_refuse_page_alloc)
		sp_no_such_helper();
#endif
	if (order != SP_HPAGE_PMD_ORDER)
		return 0; /* every 4 KiB allocation leaves here */
	if ((gfp & SP_GFP_THP_FAULT_BITS) != SP_GFP_THP_FAULT_BITS)
		return 0;
	task = btf ? bpf_get_current_task_btf() : (struct task_struct *)bpf_get_current_task();
	if (BPF_CORE_READ(task, flags) & SP_PF_KTHREAD)
		return 0; /* khugepaged and other kernel threads */
	if (in_madv_collapse(task, btf))
		return 0;
	/*
	 * A failed first attempt that carries __GFP_THISNODE with direct reclaim
	 * allowed is retried without __GFP_THISNODE by alloc_pages_mpol()
	 * (mm/mempolicy.c): only the last attempt decides success or fallback.
	 */
	if (failed && (gfp & SP_GFP_THISNODE) && (gfp & SP_GFP_DIRECT_RECLAIM))
		return 0;
	tgid = btf ? task->tgid : bpf_get_current_pid_tgid() >> 32;
	p = proc_of(tgid, NULL);
	if (!p)
		return 0;
	/* The user stack of a fault is the code that touched the page (a JVM
	 * pre-touching its heap, malloc growing an arena). */
	if (capture_stacks || sample_thp_faults) {
		if (stack_due(p, SP_CALLSITE_THP_FAULT))
			sample_stack(ctx, p, SP_CALLSITE_THP_FAULT, task_user_regs(task, btf));
	} else if (stack_targets_on()) {
		sample_if_wanted(ctx, p, tgid, SP_CALLSITE_THP_FAULT, task_user_regs(task, btf));
	}
	if (failed)
		__sync_fetch_and_add(&p->c.thp_fault_fallback, 1);
	else
		__sync_fetch_and_add(&p->c.thp_fault_alloc, 1);
	return 0;
}

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(mm_page_alloc_btf, struct page *page, unsigned int order, gfp_t gfp)
{
	probe_ran(SP_PROBE_MM_PAGE_ALLOC);
	return on_page_alloc(ctx, page == NULL, order, gfp, true);
}

SEC("raw_tp/mm_page_alloc")
int BPF_PROG(mm_page_alloc_raw, struct page *page, unsigned int order, gfp_t gfp)
{
	probe_ran(SP_PROBE_MM_PAGE_ALLOC);
	return on_page_alloc(ctx, page == NULL, order, gfp, false);
}

/* ---- compaction -------------------------------------------------------- */

static __always_inline int on_compaction_begin(struct compact_control *cc)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct sp_compaction_start s = {};

	s.start_ns = bpf_ktime_get_ns();
	/* compact_zone_order() sets direct_compaction; kcompactd (including
	 * proactive compaction) is a kernel thread; what is left is a process
	 * writing /proc/sys/vm/compact_memory or a node's sysfs compact file. */
	if (BPF_CORE_READ(cc, direct_compaction))
		s.trigger = SP_COMPACTION_DIRECT;
	else if (BPF_CORE_READ(task, flags) & SP_PF_KTHREAD)
		s.trigger = SP_COMPACTION_KCOMPACTD;
	else
		s.trigger = SP_COMPACTION_MANUAL;
	if (bpf_map_update_elem(&compaction_starts, &tid, &s, BPF_ANY))
		lost_inc(SP_LOST_COMPACTION_TABLE_FULL);
	return 0;
}

static __always_inline int on_compaction_end(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct sp_compaction_start *s;
	struct sp_proc *p;
	__u64 elapsed;
	__u32 trigger;

	s = bpf_map_lookup_elem(&compaction_starts, &tid);
	if (!s)
		return 0; /* began before we attached */
	elapsed = bpf_ktime_get_ns() - s->start_ns;
	trigger = s->trigger;
	bpf_map_delete_elem(&compaction_starts, &tid);
	p = proc_current();
	if (!p)
		return 0;
	barrier_var(trigger);
	if (trigger >= SP_COMPACTION_TRIGGER_COUNT)
		return 0;
	__sync_fetch_and_add(&p->c.compaction_runs[trigger], 1);
	__sync_fetch_and_add(&p->c.compaction_ns[trigger], elapsed);
	return 0;
}

SEC("tp_btf/mm_compaction_begin")
int BPF_PROG(mm_compaction_begin_btf, struct compact_control *cc)
{
	probe_ran(SP_PROBE_MM_COMPACTION_BEGIN);
	return on_compaction_begin(cc);
}

SEC("raw_tp/mm_compaction_begin")
int BPF_PROG(mm_compaction_begin_raw, struct compact_control *cc)
{
	probe_ran(SP_PROBE_MM_COMPACTION_BEGIN);
	return on_compaction_begin(cc);
}

SEC("tp_btf/mm_compaction_end")
int BPF_PROG(mm_compaction_end_btf)
{
	probe_ran(SP_PROBE_MM_COMPACTION_END);
	return on_compaction_end();
}

SEC("raw_tp/mm_compaction_end")
int BPF_PROG(mm_compaction_end_raw)
{
	probe_ran(SP_PROBE_MM_COMPACTION_END);
	return on_compaction_end();
}

/* ---- process lifecycle: fold final counts, free the entry --------------- */

/* Move the entry `p` of exited `tgid`, whose record did not fit the ring
 * buffer, to a parked key (>= SP_PARKED_KEY_BASE) for the agent to fold, so
 * that a new process on the recycled pid starts a fresh entry even while
 * the agent is behind. The copy is made flagged and the original deleted
 * unflagged, so the agent never folds both. Nine bits of the start time
 * tell apart two parked processes of one pid; on a clash, or with the
 * table full, the entry stays under its tgid, flagged, and proc_create()
 * retires it first. */
static __always_inline void proc_park(__u32 tgid, struct sp_proc *p)
{
	__u32 key = SP_PARKED_KEY_BASE | ((__u32)(p->start_boottime_ns >> 12) << 22) | tgid;
	__u32 slot = 1;
	struct sp_proc *copy = bpf_map_lookup_elem(&proc_scratch, &slot);

	__sync_fetch_and_add(&exited_flagged, 1);
	if (copy) {
		bpf_probe_read_kernel(copy, sizeof(*copy), p);
		copy->flags |= SP_PROC_EXITED;
		copy->tgid = tgid;
		if (bpf_map_update_elem(&procs, &key, copy, BPF_NOEXIST) == 0) {
			bpf_map_delete_elem(&procs, &tgid);
			return;
		}
	}
	p->flags |= SP_PROC_EXITED;
}

/* Most spins an exit waits for a fold from another CPU to finish its adds
 * (a few hundred ns; a fold interrupted for longer is not waited for). */
#define SP_RETIRE_SPINS 4096

/* Mark entry `p` retiring, then wait until no fold from a slot on another
 * CPU is adding to it (see entry_fold_begin()): from then on its counts
 * change only through this CPU, so the copy in the final record is final. */
static __always_inline void entry_retiring(struct sp_proc *p)
{
	__sync_fetch_and_add(&p->retiring, 1);
	for (int i = 0; i < SP_RETIRE_SPINS && *(volatile __u32 *)&p->folders; i++)
		;
}

/* The last thread of `tgid` exited, or the group exec'd: send its final
 * counts and free its entry. With the ring buffer full, an exited entry is
 * parked for the agent to fold (nothing lost); an exec cannot be split. */
static __always_inline void proc_retire(__u32 tgid, __u32 kind)
{
	struct sp_proc *p = bpf_map_lookup_elem(&procs, &tgid);

	if (!p)
		return;
	entry_retiring(p);
	if (proc_send(tgid, p, kind))
		return;
	if (kind == SP_EVENT_EXIT) {
		if (!(p->flags & SP_PROC_EXITED))
			proc_park(tgid, p);
	} else {
		/* cannot split: later counts join this entry, under the new comm */
		lost_inc(SP_LOST_RINGBUF_FULL);
		BPF_CORE_READ_INTO(&p->comm, (struct task_struct *)bpf_get_current_task(),
				   group_leader, comm);
	}
}

static __always_inline int on_process_exit(struct task_struct *task)
{
	__sync_fetch_and_add(&task_events, 1); /* see current_image() */
	/* do_exit() decremented signal->live before this tracepoint: zero
	 * means this was the last thread of the group. */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	slot_fold_here();
	proc_retire(BPF_CORE_READ(task, tgid), SP_EVENT_EXIT);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXIT);
	return on_process_exit(task);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXIT);
	return on_process_exit(task);
}

static __always_inline int on_process_exec(struct task_struct *task)
{
	__sync_fetch_and_add(&task_events, 1); /* see current_image() */
	slot_fold_here();
	proc_retire(BPF_CORE_READ(task, tgid), SP_EVENT_EXEC);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec_btf, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXEC);
	return on_process_exec(task);
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(sched_process_exec_raw, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXEC);
	return on_process_exec(task);
}

/* ---- cgroup paths ------------------------------------------------------- */

/* Record the path of a new cgroup v2 directory while it exists: a CI job's
 * or a cron unit's cgroup is often removed before the agent could find it
 * by walking cgroupfs. Only the default (v2) hierarchy, hierarchy_id 0:
 * kernfs ids of v1 hierarchies are another namespace. */
static __always_inline int on_cgroup_mkdir(struct cgroup *cgrp, const char *path)
{
	struct sp_cgroup_event *e;

	if (BPF_CORE_READ(cgrp, root, hierarchy_id) != 0)
		return 0;
	e = bpf_ringbuf_reserve(&cgroup_events, sizeof(*e), 0);
	if (!e) {
		lost_inc(SP_LOST_CGROUP_NAME);
		return 0;
	}
	e->id = BPF_CORE_READ(cgrp, kn, id);
	if (bpf_probe_read_kernel_str(e->path, sizeof(e->path), path) < 0)
		e->path[0] = 0;
	bpf_ringbuf_submit(e, ring_wakeup(&cgroup_events));
	return 0;
}

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(cgroup_mkdir_btf, struct cgroup *cgrp, const char *path)
{
	probe_ran(SP_PROBE_CGROUP_MKDIR);
	return on_cgroup_mkdir(cgrp, path);
}

SEC("raw_tp/cgroup_mkdir")
int BPF_PROG(cgroup_mkdir_raw, struct cgroup *cgrp, const char *path)
{
	probe_ran(SP_PROBE_CGROUP_MKDIR);
	return on_cgroup_mkdir(cgrp, path);
}
