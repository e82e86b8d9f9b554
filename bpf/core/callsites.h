/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Call sites: sampled user stacks of the calls the signals count, for
 * `slowpath doctor`, `--debug.callsites` (every process: capture_stacks)
 * and the agent's findings (the processes it asks for: stack_targets). A
 * signal samples with maybe_sample(), under its enum sp_callsite_kind.
 */
#ifndef SP_CORE_CALLSITES_H
#define SP_CORE_CALLSITES_H

#include "slowpath.h"
#include "core/arch.h"
#include "core/state.h"

/* Capacities; the agent sizes the tables at load (see below). */
#define SP_DEFAULT_MAX_STACKS 4096	/* distinct user stacks (1016 bytes each) */
#define SP_DEFAULT_MAX_CALLSITES 16384 /* (process, kind, stack) keys */
/* Exemplar stack copies (struct sp_stack_copy, 8232 bytes); see stack_copies */
#define SP_DEFAULT_MAX_STACK_COPIES 512
/* Thread groups sampled on demand at once (`stack_targets`). */
#define SP_MAX_STACK_TARGETS 64

/* Sampled user stacks of every process: `slowpath doctor` and the agent's
 * `--debug.callsites` (capture_stacks). */
const volatile bool capture_stacks = false;

/* Thread groups whose user stacks the agent asked for (its findings: a
 * process that crossed a finding's threshold), tgid -> samples still wanted.
 * Written by the agent only; a sample takes one with a plain store (two
 * threads racing may both take the last one: one more sample, never a
 * wrap-around). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_MAX_STACK_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} stack_targets SEC(".maps");

/* At most one user stack per jiffy per kind of call per process
 * (stack_due()): a bounded cost (a stack walk is ~1 us) however hot the
 * path, and no aliasing with calls that alternate (getcontext, setcontext). */

/* Distinct user stacks, keyed by a hash of their frames (stack_hash()).
 * Not a stack trace map (BPF_MAP_TYPE_STACK_TRACE): that one is
 * direct-mapped, and a stack whose bucket held another one was dropped for
 * as long as the other lived (bpf_get_stackid() -EEXIST): a storm's call
 * site could miss every sample behind a long-lived process's stack. Here a
 * stack is dropped only when the table is full, or when another stack with
 * the same 64-bit hash is in it (frames compared; never seen). Both tables
 * are sized at load: 1 entry when stacks are not captured (no kernel memory
 * for a feature that is off), the defaults below otherwise. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_STACKS);
	__type(key, __u64);
	__type(value, struct sp_stack);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_CALLSITES);
	__type(key, struct sp_callsite_key);
	__type(value, __u64);
} callsites SEC(".maps");

/* One exemplar of each call site's registers and top of stack (struct
 * sp_stack_copy), stored when its `callsites` entry is created: user space
 * unwinds it with .eh_frame past the frames without a frame pointer. The
 * first sites of a run get one; when the table is full, later sites keep
 * their frame-pointer stack only. Preallocated like every hash map here
 * (8328 bytes an element: the 8232-byte value, the 48-byte key and the
 * element header; plus one spare element per possible CPU): 4,289,696 bytes
 * measured at 512 entries on 2 CPUs (bpftool's bytes_memlock). When stacks
 * are not captured the agent sizes it 1 entry and loads it without
 * preallocation (BPF_F_NO_PREALLOC; never written then), so that a feature
 * that is off costs no per-CPU memory. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SP_DEFAULT_MAX_STACK_COPIES);
	__type(key, struct sp_callsite_key);
	__type(value, struct sp_stack_copy);
} stack_copies SEC(".maps");

/* Where a sample is built: its stack, walked before it is looked up in
 * `stacks`, and a `stack_copies` value (16 times the 512-byte BPF stack). */
struct sp_sample_scratch {
	struct sp_stack stack;
	struct sp_stack_copy copy;
};

/* Scratch for a sample, one slot per CPU: a plain array the agent sizes to
 * the possible CPUs when stacks are captured or asked for, and to 1 slot
 * otherwise (a per-CPU array always costs a value per possible CPU).
 * Indexed by the current CPU, like a per-CPU array; a CPU beyond the slots
 * finds none, and its samples are dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sp_sample_scratch);
} stack_copy_scratch SEC(".maps");

/* Sampled stacks not kept: `stacks` or `callsites` was full, the stack
 * could not be walked, or no scratch slot. Slot 0 only. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stack_drops SEC(".maps");

/* Whether the agent may ask for stacks at all (its findings are on): when
 * false, the verifier drops every target check below as dead code. */
const volatile bool stacks_on_demand = false;

static __always_inline bool stack_targets_on(void)
{
	return stacks_on_demand && stack_target_count;
}

/* Whether this call's user stack is sampled: the first call of each kind
 * (enum sp_callsite_kind) in each jiffy (1 ms at HZ=1000, 4 ms at HZ=250)
 * per process. Per kind, because a process that makes several kinds of
 * call in a fixed order would otherwise give every sample to the first one:
 * a loop of clock reads and a 1 ms sleep wakes up, reads the clock first
 * in every jiffy, and its sleep was never sampled. `stack_jiffy` holds the
 * jiffy (its low 28 bits) above the kinds sampled in it (one bit each).
 * bpf_jiffies64() is a plain load, unlike a clock read: the calls not
 * sampled pay next to nothing. The store is plain: a race between threads
 * lets one more stack through. */
#define SP_STACK_KIND_BITS ((1u << SP_CALLSITE_KIND_COUNT) - 1)
static __always_inline bool stack_due(struct sp_proc *p, __u32 kind)
{
	__u32 now = (__u32)bpf_jiffies64() << SP_CALLSITE_KIND_COUNT;
	__u32 bit = (1u << kind) & SP_STACK_KIND_BITS;
	__u32 last = p->stack_jiffy;

	if ((last & ~SP_STACK_KIND_BITS) != now)
		last = now; /* a new jiffy: no kind sampled in it yet */
	else if (last & bit)
		return false;
	p->stack_jiffy = last | bit;
	return true;
}

/* Keep the user registers and the top of the user stack of a call site's
 * first sample under `key`, built in `c` (the CPU's scratch): the rest of
 * the stack pointer's page, then the next page if it is mapped (the copy
 * stops at the first read that fails, and `len` says how far it got). Runs
 * once per new distinct stack, never per call: two bpf_probe_read_user() of
 * at most 4 KiB each. */
static __always_inline void copy_stack(struct pt_regs *regs, const struct sp_callsite_key *key,
				       struct sp_stack_copy *c)
{
	__u64 first;

	c->ip = PT_REGS_IP_CORE(regs);
	c->sp = PT_REGS_SP_CORE(regs);
	c->fp = PT_REGS_FP_CORE(regs);
#if defined(__TARGET_ARCH_arm64)
	c->lr = PT_REGS_RET_CORE(regs); /* x30 */
#else
	c->lr = 0;
#endif
	/* 1..SP_STACK_COPY_PAGE bytes up to the end of the page; the bound
	 * check is for the verifier (older ones lose the range of the
	 * subtraction), so that both reads stay inside data[] */
	first = SP_STACK_COPY_PAGE - (c->sp & (SP_STACK_COPY_PAGE - 1));
	barrier_var(first);
	if (first == 0 || first > SP_STACK_COPY_PAGE)
		return;
	if (bpf_probe_read_user(c->data, first, (void *)c->sp))
		return; /* no stack to keep */
	c->len = first;
	if (!bpf_probe_read_user(c->data + first, SP_STACK_COPY_PAGE, (void *)(c->sp + first)))
		c->len += SP_STACK_COPY_PAGE;
	/* fails when full (see stack_copies) or when another CPU stored this
	 * key first: either way the site keeps its frame-pointer stack */
	bpf_map_update_elem(&stack_copies, key, c, BPF_NOEXIST);
}

/* A 64-bit hash of the `frames` first frames of `s` (FNV-1a over words,
 * with a fold of the high half into the low one after each): the key of
 * the stack in `stacks`. */
static __always_inline __u64 stack_hash(const struct sp_stack *s, __u32 frames)
{
	__u64 h = 0xcbf29ce484222325ULL;

	for (__u32 i = 0; i < SP_MAX_STACK_DEPTH; i++) {
		if (i >= frames)
			break;
		h = (h ^ s->ips[i]) * 0x100000001b3ULL;
		h ^= h >> 32;
	}
	return h;
}

/* Find or add stack `s` (`frames` deep) in `stacks`: its key in `*id`.
 * False when it cannot be kept: the table is full, or holds another stack
 * under the same hash (all frames are compared, so a sample never takes
 * another stack's frames). */
static __always_inline bool keep_stack(const struct sp_stack *s, __u32 frames, __u64 *id)
{
	const struct sp_stack *held;
	__u64 h = stack_hash(s, frames);
	long err;

	held = bpf_map_lookup_elem(&stacks, &h);
	if (!held) {
		err = bpf_map_update_elem(&stacks, &h, s, BPF_NOEXIST);
		if (err == 0)
			goto kept;
		if (err != -SP_EEXIST)
			return false; /* full */
		/* another CPU added it first */
		held = bpf_map_lookup_elem(&stacks, &h);
		if (!held)
			return false;
	}
	for (__u32 i = 0; i < SP_MAX_STACK_DEPTH; i++)
		if (held->ips[i] != s->ips[i])
			return false;
kept:
	*id = h;
	return true;
}

/* Sample the user stack of this call. */
static __noinline void sample_stack(void *ctx, struct sp_proc *p, __u32 kind, struct pt_regs *regs)
{
	struct sp_callsite_key key = {};
	__u32 cpu = bpf_get_smp_processor_id();
	struct sp_sample_scratch *scratch;
	__u64 one = 1, *count, *drops;
	__u32 zero = 0;
	long bytes, err;

	if (!p)
		return;
	scratch = bpf_map_lookup_elem(&stack_copy_scratch, &cpu);
	if (!scratch)
		goto dropped;
	key.tgid = bpf_get_current_pid_tgid() >> 32;
	key.kind = kind;
	__builtin_memcpy(key.comm, p->comm, sizeof(key.comm));
	/* the frames, zeros after them (the kernel clears the rest) */
	bytes = bpf_get_stack(ctx, &scratch->stack, sizeof(scratch->stack), BPF_F_USER_STACK);
	if (bytes < 0 || !keep_stack(&scratch->stack, bytes / sizeof(__u64), &key.stack_id))
		goto dropped;
	bpf_probe_read_user(&key.stack_top, sizeof(key.stack_top), (void *)PT_REGS_SP_CORE(regs));
	count = bpf_map_lookup_elem(&callsites, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return;
	}
	/* -EEXIST: another thread added it first (its sample counts; this
	 * one is not worth a retry) */
	err = bpf_map_update_elem(&callsites, &key, &one, BPF_NOEXIST);
	if (!err) {
		copy_stack(regs, &key, &scratch->copy); /* a new distinct stack */
		return;
	}
	if (err == -SP_EEXIST)
		return;
dropped:
	drops = bpf_map_lookup_elem(&stack_drops, &zero);
	if (drops)
		*drops += 1; /* per-CPU slot */
}

/* Sample this call's user stack if the agent asked for thread group
 * `tgid`'s stacks (`stack_targets`) and wants more: one per jiffy at most.
 * Out of line: called only while some target waits, so that the paths
 * carry two loads and a branch, not this code. */
static __noinline void sample_if_wanted(void *ctx, struct sp_proc *p, __u32 tgid, __u32 kind,
					struct pt_regs *regs)
{
	__u32 *left;

	if (!p)
		return;
	left = bpf_map_lookup_elem(&stack_targets, &tgid);
	if (!left || *left == 0 || !stack_due(p, kind))
		return;
	*left -= 1;
	sample_stack(ctx, p, kind, regs);
}

/* Sample this call's user stack when due: every process's with
 * capture_stacks (the doctor, --debug.callsites), else the targets'. */
static __always_inline void maybe_sample(void *ctx, struct sp_proc *p, __u32 tgid, __u32 kind,
					 struct pt_regs *regs)
{
	if (capture_stacks) {
		if (stack_due(p, kind))
			sample_stack(ctx, p, kind, regs);
	} else if (stack_targets_on()) {
		sample_if_wanted(ctx, p, tgid, kind, regs);
	}
}

#endif /* SP_CORE_CALLSITES_H */
