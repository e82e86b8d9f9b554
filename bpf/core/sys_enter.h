/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The syscall hook: raw_syscalls:sys_enter (tp_btf or raw_tp), or one
 * fentry program per counted syscall, counting each call of a counted
 * syscall in this CPU's combining slot or in its process's entry.
 */
#ifndef SP_CORE_SYS_ENTER_H
#define SP_CORE_SYS_ENTER_H

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

#define SP_SYSCALL_FENTRY(name)                                                \
	SEC("fentry/" SP_SYSCALL_FN_PREFIX #name)                              \
	int BPF_PROG(sys_enter_fentry_##name, struct pt_regs *regs)            \
	{                                                                      \
		probe_ran(SP_PROBE_SYS_ENTER);                                 \
		if (!syscall_counted(SP_NR_##name))                            \
			return 0;                                              \
		if (!syscall_gate(regs, SP_NR_##name, true))                   \
			return 0;                                              \
		return count_syscall(ctx, regs, SP_NR_##name,                  \
				     bpf_get_current_task_btf()->tgid, true);  \
	}
/* The fentry program of a row of the table, where the syscall exists. */
#define SP_ROW_FENTRY(name, x86_64, arm64, arches, ...) SP_IF_##arches(SP_SYSCALL_FENTRY(name))

/* The user registers of `task` (not running, or current): with a BTF
 * pointer from bpf_task_pt_regs() (kernel 5.15+), else at the offset in its
 * kernel stack that the raw_tp sys_enter program learned (any kernel; NULL
 * until it has counted a syscall). */
static __always_inline struct pt_regs *task_user_regs(struct task_struct *task, const bool btf)
{
	if (btf)
		return (struct pt_regs *)bpf_task_pt_regs(task);
	if (!pt_regs_offset)
		return NULL;
	return (struct pt_regs *)((__u64)BPF_CORE_READ(task, stack) + pt_regs_offset);
}

#endif /* SP_CORE_SYS_ENTER_H */
