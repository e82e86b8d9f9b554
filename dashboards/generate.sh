#!/usr/bin/env bash
# Regenerates the Grafana dashboards (dashboards/*.json) from dashboards/src/
# with the pinned grafana-foundation-sdk (dashboards/requirements.txt), in a
# virtualenv cached outside the repository.
#
#   dashboards/generate.sh            rewrite dashboards/*.json, and their copies in
#                                     the Helm chart (deploy/helm/slowpath/files/dashboards/,
#                                     which grafanaDashboards.enabled turns into ConfigMaps:
#                                     Helm reads no file outside the chart's directory)
#                                     and the Grafana alert rules made from
#                                     deploy/prometheus/slowpath-rules.yaml (run
#                                     deploy/render.sh first) into
#                                     provisioning/alerting/slowpath-alerts.yaml
#   dashboards/generate.sh OUTDIR     write them all to OUTDIR instead (tests compare)
#   dashboards/generate.sh --alerts RULES   print the Grafana alert rules made from the
#                                     Prometheus rules file RULES (- for stdin:
#                                     deploy/render.sh grafana-alerts - uses it)
#   dashboards/generate.sh --setup    only install the virtualenv (scripts/setup.sh --test)
#   dashboards/generate.sh --check    install nothing: exit 3 unless the virtualenv is
#                                     there with the pinned requirements (the tests)
#
# The signals' rows, variables and alerts come from the agent's declarations:
# `slowpath signals` of $SLOWPATH_BIN (default target/release/slowpath: build it
# first), in the form deploy/signals.py gives the chart (--print-signals-json),
# or the file $SLOWPATH_SIGNALS_JSON names (the tests add a scratch signal so).
#
# Environment: PYTHON (default /usr/bin/python3 if present, else python3; 3.11+),
# SLOWPATH_TOOLS_CACHE (default /var/cache/slowpath-tools, or ~/.cache/slowpath-tools
# when that is not writable). Exit status 3: the library could not be installed.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
mode=generate
case ${1:-} in
--setup | --check) mode=${1#--}; shift ;;
--alerts) mode=alerts; rules_in=${2:?generate.sh: --alerts RULES (a Prometheus rules file, or -)}; shift 2 ;;
esac
out="${1:-$here}"

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x /usr/bin/python3 ]]; then python=/usr/bin/python3; else python=python3; fi
fi

cache="${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools}"
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w "$cache" ]]; then
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/slowpath-tools"
  mkdir -p "$cache"
fi
venv="$cache/dashboards-venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"

current() { [[ -x "$venv/bin/python" && "$(cat "$stamp" 2>/dev/null)" == "$want" ]]; }
if [[ $mode == check ]]; then
  current && exit 0
  echo "generate.sh: no virtualenv with the pinned requirements in $venv: run scripts/setup.sh --test" >&2
  exit 3
fi
if ! current; then
  echo "generate.sh: installing the pinned grafana-foundation-sdk into $venv" >&2
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" >&2 ||
     ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
         --only-binary=:all: --require-hashes -r "$here/requirements.txt" >&2; then
    echo "generate.sh: could not install grafana-foundation-sdk (needs python3-venv and access to PyPI)" >&2
    rm -rf "$venv"
    exit 3
  fi
  echo "$want" > "$stamp"
fi
[[ $mode == setup ]] && exit 0

# The declarations, unless the caller gave a file of them.
if [[ -z ${SLOWPATH_SIGNALS_JSON:-} ]]; then
  bin=${SLOWPATH_BIN:-$here/../target/release/slowpath}
  if [[ ! -x $bin ]]; then
    echo "generate.sh: $bin missing: build it with cargo build --release -p slowpath (or set SLOWPATH_BIN)" >&2
    exit 2
  fi
  declared=$(mktemp)
  trap 'rm -f "$declared"' EXIT
  "$python" "$here/../deploy/signals.py" --bin "$bin" --print-signals-json >"$declared"
  export SLOWPATH_SIGNALS_JSON=$declared
fi

# The Grafana alert rules: the rules file read, and the result written, as
# YAML by the system's python3-yaml (the virtualenv holds the SDK alone).
grafana_alerts() { # RULES_YAML (or -): the provisioning file on stdout
  local json
  json=$(mktemp)
  trap 'rm -f "$json"' RETURN
  "$python" -c 'import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)' \
    < <(if [[ $1 == - ]]; then cat; else cat "$1"; fi) >"$json"
  (cd "$here/src" && PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" generate.py --alerts "$json") |
    "$python" "$here/src/alerts_yaml.py"
}
if [[ $mode == alerts ]]; then
  grafana_alerts "$rules_in"
  exit 0
fi

(cd "$here/src" && PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" generate.py "$out")
alerts_out="$out/slowpath-alerts.yaml"
[[ $# -eq 0 ]] && alerts_out="$here/provisioning/alerting/slowpath-alerts.yaml"
grafana_alerts "$here/../deploy/prometheus/slowpath-rules.yaml" >"$alerts_out"
echo "wrote $alerts_out"
if [[ $# -eq 0 ]]; then
  chart_copies="$here/../deploy/helm/slowpath/files/dashboards"
  mkdir -p "$chart_copies"
  rm -f "$chart_copies"/*.json
  cp "$here"/*.json "$chart_copies"/
fi
