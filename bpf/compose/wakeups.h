/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The timer wakeups counted in this CPU's combining slot: the wakeup signal
 * (signals/timer_wakeups.bpf.h) tells a timer's wakeup and its wait, the
 * slot (compose/slots.h) holds it until a fold.
 */
#ifndef SP_COMPOSE_WAKEUPS_H
#define SP_COMPOSE_WAKEUPS_H

#include "slowpath.h"
#include "core/counting.h"
#include "core/slots.h"
#include "core/state.h"
#include "compose/slots.h"
#include "signals/timer_wakeups.bpf.h"

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
	struct sp_timer_frame *top = timer_expiring();
	__u32 wait;

	if (!top)
		return 0;
	wait = timer_wakeup_wait(top, p, btf);
	if (btf && slots_on)
		return count_wakeup_slot(p, wait);
	return count_wakeup_entry(btf ? p->tgid : BPF_CORE_READ(p, tgid), p, wait);
}

#endif /* SP_COMPOSE_WAKEUPS_H */
