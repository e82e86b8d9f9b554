//! The CPU a yielding process burns, measured on the live process: most of a
//! spin is user time between the yields, which no syscall count shows. Its
//! threads' run time is read twice, [`SAMPLE`] apart, from
//! `/proc/<pid>/task/<tid>/schedstat` through procfs (the scheduler's
//! `sum_exec_runtime`, in ns: exact, where `/proc/<pid>/stat` has 10 ms
//! ticks).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::finding::Finding;

/// How long the CPU is sampled: one pause for all the processes of a
/// finding (the findings run on their own thread, off the scrape path).
pub const SAMPLE: Duration = Duration::from_millis(200);
/// Processes of a finding whose CPU is sampled.
const MAX_PROCESSES: usize = 5;
/// A thread counted as spinning: at least this share of a CPU in the sample.
const BUSY_THREAD_CORES: f64 = 0.5;

/// Each thread's run time so far, in ns, by tid (`None`: the process is
/// gone); a thread that exits between the listing and its read is skipped.
pub fn thread_runtimes(pid: u32) -> Option<BTreeMap<u32, u64>> {
    let tasks = procfs::process::Process::new(pid as i32)
        .ok()?
        .tasks()
        .ok()?;
    let runtimes = tasks
        .flatten()
        .filter_map(|task| Some((task.tid as u32, task.schedstat().ok()?.sum_exec_runtime)))
        .collect();
    Some(runtimes)
}

/// What two readings `secs` apart say: the process's CPU (cores) and its
/// threads that ran at least [`BUSY_THREAD_CORES`] (threads present in both).
pub fn cores_between(
    before: &BTreeMap<u32, u64>,
    after: &BTreeMap<u32, u64>,
    secs: f64,
) -> (f64, usize) {
    let shares = after.iter().filter_map(|(tid, &ns)| {
        let was = *before.get(tid)?;
        Some(ns.saturating_sub(was) as f64 / 1e9 / secs)
    });
    shares.fold((0.0, 0), |(total, busy), share| {
        (
            total + share,
            busy + usize::from(share >= BUSY_THREAD_CORES),
        )
    })
}

/// Add each live process's measured CPU (`cpu_cores`, `spinning_threads`,
/// `estimated_cpu_percent`) to a yield-spin finding.
pub fn enrich(finding: &mut Finding) {
    let live: Vec<(usize, BTreeMap<u32, u64>)> = finding
        .processes
        .iter()
        .take(MAX_PROCESSES)
        .enumerate()
        .filter(|(_, p)| p.pid != 0)
        .filter_map(|(idx, p)| Some((idx, thread_runtimes(p.pid)?)))
        .collect();
    if live.is_empty() {
        return;
    }
    let start = Instant::now();
    std::thread::sleep(SAMPLE);
    for (idx, before) in live {
        let p = &mut finding.processes[idx];
        let Some(after) = thread_runtimes(p.pid) else {
            continue;
        };
        let (cores, busy) = cores_between(&before, &after, start.elapsed().as_secs_f64());
        p.detail.insert("cpu_cores".into(), cores);
        p.detail.insert("spinning_threads".into(), busy as f64);
        p.detail
            .insert("estimated_cpu_percent".into(), cores * 100.0);
    }
    if let Some(p) = finding.processes.first() {
        if let Some(&cores) = p.detail.get("cpu_cores") {
            finding.title = super::title(&p.identity.comm, p.per_second, Some(cores));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_thread_reads_as_a_core_and_this_process_as_itself() {
        let before = BTreeMap::from([(1, 0), (2, 5_000_000), (3, 7)]);
        let after = BTreeMap::from([(1, 200_000_000), (2, 5_000_000), (4, 9)]);
        let (cores, busy) = cores_between(&before, &after, 0.2);
        assert!((cores - 1.0).abs() < 1e-9, "{cores}");
        assert_eq!(busy, 1);
        let mine = thread_runtimes(std::process::id()).unwrap();
        assert!(mine.values().any(|&ns| ns > 0), "{mine:?}");
        assert!(thread_runtimes(u32::MAX >> 1).is_none());
    }
}
