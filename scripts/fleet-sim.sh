#!/usr/bin/env bash
# Fleet simulation: a recorded busy node served as 10, 100 and 1,000 nodes to
# a real Prometheus; head series, memory, rule evaluation and a fleet query's
# time per N, into DIR/fleet.csv and DIR/fleet.png (9 minutes on 2 cores).
#   scripts/fleet-sim.sh [--nodes 10,100,1000] [--minutes 3] [--out fleet-out]
# See scripts/fleet-sim.py.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/as-root.sh
source "$HOME/.cargo/env" 2>/dev/null || true
for tool in prometheus gnuplot gcc; do
  command -v "$tool" >/dev/null || { echo "fleet-sim.sh: $tool is missing: run scripts/setup.sh --test" >&2; exit 1; }
done
cargo build --release --locked -p slowpath
mkdir -p tests/workloads/bin
gcc -O2 -fno-omit-frame-pointer -Wall -Werror -pthread tests/workloads/sp-workload.c -o tests/workloads/bin/sp-workload
exec /usr/bin/python3 scripts/fleet-sim.py "$@"
