/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The user registers of a task other than the one a program got them from:
 * what the timer wakeups (the syscall a sleeper waits in) and the memory
 * signal (the syscall a faulting task is in) read.
 */
#ifndef SP_CORE_TASK_REGS_H
#define SP_CORE_TASK_REGS_H

#include "core/state.h"

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

#endif /* SP_CORE_TASK_REGS_H */
