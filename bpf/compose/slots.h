/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The folds of the per-CPU combining slots (core/slots.h): a slot holds the
 * counts of every signal that counts through it, so moving them to the
 * entry is made from each signal's fold function, and so is everything
 * that folds a slot (taking it for another image, the agent's fold, an
 * exit or exec on this CPU).
 */
#ifndef SP_COMPOSE_SLOTS_H
#define SP_COMPOSE_SLOTS_H

#include "slowpath.h"
#include "core/counting.h"
#include "core/procs.h"
#include "core/slots.h"
#include "core/stats.h"
#include "core/syscall_table.h"
#include "core/timeouts.h"
#include "signals/all.h"

/* Fold the groups `dirty` names from counters `from` into `to`: each fold
 * group of SP_FOLD_GROUPS (core/counting.h, which checks that they cover
 * every dirty bit once) in turn. */
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

/* Give slot `s` to the image of `task` (the current task when NULL; thread
 * group `tgid`, its leader's start and exec id): fold what it holds, find or create the image's
 * entry. Not taken when the fold could not move the counts or when the
 * entry under `tgid` is another image's (only after an exec whose split did
 * not fit the ring buffer). The caller holds s->busy. Called by the slot
 * paths of compose/sys_enter.h and compose/wakeups.h only: `unused` keeps
 * this header compiling alone under -Werror, where nothing calls it. */
static __noinline __attribute__((unused)) int slot_take(struct sp_slot *s, __u32 tgid, __u64 start, __u64 exec_id,
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

#endif /* SP_COMPOSE_SLOTS_H */
