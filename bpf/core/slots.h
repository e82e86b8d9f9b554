/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Per-CPU combining slots (struct sp_slot in slowpath.h): while one
 * process image keeps counting on a CPU, its counts go to that CPU's slot
 * with plain adds, and move to its `procs` entry (fold) when another image
 * takes the slot, when it exits or execs here, and before the agent reads
 * the table. The fold itself is made from every signal's fold function:
 * it is in compose/slots.h, with everything that folds a slot.
 */
#ifndef SP_CORE_SLOTS_H
#define SP_CORE_SLOTS_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/state.h"

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
/* What comes after: counters no slot holds (the hot windows, THP faults,
 * compaction, TLB shootdowns, forks), counted in the process's entry alone. A counter of a new
 * signal counted at sys_enter or a timer wakeup goes before
 * timer_hot_windows; one added after it would be left out of the slots'
 * folds and resets without an error, so the tail's size is held here. */
_Static_assert(sizeof(struct sp_counters) - __builtin_offsetof(struct sp_counters, timer_hot_windows) ==
		       (4 + 2 * SP_COMPACTION_TRIGGER_COUNT + SP_FORK_BUCKET_COUNT + 4) * sizeof(__u64),
	       "a counter after timer_hot_windows in struct sp_counters: a slot would not fold it "
	       "(put a syscall signal's counters before it, or widen this tail on purpose)");

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

/* What slot_take() (compose/slots.h) did. */
enum sp_take {
	SP_TAKEN = 0,	   /* the slot is the current image's */
	SP_TAKE_ENTRY = 1, /* not taken: count in the image's entry */
	SP_TAKE_LOST = 2,  /* no entry could be made: the event is counted as lost */
};

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

#endif /* SP_CORE_SLOTS_H */
