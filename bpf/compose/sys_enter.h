/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The syscall hook: raw_syscalls:sys_enter (tp_btf or raw_tp), or one
 * fentry program per counted syscall, counting each call of a counted
 * syscall in this CPU's combining slot or in its process's entry. Made from
 * the table of counted syscalls (core/syscall_table.h) and the gate and
 * count functions its rows name (signals/).
 */
#ifndef SP_COMPOSE_SYS_ENTER_H
#define SP_COMPOSE_SYS_ENTER_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/callsites.h"
#include "core/procs.h"
#include "core/slots.h"
#include "core/state.h"
#include "core/stats.h"
#include "core/syscall_table.h"
#include "core/syscalls.h"
#include "core/timeouts.h"
#include "compose/slots.h"
#include "signals/all.h"

/* The gate of the syscalls counted at every call. */
static __always_inline bool gate_always(struct pt_regs *regs, const bool btf)
{
	return true;
}

/* Whether this call of counted syscall `id` is counted at all: a timed wait
 * only when it arms a timer (its gate). Callers ask syscall_counted()
 * first, so no other id gets here. */
#define SP_ROW_GATE(name, x86_64, arm64, arches, group, gate, ...)              \
	SP_IF_##arches(case SP_NR_##name : return gate(regs, btf);)
static __always_inline bool syscall_gate(struct pt_regs *regs, long id, const bool btf)
{
	switch (id) {
		SP_COUNTED_SYSCALLS(SP_ROW_GATE)
	}
	return true;
}
#undef SP_ROW_GATE

/* Count one call of counted syscall `id`, entered with user registers
 * `regs`, in counters `c` (`shared`: see SP_ADD): a wait in the exact
 * timed-wait counter, then what its count function adds, which a timed wait
 * runs only as the sample of its jiffy (count_wait() in core/timeouts.h;
 * `read`: the jiffy of the counters' owner's last read). Returns the fold
 * groups (enum sp_dirty) it may have added to. */
#define SP_ROW_COUNT(name, x86_64, arm64, arches, group, gate, count, dirty, kind, wait) \
	SP_IF_##arches(case SP_NR_##name                                          \
		       : if (count_wait(c, shared, SP_SYSCALLS_##group, wait, read))    \
				 count(c, shared, regs, btf);                           \
		       return (dirty);)
static __always_inline __u64 count_into(struct sp_counters *c, __u32 *read, const bool shared,
					struct pt_regs *regs, long id, const bool btf)
{
	switch (id) {
		SP_COUNTED_SYSCALLS(SP_ROW_COUNT)
	}
	return 0;
}
#undef SP_ROW_COUNT

/* Count one of our syscalls in the `procs` entry of thread group `tgid`,
 * with atomic adds: the path of raw_tp and fentry programs, of the doctor
 * (which samples stacks per entry), and of a slot that cannot be taken. */
static __always_inline int count_syscall(void *ctx, struct pt_regs *regs, long id, __u32 tgid,
					 const bool btf)
{
	struct sp_proc *p;

	p = proc_of(tgid, NULL);
	if (!p)
		return 0;
	maybe_sample(ctx, p, tgid, callsite_kind(id), regs);
	count_into(&p->c, &p->timeout_jiffy, true, regs, id, btf);
	return 0;
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

static __always_inline int on_sys_enter(void *ctx, struct pt_regs *regs, long id, const bool btf)
{
	struct task_struct *task;
	struct sp_slot *slot;
	__u32 zero = 0;

	/* Untraced syscalls leave here: this is the cost every syscall pays. */
	if (!syscall_counted(id))
		return 0;
	if (!syscall_gate(regs, id, btf))
		return 0; /* the untimed futex, poll, epoll and select calls leave here */
	if (btf) {
		/* While the findings sample some process (stack_targets_on(),
		 * seconds at a time), every process counts in its entry, where
		 * the targets are sampled: the slot path stays as it was. */
		slot = slots_on && !capture_stacks && !stack_targets_on() ?
			       bpf_map_lookup_elem(&sys_slots, &zero) :
			       NULL;
		if (slot)
			return count_syscall_slot(ctx, regs, id, slot);
		/* one helper call: the compat flag and the tgid are direct loads */
		task = bpf_get_current_task_btf();
		if (task_btf_in_compat_syscall(task))
			return 0;
		return count_syscall(ctx, regs, id, task->tgid, true);
	}
	/* raw_tp cannot dereference the task: probe reads, and the tgid from
	 * bpf_get_current_pid_tgid() (one call, cheaper than a probe read) */
	task = (struct task_struct *)bpf_get_current_task();
	if (task_in_compat_syscall(task))
		return 0;
	if (!pt_regs_offset)
		pt_regs_offset = (__u64)regs - (__u64)BPF_CORE_READ(task, stack);
	return count_syscall(ctx, regs, id, bpf_get_current_pid_tgid() >> 32, false);
}

/*
 * fentry twins of sys_enter: one program on each of the syscall functions.
 * Cheaper where the kernel allows fentry: no syscall tracepoint is enabled,
 * so the other syscalls keep the fast syscall path and pay nothing, and
 * compat syscalls enter other functions (__ia32_sys_*, __arm64_compat_sys_*).
 * The argument is the user register set, as for sys_enter. arm64 has
 * fentry from 6.0 (its BPF trampoline), and no time, epoll_wait, poll or
 * select syscall. The tgid is read from bpf_get_current_task_btf(): one
 * call like bpf_get_current_pid_tgid(), and one the arm64 JIT inlines.
 */

#define SP_SYSCALL_FENTRY(name, fn_prefix)                                     \
	static __always_inline int sys_enter_fentry_body_##name(               \
		void *ctx, struct pt_regs *regs)                               \
	{                                                                      \
		if (!syscall_counted(SP_NR_##name))                            \
			return 0;                                              \
		if (!syscall_gate(regs, SP_NR_##name, true))                   \
			return 0;                                              \
		return count_syscall(ctx, regs, SP_NR_##name,                  \
				     bpf_get_current_task_btf()->tgid, true);  \
	}                                                                      \
	SEC("fentry/" fn_prefix #name)                                         \
	int BPF_PROG(sys_enter_fentry_##name, struct pt_regs *regs)            \
	{                                                                      \
		struct sp_run_clock run_clock = {};                            \
		int ret;                                                       \
                                                                               \
		probe_ran(SP_PROBE_SYS_ENTER, &run_clock);                     \
		ret = sys_enter_fentry_body_##name(ctx, regs);                 \
		probe_timed(SP_PROBE_SYS_ENTER, &run_clock);                   \
		return ret;                                                    \
	}
/* The fentry program of a row of the table, where the syscall exists. */
#define SP_ROW_FENTRY(name, x86_64, arm64, arches, ...)                        \
	SP_IF_##arches(SP_SYSCALL_FENTRY(name, SP_FN_PREFIX_##arches))

#endif /* SP_COMPOSE_SYS_ENTER_H */
