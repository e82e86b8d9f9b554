//! `slowpath signals` (hidden): every signal's declaration as JSON, for the
//! tests and generators that would otherwise keep a list of the signals'
//! collectors, families, hooks, syscalls and `top` columns by hand. What it
//! prints is what the agent runs by, read from [`super::SIGNALS`] and, for
//! the syscalls, from the embedded object's table; the tests that use it
//! check it against the kernel and a real scrape beside.

use serde::Serialize;

use super::{CallKind, FamilyDoc, FindingRule, ProcessAlert, Recorded, Signal, Top, SIGNALS};
use crate::bpf::syscalls_of;
use crate::exposition::Family;

/// One signal, as `slowpath signals` prints it.
#[derive(Serialize)]
pub struct Declaration {
    /// Its name: `--no-collector.<name>` switches it off.
    pub name: &'static str,
    /// What it watches, in one line.
    pub summary: &'static str,
    /// The slow path's name in the README's table of cases.
    pub case: &'static str,
    /// What it cost the cases that found it (the README's "What and why").
    pub story: Option<&'static str>,
    /// Every family it exports.
    pub families: Vec<FamilyView>,
    /// The tracepoints only it hooks, in report order.
    pub hooks: Vec<&'static str>,
    /// The syscalls it counts at `sys_enter` on this architecture (the
    /// object's table; another signal may count some of them too).
    pub syscalls: Vec<&'static str>,
    /// Its call kinds' names in folded stacks and `/debug/callsites?kind=`.
    pub call_sites: &'static [CallKind],
    /// How `slowpath top` shows it.
    pub top: &'static Top,
    /// The rates of its counters the chart's recording rules record.
    pub recorded: &'static [Recorded],
    /// The findings its diagnosis makes.
    pub finding_rules: &'static [FindingRule],
    /// How its per-process families read (docs/metrics.md).
    pub family_docs: &'static [FamilyDoc],
    /// Its case in docs/metrics.md's PromQL.
    pub promql: &'static [&'static str],
    /// Its per-process alert, which the chart renders (or none).
    pub alert: &'static Option<ProcessAlert>,
}

/// A family: name, Prometheus type (lower case) and help.
#[derive(Serialize)]
pub struct FamilyView {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub kind: String,
    pub help: &'static str,
}

fn family(f: &Family) -> FamilyView {
    FamilyView {
        name: f.name,
        kind: format!("{:?}", f.kind).to_lowercase(),
        help: f.help,
    }
}

fn declaration(signal: &'static Signal) -> Declaration {
    Declaration {
        name: signal.name,
        summary: signal.summary,
        case: signal.case,
        story: signal.story,
        families: signal.families.iter().map(|f| family(f)).collect(),
        hooks: signal.kernel.hooks.iter().map(|h| h.name).collect(),
        syscalls: syscalls_of(signal.kernel.syscall_groups),
        call_sites: signal.call_sites,
        top: &signal.top,
        recorded: signal.recorded,
        finding_rules: signal.finding_rules,
        family_docs: signal.family_docs,
        promql: signal.promql,
        alert: &signal.alert,
    }
}

/// Every signal's declaration, in [`SIGNALS`] order.
pub fn declarations() -> Vec<Declaration> {
    SIGNALS.into_iter().map(declaration).collect()
}

/// `slowpath signals`: the declarations as one JSON array on standard
/// output.
pub fn print() -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(&declarations())?);
    Ok(())
}
