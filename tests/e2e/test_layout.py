"""The suite's own layout: conftest.py holds the fixtures and pytest hooks
and nothing else, and nothing imports it; what the tests share besides
fixtures is the package helpers/. pytest loads conftest.py as a plugin: a
test importing it by the name `conftest` relies on that name reaching this
one file, which no longer holds beside a second conftest.py on sys.path or
under --import-mode=importlib.

helpers/__init__.py lists its modules; helpers/signal_facts/ holds one
module per signal the agent declares, each defining every fact, and
imports no test."""

import ast
from pathlib import Path

import pytest

from helpers import signal_facts, tiers
from helpers.signals import declarations

pytestmark = pytest.mark.tier("fast")

E2E = Path(__file__).resolve().parent
CONFTEST = E2E / "conftest.py"


def imports_conftest(tree):
    """The lines of `tree` that import conftest (at any depth: in a
    function too)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "conftest":
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_nothing_imports_conftest():
    found = []
    for path in sorted(E2E.rglob("*.py")):
        if path == CONFTEST:
            continue
        tree = ast.parse(path.read_text(), str(path))
        found += [f"{path.relative_to(E2E)}:{line}" for line in imports_conftest(tree)]
    assert not found, f"import these from helpers/, not conftest: {found}"


def is_fixture(decorator):
    """@pytest.fixture or @pytest.fixture(...)."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return (isinstance(decorator, ast.Attribute) and decorator.attr == "fixture"
            and isinstance(decorator.value, ast.Name) and decorator.value.id == "pytest")


def is_assert_rewrite(node):
    """pytest.register_assert_rewrite(...): the helpers' asserts rewritten
    as the tests' are (it must run in conftest, before they are imported)."""
    call = node.value if isinstance(node, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "register_assert_rewrite")


def not_fixture_or_hook(node):
    """Why the top-level statement `node` of conftest.py does not belong
    there, or None."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return None  # the docstring
    if isinstance(node, (ast.Import, ast.ImportFrom)) or is_assert_rewrite(node):
        return None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if node.name.startswith("pytest_") or any(is_fixture(d) for d in node.decorator_list):
            return None
        return f"def {node.name} is neither a fixture nor a pytest_ hook"
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        public = [name for name in names if not name.startswith("_")]
        if len(names) == len(targets) and not public:
            return None
        return f"{', '.join(public) or 'an assignment'} is not a private name"
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}"
    return f"a {type(node).__name__} statement"


def test_conftest_holds_only_fixtures_and_hooks():
    tree = ast.parse(CONFTEST.read_text(), str(CONFTEST))
    wrong = [f"conftest.py:{node.lineno}: {why}" for node in tree.body if (why := not_fixture_or_hook(node))]
    assert not wrong, f"helpers belong in helpers/, not conftest.py: {wrong}"


@pytest.mark.parametrize("source, why", [
    ("def helper(): pass", "def helper is neither a fixture nor a pytest_ hook"),
    ("class Agent: pass", "class Agent"),
    ("REPO = 1", "REPO is not a private name"),
    ("@functools.cache\ndef tools(): pass", "def tools is neither a fixture nor a pytest_ hook"),
    ("@pytest.fixture\ndef a(): pass", None),
    ("@pytest.fixture(scope='session')\ndef a(): pass", None),
    ("def pytest_configure(config): pass", None),
    ("_CACHE = {}", None),
    ("pytest.register_assert_rewrite('helpers')", None),
])
def test_the_conftest_check_tells_a_helper_from_a_fixture(source, why):
    assert not_fixture_or_hook(ast.parse(source).body[0]) == why


@pytest.mark.parametrize("source, lines", [
    ("from conftest import REPO", [1]),
    ("import os, conftest", [1]),
    ("def f():\n    import conftest", [2]),
    ("from helpers.paths import REPO\nimport conftest_like", []),
])
def test_the_import_check_finds_conftest_anywhere(source, lines):
    assert imports_conftest(ast.parse(source)) == lines


HELPERS = E2E / "helpers"


def helper_modules():
    """The modules and packages of helpers/, by name."""
    return sorted({p.stem for p in HELPERS.glob("*.py") if p.stem != "__init__"}
                  | {p.parent.name for p in HELPERS.glob("*/__init__.py")})


def test_helpers_lists_its_modules():
    doc = ast.get_docstring(ast.parse((HELPERS / "__init__.py").read_text()))
    listed = {line.split()[0] for line in doc.splitlines() if line.startswith("  ") and not line.startswith("   ")}
    assert set(helper_modules()) <= listed, f"helpers/__init__.py does not list {set(helper_modules()) - listed}"


def test_signal_facts_is_a_package_of_modules_that_import_no_test():
    facts = HELPERS / "signal_facts"
    assert (facts / "__init__.py").exists()
    assert not [p for p in facts.iterdir() if p.is_dir() and p.name != "__pycache__"], "one module a signal"
    found = []
    for path in sorted(facts.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}:{node.lineno} {n}" for n in names
                      if n.split(".")[0].startswith("test_") or n.split(".")[0] in ("busynode", "conftest")]
    assert not found, f"the facts are read by the tests, not the other way: {found}"


def test_every_facts_module_defines_every_fact():
    modules = signal_facts.every_module()  # raises, naming the module and the names it lacks
    assert modules


def test_every_declared_signal_has_a_facts_module_and_no_other():
    declared = [d["name"] for d in declarations()]
    assert signal_facts.mismatch(declared, signal_facts.module_names()) is None, \
        signal_facts.mismatch(declared, signal_facts.module_names())
    assert list(signal_facts.declared()) == declared


@pytest.mark.parametrize("declared, modules, problem", [
    (["clock", "timer"], ["clock", "timer"], None),
    (["clock", "timer", "irq"], ["clock", "timer"],
     "declared signal(s) without a facts module: irq (add tests/e2e/helpers/signal_facts/irq.py)"),
    (["clock"], ["clock", "sleep"],
     "facts module(s) naming no signal `slowpath signals` declares: tests/e2e/helpers/signal_facts/sleep.py"),
])
def test_the_facts_check_names_what_is_missing(declared, modules, problem):
    assert signal_facts.mismatch(declared, modules) == problem


class _Item:
    """A collected test as tier_problems sees it: a node id, its closest
    `tier` and `lane` markers and its fixtures."""

    def __init__(self, tier=None, fixtures=(), lane=None):
        self.nodeid = "tests/e2e/test_x.py::test_y"
        self.fixturenames = list(fixtures)
        self._markers = {tiers.MARKER: None if tier is None else pytest.mark.tier(tier).mark,
                         tiers.LANE_MARKER: None if lane is None else pytest.mark.lane(lane).mark}

    def get_closest_marker(self, name):
        return self._markers.get(name)


@pytest.mark.parametrize("item, problem", [
    (_Item("fast"), None),
    (_Item("full", ["faults_bin"]), None),
    (_Item(), "no tier"),
    (_Item("slow"), "unknown tier 'slow'"),
    (_Item("fast", ["agent_bin", "faults_bin"]), "a fast test needs faults_bin (the fault-injection build)"),
    (_Item("full", ["agent_bin"], lane="guest"), None),
    (_Item("full", lane="vm"), "unknown lane 'vm'"),
    (_Item("full", ["agent"], lane="guest"), "a guest-lane test needs agent (the host's shared agent)"),
])
def test_the_tier_check_names_a_test_without_a_known_tier(item, problem):
    problems = tiers.tier_problems([item])
    if problem is None:
        assert problems == []
    else:
        [line] = problems
        assert line.startswith(f"{item.nodeid}: {problem}"), line
