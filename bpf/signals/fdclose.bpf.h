/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The fdclose signal: close() of a descriptor the process does not have
 * open, which the kernel answers with EBADF. Code that closes "every
 * descriptor that might be open" before it execs or daemonizes loops
 * close(fd) up to sysconf(_SC_OPEN_MAX), the soft RLIMIT_NOFILE, so almost
 * every call of the sweep lands here; a container's nofile of 1,048,576 or
 * more makes that a second or minutes per spawn.
 *
 * Told at sys_enter, with no sys_exit program, from the caller's file table
 * as close_fd() (fs/file.c) would find it: a descriptor at or past
 * fdt->max_fds, or whose open_fds bit is clear, is not open. What a thread
 * of the same process can change between this read and the close's own
 * lookup: an open (or dup2) that installs that very descriptor number, or a
 * close of it, in the same instant; or a descriptor another thread has
 * reserved and not yet installed (its bit set, its file not yet there:
 * the close returns EBADF, and is not counted). So a count can be off by
 * the racing calls on the same number, never by a sweep's other closes. A
 * concurrent growth of the table leaves this read on the old table, still
 * valid under RCU, which holds the state before that open.
 *
 * Cost on a close: a sweep mostly passes the first test (a process with few
 * descriptors has max_fds 64). With BTF, one helper call for the task and
 * three loads (task->files->fdt, max_fds); below max_fds, the bitmap word
 * is one more load from the table embedded in files_struct (max_fds 64), or
 * an 8-byte probe read from a grown table. raw_tp reads each with a probe
 * read. Its
 * syscall and its columns are in core/syscall_table.h (group FD_CLOSES).
 */
#ifndef SP_SIGNALS_FDCLOSE_H
#define SP_SIGNALS_FDCLOSE_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/counting.h"

#define SP_BITS_PER_LONG 64

/* Whether bit `fd` of the open_fds bitmap at `open_fds` is clear (one
 * 8-byte read; an unreadable word counts as open: nothing is counted). */
static __always_inline bool fd_bit_clear(unsigned long open_fds, unsigned int fd)
{
	unsigned long word;

	if (bpf_probe_read_kernel(&word, sizeof(word),
				  (const void *)(open_fds + (fd / SP_BITS_PER_LONG) * sizeof(word))))
		return false;
	return !(word & (1UL << (fd % SP_BITS_PER_LONG)));
}

/* The gate (the table's gate column): whether close(fd) finds no open
 * descriptor. fd is an unsigned int, as close(2) takes it (close(-1) is
 * fd 4294967295, past any table). */
static __always_inline bool gate_fd_unopened(struct pt_regs *regs, const bool btf)
{
	unsigned int fd = (unsigned int)SP_SYSCALL_ARG(btf, regs, 1);
	struct fdtable *fdt;
	unsigned int max_fds;

	if (btf) {
		struct files_struct *files = bpf_get_current_task_btf()->files;

		/* BTF pointer walks: plain loads the JIT guards */
		fdt = files->fdt;
		if (!fdt)
			return false;
		max_fds = fdt->max_fds;
		if (fd >= max_fds)
			return true;
		/* A table of one word is the one embedded in files_struct
		 * (dup_fd(); a table alloc_fdtable() makes holds 128 or more,
		 * fs/file.c): its bitmap is a plain load, no helper call. */
		if (max_fds <= SP_BITS_PER_LONG)
			return !(files->open_fds_init[0] & (1UL << fd));
		return fd_bit_clear((unsigned long)fdt->open_fds, fd);
	}
	fdt = BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), files, fdt);
	if (!fdt)
		return false;
	max_fds = BPF_CORE_READ(fdt, max_fds);
	if (fd >= max_fds)
		return true;
	return fd_bit_clear((unsigned long)BPF_CORE_READ(fdt, open_fds), fd);
}

/* Count a close of a descriptor that is not open (its gate passed). */
static __always_inline void count_fd_close(struct sp_counters *c, const bool shared,
					   struct pt_regs *regs, const bool btf)
{
	SP_ADD(shared, &c->fd_close_unopened, 1);
}

/* The fold group of the unopened closes (compose/slots.h). */
static __always_inline void fold_fd_close(struct sp_counters *from, struct sp_counters *to,
					  __u64 dirty)
{
	if (dirty & SP_DIRTY_FD_CLOSE)
		SP_FOLD_WORDS(&from->fd_close_unopened, &to->fd_close_unopened, 1);
}

#endif /* SP_SIGNALS_FDCLOSE_H */
