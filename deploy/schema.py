#!/usr/bin/env python3
"""Writes the Helm chart's values.schema.json (JSON Schema draft-07, which
Helm 3 checks the merged values against on install, upgrade, template and
lint) from its values.yaml, so that the schema cannot drift from the values:

  deploy/schema.py                  writes deploy/helm/slowpath/values.schema.json
  deploy/schema.py -                prints it (tests/e2e/test_helm_schema.py
                                    compares that with the committed file)
  deploy/schema.py --values FILE -  the schema of another values file

deploy/render.sh runs it after deploy/signals.py has rewritten the generated
blocks of values.yaml (a signal added there adds its keys here) and before it
renders the chart, which the schema then checks.

What is inferred from values.yaml, for every key:
  - the key itself: every map is a closed object ("additionalProperties":
    false), so a misspelt key is an error instead of a setting ignored;
  - the type from the default: true/false boolean; a whole number an integer
    of at least 0; a fraction a number of at least 0 (or a string of one:
    `--set x=0.5` gives helm a string); a string that is a duration (5m, 30s,
    1h30m) a string of that pattern, any other string a string; a list an
    array, an empty map {} a free-form object;
  - the description: the comment lines just above the key (up to a blank
    line or a `generated:` marker), its first sentences; a key without one
    takes EXCEPTIONS' description, else its parent's.
What it cannot know is EXCEPTIONS below: free-form maps and lists (their
content is Kubernetes' or the user's), enums, patterns, bounds, integers that
are numbers. Each pattern there must name a key of values.yaml, or the script
fails (so that the table cannot rot), but FORWARD's.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "slowpath"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"

# Go and Prometheus durations and the agent's (humantime): 30s, 5m, 1h30m, 500ms.
DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
# A non-negative decimal (thresholds; `--set` passes a fraction as a string).
NUMERIC = r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$"
STRING_MAP = {"type": "string"}  # Kubernetes' labels and annotations: map[string]string
OBJECT = {"type": "object"}

# Keys of values.yaml (dotted; * is any one key) and what inference cannot
# know about them:
#   free         free-form: Kubernetes' or the user's content, not descended
#   values       (free maps) the schema of every value
#   items        (lists) the schema of every item
#   type, enum, pattern, minimum, maximum, nullable: as in JSON Schema
#   number       whole-number defaults here are numbers (thresholds)
#   template     the chart's template checks the names and types itself with
#                a message that names the accepted ones: listed, unchecked
#   extra        properties values.yaml leaves unset
#   schema       further JSON Schema keywords, as they are
#   description  for a key without a comment above it (or a better one)
EXCEPTIONS = {
    "image": {"description": "The agent's image."},
    "image.digest": {"pattern": r"^([a-z0-9]+([+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+)?$"},
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"],
                         "description": "The container's imagePullPolicy."},
    "imagePullSecrets": {"free": True, "items": OBJECT,
                         "description": "Secrets to pull the image with (Kubernetes LocalObjectReferences, "
                                        "{name: ...})."},
    "nameOverride": {"description": "Replaces the chart's name in the objects' names."},
    "fullnameOverride": {"description": "The objects' full name, instead of release-chart."},
    "privileged": {"description": "true: run the agent as root in a privileged container (every capability) "
                                  "instead of uid 65534 with the capabilities the other values add "
                                  "(docs/security.md)."},
    "seccompProfile": {
        "type": "object", "nullable": True,
        "extra": {"localhostProfile": {"type": "string", "minLength": 1,
                                       "description": "With type Localhost: the profile's file, relative to the "
                                                      "kubelet's seccomp directory."}},
        "schema": {"required": ["type"],
                   "if": {"properties": {"type": {"const": "Localhost"}}},
                   "then": {"required": ["localhostProfile"]}},
    },
    "seccompProfile.type": {"enum": ["RuntimeDefault", "Unconfined", "Localhost"],
                            "description": "RuntimeDefault (the container runtime's profile), Unconfined, or "
                                           "Localhost (localhostProfile, a profile of yours that allows bpf)."},
    "agent.logLevel": {"enum": ["error", "warn", "info", "debug", "trace"]},
    "agent.maxSeries": {"minimum": 1, "maximum": 10_000_000},
    "agent.maxCommsPerCgroup": {"minimum": 1, "maximum": 1_000_000},
    "agent.maxProcesses": {"minimum": 64, "maximum": 4_194_304},
    "agent.liftMemlockLimit": {"description": "Add CAP_SYS_RESOURCE, with which the agent lifts the "
                                              "locked-memory limit at start on Linux before 5.11 (which charges "
                                              "its kernel tables to it), then drops it. Ignored with "
                                              "privileged: true."},
    "agent.collectors": {"template": "templates/daemonset.yaml refuses an unknown collector naming the known "
                                     "ones, and a value that is not true or false"},
    "agent.findings.window": {"type": ["string", "integer"], "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$",
                              "minimum": 0, "maximum": 0},
    "agent.findings.max": {"minimum": 1, "maximum": 10_000},
    "extraContainers": {"free": True, "items": OBJECT},
    "extraArgs": {"free": True, "items": {"type": "string"}},
    "extraEnv": {"free": True, "items": {"type": "object", "required": ["name"]}},
    "extraVolumes": {"free": True, "items": OBJECT},
    "extraVolumeMounts": {"free": True, "items": OBJECT,
                          "description": "Extra volumeMounts of the agent's container (of extraVolumes)."},
    "serviceAccount": {"description": "The agent's ServiceAccount (its token watches the node's pods)."},
    "serviceAccount.create": {"description": "Create the agent's ServiceAccount."},
    "serviceAccount.annotations": {"free": True, "values": STRING_MAP,
                                   "description": "Annotations of the ServiceAccount."},
    "rbac.create": {"description": "Create the ClusterRole and its binding (get/list/watch pods)."},
    "resources": {"free": True, "description": "The agent container's resource requests and limits "
                                               "(Kubernetes ResourceRequirements)."},
    "tolerations": {"free": True, "items": OBJECT},
    "nodeSelector": {"free": True, "values": STRING_MAP,
                     "description": "The pod's nodeSelector."},
    "affinity": {"free": True, "description": "The pod's affinity (Kubernetes Affinity)."},
    "podAnnotations": {"free": True, "values": STRING_MAP, "description": "Annotations of the agent's pods."},
    "podLabels": {"free": True, "values": STRING_MAP, "description": "Extra labels of the agent's pods."},
    "terminationGracePeriodSeconds": {"minimum": 0},
    "updateStrategy.maxUnavailable": {"type": ["integer", "string"], "pattern": r"^([1-9][0-9]?|100)%$",
                                      "minimum": 1},
    "service.port": {"minimum": 1, "maximum": 65535},
    "service.annotations": {"free": True, "values": STRING_MAP, "description": "Annotations of the Service."},
    "serviceMonitor.enabled": {"description": "Create a ServiceMonitor (Prometheus operator)."},
    "podMonitor": {"description": "A PodMonitor (Prometheus operator), instead of the ServiceMonitor: as "
                                  "serviceMonitor."},
    "podMonitor.enabled": {"description": "Create a PodMonitor (Prometheus operator)."},
    "*Monitor.labels": {"free": True, "values": STRING_MAP,
                        "description": "Labels of the monitor: must match your Prometheus' "
                                       "serviceMonitorSelector / podMonitorSelector."},
    "*Monitor.interval": {"description": "Scrape interval."},
    "*Monitor.scrapeTimeout": {"description": "Scrape timeout."},
    "*Monitor.scheme": {"enum": ["", "http", "https", "HTTP", "HTTPS"],
                        "description": "http or https; empty: https when webConfig.tls, else http."},
    "*Monitor.tlsConfig": {"free": True, "description": "The operator's SafeTLSConfig, e.g. {ca: {secret: "
                                                        "{name: slowpath-ca, key: ca.crt}}, serverName: slowpath}."},
    "*Monitor.basicAuth": {"free": True, "description": "The operator's BasicAuth (username and password "
                                                        "Secret keys)."},
    "*Monitor.bearerTokenFile": {"description": "A bearer token file of Prometheus' (kube-rbac-proxy), e.g. "
                                                "/var/run/secrets/kubernetes.io/serviceaccount/token."},
    "*Monitor.relabelings": {"free": True, "items": OBJECT,
                             "description": "Extra relabelings (the instance label is already set to the node name)."},
    "*Monitor.metricRelabelings": {"free": True, "items": OBJECT,
                                   "description": "Metric relabelings (the operator's RelabelConfigs)."},
    "prometheusRule": {"description": "The PrometheusRule (Prometheus operator): the recording rules and the "
                                      "alerts (docs/alerts.md)."},
    "prometheusRule.enabled": {"description": "Create the PrometheusRule (recording rules and alerts)."},
    "prometheusRule.labels": {"free": True, "values": STRING_MAP,
                              "description": "Labels of the PrometheusRule: must match your Prometheus' "
                                             "ruleSelector."},
    "prometheusRule.additionalLabels": {"free": True, "values": STRING_MAP},
    "prometheusRule.fixCommands": {"enum": ["kubernetes", "host"]},
    "prometheusRule.thresholds.*": {"number": True},
    "prometheusRule.thresholds.minThpFaultsPerSecond": {
        "description": "THP faults per second on a node below which thpFallbackRatio is not judged."},
    "grafanaDashboards.enabled": {"description": "Create the dashboards' ConfigMaps for Grafana's sidecar."},
    "grafanaDashboards.labels": {"free": True, "values": STRING_MAP},
    "grafanaDashboards.annotations": {"free": True, "values": STRING_MAP},
}
# Keys EXCEPTIONS may name before values.yaml has them (being added).
FORWARD = {"prometheusRule.fixCommands"}
# Helm gives a subchart its parent's global values: allowed, unused.
GLOBAL = {"type": "object", "description": "Helm's global values (of a parent chart); the chart reads none."}

MARKER = re.compile(r"^\s*#\s*generated:\S+ (begin|end)\b")


class Fail(Exception):
    pass


def matches(pattern, path):
    """Whether dotted `pattern` (* a whole key, or a key's part:
    *Monitor) names the key path `path` (a tuple)."""
    parts = pattern.split(".")
    return len(parts) == len(path) and all(
        re.fullmatch(re.escape(p).replace(r"\*", "[^.]*"), k) for p, k in zip(parts, path))


def exceptions_of(path, used):
    """The merged EXCEPTIONS entries naming `path` (wildcards first, the
    exact key last), each pattern recorded in `used`."""
    entry = {}
    for pattern in sorted(EXCEPTIONS, key=lambda p: ("*" not in p, p)):
        if matches(pattern, path):
            used.add(pattern)
            entry.update(EXCEPTIONS[pattern])
    return entry


def comment_above(lines, line):
    """The comment lines just above line number `line` (0-based), as text:
    up to a blank or non-comment line or a generated: marker; indented
    examples (`#   key: value`) left out."""
    found = []
    for text in reversed(lines[:line]):
        stripped = text.strip()
        if not stripped.startswith("#") or MARKER.match(text):
            break
        found.append(stripped[1:])
    found.reverse()
    prose = [t[1:] if t.startswith(" ") else t for t in found]
    return " ".join(t.strip() for t in prose if t.strip() and not t.startswith("  "))


def short(text):
    """The first sentences of a comment, at least 60 characters of it
    where it has them."""
    pieces = re.split(r"(?<=[a-z0-9)\"'`][.!?])\s+", text)
    sentences = []
    for piece in pieces:
        if sentences and re.search(r"\b(e\.g|i\.e|etc|vs)\.$", sentences[-1]):
            sentences[-1] += " " + piece
        else:
            sentences.append(piece)
    out = ""
    for sentence in sentences:
        out = f"{out} {sentence}".strip()
        if len(out) >= 60:
            break
    return re.sub(r",?\s*(e\.g\.|for example|:)$", "", out).strip()


def scalar_schema(path, value, entry):
    if isinstance(value, bool):
        schema = {"type": "boolean"}
    elif isinstance(value, int) and not entry.get("number"):
        schema = {"type": "integer", "minimum": 0}
    elif isinstance(value, (int, float)):
        schema = {"type": ["number", "string"], "pattern": NUMERIC, "minimum": 0}
    elif isinstance(value, str):
        schema = {"type": "string"}
        if re.fullmatch(DURATION, value):
            schema["pattern"] = DURATION
    elif value is None:
        schema = {}
    else:
        raise Fail(f"{'.'.join(path)}: a default of {type(value).__name__} is no value the script knows")
    return schema


def schema_of(path, value, node, lines, used, comment, inherited):
    """The schema of the key `path` with default `value` (`node`: its YAML
    node, for the comments above its keys; `comment`: the one above it;
    `inherited`: its parent's description)."""
    entry = exceptions_of(path, used) if path else {}
    description = entry.get("description") or comment or inherited
    if isinstance(value, dict) and not entry.get("free") and value:
        keys = {k.value: (k, v) for k, v in node.value}
        props = {}
        for key, sub in value.items():
            key_node, sub_node = keys[key]
            own = short(comment_above(lines, key_node.start_mark.line))
            props[key] = schema_of((*path, key), sub, sub_node, lines, used, own, description)
        for key, extra in entry.get("extra", {}).items():
            props[key] = extra
        schema = {"type": "object", "properties": props}
        if entry.get("template"):
            schema["$comment"] = f"Not checked here: {entry['template']}."
            for prop in props.values():
                for keyword in ("type", "pattern", "minimum", "maximum", "enum"):
                    prop.pop(keyword, None)
        else:
            schema["additionalProperties"] = False
    elif isinstance(value, dict):
        schema = {"type": "object"}
        if "values" in entry:
            schema["additionalProperties"] = entry["values"]
    elif isinstance(value, list):
        schema = {"type": "array"}
        if "items" in entry:
            schema["items"] = entry["items"]
    else:
        if entry.get("free"):
            raise Fail(f"{'.'.join(path)}: EXCEPTIONS calls it free-form, but its default is {value!r}")
        schema = scalar_schema(path, value, entry)
    for keyword in ("type", "enum", "pattern", "minimum", "maximum"):
        if keyword in entry:
            schema[keyword] = entry[keyword]
    if "enum" in entry:
        schema.pop("type", None)
        if value not in entry["enum"]:
            raise Fail(f"{'.'.join(path)}: the default {value!r} is not one of EXCEPTIONS' enum {entry['enum']}")
    if entry.get("nullable"):
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        schema["type"] = [*types, "null"]
    schema.update(entry.get("schema", {}))
    if path:
        if not description:
            print(f"schema.py: warning: {'.'.join(path)} has no description: write a comment above it",
                  file=sys.stderr)
        schema["description"] = description or ""
    return schema


def build(values_path):
    text = Path(values_path).read_text()
    lines = text.splitlines()
    values = yaml.safe_load(text)
    node = yaml.compose(text)
    used = set()
    schema = schema_of((), values, node, lines, used, None, None)
    unused = sorted(set(EXCEPTIONS) - used - FORWARD)
    if unused:
        raise Fail(f"EXCEPTIONS names keys {values_path} does not have: {', '.join(unused)} "
                   "(renamed or removed? change deploy/schema.py's table)")
    schema["properties"]["global"] = GLOBAL
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": "Generated by deploy/schema.py from values.yaml (deploy/render.sh runs it): do not edit.",
        "title": "Values of the slowpath Helm chart",
        **schema,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default=str(SCHEMA), help="the file to write, - for stdout")
    parser.add_argument("--values", default=str(VALUES), help="the values file (default: the chart's)")
    args = parser.parse_args()
    try:
        schema = build(args.values)
    except Fail as e:
        sys.exit(f"deploy/schema.py: {e}")
    text = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
        print(f"schema.py: wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
