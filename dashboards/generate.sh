#!/usr/bin/env bash
# Regenerates the Grafana dashboards (dashboards/*.json) from dashboards/src/
# with the pinned grafana-foundation-sdk (dashboards/requirements.txt), in a
# virtualenv cached outside the repository.
#
#   dashboards/generate.sh            rewrite dashboards/*.json, and their copies in
#                                     the Helm chart (deploy/helm/slowpath/files/dashboards/,
#                                     which grafanaDashboards.enabled turns into ConfigMaps:
#                                     Helm reads no file outside the chart's directory)
#   dashboards/generate.sh OUTDIR     write them to OUTDIR instead (tests compare)
#   dashboards/generate.sh --setup    only install the virtualenv (scripts/setup.sh --test)
#   dashboards/generate.sh --check    install nothing: exit 3 unless the virtualenv is
#                                     there with the pinned requirements (the tests)
#
# Environment: PYTHON (default /usr/bin/python3 if present, else python3; 3.11+),
# SLOWPATH_TOOLS_CACHE (default /var/cache/slowpath-tools, or ~/.cache/slowpath-tools
# when that is not writable). Exit status 3: the library could not be installed.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
mode=generate
case ${1:-} in
--setup | --check) mode=${1#--}; shift ;;
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

(cd "$here/src" && PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" generate.py "$out")
if [[ $# -eq 0 ]]; then
  chart_copies="$here/../deploy/helm/slowpath/files/dashboards"
  mkdir -p "$chart_copies"
  rm -f "$chart_copies"/*.json
  cp "$here"/*.json "$chart_copies"/
fi
