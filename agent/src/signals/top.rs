//! How `slowpath top` shows each signal, declared by the signal
//! ([`super::Signal::top`]): its columns (the header, the `--sort` value,
//! the key in JSON frames, the counter summed, how one event is charged to
//! the estimated CPU), the histogram of requested timeouts that feeds the
//! `TIMEOUT` column, and its counters that have no column, each with why.
//! `top` builds its columns, sort keys and CPU estimate from these alone, in
//! [`super::SIGNALS`] order, so a new signal's counters reach it (or say why
//! not) with no edit in `top/`; a unit test holds every counter family of
//! every signal to one of the two. A signal's node-wide gauges reach top's
//! node line the same way ([`TopNode`]).

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use super::recorded::family_name;
use super::Recorded;
use crate::exposition::Family;

fn name_if_any<S: Serializer>(family: &Option<&'static Family>, s: S) -> Result<S::Ok, S::Error> {
    family.map(|f| f.name).serialize(s)
}

fn recorded_name<S: Serializer>(r: &Option<&'static Recorded>, s: S) -> Result<S::Ok, S::Error> {
    r.map(|r| r.name).serialize(s)
}

fn names_with_why<S: Serializer>(
    not_shown: &&'static [(&'static Family, &'static str)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(not_shown.iter().map(|(f, why)| (f.name, why)))
}

/// A signal in `slowpath top`.
#[derive(Serialize)]
pub struct Top {
    /// Its rate columns, in display order.
    pub columns: &'static [TopColumn],
    /// A histogram of requested timeouts in seconds (per-process series)
    /// whose buckets, with the other signals', give a row's median
    /// requested timeout.
    #[serde(serialize_with = "name_if_any")]
    pub timeouts: Option<&'static Family>,
    /// Its counter families that have no column, each with why (a
    /// node-wide count, one shown through another signal's column, ...).
    #[serde(serialize_with = "names_with_why")]
    pub not_shown: &'static [(&'static Family, &'static str)],
    /// Its words on top's node line, from node-wide gauges of its own;
    /// `None` for a signal with nothing to say about the node there.
    #[serde(skip)]
    pub node: Option<TopNode>,
}

/// A signal's part of the node line of `slowpath top` (e.g. `clocksource
/// tsc (vDSO ok)`), in [`super::SIGNALS`] order between `node:` and the
/// agent's own CPU, parts separated by ` | `.
pub struct TopNode {
    /// The gauges it reads from each read of the agent, each with the
    /// labels whose values it reads, in that order.
    pub gauges: &'static [(&'static Family, &'static [&'static str])],
    /// Its words from those gauges' series in one read ([`NodeGauges`]);
    /// `None` to say nothing in that read.
    pub words: fn(&NodeGauges) -> Option<String>,
}

/// The series of the signals' [`TopNode`] gauges in one read of the agent:
/// per family name, each series' declared label values (in the declared
/// order, empty where the series lacks one) and its value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeGauges(BTreeMap<&'static str, Vec<(Vec<String>, f64)>>);

impl NodeGauges {
    /// Keep one series of `family`, if a signal's node line reads that
    /// family: `label` gives a label's value by name.
    pub fn take<'l>(
        &mut self,
        family: &str,
        label: impl Fn(&str) -> Option<std::borrow::Cow<'l, str>>,
        value: f64,
    ) {
        let declared = (super::SIGNALS.iter())
            .filter_map(|s| s.top.node.as_ref())
            .flat_map(|node| node.gauges)
            .find(|(f, _)| f.name == family);
        if let Some((f, labels)) = declared {
            let values = (labels.iter())
                .map(|l| label(l).map(|v| v.into_owned()).unwrap_or_default())
                .collect();
            self.0.entry(f.name).or_default().push((values, value));
        }
    }

    /// The series of `family` in this read (empty when it had none).
    pub fn series(&self, family: &Family) -> &[(Vec<String>, f64)] {
        self.0.get(family.name).map_or(&[], Vec::as_slice)
    }
}

/// The node line's parts the signals' declarations make from one read, in
/// [`super::SIGNALS`] order.
pub fn node_words(gauges: &NodeGauges) -> Vec<String> {
    (super::SIGNALS.iter())
        .filter_map(|s| s.top.node.as_ref())
        .filter_map(|node| (node.words)(gauges))
        .collect()
}

/// One column of `slowpath top`: a counter family of the signal, summed
/// over a row's series (optionally only where one label has one value), as
/// a rate per second between two reads.
#[derive(Serialize)]
pub struct TopColumn {
    /// Its header in the text frames and the full-screen table (at most 8
    /// characters, e.g. `CLOCK/s`).
    pub header: &'static str,
    /// What it counts, in a few words of Markdown (docs/top.md's table of
    /// columns, docs/generate.py).
    pub meaning: &'static str,
    /// Its value of `slowpath top --sort`.
    pub sort: &'static str,
    /// Its key in the `rates` object of a JSON frame.
    pub key: &'static str,
    /// The counter summed.
    #[serde(serialize_with = "family_name")]
    pub family: &'static Family,
    /// A label that must have this value for a series to count.
    pub only: Option<(&'static str, &'static str)>,
    /// What one counted event (or second) costs in the estimated CPU.
    pub cost: EventCost,
    /// The signal's recorded rate of this column's counter that the chart's
    /// estimated-CPU record charges at `cost` (`None` when `cost` is none).
    #[serde(serialize_with = "recorded_name")]
    pub recorded: Option<&'static Recorded>,
    /// How a cell shows the rate.
    pub cell: Cell,
    /// Kept before the rarer columns when the full-screen table is narrow.
    pub common: bool,
}

/// How `top`'s estimated CPU charges a column's rate, and the chart's
/// estimated-CPU record (`templates/prometheusrule.yaml`, through
/// `files/signals.json`) too: the cost model, written once. Serialized with
/// its kind in snake case: `"none"`, `{"gauge": NAME}`, `{"clock_read":
/// {"read_seconds": NAME, "falls_back": NAME, "otherwise": NAME}}`,
/// `"seconds"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventCost {
    /// Not charged: the event's CPU is not measured on the node (e.g. a
    /// THP fault, whose cost is the page clearing the process would do
    /// anyway).
    None,
    /// Each event costs the value of this gauge of the agent, in seconds,
    /// measured on the node (e.g. `slowpath_syscall_seconds`).
    Gauge(&'static str),
    /// Each event costs one read of the clock in its `clock` label: the
    /// gauge `read_seconds` of that clock (seconds per read, by `clock`)
    /// where the gauge `falls_back` of it is 1 (the canary saw the agent's
    /// own libc reads of it enter the kernel), else the gauge `otherwise`
    /// (seconds per event: one system call, `slowpath_syscall_seconds`).
    ClockRead {
        read_seconds: &'static str,
        falls_back: &'static str,
        otherwise: &'static str,
    },
    /// The counter is itself in seconds: its rate is a share of a CPU.
    Seconds,
}

/// How a column's cell shows its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cell {
    /// Events per second.
    PerSecond,
    /// A share of a CPU (seconds per second), in %.
    Percent,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use prometheus::proto::MetricType;

    use crate::signals::{families, top_columns, top_sort_names, EventCost, SIGNALS};

    #[test]
    fn every_counter_of_every_signal_has_a_column_or_says_why_not() {
        for signal in SIGNALS {
            let shown: Vec<&str> = signal.top.columns.iter().map(|c| c.family.name).collect();
            let not_shown: Vec<&str> = signal.top.not_shown.iter().map(|(f, _)| f.name).collect();
            for family in signal.families {
                let (column, reason) = (
                    shown.contains(&family.name),
                    not_shown.contains(&family.name),
                );
                match family.kind {
                    MetricType::COUNTER => assert!(
                        column != reason,
                        "{}: {} needs a top column or a reason in not_shown, not both",
                        signal.name,
                        family.name
                    ),
                    _ => assert!(!column && !reason, "{}: not a counter", family.name),
                }
            }
            for name in shown.iter().chain(&not_shown) {
                let own = signal.families.iter().any(|f| f.name == *name);
                assert!(own, "{}: {name} is not one of its families", signal.name);
            }
            for (family, why) in signal.top.not_shown {
                assert!(!why.is_empty(), "{}: no reason", family.name);
            }
            if let Some(timeouts) = signal.top.timeouts {
                assert_eq!(timeouts.kind, MetricType::HISTOGRAM, "{}", timeouts.name);
                assert!(signal.families.iter().any(|f| f.name == timeouts.name));
            }
        }
    }

    #[test]
    fn node_words_read_gauges_of_their_own_signal() {
        for signal in SIGNALS {
            let Some(node) = &signal.top.node else {
                continue;
            };
            assert!(
                !node.gauges.is_empty(),
                "{}: node words of nothing",
                signal.name
            );
            for (family, _) in node.gauges {
                let own = signal.families.iter().any(|f| f.name == family.name);
                assert!(
                    own,
                    "{}: {} is not one of its families",
                    signal.name, family.name
                );
                assert_eq!(family.kind, MetricType::GAUGE, "{}", family.name);
            }
        }
    }

    #[test]
    fn columns_have_distinct_headers_sort_values_and_keys_that_fit() {
        let columns: Vec<_> = top_columns().collect();
        for (what, values) in [
            (
                "header",
                columns.iter().map(|c| c.header).collect::<Vec<_>>(),
            ),
            ("key", columns.iter().map(|c| c.key).collect()),
            ("sort", top_sort_names()),
        ] {
            let distinct: HashSet<_> = values.iter().collect();
            assert_eq!(
                distinct.len(),
                values.len(),
                "a {what} given twice: {values:?}"
            );
        }
        for c in &columns {
            assert!(c.header.len() <= 8, "{}: wider than a rate cell", c.header);
            let kebab = |s: &str| s.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-');
            assert!(kebab(c.sort), "{}", c.sort);
            // a cell of docs/top.md's table: a phrase, no row break
            let one_line = !c.meaning.is_empty() && !c.meaning.contains(['\n', '|']);
            assert!(one_line, "{}: its meaning", c.header);
        }
    }

    #[test]
    fn every_cost_gauge_is_a_gauge_the_agent_exports() {
        let gauges: HashSet<&str> = families()
            .chain(crate::metrics::FAMILIES.families.iter().copied())
            .filter(|f| f.kind == MetricType::GAUGE)
            .map(|f| f.name)
            .collect();
        for column in top_columns() {
            let named = match column.cost {
                EventCost::Gauge(name) => vec![name],
                EventCost::ClockRead {
                    read_seconds,
                    falls_back,
                    otherwise,
                } => vec![read_seconds, falls_back, otherwise],
                EventCost::None | EventCost::Seconds => vec![],
            };
            for name in named {
                assert!(
                    gauges.contains(name),
                    "{}: {name} is no gauge",
                    column.header
                );
            }
        }
    }
}
