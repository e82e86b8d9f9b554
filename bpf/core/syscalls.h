/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the table of counted syscalls (core/syscall_table.h) alone gives:
 * one generated switch per question about a syscall number that needs no
 * signal, each with a case for every row. The switches that call the
 * signals' gate and count functions are in compose/sys_enter.h.
 */
#ifndef SP_CORE_SYSCALLS_H
#define SP_CORE_SYSCALLS_H

#include "slowpath.h"
#include "core/syscall_table.h"

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

#endif /* SP_CORE_SYSCALLS_H */
