/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sigmask signal: rt_sigprocmask calls by operation (enum
 * sp_sigmask_op), a query being the glibc getcontext() signature. Its
 * syscall and its columns are in core/syscall_table.h (group SIGPROCMASK).
 */
#ifndef SP_SIGNALS_SIGMASK_H
#define SP_SIGNALS_SIGMASK_H

#include "classify.h"
#include "core/arch.h"
#include "core/counting.h"

/* rt_sigprocmask(how, set, oldset, sigsetsize): by operation. */
static __always_inline void count_rt_sigprocmask(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	__u32 idx = sp_classify_sigmask((__s32)SP_SYSCALL_ARG(btf, regs, 1),
					 SP_SYSCALL_ARG(btf, regs, 2) == 0);

	SP_INC_AT(shared, c->sigprocmask, idx);
}

/* The fold group of the signal masks (compose/slots.h). */
static __always_inline void fold_sigmask(struct sp_counters *from, struct sp_counters *to,
					 __u64 dirty)
{
	if (dirty & SP_DIRTY_SIGMASK)
		SP_FOLD_WORDS(from->sigprocmask, to->sigprocmask, SP_WORDS(from->sigprocmask));
}

#endif /* SP_SIGNALS_SIGMASK_H */
