/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every signal's header: the one list a new signal joins. Each builds on the
 * core alone (never on another signal), so their order does not matter.
 * The compose/ headers, which make the syscall path and the slots' folds
 * from the functions the table of counted syscalls and SP_FOLD_GROUPS name,
 * and slowpath.bpf.c include this list rather than naming signals.
 */
#ifndef SP_SIGNALS_ALL_H
#define SP_SIGNALS_ALL_H

#include "signals/clock.bpf.h"
#include "signals/sigmask.bpf.h"
#include "signals/sleep.bpf.h"
#include "signals/timer.bpf.h"
#include "signals/tzfile.bpf.h"
#include "signals/fdclose.bpf.h"
#include "signals/sched_yield.bpf.h"
#include "signals/timer_wakeups.bpf.h"
#include "signals/memory.bpf.h"

#endif /* SP_SIGNALS_ALL_H */
