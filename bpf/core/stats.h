/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the agent learns about the programs themselves: the runs of each
 * hook (for its cost) and the events they could not count (lost, by
 * reason).
 */
#ifndef SP_CORE_STATS_H
#define SP_CORE_STATS_H

#include "slowpath.h"

/* Runs of each hook's programs on each CPU, by enum sp_probe: a plain add
 * to a per-CPU slot (no atomic, no shared line; the lookup of a constant key
 * is inlined by the verifier on kernels 6.10+ on x86_64 and arm64, a helper
 * call before). The agent sums the CPUs: the exact runs of every hook, which
 * the kernel's own run_cnt gives only while its statistics are enabled. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_PROBE_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} probe_runs SEC(".maps");

/* Lost-event counters by enum sp_lost_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_LOST_REASON_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Self-timed runs of each hook on each CPU, by enum sp_probe (struct
 * sp_probe_time in slowpath.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_PROBE_COUNT);
	__type(key, __u32);
	__type(value, struct sp_probe_time);
} probe_time SEC(".maps");

/* The clock of a run that times itself (probe_ran() to probe_timed()), on
 * the program's stack: nothing of it reaches a map line, which a busy node
 * may have evicted, before the run's end is read. */
struct sp_run_clock {
	__u64 start; /* b, the span's start; 0: this run is not timed */
	__u64 read;  /* b - a: one clock read's own cost */
};

/* One more run of a program of hook `probe` (enum sp_probe) on this CPU. On
 * every SP_SELF_TIMED_EVERY-th run, also start its timing in `clock`;
 * probe_timed() ends it. */
static __always_inline void probe_ran(__u32 probe, struct sp_run_clock *clock)
{
	__u64 *n = bpf_map_lookup_elem(&probe_runs, &probe);
	__u64 a;

	if (!n)
		return;
	*n += 1; /* per-CPU slot: no atomic needed */
	if (*n & (SP_SELF_TIMED_EVERY - 1))
		return;
	a = bpf_ktime_get_ns();
	clock->start = bpf_ktime_get_ns();
	clock->read = clock->start - a;
}

/* The end of a run that probe_ran() picked to time: its span less a clock
 * read into the hook's `probe_time` slot, unless it was interrupted. */
static __always_inline void probe_timed(__u32 probe, const struct sp_run_clock *clock)
{
	struct sp_probe_time *t;
	__u64 took;

	if (!clock->start)
		return;
	took = bpf_ktime_get_ns() - clock->start;
	t = bpf_map_lookup_elem(&probe_time, &probe);
	if (!t || took > SP_SELF_TIMED_MAX_NS)
		return;
	t->ns += took;
	t->clock_ns += clock->read;
	t->runs += 1;
}

static __always_inline void lost_inc(__u32 reason)
{
	__u64 *v = bpf_map_lookup_elem(&lost, &reason);

	if (v)
		*v += 1; /* per-CPU slot: no atomic needed */
}

/* Submit flag for a ring buffer record: wake the agent only once a quarter
 * of the ring is used. At low churn records wait for its periodic drain (no
 * wakeup per exit); at high churn it drains long before the ring is full. */
static __always_inline __u64 ring_wakeup(void *ring)
{
	__u64 used = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);

	return used >= bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / 4 ? BPF_RB_FORCE_WAKEUP
								      : BPF_RB_NO_WAKEUP;
}

#endif /* SP_CORE_STATS_H */
