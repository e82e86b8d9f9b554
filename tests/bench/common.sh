# Shell helpers shared by the benchmarks (sourced by run.sh and hotpath.sh).

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
