"""Overhead of each attach type on Debian's 6.1 kernel, in a QEMU guest.

Runs tests/bench/overhead.c (static) inside one guest boot with no BPF, with
the agent's syscall hook forced to fentry (allowed there; on TCG the agent's
own choice is tp_btf), forced to tp_btf, and
forced to raw_tp, in interleaved rounds. TCG inflates absolute times, so only
ratios to the no-BPF run mean anything.

  sudo python3 tests/guest/bench.py [--rounds 3]
"""

import argparse
import re
import statistics
from pathlib import Path

import harness

CONFIGS = {
    "none": None,
    "fentry": "--bpf.attach-type=fentry",  # forced: on TCG the agent's choice is tp_btf
    "tp_btf": "--bpf.attach-type=tp-btf",
    "raw_tp": "--bpf.attach-type=raw-tp",
}
ROWS = {"clock_gettime_raw": "traced syscall", "getppid": "untraced syscall", "page_fault_4k": "4 KiB page fault"}


def scenario(rounds, reps):
    # TCG translates guest code on first use: warm up before measuring.
    lines = [f"section warmup overhead -c 1 -r {reps}"]
    for r in range(rounds):
        names = list(CONFIGS)
        names = names[r % len(names):] + names[: r % len(names)]  # rotate the order
        for name in names:
            flags = CONFIGS[name]
            # Attaching patches kernel text, which TCG must translate again:
            # a short unmeasured run after each change settles it.
            settle = "overhead -c 1 -r 2 >/dev/null"
            measure = f"section {name}_{r} overhead -c 1 -r {reps}"
            if flags is None:
                lines += [settle, measure]
            else:
                lines += [f"agent_start {flags}", settle, measure, "agent_stop"]
    lines += [
        "agent_start",
        "section attached sh -c 'wget -q -O - http://127.0.0.1:9891/metrics | grep ^slowpath_probe_attached'",
        "agent_stop",
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--agent", type=Path, default=harness.REPO / "target/release/slowpath")
    args = parser.parse_args()

    harness.DOWNLOAD = True  # a local run: the kernel is fetched if missing
    bench = harness.built("overhead-static")
    console, secs = harness.run_scenario(args.agent, scenario(args.rounds, args.reps),
                                         clocksource="tsc", extra_cmdline="tsc=reliable",
                                         extra_files={"/usr/bin/overhead": bench},
                                         timeout=300 + 150 * args.rounds)
    if harness.guest_rc(console) != 0:
        raise SystemExit(console[-3000:])

    results = {name: {row: [] for row in ROWS} for name in CONFIGS}
    for key, text in secs.items():
        m = re.fullmatch(r"(\w+)_(\d+)", key)
        if not m or m.group(1) not in CONFIGS:
            continue
        for row in ROWS:
            # the fastest repetition: TCG timing is noisy, the minimum least so
            value = re.search(rf"^{row}_min ([\d.]+)$", text, re.M)
            if value:
                results[m.group(1)][row].append(float(value.group(1)))

    print(f"guest kernel {harness.guest_kernel().name}, TCG, {args.rounds} rounds x {args.reps} repetitions")
    print(f"{'':20}" + "".join(f"{name:>22}" for name in CONFIGS))
    for row, label in ROWS.items():
        base = statistics.median(results["none"][row])
        cells = []
        for name in CONFIGS:
            value = statistics.median(results[name][row])
            cells.append(f"{value:9.1f} ns (x{value / base:4.2f})")
        print(f"{label:20}" + "".join(f"{c:>22}" for c in cells))
    print(secs.get("attached", "").strip())


if __name__ == "__main__":
    main()
