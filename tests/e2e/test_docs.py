"""The docs hold to their sources.

- The generated blocks (flags from the agent's --help, metric families from
  agent/src, alerts from the rules) are what docs/generate.py gives now.
- The family parser reads what the agent exports: every family of the golden
  expositions (agent/tests/golden) with the same help and type.
- Every relative link of README.md, CONTRIBUTING.md, ARCHITECTURE.md and
  docs/*.md opens a file and, with an #anchor, a heading of it.
- README.md stays short and its first screen links to the pages a new user
  needs.
- Every `slowpath_...` name quoted in the docs is a family the agent defines
  (or a recording rule's), and every log line quoted in the troubleshooting
  page is one the agent writes.

Loads no BPF: of the agent, only its --help is run (SLOWPATH_BIN).
"""

import importlib.util
import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO

GENERATE = REPO / "docs" / "generate.py"
PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "ARCHITECTURE.md",
                REPO / "dashboards" / "README.md",
                *(REPO / "docs").glob("*.md")])
# Names quoted in the docs that are no family of the agent: the prefix itself.
NOT_FAMILIES = {"slowpath_"}


def generator():
    spec = importlib.util.spec_from_file_location("generate", GENERATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose(text):
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def github_anchor(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            base = github_anchor(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    text = re.sub(r"`[^`\n]*`", "", prose(path.read_text()))
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text)


def test_generated_blocks_are_current(agent_bin):
    res = subprocess.run([sys.executable, GENERATE, "--check", "--bin", agent_bin],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_family_parser_reads_what_the_agent_exports():
    families = generator().metric_families()
    exported = {}
    for prom in (REPO / "agent" / "tests" / "golden").glob("*.prom"):
        for line in prom.read_text().splitlines():
            m = re.match(r"^# (HELP|TYPE) (slowpath_\w+) (.*)$", line)
            if m:
                exported.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
    assert len(exported) > 20
    for name, lines in exported.items():
        assert name in families, f"{name} is exported but docs/generate.py does not find it"
        kind, help_, _ = families[name]
        assert lines["TYPE"] == kind, name
        help_exported = lines["HELP"].replace("\\\\", "\\").replace("\\n", "\n")
        assert help_exported == help_, name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for link in links(page):
        if re.match(r"^[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no file {path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{link}: no heading #{anchor} in {path.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


def test_readme_is_short_and_its_first_screen_links_every_first_need():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines"
    first = "\n".join(lines[:40])
    for target in ["#quick-start", "docs/install.md", "docs/cost.md", "docs/metrics.md", "docs/alerts.md",
                   "docs/troubleshooting.md"]:
        assert f"]({target}" in first, f"README's first 40 lines do not link to {target}"


def recorded_names():
    """The `slowpath_...` middle parts of the recording rules (level:metric:operation)."""
    groups = yaml.safe_load((REPO / "deploy" / "prometheus" / "slowpath-rules.yaml").read_text())["groups"]
    return {rule["record"].split(":")[1] for g in groups for rule in g["rules"] if "record" in rule}


def test_quoted_metric_names_exist():
    known = set(generator().metric_families()) | recorded_names() | NOT_FAMILIES
    unknown = []
    for page in PAGES:
        for code in re.findall(r"`([^`\n]+)`", page.read_text()):
            for name in re.findall(r"(?<![\w:])(slowpath_[a-z_]*)(?![\w:*])", code):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if name not in known and base not in known:
                    unknown.append(f"{page.relative_to(REPO)}: {name} in `{code}`")
    assert not unknown, "\n".join(unknown)


def agent_strings():
    """The agent's source with Rust's line continuations joined."""
    text = "\n".join(p.read_text() for p in (REPO / "agent" / "src").rglob("*.rs"))
    return re.sub(r"\\\n\s*", "", text)


def test_quoted_log_lines_exist():
    source = agent_strings()
    text = (REPO / "docs" / "troubleshooting.md").read_text()
    quoted = [" ".join(q.split()) for q in re.findall(r'`"([^`]+)"`', text)]
    assert len(quoted) >= 8
    missing = [q for q in quoted if q not in source]
    assert not missing, f"log lines the agent does not write: {missing}"
