/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The tzfile signal: checks of the default time-zone file. With TZ unset,
 * glibc's localtime(), mktime() and tzset() stat /etc/localtime on every
 * call to see whether it changed (time/tzfile.c, __tzfile_read() with
 * TZDEFAULT), a syscall each where TZ=:/etc/localtime costs none.
 *
 * Counted: stat-family calls (stat, lstat, newfstatat, statx) whose path is
 * "/etc/localtime" and lies in the calling code's own image, as the C
 * library's TZDEFAULT literal does: within SP_TZ_NEAR bytes of the syscall's
 * return address. Reading a path from user memory costs ~110 ns; the
 * distance test costs a subtract and a compare, so a stat of a path on the
 * stack or the brk heap (build tools, `git status`) pays nothing more; a
 * path mapped near the C library (thread arenas, large allocations) is read
 * and compared: a cost, and a count only when it is the file. A stat of
 * /etc/localtime from the stack or the brk heap (`stat /etc/localtime`) is
 * not counted: it is no time-zone check of the C library. Its syscalls and
 * their columns are in core/syscall_table.h (group TZFILE_CHECKS).
 */
#ifndef SP_SIGNALS_TZFILE_H
#define SP_SIGNALS_TZFILE_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/counting.h"

/* Farthest a path literal lies from the code that passes it, in the same
 * ELF image: glibc's .rodata is ~1.5 MiB from its syscall instructions, and
 * a static binary keeps both in one image; the stack and the brk heap are
 * much farther. */
#define SP_TZ_NEAR (64ULL << 20)

/* "/etc/localtime\0" as two little-endian words (15 bytes read). */
#define SP_TZ_PATH_LO 0x636f6c2f6374652fULL /* "/etc/loc" */
#define SP_TZ_PATH_HI 0x0000656d69746c61ULL /* "altime\0" */

/* The return address of the syscall in the user registers. */
#define SP_USER_IP(btf, regs) ((btf) ? PT_REGS_IP(regs) : PT_REGS_IP_CORE(regs))

/* Whether the path at `path` may be a literal of the calling code. */
static __always_inline bool tz_path_near(struct pt_regs *regs, unsigned long path, const bool btf)
{
	unsigned long ip = SP_USER_IP(btf, regs);

	return (path > ip ? path - ip : ip - path) < SP_TZ_NEAR;
}

/* Whether the path at `path` is "/etc/localtime" (15 bytes read). */
static __always_inline bool tz_path_is_default(unsigned long path)
{
	__u64 word[2] = {};

	if (bpf_probe_read_user(word, 15, (const void *)path))
		return false;
	return word[0] == SP_TZ_PATH_LO && word[1] == SP_TZ_PATH_HI;
}

/* The gates (the table's gate column) pass a check only: the read is made
 * here, so that a stat of another file never reaches the process table
 * (no entry made, no comm taken before a later prctl(PR_SET_NAME)).
 * stat and lstat pass the path first. */
static __always_inline bool gate_tz_arg1(struct pt_regs *regs, const bool btf)
{
	unsigned long path = SP_SYSCALL_ARG(btf, regs, 1);

	return tz_path_near(regs, path, btf) && tz_path_is_default(path);
}

/* newfstatat and statx pass it second, after the directory fd. */
static __always_inline bool gate_tz_arg2(struct pt_regs *regs, const bool btf)
{
	unsigned long path = SP_SYSCALL_ARG(btf, regs, 2);

	return tz_path_near(regs, path, btf) && tz_path_is_default(path);
}

/* Count a check (its gate passed). */
static __always_inline void count_tz_check(struct sp_counters *c, const bool shared,
					   struct pt_regs *regs, const bool btf)
{
	SP_ADD(shared, &c->tzfile_stats, 1);
}

/* The fold group of the time-zone file checks (compose/slots.h). */
static __always_inline void fold_tzfile(struct sp_counters *from, struct sp_counters *to,
					__u64 dirty)
{
	if (dirty & SP_DIRTY_TZFILE)
		SP_FOLD_WORDS(&from->tzfile_stats, &to->tzfile_stats, 1);
}

#endif /* SP_SIGNALS_TZFILE_H */
