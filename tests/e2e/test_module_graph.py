"""The agent's modules depend one way: scripts/module-graph.py finds no
cycle in agent/src's top-level module graph, and does find one in a small
tree built with one (so a pass means something).

Loads no BPF and runs no agent: reads the sources only.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "module-graph.py"


def module_graph(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args],
                          capture_output=True, text=True, timeout=60)


def test_agent_modules_have_no_cycle():
    run = module_graph()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "kernel -> (nothing)" in run.stdout.splitlines(), run.stdout


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
