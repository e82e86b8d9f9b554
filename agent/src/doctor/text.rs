//! The doctor's report as text for a terminal.

use super::Report;
use crate::callsites;
use crate::finding::Severity;
use crate::sources::CauseBasis;

/// The report for a terminal: colour only on a TTY.
pub fn print(r: &Report, colour: bool) {
    let paint = |s: &str, code: &str| {
        if colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    println!(
        "slowpath doctor: {} (kernel {}), observed {:.0} s",
        r.node, r.kernel, r.duration_seconds
    );
    println!(
        "clocksource {} (available: {}); THP enabled={} defrag={}",
        r.clocksource["current"], r.clocksource["available"], r.thp["enabled"], r.thp["defrag"]
    );
    println!();
    if r.findings.is_empty() {
        println!(
            "{}",
            paint(
                "No findings: nothing on this node falls off the fast paths slowpath watches.",
                "32"
            )
        );
    }
    for (i, f) in r.findings.iter().enumerate() {
        let sev = match f.severity {
            Severity::Critical => paint("CRITICAL", "1;31"),
            Severity::Warning => paint("WARNING", "33"),
            Severity::Info => paint("INFO", "36"),
        };
        println!("{}. [{sev}] {}", i + 1, f.title);
        if !f.processes.is_empty() {
            println!(
                "   {:>8}  {:<16} {:>12}  WHERE",
                "PID", "COMM", "PER SECOND"
            );
            for p in f.processes.iter().take(10) {
                let place = if p.pod.is_empty() {
                    p.cgroup.clone()
                } else {
                    format!("{}/{} ({})", p.namespace, p.pod, p.container)
                };
                println!(
                    "   {:>8}  {:<16} {:>12.1}  {}",
                    p.pid, p.comm, p.per_second, place
                );
                for site in p.call_sites.iter().take(2) {
                    println!("             at {}", callsites::one_line(site));
                }
                if let Some(m) = &p.known_source {
                    println!(
                        "             known source {}: frame #{} {} ({})",
                        m.row, m.frame_index, m.frame, m.recovered_by
                    );
                }
                if let Some(rt) = &p.runtime {
                    println!(
                        "             runtime {} ({}): {}",
                        rt.name, rt.evidence, rt.fix
                    );
                }
            }
        }
        for (k, v) in &f.evidence {
            println!("   {k}: {v}");
        }
        println!("   cause: {}", f.cause);
        println!("   basis: {}", basis(&f.cause_basis));
        println!("   fix:   {}", f.fix);
        if let Some(g) = &f.expected_gain {
            println!("   gain:  {g}");
        }
        println!();
    }
    println!("clock read cost on this node (ns per read):");
    println!("   {:<18} {:>10} {:>12}", "CLOCK", "LIBC", "RAW SYSCALL");
    for c in &r.clock_benchmark {
        println!(
            "   {:<18} {:>10.1} {:>12.1}",
            c.clock, c.libc_ns, c.syscall_ns
        );
    }
}

/// How the report knows the cause, in one line.
fn basis(b: &CauseBasis) -> String {
    match b {
        CauseBasis::CallSite { row, pid } => {
            format!("a call site of pid {pid} matches the known source {row}")
        }
        CauseBasis::NodeSettings { from } => format!("the node's settings ({from})"),
        CauseBasis::Counters { from } => format!("the counters ({from})"),
        CauseBasis::Guess { from } => format!("a guess from {from}"),
    }
}
