/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The process lifecycle hooks: an exit or exec first folds this CPU's
 * combining slots (compose/slots.h), then retires the entry
 * (core/lifecycle.h).
 */
#ifndef SP_COMPOSE_LIFECYCLE_H
#define SP_COMPOSE_LIFECYCLE_H

#include "core/lifecycle.h"
#include "core/state.h"
#include "compose/slots.h"
#include "signals/fork.bpf.h"

static __always_inline int on_process_exit(struct task_struct *task)
{
	__sync_fetch_and_add(&task_events, 1); /* see current_image() */
	/* do_exit() decremented signal->live before this tracepoint: zero
	 * means this was the last thread of the group. */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	slot_fold_here();
	proc_retire(BPF_CORE_READ(task, tgid), SP_EVENT_EXIT);
	fork_child_exits(BPF_CORE_READ(task, tgid));
	return 0;
}

static __always_inline int on_process_exec(struct task_struct *task)
{
	__sync_fetch_and_add(&task_events, 1); /* see current_image() */
	slot_fold_here();
	proc_retire(BPF_CORE_READ(task, tgid), SP_EVENT_EXEC);
	fork_child_execs(BPF_CORE_READ(task, tgid));
	return 0;
}

#endif /* SP_COMPOSE_LIFECYCLE_H */
