// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * slowpath: per-process counters of kernel slow paths, aggregated in the
 * kernel. User space reads the `procs` map at scrape time; the only records
 * sent through the ring buffer are the final counts of a process image when
 * it exits or execs (not per event).
 *
 * One object, built from a core (core/), one file per signal (signals/)
 * and what is made from both (compose/); every header includes what it
 * uses. This file is the object's table of contents: the layers in order,
 * then every program. Types shared with the agent
 * are in slowpath.h; the counted syscalls are declared once, in
 * core/syscall_table.h.
 *
 * Every hook has two twins: a BTF raw tracepoint (tp_btf, cheapest: direct
 * loads of arguments) and a plain raw tracepoint (raw_tp, for kernels that
 * refuse tp_btf). The agent probes at start and sets autoload on one twin.
 * Both twins run the same __always_inline handler with `btf` a compile-time
 * constant that picks direct loads or CO-RE probe reads.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "slowpath.h"
#include "classify.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The core every signal counts through: calls nothing above it. */
#include "core/arch.h"
#include "core/syscall_table.h"
#include "core/counting.h"
#include "core/state.h"
#include "core/stats.h"
#include "core/procs.h"
#include "core/callsites.h"
#include "core/timeouts.h"
#include "core/syscalls.h"
#include "core/task_regs.h"
#include "core/slots.h"
#include "core/lifecycle.h"

/* One file per signal: what it counts (at syscall entry, or at its own
 * hooks) and its fold groups, on top of the core alone. */
#include "signals/clock.bpf.h"
#include "signals/sigmask.bpf.h"
#include "signals/sleep.bpf.h"
#include "signals/timer.bpf.h"
#include "signals/tzfile.bpf.h"
#include "signals/timer_wakeups.bpf.h"
#include "signals/memory.bpf.h"

/* What is made from the core and the signals together: the slots' folds,
 * the syscall path (from the table and the signals' gate and count
 * functions), the wakeups counted in a slot, the exits and execs that fold
 * the slots. */
#include "compose/slots.h"
#include "compose/sys_enter.h"
#include "compose/wakeups.h"
#include "compose/lifecycle.h"

/* New cgroups. */
#include "core/cgroups.h"

/* Keeps struct sp_proc_event in the object's BTF so that the skeleton
 * generates its Rust type (ring buffer records have no map value type). */
struct sp_proc_event sp_proc_event_btf_anchor SEC(".bss");
struct sp_cgroup_event sp_cgroup_event_btf_anchor SEC(".bss");
/* Likewise for every enum of slowpath.h (see struct sp_enums). */
struct sp_enums sp_enums_btf_anchor SEC(".bss");

/* ---- combining slots ---------------------------------------------------- */

/* Run by the agent on every CPU (BPF_PROG_TEST_RUN, BPF_F_TEST_RUN_ON_CPU:
 * in an interrupt on that CPU, or here with preemption off when it is the
 * agent's own) before it reads `procs`; folds both slots of the CPU, so that a read sees every event
 * counted before it. Returns 0 when folded, 1 when the slot is busy (a
 * program on that CPU is changing it: the agent tries again), 2 when the
 * ring buffer had no room for a late record (the counts wait in the slot). */
SEC("raw_tp")
int fold_cpu_slot(void *ctx)
{
	__u32 zero = 0;
	int sys, wake;

	sys = slot_fold_unless_busy(bpf_map_lookup_elem(&sys_slots, &zero));
	wake = slot_fold_unless_busy(bpf_map_lookup_elem(&wake_slots, &zero));
	if (sys == 1 || wake == 1)
		return 1; /* again: the other one's fold is a no-op then */
	return sys | wake;
}

/* ---- own cost ----------------------------------------------------------- */

/* Run by the agent (BPF_PROG_TEST_RUN) in each of its statistics windows,
 * attached nowhere. While the kernel's run-time statistics are on, each run
 * of a program is timed between two sched_clock() reads (__bpf_prog_run() in
 * include/linux/filter.h); an empty program's measured time per run is what
 * that timing itself adds to every measured run, which the agent subtracts
 * from its programs' (agent/src/bpf/cost.rs). */
SEC("raw_tp")
int stats_floor(void *ctx)
{
	return 0;
}

/* ---- syscalls: clock reads, rt_sigprocmask, sleeps, timed waits --------- */

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id)
{
	probe_ran(SP_PROBE_SYS_ENTER);
	return on_sys_enter(ctx, regs, id, true);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id)
{
	probe_ran(SP_PROBE_SYS_ENTER);
	return on_sys_enter(ctx, regs, id, false);
}

/* The fentry twins of sys_enter (compose/sys_enter.h): one per row of the
 * table of counted syscalls that exists on this arch. */
SP_COUNTED_SYSCALLS(SP_ROW_FENTRY)

/* ---- timer wakeups (signals/timer_wakeups.bpf.h) ----------------------- */

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(hrtimer_expire_entry_btf, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_ENTRY);
	return on_hrtimer_expire_entry(timer, true);
}

SEC("raw_tp/hrtimer_expire_entry")
int BPF_PROG(hrtimer_expire_entry_raw, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_ENTRY);
	return on_hrtimer_expire_entry(timer, false);
}

SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(hrtimer_expire_exit_btf, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_EXIT);
	return on_hrtimer_expire_exit(timer);
}

SEC("raw_tp/hrtimer_expire_exit")
int BPF_PROG(hrtimer_expire_exit_raw, struct hrtimer *timer)
{
	probe_ran(SP_PROBE_HRTIMER_EXPIRE_EXIT);
	return on_hrtimer_expire_exit(timer);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct *p)
{
	probe_ran(SP_PROBE_SCHED_WAKING);
	return on_sched_waking(p, true);
}

SEC("raw_tp/sched_waking")
int BPF_PROG(sched_waking_raw, struct task_struct *p)
{
	probe_ran(SP_PROBE_SCHED_WAKING);
	return on_sched_waking(p, false);
}

/* ---- THP faults and compaction (signals/memory.bpf.h) ------------------ */

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(mm_page_alloc_btf, struct page *page, unsigned int order, gfp_t gfp)
{
	probe_ran(SP_PROBE_MM_PAGE_ALLOC);
	return on_page_alloc(ctx, page == NULL, order, gfp, true);
}

SEC("raw_tp/mm_page_alloc")
int BPF_PROG(mm_page_alloc_raw, struct page *page, unsigned int order, gfp_t gfp)
{
	probe_ran(SP_PROBE_MM_PAGE_ALLOC);
	return on_page_alloc(ctx, page == NULL, order, gfp, false);
}

SEC("tp_btf/mm_compaction_begin")
int BPF_PROG(mm_compaction_begin_btf, struct compact_control *cc)
{
	probe_ran(SP_PROBE_MM_COMPACTION_BEGIN);
	return on_compaction_begin(cc);
}

SEC("raw_tp/mm_compaction_begin")
int BPF_PROG(mm_compaction_begin_raw, struct compact_control *cc)
{
	probe_ran(SP_PROBE_MM_COMPACTION_BEGIN);
	return on_compaction_begin(cc);
}

SEC("tp_btf/mm_compaction_end")
int BPF_PROG(mm_compaction_end_btf)
{
	probe_ran(SP_PROBE_MM_COMPACTION_END);
	return on_compaction_end();
}

SEC("raw_tp/mm_compaction_end")
int BPF_PROG(mm_compaction_end_raw)
{
	probe_ran(SP_PROBE_MM_COMPACTION_END);
	return on_compaction_end();
}

/* ---- process lifecycle (compose/lifecycle.h) --------------------------- */

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_btf, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXIT);
	return on_process_exit(task);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(sched_process_exit_raw, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXIT);
	return on_process_exit(task);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec_btf, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXEC);
	return on_process_exec(task);
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(sched_process_exec_raw, struct task_struct *task)
{
	probe_ran(SP_PROBE_SCHED_PROCESS_EXEC);
	return on_process_exec(task);
}

/* ---- cgroup paths (core/cgroups.h) -------------------------------------- */

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(cgroup_mkdir_btf, struct cgroup *cgrp, const char *path)
{
	probe_ran(SP_PROBE_CGROUP_MKDIR);
	return on_cgroup_mkdir(cgrp, path);
}

SEC("raw_tp/cgroup_mkdir")
int BPF_PROG(cgroup_mkdir_raw, struct cgroup *cgrp, const char *path)
{
	probe_ran(SP_PROBE_CGROUP_MKDIR);
	return on_cgroup_mkdir(cgrp, path);
}
