/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The clock signal: clock reads that entered the kernel (clock_gettime by
 * clock, gettimeofday, time), which the vDSO serves without a syscall
 * unless the clocksource cannot be read from user space. Its syscalls and
 * their columns are in core/syscall_table.h (group CLOCK_READS).
 */
#ifndef SP_SIGNALS_CLOCK_H
#define SP_SIGNALS_CLOCK_H

#include "classify.h"
#include "core/arch.h"
#include "core/counting.h"

/* clock_gettime(clockid, tp): by clock (enum sp_clock). */
static __always_inline void count_clock_gettime(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	__u32 idx = sp_classify_clockid((__s32)SP_SYSCALL_ARG(btf, regs, 1));

	SP_INC_AT(shared, c->clock_gettime, idx);
}

static __always_inline void count_gettimeofday(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	SP_ADD(shared, &c->gettimeofday, 1);
}

static __always_inline void count_time(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	SP_ADD(shared, &c->time, 1);
}

/* The fold group of the clock reads (compose/slots.h). */
static __always_inline void fold_clock_reads(struct sp_counters *from, struct sp_counters *to,
					     __u64 dirty)
{
	if (dirty & SP_DIRTY_CLOCK)
		SP_FOLD_WORDS(from->clock_gettime, to->clock_gettime, SP_WORDS(from->clock_gettime));
	if (dirty & SP_DIRTY_TOD) {
		SP_FOLD_WORDS(&from->gettimeofday, &to->gettimeofday, 1);
		SP_FOLD_WORDS(&from->time, &to->time, 1);
	}
}

#endif /* SP_SIGNALS_CLOCK_H */
