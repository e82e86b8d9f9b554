"""What each signal's workloads do, one module per signal the agent
declares (`slowpath signals`), named as the signal: the tests that cover
every signal read them here instead of keeping a row per signal each. A
new signal adds its module; a declared signal without one, or a module no
declared signal names, fails every such test, saying which.

The facts say what a workload does and what it leaves; each test still
checks them against its own oracle (a scrape, the kernel table, strace,
/proc/vmstat). Every module defines each name of FACTS (None where the
fact does not apply to the signal, with a comment saying why)."""

import functools
import importlib
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

from helpers.signals import declarations

PACKAGE = Path(__file__).resolve().parent

# The names every facts module defines, and what each holds.
FACTS = {
    "PRODUCIBLE": "None, or a function: False when this machine cannot produce the signal on demand",
    # test_collectors.py
    "WORKLOAD": "sp-workload arguments: one run on the host whose own series show the signal",
    "workload_counted": "function(own): whether WORKLOAD's series (own(family, **labels) -> value) "
                        "counted exactly what it did",
    "own_calls": "None, or a function making, in the test's own process, calls the signal counts",
    "kernel_counted": "None, or a function(c): whether the process's kernel table counts ('c' of "
                      "struct sp_proc as bpftool formats it) hold own_calls()'s",
    # test_guest.py
    "GUEST_WORKLOADS": "scenario lines run in every guest before its scrape `auto` "
                       "(tests/guest/harness.py: `section NAME command`)",
    "guest_exact": "function(run): asserts GUEST_WORKLOADS' exact counts (run: a GuestRun)",
    # busynode.py, test_series_budget.py
    "BUSY_NODE": "None, or a BusyService: the signal's program in each busy-node pod",
    # test_dashboards.py
    "DASHBOARD_WORKLOADS": "sp-workload argument lists run over and over while the panels are queried",
    "DASHBOARD_UNIT_WORKLOADS": "the same, run in a systemd unit's cgroup (the fleet's per-unit tables)",
    "DASHBOARD_EMPTY_ALLOWED": "(uid, title, refId) queries this machine leaves empty, besides those",
    "DASHBOARD_EMPTY_UNLESS_PRODUCIBLE": "(uid, title, refId) queries empty where PRODUCIBLE() is False",
    "DASHBOARD_ZERO_NORMAL": "(uid, title, refId) queries whose normal value here is 0",
}


class SignalFactsError(RuntimeError):
    pass


@dataclass(frozen=True)
class BusyService:
    """A busy-node program: sp-workload `args` run under the name `comm`;
    its series of `family` come from every pod, and each of `also` has
    some series of it."""
    comm: str
    args: tuple
    family: str
    also: tuple = ()


def flat(value):
    """The sum of a count or nested lists of counts (a kernel table field)."""
    if isinstance(value, list):
        return sum(flat(v) for v in value)
    return value


def module_names():
    """The facts modules in this package (no agent needed)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]) if not m.name.startswith("_"))


def mismatch(declared, modules):
    """What is wrong between the declared signals and the facts modules, or
    None."""
    problems = []
    missing = [name for name in declared if name not in modules]
    unknown = sorted(set(modules) - set(declared))
    if missing:
        problems.append("declared signal(s) without a facts module: "
                        + ", ".join(f"{name} (add tests/e2e/helpers/signal_facts/{name}.py)" for name in missing))
    if unknown:
        problems.append("facts module(s) naming no signal `slowpath signals` declares: "
                        + ", ".join(f"tests/e2e/helpers/signal_facts/{name}.py" for name in unknown))
    return "; ".join(problems) or None


def load(name):
    """The facts module of signal `name`, every name of FACTS defined."""
    module = importlib.import_module(f"{__name__}.{name}")
    absent = [fact for fact in FACTS if not hasattr(module, fact)]
    if absent:
        raise SignalFactsError(f"tests/e2e/helpers/signal_facts/{name}.py defines no {', '.join(absent)} "
                               f"(None where it does not apply): {', '.join(FACTS[f] for f in absent)}")
    return module


@functools.cache
def every_module():
    """{name: facts module} of every module here, in name order, without
    asking the agent (busynode.py runs outside the tests too)."""
    return {name: load(name) for name in module_names()}


@functools.cache
def declared():
    """{signal: facts module} for every signal the agent declares, in its
    order; raises, naming them, when a declared signal has no module or a
    module names no declared signal."""
    names = [d["name"] for d in declarations()]
    problem = mismatch(names, module_names())
    if problem:
        raise SignalFactsError(problem)
    return {name: load(name) for name in names}


def producible(facts):
    """Whether this machine produces the signal of `facts` on demand."""
    return facts.PRODUCIBLE is None or facts.PRODUCIBLE()


class GuestRun:
    """A guest scenario's sections (harness.run_scenario), read by a facts
    module's guest_exact: the scrape `auto` and the sections' pids."""

    def __init__(self, secs, scrape):
        self.secs = secs
        self.scrape = scrape

    def pid(self, section):
        return int(re.search(r"pid=(\d+)", self.secs[section]).group(1))

    def own(self, name, section, **labels):
        """The value of the workload of `section`'s own series."""
        return self.scrape.value(name, comm="sp-workload", pid=self.pid(section), **labels)
