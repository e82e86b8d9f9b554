/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The purge signal: calls that give a process's memory back to the kernel.
 * An allocator that returns freed memory eagerly (jemalloc with
 * dirty_decay_ms:0, glibc's malloc_trim or an mmap threshold below the
 * buffers it frees, the Go runtime's scavenger under debug.FreeOSMemory)
 * gives pages back and faults them in again thousands of times a second:
 * each round a system call, a TLB shootdown on every CPU that ran the
 * process's threads, and refaults into zeroed pages.
 *
 * Counted at sys_enter, with no sys_exit program, from the arguments:
 * madvise(addr, len, advice) when the advice gives pages back (enum
 * sp_purge_call: MADV_DONTNEED, MADV_FREE, or MADV_REMOVE, MADV_PAGEOUT,
 * MADV_DONTNEED_LOCKED), and every munmap(addr, len); the bytes are the
 * length as asked (the kernel rounds it up to a page). A call the kernel
 * refuses (EINVAL, ENOMEM) is counted as made, as strace shows it.
 *
 * Cost on a call: two argument reads and two adds, no helper call. Its
 * syscalls and its columns are in core/syscall_table.h (group PURGES).
 *
 * The shootdowns (x86_64 only): tlb:tlb_flush with reason
 * TLB_REMOTE_SEND_IPI is traced by native_flush_tlb_multi()
 * (arch/x86/mm/tlb.c) on the CPU of the task that changed its mappings,
 * once per flush of other CPUs, before the IPIs go out (a CPU in lazy TLB
 * mode may then be skipped: "traced, but would not happen", as the kernel
 * says). The same tracepoint fires on every switch between processes
 * (reason TLB_FLUSH_ON_TASK_SWITCH): those runs leave at the first test.
 * arm64 broadcasts TLB invalidations in hardware, with no IPI and no such
 * tracepoint.
 */
#ifndef SP_SIGNALS_PURGE_H
#define SP_SIGNALS_PURGE_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/counting.h"
#include "core/procs.h"

/* The kernel's advice values (include/uapi/asm-generic/mman-common.h). */
#define SP_MADV_DONTNEED 4
#define SP_MADV_FREE 8
#define SP_MADV_REMOVE 9
#define SP_MADV_PAGEOUT 21
#define SP_MADV_DONTNEED_LOCKED 24

/* The class of a madvise advice; SP_PURGE_CALL_COUNT: gives nothing back. */
static __always_inline __u32 madv_purge_class(int advice)
{
	switch (advice) {
	case SP_MADV_DONTNEED:
		return SP_PURGE_MADV_DONTNEED;
	case SP_MADV_FREE:
		return SP_PURGE_MADV_FREE;
	case SP_MADV_REMOVE:
	case SP_MADV_PAGEOUT:
	case SP_MADV_DONTNEED_LOCKED:
		return SP_PURGE_MADV_OTHER;
	default:
		return SP_PURGE_CALL_COUNT;
	}
}

/* The gate (the table's gate column): a madvise whose advice gives pages
 * back. Its third argument, an int. */
static __always_inline bool gate_madv_purge(struct pt_regs *regs, const bool btf)
{
	return madv_purge_class((int)SP_SYSCALL_ARG(btf, regs, 3)) != SP_PURGE_CALL_COUNT;
}

/* Add one call of `class` and its length argument. */
static __always_inline void count_purge(struct sp_counters *c, const bool shared, __u32 class,
					__u64 len)
{
	barrier_var(class);
	if (class >= SP_PURGE_CALL_COUNT)
		return;
	SP_ADD(shared, &c->purge_calls[class], 1);
	SP_ADD(shared, &c->purge_bytes[class], len);
}

/* madvise() that gives pages back (its gate passed): by advice. */
static __always_inline void count_madvise_purge(struct sp_counters *c, const bool shared,
						struct pt_regs *regs, const bool btf)
{
	count_purge(c, shared, madv_purge_class((int)SP_SYSCALL_ARG(btf, regs, 3)),
		    SP_SYSCALL_ARG(btf, regs, 2));
}

/* munmap(): every call. */
static __always_inline void count_munmap(struct sp_counters *c, const bool shared,
					 struct pt_regs *regs, const bool btf)
{
	count_purge(c, shared, SP_PURGE_MUNMAP, SP_SYSCALL_ARG(btf, regs, 2));
}

/* enum tlb_flush_reason (include/linux/mm_types.h) */
#define SP_TLB_REMOTE_SEND_IPI 4

/* tlb:tlb_flush: a remote flush the current process asked for. */
static __always_inline int on_tlb_flush(int reason, const bool btf)
{
	struct task_struct *task;
	struct sp_proc *p;
	__u32 tgid;

	if (reason != SP_TLB_REMOTE_SEND_IPI)
		return 0; /* every switch between processes leaves here */
	task = btf ? bpf_get_current_task_btf() : (struct task_struct *)bpf_get_current_task();
	/* A kernel thread's (reclaim, compaction, khugepaged) is no process's;
	 * an exiting task's (its address space torn down, exit_mmap()) comes
	 * after its exit record since 6.16 moved sched_process_exit before
	 * exit_mm(), and would make a new entry that no exit removes. */
	if (BPF_CORE_READ(task, flags) & (SP_PF_KTHREAD | SP_PF_EXITING))
		return 0;
	/* Into an entry that a counted event made, never a new one: a child's
	 * first copy-on-write faults flush the CPUs its parent ran on right
	 * after fork, before it names itself (prctl PR_SET_NAME) or moves to
	 * its cgroup, and an entry made then would keep the parent's comm and
	 * cgroup for all the child's counts. A process's flushes before its
	 * first counted call are not counted; a purging process has made one. */
	tgid = bpf_get_current_pid_tgid() >> 32;
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (p && !(p->flags & SP_PROC_EXITED))
		__sync_fetch_and_add(&p->c.tlb_shootdowns, 1);
	return 0;
}

/* The fold group of the purges (compose/slots.h). */
static __always_inline void fold_purge(struct sp_counters *from, struct sp_counters *to,
				       __u64 dirty)
{
	if (dirty & SP_DIRTY_PURGE) {
		SP_FOLD_WORDS(from->purge_calls, to->purge_calls, SP_WORDS(from->purge_calls));
		SP_FOLD_WORDS(from->purge_bytes, to->purge_bytes, SP_WORDS(from->purge_bytes));
	}
}

#endif /* SP_SIGNALS_PURGE_H */
