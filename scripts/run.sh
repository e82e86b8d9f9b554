#!/usr/bin/env bash
# Quick start: install what is needed, build, and run the agent in the
# foreground with default flags (metrics on :9891/metrics). Extra arguments
# go to slowpath, e.g. scripts/run.sh --web.listen-address=127.0.0.1:9891
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/as-root.sh
scripts/setup.sh
source "$HOME/.cargo/env" 2>/dev/null || true
cargo build --release --locked -p slowpath
exec target/release/slowpath "$@"
