/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The timer signal's wakeups: a process woken by an expiring timer,
 * counted for the woken process by what it waited in (enum sp_wait), at
 * timer:hrtimer_expire_entry/exit and sched:sched_waking, the timer-loop
 * windows they fill, and their fold group. The wakeups counted in a
 * combining slot are in compose/wakeups.h.
 */
#ifndef SP_SIGNALS_TIMER_WAKEUPS_H
#define SP_SIGNALS_TIMER_WAKEUPS_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/counting.h"
#include "core/procs.h"
#include "core/syscalls.h"
#include "core/task_regs.h"

/*
 * A wakeup is a timer wakeup when sched:sched_waking fires on a CPU between
 * timer:hrtimer_expire_entry and timer:hrtimer_expire_exit: the expiring
 * timer's callback made it (kernel/time/hrtimer.c, __run_hrtimer()). That
 * covers the sleepers (hrtimer_wakeup: nanosleep, clock_nanosleep, and the
 * timeouts of futex, epoll, poll and select, via schedule_hrtimeout_range())
 * and timers that wake a task indirectly (timerfd_tmrproc wakes the reader
 * or poller of a timerfd; it_real_fn and posix_timer_fn signal the process).
 * try_to_wake_up() traces sched_waking only for a task that really sleeps,
 * so a timer that fires after its task woke up otherwise counts nothing, and
 * a wait ended early by an event cancels its timer and counts nothing.
 */

/* Timers expiring on each CPU now (struct sp_timer_cpu): a wakeup seen
 * by sched_waking while one expires was made by that timer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_timer_cpu);
} timer_cpu SEC(".maps");

/* enum sp_timer_fn of each hrtimer function address seen: the name is
 * formatted once per address (bpf_snprintf "%ps"), not per expiry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, __u64);
	__type(value, __u32);
} timer_fns SEC(".maps");

/* bpf_snprintf formats need a read-only map. */
static const char timer_fn_format[] = "%ps";

/* Whether `name` (a kallsyms name, maybe with an LTO ".llvm.N" suffix)
 * is `want`. */
static __always_inline bool fn_name_is(const char *name, const char *want, int len)
{
	for (int i = 0; i < len; i++)
		if (name[i] != want[i])
			return false;
	return name[len] == '\0' || name[len] == '.';
}

#define SP_FN_IS(name, lit) fn_name_is(name, lit, sizeof(lit) - 1)

/* Kernels without bpf_snprintf() (before 5.13): the agent gives the
 * callbacks' addresses from /proc/kallsyms (hrtimer_wakeup, timerfd_tmrproc,
 * it_real_fn, posix_timer_fn, in that order) and sets timer_fns_by_address;
 * the verifier then prunes the bpf_snprintf() call as dead code. */
const volatile bool timer_fns_by_address = false;
const volatile __u64 timer_fn_addrs[4] = {};

/* enum sp_timer_fn of an hrtimer callback address: by name, once per address. */
static __noinline __u32 timer_fn_kind(__u64 fn)
{
	char name[32] = {};
	__u32 *known, kind;

	if (timer_fns_by_address) {
		if (fn == timer_fn_addrs[0])
			return SP_TIMER_FN_SLEEPER;
		if (fn == timer_fn_addrs[1])
			return SP_TIMER_FN_TIMERFD;
		if (fn == timer_fn_addrs[2] || fn == timer_fn_addrs[3])
			return SP_TIMER_FN_POSIX;
		return SP_TIMER_FN_OTHER;
	}
	known = bpf_map_lookup_elem(&timer_fns, &fn);
	if (known)
		return *known;
	if (bpf_snprintf(name, sizeof(name), timer_fn_format, &fn, sizeof(fn)) < 0)
		return SP_TIMER_FN_OTHER;
	if (SP_FN_IS(name, "hrtimer_wakeup"))
		kind = SP_TIMER_FN_SLEEPER;
	else if (SP_FN_IS(name, "timerfd_tmrproc"))
		kind = SP_TIMER_FN_TIMERFD;
	else if (SP_FN_IS(name, "it_real_fn") || SP_FN_IS(name, "posix_timer_fn"))
		kind = SP_TIMER_FN_POSIX;
	else
		kind = SP_TIMER_FN_OTHER;
	bpf_map_update_elem(&timer_fns, &fn, &kind, BPF_ANY); /* a full cache only costs a format */
	return kind;
}

/* enum sp_timer_fn of the hrtimer callback at `fn`, from this CPU's cache
 * in `t` (a few compares, no call), else from timer_fn_kind() (a hash
 * lookup, or a format on the first expiry of `fn`), then cached. */
static __always_inline __u32 timer_fn_kind_cached(struct sp_timer_cpu *t, __u64 fn)
{
	__u32 slot, kind;

#pragma unroll
	for (int i = 0; i < SP_TIMER_FN_CACHE; i++)
		if (t->fn_addr[i] == fn)
			return t->fn_kind[i];
	kind = timer_fn_kind(fn);
	slot = t->fn_next++ & (SP_TIMER_FN_CACHE - 1);
	barrier_var(slot);
	if (slot < SP_TIMER_FN_CACHE) {
		t->fn_addr[slot] = fn;
		t->fn_kind[slot] = kind;
	}
	return kind;
}

/* The innermost timer expiring on this CPU, or NULL; drops frames whose
 * _exit was never seen (SP_TIMER_FRAME_MAX_JIFFIES), so one lost event
 * cannot make every later wakeup on the CPU look like a timer's. `now`:
 * bpf_jiffies64(). */
static __always_inline struct sp_timer_frame *timer_top(struct sp_timer_cpu *t, __u64 now)
{
	__u32 depth = t->depth, top;

	if (depth == 0)
		return NULL;
	top = depth - 1;
	barrier_var(top);
	if (top >= SP_TIMER_MAX_DEPTH)
		return NULL;
	if (now - t->frames[top].start_jiffies > SP_TIMER_FRAME_MAX_JIFFIES) {
		t->depth = 0;
		return NULL;
	}
	return &t->frames[top];
}

static __always_inline int on_hrtimer_expire_entry(struct hrtimer *timer, const bool btf)
{
	struct sp_timer_cpu *t;
	__u32 zero = 0, depth;
	__u64 now, fn;

	t = bpf_map_lookup_elem(&timer_cpu, &zero);
	if (!t)
		return 0;
	now = bpf_jiffies64();
	timer_top(t, now); /* drop stale frames first */
	depth = t->depth;
	barrier_var(depth);
	if (depth >= SP_TIMER_MAX_DEPTH)
		return 0; /* deeper than hrtimer callbacks nest */
	fn = btf ? (__u64)timer->function : (__u64)BPF_CORE_READ(timer, function);
	t->frames[depth].hrtimer = (__u64)timer;
	t->frames[depth].start_jiffies = now;
	t->frames[depth].fn = timer_fn_kind_cached(t, fn);
	t->depth = depth + 1;
	return 0;
}

static __always_inline int on_hrtimer_expire_exit(struct hrtimer *timer)
{
	struct sp_timer_cpu *t;
	__u32 zero = 0, depth, top;

	t = bpf_map_lookup_elem(&timer_cpu, &zero);
	if (!t || t->depth == 0)
		return 0;
	depth = t->depth;
	top = depth - 1;
	barrier_var(top);
	/* only the exit of the timer on top: an exit whose entry was not seen
	 * (attached in between, or skipped) leaves the frames alone */
	if (top < SP_TIMER_MAX_DEPTH && t->frames[top].hrtimer == (__u64)timer)
		t->depth = top;
	return 0;
}

/* ---- timer-loop windows ------------------------------------------------ */

/* Timer wakeups in one ~1 s window that make a process a timer loop
 * (struct sp_counters.timer_hot_windows); the agent sets it from
 * --timer.loop-threshold. */
const volatile __u32 timer_hot_wakeups = 200;

/* Jiffies in one timer-loop window: HZ, so one second, set by the agent
 * (the resolution of CLOCK_MONOTONIC_COARSE is one jiffy: kernel/time/
 * posix-timers.c, LOW_RES_NSEC). 0 when the agent could not tell: windows
 * of 2^30 ns from the clock then. Not CONFIG_HZ through __kconfig: libbpf
 * reads that only from a kernel config file and refuses the whole object
 * where there is none, even for a __weak extern. */
const volatile __u32 timer_window_jiffies = 0;

/* The number of the current timer-loop window. bpf_jiffies64() is a load
 * (inlined on 64-bit arches): no clock read on the wakeup path. */
static __always_inline __u32 timer_window_now(void)
{
	if (timer_window_jiffies)
		return bpf_jiffies64() / timer_window_jiffies;
	return bpf_ktime_get_ns() >> 30;
}

/* Add `n` timer wakeups of window `win` to the window count of entry `p`,
 * and count a `hot` window the first time the count reaches
 * timer_hot_wakeups (the agent scales the threshold to a 2^30 ns window
 * without HZ). The entry keeps the current window and the one before: a
 * CPU's slot hands a window's wakeups in when its CPU sees the next window
 * or at a fold, often after another CPU began the next window (a process
 * that moved CPUs mid-window; a 500-wakeup loop split 100/150 between two
 * slots was not hot before). Counts of an older window are dropped: the
 * wakeups themselves are counted elsewhere, only the window test can miss
 * them. Plain stores: a race between CPUs can only shift a few wakeups
 * between windows. */
static __always_inline void window_add(struct sp_proc *p, __u32 win, __u32 n)
{
	__u32 *count, before;

	if (p->timer_window == win) {
		count = &p->timer_window_wakeups;
	} else if (p->timer_window == win + 1) {
		count = &p->timer_prev_window_wakeups;
	} else if ((__s32)(win - p->timer_window) > 0) {
		p->timer_prev_window_wakeups =
			win == p->timer_window + 1 ? p->timer_window_wakeups : 0;
		p->timer_window = win;
		p->timer_window_wakeups = 0;
		count = &p->timer_window_wakeups;
	} else {
		return;
	}
	before = *count;
	*count = before + n;
	if (before < timer_hot_wakeups && before + n >= timer_hot_wakeups)
		__sync_fetch_and_add(&p->c.timer_hot_windows, 1);
}

/* ---- wakeups --------------------------------------------------------- */

/* The syscall a sleeping task `p` waits in, from its user registers:
 * direct loads from BTF pointers under tp_btf (no helper call but
 * bpf_task_pt_regs()), probe reads under raw_tp. */
static __always_inline __u32 sleeper_wait(struct task_struct *p, const bool btf)
{
	struct pt_regs *regs;
	long nr;

	if ((btf ? p->flags : BPF_CORE_READ(p, flags)) & SP_PF_KTHREAD)
		return SP_WAIT_OTHER; /* no user registers */
	if (btf ? task_btf_in_compat_syscall(p) : task_in_compat_syscall(p))
		return SP_WAIT_OTHER; /* ia32 or AArch32 syscall numbers */
	regs = task_user_regs(p, btf);
	if (!regs)
		return SP_WAIT_OTHER; /* no syscall counted yet */
	nr = btf ? SP_SYSCALL_NR_BTF(regs) : SP_SYSCALL_NR(regs);
	return syscall_wait(nr);
}

/* Count a timer wakeup of task `p` (thread group `tgid`) by `wait` in its
 * `procs` entry, with atomic adds (the path without slots). */
static __always_inline int count_wakeup_entry(__u32 tgid, struct task_struct *p, __u32 wait)
{
	struct sp_proc *proc = proc_of(tgid, p); /* counts a full table as lost */

	if (!proc)
		return 0;
	SP_INC_AT(true, proc->c.timer_wakeups, wait);
	window_add(proc, timer_window_now(), 1);
	return 0;
}

/* The innermost timer expiring on this CPU (timer_top()), or NULL when
 * none is: a wakeup seen now is that timer's. */
static __always_inline struct sp_timer_frame *timer_expiring(void)
{
	struct sp_timer_cpu *t;
	__u32 zero = 0;
	__u64 now;

	t = bpf_map_lookup_elem(&timer_cpu, &zero);
	if (!t || t->depth == 0)
		return NULL; /* every wakeup not made by a timer leaves here */
	now = bpf_jiffies64();
	return timer_top(t, now);
}

/* What task `p`, woken by the expiring timer `top`, waited in (enum
 * sp_wait). Where the wakeup is counted (this CPU's slot or the entry) is
 * compose/wakeups.h's. */
static __always_inline __u32 timer_wakeup_wait(struct sp_timer_frame *top, struct task_struct *p,
					       const bool btf)
{
	switch (top->fn) {
	case SP_TIMER_FN_SLEEPER:
		return sleeper_wait(p, btf);
	case SP_TIMER_FN_TIMERFD:
		return SP_WAIT_TIMERFD;
	case SP_TIMER_FN_POSIX:
		return SP_WAIT_POSIX_TIMER;
	}
	return SP_WAIT_OTHER;
}

/* The fold group of the timer wakeups (compose/slots.h). */
static __always_inline void fold_timer_wakeups(struct sp_counters *from, struct sp_counters *to,
					       __u64 dirty)
{
	if (dirty & SP_DIRTY_WAKEUPS)
		SP_FOLD_WORDS(from->timer_wakeups, to->timer_wakeups, SP_WORDS(from->timer_wakeups));
}

#endif /* SP_SIGNALS_TIMER_WAKEUPS_H */
