#!/usr/bin/env bash
# What `slowpath top` costs on a node with many processes: PROCS (1,000)
# idle language runtimes (`sp-workload idle-runtime`: one thread in 50 ms
# futex timeouts, one in 100 ms epoll_wait timeouts, ~30 timer wakeups/s
# each), so that every process is a row, and for SECONDS_EACH (60) per
# configuration:
#   - the agent alone (--metrics.pid-label: a series per process);
#   - the agent read by `slowpath top --batch` every DELAY (2) s;
#   - the agent read by the full-screen view (a 120x32 tmux pane);
#   - `slowpath top --source standalone`, batch and full screen (no agent:
#     the view loads the programs itself; its CPU is the agent's work too).
# Each line gives the view's CPU and the agent's as a share of one core
# (utime+stime from /proc/PID/stat over the run), and the rows of the
# view's last frame. The kernel side is the agent's programs in every
# configuration: the view adds none (standalone, it loads the same ones).
#
# Usage (root):  tests/bench/top.sh
# Knobs (environment): PROCS=1000 SECONDS_EACH=60 DELAY=2
#   SLOWPATH_BIN=target/release/slowpath
#   SP_WORKLOAD=tests/workloads/bin/sp-workload
# Everything started is ended by pid; the tmux server is our own socket;
# the script checks that every BPF program it loaded is gone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/common.sh"
AGENT=${SLOWPATH_BIN:-$repo/target/release/slowpath}
WORKLOAD=${SP_WORKLOAD:-$repo/tests/workloads/bin/sp-workload}
PROCS=${PROCS:-1000}
SECONDS_EACH=${SECONDS_EACH:-60}
DELAY=${DELAY:-2}
HZ=$(getconf CLK_TCK)

die() { echo "top.sh: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "run as root: the agent and the standalone view load BPF programs"
[[ -x $AGENT ]] || die "no $AGENT: cargo build --release"
[[ -x $WORKLOAD ]] || die "no $WORKLOAD: build tests/workloads/sp-workload.c (see scripts/test.sh)"
command -v tmux >/dev/null || die "tmux is needed for the full-screen configurations"

tmp=$(mktemp -d)
socket="slowpath-bench-top-$$"
loads=()
agent_pid=""
cleanup() {
    local rc=$?
    [[ -n $agent_pid ]] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
    tmux -L "$socket" kill-server 2>/dev/null || true
    for pid in "${loads[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${loads[@]}"; do wait "$pid" 2>/dev/null || true; done
    programs_gone "$tmp/progs" || rc=1
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT

# CPU seconds of PID so far (utime + stime; fields after the comm's ")").
cpu_seconds() {
    awk -v hz="$HZ" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"
}

# The share of one core, in %, of A CPU seconds over B wall seconds.
percent() { awk -v c="$1" -v w="$2" 'BEGIN { printf "%.2f%%", 100 * c / w }'; }

start_agent() {
    local port
    port=$(free_port)
    "$AGENT" --web.listen-address="127.0.0.1:$port" --metrics.pid-label >"$tmp/agent.log" 2>&1 &
    agent_pid=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || die "the agent did not start: $(cat "$tmp/agent.log")"
    note_prog_ids "$agent_pid" "$tmp/progs"
    url="http://127.0.0.1:$port/metrics"
}

stop_agent() {
    kill "$agent_pid"
    wait "$agent_pid" || true
    agent_pid=""
}

# A view's pid in our tmux server, running COMMAND in a 120x32 pane.
start_pane() {
    tmux -L "$socket" new-session -d -s top -x 120 -y 32 "exec env TERM=xterm-256color $1"
    tmux -L "$socket" display-message -p -t top '#{pane_pid}'
}

# Measure one configuration: NAME, the view's pid (or empty), and how to
# read its row count afterwards (a file of batch frames or "pane").
report() {
    local name=$1 view=$2 frames=$3 t0 v0 a0 t1 v1 a1 rows
    t0=$(date +%s.%N)
    v0=$([[ -n $view ]] && cpu_seconds "$view" || echo 0)
    a0=$([[ -n $agent_pid ]] && cpu_seconds "$agent_pid" || echo 0)
    sleep "$SECONDS_EACH"
    t1=$(date +%s.%N)
    v1=$([[ -n $view ]] && cpu_seconds "$view" || echo 0)
    a1=$([[ -n $agent_pid ]] && cpu_seconds "$agent_pid" || echo 0)
    local wall view_cpu agent_cpu
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    view_cpu=$([[ -n $view ]] && percent "$(awk -v a="$v0" -v b="$v1" 'BEGIN { print b - a }')" "$wall" || echo "-")
    agent_cpu=$([[ -n $agent_pid ]] && percent "$(awk -v a="$a0" -v b="$a1" 'BEGIN { print b - a }')" "$wall" || echo "-")
    case $frames in
        pane) rows=$(tmux -L "$socket" capture-pane -p -t top | head -1 | grep -o '[0-9]* processes' || echo "?") ;;
        -) rows="-" ;;
        *) rows=$(grep '^slowpath top - ' "$frames" | tail -1 | grep -o '[0-9]* processes' || echo "?") ;;
    esac
    printf '%-44s %10s %10s   %s\n' "$name" "$view_cpu" "$agent_cpu" "$rows"
}

echo "== slowpath top's own cost: $PROCS processes, ${SECONDS_EACH} s per configuration, refresh ${DELAY} s"
echo "CPU: $(cpu_model)"
mitigations
echo "kernel: $(uname -r)"

for _ in $(seq "$PROCS"); do
    "$WORKLOAD" idle-runtime $((SECONDS_EACH * 8 + 120)) >/dev/null 2>&1 &
    loads+=($!)
done
sleep 2

printf '%-44s %10s %10s   %s\n' "configuration" "view CPU" "agent CPU" "rows in the last frame"
start_agent
report "agent alone (no view)" "" "-"

"$AGENT" top --batch -d "$DELAY" --rows 0 --agent.url="$url" >"$tmp/batch.txt" 2>"$tmp/batch.err" &
view=$!
sleep 1
report "agent + top --batch (all rows)" "$view" "$tmp/batch.txt"
kill "$view"; wait "$view" 2>/dev/null || true

view=$(start_pane "$AGENT top -d $DELAY --agent.url=$url")
sleep 1
report "agent + full-screen top (120x32)" "$view" pane
tmux -L "$socket" kill-server
stop_agent

"$AGENT" top --batch --source standalone -d "$DELAY" --rows 0 >"$tmp/alone.txt" 2>"$tmp/alone.err" &
view=$!
sleep 3
note_prog_ids "$view" "$tmp/progs"
report "standalone top --batch (all rows)" "$view" "$tmp/alone.txt"
kill "$view"; wait "$view" 2>/dev/null || true

view=$(start_pane "$AGENT top --source standalone -d $DELAY")
sleep 3
note_prog_ids "$view" "$tmp/progs"
report "standalone full-screen top (120x32)" "$view" pane
tmux -L "$socket" kill-server
