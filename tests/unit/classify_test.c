// SPDX-License-Identifier: MIT
/*
 * Host unit test of bpf/classify.h: the same clock-id, rt_sigprocmask and
 * sleep-bucket classification code the kernel runs. Prints one line per
 * failure and a closing "N passed, N failed" line; exits 1 on any failure.
 */
#include <linux/types.h>
#include <stdio.h>
#include <time.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#include "classify.h"

static int passed, failed;

#define CHECK_EQ(got, want)                                                                 \
	do {                                                                                \
		long long g_ = (long long)(got), w_ = (long long)(want);                    \
		if (g_ == w_) {                                                             \
			passed++;                                                           \
		} else {                                                                    \
			failed++;                                                           \
			printf("FAIL %s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got, g_, \
			       w_);                                                         \
		}                                                                           \
	} while (0)

/* MAKE_PROCESS_CPUCLOCK / MAKE_THREAD_CPUCLOCK from include/linux/posix-timers_types.h */
#define CPUCLOCK_PERTHREAD_MASK 4
#define MAKE_PROCESS_CPUCLOCK(pid, clock) ((int)((~(unsigned)(pid)) << 3) | (clock))
#define MAKE_THREAD_CPUCLOCK(tid, clock) MAKE_PROCESS_CPUCLOCK(tid, (clock) | CPUCLOCK_PERTHREAD_MASK)
#define CPUCLOCK_SCHED 2
/* FD_TO_CLOCKID from the kernel's PTP selftests */
#define FD_TO_CLOCKID(fd) ((int)((~(unsigned)(fd)) << 3) | 3)

static void test_clock_ids(void)
{
	CHECK_EQ(sp_classify_clockid(CLOCK_REALTIME), SP_CLOCK_REALTIME);
	CHECK_EQ(sp_classify_clockid(CLOCK_MONOTONIC), SP_CLOCK_MONOTONIC);
	CHECK_EQ(sp_classify_clockid(CLOCK_PROCESS_CPUTIME_ID), SP_CLOCK_PROCESS_CPUTIME);
	CHECK_EQ(sp_classify_clockid(CLOCK_THREAD_CPUTIME_ID), SP_CLOCK_THREAD_CPUTIME);
	CHECK_EQ(sp_classify_clockid(CLOCK_MONOTONIC_RAW), SP_CLOCK_MONOTONIC_RAW);
	CHECK_EQ(sp_classify_clockid(CLOCK_REALTIME_COARSE), SP_CLOCK_REALTIME_COARSE);
	CHECK_EQ(sp_classify_clockid(CLOCK_MONOTONIC_COARSE), SP_CLOCK_MONOTONIC_COARSE);
	CHECK_EQ(sp_classify_clockid(CLOCK_BOOTTIME), SP_CLOCK_BOOTTIME);
	CHECK_EQ(sp_classify_clockid(CLOCK_REALTIME_ALARM), SP_CLOCK_REALTIME_ALARM);
	CHECK_EQ(sp_classify_clockid(CLOCK_BOOTTIME_ALARM), SP_CLOCK_BOOTTIME_ALARM);
	CHECK_EQ(sp_classify_clockid(CLOCK_TAI), SP_CLOCK_TAI);
	CHECK_EQ(sp_classify_clockid(10), SP_CLOCK_INVALID); /* CLOCK_SGI_CYCLE, removed */
	CHECK_EQ(sp_classify_clockid(12), SP_CLOCK_INVALID);
	CHECK_EQ(sp_classify_clockid(16), SP_CLOCK_INVALID);
	CHECK_EQ(sp_classify_clockid(0x7fffffff), SP_CLOCK_INVALID);
	CHECK_EQ(sp_classify_clockid(MAKE_PROCESS_CPUCLOCK(1234, CPUCLOCK_SCHED)), SP_CLOCK_CPU);
	CHECK_EQ(sp_classify_clockid(MAKE_THREAD_CPUCLOCK(1234, CPUCLOCK_SCHED)), SP_CLOCK_CPU);
	CHECK_EQ(sp_classify_clockid(MAKE_PROCESS_CPUCLOCK(0, 0)), SP_CLOCK_CPU);
	CHECK_EQ(sp_classify_clockid(FD_TO_CLOCKID(3)), SP_CLOCK_FD);
	CHECK_EQ(sp_classify_clockid(FD_TO_CLOCKID(1023)), SP_CLOCK_FD);
}

static void test_clock_ids_from_libc(void)
{
	clockid_t id;

	/* glibc's own encoding of a process CPU clock */
	if (clock_getcpuclockid(0, &id) == 0)
		CHECK_EQ(sp_classify_clockid(id), SP_CLOCK_CPU);
}

static void test_sigmask(void)
{
	CHECK_EQ(sp_classify_sigmask(0, 0), SP_SIGMASK_BLOCK);
	CHECK_EQ(sp_classify_sigmask(1, 0), SP_SIGMASK_UNBLOCK);
	CHECK_EQ(sp_classify_sigmask(2, 0), SP_SIGMASK_SETMASK);
	CHECK_EQ(sp_classify_sigmask(0, 1), SP_SIGMASK_QUERY); /* getcontext */
	CHECK_EQ(sp_classify_sigmask(7, 1), SP_SIGMASK_QUERY); /* how ignored */
	CHECK_EQ(sp_classify_sigmask(3, 0), SP_SIGMASK_INVALID);
	CHECK_EQ(sp_classify_sigmask(-1, 0), SP_SIGMASK_INVALID);
}

static void test_timeout_buckets(void)
{
	CHECK_EQ(sp_timeout_bucket(0), 0);
	CHECK_EQ(sp_timeout_bucket(1000), 0);		/* 1 us: le=1e-6 */
	CHECK_EQ(sp_timeout_bucket(1001), 1);
	CHECK_EQ(sp_timeout_bucket(10000), 1);
	CHECK_EQ(sp_timeout_bucket(999999), 3);
	CHECK_EQ(sp_timeout_bucket(1000000), 3);	/* 1 ms: le=0.001, the ticker */
	CHECK_EQ(sp_timeout_bucket(1000001), 4);
	CHECK_EQ(sp_timeout_bucket(100000000), 5);
	CHECK_EQ(sp_timeout_bucket(1000000000ULL), 6);	/* 1 s */
	CHECK_EQ(sp_timeout_bucket(1000000001ULL), 7);
	CHECK_EQ(sp_timeout_bucket(10000000000ULL), 7);	/* 10 s */
	CHECK_EQ(sp_timeout_bucket(10000000001ULL), 8);	/* +Inf */
	CHECK_EQ(sp_timeout_bucket(1ULL << 62), 8);
	CHECK_EQ(sp_timeout_bucket(~0ULL), 8);
}

int main(void)
{
	test_clock_ids();
	test_clock_ids_from_libc();
	test_sigmask();
	test_timeout_buckets();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
