// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Workloads built without frame pointers (gcc -O2 -fomit-frame-pointer),
 * like most distribution binaries: the kernel's frame-pointer walk stops
 * in them, and only unwinding with .eh_frame finds their callers.
 *
 *   sp-nofp context N   N getcontext() calls from context_loop()
 *   sp-nofp pth N       two GNU Pth threads calling pth_yield() N times each
 *                       (built with -DSP_WITH_PTH -lpth)
 *
 * Prints "pid=<pid>" first, then runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#ifdef SP_WITH_PTH
#include <pth.h>
#endif

static __attribute__((noinline)) void context_loop(long n)
{
	ucontext_t ctx;

	for (long i = 0; i < n; i++) {
		getcontext(&ctx);
		__asm__ volatile("" ::: "memory"); /* keep the loop */
	}
}

#ifdef SP_WITH_PTH
static long yields;

static __attribute__((noinline)) void *yield_loop(void *arg)
{
	(void)arg;
	for (long i = 0; i < yields; i++)
		pth_yield(NULL);
	return NULL;
}

static int run_pth(long n)
{
	pth_t a, b;

	yields = n;
	if (!pth_init())
		return 1;
	a = pth_spawn(PTH_ATTR_DEFAULT, yield_loop, NULL);
	b = pth_spawn(PTH_ATTR_DEFAULT, yield_loop, NULL);
	pth_join(a, NULL);
	pth_join(b, NULL);
	return 0;
}
#endif

int main(int argc, char **argv)
{
	long n;

	if (argc != 3) {
		fprintf(stderr, "usage: %s context|pth N\n", argv[0]);
		return 2;
	}
	n = atol(argv[2]);
	printf("pid=%d\n", getpid());
	fflush(stdout);
	if (!strcmp(argv[1], "context")) {
		context_loop(n);
		return 0;
	}
#ifdef SP_WITH_PTH
	if (!strcmp(argv[1], "pth"))
		return run_pth(n);
#endif
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
