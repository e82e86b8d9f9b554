/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The timer signal at syscall entry: the timed waits (futex, epoll, poll,
 * select) and the timeouts they request (core/timeouts.h). Its wakeups are
 * in signals/timer_wakeups.bpf.h. Its syscalls and their columns are in
 * core/syscall_table.h (group TIMED_WAITS; it counts the group SLEEPS too).
 */
#ifndef SP_SIGNALS_TIMER_H
#define SP_SIGNALS_TIMER_H

#include "classify.h"
#include "core/arch.h"
#include "core/timeouts.h"

/* include/uapi/linux/futex.h */
#define SP_FUTEX_WAIT 0
#define SP_FUTEX_LOCK_PI 6
#define SP_FUTEX_WAIT_BITSET 9
#define SP_FUTEX_WAIT_REQUEUE_PI 11
#define SP_FUTEX_LOCK_PI2 13
#define SP_FUTEX_PRIVATE_FLAG 128
#define SP_FUTEX_CLOCK_REALTIME 256

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

/* The gates of the timed waits (the table's gate column): whether the call
 * arms a timer. A timed wait with no timeout (or a zero one, which never
 * sleeps) is not counted at all. */

/* futex(uaddr, op, val, timeout, ...): a timeout and an op that waits with it. */
static __always_inline bool gate_futex(struct pt_regs *regs, const bool btf)
{
	return SP_SYSCALL_ARG(btf, regs, 4) &&
	       futex_timeout_clock(SP_SYSCALL_ARG(btf, regs, 2)) != -2;
}

/* A timespec pointer in argument 4 (futex_waitv, epoll_pwait2). */
static __always_inline bool gate_ts_arg4(struct pt_regs *regs, const bool btf)
{
	return SP_SYSCALL_ARG(btf, regs, 4);
}

/* A positive timeout in ms in argument 4 (epoll_wait, epoll_pwait). */
static __always_inline bool gate_ms_arg4(struct pt_regs *regs, const bool btf)
{
	return (int)SP_SYSCALL_ARG(btf, regs, 4) > 0;
}

/* A positive timeout in ms in argument 3 (poll). */
static __always_inline bool gate_ms_arg3(struct pt_regs *regs, const bool btf)
{
	return (int)SP_SYSCALL_ARG(btf, regs, 3) > 0;
}

/* A timespec pointer in argument 3 (ppoll). */
static __always_inline bool gate_ts_arg3(struct pt_regs *regs, const bool btf)
{
	return SP_SYSCALL_ARG(btf, regs, 3);
}

/* A timeval or timespec pointer in argument 5 (select, pselect6). */
static __always_inline bool gate_ts_arg5(struct pt_regs *regs, const bool btf)
{
	return SP_SYSCALL_ARG(btf, regs, 5);
}

/* The requested timeouts of the timed waits (the table's count column). */

static __always_inline void count_futex(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	timeout_from_user(c, shared, SP_WAIT_FUTEX, (const void *)SP_SYSCALL_ARG(btf, regs, 4), futex_timeout_clock(SP_SYSCALL_ARG(btf, regs, 2)),
			  false);
}

static __always_inline void count_futex_waitv(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	timeout_from_user(c, shared, SP_WAIT_FUTEX, (const void *)SP_SYSCALL_ARG(btf, regs, 4), sp_classify_clockid((__s32)SP_SYSCALL_ARG(btf, regs, 5)),
			  false);
}

/* epoll_wait, epoll_pwait: a timeout in ms. */
static __always_inline void count_epoll_ms(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	__s32 ms = (__s32)SP_SYSCALL_ARG(btf, regs, 4);

	count_timeout(c, shared, SP_WAIT_EPOLL_WAIT, (__u64)ms * 1000000);
}

static __always_inline void count_epoll_pwait2(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	timeout_from_user(c, shared, SP_WAIT_EPOLL_WAIT, (const void *)SP_SYSCALL_ARG(btf, regs, 4), -1,
			  false);
}

static __always_inline void count_poll(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	__s32 ms = (__s32)SP_SYSCALL_ARG(btf, regs, 3);

	count_timeout(c, shared, SP_WAIT_POLL, (__u64)ms * 1000000);
}

static __always_inline void count_ppoll(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	timeout_from_user(c, shared, SP_WAIT_POLL, (const void *)SP_SYSCALL_ARG(btf, regs, 3), -1,
			  false);
}

/* select: a struct timeval (microseconds). */
static __always_inline void count_select(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	timeout_from_user(c, shared, SP_WAIT_SELECT, (const void *)SP_SYSCALL_ARG(btf, regs, 5), -1,
			  true);
}

static __always_inline void count_pselect6(struct sp_counters *c, const bool shared,
					struct pt_regs *regs, const bool btf)
{
	timeout_from_user(c, shared, SP_WAIT_SELECT, (const void *)SP_SYSCALL_ARG(btf, regs, 5), -1,
			  false);
}

#endif /* SP_SIGNALS_TIMER_H */
