//! The open-files limit of a live process: the length of its close sweep.
//! A sweep loops `close(fd)` up to `sysconf(_SC_OPEN_MAX)`, which is the
//! soft `RLIMIT_NOFILE` (`Max open files` in `/proc/<pid>/limits`); a
//! forked child that sweeps has its parent's limit, and keeps it across
//! exec.

use crate::finding::Finding;

/// Processes of a finding whose limit is read (one small /proc read each).
const MAX_PROCESSES: usize = 5;

/// The soft open-files limit of `pid` (`None`: gone, or unlimited).
pub fn soft_nofile(pid: u32) -> Option<u64> {
    let limits = procfs::process::Process::new(pid as i32)
        .ok()?
        .limits()
        .ok()?;
    match limits.max_open_files.soft_limit {
        procfs::process::LimitValue::Value(n) => Some(n),
        procfs::process::LimitValue::Unlimited => None,
    }
}

/// Add each live process's soft limit (`nofile_soft_limit`), the sweeps a
/// second its closes amount to, and the CPU of one sweep when the finding
/// has the cost of a close; the title names the first one's limit.
pub fn enrich(finding: &mut Finding) {
    for p in finding.processes.iter_mut().take(MAX_PROCESSES) {
        let Some(limit) = (p.pid != 0).then(|| soft_nofile(p.pid)).flatten() else {
            continue;
        };
        describe(&mut p.detail, p.per_second, limit);
    }
    let first = finding.processes.first();
    if let Some((limit, p)) = first.and_then(|p| Some((*p.detail.get("nofile_soft_limit")?, p))) {
        finding.title = super::title(&p.identity.comm, p.per_second, Some(limit));
    }
}

/// The detail of a process sweeping at `per_second` closes with soft limit
/// `limit`: one sweep is the descriptors from 3 up to the limit.
pub fn describe(detail: &mut std::collections::BTreeMap<String, f64>, per_second: f64, limit: u64) {
    let per_sweep = limit.saturating_sub(3).max(1) as f64;
    detail.insert("nofile_soft_limit".into(), limit as f64);
    detail.insert("sweeps_per_second".into(), per_second / per_sweep);
    if let Some(cost) = detail.get("cpu_seconds_per_close").copied() {
        detail.insert("cpu_seconds_per_sweep".into(), cost * per_sweep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_limit_and_a_gone_one_none() {
        // SAFETY: getrlimit writes the struct it is given.
        let want = unsafe {
            let mut r: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
            r.rlim_cur
        };
        assert_eq!(soft_nofile(std::process::id()), Some(want));
        assert_eq!(soft_nofile(u32::MAX >> 1), None);
    }

    #[test]
    fn a_sweep_is_the_descriptors_from_3_to_the_limit() {
        let mut d = std::collections::BTreeMap::from([("cpu_seconds_per_close".into(), 1.5e-7)]);
        describe(&mut d, 2.0 * 1_048_573.0, 1_048_576);
        assert_eq!(d["sweeps_per_second"], 2.0);
        assert!((d["cpu_seconds_per_sweep"] - 0.157).abs() < 1e-3);
    }
}
