#!/usr/bin/env bash
# Regenerates every file made from the signals' declarations, in the order
# each step reads the one before (ARCHITECTURE.md, "How to add a signal"):
#
#   1. cargo build --release -p slowpath      the object, `slowpath signals`
#   2. SLOWPATH_UPDATE_GOLDEN=1 cargo test --release -p slowpath golden
#                                             agent/tests/golden/*
#   3. deploy/render.sh                       signals.json, known-sources.yaml,
#                                             values.yaml's and the systemd
#                                             defaults' blocks, the rules, the
#                                             plain manifests, the mixin's
#                                             rules template
#   4. dashboards/generate.sh                 the dashboards, their chart copies,
#                                             the Grafana alerts
#   5. docs/generate.py                       the docs' generated blocks (the
#                                             runbook's signal sections and
#                                             known sources among them)
#
#   scripts/generate.sh      all five; commit what they change (each file
#                            has a test that regenerates it and compares)
#
# Needs what scripts/setup.sh --test installs (helm from the tools cache,
# the dashboards' virtualenv); exits at the first step that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"

step() { echo "generate.sh: $*" >&2; }
step "1/5 cargo build --release -p slowpath"
cargo build --release --locked -p slowpath
step "2/5 golden files"
SLOWPATH_UPDATE_GOLDEN=1 cargo test --release --locked -p slowpath golden --quiet
step "3/5 deploy/render.sh"
deploy/render.sh
step "4/5 dashboards/generate.sh"
dashboards/generate.sh
step "5/5 docs/generate.py"
python3 docs/generate.py --bin target/release/slowpath
step "done: git status shows what changed"
