/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The counted syscalls, declared once. Every place that treats a counted
 * syscall by its number is made from this table (core/syscalls.h, and
 * compose/sys_enter.h for what calls the signals): which
 * are counted (syscall_counted), whether a call is counted at all
 * (syscall_gate), what it adds and which fold groups that dirties
 * (count_into), its call-site kind (callsite_kind), the wait a sleeper in
 * it is woken from (syscall_wait), its fentry program, and the enum
 * sp_counted_syscall through which the agent learns the syscalls of each
 * group from the object's BTF. A row missing a column does not build; a
 * syscall has no case anywhere but here.
 *
 * Columns:
 *   name    the syscall (its kernel function, the fentry target, is
 *           __x64_sys_<name> or __arm64_sys_<name>; see NOARGS)
 *   x86_64  its number, arch/x86/entry/syscalls/syscall_64.tbl
 *   arm64   its number, include/uapi/asm-generic/unistd.h (0 when absent)
 *   arches  ANY, or X86_ONLY: arm64 has no time, epoll_wait, poll, select;
 *           or NOARGS: on both, a syscall without arguments
 *           (SYSCALL_DEFINE0), whose x86_64 __x64_sys_<name> is an alias
 *           of __do_sys_<name> (__SYS_STUB0 in
 *           arch/x86/include/asm/syscall_wrapper.h) that BTF has no entry
 *           for: its fentry target there is __do_sys_<name>, the same
 *           function with the same argument (the user registers)
 *   group   enum sp_syscall_group (slowpath.h): the switch that turns its
 *           counting on, set by the signals that count the group
 *   gate    bool gate(regs, btf): whether this call is counted at all (a
 *           timed wait without a timeout arms no timer: not counted)
 *   count   void count(counters, shared, regs, btf): what the call adds,
 *           in its signal's file (signals/)
 *   dirty   the fold groups (enum sp_dirty, core/counting.h) that count
 *           may add to, which a combining slot folds
 *   kind    enum sp_callsite_kind of its sampled user stacks
 *   wait    enum sp_wait of a task sleeping in it woken by its timer
 *           (SP_WAIT_OTHER: not a wait)
 */
#ifndef SP_CORE_SYSCALL_TABLE_H
#define SP_CORE_SYSCALL_TABLE_H

/* clang-format off */
#define SP_COUNTED_SYSCALLS(X)                                                 \
	/* clock reads (signals/clock.bpf.h) */                                \
	X(clock_gettime,   228, 113, ANY,      CLOCK_READS, gate_always,      \
	  count_clock_gettime, SP_DIRTY_CLOCK, SP_CALLSITE_CLOCK, SP_WAIT_OTHER) \
	X(gettimeofday,    96,  169, ANY,      CLOCK_READS, gate_always,      \
	  count_gettimeofday, SP_DIRTY_TOD, SP_CALLSITE_CLOCK, SP_WAIT_OTHER)  \
	X(time,            201, 0,   X86_ONLY, CLOCK_READS, gate_always,      \
	  count_time, SP_DIRTY_TOD, SP_CALLSITE_CLOCK, SP_WAIT_OTHER)          \
	/* signal masks (signals/sigmask.bpf.h) */                             \
	X(rt_sigprocmask,  14,  135, ANY,      SIGPROCMASK, gate_always,      \
	  count_rt_sigprocmask, SP_DIRTY_SIGMASK, SP_CALLSITE_SIGPROCMASK,     \
	  SP_WAIT_OTHER)                                                       \
	/* sleeps (signals/sleep.bpf.h) */                                     \
	X(nanosleep,       35,  101, ANY,      SLEEPS,      gate_always,      \
	  count_nanosleep,                                                     \
	  SP_DIRTY_SLEEP_CALLS << SP_SLEEP_NANOSLEEP |                         \
		  SP_DIRTY_TIMEOUTS << SP_WAIT_NANOSLEEP,                      \
	  SP_CALLSITE_SLEEP, SP_WAIT_NANOSLEEP)                                \
	X(clock_nanosleep, 230, 115, ANY,      SLEEPS,      gate_always,      \
	  count_clock_nanosleep,                                               \
	  SP_DIRTY_SLEEP_CALLS << SP_SLEEP_CLOCK_NANOSLEEP |                   \
		  SP_DIRTY_TIMEOUTS << SP_WAIT_CLOCK_NANOSLEEP,                \
	  SP_CALLSITE_SLEEP, SP_WAIT_CLOCK_NANOSLEEP)                          \
	/* timed waits (signals/timer.bpf.h) */                                \
	X(futex,           202, 98,  ANY,      TIMED_WAITS, gate_futex,       \
	  count_futex, SP_DIRTY_TIMEOUTS << SP_WAIT_FUTEX, SP_CALLSITE_SLEEP,  \
	  SP_WAIT_FUTEX)                                                       \
	X(futex_waitv,     449, 449, ANY,      TIMED_WAITS, gate_ts_arg4,     \
	  count_futex_waitv, SP_DIRTY_TIMEOUTS << SP_WAIT_FUTEX,               \
	  SP_CALLSITE_SLEEP, SP_WAIT_FUTEX)                                    \
	X(epoll_wait,      232, 0,   X86_ONLY, TIMED_WAITS, gate_ms_arg4,     \
	  count_epoll_ms, SP_DIRTY_TIMEOUTS << SP_WAIT_EPOLL_WAIT,             \
	  SP_CALLSITE_SLEEP, SP_WAIT_EPOLL_WAIT)                               \
	X(epoll_pwait,     281, 22,  ANY,      TIMED_WAITS, gate_ms_arg4,     \
	  count_epoll_ms, SP_DIRTY_TIMEOUTS << SP_WAIT_EPOLL_WAIT,             \
	  SP_CALLSITE_SLEEP, SP_WAIT_EPOLL_WAIT)                               \
	X(epoll_pwait2,    441, 441, ANY,      TIMED_WAITS, gate_ts_arg4,     \
	  count_epoll_pwait2, SP_DIRTY_TIMEOUTS << SP_WAIT_EPOLL_WAIT,         \
	  SP_CALLSITE_SLEEP, SP_WAIT_EPOLL_WAIT)                               \
	X(poll,            7,   0,   X86_ONLY, TIMED_WAITS, gate_ms_arg3,     \
	  count_poll, SP_DIRTY_TIMEOUTS << SP_WAIT_POLL, SP_CALLSITE_SLEEP,    \
	  SP_WAIT_POLL)                                                        \
	X(ppoll,           271, 73,  ANY,      TIMED_WAITS, gate_ts_arg3,     \
	  count_ppoll, SP_DIRTY_TIMEOUTS << SP_WAIT_POLL, SP_CALLSITE_SLEEP,   \
	  SP_WAIT_POLL)                                                        \
	X(select,          23,  0,   X86_ONLY, TIMED_WAITS, gate_ts_arg5,     \
	  count_select, SP_DIRTY_TIMEOUTS << SP_WAIT_SELECT,                   \
	  SP_CALLSITE_SLEEP, SP_WAIT_SELECT)                                   \
	X(pselect6,        270, 72,  ANY,      TIMED_WAITS, gate_ts_arg5,     \
	  count_pselect6, SP_DIRTY_TIMEOUTS << SP_WAIT_SELECT,                 \
	  SP_CALLSITE_SLEEP, SP_WAIT_SELECT)                                   \
	/* time-zone file checks (signals/tzfile.bpf.h); x86_64's stat (4) and \
	 * lstat (6) are the kernel's sys_newstat and sys_newlstat (its       \
	 * sys_stat and sys_lstat are the old 32-bit calls)                   \
	 */                                                                    \
	X(newstat,         4,   0,   X86_ONLY, TZFILE_CHECKS, gate_tz_arg1,   \
	  count_tz_check, SP_DIRTY_TZFILE, SP_CALLSITE_TZFILE, SP_WAIT_OTHER)   \
	X(newlstat,        6,   0,   X86_ONLY, TZFILE_CHECKS, gate_tz_arg1,   \
	  count_tz_check, SP_DIRTY_TZFILE, SP_CALLSITE_TZFILE, SP_WAIT_OTHER)   \
	X(newfstatat,      262, 79,  ANY,      TZFILE_CHECKS, gate_tz_arg2,   \
	  count_tz_check, SP_DIRTY_TZFILE, SP_CALLSITE_TZFILE, SP_WAIT_OTHER)   \
	X(statx,           332, 291, ANY,      TZFILE_CHECKS, gate_tz_arg2,   \
	  count_tz_check, SP_DIRTY_TZFILE, SP_CALLSITE_TZFILE, SP_WAIT_OTHER)   \
	/* closes of descriptors that are not open (signals/fdclose.bpf.h) */  \
	X(close,           3,   57,  ANY,      FD_CLOSES,   gate_fd_unopened, \
	  count_fd_close, SP_DIRTY_FD_CLOSE, SP_CALLSITE_FD_CLOSE,             \
	  SP_WAIT_OTHER)                                                       \
	/* yields, by what else was runnable (signals/sched_yield.bpf.h) */    \
	X(sched_yield,     24,  124, NOARGS,   YIELDS,      gate_always,      \
	  count_sched_yield, SP_DIRTY_SCHED_YIELD, SP_CALLSITE_SCHED_YIELD,    \
	  SP_WAIT_OTHER)                                                       \
	/* memory given back to the kernel (signals/purge.bpf.h) */            \
	X(madvise,         28,  233, ANY,      PURGES,      gate_madv_purge,  \
	  count_madvise_purge, SP_DIRTY_PURGE, SP_CALLSITE_PURGE,              \
	  SP_WAIT_OTHER)                                                       \
	X(munmap,          11,  215, ANY,      PURGES,      gate_always,      \
	  count_munmap, SP_DIRTY_PURGE, SP_CALLSITE_PURGE, SP_WAIT_OTHER)      \
	/* forks that copy the address space: their entry time, for          \
	 * task:task_newtask to time the copy (signals/fork.bpf.h); they add  \
	 * to no counter here, so no fold group */                            \
	X(clone,           56,  220, ANY,      FORKS,       gate_clone_copies, \
	  count_fork_entry, 0, SP_CALLSITE_FORK, SP_WAIT_OTHER)                \
	X(clone3,          435, 435, ANY,      FORKS,       gate_clone3_copies, \
	  count_fork_entry, 0, SP_CALLSITE_FORK, SP_WAIT_OTHER)                \
	X(fork,            57,  0,   X86_NOARGS, FORKS,     gate_always,      \
	  count_fork_entry, 0, SP_CALLSITE_FORK, SP_WAIT_OTHER)
/* clang-format on */

/* SP_IF_<arches>(...): the row's code where the syscall exists. */
#if defined(__TARGET_ARCH_x86)
#define SP_IF_ANY(...) __VA_ARGS__
#define SP_IF_X86_ONLY(...) __VA_ARGS__
#define SP_IF_NOARGS(...) __VA_ARGS__
#define SP_IF_X86_NOARGS(...) __VA_ARGS__
#define SP_ARCH_NR(x86_64, arm64) (x86_64)
#else
#define SP_IF_ANY(...) __VA_ARGS__
#define SP_IF_X86_ONLY(...)
#define SP_IF_NOARGS(...) __VA_ARGS__
#define SP_IF_X86_NOARGS(...)
#define SP_ARCH_NR(x86_64, arm64) (arm64)
#endif

/* SP_FN_PREFIX_<arches>: the prefix of the row's kernel function, the
 * fentry target (SP_SYSCALL_FN_PREFIX, or SP_SYSCALL0_FN_PREFIX for a
 * syscall without arguments: core/arch.h). */
#define SP_FN_PREFIX_ANY SP_SYSCALL_FN_PREFIX
#define SP_FN_PREFIX_X86_ONLY SP_SYSCALL_FN_PREFIX
#define SP_FN_PREFIX_NOARGS SP_SYSCALL0_FN_PREFIX
#define SP_FN_PREFIX_X86_NOARGS SP_SYSCALL0_FN_PREFIX

/* SP_NR_<name>: the number of each counted syscall on this arch. */
#define SP_NR_ROW(name, x86_64, arm64, arches, ...)                            \
	SP_IF_##arches(SP_NR_##name = SP_ARCH_NR(x86_64, arm64), )
enum sp_syscall_nr { SP_COUNTED_SYSCALLS(SP_NR_ROW) };
#undef SP_NR_ROW

#endif /* SP_CORE_SYSCALL_TABLE_H */
