/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Per-CPU combining slots (struct sp_slot in slowpath.h): while one
 * process image keeps counting on a CPU, its counts go to that CPU's slot
 * with plain adds, and move to its `procs` entry (fold) when another image
 * takes the slot, when it exits or execs here, and before the agent reads
 * the table.
 */
#ifndef SP_CORE_SLOTS_H
#define SP_CORE_SLOTS_H

/* This CPU's combining slot (struct sp_slot). Used once the agent has
 * checked that it can fold every CPU's slot (slots_on). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_slot);
} sys_slots SEC(".maps");

/* This CPU's combining slot for timer wakeups, for the woken process image
 * (sched_waking under tp_btf, in the timer's interrupt). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_slot);
} wake_slots SEC(".maps");

/* The counters a slot holds (those sys_enter and timer wakeups count):
 * struct sp_counters up to timer_hot_windows, as __u64 words. */
#define SP_SLOT_WORDS (__builtin_offsetof(struct sp_counters, timer_hot_windows) / sizeof(__u64))

/* Fold the groups `dirty` names from counters `from` into `to`: each fold
 * group of SP_FOLD_GROUPS (core/syscall_table.h) in turn. */
#define SP_FOLD_GROUP(mask, fold) fold(from, to, dirty);
static __always_inline void fold_dirty(struct sp_counters *from, struct sp_counters *to,
				       __u64 dirty)
{
	SP_FOLD_GROUPS(SP_FOLD_GROUP)
}
#undef SP_FOLD_GROUP

/* Every fold group a counted syscall dirties is folded: a group no fold
 * function clears would stay in the slot and go to the next image. */
#define SP_ROW_DIRTY(name, x86_64, arm64, arches, group, gate, count, dirty, ...) | (dirty)
#define SP_GROUP_MASK(mask, fold) | (mask)
_Static_assert(((0 SP_COUNTED_SYSCALLS(SP_ROW_DIRTY)) & ~(0 SP_FOLD_GROUPS(SP_GROUP_MASK))) == 0,
	       "a dirty bit of the syscall table has no fold group in SP_FOLD_GROUPS");
#undef SP_ROW_DIRTY
#undef SP_GROUP_MASK

/* Whether slot `s` may add its counts to entry `p`, which it found under its
 * owner's tgid: the same image, not exited, not retiring. True with
 * p->folders counted up: the caller counts it down when its adds are done.
 * With entry_retiring() this is Dekker's handshake: each side writes its
 * flag with a locked instruction (a full barrier on x86_64, the only arch
 * the agent switches the slots on for), then reads the other's, so either
 * the fold sees `retiring` and sends a late record instead, or the exit sees
 * `folders` and waits for the adds before it copies the entry. The
 * identity is checked after the count too: an entry deleted meanwhile can
 * be reused by another process. */
static __always_inline bool entry_fold_begin(struct sp_proc *p, struct sp_slot *s)
{
	if (p->flags & SP_PROC_EXITED)
		return false;
	__sync_fetch_and_add(&p->folders, 1);
	if (*(volatile __u32 *)&p->retiring == 0 && p->start_boottime_ns == s->start_boottime_ns &&
	    p->exec_id == s->exec_id && !(p->flags & SP_PROC_EXITED))
		return true;
	__sync_fetch_and_add(&p->folders, -1);
	return false;
}

/* Send the counts of slot `s`, whose image has no live entry any more, as
 * a SP_EVENT_LATE record. False when the ring buffer is full. The timer
 * wakeups of the window the slot held never reached the entry's window
 * test: a slot that holds a hot window's worth counts one hot window in
 * the record (a process that exits on another CPU than its timers fired
 * on; a window split between the entry and this slot is still missed). */
static __always_inline bool slot_send_late(struct sp_slot *s)
{
	struct sp_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	__u32 zero = 0;
	struct sp_proc *tmpl;

	if (!e)
		return false;
	/* the template's counters are all zero (see proc_scratch) */
	tmpl = bpf_map_lookup_elem(&proc_scratch, &zero);
	if (!tmpl) {
		bpf_ringbuf_discard(e, 0);
		return false;
	}
	bpf_probe_read_kernel(&e->proc, sizeof(e->proc), tmpl);
	bpf_probe_read_kernel(&e->proc.c, SP_SLOT_WORDS * sizeof(__u64), &s->c);
	bpf_probe_read_kernel(e->proc.comm, sizeof(e->proc.comm), s->comm);
	e->tgid = s->tgid;
	e->kind = SP_EVENT_LATE;
	e->proc.start_boottime_ns = s->start_boottime_ns;
	e->proc.exec_id = s->exec_id;
	e->proc.cgroup_id = s->cgroup_id;
	e->proc.flags = 0;
	e->proc.tgid = s->tgid;
	if (s->win_wakeups >= timer_hot_wakeups)
		e->proc.c.timer_hot_windows = 1;
	bpf_ringbuf_submit(e, ring_wakeup(&proc_events));
	bpf_probe_read_kernel(&s->c, SP_SLOT_WORDS * sizeof(__u64), &tmpl->c);
	return true;
}

/* Move the counts of slot `s` to its image's entry, with atomic adds of the
 * words that are not zero in the groups it touched (an image counts a few
 * kinds of syscalls: a few adds), or, when that entry is gone, flagged or
 * another image's, to a late record. The caller holds s->busy. False when nothing could move (the ring
 * buffer is full): the counts stay, the slot keeps its owner. */
static __noinline bool slot_fold(struct sp_slot *s)
{
	struct sp_proc *p;
	__u32 tgid;

	if (!s || !s->pending)
		return true;
	tgid = s->tgid;
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (p && entry_fold_begin(p, s)) {
		fold_dirty(&s->c, &p->c, s->dirty);
		if (s->win_wakeups)
			window_add(p, s->win, s->win_wakeups);
		__sync_fetch_and_add(&p->folders, -1);
	} else if (!slot_send_late(s)) {
		return false;
	}
	s->pending = 0;
	s->dirty = 0;
	s->win_wakeups = 0;
	return true;
}

/* What slot_take() did. */
enum sp_take {
	SP_TAKEN = 0,	   /* the slot is the current image's */
	SP_TAKE_ENTRY = 1, /* not taken: count in the image's entry */
	SP_TAKE_LOST = 2,  /* no entry could be made: the event is counted as lost */
};

/* Give slot `s` to the image of `task` (the current task when NULL; thread
 * group `tgid`, its leader's start and exec id): fold what it holds, find or create the image's
 * entry. Not taken when the fold could not move the counts or when the
 * entry under `tgid` is another image's (only after an exec whose split did
 * not fit the ring buffer). The caller holds s->busy. */
static __noinline int slot_take(struct sp_slot *s, __u32 tgid, __u64 start, __u64 exec_id,
				struct task_struct *task)
{
	struct sp_proc *p;

	if (!s || !slot_fold(s))
		return SP_TAKE_ENTRY;
	p = proc_of(tgid, task);
	if (!p)
		return SP_TAKE_LOST; /* proc_create() counted it */
	if (p->start_boottime_ns != start || p->exec_id != exec_id)
		return SP_TAKE_ENTRY;
	s->tgid = tgid;
	s->start_boottime_ns = start;
	s->exec_id = exec_id;
	s->cgroup_id = p->cgroup_id;
	__builtin_memcpy(s->comm, p->comm, sizeof(s->comm));
	s->timeout_jiffy = p->timeout_jiffy; /* the image's reads, not the last owner's */
	return SP_TAKEN;
}

/* Whether another image's call should take slot `s`. Taking costs a fold
 * and a second `procs` lookup, worth it when images keep the CPU for more
 * than a call each. Where they take turns call by call (processes that each
 * make one timed wait and block), the owner has counted a single call since
 * it took the slot: then only every SP_TAKE_EVERY-th such call takes it, the
 * others count in their entry (the cost without slots, plus a few loads). */
#define SP_TAKE_EVERY 8
static __always_inline bool slot_worth_taking(struct sp_slot *s)
{
	s->misses += 1;
	return s->pending > 1 || (s->misses % SP_TAKE_EVERY) == 0;
}

/* The image (thread group, its leader's start and exec id) of the current
 * task, entering a syscall with user registers `regs`: from the cache in
 * this CPU's slot `s` when the same task entered the last syscall here and
 * no task exited or exec'd since (loads and compares, no helper call),
 * else from the task (bpf_get_current_task_btf()), then cached. False for a
 * compat syscall, which is not counted. */
static __always_inline bool current_image(struct sp_slot *s, struct pt_regs *regs, __u32 *tgid,
					  __u64 *start, __u64 *exec_id)
{
	__u64 events = task_events;
	struct task_struct *task, *leader;

	if (s->task_regs == (__u64)regs && s->task_events == events &&
	    entered_by_syscall_insn(regs)) {
		*tgid = s->task_tgid;
		*start = s->task_start;
		*exec_id = s->task_exec_id;
		return true;
	}
	task = bpf_get_current_task_btf();
	if (task_btf_in_compat_syscall(task))
		return false;
	leader = task->group_leader;
	*tgid = task->tgid;
	*start = leader->start_boottime;
	*exec_id = leader->self_exec_id;
	s->task_regs = (__u64)regs;
	s->task_events = events;
	s->task_tgid = *tgid;
	s->task_start = *start;
	s->task_exec_id = *exec_id;
	return true;
}

/* Count one of our syscalls, made by the current task with user registers
 * `regs`, in this CPU's slot `s` (sys_slots): while the same image keeps counting on this
 * CPU, a few plain adds with no map lookup beyond the slot's (inlined on
 * 6.10+), no locked instruction and, while the same task keeps calling, no
 * helper call. Only where the program cannot be preempted: tp_btf sys_enter
 * (the kernel disables preemption around tracepoint programs; fentry
 * programs run preemptible). s->busy keeps the fold program, which the
 * agent runs on this CPU in an interrupt, off a slot being changed (the
 * task cache is this program's alone). */
static __always_inline int count_syscall_slot(void *ctx, struct pt_regs *regs, long id,
					      struct sp_slot *s)
{
	__u64 start, exec_id;
	int took = SP_TAKEN;
	__u32 tgid;

	if (!current_image(s, regs, &tgid, &start, &exec_id))
		return 0;
	if (s->busy)
		return count_syscall(ctx, regs, id, tgid, true);
	s->busy = 1;
	barrier();
	if (s->tgid != tgid || s->start_boottime_ns != start || s->exec_id != exec_id)
		took = slot_worth_taking(s) ? slot_take(s, tgid, start, exec_id, NULL) : SP_TAKE_ENTRY;
	if (took == SP_TAKEN) {
		s->dirty |= count_into(&s->c, &s->timeout_jiffy, false, regs, id, true);
		s->pending += 1;
	}
	barrier();
	s->busy = 0;
	if (took == SP_TAKE_ENTRY)
		return count_syscall(ctx, regs, id, tgid, true);
	return 0;
}

/* Fold slot `s` unless a program on this CPU holds it: 0 when folded,
 * 1 when busy, 2 when the counts could not move (ring buffer full). */
static __always_inline int slot_fold_unless_busy(struct sp_slot *s)
{
	bool folded;

	if (!s)
		return 0;
	if (s->busy)
		return 1;
	s->busy = 1;
	barrier();
	folded = slot_fold(s);
	barrier();
	s->busy = 0;
	return folded ? 0 : 2;
}

/* Fold this CPU's slots (the caller is not preemptible): at an exit or exec
 * on this CPU, so that the final record carries the counts made here. */
static __always_inline void slot_fold_here(void)
{
	__u32 zero = 0;

	slot_fold_unless_busy(bpf_map_lookup_elem(&sys_slots, &zero));
	slot_fold_unless_busy(bpf_map_lookup_elem(&wake_slots, &zero));
}

#endif /* SP_CORE_SLOTS_H */
