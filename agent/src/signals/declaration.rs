//! `slowpath signals` (hidden): every signal's declaration as JSON, for the
//! tests and generators that would otherwise keep a list of the signals'
//! collectors, families, hooks, syscalls and `top` columns by hand. What it
//! prints is what the agent runs by, read from [`super::SIGNALS`] and, for
//! the syscalls, from the embedded object's table; the tests that use it
//! check it against the kernel and a real scrape beside.

use serde::Serialize;

use super::{Cell, EventCost, Signal, TopColumn, SIGNALS};
use crate::bpf::syscalls_of;
use crate::exposition::Family;

/// One signal, as `slowpath signals` prints it.
#[derive(Serialize)]
pub struct Declaration {
    /// Its name: `--no-collector.<name>` switches it off.
    pub name: &'static str,
    /// Every family it exports.
    pub families: Vec<FamilyView>,
    /// The tracepoints only it hooks, in report order.
    pub hooks: Vec<&'static str>,
    /// The syscalls it counts at `sys_enter` on this architecture (the
    /// object's table; another signal may count some of them too).
    pub syscalls: Vec<&'static str>,
    /// Its call kinds' names in folded stacks and `/debug/callsites?kind=`.
    pub call_sites: Vec<&'static str>,
    /// How `slowpath top` shows it.
    pub top: TopView,
}

/// A family: name, Prometheus type (lower case) and help.
#[derive(Serialize)]
pub struct FamilyView {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub kind: String,
    pub help: &'static str,
}

/// A signal's part of `slowpath top`.
#[derive(Serialize)]
pub struct TopView {
    pub columns: Vec<ColumnView>,
    /// The family of its requested timeouts, if it has one.
    pub timeouts: Option<&'static str>,
    /// Its counters with no column: (family, why).
    pub not_shown: Vec<(&'static str, &'static str)>,
}

/// One column of `slowpath top`.
#[derive(Serialize)]
pub struct ColumnView {
    pub header: &'static str,
    pub sort: &'static str,
    pub key: &'static str,
    pub family: &'static str,
    /// (label, value) a series must have to count.
    pub only: Option<(&'static str, &'static str)>,
    /// `none`, `gauge:<family>`, `clock_read` or `seconds` ([`EventCost`]).
    pub cost: String,
    /// `per_second` or `percent`.
    pub cell: &'static str,
    pub common: bool,
}

fn family(f: &Family) -> FamilyView {
    FamilyView {
        name: f.name,
        kind: format!("{:?}", f.kind).to_lowercase(),
        help: f.help,
    }
}

fn column(c: &TopColumn) -> ColumnView {
    ColumnView {
        header: c.header,
        sort: c.sort,
        key: c.key,
        family: c.family.name,
        only: c.only,
        cost: match c.cost {
            EventCost::None => "none".into(),
            EventCost::Gauge(gauge) => format!("gauge:{gauge}"),
            EventCost::ClockRead => "clock_read".into(),
            EventCost::Seconds => "seconds".into(),
        },
        cell: match c.cell {
            Cell::PerSecond => "per_second",
            Cell::Percent => "percent",
        },
        common: c.common,
    }
}

fn declaration(signal: &Signal) -> Declaration {
    let top = &signal.top;
    Declaration {
        name: signal.name,
        families: signal.families.iter().map(|f| family(f)).collect(),
        hooks: signal.kernel.hooks.iter().map(|h| h.name).collect(),
        syscalls: syscalls_of(signal.kernel.syscall_groups),
        call_sites: signal.call_sites.iter().map(|(_, name)| *name).collect(),
        top: TopView {
            columns: top.columns.iter().map(column).collect(),
            timeouts: top.timeouts.map(|f| f.name),
            not_shown: top
                .not_shown
                .iter()
                .map(|(f, why)| (f.name, *why))
                .collect(),
        },
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
