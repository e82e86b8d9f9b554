#!/usr/bin/env bash
# In-kernel cost per run of the counting paths, for two agent binaries (say
# one built from main and one from a branch) and an empty program (the
# floor), in the same run: the configurations take turns, in an order that
# rotates each round, so that drift and the other users of the machine weigh
# on all of them alike.
#
# Each configuration runs exactly the same load (hotpath.c), in two windows
# measured apart:
#   waits  THREADS threads x WAITS futex waits of USEC us, each ended by its
#          timeout: a timed futex sys_enter, an hrtimer_wakeup expiry and a
#          timer wakeup (sched_waking) per wait
#   clock  CLOCKS raw clock_gettime syscalls
#   untraced  CLOCKS raw getppid syscalls: not counted, so the sys_enter
#          program leaves at its first test (what every syscall pays)
#   ready  CLOCKS epoll_wait calls with a 1 s timeout that find their event
#          ready: timed waits that never sleep, as a busy server's loop makes
#   yields CLOCKS raw sched_yield syscalls, pinned, with nothing else of
#          ours runnable there: counted, with the caller's runqueue read
#   turns  TURN_PROCS processes on CPU 0 taking turns, TURNS times each a raw
#          clock_gettime then sched_yield: the counting path when another
#          process had the CPU last (half the sys_enter runs are the yields)
#   localtime  STATS glibc localtime() with TZ unset: a newfstatat of the C
#          library's "/etc/localtime" literal each (the tzfile signal reads it)
#   stat-other STATS stat() of other files from one reused stack buffer
#   stat-near  the same from a reused buffer within 8 MiB of the C library
#          (the tzfile signal's worst case: read, compared, not counted)
# and prints, per program and window, ns per run (run_time_ns / run_cnt of
# the kernel's BPF run-time statistics, which add their own two clock reads
# per run: an upper bound), as the median and the range over the rounds.
# The statistics are kept on with a BPF_ENABLE_STATS descriptor (hotpath.c
# stats), not by writing kernel.bpf_stats_enabled: another user of the
# machine switching the sysctl off cannot stop them, and nothing is left to
# restore. The floor is one empty raw_tp program attached to every hook
# (floor.c): what running any program on these tracepoints costs. The
# programs run for every process on the machine, so other processes' events
# are in the figures.
#
# Usage (root):  tests/bench/hotpath.sh BIN_A BIN_B
# Knobs (environment): LABELS="a b" (names of the two binaries), ROUNDS=5,
#   ATTACH="tp-btf raw-tp" (--bpf.attach-type values to run each binary
#   with; add fentry where the kernel allows it), THREADS=2 WAITS=100000
#   USEC=10 CLOCKS=3000000 TURN_PROCS=3 TURNS=200000 STATS=1000000, PROGS='sys_enter|hrtimer_expire|sched_waking|^-$'
#   (a regular expression: the programs shown; "-" is the floor's, which has
#   no name).
# Everything built or written goes to a temporary directory that is removed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${ROUNDS:-5}
ATTACH=${ATTACH:-tp-btf raw-tp}
THREADS=${THREADS:-2}
WAITS=${WAITS:-100000}
USEC=${USEC:-10}
CLOCKS=${CLOCKS:-3000000}
TURN_PROCS=${TURN_PROCS:-3}
TURNS=${TURNS:-200000}
STATS=${STATS:-1000000}
PROGS=${PROGS:-sys_enter|hrtimer_expire|sched_waking|^-$}

die() { echo "hotpath.sh: $*" >&2; exit 1; }
# shellcheck source=tests/bench/common.sh
source "$here/common.sh"
(( $# == 2 )) || die "usage: hotpath.sh BIN_A BIN_B"
[[ -x $1 && -x $2 ]] || die "not executable: $1 or $2"
bins=("$1" "$2")
read -r -a labels <<<"${LABELS:-a b}"
(( ${#labels[@]} == 2 )) || die "LABELS needs two names"
[[ $(id -u) -eq 0 ]] || die "needs root (loads BPF programs)"
for t in gcc curl bpftool ss; do
    command -v "$t" >/dev/null || die "missing tool: $t"
done

work=$(mktemp -d /tmp/slowpath-hotpath.XXXXXX)
pid="" stats_pid=""

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in $pid $stats_pid; do
        if kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
        fi
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

gcc -O2 -Wall -pthread -o "$work/hotpath" "$here/hotpath.c"
gcc -O2 -Wall -o "$work/floor" "$here/floor.c"

echo "== machine"
echo "cpu: $(cpu_model), $(nproc) CPUs; kernel $(uname -r)"
mitigations
for i in 0 1; do echo "${labels[$i]}: ${bins[$i]}"; done
echo "load: waits $THREADS x $WAITS x ${USEC}us, clock $CLOCKS, turns $TURN_PROCS x $TURNS, stats $STATS; $ROUNDS rounds"

# Start configuration $1 ("floor" or "LABEL/ATTACH"); sets pid, waits until ready.
start() {
    local cfg=$1 port ready=0 i bin
    if [[ $cfg == floor ]]; then
        "$work/floor" >"$work/log" 2>&1 &
        pid=$!
    else
        port=$(free_port)
        for i in 0 1; do [[ ${cfg%%/*} == "${labels[$i]}" ]] && bin=${bins[$i]}; done
        "$bin" --web.listen-address "127.0.0.1:$port" --bpf.attach-type "${cfg#*/}" >"$work/log" 2>&1 &
        pid=$!
    fi
    for _ in $(seq 300); do
        kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; die "$cfg exited"; }
        if [[ $cfg == floor ]]; then
            grep -q '^attached' "$work/log" && ready=1
        else
            [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz") == 200 ]] && ready=1
        fi
        (( ready )) && break
        sleep 0.1
    done
    (( ready )) || { cat "$work/log" >&2; die "$cfg not ready after 30 s"; }
    sleep 1 # past start-up work
}

stop() {
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

# Append "round cfg window prog ns_per_run runs" for the window between readings $1 and $2.
record() {
    awk -v r="$3" -v c="$4" -v w="$5" 'NR == FNR { t[$1] = $3; n[$1] = $4; next }
        ($1 in t) && $4 > n[$1] { printf "%s %s %s %s %.1f %d\n", r, c, w, $2, ($3 - t[$1]) / ($4 - n[$1]), $4 - n[$1] }' \
        "$1" "$2" >>"$work/results"
}

"$work/hotpath" stats >"$work/stats.out" &
stats_pid=$!
for _ in $(seq 50); do grep -q '^stats on' "$work/stats.out" && break; sleep 0.1; done
grep -q '^stats on' "$work/stats.out" || die "could not enable BPF statistics"

configs=(floor)
for a in $ATTACH; do
    for l in "${labels[@]}"; do configs+=("$l/$a"); done
done
n=${#configs[@]}
# The windows, in the order they run: hotpath's mode (the window's name) and
# its arguments.
windows=(
    "waits $THREADS $WAITS $USEC"
    "clock $CLOCKS"
    "turns $TURN_PROCS $TURNS"
    "localtime $STATS"
    "stat-other $STATS"
    "stat-near $STATS"
    "yields $CLOCKS"
    "untraced $CLOCKS"
    "ready $CLOCKS"
)
echo
echo "== rounds"
for ((r = 1; r <= ROUNDS; r++)); do
    line="round $r:"
    for ((k = 0; k < n; k++)); do
        cfg=${configs[$(((r - 1 + k) % n))]}
        start "$cfg"
        prog_run_stats "$pid" >"$work/s0"
        i=0
        for window in "${windows[@]}"; do
            read -r -a args <<<"$window"
            "$work/hotpath" "${args[@]}" >/dev/null
            i=$((i + 1))
            prog_run_stats "$pid" >"$work/s$i"
        done
        stop
        # recorded after the agent stopped, so no window counts this work
        i=0
        for window in "${windows[@]}"; do
            record "$work/s$i" "$work/s$((i + 1))" "$r" "$cfg" "${window%% *}"
            i=$((i + 1))
        done
        line+=" $cfg"
    done
    echo "$line"
done
kill -TERM "$stats_pid"; wait "$stats_pid" 2>/dev/null || true; stats_pid=""

# Median and range of column 5 for each (cfg, window, prog), in config order.
echo
echo "== ns per run: median [min..max] over $ROUNDS rounds (runs: of the median round)"
printf '%-20s %-10s %-32s %8s  %-17s %10s\n' config window program median range runs
for cfg in "${configs[@]}"; do
    for w in "${windows[@]%% *}"; do
        awk -v c="$cfg" -v w="$w" '$2 == c && $3 == w { print $4 }' "$work/results" | sort -u | { grep -E "$PROGS" || true; } |
            while read -r prog; do
                awk -v c="$cfg" -v w="$w" -v p="$prog" '$2 == c && $3 == w && $4 == p { print $5, $6 }' \
                    "$work/results" | sort -g | awk -v c="$cfg" -v w="$w" -v p="$prog" '
                    { v[NR] = $1; runs[NR] = $2 }
                    END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                          printf "%-20s %-10s %-32s %8.1f  [%6.1f..%6.1f] %10d\n", c, w, p, m, v[1], v[NR], runs[int((NR + 1) / 2)] }'
            done
    done
done
