/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Timed waits and their requested timeouts: the exact count of timed waits
 * by enum sp_wait, and the histogram of the timeouts that sleeps
 * (signals/sleep.bpf.h) and timed waits (signals/timer.bpf.h) ask for,
 * read from the syscall's arguments at entry. Shared by both signals: a
 * sleep is a timed wait too (the first two waits).
 */
#ifndef SP_CORE_TIMEOUTS_H
#define SP_CORE_TIMEOUTS_H

#include "classify.h"
#include "core/counting.h"
#include "core/stats.h"

/* Offsets of CLOCK_REALTIME and CLOCK_TAI from CLOCK_MONOTONIC in ns, kept
 * current by the agent (every 500 ms), to turn absolute deadlines on those
 * clocks into requested lengths. BPF has no realtime clock before 6.1. */
__s64 realtime_offset_ns = 0;
__s64 tai_offset_ns = 0;

/* Add one requested timeout of `rel_ns` (>= 0) to the histogram of `wait`
 * in counters `c` (`shared`: see SP_ADD). */
static __always_inline void count_timeout(struct sp_counters *c, const bool shared, __u32 wait,
					  __u64 rel_ns)
{
	int b;

	/* cap at ~136 years so the sum cannot wrap on absurd requests */
	if (rel_ns > 0xffffffffULL * SP_NSEC_PER_SEC)
		rel_ns = 0xffffffffULL * SP_NSEC_PER_SEC;
	/* a zero timeout of poll/select/epoll/futex never sleeps: no timer */
	if (rel_ns == 0 && wait >= SP_WAIT_FUTEX)
		return;
	b = sp_timeout_bucket(rel_ns); /* compares only: no division per wait */
	if (wait >= SP_WAIT_SYSCALL_COUNT)
		return;
	SP_INC_AT(shared, c->timeout_buckets[wait], b);
	SP_ADD(shared, &c->timeout_ns[wait], rel_ns);
}

/*
 * Count one call of a counted syscall of `group` (enum sp_syscall_group)
 * that waits in `wait` (SP_WAIT_OTHER: no wait) in the exact timed-wait
 * counter, and tell whether its count function runs (reads its timeout).
 * Sleeps and the calls of other groups always run it. A timed wait runs it
 * only when it is the first of its counters' owner in this jiffy: `*read`
 * holds the jiffy of the owner's last read (a `procs` entry's, or a CPU's
 * combining slot's while one image owns it). So a process pays the read,
 * ~110 ns of user memory (measured for the bench's timed futex), at most
 * once per jiffy on each CPU it runs on: a 1 ms ticker still gives HZ
 * samples a second of the one timeout it asks for, a server making 200,000
 * waits a second pays HZ reads per CPU instead of 200,000. Sleeps keep
 * every request: each costs a context switch, so the read is cheap next to
 * it. `group` and `wait` are constants in every case of count_into(), so
 * the compiler keeps one branch. A race of two CPUs on an entry's jiffy
 * can only read one more.
 */
static __always_inline bool count_wait(struct sp_counters *c, const bool shared, __u32 group,
				       __u32 wait, __u32 *read)
{
	__u32 now;

	if (wait >= SP_WAIT_SYSCALL_COUNT)
		return true;
	SP_INC_AT(shared, c->timer_waits, wait);
	if (group != SP_SYSCALLS_TIMED_WAITS)
		return true;
	now = bpf_jiffies64(); /* a load: the JIT inlines it on 64-bit arches */
	if (*read == now)
		return false;
	*read = now;
	return true;
}

/* Now on `clock` (enum sp_clock) in ns, or -1 for a clock BPF cannot read. */
static __always_inline __s64 clock_now_ns(__u32 clock)
{
	switch (clock) {
	case SP_CLOCK_MONOTONIC:
		return bpf_ktime_get_ns();
	case SP_CLOCK_BOOTTIME:
		return bpf_ktime_get_boot_ns();
	case SP_CLOCK_REALTIME:
		return bpf_ktime_get_ns() + realtime_offset_ns;
	case SP_CLOCK_TAI:
		return bpf_ktime_get_ns() + tai_offset_ns;
	}
	return -1;
}

/* The timeout of `wait` in the user timespec at `uts`: relative when
 * `abs_clock` is negative, else a deadline on that enum sp_clock (made
 * relative to the clock's time now; a deadline already past counts as 0).
 * `timeval`: the struct holds microseconds (select). Returns -1 when the
 * request is invalid or unreadable (the wait still counts as a call). */
static __always_inline int timeout_from_user(struct sp_counters *c, const bool shared, __u32 wait,
					     const void *uts, int abs_clock, bool timeval)
{
	struct __kernel_timespec ts;
	__s64 ns, now;

	if (bpf_probe_read_user(&ts, sizeof(ts), uts)) {
		lost_inc(SP_LOST_SLEEP_UNREADABLE);
		return -1;
	}
	if (timeval) {
		if (ts.tv_nsec < 0 || ts.tv_nsec >= 1000000)
			return -1;
		ts.tv_nsec *= 1000;
	}
	if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= (__s64)SP_NSEC_PER_SEC)
		return -1; /* EINVAL */
	if (ts.tv_sec > 0xffffffffLL)
		ts.tv_sec = 0xffffffffLL;
	ns = ts.tv_sec * (__s64)SP_NSEC_PER_SEC + ts.tv_nsec;
	if (abs_clock >= 0) {
		now = clock_now_ns(abs_clock);
		if (now < 0) {
			lost_inc(SP_LOST_SLEEP_UNREADABLE);
			return -1;
		}
		ns = ns > now ? ns - now : 0;
	}
	count_timeout(c, shared, wait, ns);
	return 0;
}

/* The fold group of the timed waits (compose/slots.h): the count and the
 * histogram of each wait whose bit is set, and the sums of all of them. */
static __always_inline void fold_timeouts(struct sp_counters *from, struct sp_counters *to,
					  __u64 dirty)
{
#pragma unroll
	for (int w = 0; w < SP_WAIT_SYSCALL_COUNT; w++)
		if (dirty & (SP_DIRTY_TIMEOUTS << w)) {
			SP_FOLD_WORDS(from->timeout_buckets[w], to->timeout_buckets[w],
				      SP_WORDS(from->timeout_buckets[w]));
			SP_FOLD_WORDS(&from->timer_waits[w], &to->timer_waits[w], 1);
		}
	if (dirty & SP_DIRTY_TIMEOUTS_ALL)
		SP_FOLD_WORDS(from->timeout_ns, to->timeout_ns, SP_WORDS(from->timeout_ns));
}

#endif /* SP_CORE_TIMEOUTS_H */
