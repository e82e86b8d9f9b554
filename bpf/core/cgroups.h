/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Cgroup paths: the path of every new cgroup v2 directory, sent while it
 * exists, so that the agent can name the cgroup of a process whose cgroup
 * was removed before it looked.
 */
#ifndef SP_CORE_CGROUPS_H
#define SP_CORE_CGROUPS_H

#include "slowpath.h"
#include "core/stats.h"

/* Paths of new cgroups (struct sp_cgroup_event: ~240 records of 272 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} cgroup_events SEC(".maps");

/* Record the path of a new cgroup v2 directory while it exists: a CI job's
 * or a cron unit's cgroup is often removed before the agent could find it
 * by walking cgroupfs. Only the default (v2) hierarchy, hierarchy_id 0:
 * kernfs ids of v1 hierarchies are another namespace. */
static __always_inline int on_cgroup_mkdir(struct cgroup *cgrp, const char *path)
{
	struct sp_cgroup_event *e;

	if (BPF_CORE_READ(cgrp, root, hierarchy_id) != 0)
		return 0;
	e = bpf_ringbuf_reserve(&cgroup_events, sizeof(*e), 0);
	if (!e) {
		lost_inc(SP_LOST_CGROUP_NAME);
		return 0;
	}
	e->id = BPF_CORE_READ(cgrp, kn, id);
	if (bpf_probe_read_kernel_str(e->path, sizeof(e->path), path) < 0)
		e->path[0] = 0;
	bpf_ringbuf_submit(e, ring_wakeup(&cgroup_events));
	return 0;
}

#endif /* SP_CORE_CGROUPS_H */
