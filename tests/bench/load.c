// SPDX-License-Identifier: MIT
/*
 * load: drives traced events at a fixed rate, to measure the agent's own CPU
 * and memory under load. Each thread issues raw syscall(SYS_clock_gettime)
 * (a traced syscall that the vDSO would otherwise hide) in batches, then
 * sleeps until the schedule for its share of RATE catches up. With
 * "wakeups", each thread instead waits in futex with a timeout of one
 * period of its share of RATE, so every call is one timer wakeup.
 *
 * Usage: load RATE_PER_SEC SECONDS THREADS [wakeups]
 * Output: "load_calls N", "load_seconds S", "load_rate R" (achieved, calls/s).
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 1000 /* calls between schedule checks: ~1 ms at 1M/s */

static double rate_per_thread, seconds;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: not counted */
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Timed futex waits that expire: one timer wakeup each. */
static void *waker(void *arg)
{
	unsigned long long *calls = arg;
	double end = now_s() + seconds, period = 1 / rate_per_thread;
	struct timespec timeout = { .tv_sec = (time_t)period,
				    .tv_nsec = (long)((period - (time_t)period) * 1e9) };
	int word = 0;

	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	while (now_s() < end) {
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &timeout);
		*calls += 1;
	}
	return NULL;
}

static void *worker(void *arg)
{
	unsigned long long *calls = arg;
	double start = now_s(), end = start + seconds;
	struct timespec ts;

	for (;;) {
		for (int i = 0; i < BATCH; i++)
			syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
		*calls += BATCH;
		double t = now_s();
		if (t >= end)
			break;
		/* Ahead of schedule: sleep until the next batch is due. */
		double due = start + *calls / rate_per_thread;
		if (due > t) {
			if (due > end)
				due = end;
			struct timespec d = { .tv_sec = (time_t)due,
					      .tv_nsec = (long)((due - (time_t)due) * 1e9) };
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL);
			if (due >= end)
				break;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "wakeups"))) {
		fprintf(stderr, "usage: %s RATE_PER_SEC SECONDS THREADS [wakeups]\n", argv[0]);
		return 2;
	}
	void *(*fn)(void *) = argc == 5 ? waker : worker;
	double rate = atof(argv[1]);
	int n = atoi(argv[3]);

	seconds = atof(argv[2]);
	if (rate <= 0 || seconds <= 0 || n < 1 || n > 64) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	rate_per_thread = rate / n;

	pthread_t th[64];
	unsigned long long calls[64] = { 0 }, total = 0;
	double t0 = now_s();

	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, &calls[i]);
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		total += calls[i];
	}
	double el = now_s() - t0;

	printf("load_calls %llu\nload_seconds %.2f\nload_rate %.0f\n", total, el, total / el);
	return 0;
}
