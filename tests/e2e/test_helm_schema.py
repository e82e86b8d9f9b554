"""The Helm chart's values schema (deploy/helm/slowpath/values.schema.json),
checked with the real helm, without a cluster:

- the committed schema is what deploy/schema.py makes of values.yaml now
  (deploy/render.sh runs it), and the script infers a new key, fails on a
  stale entry of its exceptions table and tolerates the forward-declared one;
- the defaults pass `helm template` and `helm lint --strict`;
- a misspelt key, at the top or nested, a wrong type, a bad enum or pattern
  fail both with the schema's message (Helm ignored them silently before);
  what `--set` gives as a string (a fraction, "0") still passes;
- every key of values.yaml has a property in the schema, with a description;
- the values the other tests, the docs and the agent's hints pass: every
  `KEY=VALUE` of the chart's keys they name (per line, as one `helm
  template`), the value sets of test_helm.py and the docs' values blocks.

The pinned helm comes from tests/deploy/install-tools.sh (built by
scripts/setup.sh --test), as in test_helm.py.
"""

import json
import re
import subprocess
import sys

import pytest
import yaml

import test_helm as chart_tests  # its value sets; a module, so not collected twice
from helpers.paths import REPO
from helpers.tools import tools_cache

pytestmark = pytest.mark.tier("full")

CHART = REPO / "deploy" / "helm" / "slowpath"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"
SCRIPT = REPO / "deploy" / "schema.py"
SCHEMA_ERROR = "values don't meet the specifications of the schema"

# Where other files name chart values (KEY=VALUE, per line): the tests, the
# docs, the chart's notes and the agent's hints. This module is left out (its
# values are refused on purpose), and so are the values below, which their
# tests give to see them refused.
SCANNED = ["tests/**/*.py", "docs/*.md", "docs/*.py", "README.md", "deploy/helm/slowpath/templates/NOTES.txt",
           "agent/src/**/*.rs"]
REFUSED_ON_PURPOSE = {("prometheusRule.fixCommands", "vm")}  # test_alerts.py


@pytest.fixture(scope="session")
def helm():
    path = tools_cache() / "bin" / "helm"
    assert path.exists(), f"install-tools.sh did not provide {path}"
    return path


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


def template(helm, *args):
    return run([helm, "template", "slowpath", CHART, "--namespace", "slowpath", *args])


def lint(helm, *args):
    return run([helm, "lint", "--strict", CHART, "--namespace", "slowpath", *args])


def schema_py(*args):
    return run([sys.executable, SCRIPT, *args])


# ---------------------------------------------------------------- generated


def test_the_schema_is_what_schema_py_makes_of_values_yaml():
    res = schema_py("-")
    assert res.returncode == 0, res.stderr
    assert res.stdout == SCHEMA.read_text(), \
        "deploy/helm/slowpath/values.schema.json is stale: run deploy/schema.py (or deploy/render.sh)"
    assert res.stdout.endswith("}\n")
    assert json.loads(res.stdout)["$schema"] == "http://json-schema.org/draft-07/schema#"


def test_schema_py_infers_new_keys_without_a_change(tmp_path):
    """A key added to values.yaml (a signal's generated threshold, a switch,
    a duration) gets its type from its default and its description from the
    comment above it."""
    text = VALUES.read_text()
    text = text.replace("\nagent:\n", "\nagent:\n  # A new switch.\n  newSwitch: false\n"
                                      "  # A new period.\n  newPeriod: 30s\n  newCount: 3\n", 1)
    text = text.replace("\n  thresholds:\n", "\n  thresholds:\n    # A new threshold, per process.\n"
                                             "    newPerProcess: 500\n", 1)
    path = tmp_path / "values.yaml"
    path.write_text(text)
    res = schema_py("--values", path, "-")
    assert res.returncode == 0, res.stderr
    props = json.loads(res.stdout)["properties"]
    agent = props["agent"]["properties"]
    assert agent["newSwitch"] == {"type": "boolean", "description": "A new switch."}
    assert agent["newPeriod"]["type"] == "string" and re.fullmatch(agent["newPeriod"]["pattern"], "1h30m")
    assert agent["newCount"]["type"] == "integer" and agent["newCount"]["description"]  # its parent's
    threshold = props["prometheusRule"]["properties"]["thresholds"]["properties"]["newPerProcess"]
    assert "number" in threshold["type"] and threshold["description"] == "A new threshold, per process."


def test_schema_py_fails_on_a_stale_exception_but_the_forward_declared_one(tmp_path):
    values = yaml.safe_load(VALUES.read_text())
    gone = tmp_path / "gone.yaml"
    del values["agent"]["maxSeries"]
    values["prometheusRule"].pop("fixCommands", None)
    gone.write_text(yaml.safe_dump(values))
    res = schema_py("--values", gone, "-")
    assert res.returncode != 0 and "agent.maxSeries" in res.stderr, res.stderr
    assert "fixCommands" not in res.stderr, res.stderr
    del values["agent"]["maxProcesses"]
    values["agent"]["maxSeries"] = 10000
    values["agent"]["maxProcesses"] = 16384
    absent = tmp_path / "absent.yaml"
    absent.write_text(yaml.safe_dump(values))
    res = schema_py("--values", absent, "-")
    assert res.returncode == 0, res.stderr
    assert "fixCommands" not in json.loads(res.stdout)["properties"]["prometheusRule"]["properties"]


# ---------------------------------------------------------------- helm


def test_the_defaults_pass_template_and_lint(helm):
    res = template(helm)
    assert res.returncode == 0, res.stderr
    res = lint(helm)
    assert res.returncode == 0 and "0 chart(s) failed" in res.stdout, res.stdout + res.stderr
    assert "[ERROR]" not in res.stdout and "[WARNING]" not in res.stdout, res.stdout


REFUSED = {
    "misspelt top-level key": (["--set", "serviceMonitr.enabled=true"],
                               "at '': additional properties 'serviceMonitr' not allowed"),
    "misspelt nested key": (["--set", "prometheusRule.thresholds.ownCpus=1"],
                            "at '/prometheusRule/thresholds': additional properties 'ownCpus' not allowed"),
    "0.1.0's own-cost threshold, now ownCpuShareOfNode": (
        ["--set", "prometheusRule.thresholds.ownCpu=0.01"],
        "at '/prometheusRule/thresholds': additional properties 'ownCpu' not allowed"),
    "misspelt deep key": (["--set", "agent.findings.windw=1m"],
                          "at '/agent/findings': additional properties 'windw' not allowed"),
    "a word for a count": (["--set", "agent.maxSeries=many"], "at '/agent/maxSeries': got string, want integer"),
    "a string for a boolean": (["--set-string", "agent.pidLabel=yes"],
                               "at '/agent/pidLabel': got string, want boolean"),
    "a fraction for a count": (["--set", "agent.maxSeries=1.5"], "at '/agent/maxSeries': got string, want integer"),
    "a count below the agent's minimum": (["--set", "agent.maxProcesses=32"], "at '/agent/maxProcesses': minimum"),
    "a log level": (["--set", "agent.logLevel=verbose"],
                    "at '/agent/logLevel': value must be one of 'error', 'warn', 'info', 'debug', 'trace'"),
    "a seccomp profile type": (["--set", "seccompProfile.type=unconfined"], "at '/seccompProfile/type'"),
    "Localhost without its profile": (["--set", "seccompProfile.type=Localhost"],
                                      "at '/seccompProfile': missing property 'localhostProfile'"),
    "a duration": (["--set", "agent.retiredSeriesGrace=5min"], "at '/agent/retiredSeriesGrace': '5min' does not match"),
    "an alert's for": (["--set", "prometheusRule.for.timerLoop=15"], "at '/prometheusRule/for/timerLoop'"),
    "a threshold": (["--set", "prometheusRule.thresholds.thpFallbackRatio=half"],
                    "at '/prometheusRule/thresholds/thpFallbackRatio': 'half' does not match"),
    "a port": (["--set", "service.port=70000"], "at '/service/port': maximum"),
    "a label value that is no string": (["--set", "podLabels.team=1"], "at '/podLabels/team': got number, want string"),
    "a list for a map": (["--set", "nodeSelector={a,b}"], "at '/nodeSelector': got array, want object"),
}


@pytest.mark.parametrize("command", [template, lint], ids=["template", "lint"])
@pytest.mark.parametrize("case", REFUSED)
def test_a_wrong_value_fails_with_the_schemas_message(helm, command, case):
    args, message = REFUSED[case]
    res = command(helm, *args)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert message in out, out


def test_an_unknown_collector_fails_with_the_templates_message(helm):
    """agent.collectors is the one map the schema leaves open: the DaemonSet
    template refuses an unknown name listing the known ones (test_helm.py
    holds its messages), a better message than the schema's."""
    collectors = json.loads(SCHEMA.read_text())["properties"]["agent"]["properties"]["collectors"]
    assert collectors.get("additionalProperties") is not False
    assert set(collectors["properties"]) == set(yaml.safe_load(VALUES.read_text())["agent"]["collectors"])
    res = template(helm, "--set", "agent.collectors.clok=false")
    assert res.returncode != 0 and "agent.collectors.clok: no such collector (clock, " in res.stderr, res.stderr


ACCEPTED = {
    "a fraction from --set (a string)": ["--set", "prometheusRule.thresholds.thpFallbackRatio=0.7"],
    "a whole number for a fraction": ["--set", "prometheusRule.thresholds.thpFallbackRatio=1"],
    "findings off, 0 from --set": ["--set", "agent.findings.window=0"],
    "findings off, \"0\"": ["--set-string", "agent.findings.window=0"],
    "a compound duration": ["--set", "agent.retiredSeriesGrace=1h30m"],
    "maxUnavailable as a count": ["--set", "updateStrategy.maxUnavailable=2"],
    "a Localhost profile": ["--set", "seccompProfile.type=Localhost",
                            "--set", "seccompProfile.localhostProfile=p.json"],
    "no seccomp profile": ["--set", "seccompProfile=null"],
    "a free-form map": ["--set", "affinity.nodeAffinity.x=1", "--set", "resources.limits.cpu=1"],
    "a parent chart's globals": ["--set", "global.imageRegistry=example.com"],
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_values_the_schema_accepts(helm, case):
    res = template(helm, *ACCEPTED[case])
    assert res.returncode == 0, res.stderr


# ---------------------------------------------------------------- coverage


def leaves(node, path=()):
    """The key paths of values.yaml down to its scalars, lists and empty maps."""
    if isinstance(node, dict) and node:
        for key, sub in node.items():
            yield from leaves(sub, (*path, key))
    else:
        yield path


def uncovered(schema, path):
    """Why the schema has no property for `path`, or None: it has one, or
    the path is inside a free-form map (additionalProperties not false)."""
    node = schema
    for i, key in enumerate(path):
        props = node.get("properties", {})
        if key in props:
            node = props[key]
        elif node.get("type") in ("object", ["object", "null"]) and node.get("additionalProperties") is not False:
            return None
        else:
            return f"{'.'.join(path)}: no property {key!r} at {'.'.join(path[:i]) or 'the top'}"
    return None


def test_every_value_has_a_schema_property_with_a_description():
    schema = json.loads(SCHEMA.read_text())
    values = yaml.safe_load(VALUES.read_text())
    missing = [why for path in leaves(values) if (why := uncovered(schema, path))]
    assert not missing, "values.yaml keys without a schema property (run deploy/schema.py):\n" + "\n".join(missing)
    undescribed = []

    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            if not sub.get("description"):
                undescribed.append(".".join((*path, key)))
            walk(sub, (*path, key))
    walk(schema, ())
    assert not undescribed, undescribed
    assert schema["additionalProperties"] is False


# ---------------------------------------------------------------- the values others use


def named_values():
    """{(file, line): [KEY=VALUE, ...]}: the chart values each line of the
    scanned files names, a `--set KEY=` of any key or a dotted key under a
    top-level map of values.yaml anywhere; f-string and shell fields become
    a word, a sentence's trailing punctuation goes."""
    top = yaml.safe_load(VALUES.read_text())
    alternatives = lambda keys: "|".join(sorted(map(re.escape, keys), key=len, reverse=True))  # noqa: E731
    keys, maps = alternatives(top), alternatives(k for k, v in top.items() if isinstance(v, dict))
    value = r"[^\s\"'`,)\]\\]*"
    pattern = re.compile(rf"(?:--set(?:-string)?[ =]\"?|\"--set(?:-string)?\",\s*f?\")(?P<a>(?:{keys})(?:\.[\w{{}}]+)*)"
                         rf"=(?P<av>{value})|(?<![\w.$-])(?P<b>(?:{maps})\.[\w.{{}}]+)=(?P<bv>{value})")
    found = {}
    me = REPO / "tests" / "e2e" / "test_helm_schema.py"
    for glob in SCANNED:
        for path in sorted(REPO.glob(glob)):
            if path == me or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                sets = []
                for m in pattern.finditer(line):
                    key, val = (m["a"], m["av"]) if m["a"] else (m["b"], m["bv"])
                    if "{" in key or (key, val) in REFUSED_ON_PURPOSE:
                        continue
                    val = re.sub(r"[;:.,]+$", "", re.sub(r"\{[^}]*\}|\$\w+", "x", val))
                    sets.append(f"{key}={val}")
                if sets:
                    found[(path.relative_to(REPO).as_posix(), number)] = sets
    return found


def test_the_values_other_files_name_pass_the_schema(helm):
    found = named_values()
    assert len(found) >= 20, found  # the scan still finds them
    where = {}  # each distinct line's values rendered once
    for (path, number), sets in found.items():
        where.setdefault(tuple(sets), []).append(f"{path}:{number}")
    refused = []
    for sets, lines in where.items():
        res = template(helm, *[arg for kv in sets for arg in ("--set", kv)])
        if SCHEMA_ERROR in res.stderr:
            refused.append(f"{', '.join(lines)}: {' '.join(sets)}\n{res.stderr.strip()}")
    assert not refused, "\n".join(refused)


def docs_values_blocks():
    """The ```yaml blocks of README.md and docs/ that are chart values (only
    top-level keys of values.yaml)."""
    top = set(yaml.safe_load(VALUES.read_text()))
    blocks = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for m in re.finditer(r"^```ya?ml\n(.*?)^```", page.read_text(), re.S | re.M):
            try:
                block = yaml.safe_load(m.group(1))
            except yaml.YAMLError:
                continue
            if isinstance(block, dict) and block and set(block) <= top:
                blocks.append((page.relative_to(REPO).as_posix(), block))
    return blocks


def test_the_value_sets_of_the_tests_and_docs_pass_the_schema(helm, tmp_path):
    sets = [(f"test_helm.py {name}", values) for name, values in chart_tests.VALUE_SETS.items()]
    sets += docs_values_blocks()
    assert any(name.startswith("docs/security.md") for name, _ in sets)  # the kube-rbac-proxy values
    refused = []
    for i, (name, values) in enumerate(sets):
        path = tmp_path / f"values-{i}.yaml"
        path.write_text(yaml.safe_dump(values))
        res = template(helm, "-f", path)
        if SCHEMA_ERROR in res.stderr:
            refused.append(f"{name}: {res.stderr.strip()}")
    assert not refused, "\n".join(refused)
