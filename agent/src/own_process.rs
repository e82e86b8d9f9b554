//! The agent's own process metrics, with the names and meanings of the
//! Prometheus client libraries' process collector (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, ...), read from `/proc/self` at scrape time
//! with the `procfs` crate.
//!
//! Why not the `prometheus` crate's `ProcessCollector`: it divides the clock
//! ticks of `utime + stime` by `CLK_TCK` in integers, so
//! `process_cpu_seconds_total` moves in whole seconds (an agent using 0.3 % of
//! a core reads 0 for minutes, then a step of 1 s), and it truncates
//! `process_start_time_seconds` to the second. Here both keep their fraction:
//! the CPU time is exact to one clock tick (1/`CLK_TCK` s, 10 ms with the
//! usual 100), as the kernel keeps it in `/proc/self/stat`.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use crate::exposition::{counter, family, gauge, Family};

const CPU_SECONDS: Family = Family {
    name: "process_cpu_seconds_total",
    help: "Total user and system CPU time spent in seconds (utime + stime of /proc/self/stat, exact to one clock tick)",
    kind: MetricType::COUNTER,
};
const OPEN_FDS: Family = Family {
    name: "process_open_fds",
    help: "Number of open file descriptors (/proc/self/fd)",
    kind: MetricType::GAUGE,
};
const MAX_FDS: Family = Family {
    name: "process_max_fds",
    help: "Maximum number of open file descriptors (the soft RLIMIT_NOFILE of /proc/self/limits)",
    kind: MetricType::GAUGE,
};
const VIRTUAL_MEMORY: Family = Family {
    name: "process_virtual_memory_bytes",
    help: "Virtual memory size in bytes (vsize of /proc/self/stat)",
    kind: MetricType::GAUGE,
};
const RESIDENT_MEMORY: Family = Family {
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes (rss of /proc/self/stat times the page size)",
    kind: MetricType::GAUGE,
};
const START_TIME: Family = Family {
    name: "process_start_time_seconds",
    help: "Start time of the process since the Unix epoch in seconds (boot time plus starttime of /proc/self/stat)",
    kind: MetricType::GAUGE,
};
const THREADS: Family = Family {
    name: "process_threads",
    help: "Number of OS threads in the process (num_threads of /proc/self/stat)",
    kind: MetricType::GAUGE,
};

const FAMILIES: [&Family; 7] = [
    &CPU_SECONDS,
    &OPEN_FDS,
    &MAX_FDS,
    &VIRTUAL_MEMORY,
    &RESIDENT_MEMORY,
    &START_TIME,
    &THREADS,
];

/// The collector of the agent's own process metrics (see the module docs).
pub struct OwnProcessCollector {
    descs: Vec<Desc>,
}

impl OwnProcessCollector {
    /// Errors: only a family description the prometheus crate refuses (a
    /// programming error; the names are constants).
    pub fn new() -> prometheus::Result<Self> {
        let descs = FAMILIES
            .iter()
            .map(|f| Desc::new(f.name.into(), f.help.into(), vec![], Default::default()))
            .collect::<prometheus::Result<_>>()?;
        Ok(Self { descs })
    }
}

/// Seconds from clock ticks (`/proc/<pid>/stat` units).
fn ticks_to_seconds(ticks: u64, per_second: u64) -> f64 {
    ticks as f64 / per_second.max(1) as f64
}

impl Collector for OwnProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    /// A family whose source cannot be read is left out of this scrape (as
    /// the client libraries do): the others still are served.
    fn collect(&self) -> Vec<MetricFamily> {
        let Ok(me) = procfs::process::Process::myself() else {
            return Vec::new();
        };
        let tps = procfs::ticks_per_second();
        let mut out = Vec::with_capacity(FAMILIES.len());
        if let Ok(stat) = me.stat() {
            let cpu = ticks_to_seconds(stat.utime + stat.stime, tps);
            out.push(family(&CPU_SECONDS, vec![counter(&[], cpu)]));
            out.push(family(&VIRTUAL_MEMORY, vec![gauge(&[], stat.vsize as f64)]));
            let rss = stat.rss as f64 * procfs::page_size() as f64;
            out.push(family(&RESIDENT_MEMORY, vec![gauge(&[], rss)]));
            out.push(family(&THREADS, vec![gauge(&[], stat.num_threads as f64)]));
            if let Ok(boot) = procfs::boot_time_secs() {
                let start = boot as f64 + ticks_to_seconds(stat.starttime, tps);
                out.push(family(&START_TIME, vec![gauge(&[], start)]));
            }
        }
        if let Ok(n) = me.fd_count() {
            out.push(family(&OPEN_FDS, vec![gauge(&[], n as f64)]));
        }
        if let Ok(limits) = me.limits() {
            if let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit {
                out.push(family(&MAX_FDS, vec![gauge(&[], max as f64)]));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(families: &[MetricFamily], name: &str) -> f64 {
        let f = families.iter().find(|f| f.name() == name).expect(name);
        let m = &f.get_metric()[0];
        if f.get_field_type() == MetricType::COUNTER {
            m.get_counter().get_value()
        } else {
            m.get_gauge().get_value()
        }
    }

    /// Burns CPU in this process, then holds the counter against the
    /// kernel's own `utime + stime` read right after: the same figure to a
    /// clock tick, with its fraction (the crate's collector gave whole seconds).
    #[test]
    fn cpu_seconds_match_the_kernels_utime_plus_stime() {
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed().as_millis() < 300 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let families = OwnProcessCollector::new().unwrap().collect();
        let stat = procfs::process::Process::myself().unwrap().stat().unwrap();
        let kernel = (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64;
        let ours = value(&families, "process_cpu_seconds_total");
        assert!((ours - kernel).abs() <= 0.05, "ours {ours} kernel {kernel}");
        assert!(ours >= 0.2, "300 ms of work read as {ours} s");
        assert!(ours.fract() != 0.0 || kernel.fract() == 0.0, "{ours}");
    }

    #[test]
    fn every_family_is_served_with_sane_values() {
        let families = OwnProcessCollector::new().unwrap().collect();
        assert_eq!(families.len(), FAMILIES.len());
        assert!(value(&families, "process_threads") >= 1.0);
        assert!(value(&families, "process_resident_memory_bytes") > 1e6);
        assert!(value(&families, "process_open_fds") >= 3.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value(&families, "process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0,
            "{start} vs {now}"
        );
    }
}
