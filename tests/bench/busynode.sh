#!/usr/bin/env bash
# What slowpath costs a busy, healthy node, all in: the node's total CPU time
# for a fixed amount of real server work, with no BPF program attached
# ("none"), with an empty program on each hook slowpath uses ("floor",
# floor.c: what any program on these tracepoints costs), and with the agent
# itself ("slowpath", default flags, scraped every SCRAPE_EVERY seconds as
# Prometheus would). The configurations take turns, in an order that rotates
# each round (as in hotpath.sh), so that drift and the other users of the
# machine weigh on all of them alike. The servers start once, are warmed up
# by one untimed run, and stay up: only the BPF configuration changes.
#
# The work of one run, all on loopback, all generators at the same time,
# each a fixed count of requests or transactions (not a duration):
#   nginx     a 1 KiB static file (access log off), ab -k -n NGINX_N -c AB_C
#   postgres  pgbench -c PG_CLIENTS -t PG_T (TPC-B like; synchronous_commit
#             off; autovacuum off and a VACUUM and CHECKPOINT between runs,
#             outside the measured window, so that every run starts from the
#             same table state; pgbench's own vacuum of the small tables is in)
#   redis     redis-benchmark -n REDIS_N -r 100000 -t REDIS_TESTS (no
#             persistence; lpush then lpop leaves the list empty)
#   jdk       com.sun.net.httpserver (busynode/Hello.java, source launch),
#             ab -k -n JAVA_N -c AB_C
#   node      http.createServer (busynode/hello.js), ab -k -n NODE_N -c AB_C
# and prints, per configuration, the node's CPU seconds over the run (the
# /proc/stat "cpu" line: user+nice+system+irq+softirq+steal, in USER_HZ
# ticks) as the median and quartiles over the rounds, the wall time, the CPU
# per request or transaction, the CPU added by floor and slowpath over none
# (median of the per-round differences) and slowpath's added CPU in
# multiples of the floor's. Also the CPU of a cgroup holding everything the
# benchmark started (servers, load generators, floor, agent; cpuacct, ns
# exact): what the node figure is, less kernel threads and other users of the
# machine, to tell their noise apart. For slowpath: its own-cost metric over
# each run (the increase of sum(slowpath_probe_run_seconds_total) +
# process_cpu_seconds_total, scraped at the start and the end of the run)
# next to the added CPU measured end to end in the same round, its programs'
# runs by probe, and the attach type of each hook (slowpath_probe_attached).
# The agent's first statistics window opens 10 s after it starts, inside the
# load; runs before it are charged at its time per run (the agent does so),
# which includes the start-up second before the load (estimated out).
#
# In kernel: the kernel's BPF run-time statistics are on around every
# measured run of the empty programs and of slowpath (a BPF_ENABLE_STATS
# descriptor, hotpath.c stats, taken after the configuration started), so
# both are timed the same way, the statistics' own two clock reads included
# in both (and in the end-to-end figures of both). Per unit of work (request or transaction) it prints the
# programs' total run time (bpf_prog_info, read by bpftool) of the empty
# programs and of slowpath, and their ratio per round. Then slowpath's
# own-cost metric part by part against this script's own readings: its
# programs (the kernel's run time less their runs at the empty program's
# time per run), the agent process (its threads' schedstat) and the
# dispatch (sys_enter runs times the empty programs' dispatch per syscall:
# overhead.c's getppid with the empty programs less without, the statistics
# off, measured before the rounds, none and floor in turns),
# their sum (the composed all-in figure), and whether SlowpathOverheadHigh
# (the own part as a share of the node's CPUs, the chart's
# prometheusRule.thresholds.ownCpuShareOfNode) and SlowpathDispatchFloorHigh
# (the floor, 0.05 of one CPU) would fire on the rates of the run.
#
# Usage (root):  SLOWPATH_BIN=/path/to/slowpath tests/bench/busynode.sh
# Knobs (environment): ROUNDS=10, NGINX_N=540000 JAVA_N=300000 NODE_N=360000
#   AB_C=8 (ab concurrency per HTTP server), REDIS_N=110000 (per test)
#   REDIS_TESTS=set,get,incr,lpush,lpop REDIS_C=50, PG_CLIENTS=4 PG_T=8000
#   (transactions per client), PG_BIN (directory of initdb, pg_ctl,
#   postgres; default: where pg_ctl is on PATH), SCRAPE_EVERY=15 (seconds),
#   SETTLE=2 (seconds between a configuration's start and its load),
#   WARMUP=1 (untimed runs before the rounds), JAVA_THREADS=4, SCALE=1
#   (multiplies the five counts; the agent's first statistics window opens
#   10 s after it starts, so keep a run above about 15 s), CAL_ROUNDS=3
#   (rounds of the dispatch calibration, about 10 s each),
#   COST_METHOD=measured (estimated: the agent runs with
#   --bpf.stats-interval=0, so its programs part is the estimate it makes
#   where the kernel's statistics are not allowed, held against the same
#   reading of the kernel's).
# Needs nginx, redis-server and redis-benchmark, ab, pgbench and psql,
# PostgreSQL's server binaries, java (17+), node, gcc, curl, bpftool, ss;
# nginx-light, redis-server, redis-tools and apache2-utils are installed with
# apt-get when missing (no service is started: policy-rc.d). With the
# defaults one run takes about 37 s on 2 CPUs, all of it about 22 minutes
# (ROUNDS=10 SCALE=0.5: 13 s runs, 8.6 minutes of rounds, about 10 in all).
# Everything built or written goes to a temporary directory that is removed
# at exit; the cgroup is removed too. Targets are informational: the script
# exits 0 when it ran.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${ROUNDS:-10}
NGINX_N=${NGINX_N:-540000}
JAVA_N=${JAVA_N:-300000}
NODE_N=${NODE_N:-360000}
AB_C=${AB_C:-8}
REDIS_N=${REDIS_N:-110000}
REDIS_TESTS=${REDIS_TESTS:-set,get,incr,lpush,lpop}
REDIS_C=${REDIS_C:-50}
PG_CLIENTS=${PG_CLIENTS:-4}
PG_T=${PG_T:-8000}
SCRAPE_EVERY=${SCRAPE_EVERY:-15}
SETTLE=${SETTLE:-2}
WARMUP=${WARMUP:-1}
JAVA_THREADS=${JAVA_THREADS:-4}
SCALE=${SCALE:-1}
CAL_ROUNDS=${CAL_ROUNDS:-3}
COST_METHOD=${COST_METHOD:-measured}
case $COST_METHOD in
    measured) agent_cost_flags=() ;;
    estimated) agent_cost_flags=(--bpf.stats-interval=0) ;;
    *) echo "busynode.sh: COST_METHOD must be measured or estimated, not $COST_METHOD" >&2; exit 1 ;;
esac
# SCALE multiplies the five counts (ROUNDS=15 SCALE=0.33: more, shorter rounds).
scale() { awk -v n="$1" -v s="$SCALE" 'BEGIN { v = int(n * s + 0.5); print (v < 1 ? 1 : v) }'; }
NGINX_N=$(scale "$NGINX_N") JAVA_N=$(scale "$JAVA_N") NODE_N=$(scale "$NODE_N")
REDIS_N=$(scale "$REDIS_N") PG_T=$(scale "$PG_T")

die() { echo "busynode.sh: $*" >&2; exit 1; }
# shellcheck source=tests/bench/common.sh
source "$here/common.sh"
[[ $(id -u) -eq 0 ]] || die "needs root (loads BPF programs)"
AGENT=${SLOWPATH_BIN:-}
[[ -n $AGENT ]] || die "set SLOWPATH_BIN to the agent binary"
[[ -x $AGENT ]] || die "not executable: $AGENT"

# --- packages ------------------------------------------------------------------
# Only what is missing, and without starting the packages' services: Debian's
# maintainer scripts ask policy-rc.d, which says no (101) while we install.
need=()
command -v nginx >/dev/null || need+=(nginx-light)
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v ab >/dev/null || need+=(apache2-utils)
if (( ${#need[@]} )); then
    echo "installing: ${need[*]}"
    made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    rc=0
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/dev/null || rc=$?
    (( made_policy )) && rm -f /usr/sbin/policy-rc.d
    (( rc == 0 )) || die "apt-get install ${need[*]} failed"
fi
for t in gcc curl bpftool ss nginx redis-server redis-benchmark ab pgbench psql java node runuser getconf; do
    command -v "$t" >/dev/null || die "missing tool: $t"
done
if [[ -z ${PG_BIN:-} ]]; then
    PG_BIN=$(dirname "$(command -v pg_ctl 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | tail -1)")
fi
for t in initdb pg_ctl postgres; do
    [[ -x $PG_BIN/$t ]] || die "no $t in PG_BIN=$PG_BIN"
done
id postgres >/dev/null 2>&1 || die "no user postgres (PostgreSQL refuses to run as root)"

work=$(mktemp -d /tmp/slowpath-busynode.XXXXXX)
chmod 711 "$work" # nginx's workers (nobody) and postgres traverse it
hz=$(getconf CLK_TCK)
IFS=, read -r -a redis_tests <<<"$REDIS_TESTS"
units=$((NGINX_N + JAVA_N + NODE_N + REDIS_N * ${#redis_tests[@]} + PG_CLIENTS * PG_T))

# A cgroup for everything the benchmark starts: cgroup v2 (cpu.stat
# usage_usec) or v1 cpuacct (cpuacct.usage, ns); none: no cgroup figure.
cg="" cg_kind=""
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    cg=/sys/fs/cgroup/${work##*/} cg_kind=v2
elif [[ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]]; then
    cg=/sys/fs/cgroup/cpuacct/${work##*/} cg_kind=v1
fi
if [[ -n $cg ]] && ! mkdir "$cg" 2>/dev/null; then
    echo "no cgroup for the workload (mkdir $cg refused): cgroup figures left out"
    cg="" cg_kind=""
fi
cg_ns() { # CPU ns of the cgroup so far
    case $cg_kind in
        v2) awk '$1 == "usage_usec" { printf "%d", $2 * 1000 }' "$cg/cpu.stat" ;;
        v1) cat "$cg/cpuacct.usage" ;;
        *) echo 0 ;;
    esac
}

agent_pid="" floor_pid="" scraper_pid="" stats_pid="" pg_started=0
server_pids=() gen_pids=()

# Cleanup: only what this script started, by pid.
cleanup() {
    local rc=$? p left id
    trap - EXIT INT TERM
    for p in "${gen_pids[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null || true # the generator the subshell waits for
    done
    for p in $scraper_pid "${gen_pids[@]}" $agent_pid $floor_pid $stats_pid "${server_pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
        fi
    done
    if (( pg_started )); then
        runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null 2>&1 ||
            echo "cleanup: pg_ctl stop failed" >&2
    fi
    if [[ -n $cg ]]; then
        # Whatever is left in the cgroup was started by this script.
        for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
        for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
        [[ -d $cg ]] && echo "cleanup: cgroup $cg not removed (processes left: $(cat "$cg/cgroup.procs" | tr '\n' ' '))" >&2
    fi
    # No program the benchmark loaded may still exist (the kernel frees a
    # program asynchronously after its last descriptor closes).
    programs_gone "$work/prog_ids" || rc=1
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
set -o errtrace
trap 'echo "busynode.sh: line $LINENO failed: $BASH_COMMAND" >&2' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# Run "$@" in the benchmark's cgroup (call it in the background).
incg() {
    [[ -z $cg ]] || echo "$BASHPID" >"$cg/cgroup.procs"
    exec "$@"
}

# Tracing attachments on the node that are not ours (another agent, a
# floor, bpftrace): the "none" baseline is not BPF-free while they exist.
# Counted: tracing links not held by process $1, and perf-event attachments
# (tracepoints, kprobes) of other processes (raw tracepoints are links).
foreign_attachments() { # $1 = pid of ours holding links, or ""
    local mine=""
    [[ -n $1 ]] && mine=$(grep -h '^link_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{ printf "%s ", $2 }')
    {
        bpftool link list 2>/dev/null | awk -v mine=" $mine" '$1 ~ /^[0-9]+:$/ && $2 ~ /^(raw_tracepoint|tracing|perf_event|kprobe_multi|uprobe_multi)$/ {
            id = $1; sub(":", "", id); if (!index(mine, " " id " ")) n++ } END { print n + 0 }'
        bpftool perf list 2>/dev/null | awk -v pid="${1:-0}" '$1 == "pid" && $2 != pid && !/ raw_tracepoint / { n++ } END { print n + 0 }'
    } | awk '{ s += $1 } END { print s + 0 }'
}

# Poll "$@" every 0.1 s for up to 30 s while process $1 lives.
await() {
    local pid=$1 what=$2 log=$3
    shift 3
    for _ in $(seq 300); do
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "$what exited"; }
        "$@" && return 0
        sleep 0.1
    done
    cat "$log" >&2
    die "$what not ready after 30 s"
}
listening() { [[ -n $(ss -Htln "sport = :$1") ]]; }

# --- build and servers -------------------------------------------------------------
gcc -O2 -Wall -o "$work/floor" "$here/floor.c"
gcc -O2 -Wall -pthread -o "$work/hotpath" "$here/hotpath.c" # its "stats": the statistics on
gcc -O2 -Wall -pthread -o "$work/overhead" "$here/overhead.c" # getppid: the floor's dispatch

echo "== machine"
echo "cpu: $(cpu_model), $(nproc) CPUs; kernel $(uname -r); USER_HZ $hz"
mitigations
echo "agent: $AGENT ($("$AGENT" --version 2>/dev/null || echo '?'))"
echo "work per run: nginx $NGINX_N + jdk $JAVA_N + node $NODE_N requests (ab -k -c $AB_C), redis $REDIS_N x ${#redis_tests[@]} ($REDIS_TESTS, -c $REDIS_C),"
echo "  postgres $PG_CLIENTS x $PG_T transactions: $units requests+transactions; $ROUNDS rounds, scrape every ${SCRAPE_EVERY}s"
echo "cgroup figure: ${cg_kind:-none}"
n_foreign=$(foreign_attachments "")
(( n_foreign == 0 )) || echo "WARNING: $n_foreign tracing attachments of others on the node: the none baseline is not BPF-free"

# A port below the kernel's ephemeral range that no socket uses (the load's
# tens of thousands of client connections take ephemeral ports: the agent,
# started again for each run, must not find its port taken by one of them).
pick_port() {
    local lo p
    read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
    (( lo > 11000 )) || die "ephemeral port range starts at $lo: no room below it"
    for _ in $(seq 100); do
        p=$((10000 + RANDOM % (lo - 10000)))
        [[ " ${ports[*]} " == *" $p "* ]] && continue
        [[ -z $(ss -Htan "sport = :$p") ]] && { echo "$p"; return; }
    done
    die "no free port found"
}
ports=()
for s in nginx java node redis pg agent; do
    p=$(pick_port)
    ports+=("$p")
    printf -v "${s}_port" %s "$p"
done

# nginx: master and 2 workers (nobody), everything under $work.
mkdir -p "$work/nginx/html"
chmod 755 "$work/nginx" "$work/nginx/html"
head -c 768 /dev/urandom | base64 -w 64 >"$work/nginx/html/index.html" # 1 KiB
chmod 644 "$work/nginx/html/index.html"
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 2;
user nobody nogroup;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    server {
        listen 127.0.0.1:$nginx_port;
        root $work/nginx/html;
    }
}
EOF
incg nginx -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' >"$work/nginx/out" 2>&1 &
server_pids+=($!)
await $! nginx "$work/nginx/out" listening "$nginx_port"

mkdir -p "$work/redis"
incg redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$work/redis" --logfile "$work/redis/log" >"$work/redis/out" 2>&1 &
server_pids+=($!)
await $! redis-server "$work/redis/log" listening "$redis_port"

# -XX:-UsePerfData: no /tmp/hsperfdata_root file.
incg java -Xmx256m -XX:-UsePerfData "$here/busynode/Hello.java" "$java_port" "$JAVA_THREADS" >"$work/java.out" 2>&1 &
server_pids+=($!)
await $! jdk "$work/java.out" listening "$java_port"

incg node "$here/busynode/hello.js" "$node_port" >"$work/node.out" 2>&1 &
server_pids+=($!)
await $! node "$work/node.out" listening "$node_port"

# PostgreSQL as user postgres: its own data directory, port and socket
# directory; TCP on 127.0.0.1 only.
mkdir -p "$work/pg/sock"
chown -R postgres: "$work/pg"
chmod 700 "$work/pg"
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg/data" --auth=trust -U postgres >"$work/pg/initdb.out" 2>&1 ||
    { cat "$work/pg/initdb.out" >&2; die "initdb failed"; }
pg_opts="-p $pg_port -k $work/pg/sock -c listen_addresses=127.0.0.1 -c synchronous_commit=off -c autovacuum=off"
pg_opts+=" -c checkpoint_timeout=1h -c max_wal_size=4GB -c max_connections=50"
( incg runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -o "$pg_opts" -w start ) \
    >"$work/pg/start.out" 2>&1 || { cat "$work/pg/start.out" "$work/pg/log" >&2; die "postgres did not start"; }
pg_started=1
export PGHOST=127.0.0.1 PGPORT=$pg_port PGUSER=postgres PGDATABASE=postgres
pgbench -i -q >"$work/pg/init.out" 2>&1 || { cat "$work/pg/init.out" >&2; die "pgbench -i failed"; }
psql_q() { psql -X -q -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }

# --- one run --------------------------------------------------------------------
# Start generator $1 ("$@" after it) in the cgroup, in the background; its
# exit status and elapsed seconds go to $work/gen.$1.
gen() {
    local name=$1
    shift
    (
        [[ -z $cg ]] || echo "$BASHPID" >"$cg/cgroup.procs"
        t0=$EPOCHREALTIME
        rc=0
        "$@" >"$work/out.$name" 2>&1 || rc=$?
        echo "$rc $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')" >"$work/gen.$name"
        exit "$rc"
    ) &
    gen_pids+=($!)
}
gens=(nginx postgres redis jdk node)

# "pid comm ticks" (utime + stime) of every process outside the cgroup: who
# else used the CPU during a run (kernel threads such as ksoftirqd, which
# does part of the loopback traffic's work, and other users of the machine;
# processes that start and exit within the run are not seen).
outside_ticks() {
    [[ -n $cg ]] || return 0
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v skip=" $(tr '\n' ' ' <"$cg/cgroup.procs") " '{
        pid = $1; c = $0; comm = c; sub(/^[^(]*\(/, "", comm); sub(/\) [^)]*$/, "", comm); gsub(/ /, "_", comm)
        sub(/^.*\) /, "", c); split(c, f, " ")
        if (!index(skip, " " pid " ")) print pid, comm, f[12] + f[13] }'
}
# The top 3 of the processes seen in both snapshots $1 and $2, "comm s, ...".
outside_top() {
    awk -v hz="$hz" 'NR == FNR { t[$1 " " $2] = $3; next } ($1 " " $2) in t && $3 > t[$1 " " $2] { print $3 - t[$1 " " $2], $2 }' "$1" "$2" |
        sort -rn | head -3 | awk -v hz="$hz" '{ printf "%s%s %.2f", (NR > 1 ? ", " : ""), $2, $1 / hz }'
}

# "busy steal" ticks of the cpu line: user nice system idle iowait irq softirq steal
node_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9, $9 }' /proc/stat; }

# Check that generator $1 did all its work without errors.
check_gen() {
    local name=$1 out=$work/out.$1 rc
    read -r rc _ <"$work/gen.$name"
    case $name in
        nginx | jdk | node)
            grep -q "^Complete requests: *$2\$" "$out" && grep -q '^Failed requests: *0$' "$out" &&
                ! grep -q '^Non-2xx' "$out" && (( rc == 0 )) ;;
        postgres)
            grep -q "^number of transactions actually processed: $((PG_CLIENTS * $2))/$((PG_CLIENTS * $2))" "$out" &&
                ! grep -q '^number of failed transactions: [1-9]' "$out" && (( rc == 0 )) ;;
        redis)
            (( rc == 0 )) && (( $(tr '\r' '\n' <"$out" | grep -c 'requests per second') >= ${#redis_tests[@]} )) ;;
    esac || { tail -20 "$out" >&2; die "$name: the load did not complete (exit $rc)"; }
}

# The whole mix, 1/$1 of the work for a run; waits until all of it is done.
# Each generator's time goes to $work/gens_line.
run_mix() {
    local d=$1 p rc=0 t
    gen nginx ab -q -k -n $((NGINX_N / d)) -c "$AB_C" "http://127.0.0.1:$nginx_port/index.html"
    gen postgres pgbench -c "$PG_CLIENTS" -t $((PG_T / d))
    gen redis redis-benchmark -h 127.0.0.1 -p "$redis_port" -n $((REDIS_N / d)) -c "$REDIS_C" -r 100000 -q -t "$REDIS_TESTS"
    gen jdk ab -q -k -n $((JAVA_N / d)) -c "$AB_C" "http://127.0.0.1:$java_port/"
    gen node ab -q -k -n $((NODE_N / d)) -c "$AB_C" "http://127.0.0.1:$node_port/"
    for p in "${gen_pids[@]}"; do wait "$p" || rc=1; done
    gen_pids=()
    check_gen nginx $((NGINX_N / d))
    check_gen postgres $((PG_T / d))
    check_gen redis
    check_gen jdk $((JAVA_N / d))
    check_gen node $((NODE_N / d))
    for t in "${gens[@]}"; do printf ' %s=%ss' "$t" "$(awk '{ print $2 }' "$work/gen.$t")"; done >"$work/gens_line"
}

# Same table state for every run, outside the measured window.
between_runs() {
    psql_q 'VACUUM'
    psql_q 'CHECKPOINT'
    sync
}

# --- configurations ----------------------------------------------------------------
start_config() { # $1 = none, floor or slowpath
    case $1 in
        none) ;;
        floor)
            incg "$work/floor" >"$work/floor.out" 2>&1 &
            floor_pid=$!
            await "$floor_pid" floor "$work/floor.out" grep -q '^attached' "$work/floor.out"
            note_prog_ids "$floor_pid" "$work/prog_ids" ;;
        slowpath)
            [[ -z $(ss -Htan "sport = :$agent_port") ]] || agent_port=$(pick_port)
            incg "$AGENT" --web.listen-address="127.0.0.1:$agent_port" "${agent_cost_flags[@]}" >"$work/agent.log" 2>&1 &
            agent_pid=$!
            await "$agent_pid" agent "$work/agent.log" agent_ready
            note_prog_ids "$agent_pid" "$work/prog_ids" ;;
    esac
    sleep "$SETTLE" # past start-up work
}
agent_ready() { [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$agent_port/readyz") == 200 ]]; }

stop_config() {
    local p
    for p in $floor_pid $agent_pid; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    floor_pid="" agent_pid=""
}

# Prometheus' part: a scrape every SCRAPE_EVERY s; at TERM the curls' own
# CPU (the children's times) and the number of scrapes go to $work/scrapes.
scraper() {
    local n=0 sp=""
    # (times must run in this shell, not in a pipeline's subshell)
    trap 'kill "$sp" 2>/dev/null; { echo "$n"; times; } >"$work/scrapes"; exit 0' TERM
    while :; do
        sleep "$SCRAPE_EVERY" &
        sp=$!
        wait "$sp"
        curl -s -o /dev/null "http://127.0.0.1:$agent_port/metrics" && n=$((n + 1))
    done
}
scrape() { curl -sf "http://127.0.0.1:$agent_port/metrics" >"$1" || die "scrape of the agent failed"; }

# "run_time_ns run_cnt sys_enter_run_cnt", summed over every BPF program
# process $1 holds (prog_run_stats: the kernel's figures, not the agent's).
kern_snapshot() {
    prog_run_stats "$1" | awk '{ t += $3; c += $4; if ($2 ~ /^sys_enter/) s += $4 } END { printf "%d %d %d\n", t, c, s }'
}

# --- warm-up ----------------------------------------------------------------------------
echo
echo "== warm-up ($WARMUP untimed run(s) of the whole mix, no BPF)"
for ((w = 1; w <= WARMUP; w++)); do
    between_runs
    t0=$EPOCHREALTIME
    run_mix 1
    echo "warm-up $w: $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s;$(cat "$work/gens_line")"
done

# --- statistics and the floor's dispatch ---------------------------------------------------
# The kernel's run-time statistics, on around each measured run (after the
# configuration started, so that the agent times its start as on any node).
stats_on() {
    "$work/hotpath" stats >"$work/stats.out" 2>&1 &
    stats_pid=$!
    for _ in $(seq 50); do grep -q '^stats on' "$work/stats.out" && return 0; sleep 0.1; done
    die "could not enable the kernel's BPF run-time statistics"
}
stats_off() {
    kill -TERM "$stats_pid" 2>/dev/null || true
    wait "$stats_pid" 2>/dev/null || true
    stats_pid=""
}
# What an untraced syscall pays for any program on a tracepoint sys_enter
# (run.sh's untraced row for the empty program): getppid with the empty
# programs less without (overhead.c, pinned, median of its repetitions; the
# statistics off, as on a node), none and floor in turns.
echo
echo "== the empty programs' dispatch per syscall ($CAL_ROUNDS rounds of overhead getppid, none and floor in turns)"
for ((r = 1; r <= CAL_ROUNDS; r++)); do
    for cfg in none floor; do
        start_config "$cfg"
        g=$("$work/overhead" -c 1 -r 11 | awk '$1 == "getppid" { print $2 }')
        stop_config
        echo "$r $cfg $g" >>"$work/cal"
    done
done
awk '{ printf "calibration %d %-5s getppid %.1f ns\n", $1, $2, $3 }' "$work/cal"

# --- rounds -------------------------------------------------------------------------------
# results: "round cfg node_cpu_s wall_s cg_cpu_s steal_s foreign own_s agent_cpu_s probes_s scrapes curl_s"
configs=(none floor slowpath)
n=${#configs[@]}
echo
echo "== rounds (node CPU s / wall s; cgroup CPU s; per generator wall)"
t_rounds=$EPOCHREALTIME
for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        cfg=${configs[$(((r - 1 + k) % n))]}
        between_runs
        start_config "$cfg"
        foreign=$(foreign_attachments "${floor_pid:-$agent_pid}")
        if [[ $cfg == slowpath ]]; then
            scrape "$work/m0"
            scraper &
            scraper_pid=$!
        fi
        holder=${floor_pid:-$agent_pid}
        [[ -z $holder ]] || { stats_on; kern_snapshot "$holder" >"$work/k0"; }
        [[ -z $agent_pid ]] || cpu_ns "$agent_pid" >"$work/a0"
        outside_ticks >"$work/out0"
        read -r b0 st0 < <(node_ticks)
        c0=$(cg_ns)
        t0=$EPOCHREALTIME
        run_mix 1
        t1=$EPOCHREALTIME
        if [[ -n $holder ]]; then
            kern_snapshot "$holder" >"$work/k1"
            stats_off
            ak="-"
            [[ -z $agent_pid ]] || ak=$(( $(cpu_ns "$agent_pid") - $(cat "$work/a0") ))
            # "round cfg ns runs sys_enter_runs agent_ns wall_s"
            paste -d' ' "$work/k0" "$work/k1" | awk -v r="$r" -v c="$cfg" -v ak="$ak" -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '{
                printf "%d %s %d %d %d %s %.2f\n", r, c, $4 - $1, $5 - $2, $6 - $3, ak, w }' >>"$work/kern"
        fi
        c1=$(cg_ns)
        read -r b1 st1 < <(node_ticks)
        outside_ticks >"$work/out1"
        own="- - - -" scr="- -"
        if [[ $cfg == slowpath ]]; then
            kill -TERM "$scraper_pid"
            wait "$scraper_pid" 2>/dev/null || true
            scraper_pid=""
            scrape "$work/m1"
            grep -q "^slowpath_probe_run_seconds_total{.*method=\"$COST_METHOD\"" "$work/m1" ||
                die "the agent's run seconds are not method=\"$COST_METHOD\" (COST_METHOD)"
            # Own cost: process CPU + probes' run seconds + the syscall
            # hook's dispatch (tracepoints only). A probe with no
            # run seconds at the start (the first statistics window is still
            # to come) had its runs until then charged at the time per run
            # its first window measured: take that out.
            own=$(awk 'FNR == 1 { f++ }
                /^process_cpu_seconds_total / { pc[f] = $2 }
                /^slowpath_probe_runs_total\{/ { match($0, /probe="[^"]*"/); p = substr($0, RSTART + 7, RLENGTH - 8); runs[f, p] = $NF }
                /^slowpath_probe_run_seconds_total\{/ { match($0, /probe="[^"]*"/); p = substr($0, RSTART + 7, RLENGTH - 8); sec[f, p] = $NF; have[f, p] = 1; probes[p] = 1 }
                /^slowpath_probe_dispatch_seconds_total\{/ { dsp[f] += $NF }
                END { for (p in probes) {
                        s0 = sec[1, p]
                        if (!have[1, p] && runs[2, p] > 0) s0 = runs[1, p] * sec[2, p] / runs[2, p]
                        ps += sec[2, p] - s0; np++ }
                    a = pc[2] - pc[1]; d = dsp[2] - dsp[1]
                    # no statistics window yet (a run under ~10 s): no own cost
                    if (np) printf "%.4f %.4f %.4f %.4f", a + ps + d, a, ps, d; else printf "- %.4f - -", a }' "$work/m0" "$work/m1")
            # Per-probe runs and run seconds over the run.
            awk -v r="$r" 'FNR == 1 { f++ }
                /^slowpath_probe_runs_total\{/ { match($0, /probe="[^"]*"/); p = substr($0, RSTART + 7, RLENGTH - 8); runs[f, p] = $NF; probes[p] = 1 }
                /^slowpath_probe_run_seconds_total\{/ { match($0, /probe="[^"]*"/); p = substr($0, RSTART + 7, RLENGTH - 8); sec[f, p] = $NF; have[f, p] = 1 }
                END { for (p in probes) {
                        s0 = sec[1, p]
                        if (!have[1, p] && runs[2, p] > 0) s0 = runs[1, p] * sec[2, p] / runs[2, p]
                        printf "%s %s %d %.6f %d\n", r, p, runs[2, p] - runs[1, p], have[2, p] ? sec[2, p] - s0 : -1, have[2, p] } }' \
                "$work/m0" "$work/m1" >>"$work/probes"
            grep '^slowpath_probe_attached{' "$work/m1" >"$work/attached"
            cp "$work/agent.log" "$work/agent.last.log"
            nscr=$(sed -n 1p "$work/scrapes")
            read -r cu cs < <(sed -n 3p "$work/scrapes")
            scr="$nscr $(awk -v u="${cu%s}" -v s="${cs%s}" 'BEGIN { m = index(u, "m"); n = index(s, "m")
                printf "%.3f", substr(u, 1, m - 1) * 60 + substr(u, m + 1) + substr(s, 1, n - 1) * 60 + substr(s, n + 1) }')"
        fi
        stop_config
        awk -v r="$r" -v c="$cfg" -v b="$((b1 - b0))" -v st="$((st1 - st0))" -v hz="$hz" -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
            -v cgns="$((c1 - c0))" -v f="$foreign" -v own="$own" -v scr="$scr" -v have_cg="${cg_kind:+1}" 'BEGIN {
            printf "%d %s %.2f %.2f %s %.2f %d %s %s\n", r, c, b / hz, w, have_cg ? sprintf("%.3f", cgns / 1e9) : "-", st / hz, f, own, scr }' >>"$work/results"
        tail -1 "$work/results" | awk -v g="$(cat "$work/gens_line")" -v o="$(outside_top "$work/out0" "$work/out1")" '{
            printf "round %d %-8s node %6.2f s  wall %5.2f s  cgroup %7s s%s%s |%s\n", $1, $2, $3, $4, $5,
                ($6 > 0 ? sprintf("  steal %.2f s", $6) : ""), ($7 > 0 ? sprintf("  FOREIGN BPF: %d", $7) : ""), g
            if ($5 != "-") printf "        outside the cgroup %.2f s; most: %s\n", $3 - $5, o }'
    done
done
t_total=$(awk -v a="$t_rounds" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')

# --- summary -------------------------------------------------------------------------------
# Median and quartiles (nearest rank) of numbers on stdin: "median q1 q3 min max".
stats() {
    sort -g | awk '{ a[NR] = $1 } END {
        if (NR == 0) { print "nan nan nan nan nan"; exit }
        m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        lo = int(NR / 4 + 0.75); hi = int(3 * NR / 4 + 0.75); if (lo < 1) lo = 1
        print m, a[lo], a[hi], a[1], a[NR] }'
}
col() { awk -v c="$1" -v k="$2" '$2 == c && $k != "-" { print $k }' "$work/results"; }
# Per-round differences of column $2 between configuration $1 and $3 (default none).
diffs() {
    awk -v c="$1" -v k="$2" -v base="${3:-none}" '$2 == base { b[$1] = $k } $2 == c { v[$1] = $k }
        END { for (r in v) if ((r in b) && v[r] != "-" && b[r] != "-") print v[r] - b[r] }' "$work/results"
}

echo
echo "== node CPU per run (/proc/stat, user+nice+system+irq+softirq+steal): median [q1..q3] (min..max) over $ROUNDS rounds"
printf '%-9s %-37s %-21s %10s   %-25s %s\n' config "node CPU s" "wall s" "us/request" "cgroup CPU s" "outside s"
for c in "${configs[@]}"; do
    read -r m q1 q3 lo hi < <(col "$c" 3 | stats)
    read -r wm wq1 wq3 _ _ < <(col "$c" 4 | stats)
    read -r gm gq1 gq3 _ _ < <(col "$c" 5 | stats)
    read -r om _ _ _ _ < <(awk -v c="$c" '$2 == c && $5 != "-" { print $3 - $5 }' "$work/results" | stats)
    printf '%-9s %6.2f [%6.2f..%6.2f] (%6.2f..%6.2f)  %5.2f [%5.2f..%5.2f]  %10.2f   %6s [%s..%s]  %s\n' "$c" "$m" "$q1" "$q3" "$lo" "$hi" \
        "$wm" "$wq1" "$wq3" "$(awk -v m="$m" -v u="$units" 'BEGIN { print 1e6 * m / u }')" "$gm" "$gq1" "$gq3" "$om"
done
[[ -z $cg ]] || echo "(cgroup: everything the benchmark started, cpuacct, exact; outside: node - cgroup, median: kernel threads and others)"
read -r nm nq1 nq3 nlo nhi < <(col none 3 | stats)
awk -v m="$nm" -v q1="$nq1" -v q3="$nq3" -v lo="$nlo" -v hi="$nhi" 'BEGIN {
    printf "noise of none over the rounds: interquartile %.1f%%, range %.1f%% of its median\n", 100 * (q3 - q1) / m, 100 * (hi - lo) / m }'
awk '{ s[$2] += $6 } END { for (c in s) if (s[c] > 0) printf "steal included above: %s %.2f s in all\n", c, s[c] }' "$work/results"

echo
echo "== added CPU over none: median of the per-round differences [q1..q3]"
declare -A add noisy
for c in floor slowpath; do
    read -r m q1 q3 _ _ < <(diffs "$c" 3 | stats)
    add[$c]=$m
    # quartiles on both sides of 0: the rounds disagree on the sign
    noisy[$c]=$(awk -v a="$q1" -v b="$q3" 'BEGIN { print (a <= 0 && b >= 0) ? 1 : 0 }')
    read -r gm gq1 gq3 _ _ < <(diffs "$c" 5 | stats)
    awk -v c="$c" -v m="$m" -v q1="$q1" -v q3="$q3" -v n="$nm" -v u="$units" -v gm="$gm" -v gq1="$gq1" -v gq3="$gq3" -v have_cg="${cg_kind:+1}" 'BEGIN {
        printf "%-9s node %+7.2f s [%+.2f..%+.2f] = %+.2f%% of none, %+.2f us/request", c, m, q1, q3, 100 * m / n, 1e6 * m / u
        if (have_cg) printf ";  cgroup %+.2f s [%+.2f..%+.2f]", gm, gq1, gq3
        if (q1 <= 0 && q3 >= 0) printf "  (within the noise)"
        printf "\n" }'
done
read -r sf sfq1 sfq3 _ _ < <(diffs slowpath 3 floor | stats)
printf '%-9s node %+7.2f s [%+.2f..%+.2f] over floor\n' slowpath "$sf" "$sfq1" "$sfq3"
mark() { awk "BEGIN { exit !($1) }" && echo PASS || echo FAIL; }
echo
echo "== targets (informational)"
ratio=$(awk -v s="${add[slowpath]}" -v f="${add[floor]}" 'BEGIN { if (f > 0) printf "%.2f", s / f; else print "nan" }')
if [[ $ratio == nan ]]; then
    printf '  %-70s %s\n' "slowpath added ${add[slowpath]} s / floor added ${add[floor]} s <= 1.1" "n/a (the floor added nothing measurable)"
elif (( noisy[floor] || noisy[slowpath] )); then
    printf '  %-70s %s\n' "slowpath added ${add[slowpath]} s = ${ratio}x the floor's ${add[floor]} s <= 1.1x" "n/a (within the noise)"
else
    printf '  %-70s %s\n' "slowpath added ${add[slowpath]} s = ${ratio}x the floor's ${add[floor]} s <= 1.1x" "$(mark "$ratio <= 1.1")"
fi

echo
echo "== slowpath's own-cost metric per run (increase of sum(slowpath_probe_run_seconds_total) +"
echo "   sum(slowpath_probe_dispatch_seconds_total) + process_cpu_seconds_total) against the added CPU measured"
echo "   end to end in the same round (slowpath - none, and slowpath - floor); the run seconds are without the"
echo "   statistics' own clock reads, the dispatch is the syscall tracepoint path the agent timed at start"
printf '%-6s %10s %10s %10s %10s %12s %8s %12s %8s\n' round "own s" "agent s" "probes s" "dispatch s" "e2e s" "own/e2e" "over floor" "own/that"
for ((r = 1; r <= ROUNDS; r++)); do
    awk -v r="$r" '$1 == r { v[$2] = $3; if ($2 == "slowpath") { o = $8; a = $9; p = $10; d = $11 } }
        END { e = v["slowpath"] - v["none"]; g = v["slowpath"] - v["floor"]
            printf "%-6d %10s %10.3f %10s %10s %+12.2f %8s %+12.2f %8s\n", r, (o == "-" ? o : sprintf("%.3f", o)), a, (p == "-" ? p : sprintf("%.3f", p)),
                (d == "-" ? d : sprintf("%.3f", d)), e, (e > 0 && o != "-" ? sprintf("%.2f", o / e) : "-"), g, (g > 0 && o != "-" ? sprintf("%.2f", o / g) : "-") }' "$work/results"
done | tee "$work/own"
read -r om _ _ _ _ < <(awk '$2 != "-" { print $2 }' "$work/own" | stats)
read -r orat oq1 oq3 _ _ < <(awk '$7 != "-" { print $7 }' "$work/own" | stats)
own_e2e=$(awk -v o="$om" -v e="${add[slowpath]}" 'BEGIN { if (e > 0 && o != "nan") printf "%.2f", o / e; else print "nan" }')
printf '  median own %.3f s against median e2e %+.2f s: %s (per-round own/e2e median %s [%s..%s])\n' "$om" "${add[slowpath]}" "$own_e2e" "$orat" "$oq1" "$oq3"
if [[ $own_e2e == nan ]]; then
    printf '  %-70s %s\n' "own-cost metric within 20% of the end-to-end added CPU" "n/a (no added CPU measured, or no own cost)"
elif (( noisy[slowpath] )); then
    printf '  %-70s %s\n' "own-cost metric = ${own_e2e}x the end-to-end added CPU, within 20%" "n/a (end to end within the noise)"
else
    printf '  %-70s %s\n' "own-cost metric = ${own_e2e}x the end-to-end added CPU, within 20%" "$(mark "$own_e2e >= 0.8 && $own_e2e <= 1.2")"
fi

# --- in kernel ---------------------------------------------------------------------------------
# The empty program's time per run (median over the floor's runs): nearly
# all of it the statistics' two clock reads; the dispatch per syscall from
# the calibration.
read -r floor_npr _ _ _ _ < <(awk '$2 == "floor" && $4 > 0 { print $3 / $4 }' "$work/kern" | stats)
read -r g_none _ _ _ _ < <(awk '$2 == "none" { print $3 }' "$work/cal" | stats)
read -r g_floor _ _ _ _ < <(awk '$2 == "floor" { print $3 }' "$work/cal" | stats)
dispatch_ns=$(awk -v f="$g_floor" -v n="$g_none" 'BEGIN { printf "%.1f", f - n }')
# sys_enter as a tracepoint (tp_btf, raw_tp): every syscall pays the dispatch
sys_tp=$(grep '^slowpath_probe_attached{' "$work/attached" | grep 'probe="sys_enter"' | grep -v 'attach_type="fentry"' | awk '$NF == 1' | wc -l)
echo
echo "== in kernel per unit of work (request or transaction; the kernel's run-time statistics on for every run of"
echo "   both configurations around each run, so both include the statistics' two clock reads per run): median [q1..q3] (min..max)"
awk -v u="$units" '$2 == "floor" { f[$1] = $3 / u } $2 == "slowpath" { s[$1] = $3 / u }
    END { for (r in s) if (r in f) printf "%d %.2f %.2f %.3f\n", r, f[r], s[r], s[r] / f[r] }' "$work/kern" | sort -n >"$work/perunit"
read -r fm fq1 fq3 flo fhi < <(awk '{ print $2 }' "$work/perunit" | stats)
read -r sm sq1 sq3 slo shi < <(awk '{ print $3 }' "$work/perunit" | stats)
read -r km kq1 kq3 klo khi < <(awk '{ print $4 }' "$work/perunit" | stats)
printf '  empty programs  %8.1f ns [%.1f..%.1f] (%.1f..%.1f)\n' "$fm" "$fq1" "$fq3" "$flo" "$fhi"
printf '  slowpath        %8.1f ns [%.1f..%.1f] (%.1f..%.1f)\n' "$sm" "$sq1" "$sq3" "$slo" "$shi"
printf '  slowpath / empty programs, per round: %.2fx [%.2f..%.2f] (%.2f..%.2f)\n' "$km" "$kq1" "$kq3" "$klo" "$khi"
printf '  (the empty program: %.1f ns per run; runs per unit: %s)\n' "$floor_npr" \
    "$(awk -v u="$units" '$2 == "floor" { f = f " " sprintf("%.1f", $4 / u) } $2 == "slowpath" { s = s " " sprintf("%.1f", $4 / u) } END { printf "empty programs%s, slowpath%s", f, s }' "$work/kern")"
printf '  %-70s %s\n' "slowpath's in-kernel time per unit = ${km}x the empty programs' <= 1.3x" "$(mark "$km <= 1.3")"

echo
echo "== slowpath's own-cost metric, part by part, against this script's own readings (s per run)"
echo "   programs: the increase of sum(slowpath_probe_run_seconds_total{method=\"$COST_METHOD\"}), against the kernel's run time of the"
echo "     agent's programs (bpftool) less their runs at the empty program's time per run ($(printf %.1f "$floor_npr") ns)"
echo "   agent: process_cpu_seconds_total (ticks) against the agent's threads' schedstat (ns)"
echo "   dispatch: slowpath_probe_dispatch_seconds_total against the sys_enter runs (bpftool) x the empty"
echo "     programs' dispatch per syscall: getppid $(printf %.1f "$g_floor") - $(printf %.1f "$g_none") ns = $dispatch_ns ns (the statistics off)"
echo "     ($( ((sys_tp)) && echo "sys_enter is a tracepoint here" || echo "sys_enter is fentry here: no dispatch"))"
printf '%-6s %19s %19s %19s %10s %9s %9s\n' round "programs met/indep" "agent met/indep" "dispatch met/indep" "all-in s" "own/CPU" "floor/CPU"
awk -v npr="$floor_npr" -v dns="$dispatch_ns" -v tp="$sys_tp" 'NR == FNR { if ($2 == "slowpath") { kn[$1] = $3; kr[$1] = $4; ks[$1] = $5; ka[$1] = $6; w[$1] = $7 } next }
    $2 == "slowpath" && ($1 in kn) && $10 != "-" {
        r = $1; pi = (kn[r] - kr[r] * npr) / 1e9; ai = ka[r] / 1e9; di = tp ? ks[r] * dns / 1e9 : 0
        printf "%-6d %9.3f /%8.3f %9.3f /%8.3f %9.3f /%8.3f %10.3f %9.4f %9.4f\n", r, $10, pi, $9, ai, $11, di, pi + ai + di,
            ($10 + $9) / w[r], $11 / w[r] }' "$work/kern" "$work/results" | tee "$work/parts"
part() { # column of the metric, column of the independent reading: median ratio [q1..q3]
    awk -v a="$1" -v b="$2" '{ gsub("/", " ") } $b > 0 { print $a / $b }' "$work/parts" | stats
}
for k in "programs 2 3" "agent 4 5" "dispatch 6 7"; do
    read -r name a b <<<"$k"
    read -r pm pq1 pq3 _ _ < <(part "$a" "$b")
    if [[ $pm == nan ]]; then
        printf '  %-70s %s\n' "own-cost metric's $name part against its own reading" "n/a (nothing to compare)"
    else
        printf '  %-70s %s\n' "own-cost metric's $name part = ${pm}x [$pq1..$pq3] its own reading, within 20%" "$(mark "$pm >= 0.8 && $pm <= 1.2")"
    fi
done
read -r am aq1 aq3 _ _ < <(awk '{ gsub("/", " ") } { print $8 }' "$work/parts" | stats)
read -r nm_cpu _ _ _ _ < <(col slowpath 3 | stats)
printf '  composed all-in (programs beyond the empty program + agent + dispatch): %.3f s per run [%.3f..%.3f] = %.2f%% of the node CPU, %.2f us/unit\n' \
    "$am" "$aq1" "$aq3" "$(awk -v a="$am" -v n="$nm_cpu" 'BEGIN { print 100 * a / n }')" "$(awk -v a="$am" -v u="$units" 'BEGIN { print 1e6 * a / u }')"
read -r om_cpu oq1_cpu oq3_cpu _ _ < <(awk '{ gsub("/", " ") } { print $9 }' "$work/parts" | stats)
read -r fl_cpu flq1 flq3 _ _ < <(awk '{ gsub("/", " ") } { print $10 }' "$work/parts" | stats)
# The alert's threshold as the chart ships it, a share of the node's CPUs.
own_share_max=$(awk '$1 == "ownCpuShareOfNode:" { print $2 }' "$here/../../deploy/helm/slowpath/values.yaml")
own_share=$(awk -v c="$om_cpu" -v n="$(nproc)" 'BEGIN { printf "%.4f", c / n }')
printf '  %-70s %s\n' "own part ${om_cpu} [$oq1_cpu..$oq3_cpu] of one CPU, $own_share of the node's $(nproc) <= $own_share_max: SlowpathOverheadHigh silent" \
    "$(mark "$own_share <= $own_share_max")"
printf '  %-70s %s\n' "attach type's floor ${fl_cpu} [$flq1..$flq3] of one CPU (SlowpathDispatchFloorHigh above 0.05)" \
    "$(awk -v f="$fl_cpu" 'BEGIN { print (f > 0.05 ? "fires (info): the fix is fentry" : "silent") }')"

echo
echo "== slowpath's programs per run (slowpath_probe_runs_total, slowpath_probe_run_seconds_total): median over $ROUNDS runs"
printf '%-22s %14s %12s %10s\n' probe runs "run s" "ns/run"
for p in $(awk '{ print $2 }' "$work/probes" | sort -u); do
    read -r rm _ _ _ _ < <(awk -v p="$p" '$2 == p { print $3 }' "$work/probes" | stats)
    read -r sm _ _ _ _ < <(awk -v p="$p" '$2 == p && $5 == 1 { print $4 }' "$work/probes" | stats)
    awk -v p="$p" -v r="$rm" -v s="$sm" 'BEGIN { printf "%-22s %14d %12s %10s\n", p, r, (s == "nan" ? "-" : sprintf("%.4f", s)),
        (s == "nan" || r == 0 ? "-" : sprintf("%.1f", 1e9 * s / r)) }'
done
echo "attach types (slowpath_probe_attached, last run):"
sed 's/^slowpath_probe_attached/  /' "$work/attached"
grep -m1 'refused this attach plan' "$work/agent.last.log" | sed 's/^.*INFO /  agent log: /' | cut -c1-160 || true
awk '$2 == "slowpath" { n += $12; s += $13; k++ } END { if (k) printf "scrapes during the slowpath runs: %d in %d runs; the curl client used %.3f s CPU in all (in the node figure; Prometheus would be elsewhere)\n", n, k, s }' "$work/results"
awk '$7 > 0 { f++ } END { if (f) printf "WARNING: %d runs had tracing attachments of others on the node (FOREIGN BPF above)\n", f }' "$work/results"

echo
echo "== cpu: $(cpu_model), $(nproc) CPUs; kernel $(uname -r)"
mitigations
echo "rounds took $t_total s"
