/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Everything made from the table of counted syscalls (core/syscall_table.h):
 * one generated switch per question about a syscall number, each with a
 * case for every row, and the path that counts a syscall in its process's
 * entry. Included after the signals, whose gate and count functions the
 * rows name.
 */
#ifndef SP_CORE_SYSCALLS_H
#define SP_CORE_SYSCALLS_H

/* Which groups of counted syscalls (enum sp_syscall_group) the sys_enter
 * hook and its fentry twins count, set by the agent for the groups of the
 * signals that run (the verifier prunes the branches of a group left off).
 * The group SLEEPS is counted when either the sleep signal (their calls and
 * requested lengths) or the timer signal (their timeouts, as timed waits)
 * runs. */
const volatile bool count_syscalls[SP_SYSCALL_GROUP_COUNT] = {};

/* Each counted syscall of this architecture, by name, with its group as the
 * value: the agent reads them from the object's BTF (the fentry programs of
 * a group, sys_enter_fentry_<name>), so it keeps no list of its own. */
#define SP_ROW_GROUP(name, x86_64, arm64, arches, group, ...)                   \
	SP_IF_##arches(SP_COUNTED_##name = SP_SYSCALLS_##group, )
enum sp_counted_syscall { SP_COUNTED_SYSCALLS(SP_ROW_GROUP) };
#undef SP_ROW_GROUP
enum sp_counted_syscall sp_counted_syscall_btf_anchor SEC(".bss");

/* Whether syscall `id` is one of ours and its group is switched on. */
#define SP_ROW_COUNTED(name, x86_64, arm64, arches, group, ...)                 \
	SP_IF_##arches(case SP_NR_##name : return count_syscalls[SP_SYSCALLS_##group];)
static __always_inline bool syscall_counted(long id)
{
	switch (id) {
		SP_COUNTED_SYSCALLS(SP_ROW_COUNTED)
	}
	return false;
}
#undef SP_ROW_COUNTED

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

/* The enum sp_callsite_kind of counted syscall `id` (SP_CALLSITE_KIND_COUNT
 * for no other). */
#define SP_ROW_KIND(name, x86_64, arm64, arches, group, gate, count, dirty, kind, ...) \
	SP_IF_##arches(case SP_NR_##name : return kind;)
static __always_inline __u32 callsite_kind(long id)
{
	switch (id) {
		SP_COUNTED_SYSCALLS(SP_ROW_KIND)
	}
	return SP_CALLSITE_KIND_COUNT;
}
#undef SP_ROW_KIND

/* The enum sp_wait of a task sleeping in syscall `nr` that its timer woke:
 * SP_WAIT_OTHER for a syscall that is no counted wait. */
#define SP_ROW_WAIT(name, x86_64, arm64, arches, group, gate, count, dirty, kind, wait) \
	SP_IF_##arches(case SP_NR_##name : return wait;)
static __always_inline __u32 syscall_wait(long nr)
{
	switch (nr) {
		SP_COUNTED_SYSCALLS(SP_ROW_WAIT)
	}
	return SP_WAIT_OTHER;
}
#undef SP_ROW_WAIT

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

#endif /* SP_CORE_SYSCALLS_H */
