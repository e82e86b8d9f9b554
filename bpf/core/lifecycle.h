/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Process lifecycle: when the last thread of a group exits, or the group
 * execs, its final counts (its entry, after this CPU's slots are folded
 * into it: the hooks are in compose/lifecycle.h) go to the agent in one
 * ring buffer record and the entry is freed.
 */
#ifndef SP_CORE_LIFECYCLE_H
#define SP_CORE_LIFECYCLE_H

#include "slowpath.h"
#include "core/procs.h"
#include "core/stats.h"

/* Move the entry `p` of exited `tgid`, whose record did not fit the ring
 * buffer, to a parked key (>= SP_PARKED_KEY_BASE) for the agent to fold, so
 * that a new process on the recycled pid starts a fresh entry even while
 * the agent is behind. The copy is made flagged and the original deleted
 * unflagged, so the agent never folds both. Nine bits of the start time
 * tell apart two parked processes of one pid; on a clash, or with the
 * table full, the entry stays under its tgid, flagged, and proc_create()
 * retires it first. */
static __always_inline void proc_park(__u32 tgid, struct sp_proc *p)
{
	__u32 key = SP_PARKED_KEY_BASE | ((__u32)(p->start_boottime_ns >> 12) << 22) | tgid;
	__u32 slot = 1;
	struct sp_proc *copy = bpf_map_lookup_elem(&proc_scratch, &slot);

	__sync_fetch_and_add(&exited_flagged, 1);
	if (copy) {
		bpf_probe_read_kernel(copy, sizeof(*copy), p);
		copy->flags |= SP_PROC_EXITED;
		copy->tgid = tgid;
		if (bpf_map_update_elem(&procs, &key, copy, BPF_NOEXIST) == 0) {
			bpf_map_delete_elem(&procs, &tgid);
			return;
		}
	}
	p->flags |= SP_PROC_EXITED;
}

/* Most spins an exit waits for a fold from another CPU to finish its adds
 * (a few hundred ns; a fold interrupted for longer is not waited for). */
#define SP_RETIRE_SPINS 4096

/* Mark entry `p` retiring, then wait until no fold from a slot on another
 * CPU is adding to it (see entry_fold_begin()): from then on its counts
 * change only through this CPU, so the copy in the final record is final. */
static __always_inline void entry_retiring(struct sp_proc *p)
{
	__sync_fetch_and_add(&p->retiring, 1);
	for (int i = 0; i < SP_RETIRE_SPINS && *(volatile __u32 *)&p->folders; i++)
		;
}

/* The last thread of `tgid` exited, or the group exec'd: send its final
 * counts and free its entry. With the ring buffer full, an exited entry is
 * parked for the agent to fold (nothing lost); an exec cannot be split. */
static __always_inline void proc_retire(__u32 tgid, __u32 kind)
{
	struct sp_proc *p = bpf_map_lookup_elem(&procs, &tgid);

	if (!p)
		return;
	entry_retiring(p);
	if (proc_send(tgid, p, kind))
		return;
	if (kind == SP_EVENT_EXIT) {
		if (!(p->flags & SP_PROC_EXITED))
			proc_park(tgid, p);
	} else {
		/* cannot split: later counts join this entry, under the new comm */
		lost_inc(SP_LOST_RINGBUF_FULL);
		BPF_CORE_READ_INTO(&p->comm, (struct task_struct *)bpf_get_current_task(),
				   group_leader, comm);
	}
}

#endif /* SP_CORE_LIFECYCLE_H */
