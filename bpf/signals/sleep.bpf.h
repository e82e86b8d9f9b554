/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sleep signal: nanosleep and clock_nanosleep calls by clock and mode,
 * and their requested lengths (core/timeouts.h, shared with the timer
 * signal, which counts the same two syscalls as timed waits). Its syscalls
 * and their columns are in core/syscall_table.h (group SLEEPS).
 */
#ifndef SP_SIGNALS_SLEEP_H
#define SP_SIGNALS_SLEEP_H

#include "classify.h"
#include "core/arch.h"
#include "core/counting.h"
#include "core/timeouts.h"

/* Count the calls by clock and mode (sleep_calls): the sleep signal's
 * switch. Their lengths are counted whenever the group SLEEPS is, by either
 * signal. */
const volatile bool count_sleep_calls = false;

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

/* nanosleep(rqtp, rmtp): hrtimer_nanosleep(..., CLOCK_MONOTONIC). */
static __always_inline void count_nanosleep(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	count_sleep(c, shared, SP_SLEEP_NANOSLEEP, SP_CLOCK_MONOTONIC, SP_SLEEP_RELATIVE,
		    (const void *)SP_SYSCALL_ARG(btf, regs, 1));
}

/* clock_nanosleep(clockid, flags, rqtp, rmtp). */
static __always_inline void count_clock_nanosleep(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	count_sleep(c, shared, SP_SLEEP_CLOCK_NANOSLEEP,
		    sp_classify_clockid((__s32)SP_SYSCALL_ARG(btf, regs, 1)),
		    (SP_SYSCALL_ARG(btf, regs, 2) & SP_TIMER_ABSTIME) ? SP_SLEEP_ABSOLUTE
								      : SP_SLEEP_RELATIVE,
		    (const void *)SP_SYSCALL_ARG(btf, regs, 3));
}

/* The fold group of the sleep calls (compose/slots.h). */
static __always_inline void fold_sleep_calls(struct sp_counters *from, struct sp_counters *to,
					     __u64 dirty)
{
	if (dirty & (SP_DIRTY_SLEEP_CALLS << SP_SLEEP_NANOSLEEP))
		SP_FOLD_WORDS(from->sleep_calls[0], to->sleep_calls[0], SP_WORDS(from->sleep_calls[0]));
	if (dirty & (SP_DIRTY_SLEEP_CALLS << SP_SLEEP_CLOCK_NANOSLEEP))
		SP_FOLD_WORDS(from->sleep_calls[1], to->sleep_calls[1], SP_WORDS(from->sleep_calls[1]));
}

#endif /* SP_SIGNALS_SLEEP_H */
