#!/usr/bin/env python3
"""Rewrites the generated blocks of the docs from their sources, so that no
table is written twice by hand:

  docs/flags.md    flags, doctor-flags and top-flags: the agent's `--help`,
                   `doctor --help` and `top --help` (clap), from the
                   release binary
  docs/metrics.md  families: every metric family the agent defines (name,
                   type, help, file), from `slowpath signals` (each signal's
                   families and the agent's own)
  docs/top.md      columns: each declared signal's columns of `slowpath top`
                   (`slowpath signals`: header, meaning, --sort value,
                   counter)
  docs/doctor.md   findings: each declared signal's findings (`slowpath
                   signals`: id, when, severities); callsite-kinds: its call
                   kinds (name, what they sample); known-sources: its known
                   sources (id, the frames each matches)
  docs/runbook.md  runbook: each declared signal's sections (its alerts'
                   what, why, cause and fix); known-sources: a section per
                   known source (cause, fix, expected gain)
  docs/metrics.md  labels: each declared signal's per-process families'
                   labels, counts and hooks (`slowpath signals`); promql:
                   its case in PromQL, numbered in the agent's order
  docs/alerts.md   alerts: deploy/prometheus/slowpath-rules.yaml
  README.md        stories: each declared signal's case and what it cost
                   the cases that found it (`slowpath signals`);
                   cases: each case's families (from agent/src; a signal's
                   case has the families `slowpath signals` declares for it)
                   and the alerts that read them (from the rules, through the
                   recording rules)
  docs/security.md privileges: the agent container's securityContext and the
                   pod's hostPID, from the chart rendered by `helm template`
                   with each VALUE_SETS entry; privileges-systemd: the
                   systemd unit's user and capabilities

A block is the lines between `<!-- generated:NAME begin -->` and
`<!-- generated:NAME end -->` (scripts/blocks.py, the one block syntax). `--check` rewrites nothing and exits 1 with a
diff when a block differs from what its source gives.
"""

import argparse
import difflib
import functools
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import blocks as blocks_  # noqa: E402 (scripts/blocks.py: the one block syntax)

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "slowpath-rules.yaml"
AGENT_SRC = REPO / "agent" / "src"
CHART = REPO / "deploy" / "helm" / "slowpath"
UNIT = REPO / "deploy" / "systemd" / "slowpath.service"
INSTALL_TOOLS = REPO / "tests" / "deploy" / "install-tools.sh"
REGENERATE = "python3 docs/generate.py --bin target/release/slowpath"


@functools.cache
def export(binary):
    """`slowpath signals` of `binary`: {"signals": [...], "agent_families":
    [...]} (read once per run)."""
    out = subprocess.run([str(binary), "signals"], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def declarations(binary):
    """Every signal's declaration, in the agent's order."""
    return export(binary)["signals"]


def cell(text):
    """Text safe in one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- flags, from clap's help -------------------------------------------------

def help_text(binary, *args):
    """The long help, with no SLOWPATH_* variable set (clap shows their values)."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    res = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True, check=True, env=env)
    return res.stdout


def help_options(text):
    """[{flag, meaning, env, default}] of the Options section of clap's long
    help: an entry starts with an indented `-x`/`--name`; under it, text
    lines, a `Possible values:` list and `[env: ...]`/`[default: ...]`/
    `[possible values: ...]` lines."""
    options, in_options = [], False
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            in_options = line.strip().lower() == "options:"
            continue
        if not in_options or not line.strip():
            continue
        m = re.match(r"^ {2,6}(-\S.*)$", line)
        if m:
            options.append({"flag": m.group(1).strip(), "meaning": [], "env": "", "default": ""})
            continue
        opt, body = options[-1], line.strip()
        bracket = re.match(r"^\[(env|default|possible values): (.*)\]$", body)
        if bracket and bracket.group(1) == "env":
            opt["env"] = bracket.group(2).rstrip("=")
        elif bracket and bracket.group(1) == "default":
            opt["default"] = bracket.group(2)
        elif bracket:
            end_sentence(opt["meaning"])
            opt["meaning"].append(f"One of: {bracket.group(2)}.")
        elif body == "Possible values:":
            end_sentence(opt["meaning"])
            opt["meaning"].append("One of:")
        else:
            opt["meaning"].append(body)
    return options


def end_sentence(lines):
    if lines and not lines[-1].endswith((".", ":", ";")):
        lines[-1] += "."


def flags_table(text):
    rows = ["| flag | default | environment | meaning |", "| --- | --- | --- | --- |"]
    for opt in help_options(text):
        default = f"`{cell(opt['default'])}`" if opt["default"] else ""
        env = f"`{opt['env']}`" if opt["env"] else ""
        rows.append(f"| `{cell(opt['flag'])}` | {default} | {env} | {cell(' '.join(opt['meaning']))} |")
    return "\n".join(rows) + "\n"


# --- metric families, from the agent's export -------------------------------

def signal_module(name):
    """The file that declares a signal: its folder's mod.rs, else NAME.rs."""
    folder = AGENT_SRC / "signals" / name / "mod.rs"
    path = folder if folder.exists() else AGENT_SRC / "signals" / f"{name}.rs"
    return path.relative_to(REPO).as_posix()


def metric_families(binary):
    """{name: (type, help, file)} of every family the agent may export
    (`slowpath signals`: each signal's, then the agent's own), by name."""
    families = {}
    for d in declarations(binary):
        for f in d["families"]:
            families[f["name"]] = (f["type"], f["help"], signal_module(d["name"]))
    for f in export(binary)["agent_families"]:
        families[f["name"]] = (f["type"], f["help"], f["defined_in"])
    return dict(sorted(families.items()))


def families_table(binary):
    rows = ["| family | type | help (as the agent exports it) | defined in |", "| --- | --- | --- | --- |"]
    for name, (kind, help_, rel) in metric_families(binary).items():
        rows.append(f"| `{name}` | {kind} | {cell(help_)} | [`{rel}`](../{rel}) |")
    return "\n".join(rows) + "\n"


# --- alerts, from the rules ----------------------------------------------------

def alert_rules():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def runbook_link(url):
    """The runbook section a runbook_url points at, as a link from docs/."""
    anchor = url.split("#", 1)[1] if "#" in url else ""
    if not anchor or "{{" in anchor:
        return "[runbook](runbook.md)"
    return f"[runbook](runbook.md#{anchor})"


def alerts_table():
    rows = ["| alert | severity | for | summary | runbook |", "| --- | --- | --- | --- | --- |"]
    for rule in alert_rules():
        ann = rule.get("annotations", {})
        rows.append(f"| `{rule['alert']}` | {cell(rule.get('labels', {}).get('severity', ''))} "
                    f"| {cell(rule.get('for', '-'))} | {cell(ann.get('summary', ''))} "
                    f"| {runbook_link(ann.get('runbook_url', ''))} |")
    return "\n".join(rows) + "\n"


# --- README: the families of each case, and the alerts that read them -------------

# (case, what it shows, families): one row per signal, as the agent declares
# it (`slowpath signals`: its case, its summary, its families), in the
# agent's order, then the cases below, which take the other families by a
# regex on the name, the first that matches, the last the rest.
NOT_SIGNALS = [
    ("findings", "the agent's own diagnosis, per process", re.compile(r"slowpath_finding")),
    ("the agent itself", "probes, lost events, own cost, scrapes, HTTP, Kubernetes", re.compile(r"slowpath_")),
]


def cases_of(binary):
    """[(case, what, families)]: each declared signal's row (families: the
    names it declares), then NOT_SIGNALS (families: a regex)."""
    return [(d["case"], d["summary"], [f["name"] for f in d["families"]]) for d in declarations(binary)] \
        + NOT_SIGNALS


def recorded_list(binary):
    """Every declared signal's recorded rates, each with the counter it is
    the rate of (and the one label it keeps, if any), in the agent's order."""
    items = []
    for d in declarations(binary):
        for r in d["recorded"]:
            only = f'{{{r["only"][0]}="{r["only"][1]}"}}' if r["only"] else ""
            items.append(f"`{r['name']}` (`{r['family']}{only}`)")
    return "  for each signal: " + ", ".join(items) + ",\n"


def names_read(expr, recorded):
    """Every series name an expression reads, through recording rules."""
    seen, todo = set(), set(re.findall(r"[a-zA-Z_:][\w:]*", expr))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo |= set(re.findall(r"[a-zA-Z_:][\w:]*", recorded.get(name, "")))
    return seen


def case_of(name, cases):
    for i, (_, _, families) in enumerate(cases):
        if name in families if isinstance(families, list) else families.match(name):
            return i
    raise SystemExit(f"{name}: in no case of docs/generate.py")


def case_title(case):
    """A case's name at the start of a line: an ordinary first word
    capitalized, an identifier or an abbreviation (rt_sigprocmask, vDSO,
    THP) as it is."""
    first, _, rest = case.partition(" ")
    if re.fullmatch(r"[a-z]+(-[a-z]+)*", first):
        first = first.capitalize()
    return f"{first} {rest}".strip()


def readme_stories(binary):
    """The README's "What and why": one bullet per declared signal with a
    story, its case in bold, in the agent's order."""
    lines = []
    for d in declarations(binary):
        if d["story"]:
            lines += textwrap.wrap(f"- **{case_title(d['case'])}**: {d['story']}", width=100,
                                   subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def column_cost(column):
    """What one event of a top column costs in `CPU%`, from its declared cost."""
    cost = column["cost"]
    if isinstance(cost, dict) and "clock_read" in cost:
        gauges = cost["clock_read"]
        return (f"`{column['header']}` one clock read: `{gauges['read_seconds']}` of its clock where its reads fall "
                f"back (`{gauges['falls_back']}` 1), else `{gauges['otherwise']}`")
    if cost == "seconds":
        return f"`{column['header']}` itself (seconds per second)"
    if isinstance(cost, dict):
        return f"`{column['header']}` `{cost['gauge']}`"
    return None


def top_columns(binary):
    """docs/top.md's `CPU%` row and the rows of the signals' columns, in
    display order."""
    columns = [c for d in declarations(binary) for c in d["top"]["columns"]]
    costs = "; ".join(filter(None, map(column_cost, columns)))
    rows = ["| `CPU%` | the estimated share of one CPU the row's slow paths cost: each rate times what one such "
            "event costs on this node, as the agent measures it, plus the compaction time (`<0.1` below a tenth "
            "of a percent); the other columns are not charged | each column's rate times: " + costs + " |"]
    for c in columns:
        only = f'{{{c["only"][0]}="{c["only"][1]}"}}' if c["only"] else ""
        rows.append(f"| `{c['header']}` (`--sort {c['sort']}`) | {c['meaning']} | `{c['family']}{only}` |")
    return "\n".join(rows) + "\n"


def runbook_sections(binary):
    """docs/runbook.md's sections of the signals' alerts: each signal's
    declared `runbook` Markdown, in the agent's order."""
    return "\n".join(d["runbook"] for d in declarations(binary) if d["runbook"])


def known_source_rows(binary):
    """[(signal, row)]: every declared signal's known sources, in the
    agent's order (the order it matches them in)."""
    return [(d["name"], row) for d in declarations(binary) for row in d["sources"]]


def generic_text(text):
    """A known source's cause outside a finding: `{caller}` (a frame's
    name in the agent's findings) reads "The calling code"."""
    return text.replace("{caller}", "The calling code")


def runbook_known_sources(binary):
    """docs/runbook.md's known sources: a section (an anchor) per row, which
    the alerts' known_source links and docs/doctor.md's table name."""
    out = ""
    for signal, row in known_source_rows(binary):
        out += f"\n### {row['id']}\n\nSignal: {signal}.\n\nCause: {generic_text(row['cause'])}\n\nFix: {row['fix']}\n"
        if row["expected_gain"]:
            out += f"\nExpected gain: {row['expected_gain']}\n"
    return out + "\n"


PATTERNS = {
    "function": "`{}`",
    "function_prefix": "`{}*`",
    "function_contains": "`*{}*`",
    "module": "module `*{}*`",
    "module_is": "the `{}` executable",
}


def doctor_known_sources(binary):
    """docs/doctor.md's table of known sources: signal, row (linked to its
    runbook section, which has the cause and the fix) and the frames it
    matches, in matching order."""
    out = "\n| signal | row (cause and fix in the runbook) | frames it matches |\n| --- | --- | --- |\n"
    last = ""
    for signal, row in known_source_rows(binary):
        shown = "" if signal == last else signal
        last = signal
        frames = ", ".join(PATTERNS[p["kind"]].format(p["text"]) for p in row["frames"])
        out += f"| {shown} | [`{row['id']}`](runbook.md#{row['id']}) | {frames} |\n"
    return out + "\n"


def doctor_findings(binary):
    """docs/doctor.md's table of findings, in the agent's order."""
    rows = ["| finding | when | severity |", "| --- | --- | --- |"]
    for d in declarations(binary):
        for r in d["finding_rules"]:
            rows.append(f"| `{r['id']}` | {r['when']} | {'/'.join(r['severities'])} |")
    return "\n".join(rows) + "\n"


def callsite_kinds(binary):
    """docs/doctor.md's list of the call kinds of folded stacks."""
    kinds = [k for d in declarations(binary) for k in d["call_sites"]]
    return "".join(f"- `{k['name']}`: {k['what']}\n" for k in kinds)


def labels_table(binary):
    """docs/metrics.md's table of the signals' per-process families: their
    labels, what a count is, the hook."""
    rows = ["| metric | labels | what it counts | kernel hook |", "| --- | --- | --- | --- |"]
    for d in declarations(binary):
        for f in d["family_docs"]:
            rows.append(f"| `{f['family']}` | {f['labels']} | {f['counts']} | {f['hook']} |")
    return "\n".join(rows) + "\n"


def promql_cases(binary):
    """docs/metrics.md's PromQL block: each signal's parts, numbered."""
    parts = [part for d in declarations(binary) for part in d["promql"]]
    return "```promql\n" + "\n\n".join(f"# {n}. {part}" for n, part in enumerate(parts, 1)) + "\n```\n"


def readme_cases_table(binary):
    cases = cases_of(binary)
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    recorded = {rule["record"]: rule["expr"] for rule in rules if "record" in rule}
    families = metric_families(binary)
    alerts = [[] for _ in cases]
    for rule in alert_rules():
        read = sorted(case_of(n, cases) for n in names_read(rule["expr"], recorded) if n in families)
        case = alerts[read[0] if read else len(cases) - 1]
        # An alert split into rules per severity is named once.
        if f"`{rule['alert']}`" not in case:
            case.append(f"`{rule['alert']}`")
    rows = ["| case | what | families | alerts |", "| --- | --- | --- | --- |"]
    for i, (case, what, _) in enumerate(cases):
        names = ", ".join(f"`{n}`" for n in families if case_of(n, cases) == i)
        rows.append(f"| {case} | {what} | {names} | {', '.join(alerts[i]) or '-'} |")
    return "\n".join(rows) + "\n"


# --- privileges, from the rendered chart and the systemd unit -------------------------

# (what the column says, --set values) rendered for the privileges block.
VALUE_SETS = [
    ("defaults", []),
    ("`agent.liftMemlockLimit=false`", ["agent.liftMemlockLimit=false"]),
    ("`agent.findings.callSites=false`", ["agent.findings.callSites=false"]),
    ("both false", ["agent.liftMemlockLimit=false", "agent.findings.callSites=false"]),
    ("`agent.debugCallsites=true`, `callSites=false`",
     ["agent.debugCallsites=true", "agent.findings.callSites=false"]),
    ("`agent.readKernelAddresses=true`", ["agent.readKernelAddresses=true"]),
    ("`privileged=true`", ["privileged=true"]),
]
# Why the agent is given each capability the chart adds (from the comments of
# templates/daemonset.yaml, where the chart adds it). A capability the render
# shows without an entry here stops the generation.
WHY = {
    "CAP_BPF": "`bpf(2)` itself: create the maps and the ring buffer, load the programs (kernel 5.8+)",
    "CAP_PERFMON": "load the tracing programs (`tp_btf`, `fentry`, `raw_tp`) and let them read kernel memory "
                   "(BTF pointer walks)",
    "CAP_SYS_RESOURCE": "lift `RLIMIT_MEMLOCK`, to which Linux before 5.11 charges BPF maps and programs (the pod "
                        "inherits the container runtime's 8 MiB or 64 KiB); dropped at start, used or not "
                        "([below](#cap_sys_resource-at-start-only))",
    "CAP_SYS_PTRACE": "read other processes' `/proc/PID/maps` to symbolize their sampled stacks (findings' call "
                      "sites, `/debug/callsites`)",
    "CAP_DAC_READ_SEARCH": "open other processes' binaries through `/proc/PID/map_files`, a directory of mode 0500",
    "CAP_CHECKPOINT_RESTORE": "follow the links of `/proc/PID/map_files` (kernel 5.9+)",
    "CAP_SYSLOG": "read the timer callbacks' addresses in `/proc/kallsyms`, which the timer signal's hooks need on "
                  "5.10 to 5.12 (no `bpf_snprintf()`); it also shows the agent every kernel address",
}


def default_helm():
    """$HELM, else the pinned helm of tests/deploy/install-tools.sh (as
    deploy/render.sh finds it): the render must not depend on whichever helm
    is on PATH."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    res = subprocess.run(["bash", str(INSTALL_TOOLS)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{INSTALL_TOOLS.relative_to(REPO)} failed (give --helm): {res.stderr[-2000:]}")
    return str(Path(res.stdout.strip().splitlines()[-1]) / "bin" / "helm")


def rendered_pod(helm, sets):
    """The agent DaemonSet's pod spec and its container, as `helm template`
    renders the chart with these --set values."""
    cmd = [str(helm), "template", "slowpath", str(CHART), "--namespace", "slowpath",
           "--show-only", "templates/daemonset.yaml"]
    for value in sets:
        cmd += ["--set", value]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"helm template {' '.join(sets)}: {res.stderr}")
    spec = yaml.safe_load(res.stdout)["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "slowpath"]
    return spec, container


def cap_name(name):
    return name if name.startswith("CAP_") else f"CAP_{name}"


def privileges_table(helm):
    """Rows: what the chart sets (user, privileged, ...) and each capability
    it adds; columns: the VALUE_SETS, as rendered; the why of each
    capability from WHY."""
    columns = []
    for _, sets in VALUE_SETS:
        spec, container = rendered_pod(helm, sets)
        ctx = container.get("securityContext", {})
        caps = ctx.get("capabilities", {})
        columns.append((spec, ctx, [cap_name(c) for c in caps.get("add", [])], caps.get("drop", [])))
    added = list(dict.fromkeys(c for _, _, add, _ in columns for c in add))
    missing = [c for c in added if c not in WHY]
    if missing:
        raise SystemExit(f"the chart adds {', '.join(missing)}: say why in WHY of docs/generate.py")

    def flag(value):
        if isinstance(value, bool):
            return "yes" if value else "no"
        return "unset" if value is None else cell(value)

    rows = [
        ("runs as uid", lambda s, c, a, d: flag(c.get("runAsUser")),
         "65534 (nobody): the agent needs no file access beyond world-readable `/proc`, sysfs and cgroupfs entries"),
        ("`privileged`", lambda s, c, a, d: flag(c.get("privileged", False)),
         "the agent needs 5.8+ (its ring buffer), where the capabilities below suffice; root lets it measure "
         "its programs' in-kernel time, and loads on a distribution kernel older than 5.8 with the ring buffer "
         "backported (no `CAP_BPF` there)"),
        ("`allowPrivilegeEscalation`", lambda s, c, a, d: flag(c.get("allowPrivilegeEscalation")),
         "false sets `no_new_privs`: the runtime starts the agent with the added capabilities "
         "already permitted, so it gains nothing at exec"),
        ("`readOnlyRootFilesystem`", lambda s, c, a, d: flag(c.get("readOnlyRootFilesystem")),
         "the agent writes no file"),
        ("`seccompProfile`", lambda s, c, a, d: cell((c.get("seccompProfile") or {}).get("type", "unset")),
         "chart value `seccompProfile`"),
        ("pod `hostPID`", lambda s, c, a, d: flag(s.get("hostPID", False)), "to see every process of the node"),
        ("capabilities dropped", lambda s, c, a, d: ", ".join(d) if d else "none",
         "every capability but those added below"),
    ]
    for cap in added:
        rows.append((f"`{cap}`", lambda s, c, a, d, cap=cap: "all" if c.get("privileged") else
                     ("added" if cap in a else "-"), WHY[cap]))
    head = "| | " + " | ".join(label for label, _ in VALUE_SETS) + " | why |"
    out = [head, "|" + " --- |" * (len(VALUE_SETS) + 2)]
    for label, get, why in rows:
        out.append(f"| {label} | " + " | ".join(get(*col) for col in columns) + f" | {why} |")
    return "\n".join(out) + "\n"


def systemd_privileges_table():
    """The systemd unit's user and capability settings, as written in it."""
    settings = {}
    for line in UNIT.read_text().splitlines():
        m = re.match(r"^(\w+)=(.*)$", line)
        if m:
            settings.setdefault(m.group(1), m.group(2))
    rows = ["| setting | value |", "| --- | --- |"]
    for key in ("DynamicUser", "User", "AmbientCapabilities", "CapabilityBoundingSet", "NoNewPrivileges",
                "LimitMEMLOCK"):
        rows.append(f"| `{key}` | {cell(settings.get(key, 'unset'))} |")
    return "\n".join(rows) + "\n"


# --- blocks --------------------------------------------------------------------

def blocks(binary, helm):
    """{(page, block name): generated text}."""
    return {
        ("docs/flags.md", "flags"): lambda: flags_table(help_text(binary)),
        ("docs/flags.md", "doctor-flags"): lambda: flags_table(help_text(binary, "doctor")),
        ("docs/flags.md", "top-flags"): lambda: flags_table(help_text(binary, "top")),
        ("docs/metrics.md", "families"): lambda: families_table(binary),
        ("docs/top.md", "columns"): lambda: top_columns(binary),
        ("docs/doctor.md", "findings"): lambda: doctor_findings(binary),
        ("docs/doctor.md", "callsite-kinds"): lambda: callsite_kinds(binary),
        ("docs/doctor.md", "known-sources"): lambda: doctor_known_sources(binary),
        ("docs/runbook.md", "runbook"): lambda: runbook_sections(binary),
        ("docs/runbook.md", "known-sources"): lambda: runbook_known_sources(binary),
        ("docs/metrics.md", "labels"): lambda: labels_table(binary),
        ("docs/metrics.md", "promql"): lambda: promql_cases(binary),
        ("docs/alerts.md", "alerts"): alerts_table,
        ("docs/alerts.md", "recorded"): lambda: recorded_list(binary),
        ("README.md", "stories"): lambda: readme_stories(binary),
        ("README.md", "cases"): lambda: readme_cases_table(binary),
        ("docs/security.md", "privileges"): lambda: privileges_table(helm),
        ("docs/security.md", "privileges-systemd"): systemd_privileges_table,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 with a diff if a block is stale")
    parser.add_argument("--bin", default=os.environ.get("SLOWPATH_BIN", REPO / "target" / "release" / "slowpath"),
                        help="the agent binary whose --help gives the flags (default: $SLOWPATH_BIN, else "
                             "target/release/slowpath)")
    parser.add_argument("--helm", help="the helm that renders the chart for the privileges block (default: $HELM, "
                                       "else the pinned one of tests/deploy/install-tools.sh)")
    args = parser.parse_args()
    if not Path(args.bin).exists():
        raise SystemExit(f"{args.bin} missing: build it with cargo build --release -p slowpath")
    helm = args.helm or default_helm()
    pages, stale = {}, []
    for (page, name), generate in blocks(args.bin, helm).items():
        text = pages.setdefault(page, (REPO / page).read_text())
        pages[page] = blocks_.replace(text, name, generate(), page)
    for page, text in pages.items():
        old = (REPO / page).read_text()
        if old == text:
            continue
        stale.append(page)
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), page, page))
        else:
            (REPO / page).write_text(text)
            print(f"rewrote {page}")
    if args.check and stale:
        print(f"\nstale generated blocks in {', '.join(stale)}: regenerate with\n  {REGENERATE}\n"
              f"(after cargo build --release -p slowpath) and commit the result.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
