"""Every header of the BPF code compiles alone (bpf/check-headers.sh).

Each header of bpf/core, bpf/signals and bpf/compose, compiled after only
vmlinux.h and libbpf's headers with the build's clang flags, for both
arches the agent builds for: a header that leans on what slowpath.bpf.c
included before it fails. A negative control shows that the check fails,
naming the header, when a header uses what it does not declare.

Loads no BPF: clang only.
"""

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("fast")

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "bpf" / "check-headers.sh"


def check_headers(*args):
    return subprocess.run(["sh", str(CHECK), *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("arch", ["x86", pytest.param("arm64", marks=pytest.mark.tier("full"))])
def test_every_header_compiles_alone(arch):
    run = check_headers("--arch", arch)
    assert run.returncode == 0, run.stderr
    # every header of the three directories, with and without fault injection
    headers = [p for d in ("core", "signals", "compose") for p in (REPO / "bpf" / d).glob("*.h")]
    assert f"{2 * len(headers)} compilations ({arch})" in run.stdout, run.stdout


def test_a_header_using_an_undeclared_symbol_fails(tmp_path):
    bad = tmp_path / "uses_undeclared.h"
    bad.write_text("static __always_inline int f(void)\n{\n\treturn sp_not_declared_anywhere();\n}\n")
    run = check_headers("--only", str(bad))
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{bad} does not compile alone" in run.stderr, run.stderr
    assert "sp_not_declared_anywhere" in run.stderr, run.stderr


def test_a_header_that_includes_what_it_uses_passes(tmp_path):
    # the same setup as the negative control, with the symbol included:
    # its failure is the missing declaration, not the check itself
    good = tmp_path / "includes_its_own.h"
    good.write_text('#include "core/stats.h"\n\n'
                    "static __always_inline void f(void)\n{\n\tlost_inc(0);\n}\n")
    run = check_headers("--only", str(good))
    assert run.returncode == 0, run.stderr
    assert "2 compilations" in run.stdout, run.stdout

