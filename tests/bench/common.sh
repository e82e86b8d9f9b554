# Shell helpers shared by the benchmarks (sourced by run.sh, hotpath.sh and busynode.sh).

# A TCP port nothing listens on, for an agent of the benchmark (die() is the
# sourcing script's), below the kernel's ephemeral range: a port in it can be
# taken by a load generator's outgoing connection before the agent binds.
free_port() {
    local p low
    low=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    (( low > 11000 )) || low=32768
    for _ in $(seq 100); do
        p=$((10000 + RANDOM % (low - 10000)))
        [[ -z $(ss -Htln "sport = :$p") ]] && { echo "$p"; return; }
    done
    die "no free port found"
}

# The CPU model: absolute ns depend on it and on its mitigations.
cpu_model() {
    local m
    m=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    [[ -n $m ]] || m=$(lscpu 2>/dev/null | awk -F': +' '/^Model name/ { print $2; exit }')
    echo "$m"
}

# The CPU's mitigations, one per line (AMD's SRSO "Safe RET" makes every
# call and return inside a BPF program expensive).
mitigations() {
    local f
    for f in /sys/devices/system/cpu/vulnerabilities/*; do
        [[ -r $f ]] && printf '  %-28s %s\n' "${f##*/}" "$(cat "$f")"
    done
}

# Append the ids of the BPF programs process PID holds to FILE, so that the
# cleanup can check they are gone.
note_prog_ids() {
    grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{ print $2 }' >>"$2" || true
}

# Whether every BPF program whose id FILE lists is gone (the kernel frees a
# program asynchronously after its last descriptor closes: waits up to 5 s);
# says which are left, or that all are gone. Returns 1 when some are left.
programs_gone() {
    local file=$1 left="" id
    [[ -s $file ]] || return 0
    for _ in $(seq 50); do
        left=""
        for id in $(sort -un "$file"); do
            bpftool prog show id "$id" >/dev/null 2>&1 && left+=" $id"
        done
        [[ -z $left ]] && break
        sleep 0.1
    done
    if [[ -n $left ]]; then
        echo "cleanup: BPF programs still loaded:$left" >&2
        return 1
    fi
    echo "cleanup: all $(sort -un "$file" | wc -l) BPF programs loaded by the benchmark are gone"
}

# "id name run_time_ns run_cnt" of every BPF program process $1 holds: the
# kernel's run-time statistics (bpf_prog_info), read by bpftool.
prog_run_stats() {
    local id
    for id in $(grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{ print $2 }' | sort -un); do
        bpftool prog show id "$id" 2>/dev/null | awk -v id="$id" 'NR == 1 { for (i = 1; i <= NF; i++) {
            if ($i == "name") n = $(i + 1); if ($i == "run_time_ns") t = $(i + 1); if ($i == "run_cnt") c = $(i + 1) }
            print id, (n == "" ? "-" : n), t + 0, c + 0 }'
    done
}

# CPU ns of process $1's threads so far (schedstat: exact, where utime and
# stime are sampled at the clock tick).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d", s }'; }
