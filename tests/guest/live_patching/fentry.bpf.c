// SPDX-License-Identifier: GPL-2.0
/* Two bare fentry programs on the syscalls the live-patching experiment
 * runs flat out (run.py): no slowpath code, to tell slowpath's part from the
 * kernel's and the emulator's. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

__u64 hits = 0;

SEC("fentry/__x64_sys_clock_gettime")
int BPF_PROG(on_clock_gettime)
{
	__sync_fetch_and_add(&hits, 1);
	return 0;
}

SEC("fentry/__x64_sys_rt_sigprocmask")
int BPF_PROG(on_sigprocmask)
{
	__sync_fetch_and_add(&hits, 1);
	return 0;
}
