/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The process table: one `procs` entry per thread group (tgid), created on
 * its first event, sent to the agent and freed when the group exits or
 * execs (core/lifecycle.h). Every signal counts into its entry, directly or
 * through a combining slot (core/slots.h).
 */
#ifndef SP_CORE_PROCS_H
#define SP_CORE_PROCS_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/stats.h"

/* Default capacities; the agent overrides them with set_max_entries. */
#define SP_DEFAULT_MAX_PROCS 16384
#define SP_DEFAULT_RINGBUF_BYTES (1 << 20)

/* Counters per thread group (tgid). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct sp_proc);
} procs SEC(".maps");

/* Final counts of exited or exec'd process images (struct sp_proc_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, SP_DEFAULT_RINGBUF_BYTES);
} proc_events SEC(".maps");

/* Scratch to build `procs` values off the 512-byte BPF stack: slot 0 a new
 * entry (proc_create(); its counters are never written, so they stay zero),
 * slot 1 a parked copy (proc_park()). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sp_proc);
} proc_scratch SEC(".maps");

/* Entries parked or flagged SP_PROC_EXITED so far (their exit record did
 * not fit the ring buffer): the agent scans the table when this grows. */
__u64 exited_flagged = 0;

/* Send the final counts of `p`, the entry of `tgid`, to user space, then
 * free the entry. The record is submitted before the delete, so a reader
 * that misses the entry in the map finds the record in the ring buffer.
 * False when the ring buffer is full: the entry is left as it is. */
static __always_inline bool proc_send(__u32 tgid, struct sp_proc *p, __u32 kind)
{
	struct sp_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);

	if (!e)
		return false;
	e->tgid = tgid;
	e->kind = kind;
	bpf_probe_read_kernel(&e->proc, sizeof(e->proc), p);
	bpf_ringbuf_submit(e, ring_wakeup(&proc_events));
	bpf_map_delete_elem(&procs, &tgid);
	return true;
}

/* Insert a zeroed entry for the thread group of `task` (the current task
 * when NULL). Slow path: once per process image. An entry already there
 * that is flagged SP_PROC_EXITED belongs to a dead process whose pid was
 * recycled: its record is sent first, so the new process never inherits
 * its counts, comm or cgroup; while the ring buffer stays full the new
 * process's events are counted as lost. */
static __noinline struct sp_proc *proc_create(__u32 tgid, struct task_struct *task)
{
	bool current = !task;
	__u32 zero = 0;
	struct sp_proc *tmpl, *old;
	long err;

	old = bpf_map_lookup_elem(&procs, &tgid);
	if (old && (old->flags & SP_PROC_EXITED) && !proc_send(tgid, old, SP_EVENT_EXIT)) {
		lost_inc(SP_LOST_PID_REUSE_PENDING);
		return NULL;
	}
	if (current)
		task = (struct task_struct *)bpf_get_current_task();
	tmpl = bpf_map_lookup_elem(&proc_scratch, &zero);
	if (!tmpl)
		return NULL;
	tmpl->start_boottime_ns = BPF_CORE_READ(task, group_leader, start_boottime);
	tmpl->exec_id = BPF_CORE_READ(task, group_leader, self_exec_id);
	/* the cgroup v2 id: what bpf_get_current_cgroup_id() returns for current */
	tmpl->cgroup_id = current ? bpf_get_current_cgroup_id()
				  : BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	BPF_CORE_READ_INTO(&tmpl->comm, task, group_leader, comm);
	err = bpf_map_update_elem(&procs, &tgid, tmpl, BPF_NOEXIST);
	if (err && err != -SP_EEXIST) {
		lost_inc(SP_LOST_PROCESS_TABLE_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&procs, &tgid);
}

/* The entry of the thread group of `tgid`, created on its first event. With
 * the exit hook attached, an entry of a dead process is either deleted or
 * flagged at its exit, so the flag check is all a recycled pid needs. */
static __always_inline struct sp_proc *proc_of(__u32 tgid, struct task_struct *task)
{
	struct sp_proc *p = bpf_map_lookup_elem(&procs, &tgid);

	if (p && !(p->flags & SP_PROC_EXITED))
		return p;
	return proc_create(tgid, task);
}

static __always_inline struct sp_proc *proc_current(void)
{
	return proc_of(bpf_get_current_pid_tgid() >> 32, NULL);
}

#endif /* SP_CORE_PROCS_H */
