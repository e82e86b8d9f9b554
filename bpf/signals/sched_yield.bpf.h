/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sched_yield signal: sched_yield(2) calls, split by whether another
 * task was runnable on the caller's CPU. A spin-wait that yields "to let
 * another thread run" (a BLAS or OpenMP pool between jobs, the Disruptor's
 * YieldingWaitStrategy, a runtime's scheduler before it parks) returns at
 * once when nothing else is runnable there: the thread burns its CPU, most of
 * it in user space between the calls.
 *
 * Told at sys_enter from the caller's runqueue as do_sched_yield()
 * (kernel/sched/syscalls.c, core.c before 6.10) finds it: the CPU's
 * rq->nr_running, which counts the caller, so more than 1 is "others". The
 * runqueue is reached from the task, task->se.cfs_rq->rq, with CO-RE: no
 * per-CPU `runqueues` ksym, which would need the kernel's own BTF at load (a
 * typed ksym) or kallsyms addresses (CAP_SYSLOG). se.cfs_rq and cfs_rq->rq
 * exist with CONFIG_FAIR_GROUP_SCHED (every distribution kernel: the cgroup
 * cpu controller needs it); without it the call is counted as "unknown".
 * The read is racy as the kernel's own unlocked reads are: a wakeup on that
 * CPU in the same instant may fall either side. A task in a throttled CFS
 * group is not in nr_running, so a sibling the quota stopped is not
 * "others", which is what the yield sees too.
 *
 * Cost on a yield: with BTF one helper call for the task and three loads
 * (se.cfs_rq, rq, nr_running); raw_tp reads them with probe reads. Its
 * syscall and its columns are in core/syscall_table.h (group YIELDS).
 */
#ifndef SP_SIGNALS_SCHED_YIELD_H
#define SP_SIGNALS_SCHED_YIELD_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/counting.h"

/* The runqueue's tasks at the call, the caller included; 0: not told. */
static __always_inline unsigned int yield_nr_running(const bool btf)
{
	if (!bpf_core_field_exists(((struct sched_entity *)0)->cfs_rq) ||
	    !bpf_core_field_exists(((struct cfs_rq *)0)->rq))
		return 0;
	if (btf) {
		/* BTF pointer walks: plain loads the JIT guards (0 on a fault) */
		struct cfs_rq *cfs_rq = bpf_get_current_task_btf()->se.cfs_rq;

		if (!cfs_rq || !cfs_rq->rq)
			return 0;
		return cfs_rq->rq->nr_running;
	}
	return BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), se.cfs_rq, rq,
			     nr_running);
}

/* sched_yield(): by what else was runnable on the CPU. */
static __always_inline void count_sched_yield(struct sp_counters *c, const bool shared,
					      struct pt_regs *regs, const bool btf)
{
	unsigned int nr_running = yield_nr_running(btf);
	__u32 idx = nr_running == 0   ? SP_YIELD_RUNNABLE_UNKNOWN
		    : nr_running == 1 ? SP_YIELD_RUNNABLE_NONE
				      : SP_YIELD_RUNNABLE_OTHERS;

	SP_INC_AT(shared, c->sched_yield, idx);
}

/* The fold group of the yields (compose/slots.h). */
static __always_inline void fold_sched_yield(struct sp_counters *from, struct sp_counters *to,
					     __u64 dirty)
{
	if (dirty & SP_DIRTY_SCHED_YIELD)
		SP_FOLD_WORDS(from->sched_yield, to->sched_yield, SP_WORDS(from->sched_yield));
}

#endif /* SP_SIGNALS_SCHED_YIELD_H */
