#!/usr/bin/env bash
# Regenerates the plain manifests from the Helm chart with its default values:
#
#   deploy/render.sh          first writes what the chart, its values and the
#                             systemd defaults say about each signal from the
#                             agent's declarations (deploy/signals.py: runs
#                             `slowpath signals` of $SLOWPATH_BIN, else
#                             target/release/slowpath, so build it first) and
#                             the chart's values.schema.json from its values
#                             (deploy/schema.py), then
#                             deploy/kubernetes/slowpath.yaml,
#                             deploy/prometheus/slowpath-rules.yaml (the
#                             chart's PrometheusRule spec as a plain rules
#                             file, for Prometheus on Kubernetes without the
#                             operator: its alerts give kubectl commands) and
#                             deploy/prometheus/slowpath-rules-host.yaml (the
#                             same with prometheusRule.fixCommands=host, for
#                             the systemd unit, the .deb and a bare binary:
#                             the commands run on the node itself)
#   deploy/render.sh -        prints the manifests (tests/e2e/test_helm.py
#                             compares that with the committed file)
#   deploy/render.sh rules -  prints the rules file
#   deploy/render.sh rules-host -  prints the host rules file
#   deploy/render.sh rules-template   prints deploy/mixin/rules.template.json
#                             (also written by the first form)
#   deploy/render.sh grafana-alerts -  prints the Grafana alert file made from
#                             the rules (dashboards/generate.sh --alerts; that
#                             script writes the committed
#                             dashboards/provisioning/alerting/slowpath-alerts.yaml)
#
# The alerts' runbook links start with the chart's
# prometheusRule.runbookBaseURL, by default the project's public copy of
# docs/runbook.md at the tag of the chart's appVersion. To link to your own
# copy, render with another base:
#
#   RUNBOOK_BASE_URL=https://wiki.example.com/slowpath/runbook.md \
#     deploy/render.sh rules - > slowpath-rules.yaml
#
# (also for rules-host - and grafana-alerts -; the mixin takes
# _config.slowpathRunbookBaseURL).
#
# Uses the pinned helm from tests/deploy/install-tools.sh (built once into
# /var/cache/slowpath-tools; the output must not depend on whichever helm is
# on PATH), or $HELM if set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/kubernetes/slowpath.yaml}
helm=${HELM:-$("$here/../tests/deploy/install-tools.sh")/bin/helm}
# --set for the rules when RUNBOOK_BASE_URL is given, else the chart's default.
runbook_set=()
if [[ -n ${RUNBOOK_BASE_URL:-} ]]; then
  runbook_set=(--set-string "prometheusRule.runbookBaseURL=$RUNBOOK_BASE_URL")
fi

render() {
  cat <<'YAML'
# slowpath: plain Kubernetes manifests, rendered from deploy/helm/slowpath with
# its default values by deploy/render.sh. Do not edit: change the chart (or
# its values) and run deploy/render.sh.
#
#   kubectl apply -f deploy/kubernetes/slowpath.yaml
#
# The image is the released one (ghcr.io/slowpath/slowpath, tagged with the
# chart's appVersion); edit it to run an image of your own.
#
# The Namespace comes first because `kubectl apply` does not create one (helm
# users get it from `helm install --create-namespace`). The agent's pods use
# hostPID and hostPath volumes, which only the "privileged" Pod Security level
# admits: the label says so, or the pods would be rejected in clusters that
# enforce "baseline" or "restricted" by default.
apiVersion: v1
kind: Namespace
metadata:
  name: slowpath
  labels:
    pod-security.kubernetes.io/enforce: privileged
YAML
  "$helm" template slowpath "$here/helm/slowpath" --namespace slowpath
}

# The rules file: `render_rules kubernetes` (slowpath-rules.yaml) or
# `render_rules host` (slowpath-rules-host.yaml), the chart's
# prometheusRule.fixCommands, which changes only the commands in the alerts'
# annotations (tests/e2e/test_alerts.py holds the two files to that).
render_rules() {
  local mode=$1
  if [[ $mode == host ]]; then
    echo "# slowpath alert rules for Prometheus on VMs and hosts: the agent's systemd"
    echo "# unit, the .deb and a bare binary (rule_files in prometheus.yml, see"
    echo "# docs/install.md). The alerts' commands run on the node itself: sudo slowpath"
    echo "# doctor, curl of the agent's /debug/findings on localhost:9891, slowpath top,"
    echo "# journalctl -u slowpath. Rendered from the Helm chart's PrometheusRule"
    echo "# (deploy/helm/slowpath) with default thresholds and"
    echo "# prometheusRule.fixCommands=host by deploy/render.sh: the alerts, expressions,"
    echo "# labels and durations of slowpath-rules.yaml, the file for Kubernetes."
  else
    echo "# slowpath alert rules for Prometheus on Kubernetes without the Prometheus"
    echo "# Operator (with it, the chart's prometheusRule.enabled=true makes the same"
    echo "# rules a PrometheusRule). The alerts' commands are kubectl's: the doctor in the"
    echo "# agent's pod on the alert's node. For the systemd unit, the .deb or a bare"
    echo "# binary load slowpath-rules-host.yaml instead. Rendered from the Helm chart's"
    echo "# PrometheusRule (deploy/helm/slowpath) with default thresholds by"
    echo "# deploy/render.sh."
  fi
  echo "# Thresholds are justified in docs/runbook.md; to change them, set"
  echo "# prometheusRule.thresholds in the chart or edit this file."
  echo "# Runbook links start with prometheusRule.runbookBaseURL: to link to your copy,"
  echo "# RUNBOOK_BASE_URL=https://... deploy/render.sh $([[ $mode == host ]] && echo rules-host || echo rules) - (see deploy/render.sh)."
  "$helm" template slowpath "$here/helm/slowpath" --namespace slowpath \
    --set prometheusRule.enabled=true --set-string "prometheusRule.fixCommands=$mode" \
    "${runbook_set[@]}" --show-only templates/prometheusrule.yaml |
    python3 -c 'import sys, yaml; print(yaml.safe_dump(yaml.safe_load(sys.stdin)["spec"], sort_keys=False, width=100), end="")'
}

# The runbook's base URL as the chart renders it: RUNBOOK_BASE_URL, else
# prometheusRule.runbookBaseURL, else the one the chart derives from its
# appVersion (templates/_helpers.tpl, slowpath.runbookBaseURL).
runbook_base() {
  "$helm" template slowpath "$here/helm/slowpath" --namespace slowpath \
    --set prometheusRule.enabled=true "${runbook_set[@]}" --show-only templates/prometheusrule.yaml |
    python3 -c 'import sys, yaml
rules = [r for g in yaml.safe_load(sys.stdin)["spec"]["groups"] for r in g["rules"] if "alert" in r]
print(rules[0]["annotations"]["runbook_url"].split("#")[0])'
}

# The Grafana alert file, made from the rules (with their runbook links) by
# dashboards/generate.sh, which also writes the committed copy.
render_grafana_alerts() {
  render_rules kubernetes | "$(dirname "$here")/dashboards/generate.sh" --alerts -
}

# The rules with a placeholder for every setting the monitoring mixin's
# _config holds (deploy/mixin: __t_<threshold>__, __for_<duration>__,
# __runbook__, __grafana__, __cluster__, __selector__, __job__, __namespace__, __release__), as JSON: the mixin fills them in, so
# its rules come from this chart, never from a second copy. Its key
# defaultRunbookBaseURL is the chart's default base (runbook_base), the
# mixin's default _config.slowpathRunbookBaseURL.
render_rules_template() {
  local sets
  sets=$(python3 - "$here/helm/slowpath/values.yaml" <<'PY'
import sys, yaml
rule = yaml.safe_load(open(sys.argv[1]))["prometheusRule"]
sets = [f"prometheusRule.thresholds.{k}=__t_{k}__" for k in rule["thresholds"]]
sets += [f"prometheusRule.for.{k}=__for_{k}__" for k in rule["for"]]
sets += ["prometheusRule.runbookBaseURL=__runbook__", "prometheusRule.grafanaURL=__grafana__",
         "prometheusRule.clusterLabel=__cluster__",
         "prometheusRule.selector=__selector__",
         "prometheusRule.jobSelector=__job__"]
print(",".join(sets))
PY
  )
  # The release and namespace the alerts' kubectl commands name (the mixin's
  # rules are Kubernetes', prometheusRule.fixCommands=kubernetes): Helm wants
  # DNS names for both, so these stand in and become __release__ and
  # __namespace__ below. The placeholders are no values values.schema.json
  # admits (numbers, durations): not checked against it.
  "$helm" template xreleasex "$here/helm/slowpath" --namespace xnamespacex --skip-schema-validation \
    --set prometheusRule.enabled=true --set-string prometheusRule.fixCommands=kubernetes \
    --set-string "$sets" --show-only templates/prometheusrule.yaml |
    python3 -c 'import json, sys, yaml
text = json.dumps({"defaultRunbookBaseURL": sys.argv[1], **yaml.safe_load(sys.stdin)["spec"]}, indent=1)
print(text.replace("xreleasex", "__release__").replace("xnamespacex", "__namespace__"))' \
      "$(runbook_base)"
}

if [[ $out == rules ]]; then
  render_rules kubernetes
  exit 0
fi
if [[ $out == rules-host ]]; then
  render_rules host
  exit 0
fi
if [[ $out == rules-template ]]; then
  render_rules_template
  exit 0
fi
if [[ $out == grafana-alerts ]]; then
  render_grafana_alerts
  exit 0
fi
if [[ $out == - ]]; then
  render
else
  python3 "$here/signals.py"
  python3 "$here/schema.py"
  tmp=$(mktemp "$out.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  render >"$tmp"
  chmod 644 "$tmp"
  mv "$tmp" "$out"
  trap - EXIT
  echo "render.sh: wrote $out" >&2
  mkdir -p "$here/prometheus"
  render_rules kubernetes >"$here/prometheus/slowpath-rules.yaml"
  echo "render.sh: wrote $here/prometheus/slowpath-rules.yaml" >&2
  render_rules host >"$here/prometheus/slowpath-rules-host.yaml"
  echo "render.sh: wrote $here/prometheus/slowpath-rules-host.yaml" >&2
  render_rules_template >"$here/mixin/rules.template.json"
  echo "render.sh: wrote $here/mixin/rules.template.json" >&2
  echo "render.sh: now run dashboards/generate.sh (the dashboards and the Grafana alerts read these rules)" >&2
fi
