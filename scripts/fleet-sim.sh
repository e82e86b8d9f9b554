#!/usr/bin/env bash
# Fleet simulation: a recorded busy node served as N nodes to a real metrics
# backend (one Prometheus 3, or Prometheus agents remote-writing to Thanos);
# series, ingest, memory and CPU per component, rule evaluation and the fleet
# dashboard's query times per N, into DIR/fleet.csv and DIR/fleet.png (the
# scrape minutes plus about a minute of start and measurement per N and
# backend on 2 cores, after a first build of the tools; --backfill 6 fills
# every 5-minute rate window at once, so --minutes 0.5 is enough to compare).
#   scripts/fleet-sim.sh [--backend prometheus|thanos|both] [--nodes 10,100,1000]
#                        [--minutes 3] [--backfill MINUTES] [--out fleet-out] [--check]
# See scripts/fleet-sim.py.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/as-root.sh
source "$HOME/.cargo/env" 2>/dev/null || true
for tool in gnuplot gcc; do
  command -v "$tool" >/dev/null || { echo "fleet-sim.sh: $tool is missing: run scripts/setup.sh --test" >&2; exit 1; }
done
# Prometheus 3 and Thanos, built once into the tools cache
tools=$(bash tests/deploy/install-tools.sh)
cargo build --release --locked -p slowpath
mkdir -p tests/workloads/bin
gcc -O2 -fno-omit-frame-pointer -Wall -Werror -pthread tests/workloads/sp-workload.c -o tests/workloads/bin/sp-workload
exec /usr/bin/python3 scripts/fleet-sim.py --prometheus "$tools/prometheus3/bin/prometheus" \
  --thanos "$tools/thanos/bin/thanos" "$@"
