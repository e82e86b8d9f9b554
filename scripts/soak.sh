#!/usr/bin/env bash
# Soak test: N minutes of process and cgroup churn against the agent, scraped
# every second, sampled each minute into DIR/soak.csv and DIR/soak.png.
#   scripts/soak.sh [--minutes 30] [--out soak-out] [--grace 5m] [--check]
# See scripts/soak.py for what it does and the bounds --check enforces.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/as-root.sh
source "$HOME/.cargo/env" 2>/dev/null || true
for tool in gnuplot gcc; do
  command -v "$tool" >/dev/null || { echo "soak.sh: $tool is missing: run scripts/setup.sh --test" >&2; exit 1; }
done
cargo build --release --locked -p slowpath
mkdir -p tests/workloads/bin
gcc -O2 -fno-omit-frame-pointer -Wall -Werror -pthread tests/workloads/sp-workload.c -o tests/workloads/bin/sp-workload
exec /usr/bin/python3 scripts/soak.py "$@"
