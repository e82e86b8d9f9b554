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
 *   clock-paced N K       N times: K raw clock_gettime(MONOTONIC), then a 1 ms
 *                         nanosleep: a paced vDSO bypass (about 1000 K reads a
 *                         second) that is also a 1 ms timer loop, at a few %
 *                         of a CPU (the soak's long-lived findings)
 *   clock-sleep N USEC    N times: one raw clock_gettime(MONOTONIC), then a
 *                         nanosleep(USEC): two kinds of counted call, always
 *                         the clock read first in its jiffy (call-site sampling
 *                         per kind)
 *   clock-yield N         N raw clock_gettime(MONOTONIC), each followed by
 *                         sched_yield(): processes sharing a CPU take turns
 *   clock-int80 N         N raw clock_gettime(MONOTONIC) by the SYSCALL
 *                         instruction, each followed by an ia32 syscall 228
 *                         (fsetxattr, refused: EFAULT) by int $0x80 from this
 *                         64-bit code: the same number as x86_64's
 *                         clock_gettime, but not one of ours (x86_64 only)
 *   exec-split N M PATH   N raw clock_gettime(MONOTONIC) on each CPU (one thread
 *                         pinned to each of the first two), then execv PATH
 *                         (this binary under another name) as
 *                         "PATH clock-raw M": the same process, a new image
 *   context N             N getcontext()+setcontext() pairs (the Ruby case)
 *   getcontext N          N getcontext() alone: one rt_sigprocmask query each
 *   sigsetjmp N           N sigsetjmp(env, 1)+siglongjmp() pairs: the saved mask
 *                         is queried, then restored (two rt_sigprocmask each)
 *   raw-sigmask N         N times SIGUSR1 blocked, then unblocked, with
 *                         syscall(SYS_rt_sigprocmask) itself (two each): no libc
 *                         wrapper on the stack
 *   stack-paths BITS P    2^BITS distinct user stacks, each one raw
 *                         rt_sigprocmask: the call is made BITS calls deep
 *                         through two functions, one per bit of the path's
 *                         number. P children (2^BITS/P paths each, P a power
 *                         of 2 up to 2^BITS), each path's call 11 ms after the
 *                         previous one (a jiffy apart at HZ>=100: every call
 *                         sampled); each child stays 3 s after its last call
 *                         (to be symbolized while it lives)
 *   sleep N USEC          N nanosleep(USEC): glibc issues clock_nanosleep
 *   sleep-abs N USEC      N clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)
 *   thp MIB               MIB of anonymous memory with MADV_HUGEPAGE, touched
 *                         page by page (4 KiB stride)
 *   churn P K             fork P children one after another; each renames
 *                         itself "sp-churn", makes K raw clock_gettime and exits
 *   churn-par P K J       P children, J alive at a time; each renames itself
 *                         "sp-churnp", makes K raw rt_sigprocmask and exits
 *   pid-reuse N M K       N children "sp-burst" (one raw rt_sigprocmask each),
 *                         reaped; then M children "sp-victim" made with clone3
 *                         set_tid on the burst's pids (K calls each); prints
 *                         "reused=<M>" (needs CAP_SYS_ADMIN or
 *                         CAP_CHECKPOINT_RESTORE)
 *   cgroup-churn DIR N K  N times: make cgroup DIR/sp-cg-<i>, run a child
 *                         "sp-cgchurn" in it (K raw clock_gettime), remove it
 *   comm-spam N           N children one after another, each named "u<i>"
 *                         (prctl), one raw rt_sigprocmask each
 *   wait KIND N USEC      N waits of USEC each, every one ended by its timer,
 *                         then prints "nvcsw=<voluntary context switches>":
 *                         KIND is nanosleep, clock_nanosleep, clock_nanosleep-abs,
 *                         futex, futex-abs (FUTEX_WAIT_BITSET), epoll_wait, poll,
 *                         ppoll, select, pselect6, timerfd (periodic, read N
 *                         times) or itimer (periodic SIGALRM, N sigsuspend)
 *   wait-early KIND N     N waits with a 1 s timeout (KIND poll or futex), each
 *                         ended after ~1 ms by another thread (a pipe write, a
 *                         FUTEX_WAKE) before the timer: no timer wakeup
 *   localtime N [USEC]    N glibc localtime() calls (each after a usleep(USEC)
 *                         when given): with TZ unset, glibc stats
 *                         /etc/localtime on every call but the first (which
 *                         opens and reads it)
 *   mktime N              N glibc mktime() calls: the same check each
 *   tz-stat N             N stat and N lstat of the "/etc/localtime" literal by
 *                         raw syscalls (x86_64: stat, lstat; arm64: newfstatat
 *                         without and with AT_SYMLINK_NOFOLLOW): checks when
 *                         this binary is static (the literal and the syscall
 *                         instruction in one image), none with a shared libc
 *   fd-sweep N LIMIT      close sweeps at a soft nofile of LIMIT (set, at most
 *                         the hard limit), after close_range(3, ~0U) (none
 *                         counted): N sweeps of close(fd) for fd 3..LIMIT-1
 *                         past the file table's size; then every descriptor
 *                         up to the limit opened (dup) and closed (none
 *                         counted); one sweep more inside the grown table; 100
 *                         opened and closed by close_range (none counted).
 *                         Prints "unopened=<(N+1)*(LIMIT-3)>", the closes
 *                         that return EBADF
 *   yield-alone N         N sched_yield() pinned to the CPU it started on, where
 *                         nothing else of ours runs: runnable "none" (kernel
 *                         threads and other processes come and go)
 *   yield-sibling N       the same, with a child pinned to that CPU first that
 *                         spins in user space (no syscall) until the yields
 *                         are done: each yield has another task runnable
 *                         ("others"); each hands it the CPU for its slice, so
 *                         keep N to a few thousand
 *   purge-raw N           N rounds on a touched 64 KiB anonymous mapping, each
 *                         madvise MADV_DONTNEED, MADV_FREE and MADV_PAGEOUT
 *                         (65,536 bytes each, the pages touched again between)
 *                         and MADV_WILLNEED (not a purge), then one mmap and
 *                         munmap of 128 KiB: N of each purge kind. Prints
 *                         "purges=<3N> munmaps=<N>"
 *   purge-threads N       N rounds of a 64 KiB memset and MADV_DONTNEED on the
 *                         CPU it started on, while a thread of the same
 *                         process spins in user space on another CPU: each
 *                         purge flushes that CPU's TLB too (a shootdown IPI
 *                         on x86_64). Prints "purges=N"
 *   purge-trim N          glibc malloc_trim(0) N times, each after freeing
 *                         every other one of 32 64 KiB blocks of the main
 *                         heap (its holes are given back with MADV_DONTNEED)
 *   purge-mmap N SIZE     N malloc(SIZE) and free() of a buffer touched once:
 *                         above glibc's largest mmap threshold (32 MiB) each
 *                         is a mapping of its own, unmapped on every free()
 *   forks KIND MIB N      touch MIB MiB of anonymous memory, then N times make a
 *                         child of KIND and wait for it: fork (glibc's fork(),
 *                         a clone without CLONE_VM; the child exits), fork-exec
 *                         (the same, the child execs this program's "exit"
 *                         mode), vfork (the child execs), spawn (posix_spawn of
 *                         "exit"), clone3 (a raw clone3 with no flags; the
 *                         child exits). Prints "forks=N"
 *   exit                  exits at once, printing nothing (an exec target)
 *   idle-runtime SECONDS  an idle language runtime's timers for SECONDS: one
 *                         thread in 50 ms futex timeouts, one in 100 ms
 *                         epoll_wait timeouts (~30 timer wakeups/s in all)
 *
 * With SP_EXIT_CPU=N in the environment, the process moves to CPU N once its
 * mode is done and exits there (its timers fired where it ran before).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <linux/types.h>
#include <linux/futex.h>
#include <poll.h>
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <sched.h>
#include <spawn.h>
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

/* clock-int80: a 64-bit clock read and an ia32 syscall of the same number,
 * n times each, from one task on one CPU (so that whatever the counting
 * path remembers of the last syscall's task is fresh at every ia32 one). */
static int run_clock_int80(long n)
{
#if defined(__x86_64__)
	struct timespec ts;
	cpu_set_t set;
	long ret = 0;

	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof(set), &set);
	for (long i = 0; i < n; i++) {
		syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
		/* ia32 fsetxattr(-1, NULL, NULL, 0, 0): EFAULT on the name */
		__asm__ volatile("int $0x80"
				 : "=a"(ret)
				 : "a"(228L), "b"(-1L), "c"(0L), "d"(0L), "S"(0L), "D"(0L)
				 : "memory", "r8", "r9", "r10", "r11");
	}
	printf("int80=%ld\n", ret);
	return 0;
#else
	(void)n;
	fprintf(stderr, "sp-workload: clock-int80 is x86_64 only\n");
	return 2;
#endif
}

/* A thread of exec-split: n raw clock reads pinned to one CPU. */
struct pinned {
	long n;
	int cpu;
};

static void *pinned_main(void *arg)
{
	struct pinned *p = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set); /* best effort on 1 CPU */
	raw_clock_loop(p->n, CLOCK_MONOTONIC);
	return NULL;
}

static int run_exec_split(long n, long m, const char *path)
{
	struct pinned a = {n, 0}, b = {n, 1};
	char count[32];
	pthread_t t;

	if (pthread_create(&t, NULL, pinned_main, &b) != 0)
		return 1;
	pinned_main(&a);
	pthread_join(t, NULL);
	snprintf(count, sizeof(count), "%ld", m);
	execl(path, path, "clock-raw", count, (char *)NULL);
	perror("sp-workload: execl");
	return 1;
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

static __attribute__((noinline)) int run_getcontext(long n)
{
	ucontext_t ctx;

	/* rt_sigprocmask(SIG_BLOCK, NULL, &old) each: the mask is only read */
	for (long i = 0; i < n; i++)
		getcontext(&ctx);
	return 0;
}

static __attribute__((noinline)) int run_sigsetjmp(long n)
{
	sigjmp_buf env;

	/* savemask = 1: sigsetjmp reads the mask (rt_sigprocmask(SIG_BLOCK, NULL,
	 * &old)), siglongjmp sets it back (SIG_SETMASK) and returns 1 there. */
	for (long i = 0; i < n; i++)
		if (sigsetjmp(env, 1) == 0)
			siglongjmp(env, 1);
	return 0;
}

static __attribute__((noinline)) int run_raw_sigmask(long n)
{
	sigset_t usr1;

	/* the kernel's sigset is 8 bytes; glibc's sigset_t is larger, the first
	 * 8 bytes hold the bits the kernel reads */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	for (long i = 0; i < n; i++) {
		syscall(SYS_rt_sigprocmask, SIG_BLOCK, &usr1, NULL, 8);
		syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &usr1, NULL, 8);
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

static void raw_sigmask_loop(long n)
{
	for (long i = 0; i < n; i++)
		syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, NULL, 8);
}

/* A child named `comm` that makes `k` raw rt_sigprocmask calls. */
static pid_t spawn_sigmask(const char *comm, long k)
{
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_NAME, comm);
		raw_sigmask_loop(k);
		_exit(0);
	}
	return pid;
}

static int run_churn_par(long procs, long k, long width)
{
	long alive = 0;

	for (long i = 0; i < procs; i++) {
		if (alive == width) {
			if (wait(NULL) < 0)
				return 1;
			alive--;
		}
		if (spawn_sigmask("sp-churnp", k) < 0)
			return 1;
		alive++;
	}
	while (alive-- > 0)
		if (wait(NULL) < 0)
			return 1;
	return 0;
}

static void stack_path(unsigned long path, int bits);

/* Bits taken, by value: the two functions below differ by it, so that the
 * compiler cannot fold them into one (-fipa-icf). */
static volatile unsigned long stack_bits_taken[2];

/* One bit of a stack path each: two functions, so that each bit puts its
 * own return address on the stack. The barrier after the call keeps it a
 * call (no tail call: the frame stays). */
static __attribute__((noinline)) void stack_bit0(unsigned long path, int bits)
{
	stack_bits_taken[0]++;
	stack_path(path, bits);
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void stack_bit1(unsigned long path, int bits)
{
	stack_bits_taken[1]++;
	stack_path(path, bits);
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void stack_path(unsigned long path, int bits)
{
	if (bits == 0) {
		syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, NULL, 8);
		return;
	}
	if (path & 1)
		stack_bit1(path >> 1, bits - 1);
	else
		stack_bit0(path >> 1, bits - 1);
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) int run_stack_paths(long bits, long procs)
{
	const struct timespec apart = { .tv_nsec = 11000000 }, stay = { .tv_sec = 3 };
	long paths = 1L << bits, each;
	int status, failed = 0;

	if (bits < 1 || bits > 16 || procs < 1 || procs > paths || (procs & (procs - 1))) {
		fprintf(stderr, "stack-paths: BITS 1..16, P a power of 2 up to 2^BITS\n");
		return 1;
	}
	each = paths / procs;
	for (long k = 0; k < procs; k++) {
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			for (long path = k * each; path < (k + 1) * each; path++) {
				nanosleep(&apart, NULL);
				stack_path(path, bits);
			}
			nanosleep(&stay, NULL);
			_exit(0);
		}
	}
	while (wait(&status) > 0)
		failed |= !WIFEXITED(status) || WEXITSTATUS(status);
	return failed;
}

struct clone3_args {
	__u64 flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	__u64 set_tid, set_tid_size, cgroup;
};

static int run_pid_reuse(long n, long m, long k)
{
	pid_t *pids = calloc(n, sizeof(*pids));
	long reused = 0;

	if (!pids)
		return 1;
	for (long i = 0; i < n; i++) {
		pids[i] = spawn_sigmask("sp-burst", 1);
		if (pids[i] < 0 || waitpid(pids[i], NULL, 0) != pids[i])
			return 1;
	}
	for (long i = 0; i < n && reused < m; i++) {
		pid_t want = pids[i];
		struct clone3_args args = { .exit_signal = SIGCHLD,
					    .set_tid = (__u64)(unsigned long)&want,
					    .set_tid_size = 1 };
		long pid = syscall(SYS_clone3, &args, sizeof(args));

		if (pid == 0) {
			prctl(PR_SET_NAME, "sp-victim");
			raw_sigmask_loop(k);
			_exit(0);
		}
		if (pid < 0) {
			if (errno == EEXIST)
				continue; /* taken again meanwhile: try the next one */
			perror("clone3");
			return 1;
		}
		if (waitpid(pid, NULL, 0) != pid)
			return 1;
		reused++;
	}
	printf("reused=%ld\n", reused);
	return reused == m ? 0 : 1;
}

static int run_cgroup_churn(const char *dir, long n, long k)
{
	char path[4096];

	for (long i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/sp-cg-%ld", dir, i);
		if (mkdir(path, 0755) && errno != EEXIST)
			return perror(path), 1;
		pid_t pid = fork();

		if (pid == 0) {
			char procs[4200];
			FILE *f;

			snprintf(procs, sizeof(procs), "%s/cgroup.procs", path);
			f = fopen(procs, "w");
			if (!f || fprintf(f, "0\n") < 0 || fclose(f))
				_exit(3);
			prctl(PR_SET_NAME, "sp-cgchurn");
			raw_clock_loop(k, CLOCK_MONOTONIC);
			_exit(0);
		}
		int status;

		if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
			return 1;
		if (rmdir(path))
			return perror(path), 1;
	}
	return 0;
}

static int run_comm_spam(long n)
{
	for (long i = 0; i < n; i++) {
		char comm[24];
		pid_t pid;

		snprintf(comm, sizeof(comm), "u%ld", i); /* prctl keeps 15 bytes */
		pid = spawn_sigmask(comm, 1);
		if (pid < 0 || waitpid(pid, NULL, 0) != pid)
			return 1;
	}
	return 0;
}

static struct timespec ts_of_usec(long usec)
{
	struct timespec ts = { .tv_sec = usec / 1000000, .tv_nsec = (usec % 1000000) * 1000 };

	return ts;
}

/* `at` + `usec` on `clock`. */
static struct timespec deadline(clockid_t clock, long usec)
{
	struct timespec at, req = ts_of_usec(usec);

	clock_gettime(clock, &at);
	at.tv_nsec += req.tv_nsec;
	at.tv_sec += req.tv_sec + at.tv_nsec / 1000000000L;
	at.tv_nsec %= 1000000000L;
	return at;
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* One timed wait of `usec` that only its timer ends; 0 on success. */
static int wait_once(const char *kind, long usec, int epfd, int tfd)
{
	struct timespec ts = ts_of_usec(usec), at;
	struct timeval tv = { .tv_sec = usec / 1000000, .tv_usec = usec % 1000000 };
	struct epoll_event ev;
	unsigned long long ticks;
	int word = 0;
	sigset_t none;

	if (!strcmp(kind, "nanosleep"))
		return syscall(SYS_nanosleep, &ts, NULL);
	if (!strcmp(kind, "clock_nanosleep"))
		return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
	if (!strcmp(kind, "clock_nanosleep-abs")) {
		at = deadline(CLOCK_MONOTONIC, usec);
		return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
	}
	if (!strcmp(kind, "futex"))
		return syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &ts) == -1 &&
		       errno == ETIMEDOUT ? 0 : -1;
	if (!strcmp(kind, "futex-abs")) {
		at = deadline(CLOCK_MONOTONIC, usec);
		return syscall(SYS_futex, &word, FUTEX_WAIT_BITSET_PRIVATE, 0, &at, NULL,
			       FUTEX_BITSET_MATCH_ANY) == -1 && errno == ETIMEDOUT ? 0 : -1;
	}
	if (!strcmp(kind, "epoll_wait"))
		return epoll_wait(epfd, &ev, 1, (int)(usec / 1000));
	if (!strcmp(kind, "poll"))
		return poll(NULL, 0, (int)(usec / 1000));
	if (!strcmp(kind, "ppoll"))
		return ppoll(NULL, 0, &ts, NULL);
	if (!strcmp(kind, "select"))
		return select(0, NULL, NULL, NULL, &tv);
	if (!strcmp(kind, "pselect6"))
		return pselect(0, NULL, NULL, NULL, &ts, NULL);
	if (!strcmp(kind, "timerfd"))
		return read(tfd, &ticks, sizeof(ticks)) == sizeof(ticks) ? 0 : -1;
	if (!strcmp(kind, "itimer")) {
		sigemptyset(&none);
		sigsuspend(&none);
		return 0;
	}
	return -1;
}

static int run_wait(const char *kind, long n, long usec)
{
	struct itimerspec period = { .it_interval = ts_of_usec(usec), .it_value = ts_of_usec(usec) };
	struct itimerval ival = { .it_interval = { 0, usec }, .it_value = { 0, usec } };
	int epfd = epoll_create1(0), tfd = -1;
	struct rusage before, after;
	sigset_t alrm;

	if (!strcmp(kind, "timerfd")) {
		tfd = timerfd_create(CLOCK_MONOTONIC, 0);
		timerfd_settime(tfd, 0, &period, NULL);
	}
	if (!strcmp(kind, "itimer")) {
		/* SIGALRM blocked outside sigsuspend: each one ends exactly one wait */
		signal(SIGALRM, on_alarm);
		sigemptyset(&alrm);
		sigaddset(&alrm, SIGALRM);
		sigprocmask(SIG_BLOCK, &alrm, NULL);
		setitimer(ITIMER_REAL, &ival, NULL);
	}
	getrusage(RUSAGE_THREAD, &before);
	for (long i = 0; i < n; i++) {
		if (wait_once(kind, usec, epfd, tfd) < 0 && errno != EINTR) {
			fprintf(stderr, "sp-workload: wait %s: %s\n", kind, strerror(errno));
			return 1;
		}
	}
	getrusage(RUSAGE_THREAD, &after);
	printf("nvcsw=%ld\n", after.ru_nvcsw - before.ru_nvcsw);
	return 0;
}

struct early {
	const char *kind;
	long n;
	int pipe[2];
	int word;
};

/* The other thread: ends each of the main thread's waits after ~1 ms. */
static void *end_waits_early(void *arg)
{
	struct early *e = arg;
	struct timespec ms = ts_of_usec(1000);

	for (long i = 0; i < e->n; i++) {
		nanosleep(&ms, NULL);
		if (!strcmp(e->kind, "poll")) {
			if (write(e->pipe[1], "x", 1) != 1)
				return NULL;
		} else {
			/* a count of posts, not a flag: two posts before the
			 * waiter looks must not collapse into one */
			__atomic_add_fetch(&e->word, 1, __ATOMIC_SEQ_CST);
			syscall(SYS_futex, &e->word, FUTEX_WAKE_PRIVATE, 1);
		}
	}
	return NULL;
}

static int run_wait_early(const char *kind, long n)
{
	struct early e = { .kind = kind, .n = n };
	struct timespec second = ts_of_usec(1000000);
	struct pollfd pfd;
	pthread_t t;
	char c;
	int v;

	if (pipe(e.pipe))
		return 1;
	pthread_create(&t, NULL, end_waits_early, &e);
	for (long i = 0; i < n; i++) {
		if (!strcmp(kind, "poll")) {
			pfd.fd = e.pipe[0];
			pfd.events = POLLIN;
			if (poll(&pfd, 1, 1000) != 1 || read(e.pipe[0], &c, 1) != 1)
				return 1;
			continue;
		}
		/* wait for post i + 1 (one already there ends the wait at once) */
		while ((v = __atomic_load_n(&e.word, __ATOMIC_SEQ_CST)) <= i)
			syscall(SYS_futex, &e.word, FUTEX_WAIT_PRIVATE, v, &second);
	}
	pthread_join(t, NULL);
	return 0;
}

static long idle_seconds;

static void *idle_epoll(void *arg)
{
	struct epoll_event ev;
	int epfd = epoll_create1(0);
	time_t end = time(NULL) + idle_seconds;

	(void)arg;
	while (time(NULL) < end)
		epoll_wait(epfd, &ev, 1, 100);
	return NULL;
}

static int run_localtime(long n, long usec)
{
	volatile int hours = 0;
	time_t t = time(NULL);

	for (long i = 0; i < n; i++) {
		if (usec)
			usleep(usec);
		hours += localtime(&t)->tm_hour;
	}
	return 0;
}

static int run_mktime(long n)
{
	struct tm tm = { .tm_year = 126, .tm_mon = 10, .tm_mday = 27 };
	volatile time_t sum = 0;

	for (long i = 0; i < n; i++) {
		tm.tm_sec = (int)(i % 60);
		sum += mktime(&tm);
	}
	return 0;
}

static int run_tz_stat(long n)
{
	struct stat st;

	for (long i = 0; i < n; i++) {
#ifdef SYS_stat
		syscall(SYS_stat, "/etc/localtime", &st);
		syscall(SYS_lstat, "/etc/localtime", &st);
#else
		syscall(SYS_newfstatat, AT_FDCWD, "/etc/localtime", &st, 0);
		syscall(SYS_newfstatat, AT_FDCWD, "/etc/localtime", &st, AT_SYMLINK_NOFOLLOW);
#endif
	}
	return 0;
}

#ifndef SYS_close_range
#define SYS_close_range 436 /* the same on x86_64 and arm64 */
#endif

/* close(fd) for every fd from 3 up to sysconf(_SC_OPEN_MAX), the sweep of
 * code that closes "every descriptor that might be open"; returns the
 * closes that failed with EBADF. */
static long close_sweep(void)
{
	long max = sysconf(_SC_OPEN_MAX), bad = 0;

	for (long fd = 3; fd < max; fd++)
		bad += close((int)fd) < 0 && errno == EBADF;
	return bad;
}

static int run_fd_sweep(long n, long limit)
{
	struct rlimit rl;
	long bad = 0, opened = 0;

	if (getrlimit(RLIMIT_NOFILE, &rl) || (rlim_t)limit > rl.rlim_max || limit < 4) {
		fprintf(stderr, "fd-sweep: LIMIT must be 4..%lu (the hard nofile)\n",
			(unsigned long)rl.rlim_max);
		return 2;
	}
	rl.rlim_cur = (rlim_t)limit;
	for (int fd = 0; fd < 3; fd++) /* a sweep starts at 3: keep 0-2 open */
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
			return 1;
	if (setrlimit(RLIMIT_NOFILE, &rl) || syscall(SYS_close_range, 3U, ~0U, 0U))
		return 1;
	for (long i = 0; i < n; i++)
		bad += close_sweep();
	while (dup(0) >= 0) /* up to the limit: the table grows to it */
		opened++;
	for (long fd = 3; fd < 3 + opened; fd++)
		if (close((int)fd))
			return 1;
	bad += close_sweep();
	for (int i = 0; i < 100; i++)
		if (dup(0) < 0)
			return 1;
	if (syscall(SYS_close_range, 3U, ~0U, 0U))
		return 1;
	if (bad != (n + 1) * (limit - 3) || opened != limit - 3) {
		fprintf(stderr, "fd-sweep: %ld EBADF, %ld opened\n", bad, opened);
		return 1;
	}
	printf("unopened=%ld\n", bad);
	return 0;
}

/* Pin the calling thread to `cpu`. */
static int pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set);
}

/* N sched_yield() on the CPU this started on; with `sibling`, a child
 * pinned there first spins in user space, runnable the whole time. */
static int run_yield(long n, int sibling)
{
	int cpu = sched_getcpu(), ready[2];
	pid_t child = -1;
	char c;

	if (cpu < 0 || pipe(ready))
		return 1;
	if (sibling) {
		child = fork();
		if (child == 0) {
			if (pin_to(cpu) || write(ready[1], "r", 1) != 1)
				_exit(1);
			for (volatile unsigned long spin = 0;; spin++)
				; /* runnable until killed, never in the kernel */
		}
		if (child < 0 || read(ready[0], &c, 1) != 1)
			return 1;
	}
	if (pin_to(cpu))
		return 1;
	for (long i = 0; i < n; i++)
		syscall(SYS_sched_yield);
	if (child > 0 && (kill(child, SIGKILL) || waitpid(child, NULL, 0) != child))
		return 1;
	printf("yields=%ld cpu=%d\n", n, cpu);
	return 0;
}

/* Purges of every kind, by glibc's wrappers, as allocators make them. */
static int run_purge_raw(long n)
{
	const size_t len = 64 * 1024, unmapped = 128 * 1024;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return 1;
	for (long i = 0; i < n; i++) {
		const int purges[] = {MADV_DONTNEED, MADV_FREE, MADV_PAGEOUT};

		for (unsigned k = 0; k < sizeof(purges) / sizeof(purges[0]); k++) {
			memset(p, 1, len);
			madvise(p, len, purges[k]); /* PAGEOUT: EINVAL before 5.4, counted */
		}
		madvise(p, len, MADV_WILLNEED);
		char *q = mmap(NULL, unmapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (q == MAP_FAILED || munmap(q, unmapped))
			return 1;
	}
	printf("purges=%ld munmaps=%ld\n", 3 * n, n);
	return 0;
}

static volatile int purge_spin_done;

static void *purge_spinner(void *arg)
{
	if (pin_to(*(int *)arg))
		return NULL;
	while (!purge_spin_done)
		; /* on its CPU with the process's mm, never in the kernel */
	return NULL;
}

/* Purges while another thread of the process runs on another CPU. */
static int run_purge_threads(long n)
{
	const size_t len = 64 * 1024;
	int cpu = sched_getcpu(), other = -1;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cpu_set_t allowed;
	pthread_t t;

	if (p == MAP_FAILED || cpu < 0 || sched_getaffinity(0, sizeof(allowed), &allowed))
		return 1;
	for (int c = 0; c < CPU_SETSIZE && other < 0; c++)
		if (c != cpu && CPU_ISSET(c, &allowed))
			other = c;
	if (other < 0 || pin_to(cpu) || pthread_create(&t, NULL, purge_spinner, &other))
		return 1;
	for (long i = 0; i < n; i++) {
		memset(p, 1, len);
		madvise(p, len, MADV_DONTNEED);
	}
	purge_spin_done = 1;
	pthread_join(t, NULL);
	printf("purges=%ld cpus=%d,%d\n", n, cpu, other);
	return 0;
}

/* malloc_trim after freeing every other block of the main heap. */
static int run_purge_trim(long n)
{
	enum { BLOCKS = 32, SIZE = 64 * 1024 };
	void *blocks[BLOCKS];

	for (long i = 0; i < n; i++) {
		for (int b = 0; b < BLOCKS; b++)
			if (!(blocks[b] = malloc(SIZE)))
				return 1;
			else
				memset(blocks[b], 1, SIZE);
		for (int b = 0; b < BLOCKS; b += 2)
			free(blocks[b]);
		malloc_trim(0);
		for (int b = 1; b < BLOCKS; b += 2)
			free(blocks[b]);
	}
	printf("trims=%ld\n", n);
	return 0;
}

/* Buffers above glibc's mmap threshold, allocated and freed in a loop. */
static int run_purge_mmap(long n, long size)
{
	for (long i = 0; i < n; i++) {
		volatile char *b = malloc(size);

		if (!b)
			return 1;
		b[0] = 1;
		free((void *)b);
	}
	printf("buffers=%ld\n", n);
	return 0;
}

static int run_idle_runtime(long seconds)
{
	struct timespec timeout = ts_of_usec(50000);
	time_t end = time(NULL) + seconds;
	pthread_t t;
	int word = 0;

	idle_seconds = seconds;
	pthread_create(&t, NULL, idle_epoll, NULL);
	while (time(NULL) < end)
		syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &timeout);
	pthread_join(t, NULL);
	return 0;
}

/* atexit: move to CPU $SP_EXIT_CPU and give up this one, so that the exit
 * runs there. */
static void exit_on_cpu(void)
{
	const char *cpu = getenv("SP_EXIT_CPU");
	cpu_set_t set;

	if (!cpu)
		return;
	CPU_ZERO(&set);
	CPU_SET(atoi(cpu), &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity");
	sched_yield();
}

extern char **environ;

/* In a forked child: exec this program's "exit" mode. */
static void fork_child_execs(void)
{
	char *const argv[] = {"sp-workload", "exit", NULL};

	execv("/proc/self/exe", argv);
	_exit(127);
}

/* clone3's argument, its first version (CLONE_ARGS_SIZE_VER0: 64 bytes),
 * declared here: <linux/sched.h> clashes with glibc's <sched.h>. */
struct fork_clone_args {
	__u64 flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

/* One child of `kind` (see "forks"); its pid, or -1. */
static pid_t fork_one(const char *kind)
{
	char *const argv[] = {"sp-workload", "exit", NULL};
	pid_t child = -1;

	if (!strcmp(kind, "fork") || !strcmp(kind, "fork-exec")) {
		child = fork();
		if (child == 0 && kind[4])
			fork_child_execs();
		if (child == 0)
			_exit(0);
	} else if (!strcmp(kind, "vfork")) {
		child = vfork();
		if (child == 0)
			fork_child_execs();
	} else if (!strcmp(kind, "spawn")) {
		if (posix_spawn(&child, "/proc/self/exe", NULL, NULL, argv, environ))
			return -1;
	} else if (!strcmp(kind, "clone3")) {
		struct fork_clone_args args = {.exit_signal = SIGCHLD};

		child = syscall(SYS_clone3, &args, sizeof(args));
		if (child == 0)
			_exit(0);
	}
	return child;
}

/* N children of `kind` from a process that touched MIB MiB first. */
static int run_forks(const char *kind, long mib, long n)
{
	size_t len = (size_t)mib << 20;
	char *heap = mmap(NULL, len ? len : 4096, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (heap == MAP_FAILED)
		return 1;
	for (size_t off = 0; off < len; off += 4096)
		heap[off] = 1;
	for (long i = 0; i < n; i++) {
		pid_t child = fork_one(kind);

		if (child < 0 || waitpid(child, NULL, 0) != child)
			return 1;
	}
	printf("forks=%ld\n", n);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	/* wait and forks modes take a KIND first, cgroup-churn a directory */
	int named = !strncmp(mode, "wait", 4) || !strcmp(mode, "cgroup-churn") || !strcmp(mode, "forks");
	long n = argc > 2 && !named ? parse_count(argv[2]) : 0;
	long m = argc > 3 && !named ? parse_count(argv[3]) : 0;
	struct timespec ts;
	struct timeval tv;

	if (!strcmp(mode, "exit"))
		return 0; /* an exec target: no output */
	printf("pid=%d\n", getpid());
	fflush(stdout);
	atexit(exit_on_cpu);

	if (!strcmp(mode, "clock-vdso")) {
		for (long i = 0; i < n; i++)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		return 0;
	}
	if (!strcmp(mode, "clock-raw")) {
		raw_clock_loop(n, argc > 3 ? (clockid_t)m : CLOCK_MONOTONIC);
		return 0;
	}
	if (!strcmp(mode, "clock-paced")) {
		struct timespec ms = ts_of_usec(1000);

		for (long i = 0; i < n; i++) {
			raw_clock_loop(m, CLOCK_MONOTONIC);
			nanosleep(&ms, NULL);
		}
		return 0;
	}
	if (!strcmp(mode, "clock-sleep")) {
		struct timespec pause = ts_of_usec(m);

		for (long i = 0; i < n; i++) {
			syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
			nanosleep(&pause, NULL);
		}
		return 0;
	}
	if (!strcmp(mode, "clock-yield")) {
		for (long i = 0; i < n; i++) {
			syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
			sched_yield();
		}
		return 0;
	}
	if (!strcmp(mode, "clock-int80"))
		return run_clock_int80(n);
	if (!strcmp(mode, "exec-split") && argc > 4)
		return run_exec_split(n, m, argv[4]);
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
#ifdef SYS_time
		for (long i = 0; i < n; i++)
			syscall(SYS_time, NULL);
		return 0;
#else
		fprintf(stderr, "time-raw: this architecture has no time() syscall (arm64 has none)\n");
		return 2;
#endif
	}
	if (!strcmp(mode, "cputime"))
		return run_cputime(n);
	if (!strcmp(mode, "threads"))
		return run_threads(n, m);
	if (!strcmp(mode, "context"))
		return run_context(n);
	if (!strcmp(mode, "getcontext"))
		return run_getcontext(n);
	if (!strcmp(mode, "sigsetjmp"))
		return run_sigsetjmp(n);
	if (!strcmp(mode, "raw-sigmask"))
		return run_raw_sigmask(n);
	if (!strcmp(mode, "stack-paths"))
		return run_stack_paths(n, m);
	if (!strcmp(mode, "sleep"))
		return run_sleep(n, m, 0);
	if (!strcmp(mode, "sleep-abs"))
		return run_sleep(n, m, 1);
	if (!strcmp(mode, "thp"))
		return run_thp(n);
	if (!strcmp(mode, "churn"))
		return run_churn(n, m);
	if (!strcmp(mode, "churn-par") && argc > 4)
		return run_churn_par(n, m, parse_count(argv[4]));
	if (!strcmp(mode, "pid-reuse") && argc > 4)
		return run_pid_reuse(n, m, parse_count(argv[4]));
	if (!strcmp(mode, "cgroup-churn") && argc > 4)
		return run_cgroup_churn(argv[2], parse_count(argv[3]), parse_count(argv[4]));
	if (!strcmp(mode, "comm-spam"))
		return run_comm_spam(n);
	if (!strcmp(mode, "wait") && argc > 4)
		return run_wait(argv[2], parse_count(argv[3]), parse_count(argv[4]));
	if (!strcmp(mode, "localtime"))
		return run_localtime(n, m);
	if (!strcmp(mode, "mktime"))
		return run_mktime(n);
	if (!strcmp(mode, "tz-stat"))
		return run_tz_stat(n);
	if (!strcmp(mode, "fd-sweep") && argc > 3)
		return run_fd_sweep(n, m);
	if (!strcmp(mode, "yield-alone"))
		return run_yield(n, 0);
	if (!strcmp(mode, "yield-sibling"))
		return run_yield(n, 1);
	if (!strcmp(mode, "purge-raw"))
		return run_purge_raw(n);
	if (!strcmp(mode, "purge-threads"))
		return run_purge_threads(n);
	if (!strcmp(mode, "purge-trim"))
		return run_purge_trim(n);
	if (!strcmp(mode, "purge-mmap") && argc > 3)
		return run_purge_mmap(n, m);
	if (!strcmp(mode, "idle-runtime"))
		return run_idle_runtime(n);
	if (!strcmp(mode, "forks") && argc > 4)
		return run_forks(argv[2], parse_count(argv[3]), parse_count(argv[4]));
	if (!strcmp(mode, "wait-early") && argc > 3)
		return run_wait_early(argv[2], parse_count(argv[3]));
	fprintf(stderr, "usage: sp-workload MODE [ARGS...] (see the source)\n");
	return 2;
}
