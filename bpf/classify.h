/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Pure classification helpers: no BPF helpers, no kernel types, so the very
 * same code runs in the kernel (core/, signals/) and in the host unit test
 * (tests/unit/classify_test.c). Needs __s32/__s64/__u32/__u64 and
 * __always_inline from the includer.
 */
#ifndef SLOWPATH_CLASSIFY_H
#define SLOWPATH_CLASSIFY_H

#include "slowpath.h"

/* include/uapi/linux/time.h, kernel/time/posix-cpu-timers.h */
#define SP_KERNEL_CLOCK_TAI 11
#define SP_CLOCKFD 3
#define SP_CLOCKFD_MASK 7
#define SP_TIMER_ABSTIME 1
#define SP_NSEC_PER_SEC 1000000000ULL

/* Map a clockid_t to enum sp_clock, as clockid_to_kclock() in
 * kernel/time/posix-timers.c would route it. */
static __always_inline __u32 sp_classify_clockid(__s32 id)
{
	if (id < 0)
		return (id & SP_CLOCKFD_MASK) == SP_CLOCKFD ? SP_CLOCK_FD : SP_CLOCK_CPU;
	if (id <= SP_CLOCK_BOOTTIME_ALARM)
		return (__u32)id; /* 0..9 are the kernel's ids */
	if (id == SP_KERNEL_CLOCK_TAI)
		return SP_CLOCK_TAI;
	return SP_CLOCK_INVALID;
}

/* rt_sigprocmask(how, set, oset, size): `set_is_null` decides a query. */
static __always_inline __u32 sp_classify_sigmask(__s32 how, int set_is_null)
{
	if (set_is_null)
		return SP_SIGMASK_QUERY;
	if (how >= 0 && how <= 2) /* SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK */
		return (__u32)how;
	return SP_SIGMASK_INVALID;
}

/*
 * Histogram bucket of a requested length of `ns` nanoseconds. Bucket i
 * (0..7) holds durations in (10^(i-7), 10^(i-6)] seconds, with the first
 * bucket starting at 0; bucket 8 holds everything above 10 s. Compares
 * only (the caller has rejected invalid timespecs): no 64-bit division on
 * the wait path.
 */
static __always_inline int sp_timeout_bucket(__u64 ns)
{
	__u64 bound = 1000; /* 1 us in ns */
	int i;

	for (i = 0; i < SP_SLEEP_BUCKET_COUNT - 1; i++) {
		if (ns <= bound)
			return i;
		bound *= 10;
	}
	return SP_SLEEP_BUCKET_COUNT - 1;
}

#endif /* SLOWPATH_CLASSIFY_H */
