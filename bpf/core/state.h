/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The writable state the programs share with the agent (.bss), kept
 * together: the syscall hook loads slots_on and stack_target_count, which
 * share a cache line.
 */
#ifndef SP_CORE_STATE_H
#define SP_CORE_STATE_H

/* Where a task's user registers sit in its kernel stack (task_pt_regs()
 * minus task->stack: the same for every task), learned by the raw_tp
 * sys_enter program from its own arguments; raw_tp programs cannot call
 * bpf_task_pt_regs() on a task they did not get as a BTF pointer. 0 until
 * the first counted syscall (and for good when no collector counts
 * syscalls, so sys_enter is not attached). */
__u64 pt_regs_offset = 0;
/* Task exits (every thread's, sched_process_exit) and execs so far: a
 * task's stack, and so the address of its user registers, goes to another
 * task only after the first one exited, and a task changes image only by an
 * exec; either changes this count (see current_image()). */
__u64 task_events = 0;
/* Set by the agent once it has folded every CPU's slot (fold_cpu_slot):
 * until then, and for good where it cannot, sys_enter counts in `procs`. */
bool slots_on = false;
/* Entries in `stack_targets`, set by the agent's BPF worker (it owns .bss)
 * when the findings ask for stacks; next to slots_on, which sys_enter loads
 * anyway. While 0 (no finding waits for call sites, nearly always) a
 * counted syscall pays this load and a branch; while not, every process
 * counts in its entry (on_sys_enter), where the targets are sampled. */
__u32 stack_target_count = 0;

#endif /* SP_CORE_STATE_H */
