"""The agent's modules depend one way and each file is one concern:
scripts/module-graph.py finds no cycle in agent/src's top-level module
graph and no non-test file of more than 500 lines before its tests; and
it does find a cycle, and a long file, in small trees built with them (so
a pass means something). ARCHITECTURE.md's module graph is the script's
output.

Loads no BPF and runs no agent: reads the sources only.
"""

import subprocess
import sys
from pathlib import Path
import pytest

pytestmark = pytest.mark.tier("fast")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "module-graph.py"


def module_graph(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args],
                          capture_output=True, text=True, timeout=60)


MAX_LINES = 500


def test_agent_modules_have_no_cycle_and_no_long_file():
    run = module_graph("--max-lines", str(MAX_LINES))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kernel -> (nothing)" in run.stdout.splitlines(), run.stdout


def test_the_architecture_page_draws_the_graph_as_it_is():
    page = (REPO / "ARCHITECTURE.md").read_text()
    section = page.split("## The module graph\n", 1)[1].split("\n## ", 1)[0]
    drawn = section.split("```\n", 2)[1]
    assert drawn == module_graph().stdout, \
        "redraw ARCHITECTURE.md's module graph from scripts/module-graph.py"


def test_a_cycle_is_found_and_named(tmp_path):
    (tmp_path / "main.rs").write_text("mod a;\nmod b;\nmod c;\nfn main() { a::run(); }\n")
    (tmp_path / "a.rs").write_text("use crate::b::Thing;\npub fn run() {}\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "mod.rs").write_text("pub mod inner;\npub struct Thing;\n")
    # The edge back to a is a submodule's: it counts as b's.
    (tmp_path / "b" / "inner.rs").write_text("use super::Thing;\nfn f() { crate::a::run() }\n")
    # Test code reaches anywhere and makes no edge.
    (tmp_path / "c.rs").write_text("pub fn g() {}\n#[cfg(test)]\nmod tests {\n"
                                   "    use crate::main_only;\n}\n")
    run = module_graph("--root", str(tmp_path))
    assert run.returncode != 0, run.stdout
    assert "cycle: a -> b -> a" in run.stderr, run.stderr
    assert "c -> (nothing)" in run.stdout.splitlines(), run.stdout


def test_test_code_makes_no_edge(tmp_path):
    (tmp_path / "main.rs").write_text("mod a;\nmod b;\n#[cfg(test)]\nmod golden;\n")
    (tmp_path / "a.rs").write_text("pub fn f() { crate::b::g() }\n")
    (tmp_path / "b.rs").write_text("pub fn g() {}\n#[cfg(test)]\nmod tests {\n"
                                   "    use crate::a::f;\n}\n")
    (tmp_path / "golden.rs").write_text("use crate::a::f;\nuse crate::b::g;\n")
    run = module_graph("--root", str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "golden" not in run.stdout, run.stdout


def test_a_long_file_is_named_and_test_code_is_not_counted(tmp_path):
    body = "pub fn f() {}\n" * 10
    tests = "#[cfg(test)]\nmod tests {\n" + "    // a test\n" * 20 + "}\n"
    (tmp_path / "main.rs").write_text("mod a;\nmod b;\n#[cfg(test)]\nmod golden;\n")
    (tmp_path / "a.rs").write_text(body + "pub fn g() {}\n" + tests)
    (tmp_path / "b.rs").write_text(body + tests)
    # compiled only under cfg(test): never too long
    (tmp_path / "golden.rs").write_text(body * 3)
    run = module_graph("--root", str(tmp_path), "--max-lines", "10")
    assert run.returncode != 0, run.stdout
    assert run.stderr.splitlines() == ["too long: a.rs has 11 non-test lines (at most 10)"], \
        run.stderr
