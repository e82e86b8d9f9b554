/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What differs between x86_64 and arm64 for the syscall hooks: where the
 * syscall number and arguments sit in the user registers, how a compat
 * (ia32, AArch32) task is told apart, the prefix of the syscall functions
 * fentry attaches to. The numbers of the counted syscalls are in
 * syscall_table.h; those a signal only reads are in its own file.
 */
#ifndef SP_CORE_ARCH_H
#define SP_CORE_ARCH_H

#if defined(__TARGET_ARCH_x86)
#define SP_TS_COMPAT 0x0002 /* arch/x86/include/asm/thread_info.h: in an ia32 syscall */
#define SP_USER_CS 0x33	    /* arch/x86/include/asm/segment.h: __USER_CS, 64-bit user code */
#define SP_SYSCALL_NR(regs) BPF_CORE_READ(regs, orig_ax)
#define SP_SYSCALL_NR_BTF(regs) ((regs)->orig_ax) /* a BTF pointer: direct load */
#define SP_SYSCALL_FN_PREFIX "__x64_sys_"
/* a SYSCALL_DEFINE0 syscall: __x64_sys_<name> is an alias without BTF */
#define SP_SYSCALL0_FN_PREFIX "__do_sys_"
#elif defined(__TARGET_ARCH_arm64)
#define SP_SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)
#define SP_SYSCALL_NR_BTF(regs) ((regs)->syscallno) /* a BTF pointer: direct load */
#define SP_SYSCALL_FN_PREFIX "__arm64_sys_"
#define SP_SYSCALL0_FN_PREFIX "__arm64_sys_"
/* arch/arm64/include/asm/thread_info.h (4.x to 6.12): an AArch32 task, whose
 * syscalls use the arm numbers */
#define SP_TIF_32BIT (1UL << 22)
#else
#error "slowpath supports x86_64 and arm64"
#endif

#define SP_EEXIST 17
#define SP_PF_KTHREAD 0x00200000 /* include/linux/sched.h */
#define SP_PF_EXITING 0x00000004 /* include/linux/sched.h */

/* Syscall argument n of the user registers: direct load under tp_btf,
 * CO-RE probe read under raw_tp. */
#define SP_SYSCALL_ARG(btf, regs, n)                                           \
	((btf) ? (unsigned long)PT_REGS_PARM##n##_SYSCALL(regs)                \
	       : (unsigned long)PT_REGS_PARM##n##_CORE_SYSCALL(regs))

/* Whether task `p` is in a compat syscall (x86: ia32; arm64: an AArch32
 * task): those use other syscall numbers, so they are never counted as ours. */
static __always_inline bool task_in_compat_syscall(struct task_struct *p)
{
#if defined(__TARGET_ARCH_x86)
	return BPF_CORE_READ(p, thread_info.status) & SP_TS_COMPAT;
#else
	return BPF_CORE_READ(p, thread_info.flags) & SP_TIF_32BIT;
#endif
}

/* The same for a BTF task pointer (tp_btf, fentry): a direct load, no
 * helper call. */
static __always_inline bool task_btf_in_compat_syscall(struct task_struct *p)
{
#if defined(__TARGET_ARCH_x86)
	return p->thread_info.status & SP_TS_COMPAT;
#else
	return p->thread_info.flags & SP_TIF_32BIT;
#endif
}

/* Whether user registers `regs` were saved by a 64-bit SYSCALL instruction
 * (entry_SYSCALL_64 in arch/x86/entry/entry_64.S: the instruction puts the
 * return address in rcx and the flags in r11, so the return address lands
 * in both ip and cx, the flags in both flags and r11), not by an ia32 entry
 * (int $0x80, sysenter, a 32-bit SYSCALL), whose numbers are not ours: those
 * enter with the 32-bit code segment, or from 64-bit code by int $0x80 with
 * rcx and r11 holding whatever the caller left there (only a caller that
 * sets them to the return address and flags on purpose passes for a SYSCALL).
 * A tracer changing the registers at the syscall-entry stop, and FRED, which
 * leaves rcx and r11 alone, make this false: current_image() then asks the
 * task. */
static __always_inline bool entered_by_syscall_insn(struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	return regs->cs == SP_USER_CS && regs->cx == regs->ip && regs->r11 == regs->flags;
#else
	return false; /* no cache off x86_64 (the slots are off there) */
#endif
}

#endif /* SP_CORE_ARCH_H */
