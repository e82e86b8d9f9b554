/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The fork signal: forks that copy the caller's address space. A fork
 * without CLONE_VM copies the parent's page tables (dup_mmap() in
 * kernel/fork.c, from copy_mm()), so it takes longer the more memory the
 * parent maps, and the parent waits the whole time: about 10 to 20 ms per
 * GiB with 4 KiB pages, seconds on Xen PV. vfork and posix_spawn
 * (CLONE_VM|CLONE_VFORK) and threads (CLONE_VM) copy nothing.
 *
 * The time: the fork's syscall entry (clone, clone3 and, on x86_64, fork:
 * the rows of core/syscall_table.h, whose gates pass only calls without
 * CLONE_VM) stores the thread's entry time; task:task_newtask, which runs
 * only on forks, at the end of copy_process() after copy_mm(), in the
 * parent, reads it back and counts the copy for the parent. No sys_exit
 * program: the time is entry to the new task, the copy, not the child's
 * wakeup (a few us more, wake_up_new_task()).
 *
 * The pattern: the child's tgid waits in fork_children; an exec by it
 * (sched_process_exec) counts a fork-then-exec for the parent (the spawn
 * pattern, which posix_spawn or vfork make a copy of nothing); its exit
 * forgets it (a copy that lived: a snapshot, a worker).
 */
#ifndef SP_SIGNALS_FORK_H
#define SP_SIGNALS_FORK_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/counting.h"
#include "core/procs.h"

/* include/uapi/linux/sched.h */
#define SP_CLONE_VM 0x00000100ULL

/* Most forks in flight at once (threads between their fork's entry and its
 * new task): an entry of a fork that failed before its new task stays
 * until its thread forks again or the LRU drops it. */
#define SP_FORKS_IN_FLIGHT 4096

/* Entry time (bpf_ktime_get_ns()) of a thread's fork that copies, by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SP_FORKS_IN_FLIGHT);
	__type(key, __u32);
	__type(value, __u64);
} fork_started SEC(".maps");

/* The parent of a copying fork's child: its tgid and its leader's start,
 * which tell it from a later process on a recycled pid. */
struct sp_fork_parent {
	__u32 tgid;
	__u64 start_boottime_ns;
};

/* Children of copying forks that have not exec'd or exited yet, by tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SP_FORKS_IN_FLIGHT);
	__type(key, __u32);
	__type(value, struct sp_fork_parent);
} fork_children SEC(".maps");

/* clone(flags, ...): its first argument, on both arches. */
static __always_inline bool gate_clone_copies(struct pt_regs *regs, const bool btf)
{
	return !(SP_SYSCALL_ARG(btf, regs, 1) & SP_CLONE_VM);
}

/* clone3(args, size): flags is struct clone_args's first field, in the
 * caller's memory (on its stack, paged in). Unread: not counted. */
static __always_inline bool gate_clone3_copies(struct pt_regs *regs, const bool btf)
{
	__u64 flags;

	if (bpf_probe_read_user(&flags, sizeof(flags), (void *)SP_SYSCALL_ARG(btf, regs, 1)))
		return false;
	return !(flags & SP_CLONE_VM);
}

/* The entry of a fork that copies (its gate passed): the thread's time. */
static __always_inline void count_fork_entry(struct sp_counters *c, const bool shared,
					     struct pt_regs *regs, const bool btf)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&fork_started, &tid, &now, BPF_ANY);
}

/* The bucket (enum sp_fork_bucket) of a copy that took `ns`. */
static __always_inline __u32 fork_bucket(__u64 ns)
{
	__u64 us = ns / 1000;

	if (us <= SP_FORK_BOUND_0_US)
		return 0;
	if (us <= SP_FORK_BOUND_1_US)
		return 1;
	if (us <= SP_FORK_BOUND_2_US)
		return 2;
	if (us <= SP_FORK_BOUND_3_US)
		return 3;
	if (us <= SP_FORK_BOUND_4_US)
		return 4;
	if (us <= SP_FORK_BOUND_5_US)
		return 5;
	if (us <= SP_FORK_BOUND_6_US)
		return 6;
	if (us <= SP_FORK_BOUND_7_US)
		return 7;
	if (us <= SP_FORK_BOUND_8_US)
		return 8;
	return SP_FORK_BUCKET_INF;
}

/* What the parent's address space held at the fork: mapped pages and
 * page-table bytes (the part dup_mmap() copies; CONFIG_MMU only). */
static __always_inline void fork_count_size(struct sp_proc *p, struct task_struct *parent)
{
	struct mm_struct *mm = BPF_CORE_READ(parent, mm);

	if (!mm)
		return;
	__sync_fetch_and_add(&p->c.fork_mapped_pages, BPF_CORE_READ(mm, total_vm));
	if (bpf_core_field_exists(mm->pgtables_bytes))
		__sync_fetch_and_add(&p->c.fork_page_table_bytes,
				     BPF_CORE_READ(mm, pgtables_bytes.counter));
}

/* task:task_newtask, in the parent, once the child is made: a fork whose
 * entry was timed (one without CLONE_VM, from user space) is counted for
 * the parent, with its time and size, and its child is remembered. */
static __always_inline int on_task_newtask(struct task_struct *child, __u64 clone_flags,
					   const bool btf)
{
	__u64 id = bpf_get_current_pid_tgid(), *start, ns;
	__u32 tid = (__u32)id, tgid = id >> 32, child_tgid, bucket;
	struct sp_fork_parent parent_id = { .tgid = tgid };
	struct task_struct *parent;
	struct sp_proc *p;

	if (clone_flags & SP_CLONE_VM)
		return 0; /* a thread, vfork or posix_spawn: nothing copied */
	start = bpf_map_lookup_elem(&fork_started, &tid);
	if (!start)
		return 0; /* a kernel thread's, or one whose entry was not counted */
	ns = bpf_ktime_get_ns() - *start;
	bpf_map_delete_elem(&fork_started, &tid);
	/* the parent made its entry at the fork's entry: it is the current
	 * task, so an entry made here has its own comm and cgroup */
	p = proc_current();
	if (!p)
		return 0;
	bucket = fork_bucket(ns);
	barrier_var(bucket);
	if (bucket < SP_FORK_BUCKET_COUNT)
		__sync_fetch_and_add(&p->c.fork_copies[bucket], 1);
	__sync_fetch_and_add(&p->c.fork_copy_ns, ns);
	parent = btf ? bpf_get_current_task_btf() : (struct task_struct *)bpf_get_current_task();
	fork_count_size(p, parent);
	child_tgid = BPF_CORE_READ(child, tgid);
	parent_id.start_boottime_ns = p->start_boottime_ns;
	bpf_map_update_elem(&fork_children, &child_tgid, &parent_id, BPF_ANY);
	return 0;
}

/* sched_process_exec of thread group `tgid`: the first exec of a copying
 * fork's child counts the spawn pattern for its parent, into the parent's
 * entry if it still has one (never a new one: the exec runs in the child). */
static __always_inline void fork_child_execs(__u32 tgid)
{
	struct sp_fork_parent *parent = bpf_map_lookup_elem(&fork_children, &tgid);
	struct sp_proc *p;

	if (!parent)
		return;
	p = bpf_map_lookup_elem(&procs, &parent->tgid);
	if (p && !(p->flags & SP_PROC_EXITED) && p->start_boottime_ns == parent->start_boottime_ns)
		__sync_fetch_and_add(&p->c.fork_execs, 1);
	bpf_map_delete_elem(&fork_children, &tgid);
}

/* The last thread of `tgid` exited: a child that never exec'd lived on as
 * a copy; forget it (its pid may come back as another process). */
static __always_inline void fork_child_exits(__u32 tgid)
{
	bpf_map_delete_elem(&fork_children, &tgid);
}

#endif /* SP_SIGNALS_FORK_H */
