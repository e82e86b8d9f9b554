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
- No hand-written sentence lists the agent's capabilities: the set is the
  generated privileges block of docs/security.md, rendered from the chart
  (test_no_hand_written_capability_sets says the rule).

Loads no BPF: of the agent, only its --help is run (SLOWPATH_BIN); the chart
is rendered with the pinned helm of tests/deploy/install-tools.sh.
"""

import importlib.util
import re
import subprocess
import sys

import pytest
import yaml

from helpers.paths import REPO
from helpers.tools import tools_cache

pytestmark = pytest.mark.tier("fast")

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
    helm = tools_cache() / "bin" / "helm"
    res = subprocess.run([sys.executable, GENERATE, "--check", "--bin", agent_bin, "--helm", helm],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_family_table_holds_what_the_agent_exports(agent_bin):
    """Every family of the golden expositions is in `slowpath signals`
    (docs/metrics.md's table) with the type and help it is exported with."""
    families = generator().metric_families(agent_bin)
    exported = {}
    for prom in (REPO / "agent" / "tests" / "golden").glob("*.prom"):
        for line in prom.read_text().splitlines():
            m = re.match(r"^# (HELP|TYPE) (slowpath_\w+) (.*)$", line)
            if m:
                exported.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
    assert len(exported) > 20
    for name, lines in exported.items():
        assert name in families, f"{name} is exported but slowpath signals does not list it"
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
    for target in ["#quick-start", "docs/install.md", "docs/first-hour.md", "docs/cost.md", "docs/metrics.md",
                   "docs/alerts.md", "docs/troubleshooting.md"]:
        assert f"]({target}" in first, f"README's first 40 lines do not link to {target}"


def recorded_names():
    """The `slowpath_...` middle parts of the recording rules (level:metric:operation)."""
    groups = yaml.safe_load((REPO / "deploy" / "prometheus" / "slowpath-rules.yaml").read_text())["groups"]
    return {rule["record"].split(":")[1] for g in groups for rule in g["rules"] if "record" in rule}


def test_quoted_metric_names_exist(agent_bin):
    known = set(generator().metric_families(agent_bin)) | recorded_names() | NOT_FAMILIES
    unknown = []
    for page in PAGES:
        for code in re.findall(r"`([^`\n]+)`", page.read_text()):
            for name in re.findall(r"(?<![\w:])(slowpath_[a-z_]*)(?![\w:*])", code):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if name not in known and base not in known:
                    unknown.append(f"{page.relative_to(REPO)}: {name} in `{code}`")
    assert not unknown, "\n".join(unknown)


def test_helm_set_flags_name_chart_values():
    """Every `--set KEY=` a page or the chart's NOTES.txt tells a user to
    pass names a value of values.yaml: a path of its keys, or a key under a
    map whose default is empty (labels.release). Helm takes a misspelt key
    silently, so a typo here would be a setting that does nothing."""
    values = yaml.safe_load((REPO / "deploy" / "helm" / "slowpath" / "values.yaml").read_text())
    notes = REPO / "deploy" / "helm" / "slowpath" / "templates" / "NOTES.txt"
    wrong, seen = [], 0
    for page in [*PAGES, notes]:
        for key in re.findall(r"--set(?:-string)? ([\w.]+)=", page.read_text()):
            seen += 1
            node = values
            for part in key.split("."):
                if isinstance(node, dict) and part in node:
                    node = node[part]
                elif node == {}:
                    break
                else:
                    wrong.append(f"{page.relative_to(REPO)}: --set {key}")
                    break
    assert seen >= 5, seen
    assert not wrong, "\n".join(wrong)


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


# --- capability sets: written once, generated ---------------------------------------

# The capabilities the agent is given or may be asked for, as CAP_ names (any
# case: setcap writes cap_bpf) and as the chart's securityContext names.
CAPABILITIES = ["BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "DAC_READ_SEARCH", "CHECKPOINT_RESTORE",
                "SYS_ADMIN"]
CAP_NAME = re.compile(r"(?<![\w])(?:CAP_)(" + "|".join(CAPABILITIES) + r")(?![\w])", re.I)
# Bare names: the ones with an underscore, PERFMON, and BPF only where it is
# an item of a list (`BPF`, [BPF, BPF, BPF/, BPF+), not the BPF of "BPF programs".
BARE_NAME = re.compile(r"(?<![\w])(" + "|".join(c for c in CAPABILITIES if c != "BPF") + r")(?![\w])"
                       r"|(?<![\w])(BPF)(?=`|\s*[,/+\]])|(?<=\[)(BPF)(?![\w])")
# Words that make a capability a claim about the whole set.
SET_CLAIM = re.compile(r"\b(?:exactly|only)\W{0,3}CAP_|CAP_\w+\W{0,3}only\b|\bonly these\b|\bnothing else\b"
                       r"|\bevery (?:capability )?set\b|\ball (?:capability )?sets\b", re.I)
# Words that make a sentence speak of an install, i.e. of what it grants.
INSTALL = re.compile(r"\b(chart|helm|daemonset|pods?|systemd|unit|image|manifests?|package|container|values)\b",
                     re.I)
PREFLIGHT = REPO / "agent" / "src" / "preflight.rs"
# The real-node table of docs/security.md (test_real_node.py checks it against the host).
HOST_SETS_ROW = re.compile(r"^\| `Cap(Bnd|Prm|Eff|Amb)` \|")


def capability_names(sentence):
    """The distinct capabilities a sentence names."""
    names = {m.upper() for m in CAP_NAME.findall(sentence)}
    names |= {next(g for g in m if g) for m in BARE_NAME.findall(sentence)}
    return names


def sentences(units):
    """(line, sentence) of each unit, [(line, text)]: a sentence ends at `. `,
    or at `; ` or `: ` before an upper-case letter or a backtick. Inline code
    with a space in it (a quoted command or log line) is left out."""
    for line, text in units:
        text = re.sub(r"`[^`]*`", lambda m: "" if re.search(r"\s", m.group()) else m.group(), " ".join(text.split()))
        for sentence in re.split(r"(?<=\.)\s+(?=[\w`*(])|(?<=[;:])\s+(?=[A-Z`*(])", text):
            yield line, sentence


def needs():
    """The capability groups the agent checks at start, each what one
    operation needs (agent/src/preflight.rs): loading and attaching the
    programs, and symbolizing other users' processes' stacks."""
    text = PREFLIGHT.read_text()
    groups = []
    for function in ("missing_capabilities", "missing_symbolization_capabilities"):
        body = re.search(r"pub fn " + function + r"\(.*?\n}\n", text, re.S).group()
        groups.append(set(re.findall(r"Capability::CAP_(\w+)", body)))
    assert {"BPF", "PERFMON"} <= groups[0] and {"SYS_PTRACE", "CHECKPOINT_RESTORE"} <= groups[1], groups
    return groups


def is_claim(sentence, groups):
    """Whether a sentence lists or claims the agent's capability set (see
    test_no_hand_written_capability_sets)."""
    names = capability_names(sentence)
    if not names:
        return False
    if SET_CLAIM.search(sentence):
        return True
    if len(names) < 2:
        return False
    return INSTALL.search(sentence) is not None or not any(names <= group for group in groups)


def markdown_units(text, page):
    """(line, text) of the hand-written prose of a Markdown page: its
    paragraphs, list items and table cells; without fenced code (commands
    run as they are), generated blocks, the real-node table of
    docs/security.md and inline code spans with a space in them (quoted
    commands and log lines)."""
    units, current, in_code, in_generated = [], None, False, False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            current = None
            continue
        if re.match(r"^<!-- generated:\S+ (begin|end) -->$", line):
            in_generated = line.endswith("begin -->")
            current = None
            continue
        if in_code or in_generated or (page == "docs/security.md" and HOST_SETS_ROW.match(line)):
            current = None
            continue
        if line.startswith("|"):
            units += [(n, c) for c in line.strip().strip("|").split("|")]
            current = None
        elif not line.strip() or line.startswith("#"):
            current = None
        elif current is None or re.match(r"^\s*([-*]|\d+\.) ", line):
            current = [n, line]
            units.append(current)
        else:
            current[1] += " " + line
    return [tuple(u) for u in units]


def changelog_unreleased(text):
    """The Unreleased section of CHANGELOG.md: released sections are
    history, what a release said of itself then; they are corrected by hand
    (and the correction noted under Unreleased), not held to today's set."""
    start = text.index("## [Unreleased]")
    end = text.index("\n## [", start + 1)
    head = text[:start].count("\n")
    return "\n" * head + text[start:end]


def yaml_comment_units(text):
    """(line, text) of each paragraph of comments of a YAML file."""
    units, current = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*#\s?(.*)$", line)
        if not m or not m.group(1).strip():
            current = None
            continue
        if current is None:
            current = [n, m.group(1)]
            units.append(current)
        else:
            current[1] += " " + m.group(1)
    return [tuple(u) for u in units]


def capability_claims():
    """Every hand-written sentence that names two or more of the agent's
    capabilities, or one with a word that claims the whole set, as
    "page:line: sentence"."""
    sources = []
    for page in sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")]):
        rel = page.relative_to(REPO).as_posix()
        sources.append((rel, markdown_units(page.read_text(), rel)))
    changelog = changelog_unreleased((REPO / "CHANGELOG.md").read_text())
    sources.append(("CHANGELOG.md", markdown_units(changelog, "CHANGELOG.md")))
    values = REPO / "deploy" / "helm" / "slowpath" / "values.yaml"
    sources.append(("deploy/helm/slowpath/values.yaml", yaml_comment_units(values.read_text())))
    groups = needs()
    return [f"{rel}:{line}: {sentence}" for rel, units in sources for line, sentence in sentences(units)
            if is_claim(sentence, groups)]


def test_the_capability_rule_catches_lists_and_spares_single_capabilities():
    groups = needs()
    caught = ["`CAP_BPF` and `CAP_PERFMON` (only these)",
              "By default the agent runs as uid 65534 with exactly CAP_BPF and CAP_PERFMON.",
              "The DaemonSet runs as uid 65534 with `CAP_BPF` and `CAP_PERFMON`.",
              "It needs `CAP_BPF`, `CAP_PERFMON` and the findings' `CAP_SYS_PTRACE`.",
              "securityContext.capabilities.add: [BPF, PERFMON, SYS_RESOURCE]",
              "the chart's default: CAP_BPF and CAP_PERFMON only",
              "The agent drops `CAP_SYS_RESOURCE` from every set at start."]
    spared = ["The agent exits at start: missing CAP_BPF.",
              "Run as root (or with CAP_BPF and CAP_PERFMON).",
              "Symbolizing needs `CAP_SYS_PTRACE`, `CAP_DAC_READ_SEARCH` and `CAP_CHECKPOINT_RESTORE`.",
              "Absent without `CAP_SYS_ADMIN` (and kernel.bpf_stats_enabled off).",
              "It counts exactly with the chart's `CAP_SYS_RESOURCE`.",
              "BPF programs, BPF maps and the BPF ring buffer; eBPF, PERFMON."]
    for text in caught:
        assert is_claim(text, groups), text
    for text in spared:
        assert not is_claim(text, groups), (text, capability_names(text))


def test_no_hand_written_capability_sets():
    """What the agent holds is written once: the generated `privileges`
    block of docs/security.md (docs/generate.py renders the chart per values
    and reads the container's securityContext; `privileges-systemd` reads the
    unit). Everywhere else a page links there. The rule, per sentence (a
    sentence may span wrapped lines; a table cell, a list item and a YAML
    comment paragraph are split into sentences too):

    - a sentence naming two or more of CAP_BPF, CAP_PERFMON,
      CAP_SYS_RESOURCE, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
      CAP_CHECKPOINT_RESTORE, CAP_SYS_ADMIN (any case, or the chart's bare
      names SYS_PTRACE, PERFMON, `BPF` in a list...) lists a set: it fails,
      unless all it names is what one operation needs, as the agent checks
      at start (agent/src/preflight.rs: loading the programs, CAP_BPF and
      CAP_PERFMON or CAP_SYS_ADMIN; symbolizing, the three call-site
      capabilities) and it names no install (chart, Helm, DaemonSet, pod,
      systemd unit, image, manifest, package, container, values): "run the
      doctor as root or with CAP_BPF and CAP_PERFMON" is a fact of the
      kernel, "the DaemonSet runs with CAP_BPF and CAP_PERFMON" a claim;
    - a sentence naming one of them with "exactly CAP_", "only CAP_",
      "CAP_... only", "only these", "nothing else", "every set" or "all
      sets" claims the set: it fails;
    - one capability explained where it is used ("missing CAP_BPF", what
      CAP_SYS_RESOURCE is for) passes.

    Read: README.md, docs/*.md, the Unreleased section of CHANGELOG.md
    (released sections are history, see changelog_unreleased) and the
    comments of the chart's values.yaml. Not read: generated blocks, fenced
    code (commands are run as written and say what they grant), inline code
    with a space in it (quoted commands and log lines), and the real-node
    table of docs/security.md, which test_real_node.py checks against the
    host's /proc/PID/status."""
    claims = capability_claims()
    assert not claims, ("hand-written capability sets: link to docs/security.md#what-the-agent-holds "
                        "instead\n" + "\n".join(claims))


# --- project terms: defined where a page first uses them ---------------------------
# Each term the docs coin, with what its definition (or a link to it) says near
# its first use on a page: `evidence` must match within the text around that
# use (a sentence or two), else a link to `defined_at` must be there.
JARGON = {
    "canary": dict(term=r"\bcanary\b", defined_at="metrics.md#families",
                   evidence=r"batch of (libc )?(clock )?reads|reads? each clock|through libc"),
    "combining slot": dict(term=r"\bcombining slots?\b", defined_at="metrics.md#families",
                           evidence=r"per-CPU"),
    "known source": dict(term=r"\bknown[ -]sources?\b", defined_at="doctor.md#how-the-doctor-knows-the-cause",
                         evidence=r"table of \*\*known sources\*\*|matched|recognised"),
    # (not the clocksource named jiffies: "acpi_pm/jiffies", "clocksource=jiffies")
    "jiffy": dict(term=r"(?<![/=])\bjiff(y|ies)\b", defined_at="metrics.md#families",
                  evidence=r"tick|1/HZ"),
}
# The pages read as a new admin reads them (not docs/flags.md, which is
# generated from the CLI help).
JARGON_PAGES = ["README.md", "docs/metrics.md", "docs/cost.md", "docs/doctor.md",
                "docs/troubleshooting.md", "docs/top.md", "docs/fleet.md", "docs/guest.md",
                "docs/security.md", "docs/first-hour.md", "docs/runbook.md", "docs/alerts.md",
                "docs/install.md"]


def prose_outside_generated(text):
    """Prose with fenced code, generated blocks and inline code taken out."""
    text = re.sub(r"<!-- generated:(\S+) begin -->.*?<!-- generated:\1 end -->", "", prose(text), flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("page", JARGON_PAGES)
def test_project_terms_are_defined_at_first_use(page):
    text = prose_outside_generated((REPO / page).read_text())
    undefined = []
    for name, t in JARGON.items():
        m = re.search(t["term"], text, flags=re.I)
        if not m:
            continue
        around = text[max(0, m.start() - 200):m.end() + 300]
        anchor = t["defined_at"].split("#", 1)[1]
        linked = re.search(r"\]\((?:[\w./-]*)#" + re.escape(anchor) + r"\)", around)
        if not (linked or re.search(t["evidence"], around, flags=re.I)):
            line = text[:m.start()].count("\n") + 1
            undefined.append(f"{name!r} near prose line {line}: {around!r}")
    assert not undefined, "\n".join(undefined)


def test_the_agents_cpu_figure_is_the_one_cost_md_measured():
    """The agent process's CPU under 1M traced syscalls/s is measured once,
    in docs/cost.md; the README, the chart's resources comment and the
    systemd unit's CPUQuota comment quote that figure, not an older one."""
    cost = (REPO / "docs/cost.md").read_text()
    figure = re.search(r"Under 1M traced syscalls/s the agent process used (\d+(?:\.\d+)?) % of one core", cost)[1]
    for path in ["README.md", "deploy/helm/slowpath/values.yaml", "deploy/systemd/slowpath.service"]:
        text = " ".join((REPO / path).read_text().replace("#", " ").split())
        quoted = [m[1] for m in re.finditer(r"(\d+(?:\.\d+)?) % of one core", text)
                  if re.search(r"(1M|1,000,000) traced (syscalls|events)/s", text[m.start() - 120:m.end() + 60])]
        assert quoted and set(quoted) == {figure}, (path, quoted, figure)
