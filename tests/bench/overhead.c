// SPDX-License-Identifier: MIT
/*
 * overhead: per-call cost of the paths slowpath hooks, measured in one process.
 *
 *   clock_gettime_raw  syscall(SYS_clock_gettime): traced by the sys_enter program
 *   getppid            syscall(SYS_getppid): not counted, but pays for the
 *                      syscall tracepoint being enabled (slow syscall path)
 *   page_fault_4k      first touch of a 4 KiB anonymous page (THP off for the
 *                      region): one kmem:mm_page_alloc event of order 0
 *   timed_wait_10us    futex wait with a 10 us timeout that expires (timer
 *                      slack 1 ns): a timed futex at sys_enter, one hrtimer
 *                      expiry and one timer wakeup (sched_waking) per call
 *   pingpong_wakeup    two threads on one CPU waking each other through a
 *                      futex, per wakeup: sched_waking with no timer running,
 *                      the cost every ordinary wakeup pays
 *   localtime_tz_unset glibc localtime() with TZ unset: its stat of the
 *                      default time-zone file (newfstatat of the C library's
 *                      "/etc/localtime" literal), which the tzfile signal
 *                      reads and counts, plus the conversion in user space
 *   stat_other_paths   stat() of other files (four paths in turn) written
 *                      into one reused stack buffer: a stat-family call the
 *                      tzfile signal must not read
 *   stat_other_near    the same from a reused buffer mapped within 8 MiB of
 *                      the C library (where glibc puts thread arenas and
 *                      large allocations): read and compared, then not
 *                      counted, the worst case of the tzfile signal's
 *                      distance test
 *   close_open         dup(0), then close() of that descriptor, per pair: a
 *                      close the fdclose signal reads the file table for
 *                      and does not count (and an untraced dup); run.sh
 *                      takes getppid's figure off for the close alone
 *   close_unopened     close() of a descriptor number past the file table,
 *                      as a close sweep makes it (EBADF): counted
 *   sched_yield_alone  syscall(SYS_sched_yield) pinned, with nothing else of
 *                      ours runnable on the CPU: the yield returns at once;
 *                      counted, with the caller's runqueue read
 *   madvise_purge      madvise(MADV_DONTNEED) of one 4 KiB page never
 *                      touched (nothing to zap: the call's floor), as an
 *                      allocator purge makes it: counted, with its bytes
 *   process_switch     a byte passed back and forth through two pipes
 *                      between this process and a child on the same CPU:
 *                      ns per switch between the two address spaces (each
 *                      runs tlb:tlb_flush, the purge signal's shootdown
 *                      hook on x86_64, and a pipe read and write)
 *   fork_copy          fork() of this process with 256 MiB touched, the
 *                      child exiting at once, and the wait for it: ns per
 *                      fork (a copying fork, counted and timed at its entry
 *                      and at task:task_newtask)
 *   clock_gettime_raw_tall  the traced syscall in T threads of this process
 *                      at once, each pinned to its own CPU (T = every CPU
 *                      this process may use): the median of the threads'
 *                      ns per call. Against clock_gettime_raw (T = 1) it
 *                      shows what counting one process from many CPUs at
 *                      once costs (a counter line shared between CPUs)
 *
 * Each repetition runs the measurements in turn (interleaved, so slow
 * drift hits all three alike); the printed value is the median over the
 * repetitions, in ns per call (per page for faults), and "<name>_min" the
 * fastest repetition (least disturbed by other activity on the machine). Times come from the vDSO
 * clock_gettime, which enters no kernel code and fires no tracepoint.
 *
 * Usage: overhead [-c CPU] [-r REPS]      (CPU -1: do not pin; REPS default 31)
 * Output: one "<name> <ns>" line per measurement, machine-readable.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double median(double *v, int n);

#define SYSCALL_CALLS 50000       /* per repetition: ~10 ms at ~200 ns */
#define FAULT_REGION (8UL << 20)  /* 2048 pages per repetition: ~3 ms */
#define PAGE 4096UL
#define TIMED_WAITS 300           /* per repetition: ~20 ms at ~60 us */
#define PINGPONGS 5000            /* round trips per repetition: ~30 ms */
#define STAT_CALLS 10000          /* per repetition: ~20 ms at ~2 us */
#define FORK_HEAP (256UL << 20)   /* touched before the forks: ~2 ms a copy */
#define FORKS 20                  /* per repetition: ~50 ms */

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no syscall */
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double bench_clock_gettime(void)
{
	struct timespec ts;
	double t0 = now_ns();

	for (int i = 0; i < SYSCALL_CALLS; i++)
		syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
	return (now_ns() - t0) / SYSCALL_CALLS;
}

static double bench_getppid(void)
{
	double t0 = now_ns();

	for (int i = 0; i < SYSCALL_CALLS; i++)
		syscall(SYS_getppid);
	return (now_ns() - t0) / SYSCALL_CALLS;
}

static double bench_close_open(void)
{
	double t0 = now_ns();

	for (int i = 0; i < SYSCALL_CALLS; i++)
		close(dup(0));
	return (now_ns() - t0) / SYSCALL_CALLS;
}

static double bench_close_unopened(void)
{
	double t0 = now_ns();

	for (int i = 0; i < SYSCALL_CALLS; i++)
		close(1 << 20); /* past any table of this process: EBADF */
	return (now_ns() - t0) / SYSCALL_CALLS;
}

static double bench_sched_yield(void)
{
	double t0 = now_ns();

	for (int i = 0; i < SYSCALL_CALLS; i++)
		syscall(SYS_sched_yield);
	return (now_ns() - t0) / SYSCALL_CALLS;
}

static char *purge_page;

static double bench_madvise_purge(void)
{
	double t0 = now_ns();

	for (int i = 0; i < SYSCALL_CALLS; i++)
		madvise(purge_page, 4096, MADV_DONTNEED);
	return (now_ns() - t0) / SYSCALL_CALLS;
}

static double bench_timed_wait(void)
{
	struct timespec timeout = { .tv_sec = 0, .tv_nsec = 10000 };
	int word = 0;
	double t0 = now_ns();

	for (int i = 0; i < TIMED_WAITS; i++)
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &timeout);
	return (now_ns() - t0) / TIMED_WAITS;
}

static double bench_localtime(void)
{
	time_t t = 1764201600;
	volatile int hours = 0;
	double t0 = now_ns();

	for (int i = 0; i < STAT_CALLS; i++)
		hours += localtime(&t)->tm_hour;
	return (now_ns() - t0) / STAT_CALLS;
}

static const char *const other_paths[] = { "/etc/hostname", "/etc/hosts", "/etc/passwd", "/etc/group" };

/* ns per stat() of the other paths, each copied into `buf` before its call. */
static double bench_stat_other(char *buf)
{
	struct stat st;
	double t0 = now_ns();

	for (int i = 0; i < STAT_CALLS; i++) {
		strcpy(buf, other_paths[i & 3]);
		stat(buf, &st);
	}
	return (now_ns() - t0) / STAT_CALLS;
}

static double bench_stat_other_stack(void)
{
	char buf[64];

	return bench_stat_other(buf);
}

static char *near_buf;

/* A page within 8 MiB below the C library's code, or NULL. */
static char *map_near_libc(void)
{
	uintptr_t libc = (uintptr_t)(void *)&stat & ~(uintptr_t)0xfff;
	void *p = mmap((void *)(libc - (8UL << 20)), 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static double bench_stat_other_near(void)
{
	return near_buf ? bench_stat_other(near_buf) : 0;
}

static int turn; /* 0: main thread's turn, 1: partner's */

static void futex_wait_for(int want)
{
	int v;

	while ((v = __atomic_load_n(&turn, __ATOMIC_ACQUIRE)) != want)
		syscall(SYS_futex, &turn, FUTEX_WAIT_PRIVATE, v, NULL);
}

static void futex_pass(int to)
{
	__atomic_store_n(&turn, to, __ATOMIC_RELEASE);
	syscall(SYS_futex, &turn, FUTEX_WAKE_PRIVATE, 1);
}

static void *partner(void *arg)
{
	(void)arg;
	for (int i = 0; i < PINGPONGS; i++) {
		futex_wait_for(1);
		futex_pass(0);
	}
	return NULL;
}

/* ns per wakeup: each round trip is two futex wakeups and two switches. */
static double bench_pingpong(void)
{
	pthread_t t;
	double t0;

	__atomic_store_n(&turn, 0, __ATOMIC_RELEASE);
	pthread_create(&t, NULL, partner, NULL);
	t0 = now_ns();
	for (int i = 0; i < PINGPONGS; i++) {
		futex_pass(1);
		futex_wait_for(0);
	}
	double ns = (now_ns() - t0) / (2.0 * PINGPONGS);

	pthread_join(t, NULL);
	return ns;
}

/* ns per switch between two processes pinned to this CPU (the child
 * inherits the pinning): each round trip is two switches. */
static double bench_process_switch(void)
{
	int ping[2], pong[2];
	char b = 0;
	double t0, ns;
	pid_t child;

	if (pipe(ping) || pipe(pong))
		return 0;
	child = fork();
	if (child == 0) {
		for (int i = 0; i < PINGPONGS; i++)
			if (read(ping[0], &b, 1) != 1 || write(pong[1], &b, 1) != 1)
				_exit(1);
		_exit(0);
	}
	t0 = now_ns();
	for (int i = 0; i < PINGPONGS; i++)
		if (write(ping[1], &b, 1) != 1 || read(pong[0], &b, 1) != 1)
			break;
	ns = (now_ns() - t0) / (2.0 * PINGPONGS);
	waitpid(child, NULL, 0);
	close(ping[0]), close(ping[1]), close(pong[0]), close(pong[1]);
	return ns;
}

/* ns per fork of this process, its FORK_HEAP touched, with the wait for
 * the child, which exits at once. */
static double bench_fork_copy(void)
{
	double t0 = now_ns();

	for (int i = 0; i < FORKS; i++) {
		pid_t child = fork();

		if (child == 0)
			_exit(0);
		if (child < 0 || waitpid(child, NULL, 0) != child)
			return 0;
	}
	return (now_ns() - t0) / FORKS;
}

/* T threads doing the traced syscall at once, one per allowed CPU. */
#define MAX_THREADS 256

struct tall_arg {
	int cpu;
	pthread_barrier_t *start;
	double ns;
};

static void *tall_thread(void *p)
{
	struct tall_arg *a = p;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(a->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	pthread_barrier_wait(a->start);
	a->ns = bench_clock_gettime();
	return NULL;
}

static int allowed_cpus[MAX_THREADS], n_allowed;

static double bench_clock_gettime_tall(void)
{
	pthread_t t[MAX_THREADS];
	struct tall_arg a[MAX_THREADS];
	pthread_barrier_t start;
	double ns[MAX_THREADS];

	pthread_barrier_init(&start, NULL, n_allowed);
	for (int i = 0; i < n_allowed; i++) {
		a[i] = (struct tall_arg){ .cpu = allowed_cpus[i], .start = &start };
		pthread_create(&t[i], NULL, tall_thread, &a[i]);
	}
	for (int i = 0; i < n_allowed; i++) {
		pthread_join(t[i], NULL);
		ns[i] = a[i].ns;
	}
	pthread_barrier_destroy(&start);
	return median(ns, n_allowed);
}

static double bench_fault(void)
{
	char *p = mmap(NULL, FAULT_REGION, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	/* 4 KiB pages only: with THP the first touch would allocate order 9. */
	if (madvise(p, FAULT_REGION, MADV_NOHUGEPAGE)) {
		perror("madvise");
		exit(1);
	}
	/* Only the touches are timed, not mmap/munmap. */
	double t0 = now_ns();

	for (unsigned long off = 0; off < FAULT_REGION; off += PAGE)
		((volatile char *)p)[off] = 1;
	double ns = (now_ns() - t0) / (FAULT_REGION / PAGE);

	munmap(p, FAULT_REGION);
	return ns;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	int cpu = 1, reps = 31, opt;

	while ((opt = getopt(argc, argv, "c:r:")) != -1) {
		switch (opt) {
		case 'c': cpu = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-c CPU] [-r REPS]\n", argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 1000)
		reps = 31;

	/* The CPUs this process may use, before pinning to one. */
	cpu_set_t allowed;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
		for (int c = 0; c < CPU_SETSIZE && n_allowed < MAX_THREADS; c++)
			if (CPU_ISSET(c, &allowed))
				allowed_cpus[n_allowed++] = c;
	if (n_allowed == 0)
		allowed_cpus[n_allowed++] = 0;
	/* One CPU: no migrations mid-loop, and a stable per-CPU page cache. */
	if (cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			perror("sched_setaffinity (continuing unpinned)");
	}

	double cg[1000], pp[1000], pf[1000], tw[1000], pw[1000], ta[1000];
	double lt[1000], so[1000], sn[1000], co[1000], cu[1000], sy[1000], mp[1000], ps[1000];
	double fc[1000];
	char *fork_heap;

	unsetenv("TZ"); /* glibc checks /etc/localtime on every localtime() */
	near_buf = map_near_libc();
	if (!near_buf)
		perror("mmap near the C library (stat_other_near: 0)");

	purge_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (purge_page == MAP_FAILED) {
		perror("mmap (madvise_purge)");
		return 1;
	}
	fork_heap = mmap(NULL, FORK_HEAP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fork_heap == MAP_FAILED) {
		perror("mmap (fork_copy)");
		return 1;
	}
	memset(fork_heap, 1, FORK_HEAP);
	/* Timer slack (50 us by default) would stretch every 10 us wait. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	/* Warm-up: page tables, caches, the first-touch cost of the arrays. */
	bench_clock_gettime();
	bench_getppid();
	bench_fault();
	bench_timed_wait();
	bench_pingpong();
	bench_clock_gettime_tall();
	bench_localtime();
	bench_stat_other_stack();
	bench_stat_other_near();
	bench_close_open();
	bench_close_unopened();
	bench_sched_yield();
	bench_madvise_purge();
	bench_process_switch();
	bench_fork_copy();

	for (int r = 0; r < reps; r++) {
		cg[r] = bench_clock_gettime();
		pp[r] = bench_getppid();
		pf[r] = bench_fault();
		tw[r] = bench_timed_wait();
		pw[r] = bench_pingpong();
		ta[r] = bench_clock_gettime_tall();
		lt[r] = bench_localtime();
		so[r] = bench_stat_other_stack();
		sn[r] = bench_stat_other_near();
		co[r] = bench_close_open();
		cu[r] = bench_close_unopened();
		sy[r] = bench_sched_yield();
		mp[r] = bench_madvise_purge();
		ps[r] = bench_process_switch();
		fc[r] = bench_fork_copy();
	}
	/* median() sorts, so v[0] is the minimum afterwards. */
	printf("clock_gettime_raw %.1f\n", median(cg, reps));
	printf("getppid %.1f\n", median(pp, reps));
	printf("page_fault_4k %.1f\n", median(pf, reps));
	printf("timed_wait_10us %.1f\n", median(tw, reps));
	printf("pingpong_wakeup %.1f\n", median(pw, reps));
	printf("clock_gettime_raw_tall %.1f\n", median(ta, reps));
	printf("localtime_tz_unset %.1f\n", median(lt, reps));
	printf("stat_other_paths %.1f\n", median(so, reps));
	printf("stat_other_near %.1f\n", median(sn, reps));
	printf("close_open %.1f\n", median(co, reps));
	printf("close_unopened %.1f\n", median(cu, reps));
	printf("sched_yield_alone %.1f\n", median(sy, reps));
	printf("madvise_purge %.1f\n", median(mp, reps));
	printf("process_switch %.1f\n", median(ps, reps));
	printf("fork_copy %.1f\n", median(fc, reps));
	printf("clock_gettime_raw_min %.1f\n", cg[0]);
	printf("getppid_min %.1f\n", pp[0]);
	printf("page_fault_4k_min %.1f\n", pf[0]);
	printf("timed_wait_10us_min %.1f\n", tw[0]);
	printf("pingpong_wakeup_min %.1f\n", pw[0]);
	printf("clock_gettime_raw_tall_min %.1f\n", ta[0]);
	printf("localtime_tz_unset_min %.1f\n", lt[0]);
	printf("stat_other_paths_min %.1f\n", so[0]);
	printf("stat_other_near_min %.1f\n", sn[0]);
	printf("close_open_min %.1f\n", co[0]);
	printf("close_unopened_min %.1f\n", cu[0]);
	printf("sched_yield_alone_min %.1f\n", sy[0]);
	printf("madvise_purge_min %.1f\n", mp[0]);
	printf("process_switch_min %.1f\n", ps[0]);
	printf("fork_copy_min %.1f\n", fc[0]);
	printf("threads %d\n", n_allowed);
	return 0;
}
