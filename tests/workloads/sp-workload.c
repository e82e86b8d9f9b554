// SPDX-License-Identifier: MIT
/*
 * sp-workload: reproduces each slow path slowpath counts, with an exact,
 * known number of kernel entries, for the end-to-end tests.
 *
 *   sp-workload MODE [ARGS...]
 *
 * Prints "pid=<tgid>" first (flushed), then does exactly what MODE says and
 * exits 0. Modes:
 *   clock-vdso N          N libc clock_gettime(CLOCK_MONOTONIC): vDSO, no syscall
 *   clock-raw N [CLOCK]   N syscall(SYS_clock_gettime, CLOCK) (default MONOTONIC)
 *   gettimeofday-libc N   N libc gettimeofday(): vDSO, no syscall
 *   gettimeofday-raw N    N syscall(SYS_gettimeofday)
 *   time-raw N            N syscall(SYS_time)
 *   cputime N             N libc clock_gettime of PROCESS_CPUTIME, THREAD_CPUTIME
 *                         and a pthread_getcpuclockid() clock (N each)
 *   threads T N           T threads, each N raw clock_gettime(MONOTONIC)
 *   context N             N getcontext()+setcontext() pairs (the Ruby case)
 *   sleep N USEC          N nanosleep(USEC): glibc issues clock_nanosleep
 *   sleep-abs N USEC      N clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)
 *   thp MIB               MIB of anonymous memory with MADV_HUGEPAGE, touched
 *                         page by page (4 KiB stride)
 *   churn P K             fork P children one after another; each renames
 *                         itself "sp-churn", makes K raw clock_gettime and exits
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static long parse_count(const char *s)
{
	char *end;
	long n = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || n < 0) {
		fprintf(stderr, "sp-workload: bad count %s\n", s);
		exit(2);
	}
	return n;
}

static void raw_clock_loop(long n, clockid_t clock)
{
	struct timespec ts;

	for (long i = 0; i < n; i++)
		syscall(SYS_clock_gettime, clock, &ts);
}

static void *thread_main(void *arg)
{
	raw_clock_loop(*(long *)arg, CLOCK_MONOTONIC);
	return NULL;
}

static int run_threads(long threads, long n)
{
	pthread_t tids[64];

	if (threads < 1 || threads > 64) {
		fprintf(stderr, "sp-workload: 1..64 threads\n");
		return 2;
	}
	for (long i = 0; i < threads; i++)
		if (pthread_create(&tids[i], NULL, thread_main, &n) != 0)
			return 1;
	for (long i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	return 0;
}

static int run_cputime(long n)
{
	struct timespec ts;
	clockid_t cpu_clock;

	if (pthread_getcpuclockid(pthread_self(), &cpu_clock) != 0)
		return 1;
	for (long i = 0; i < n; i++) {
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		clock_gettime(cpu_clock, &ts);
	}
	return 0;
}

/* noinline, and the test build keeps frame pointers: the call site shows up
 * by name in slowpath doctor's stacks. */
static __attribute__((noinline)) int run_context(long n)
{
	ucontext_t ctx;

	/* Each pair: getcontext issues rt_sigprocmask(SIG_BLOCK, NULL, &old), a
	 * query; setcontext issues rt_sigprocmask(SIG_SETMASK, &set, NULL) and
	 * resumes just after getcontext, where `resumed` (on the stack, volatile)
	 * is already 1. */
	for (long i = 0; i < n; i++) {
		volatile int resumed = 0;

		getcontext(&ctx);
		if (!resumed) {
			resumed = 1;
			setcontext(&ctx);
		}
	}
	return 0;
}

static int run_sleep(long n, long usec, int absolute)
{
	struct timespec req = { .tv_sec = usec / 1000000, .tv_nsec = (usec % 1000000) * 1000 };
	struct timespec at;

	for (long i = 0; i < n; i++) {
		if (!absolute) {
			nanosleep(&req, NULL);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_nsec += req.tv_nsec;
		at.tv_sec += req.tv_sec + at.tv_nsec / 1000000000L;
		at.tv_nsec %= 1000000000L;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
	}
	return 0;
}

static int run_thp(long mib)
{
	const size_t huge = 2UL << 20;
	size_t len = (size_t)mib << 20;
	/* over-allocate so the region can start on a 2 MiB boundary */
	char *raw = mmap(NULL, len + huge, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;

	if (raw == MAP_FAILED)
		return 1;
	p = (char *)(((unsigned long)raw + huge - 1) & ~(huge - 1));
	if (madvise(p, len, MADV_HUGEPAGE) != 0) {
		perror("madvise(MADV_HUGEPAGE)");
		return 1;
	}
	for (size_t off = 0; off < len; off += 4096)
		p[off] = 1;
	munmap(raw, len + huge);
	return 0;
}

static int run_churn(long procs, long k)
{
	for (long i = 0; i < procs; i++) {
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			prctl(PR_SET_NAME, "sp-churn");
			raw_clock_loop(k, CLOCK_MONOTONIC);
			_exit(0);
		}
		if (waitpid(pid, NULL, 0) != pid)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	long n = argc > 2 ? parse_count(argv[2]) : 0;
	long m = argc > 3 ? parse_count(argv[3]) : 0;
	struct timespec ts;
	struct timeval tv;

	printf("pid=%d\n", getpid());
	fflush(stdout);

	if (!strcmp(mode, "clock-vdso")) {
		for (long i = 0; i < n; i++)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		return 0;
	}
	if (!strcmp(mode, "clock-raw")) {
		raw_clock_loop(n, argc > 3 ? (clockid_t)m : CLOCK_MONOTONIC);
		return 0;
	}
	if (!strcmp(mode, "gettimeofday-libc")) {
		for (long i = 0; i < n; i++)
			gettimeofday(&tv, NULL);
		return 0;
	}
	if (!strcmp(mode, "gettimeofday-raw")) {
		for (long i = 0; i < n; i++)
			syscall(SYS_gettimeofday, &tv, NULL);
		return 0;
	}
	if (!strcmp(mode, "time-raw")) {
		for (long i = 0; i < n; i++)
			syscall(SYS_time, NULL);
		return 0;
	}
	if (!strcmp(mode, "cputime"))
		return run_cputime(n);
	if (!strcmp(mode, "threads"))
		return run_threads(n, m);
	if (!strcmp(mode, "context"))
		return run_context(n);
	if (!strcmp(mode, "sleep"))
		return run_sleep(n, m, 0);
	if (!strcmp(mode, "sleep-abs"))
		return run_sleep(n, m, 1);
	if (!strcmp(mode, "thp"))
		return run_thp(n);
	if (!strcmp(mode, "churn"))
		return run_churn(n, m);
	fprintf(stderr, "usage: sp-workload MODE [ARGS...] (see the source)\n");
	return 2;
}
