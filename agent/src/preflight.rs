//! Checks made before anything is attached, each failing with one line that
//! says the cause and the fix.

use std::fs;
use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{anyhow, bail, Result};
use tracing::warn;

/// Capability numbers (include/uapi/linux/capability.h).
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const CAP_CHECKPOINT_RESTORE: u32 = 40;

/// Parse `--web.listen-address`: `:PORT` (every IPv4 address), `HOST:PORT`,
/// `[V6]:PORT`.
pub fn parse_listen_address(s: &str) -> Result<SocketAddr> {
    let bad = || {
        anyhow!(
            "bad --web.listen-address {s:?}: expected [HOST]:PORT, e.g. :9891 or 127.0.0.1:9891"
        )
    };
    let with_host = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    let (_, port) = with_host.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    with_host
        .to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)
}

/// Effective capability set of this process, from /proc/self/status.
fn effective_caps() -> Result<u64> {
    let status = fs::read_to_string("/proc/self/status")?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .ok_or_else(|| anyhow!("no CapEff line in /proc/self/status"))?;
    Ok(u64::from_str_radix(hex.trim(), 16)?)
}

/// Names of the capabilities missing to load and attach tracing programs:
/// CAP_BPF and CAP_PERFMON (kernel 5.8+), or CAP_SYS_ADMIN.
pub fn missing_capabilities(caps: u64) -> Vec<&'static str> {
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return vec![];
    }
    let mut missing = vec![];
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// Names of the capabilities missing to symbolize the stacks of processes
/// of other users: CAP_SYS_PTRACE (to read their /proc/PID/maps), and to
/// open their binaries through /proc/PID/map_files (how containers' own
/// binaries are reached) CAP_DAC_READ_SEARCH (the directory is mode 0500,
/// owned by the process's user) and CAP_CHECKPOINT_RESTORE (kernel 5.9+) or
/// CAP_SYS_ADMIN (fs/proc/base.c, proc_map_files_get_link()).
pub fn missing_symbolization_capabilities(caps: u64) -> Vec<&'static str> {
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    let mut missing = vec![];
    if !has(CAP_SYS_PTRACE) {
        missing.push("CAP_SYS_PTRACE");
    }
    if !has(CAP_DAC_READ_SEARCH) {
        missing.push("CAP_DAC_READ_SEARCH");
    }
    if !has(CAP_CHECKPOINT_RESTORE) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_CHECKPOINT_RESTORE");
    }
    missing
}

/// Warn, once, when sampled stacks will not be symbolized for lack of
/// capabilities: they then show `[no access to the process's memory map]`.
pub fn warn_if_cannot_symbolize(what: &str) {
    let missing = missing_symbolization_capabilities(effective_caps().unwrap_or(0));
    if !missing.is_empty() {
        warn!(
            missing = %missing.join(" "),
            "{what}: call sites of other users' processes cannot be symbolized without {}; \
             grant them (the container's capabilities add: [SYS_PTRACE, DAC_READ_SEARCH, \
             CHECKPOINT_RESTORE]; Helm: agent.debugCallsites adds them) or run as root",
            missing.join(", ")
        );
    }
}

/// Raise CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, and for symbolization
/// CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_CHECKPOINT_RESTORE, into the
/// effective set where
/// they are permitted but not effective: the container image gives the
/// binary these as permitted-only file capabilities (`setcap ...=p`), so
/// that exec never fails where the runtime does not grant them, and the agent
/// turns them on itself. Must run before any thread is started (capability
/// sets are per thread and inherited).
pub fn raise_permitted_capabilities() {
    use caps::{CapSet, Capability};
    for cap in [
        Capability::CAP_BPF,
        Capability::CAP_PERFMON,
        Capability::CAP_SYS_ADMIN,
        Capability::CAP_SYS_PTRACE,
        Capability::CAP_DAC_READ_SEARCH,
        Capability::CAP_CHECKPOINT_RESTORE,
    ] {
        if caps::has_cap(None, CapSet::Permitted, cap).unwrap_or(false) {
            let _ = caps::raise(None, CapSet::Effective, cap);
        }
    }
}

pub fn check_capabilities() -> Result<()> {
    raise_permitted_capabilities();
    let missing = missing_capabilities(effective_caps()?);
    if missing.is_empty() {
        return Ok(());
    }
    bail!(
        "missing capability {}: run as root, or grant CAP_BPF and CAP_PERFMON \
         (e.g. `setcap cap_bpf,cap_perfmon=p slowpath`, AmbientCapabilities= in the \
         systemd unit, or the container's capabilities add: [BPF, PERFMON]); kernels older \
         than 5.8 need CAP_SYS_ADMIN",
        missing.join(" and ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_address(":9891").unwrap(),
            "0.0.0.0:9891".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:1").unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(
            parse_listen_address("[::1]:9891").unwrap(),
            "[::1]:9891".parse().unwrap()
        );
        for bad in ["9891", ":99999", "nohost:", ":http"] {
            let err = parse_listen_address(bad).unwrap_err().to_string();
            assert!(err.contains("bad --web.listen-address"), "{bad}: {err}");
        }
    }

    #[test]
    fn capabilities_needed() {
        let bit = |c: u32| 1u64 << c;
        assert!(missing_capabilities(bit(CAP_SYS_ADMIN)).is_empty());
        assert!(missing_capabilities(bit(CAP_BPF) | bit(CAP_PERFMON)).is_empty());
        assert_eq!(missing_capabilities(bit(CAP_BPF)), vec!["CAP_PERFMON"]);
        assert_eq!(missing_capabilities(0), vec!["CAP_BPF", "CAP_PERFMON"]);
    }

    #[test]
    fn symbolization_capabilities_needed() {
        let bit = |c: u32| 1u64 << c;
        let read = bit(CAP_SYS_PTRACE) | bit(CAP_DAC_READ_SEARCH);
        assert!(missing_symbolization_capabilities(read | bit(CAP_CHECKPOINT_RESTORE)).is_empty());
        assert!(missing_symbolization_capabilities(read | bit(CAP_SYS_ADMIN)).is_empty());
        assert_eq!(
            missing_symbolization_capabilities(bit(CAP_BPF) | bit(CAP_PERFMON)),
            vec![
                "CAP_SYS_PTRACE",
                "CAP_DAC_READ_SEARCH",
                "CAP_CHECKPOINT_RESTORE"
            ]
        );
    }
}
