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

/* Whether `path` may be a literal of the code at `ip`. */
static __always_inline bool tz_path_near(unsigned long path, unsigned long ip)
{
	return (path > ip ? path - ip : ip - path) < SP_TZ_NEAR;
}

#if defined(__TARGET_ARCH_x86)
/* x86_64's pt_regs from si to ip, in the entry frame's order
 * (arch/x86/include/asm/ptrace.h; checked at load), so that one probe read
 * brings a stat's path (di or si) and its return address (ip) under raw_tp. */
struct sp_tz_regs_window {
	unsigned long si, di, orig_ax, ip;
};
#endif

/* Syscall argument `n` (1 or 2: the stat's path) of user registers `regs`. */
static __always_inline unsigned long tz_path_arg(struct pt_regs *regs, const int n, const bool btf)
{
	return n == 1 ? SP_SYSCALL_ARG(btf, regs, 1) : SP_SYSCALL_ARG(btf, regs, 2);
}

/* Syscall argument `n` (1 or 2, a path) and the return address of user
 * registers `regs`. Under tp_btf and fentry both are direct loads. Under
 * raw_tp each CO-RE read is a bpf_probe_read_kernel() call (~25 ns on an
 * Intel with retpolines, more with SRSO), so on x86_64 the two come in one
 * read of the registers between them; arm64 keeps two (orig_x0 or x1, and
 * pc, lie 256 bytes apart: see PT_REGS_PARM1_CORE_SYSCALL). False when the
 * registers could not be read. */
static __always_inline bool tz_path_and_ip(struct pt_regs *regs, const int n, const bool btf,
					   unsigned long *path, unsigned long *ip)
{
	if (btf) {
		*path = tz_path_arg(regs, n, true);
		*ip = PT_REGS_IP(regs);
		return true;
	}
	/* Kernel 5.15+: the current task's user registers as a BTF pointer
	 * (the same pt_regs the tracepoint passes), read by direct loads: two
	 * cheap helper calls, no probe read. The enum value is relocated at
	 * load, so the verifier prunes the branch a kernel cannot take. */
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs)) {
		struct pt_regs *user = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

		*path = tz_path_arg(user, n, true);
		*ip = PT_REGS_IP(user);
		return true;
	}
#if defined(__TARGET_ARCH_x86)
	/* Relocated offsets: constants at load, so the verifier keeps one branch. */
	if (bpf_core_field_offset(struct pt_regs, ip) - bpf_core_field_offset(struct pt_regs, si) ==
	    offsetof(struct sp_tz_regs_window, ip)) {
		struct sp_tz_regs_window w;

		if (bpf_probe_read_kernel(&w, sizeof(w),
					  (void *)regs + bpf_core_field_offset(struct pt_regs, si)))
			return false;
		*path = n == 1 ? w.di : w.si;
		*ip = w.ip;
		return true;
	}
#endif
	*path = tz_path_arg(regs, n, false);
	*ip = PT_REGS_IP_CORE(regs);
	return true;
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
	unsigned long path, ip;

	return tz_path_and_ip(regs, 1, btf, &path, &ip) && tz_path_near(path, ip) &&
	       tz_path_is_default(path);
}

/* newfstatat and statx pass it second, after the directory fd. */
static __always_inline bool gate_tz_arg2(struct pt_regs *regs, const bool btf)
{
	unsigned long path, ip;

	return tz_path_and_ip(regs, 2, btf, &path, &ip) && tz_path_near(path, ip) &&
	       tz_path_is_default(path);
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
