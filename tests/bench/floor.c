// SPDX-License-Identifier: MIT
/*
 * floor: the cost of any BPF attachment, for the benchmark's ratios. Loads one
 * empty raw tracepoint program ("return 0") and attaches it to each hook
 * slowpath uses, then waits for SIGTERM or SIGINT; closing the descriptors at
 * exit detaches everything. What slowpath's programs cost above this floor is
 * their own work; the floor itself is what the kernel charges for running a
 * BPF program on the tracepoint at all (tp_btf and raw_tp share that path,
 * __bpf_trace_run() in kernel/trace/bpf_trace.c).
 *
 * Raw bpf(2) calls only: no libbpf needed to build it.
 *
 * Usage: floor     (prints "attached N" once attached)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const HOOKS[] = {
	"sys_enter",	       "sched_process_exit",  "sched_process_exec",
	"mm_page_alloc",       "mm_compaction_begin", "mm_compaction_end",
	"hrtimer_expire_entry", "hrtimer_expire_exit", "sched_waking",
	"task_newtask",
#if defined(__x86_64__)
	"tlb_flush",
#endif
};

static long bpf(int cmd, union bpf_attr *attr)
{
	return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(void)
{
	struct bpf_insn prog[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	union bpf_attr attr;
	int prog_fd, n = 0;

	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_RAW_TRACEPOINT;
	attr.insns = (unsigned long)prog;
	attr.insn_cnt = sizeof(prog) / sizeof(prog[0]);
	attr.license = (unsigned long)"GPL";
	prog_fd = bpf(BPF_PROG_LOAD, &attr);
	if (prog_fd < 0) {
		fprintf(stderr, "floor: loading the empty program: %s\n", strerror(errno));
		return 1;
	}
	for (unsigned i = 0; i < sizeof(HOOKS) / sizeof(HOOKS[0]); i++) {
		memset(&attr, 0, sizeof(attr));
		attr.raw_tracepoint.name = (unsigned long)HOOKS[i];
		attr.raw_tracepoint.prog_fd = prog_fd;
		if (bpf(BPF_RAW_TRACEPOINT_OPEN, &attr) < 0) {
			fprintf(stderr, "floor: attaching to %s: %s\n", HOOKS[i], strerror(errno));
			return 1;
		}
		n++;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	printf("attached %d\n", n);
	fflush(stdout);
	while (!stop)
		pause();
	return 0;
}
