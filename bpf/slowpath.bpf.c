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
 * Both twins are one line here (SP_TWINS, core/twins.h): the same
 * __always_inline handler with `btf` a compile-time constant that picks
 * direct loads or CO-RE probe reads.
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
#include "core/twins.h"

/* One file per signal: what it counts (at syscall entry, or at its own
 * hooks) and its fold groups, on top of the core alone; signals/all.h,
 * which agent/build.rs writes, includes every signal header of bpf/signals/. */
#include "signals/all.h"

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

SP_TWINS(sys_enter, SP_PROBE_SYS_ENTER, on_sys_enter(ctx, regs, id, btf),
	 struct pt_regs *regs, long id)

/* The fentry twins of sys_enter (compose/sys_enter.h): one per row of the
 * table of counted syscalls that exists on this arch. */
SP_COUNTED_SYSCALLS(SP_ROW_FENTRY)

/* ---- timer wakeups (signals/timer_wakeups.bpf.h) ----------------------- */

SP_TWINS(hrtimer_expire_entry, SP_PROBE_HRTIMER_EXPIRE_ENTRY, on_hrtimer_expire_entry(timer, btf),
	 struct hrtimer *timer)
SP_TWINS(hrtimer_expire_exit, SP_PROBE_HRTIMER_EXPIRE_EXIT, on_hrtimer_expire_exit(timer),
	 struct hrtimer *timer)
SP_TWINS(sched_waking, SP_PROBE_SCHED_WAKING, on_sched_waking(p, btf), struct task_struct *p)

/* ---- THP faults and compaction (signals/memory.bpf.h) ------------------ */

SP_TWINS(mm_page_alloc, SP_PROBE_MM_PAGE_ALLOC, on_page_alloc(ctx, page == NULL, order, gfp, btf),
	 struct page *page, unsigned int order, gfp_t gfp)
SP_TWINS(mm_compaction_begin, SP_PROBE_MM_COMPACTION_BEGIN, on_compaction_begin(cc),
	 struct compact_control *cc)
SP_TWINS(mm_compaction_end, SP_PROBE_MM_COMPACTION_END, on_compaction_end())

/* ---- TLB shootdowns of purges (signals/purge.bpf.h), x86 only ---------- */

#if defined(__TARGET_ARCH_x86)
SP_TWINS(tlb_flush, SP_PROBE_TLB_FLUSH, on_tlb_flush(reason, btf), int reason,
	 unsigned long pages)
#endif

/* ---- forks that copy the address space (signals/fork.bpf.h) ------------ */

SP_TWINS(task_newtask, SP_PROBE_TASK_NEWTASK, on_task_newtask(task, clone_flags, btf),
	 struct task_struct *task, __u64 clone_flags)

/* ---- process lifecycle (compose/lifecycle.h) --------------------------- */

SP_TWINS(sched_process_exit, SP_PROBE_SCHED_PROCESS_EXIT, on_process_exit(task),
	 struct task_struct *task)
SP_TWINS(sched_process_exec, SP_PROBE_SCHED_PROCESS_EXEC, on_process_exec(task),
	 struct task_struct *task)

/* ---- cgroup paths (core/cgroups.h) -------------------------------------- */

SP_TWINS(cgroup_mkdir, SP_PROBE_CGROUP_MKDIR, on_cgroup_mkdir(cgrp, path),
	 struct cgroup *cgrp, const char *path)
