# Shell helpers shared by the benchmarks (sourced by run.sh and hotpath.sh).

# A TCP port nothing listens on, for an agent of the benchmark (die() is the
# sourcing script's).
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 40000))
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
