/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * How counters are added to and folded: the adds every signal makes, and
 * the groups of counters a combining slot (compose/slots.h) folds one by one.
 */
#ifndef SP_CORE_COUNTING_H
#define SP_CORE_COUNTING_H

#include "slowpath.h"

/* *ptr += v: atomic on a line other CPUs add to (`shared`: a `procs`
 * entry), a plain add on this CPU's own combining slot (struct sp_slot).
 * `shared` is a constant at every use, so one of the two is compiled. */
#define SP_ADD(shared, ptr, v)                                                 \
	do {                                                                   \
		if (shared)                                                    \
			__sync_fetch_and_add((ptr), (v));                      \
		else                                                           \
			*(ptr) += (v);                                         \
	} while (0)

/* arr[idx] += 1 with a bounds check the verifier can follow: barrier_var()
 * stops the compiler from checking one copy of idx and indexing with another. */
#define SP_INC_AT(shared, arr, idx)                                            \
	do {                                                                   \
		__u32 __i = (idx);                                             \
		barrier_var(__i);                                              \
		if (__i < sizeof(arr) / sizeof((arr)[0]))                      \
			SP_ADD(shared, &(arr)[__i], 1);                        \
	} while (0)

/* Groups of slot counters, one bit each in sp_slot.dirty: a fold visits
 * only the groups an image touched (a clock-reading process: 14 words, not
 * all SP_SLOT_WORDS). Each counted syscall names its groups in the table
 * (core/syscall_table.h); each group has one fold function
 * (SP_FOLD_GROUPS, below).
 *
 * The bits are numbered here, each group after the one before, so that a
 * group that grows (a wait more, a sleep syscall more) moves the ones after
 * it instead of overlapping them. */
enum sp_dirty_bit {
	SP_DIRTY_BIT_CLOCK,	  /* clock_gettime[] */
	SP_DIRTY_BIT_TOD,	  /* gettimeofday, time */
	SP_DIRTY_BIT_SIGMASK,	  /* sigprocmask[] */
	SP_DIRTY_BIT_SLEEP_CALLS, /* sleep_calls[s]: one bit per sleep syscall */
	/* timer_waits[w] and timeout_buckets[w]: one bit per wait; and timeout_ns[] */
	SP_DIRTY_BIT_TIMEOUTS = SP_DIRTY_BIT_SLEEP_CALLS + SP_SLEEP_SYSCALL_COUNT,
	SP_DIRTY_BIT_WAKEUPS = SP_DIRTY_BIT_TIMEOUTS + SP_WAIT_SYSCALL_COUNT, /* timer_wakeups[] */
	SP_DIRTY_BIT_TZFILE,	  /* tzfile_stats */
	SP_DIRTY_BIT_FD_CLOSE,	  /* fd_close_unopened */
	SP_DIRTY_BIT_SCHED_YIELD, /* sched_yield[] */
	SP_DIRTY_BIT_PURGE,	  /* purge_calls[], purge_bytes[] */
	SP_DIRTY_BIT_COUNT,
};

/* The masks of the groups, from the bits above: SP_DIRTY_SLEEP_CALLS <<
 * syscall and SP_DIRTY_TIMEOUTS << wait name one syscall's or wait's bit. */
enum sp_dirty {
	SP_DIRTY_CLOCK = 1 << SP_DIRTY_BIT_CLOCK,
	SP_DIRTY_TOD = 1 << SP_DIRTY_BIT_TOD,
	SP_DIRTY_SIGMASK = 1 << SP_DIRTY_BIT_SIGMASK,
	SP_DIRTY_SLEEP_CALLS = 1 << SP_DIRTY_BIT_SLEEP_CALLS,
	SP_DIRTY_TIMEOUTS = 1 << SP_DIRTY_BIT_TIMEOUTS,
	SP_DIRTY_WAKEUPS = 1 << SP_DIRTY_BIT_WAKEUPS,
	SP_DIRTY_TZFILE = 1 << SP_DIRTY_BIT_TZFILE,
	SP_DIRTY_FD_CLOSE = 1 << SP_DIRTY_BIT_FD_CLOSE,
	SP_DIRTY_SCHED_YIELD = 1 << SP_DIRTY_BIT_SCHED_YIELD,
	SP_DIRTY_PURGE = 1 << SP_DIRTY_BIT_PURGE,
	/* every bit of a group with one bit per syscall or wait */
	SP_DIRTY_SLEEP_CALLS_ALL = ((SP_DIRTY_SLEEP_CALLS << SP_SLEEP_SYSCALL_COUNT) - 1) &
				   ~(SP_DIRTY_SLEEP_CALLS - 1),
	SP_DIRTY_TIMEOUTS_ALL = ((SP_DIRTY_TIMEOUTS << SP_WAIT_SYSCALL_COUNT) - 1) &
				~(SP_DIRTY_TIMEOUTS - 1),
};

/* Every bit fits sp_slot.dirty, and every mask an enum constant (an int):
 * past bit 30, 1 << bit would overflow. */
_Static_assert(SP_DIRTY_BIT_COUNT <= 8 * sizeof(((struct sp_slot *)0)->dirty),
	       "more fold-group bits than sp_slot.dirty holds");
_Static_assert(SP_DIRTY_BIT_COUNT <= 31, "a fold-group bit past an int's: widen enum sp_dirty");

/* The fold groups of a combining slot: the dirty bits each fold function
 * (in its signal's file, or core/ for the shared ones) clears, in the order
 * fold_dirty() (compose/slots.h) runs them. Named here, beside the bits, so
 * that a new group is one place; the functions are only called where
 * compose/slots.h expands the list, after every signal. */
#define SP_FOLD_GROUPS(X)                                                      \
	X(SP_DIRTY_CLOCK | SP_DIRTY_TOD, fold_clock_reads)                     \
	X(SP_DIRTY_SIGMASK, fold_sigmask)                                      \
	X(SP_DIRTY_SLEEP_CALLS_ALL, fold_sleep_calls)                          \
	X(SP_DIRTY_TIMEOUTS_ALL, fold_timeouts)                                \
	X(SP_DIRTY_WAKEUPS, fold_timer_wakeups)                                \
	X(SP_DIRTY_TZFILE, fold_tzfile)                                        \
	X(SP_DIRTY_FD_CLOSE, fold_fd_close)                                    \
	X(SP_DIRTY_SCHED_YIELD, fold_sched_yield)                              \
	X(SP_DIRTY_PURGE, fold_purge)

/* The groups share no bit and leave none out: their bits, counted one group
 * at a time, are as many as in all of them together, and that is every bit
 * below SP_DIRTY_BIT_COUNT. A bit no group folds would stay in the slot and
 * go to the next image. */
#define SP_GROUP_BITS(mask, fold) +__builtin_popcount(mask)
#define SP_GROUP_MASK(mask, fold) | (mask)
_Static_assert((0 SP_FOLD_GROUPS(SP_GROUP_BITS)) == __builtin_popcount(0 SP_FOLD_GROUPS(SP_GROUP_MASK)),
	       "two fold groups of SP_FOLD_GROUPS fold one dirty bit");
_Static_assert((0 SP_FOLD_GROUPS(SP_GROUP_MASK)) == (1 << SP_DIRTY_BIT_COUNT) - 1,
	       "a bit of enum sp_dirty_bit has no fold group in SP_FOLD_GROUPS");
#undef SP_GROUP_BITS
#undef SP_GROUP_MASK

/* Add the non-zero words of `from` to `to` (atomic: other CPUs add there
 * too) and zero them; `n` is a constant, so the loop unrolls. */
#define SP_FOLD_WORDS(from, to, n)                                             \
	do {                                                                   \
		__u64 *__f = (__u64 *)(from), *__t = (__u64 *)(to), __v;       \
		_Pragma("unroll") for (int __i = 0; __i < (n); __i++)          \
		{                                                              \
			__v = __f[__i];                                        \
			if (__v) {                                             \
				__sync_fetch_and_add(&__t[__i], __v);          \
				__f[__i] = 0;                                  \
			}                                                      \
		}                                                              \
	} while (0)
#define SP_WORDS(field) (sizeof(field) / sizeof(__u64))

#endif /* SP_CORE_COUNTING_H */
