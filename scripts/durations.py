#!/usr/bin/env python3
"""Where the test suite's time goes: a JUnit XML report of pytest
(`scripts/test.sh --junitxml=FILE`) as Markdown tables, per module (its
tests, seconds, share of the run, slowest test) and the slowest tests.

    scripts/durations.py RUN.xml [RUN2.xml ...] [--before OLD.xml ...] [--top 30]

Several reports (one run's parts, such as one pytest per lane) are read as
one; their seconds are the tests' own, summed, whatever ran at once.

A test's time is pytest's for its setup, call and teardown together, so a
module-scoped fixture's work (an agent, a guest boot, a built image) is
charged to the module's first test that asks for it. With --before, each
module's seconds in the older run are shown beside the newer's (the table
in docs/development.md)."""

import argparse
import collections
import xml.etree.ElementTree as ET


def read(paths):
    """{(module, test name): seconds} of JUnit XML files of pytest."""
    times = {}
    cases = (case for path in paths for case in ET.parse(path).getroot().iter("testcase"))
    for case in cases:
        module = case.get("classname", "").split(".")
        # pytest's classname: tests.e2e.test_x (or ...test_x.Class)
        name = next((part for part in module if part.startswith("test_")), ".".join(module)) + ".py"
        times[(name, case.get("name"))] = float(case.get("time", 0))
    return times


def per_module(times):
    """{module: (tests, seconds, slowest (seconds, test))}."""
    out = collections.defaultdict(lambda: [0, 0.0, (0.0, "")])
    for (module, test), seconds in times.items():
        row = out[module]
        row[0] += 1
        row[1] += seconds
        row[2] = max(row[2], (seconds, test))
    return out


def minutes(seconds):
    return f"{seconds / 60:.1f}"


def module_table(times, before=None):
    modules = per_module(times)
    old = per_module(before) if before else {}
    total = sum(seconds for _, seconds, _ in modules.values())
    head = "| module | tests | s | share |" + (" s before |" if before else "") + " slowest test (s) |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for module, (tests, seconds, (slow_s, slow)) in sorted(modules.items(), key=lambda kv: -kv[1][1]):
        was = f" {old[module][1]:.0f} |" if module in old else (" |" if before else "")
        lines.append(f"| `{module}` | {tests} | {seconds:.0f} | {100 * seconds / total:.1f} % |{was}"
                     f" `{slow}` ({slow_s:.0f}) |")
    was_total = f" {sum(s for _, s, _ in old.values()):.0f} |" if before else ""
    lines.append(f"| all | {len(times)} | {total:.0f} ({minutes(total)} min) | 100 % |{was_total} |")
    return "\n".join(lines)


def slowest_table(times, top):
    lines = ["| test | s |", "| --- | --- |"]
    for (module, test), seconds in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"| `{module}::{test}` | {seconds:.0f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", nargs="+", help="JUnit XML of pytest (--junitxml), one or more")
    parser.add_argument("--before", nargs="+", help="an older run's JUnit XML, shown per module beside it")
    parser.add_argument("--top", type=int, default=30, help="how many of the slowest tests to list")
    args = parser.parse_args()
    times = read(args.report)
    print(module_table(times, read(args.before) if args.before else None))
    print()
    print(slowest_table(times, args.top))


if __name__ == "__main__":
    main()
