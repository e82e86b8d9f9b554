/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The twin programs of a hook: a BTF raw tracepoint (tp_btf, cheapest:
 * direct loads of arguments) and a plain raw tracepoint (raw_tp, for
 * kernels that refuse tp_btf), of which the agent sets autoload on one at
 * start. Both are made from one body, so they cannot drift apart.
 */
#ifndef SP_CORE_TWINS_H
#define SP_CORE_TWINS_H

#include "core/stats.h"

/* SP_TWINS(tp, probe, body, args...): programs <tp>_btf (SEC "tp_btf/<tp>")
 * and <tp>_raw (SEC "raw_tp/<tp>") with the tracepoint's arguments `args`
 * (as BPF_PROG takes them), each counting a run of hook `probe` (enum
 * sp_probe), timing one run in SP_SELF_TIMED_EVERY, and returning `body`. In `body`, `btf` is a constant, true in
 * the tp_btf twin and false in the raw_tp one: handlers take it to pick
 * direct loads or CO-RE probe reads, and the compiler keeps one of them. */
#define SP_TWINS(tp, probe, body, ...)                                         \
	SP_TWIN(tp_btf/tp, tp##_btf, true, probe, body, ##__VA_ARGS__)         \
	SP_TWIN(raw_tp/tp, tp##_raw, false, probe, body, ##__VA_ARGS__)

/* `btf` is unused where a hook's handler is the same for both twins. */
#define SP_TWIN(sec, prog, is_btf, probe, body, ...)                           \
	SEC(#sec)                                                              \
	int BPF_PROG(prog, ##__VA_ARGS__)                                      \
	{                                                                      \
		const bool btf __attribute__((unused)) = is_btf;               \
		struct sp_run_clock run_clock = {};                            \
		int ret;                                                       \
                                                                               \
		probe_ran(probe, &run_clock);                                  \
		ret = body;                                                    \
		probe_timed(probe, &run_clock);                                \
		return ret;                                                    \
	}

#endif /* SP_CORE_TWINS_H */
