/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The memory signal: THP fault allocations and fallbacks (kmem:mm_page_alloc)
 * and compaction runs by trigger with their time (compaction:
 * mm_compaction_begin/end), counted for the process that caused them.
 */
#ifndef SP_SIGNALS_MEMORY_H
#define SP_SIGNALS_MEMORY_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/syscall_table.h"
#include "core/callsites.h"
#include "core/procs.h"
#include "core/stats.h"
#include "core/task_regs.h"

#define SP_MADV_COLLAPSE 25 /* include/uapi/asm-generic/mman-common.h */

/* The madvise syscalls that can ask for MADV_COLLAPSE, read here (the purge
 * signal counts madvise's purges): SP_NR_madvise is the table's
 * (core/syscall_table.h); process_madvise is counted by none. */
#define SP_NR_process_madvise 440 /* the same on both */

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

#define SP_DEFAULT_MAX_COMPACTIONS 4096

/* Compaction runs in progress, by tid (begin/end come from the same task). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_COMPACTIONS);
	__type(key, __u32);
	__type(value, struct sp_compaction_start);
} compaction_starts SEC(".maps");

/* Sample the user stack of THP faults of every process (at most one per
 * jiffy each), without being asked: set with the agent's findings. A huge
 * page fault zeroes 2 MiB (tens of us at least), so a stack walk adds little
 * to it, and the burst that makes a finding (a JVM pre-touching its heap) is
 * usually over before the agent could ask for that process's stacks. */
const volatile bool sample_thp_faults = false;

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

#endif /* SP_SIGNALS_MEMORY_H */
