// SPDX-License-Identifier: MIT
/*
 * hotpath: a fixed number of the events whose in-kernel cost hotpath.sh
 * compares, so that every configuration runs exactly the same load.
 *
 *   hotpath waits THREADS N USEC   each thread makes N futex waits
 *                                  (FUTEX_WAIT_PRIVATE) of USEC us that only
 *                                  their timeout ends: per wait one timed
 *                                  futex sys_enter, one hrtimer_wakeup expiry
 *                                  and one timer wakeup (sched_waking)
 *   hotpath clock N                N raw syscall(SYS_clock_gettime): the
 *                                  traced syscall the vDSO would otherwise hide
 *   hotpath untraced N             N raw syscall(SYS_getppid): a syscall
 *                                  slowpath does not count, which leaves its
 *                                  sys_enter program at the first test (the
 *                                  cost every syscall on the node pays)
 *   hotpath ready N                N epoll_wait() with a 1 s timeout on an
 *                                  eventfd that is always readable: a timed
 *                                  wait that finds its event and never
 *                                  sleeps, as a busy server's loop makes
 *   hotpath turns PROCS N          PROCS processes on CPU 0, each N times a raw
 *                                  clock_gettime then sched_yield(): the
 *                                  processes take turns, so nearly every
 *                                  counted call finds the CPU's combining slot
 *                                  another process's (the worst case of the
 *                                  slots); half the sys_enter runs are the
 *                                  untraced sched_yield
 *   hotpath localtime N            N glibc localtime() with TZ unset: one
 *                                  newfstatat of the C library's
 *                                  "/etc/localtime" literal each (the tzfile
 *                                  signal's read and count)
 *   hotpath stat-other N           N stat() of four other files in turn from
 *                                  one reused stack buffer (not read)
 *   hotpath stat-near N            the same from a reused buffer mapped
 *                                  within 8 MiB of the C library's code
 *                                  (read, compared, not counted)
 *   hotpath stats                  keep the kernel's BPF run-time statistics
 *                                  on (BPF_ENABLE_STATS, 5.8+) until SIGTERM:
 *                                  the kernel counts while any such descriptor
 *                                  is open, whatever kernel.bpf_stats_enabled
 *                                  says or another user sets it to, and stops
 *                                  when the last one closes
 *
 * Output: "calls N" ("stats on" for stats).
 */
#define _GNU_SOURCE
#include <linux/bpf.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long n_calls, usec;

static void *waiter(void *arg)
{
	struct timespec timeout = { .tv_sec = usec / 1000000, .tv_nsec = usec % 1000000 * 1000 };
	int word = 0;

	(void)arg;
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* expire at the timeout, not 50 us later */
	for (long i = 0; i < n_calls; i++)
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &timeout, NULL, 0);
	return NULL;
}

static const char *const other_paths[] = { "/etc/hostname", "/etc/hosts", "/etc/passwd", "/etc/group" };

static void stat_other(char *buf, long n)
{
	struct stat st;

	for (long i = 0; i < n; i++) {
		strcpy(buf, other_paths[i & 3]);
		stat(buf, &st);
	}
}

/* A page within 8 MiB below the C library's code, or NULL. */
static char *map_near_libc(void)
{
	uintptr_t libc = (uintptr_t)(void *)&stat & ~(uintptr_t)0xfff;
	void *p = mmap((void *)(libc - (8UL << 20)), 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "waits")) {
		int threads = atoi(argv[2]);
		pthread_t th[64];

		n_calls = atol(argv[3]);
		usec = atol(argv[4]);
		if (threads < 1 || threads > 64 || n_calls < 1 || usec < 1)
			goto usage;
		for (int i = 0; i < threads; i++)
			pthread_create(&th[i], NULL, waiter, NULL);
		for (int i = 0; i < threads; i++)
			pthread_join(th[i], NULL);
		printf("calls %ld\n", threads * n_calls);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "clock")) {
		struct timespec ts;

		n_calls = atol(argv[2]);
		for (long i = 0; i < n_calls; i++)
			syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
		printf("calls %ld\n", n_calls);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "untraced")) {
		n_calls = atol(argv[2]);
		for (long i = 0; i < n_calls; i++)
			syscall(SYS_getppid);
		printf("calls %ld\n", n_calls);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "ready")) {
		struct epoll_event ev = {.events = EPOLLIN};
		int ep = epoll_create1(0), efd = eventfd(1, 0);

		if (ep < 0 || efd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev)) {
			perror("hotpath ready");
			return 1;
		}
		n_calls = atol(argv[2]);
		for (long i = 0; i < n_calls; i++)
			if (epoll_wait(ep, &ev, 1, 1000) != 1) {
				perror("hotpath ready: epoll_wait");
				return 1;
			}
		printf("calls %ld\n", n_calls);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "yields")) {
		cpu_set_t set;

		/* pinned where it runs, nothing else of ours there: each yield
		 * finds its runqueue alone (the yield signal's "none") */
		n_calls = atol(argv[2]);
		CPU_ZERO(&set);
		CPU_SET(sched_getcpu(), &set);
		sched_setaffinity(0, sizeof(set), &set);
		for (long i = 0; i < n_calls; i++)
			syscall(SYS_sched_yield);
		printf("calls %ld\n", n_calls);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "turns")) {
		int procs = atoi(argv[2]);
		cpu_set_t set;

		n_calls = atol(argv[3]);
		if (procs < 1 || procs > 64 || n_calls < 1)
			goto usage;
		CPU_ZERO(&set);
		CPU_SET(0, &set);
		for (int i = 0; i < procs; i++) {
			if (fork() == 0) {
				struct timespec ts;

				sched_setaffinity(0, sizeof(set), &set);
				for (long k = 0; k < n_calls; k++) {
					syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
					sched_yield();
				}
				_exit(0);
			}
		}
		while (wait(NULL) > 0)
			;
		printf("calls %ld\n", procs * n_calls);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "localtime")) {
		time_t t = 1764201600;
		volatile int hours = 0;

		unsetenv("TZ");
		n_calls = atol(argv[2]);
		for (long i = 0; i < n_calls; i++)
			hours += localtime(&t)->tm_hour;
		printf("calls %ld\n", n_calls);
		return 0;
	}
	if (argc == 3 && (!strcmp(argv[1], "stat-other") || !strcmp(argv[1], "stat-near"))) {
		char stack_buf[64], *buf = stack_buf;

		if (!strcmp(argv[1], "stat-near") && !(buf = map_near_libc())) {
			perror("hotpath: mmap near the C library");
			return 1;
		}
		n_calls = atol(argv[2]);
		stat_other(buf, n_calls);
		printf("calls %ld\n", n_calls);
		return 0;
	}
	if (argc == 2 && !strcmp(argv[1], "stats")) {
		union bpf_attr attr;
		int fd;

		memset(&attr, 0, sizeof(attr));
		attr.enable_stats.type = BPF_STATS_RUN_TIME;
		fd = syscall(SYS_bpf, BPF_ENABLE_STATS, &attr, sizeof(attr));
		if (fd < 0) {
			perror("hotpath: BPF_ENABLE_STATS");
			return 1;
		}
		printf("stats on\n");
		fflush(stdout);
		pause(); /* SIGTERM ends the process and closes fd */
		return 0;
	}
usage:
	fprintf(stderr, "usage: hotpath waits THREADS N USEC | hotpath clock N | hotpath turns PROCS N | "
			"hotpath localtime N | hotpath stat-other N | hotpath stat-near N | hotpath stats\n");
	return 2;
}
