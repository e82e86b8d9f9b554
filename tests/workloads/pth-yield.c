// SPDX-License-Identifier: MIT
/*
 * pth-yield: two GNU Pth user-space threads handing the CPU to each other,
 * the way programs built on Pth (and Ruby 1.8's green threads) switch
 * context: every switch saves and restores the signal mask, so a busy
 * scheduler turns into an rt_sigprocmask storm.
 *
 *   pth-yield N
 *
 * Prints "pid=<pid>" first (flushed), then each of the two threads calls
 * pth_yield() N times (2 N switches in all), then prints "yields=<2 N>" and
 * exits 0.
 */
#include <pth.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long yields_each;

/* noinline, and the test build keeps frame pointers: the loop shows up by
 * name under pth_yield in slowpath doctor's stacks. */
static __attribute__((noinline)) void *yielder(void *arg)
{
	(void)arg;
	for (long i = 0; i < yields_each; i++)
		pth_yield(NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	char *end = NULL;
	pth_t threads[2];

	if (argc == 2)
		yields_each = strtol(argv[1], &end, 10);
	if (!end || *argv[1] == '\0' || *end != '\0' || yields_each < 0) {
		fprintf(stderr, "usage: pth-yield N (yields per thread)\n");
		return 2;
	}
	printf("pid=%d\n", getpid());
	fflush(stdout);

	if (!pth_init())
		return 1;
	for (int i = 0; i < 2; i++) {
		threads[i] = pth_spawn(PTH_ATTR_DEFAULT, yielder, NULL);
		if (!threads[i])
			return 1;
	}
	for (int i = 0; i < 2; i++)
		if (!pth_join(threads[i], NULL))
			return 1;
	printf("yields=%ld\n", 2 * yields_each);
	pth_kill();
	return 0;
}
