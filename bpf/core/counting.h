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
 * (SP_FOLD_GROUPS in compose/slots.h). */
enum sp_dirty {
	SP_DIRTY_CLOCK = 1 << 0,	 /* clock_gettime[] */
	SP_DIRTY_TOD = 1 << 1,		 /* gettimeofday, time */
	SP_DIRTY_SIGMASK = 1 << 2,	 /* sigprocmask[] */
	SP_DIRTY_SLEEP_CALLS = 1 << 3, /* sleep_calls[0..1], SP_DIRTY_SLEEP_CALLS << syscall */
	SP_DIRTY_TIMEOUTS = 1 << 5,	 /* timer_waits[w] and timeout_buckets[w], SP_DIRTY_TIMEOUTS << w, and timeout_ns[] */
	SP_DIRTY_WAKEUPS = 1 << 11,	 /* timer_wakeups[] */
	SP_DIRTY_TZFILE = 1 << 12,	 /* tzfile_stats */
	/* every bit of a group with one bit per syscall or wait */
	SP_DIRTY_SLEEP_CALLS_ALL = ((SP_DIRTY_SLEEP_CALLS << SP_SLEEP_SYSCALL_COUNT) - 1) &
				   ~(SP_DIRTY_SLEEP_CALLS - 1),
	SP_DIRTY_TIMEOUTS_ALL = ((SP_DIRTY_TIMEOUTS << SP_WAIT_SYSCALL_COUNT) - 1) &
				~(SP_DIRTY_TIMEOUTS - 1),
};

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
