#!/usr/bin/env python3
"""The agent's module graph, read from its sources, and whether it has a cycle.

    scripts/module-graph.py [--root DIR] [--max-lines N]

Reads DIR/**/*.rs (DIR defaults to agent/src). A file is a module named by
its path: `foo.rs` and `foo/mod.rs` are `foo`, `foo/bar.rs` is `foo::bar`.
Its edges are the modules it names through `crate::a::b` paths and
`use crate::...` / `use super::...` statements, the longest known module
prefix of each path winning. Lines from a file's first `#[cfg(test)]` on are
test code and give no edge (tests may reach anywhere).

Prints the top-level graph (a submodule's edges count as its top-level
module's; edges inside one top-level module are left out), one line per
module: `from -> to, to`. Exits 1, naming one cycle, when that graph has one;
0 otherwise.

With --max-lines N it also fails, naming them, on the files with more than N
non-test lines (the lines before the test section), test-only files (those
declared after `#[cfg(test)]`, such as golden.rs) left out. Standard
library only.
"""

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CRATE_PATH = re.compile(r"\bcrate((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
SUPER_PATH = re.compile(r"\b((?:super::)+)((?:[A-Za-z_][A-Za-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)")
TEST_BLOCK = re.compile(r"\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{")
TEST_DECL = re.compile(r"\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;")
USE_GROUP = re.compile(r"\buse\s+(crate|(?:super::)*super)::\{([^;]*)\}\s*;", re.S)


def module_of(path: Path, root: Path) -> tuple:
    """The module a file is, as a tuple of names (`()` for the crate root)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("mod", "main", "lib") and (len(parts) > 1 or parts[-1] != "mod"):
        parts.pop()
    return tuple(parts)


def non_test_lines(path: Path) -> list:
    """The file's lines before its test section: the first `#[cfg(test)]`
    that opens an inline module (`mod tests {`). A `#[cfg(test)]` on a
    single item or on a `mod name;` declaration opens no section."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "#[cfg(test)]" and TEST_BLOCK.match(lines[i + 1]):
            return lines[:i]
    return lines


def non_test_text(path: Path) -> str:
    """The file's non-test text, comments dropped."""
    return "\n".join(line.split("//", 1)[0] for line in non_test_lines(path))


def test_only_files(root: Path) -> set:
    """Files compiled only under cfg(test): declared by a `mod name;` line
    right after `#[cfg(test)]` (golden.rs, http/testing.rs)."""
    found = set()
    for f in root.rglob("*.rs"):
        lines = f.read_text(encoding="utf-8").splitlines()
        here = f.parent if f.name in ("mod.rs", "main.rs", "lib.rs") else f.with_suffix("")
        for i, line in enumerate(lines[:-1]):
            m = TEST_DECL.match(lines[i + 1])
            if line.strip() == "#[cfg(test)]" and m:
                found |= {here / f"{m[1]}.rs", here / m[1] / "mod.rs"}
    return found


def resolve(names: list, modules: set) -> tuple:
    """The longest prefix of `names` that is a known module, or ()."""
    for end in range(len(names), 0, -1):
        if tuple(names[:end]) in modules:
            return tuple(names[:end])
    return ()


def group_paths(prefix: str, body: str) -> list:
    """The paths a `use prefix::{...}` group names, one level of nesting."""
    paths = []
    for item in re.split(r",(?![^{]*\})", body):
        item = item.strip()
        if not item:
            continue
        head = item.split("::{", 1)[0].split(" as ")[0].strip()
        paths.append(prefix + "::" + head)
    return paths


def edges_of(module: tuple, text: str, modules: set) -> set:
    """The modules one file names outside itself (the crate root names its
    modules without `crate::`)."""
    paths = []
    if not module:
        tops = "|".join(sorted(m[0] for m in modules if len(m) == 1))
        paths += ["crate::" + m for m in re.findall(rf"(?<![\w:])((?:{tops})(?:::\w+)*)::", text)]
    for prefix, body in USE_GROUP.findall(text):
        paths += group_paths(prefix, body)
    paths += ["crate" + m for m in CRATE_PATH.findall(text)]
    paths += [s + p for s, p in SUPER_PATH.findall(text)]
    found = set()
    for path in paths:
        names = path.split("::")
        if names[0] == "crate":
            names = names[1:]
        else:
            base = list(module)
            while names and names[0] == "super":
                base = base[:-1]
                names = names[1:]
            names = base + names
        target = resolve(names, modules)
        if target and target != module:
            found.add(target)
    return found


def graph(root: Path) -> dict:
    """Top-level module -> the top-level modules it names."""
    test_only = test_only_files(root)
    files = sorted(f for f in root.rglob("*.rs") if f not in test_only)
    modules = {module_of(f, root) for f in files}
    top = {}
    for f in files:
        module = module_of(f, root)
        if not module:
            source = "main"
        else:
            source = module[0]
        targets = top.setdefault(source, set())
        for target in edges_of(module, non_test_text(f), modules):
            if target[0] != source:
                targets.add(target[0])
    return top


def long_files(root: Path, most: int) -> list:
    """(path relative to root, non-test lines) of the non-test files with
    more than `most` non-test lines."""
    test_only = test_only_files(root)
    found = []
    for f in sorted(root.rglob("*.rs")):
        if f in test_only:
            continue
        count = len(non_test_lines(f))
        if count > most:
            found.append((f.relative_to(root), count))
    return found


def find_cycle(top: dict):
    """One cycle of `top` as a list of modules (first repeated last), or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(top.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, stack)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(top):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO / "agent" / "src",
                        help="the crate's source directory (default agent/src)")
    parser.add_argument("--max-lines", type=int, metavar="N",
                        help="also fail on a non-test file of more than N non-test lines")
    args = parser.parse_args()
    root = args.root.resolve()
    top = graph(root)
    for module in sorted(top):
        print(f"{module} -> {', '.join(sorted(top[module])) or '(nothing)'}")
    failed = 0
    cycle = find_cycle(top)
    if cycle:
        print(f"cycle: {' -> '.join(cycle)}", file=sys.stderr)
        failed = 1
    if args.max_lines is not None:
        for path, count in long_files(root, args.max_lines):
            print(f"too long: {path} has {count} non-test lines (at most {args.max_lines})",
                  file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
