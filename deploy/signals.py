#!/usr/bin/env python3
"""Writes what the deploy files say about each signal from the agent's
declarations (`slowpath signals`), so that no list of the signals is kept
by hand in deploy/:

  deploy/helm/slowpath/files/signals.json
      each signal's collector name and summary, its recorded rates (the
      recording rules of templates/prometheusrule.yaml), its per-process
      alert (the template's slow-path alerts), whether it counts syscalls
      (the collectors SlowpathDispatchFloorHigh names) and its top columns
      with a cost (the estimated-CPU record's terms); the DaemonSet template
      takes the accepted collector names from it, and the fleet dashboard
      (dashboards/src/fleet.py) its rows: each recorded rate's fleet row
  deploy/helm/slowpath/files/known-sources.yaml
      each signal's known sources (id, cause, fix, expected gain), keyed by
      the known_source label the per-process alerts carry: their
      annotations read the cause and the fix from it
  deploy/helm/slowpath/values.yaml
      agent.collectors: one switch per signal, its summary as its comment;
      prometheusRule.thresholds and .for: each per-process alert's
      threshold and duration, with why as its comment
  deploy/systemd/slowpath.default
      #SLOWPATH_COLLECTOR_<NAME>=true per signal, its summary above it

The two hand-written files keep everything outside their
`generated:<block> begin` / `generated:<block> end` comment lines
(scripts/blocks.py, the one block syntax, which docs/generate.py writes
with too).
deploy/render.sh runs this before it renders the chart. --check rewrites
nothing and exits 1 naming the stale files (tests/e2e/test_helm.py).

  deploy/signals.py [--bin target/release/slowpath] [--check]
  deploy/signals.py [--bin ...] --print-signals-json
      prints what files/signals.json would hold, writing nothing: the
      dashboards' generator reads the declarations so (dashboards/generate.sh),
      beside the chart rather than from it
"""

import argparse
import difflib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import blocks  # noqa: E402 (scripts/blocks.py: the one block syntax)

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "slowpath"
SIGNALS_JSON = CHART / "files" / "signals.json"
KNOWN_SOURCES = CHART / "files" / "known-sources.yaml"
VALUES = CHART / "values.yaml"
DEFAULTS = REPO / "deploy" / "systemd" / "slowpath.default"
REGENERATE = "deploy/render.sh (or deploy/signals.py --bin target/release/slowpath)"


def declarations(binary):
    if not Path(binary).exists():
        raise SystemExit(f"{binary} missing: build it with cargo build --release (or pass --bin)")
    out = subprocess.run([str(binary), "signals"], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["signals"]


def selector(only):
    """A recorded rate's or column's label selector: `label="value"`, or ""."""
    return f'{only[0]}="{only[1]}"' if only else ""


def cost_terms(signal):
    """The signal's top columns with a cost, as the estimated-CPU record
    charges them (the agent's `EventCost`, the one cost model): kind
    clock_read (the clock's two terms, read from the counter itself: they
    need its clock label; the gauges read_seconds, falls_back and otherwise
    as declared), gauge (the recorded rate times the gauge, per node) or
    seconds (the recorded rate)."""
    recorded = {r["name"]: r for r in signal["recorded"]}
    terms = []
    for column in signal["top"]["columns"]:
        cost = column["cost"]
        if cost == "none":
            continue
        kind, detail = next(iter(cost.items())) if isinstance(cost, dict) else (cost, None)
        r = recorded[column["recorded"]]
        term = {"slow_path": column["sort"], "kind": kind, "gauge": detail if kind == "gauge" else "",
                "recorded": r["name"], "family": r["family"], "selector": selector(r["only"])}
        if kind == "clock_read":
            term.update(detail)
        terms.append(term)
    return terms


def signals_json(decls):
    doc = {
        "generated": "by deploy/render.sh from the agent's declarations (slowpath signals): do not edit",
        "signals": [{
            "name": d["name"],
            "summary": d["summary"],
            "case": d["case"],
            "recorded": [{"name": r["name"], "family": r["family"], "selector": selector(r["only"]),
                          "fleet": r["fleet"]}
                         for r in d["recorded"]],
            "cost": cost_terms(d),
            "syscalls": bool(d["syscalls"]),
            "alert": d["alert"],
        } for d in decls],
    }
    return json.dumps(doc, indent=1) + "\n"


def known_sources_yaml(decls):
    """The chart's known sources, per signal: `{caller}` (a frame's name in
    the agent's findings) reads "The calling code" in an alert."""
    def q(text):
        return json.dumps(text, ensure_ascii=False)
    out = ("# The known sources of each signal's findings (the agent's tables, agent/src/signals/),\n"
           "# keyed by the known_source label of slowpath_finding_info and of the per-process alerts.\n"
           "# Generated by deploy/render.sh from the agent's declarations (slowpath signals); do not edit.\n")
    for d in decls:
        if d["sources"]:
            out += f"{d['name']}:\n"
        for row in d["sources"]:
            out += (f"  - id: {q(row['id'])}\n"
                    f"    cause: {q(row['cause'].replace('{caller}', 'The calling code'))}\n"
                    f"    fix: {q(row['fix'])}\n"
                    f"    expected_gain: {q(row['expected_gain'] or '')}\n")
    return out


def replace_block(path, text, body, block="collectors"):
    """`text` of `path` with the lines between its generated:<block> lines
    replaced by `body` (scripts/blocks.py)."""
    return blocks.replace(text, block, body, str(path.relative_to(REPO)))


def setting(setting, indent="    "):
    """A prometheusRule setting with its why as the comment above it."""
    why = textwrap.wrap(setting["why"], width=78 - len(indent) - 2)
    return "".join(f"{indent}# {line}\n" for line in why) + f"{indent}{setting['key']}: {setting['default']}\n"


def values_yaml(decls, text):
    body = "".join(f"    # {d['summary']}\n    {d['name']}: true\n" for d in decls)
    text = replace_block(VALUES, text, body)
    alerts = [d["alert"] for d in decls if d["alert"]]
    text = replace_block(VALUES, text, "".join(setting(a["threshold"]) for a in alerts), "thresholds")
    return replace_block(VALUES, text, "".join(setting(a["for"]) for a in alerts), "for")


def defaults_file(decls, text):
    body = "".join(f"# {d['name']}: {d['summary']}\n#SLOWPATH_COLLECTOR_{d['name'].upper()}=true\n"
                   for d in decls)
    return replace_block(DEFAULTS, text, body)


def generated(decls):
    """{path: its text as the declarations give it}."""
    return {
        SIGNALS_JSON: signals_json(decls),
        KNOWN_SOURCES: known_sources_yaml(decls),
        VALUES: values_yaml(decls, VALUES.read_text()),
        DEFAULTS: defaults_file(decls, DEFAULTS.read_text()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.environ.get("SLOWPATH_BIN", REPO / "target" / "release" / "slowpath"),
                        help="the agent (default: $SLOWPATH_BIN, else target/release/slowpath)")
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a file is stale")
    parser.add_argument("--print-signals-json", action="store_true",
                        help="print files/signals.json's text from the declarations; write nothing")
    args = parser.parse_args()
    if args.print_signals_json:
        sys.stdout.write(signals_json(declarations(args.bin)))
        return
    stale = []
    for path, text in generated(declarations(args.bin)).items():
        old = path.read_text() if path.exists() else ""
        if old == text:
            continue
        rel = str(path.relative_to(REPO))
        if args.check:
            stale.append(rel)
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), rel, rel))
        else:
            path.write_text(text)
            print(f"signals.py: wrote {rel}", file=sys.stderr)
    if stale:
        print(f"\nstale: {', '.join(stale)}: regenerate with {REGENERATE}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
