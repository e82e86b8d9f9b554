"""Collectors switched off (`--no-collector.<name>`, node_exporter's
convention), one signal at a time: the real agent attaches none of the hooks
only that signal needs and loads none of its syscalls' fentry programs (seen
in the agent's own BPF file descriptors: its programs with bpftool, its
links' tracepoints in fdinfo), its `sys_enter` program does not count those
syscalls (the kernel table itself, dumped with bpftool, after this test
process made them), the scrape has none of its families and no
`slowpath_probe_attached` series for its hooks, the log says what it left
out, and the other signals still count their workloads.

sleep and timer share nanosleep/clock_nanosleep: with sleep off the timer
signal still reads the sleeps' requested lengths (its `wait="clock_nanosleep"`
histograms), with timer off the sleep signal still does."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from helpers.agent import Agent
from helpers.bpf import bpf_fd_ids, our_program_ids, wait_unloaded
from helpers.signal_facts import declared, flat, producible
from helpers.signals import CORE_HOOKS, by_name
from helpers.workload import run_workload

pytestmark = pytest.mark.tier("full")

# What only each signal asks of the kernel (on x86_64), and its families, as
# the agent declares them (`slowpath signals`): a syscall two signals count
# (sleep's and the timer's nanosleep, clock_nanosleep) is neither's alone.
# The kernel checks them below: the tracepoints attached are exactly the
# others' and the core's, the fentry programs, the table's counts.
DECLARED = by_name()
SIGNALS = {
    name: {
        "hooks": d["hooks"],
        "syscalls": [s for s in d["syscalls"]
                     if not any(s in o["syscalls"] for other, o in DECLARED.items() if other != name)],
        "families": [f["name"] for f in d["families"]],
    }
    for name, d in DECLARED.items()
}
SYSCALL_SIGNALS = [name for name, d in DECLARED.items() if d["syscalls"]]
# What each signal's workloads do and leave (helpers/signal_facts/).
FACTS = declared()


@pytest.fixture(autouse=True)
def on_x86_64():
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall lists and numbers here are x86_64's")


@pytest.fixture(autouse=True)
def nothing_left_attached():
    before = our_program_ids()
    yield
    assert wait_unloaded(our_program_ids() - before), "a test left BPF programs loaded"


def start(agent_bin, tmp_path, *flags):
    return Agent(agent_bin, ["--metrics.pid-label", *flags], tmp_path / "agent.log")


def bpftool_json(*args):
    return json.loads(subprocess.run(["bpftool", "-j", *args], check=True, capture_output=True,
                                     text=True).stdout)


def kernel_side(agent):
    """(names of the BPF programs the agent holds, the hooks they attach to:
    their links' tracepoints, and sys_enter when there are fentry programs of
    it, which attach to the syscalls' kernel functions)."""
    pid = agent.proc.pid
    programs = {bpftool_json("prog", "show", "id", str(i))["name"] for i in bpf_fd_ids(pid, "prog")}
    tracepoints = set()
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = fd.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("tp_name:"):
                tracepoints.add(line.split()[1])
    if any(p.startswith("sys_enter_fentry_") for p in programs):
        tracepoints.add("sys_enter")
    return programs, tracepoints


def kernel_entry(agent, tgid):
    """The agent's kernel table entry of `tgid` (struct sp_proc as bpftool
    formats it with the object's BTF), or None."""
    for i in bpf_fd_ids(agent.proc.pid, "map"):
        if bpftool_json("map", "show", "id", str(i))["name"] == "procs":
            for entry in bpftool_json("map", "dump", "id", str(i)):
                if entry["formatted"]["key"] == tgid:
                    return entry["formatted"]["value"]
            return None
    raise AssertionError("the agent holds no procs map")


def own_syscalls():
    """Make, in this process, calls each syscall signal counts (its facts'
    own_calls: raw clock_gettime, rt_sigprocmask, clock_nanosleep, a futex
    wait with a timeout that expires)."""
    for facts in FACTS.values():
        if facts.own_calls is not None:
            facts.own_calls()


# What this process's own calls leave in its kernel entry, per signal.
COUNTED = {name: facts.kernel_counted for name, facts in FACTS.items() if facts.kernel_counted is not None}


def workload_counts(scrape_of, workload_bin):
    """Run each signal's workload and return, per signal, whether the scrape
    after it counted it: {signal: bool}."""
    pids = {name: run_workload(workload_bin, *facts.WORKLOAD) for name, facts in FACTS.items()}
    scrape = scrape_of()

    def own(signal):
        return lambda name, **labels: scrape.value(name, comm="sp-workload", pid=pids[signal], **labels)

    return scrape, {name: facts.workload_counted(own(name)) for name, facts in FACTS.items()}


@pytest.mark.parametrize("attach", ["probed", "raw-tp"])
@pytest.mark.parametrize("off", list(SIGNALS))
def test_a_collector_switched_off(agent_bin, workload_bin, tmp_path, off, attach):
    flags = [] if attach == "probed" else [f"--bpf.attach-type={attach}"]
    agent = start(agent_bin, tmp_path, f"--no-collector.{off}", *flags)
    try:
        gone = SIGNALS[off]
        programs, tracepoints = kernel_side(agent)
        # its hooks: no program loaded, no link attached
        for hook in gone["hooks"]:
            assert not {f"{hook}_btf", f"{hook}_raw"} & programs, programs
            assert hook not in tracepoints, tracepoints
        # its syscalls: no fentry program (and the sys_enter program skips them: below)
        for syscall in gone["syscalls"]:
            assert f"sys_enter_fentry_{syscall}" not in programs, programs
        # the other signals' hooks, the core hooks and the syscall hook are there
        others = {h for name, s in SIGNALS.items() if name != off for h in s["hooks"]}
        assert tracepoints == others | CORE_HOOKS | {"sys_enter"}

        scrape = agent.scrape()
        probes = {s.labels["probe"]: s.value for s in scrape.select("slowpath_probe_attached")}
        assert probes == dict.fromkeys(others | CORE_HOOKS | {"sys_enter"}, 1), probes
        assert f"collector {off} disabled" in agent.log_text()
        if gone["hooks"]:
            assert f"collector {off} disabled: hooks {', '.join(gone['hooks'])} not attached" \
                in agent.log_text()
        status, body = agent.get("/readyz")
        assert (status, body) == (200, "ready\n")

        # the kernel table: this process's own calls of the switched-off
        # syscalls are not counted, the others' are
        own_syscalls()
        # a scrape folds every CPU's combining slot into the entries: the
        # counts of this process's last calls may still sit in one
        agent.scrape()
        entry = kernel_entry(agent, os.getpid())
        assert entry is not None
        for name, counted in COUNTED.items():
            if name == off:
                assert not counted(entry["c"]), (name, entry["c"])
            else:
                assert counted(entry["c"]), (name, entry["c"])
        # either signal reads the sleeps' lengths (clock_nanosleep: enum sp_wait 1)
        assert flat(entry["c"]["timeout_buckets"][1]) >= 20

        scrape, counted = workload_counts(agent.scrape, workload_bin)
        families = {s.name for s in scrape.samples}
        for family in gone["families"]:
            assert f"# HELP {family} " not in scrape.text
            assert not {n for n in families if n.startswith(family)}, family
        for name, ok in counted.items():
            if not producible(FACTS[name]):
                continue
            assert ok == (name != off), (name, counted)
        if off == "sleep":  # the sleeps' lengths in the timer signal's histogram
            assert scrape.value("slowpath_node_timer_requested_seconds_count",
                                wait="clock_nanosleep") >= 20
    finally:
        assert agent.stop() == 0, agent.log_text()


def test_without_a_syscall_collector_there_is_no_syscall_hook(agent_bin, workload_bin, tmp_path):
    flags = [f"--no-collector.{name}" for name in SYSCALL_SIGNALS]
    agent = start(agent_bin, tmp_path, *flags)
    try:
        programs, tracepoints = kernel_side(agent)
        assert not [p for p in programs if p.startswith("sys_enter")], programs
        hooked = [name for name in SIGNALS if name not in SYSCALL_SIGNALS]
        assert tracepoints == CORE_HOOKS | {h for name in hooked for h in SIGNALS[name]["hooks"]}
        scrape = agent.scrape()
        probes = {s.labels["probe"] for s in scrape.select("slowpath_probe_attached")}
        assert probes == tracepoints
        assert "no enabled collector counts syscalls: hook sys_enter not attached" in agent.log_text()
        scrape, counted = workload_counts(agent.scrape, workload_bin)
        assert counted == {**dict.fromkeys(SYSCALL_SIGNALS, False), **{name: counted[name] for name in hooked}}
        for name in hooked:
            assert counted[name] or not producible(FACTS[name]), name
        assert scrape.select("slowpath_thp_settings_info")
    finally:
        assert agent.stop() == 0, agent.log_text()


def test_the_environment_switches_a_collector_off_and_a_flag_wins(agent_bin, tmp_path, monkeypatch):
    monkeypatch.setenv("SLOWPATH_COLLECTOR_MEMORY", "false")
    monkeypatch.setenv("SLOWPATH_COLLECTOR_TIMER", "false")
    agent = start(agent_bin, tmp_path, "--collector.timer")
    try:
        _, tracepoints = kernel_side(agent)
        assert not tracepoints & set(SIGNALS["memory"]["hooks"])
        assert set(SIGNALS["timer"]["hooks"]) <= tracepoints
        scrape = agent.scrape()
        assert not scrape.select("slowpath_thp_settings_info")
        assert "collector memory disabled" in agent.log_text()
        assert "collector timer disabled" not in agent.log_text()
    finally:
        assert agent.stop() == 0, agent.log_text()
