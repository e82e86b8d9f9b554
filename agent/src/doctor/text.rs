//! The doctor's report as text for a terminal.

use super::Report;
use crate::callsites;
use crate::finding::{Finding, ProcessRate, Severity};
use crate::sources::CauseBasis;

/// The report for a terminal: colour only on a TTY.
pub fn print(r: &Report, colour: bool) {
    let paint = Paint(colour);
    println!(
        "slowpath doctor: {} (kernel {}), observed {:.0} s",
        r.node, r.kernel, r.duration_seconds
    );
    let headline: Vec<String> = r.node_facts.0.iter().filter_map(|f| f.headline()).collect();
    println!("{}", headline.join("; "));
    println!();
    if r.findings.is_empty() {
        println!(
            "{}",
            paint.on(
                "No findings: nothing on this node falls off the fast paths slowpath watches.",
                "32"
            )
        );
    }
    for (i, f) in r.findings.iter().enumerate() {
        print_finding(i + 1, f, paint);
    }
    let tables: Vec<String> = r.node_facts.0.iter().filter_map(|f| f.table()).collect();
    for table in tables {
        println!("{table}");
    }
    if let Some(cost) = &r.own_cost {
        print_own_cost(cost);
    }
}

/// One line: what slowpath's programs cost in the kernel while it looked.
fn print_own_cost(cost: &super::OwnCost) {
    let probes: Vec<String> = cost
        .probes
        .iter()
        .filter(|p| p.runs > 0)
        .map(|p| format!("{} {} runs at {:.0} ns", p.probe, p.runs, p.ns_per_run))
        .collect();
    println!(
        "slowpath's own cost: {:.3} % of one CPU in the kernel, {} ({})",
        cost.cpu_share * 100.0,
        cost.method,
        probes.join(", ")
    );
}

/// ANSI colours, when printing to a terminal.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn on(self, s: &str, code: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// Finding number `n`: its title, processes, evidence, cause and fix.
fn print_finding(n: usize, f: &Finding, paint: Paint) {
    let sev = match f.severity {
        Severity::Critical => paint.on("CRITICAL", "1;31"),
        Severity::Warning => paint.on("WARNING", "33"),
        Severity::Info => paint.on("INFO", "36"),
    };
    println!("{n}. [{sev}] {}", f.title);
    if !f.processes.is_empty() {
        println!(
            "   {:>8}  {:<16} {:>12}  WHERE",
            "PID", "COMM", "PER SECOND"
        );
        for p in f.processes.iter().take(10) {
            print_process(p);
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

/// One process of a finding, with its top call sites, known source and
/// runtime.
fn print_process(p: &ProcessRate) {
    let place = if p.identity.pod.is_empty() {
        p.identity.cgroup.clone()
    } else {
        format!(
            "{}/{} ({})",
            p.identity.namespace, p.identity.pod, p.identity.container
        )
    };
    println!(
        "   {:>8}  {:<16} {:>12.1}  {}",
        p.pid, p.identity.comm, p.per_second, place
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
