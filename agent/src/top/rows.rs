//! The rows of `slowpath top`: one per process series of the agent (comm
//! with its cgroup, unit, pod and, with `--metrics.pid-label`, pid), each
//! slow path's rate between two reads of the agent's counters, and the
//! findings that hold for it.

use std::collections::{BTreeMap, HashMap};

use std::sync::OnceLock;

use serde::Serialize;

use super::node::NodeState;
use super::sample::{Sample, Value};
use crate::signals::{self, Cell, EventCost, TopColumn};

/// The labels that say whose a per-process series is, in display order
/// (`Series::labels` in `snapshot.rs`); the others name a slow path's
/// kind (clock, op, wait, ...) and are summed over.
pub const IDENTITY: [&str; 7] = [
    "comm",
    "pid",
    "cgroup",
    "unit",
    "namespace",
    "pod",
    "container",
];

/// Who a row is: the identity labels' values, in [`IDENTITY`] order
/// (empty where the series has no such label).
pub type Identity = [String; IDENTITY.len()];

/// A slow path shown as a column: one of the columns the signals declare
/// ([`crate::signals::top_columns`]: a counter family summed over its other
/// labels, optionally only where one label has one value), by its place in
/// display order. In a JSON frame it is the declaration's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Column(usize);

/// The declared columns, in display order (made once).
fn declared() -> &'static [&'static TopColumn] {
    static COLUMNS: OnceLock<Vec<&'static TopColumn>> = OnceLock::new();
    COLUMNS.get_or_init(|| signals::top_columns().collect())
}

impl Column {
    /// Every column, in display order.
    pub fn all() -> impl Iterator<Item = Column> {
        (0..declared().len()).map(Column)
    }

    /// How many columns there are.
    pub fn count() -> usize {
        declared().len()
    }

    /// The column whose `--sort` value is `name`.
    pub fn by_sort(name: &str) -> Option<Column> {
        Column::all().find(|c| c.declaration().sort == name)
    }

    fn declaration(self) -> &'static TopColumn {
        declared()[self.0]
    }

    /// The column's header in the text frames.
    pub fn header(self) -> &'static str {
        self.declaration().header
    }

    /// How its cells show the rate.
    pub fn cell(self) -> Cell {
        self.declaration().cell
    }

    /// Kept before the rarer columns when the table is narrow.
    pub fn is_common(self) -> bool {
        self.declaration().common
    }

    /// Whether `sample` counts in this column.
    fn counts(self, sample: &Sample) -> bool {
        let column = self.declaration();
        sample.metric == column.family.name
            && (column.only)
                .is_none_or(|(label, want)| sample.label(label).as_deref() == Some(want))
    }
}

impl Serialize for Column {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.declaration().key)
    }
}

/// The requested-timeout histograms (the signals' [`signals::Top::timeouts`])
/// whose buckets, summed, give a row's median timeout.
fn is_timeout_histogram(name: &str) -> bool {
    (signals::SIGNALS.iter()).any(|s| s.top.timeouts.is_some_and(|f| f.name == name))
}

/// What one read of the agent holds for one row: each column's counter
/// and the requested-timeout histogram (upper bound in seconds ->
/// cumulative count), summed over the row's series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub counters: BTreeMap<Column, f64>,
    /// The events of the column charged per clock read
    /// ([`EventCost::ClockRead`]) by `clock` label: each clock's read costs
    /// its own.
    pub clock_reads: BTreeMap<String, f64>,
    pub timeouts: Vec<(f64, f64)>,
    /// Reads in a row that did not have this series (carried over).
    pub missed: u32,
}

/// What one event of each kind costs on this node, from the agent's gauges
/// in the same read (each measured by the agent on the node): what the
/// estimated CPU column multiplies the rates by. An event whose figure the
/// agent does not export adds nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventCosts {
    /// The gauges the columns charge by ([`EventCost::Gauge`], and a clock
    /// read's `otherwise`), in seconds per event, by family name.
    gauges: BTreeMap<&'static str, f64>,
    /// `slowpath_clock_read_seconds` of each clock whose libc reads fall
    /// back to a syscall on this node (`slowpath_vdso_fallback` 1): what a
    /// process pays per read of it, the clocksource's read included.
    pub fallback_read: BTreeMap<String, f64>,
}

/// The gauge a column's events cost, if it names one (a clock read's
/// `otherwise` too).
fn cost_gauge(name: &str) -> Option<&'static str> {
    Column::all()
        .filter_map(|c| match c.declaration().cost {
            EventCost::Gauge(gauge) => Some(gauge),
            EventCost::ClockRead { otherwise, .. } => Some(otherwise),
            _ => None,
        })
        .find(|g| *g == name)
}

/// The gauges a clock read's cost is read from ([`EventCost::ClockRead`]
/// of the column that declares it): (seconds per read, falls back,
/// otherwise).
fn clock_read_gauges() -> Option<(&'static str, &'static str, &'static str)> {
    Column::all().find_map(|c| match c.declaration().cost {
        EventCost::ClockRead {
            read_seconds,
            falls_back,
            otherwise,
        } => Some((read_seconds, falls_back, otherwise)),
        _ => None,
    })
}

impl EventCosts {
    /// Seconds one fallback read of `clock` costs.
    fn clock_read(&self, clock: &str) -> Option<f64> {
        let otherwise = clock_read_gauges().and_then(|(_, _, g)| self.gauges.get(g).copied());
        (self.fallback_read.get(clock).copied()).or(otherwise)
    }

    /// Take a gauge of one read into the costs; `fallen_back` gathers the
    /// clocks the canary saw fall back, `reads` every clock's read cost.
    fn take(&mut self, sample: &Sample, value: f64, reads: &mut Vec<(String, f64)>) {
        let clock = || sample.label_or_empty("clock").into_owned();
        match clock_read_gauges() {
            Some((read_seconds, _, _)) if sample.metric == read_seconds => {
                reads.push((clock(), value))
            }
            Some((_, falls_back, _)) if sample.metric == falls_back => {
                if value == 1.0 {
                    self.fallback_read.insert(clock(), f64::NAN);
                }
            }
            _ => {
                if let Some(gauge) = cost_gauge(sample.metric) {
                    self.gauges.insert(gauge, value);
                }
            }
        }
    }

    /// The share of one CPU a row's events cost over an interval: each
    /// column's rate times its event's cost ([`EventCost`]).
    fn cpu_share(&self, rate: impl Fn(Column) -> f64, clock_rates: &[(String, f64)]) -> f64 {
        let clocks = || -> f64 {
            (clock_rates.iter())
                .map(|(clock, r)| r * self.clock_read(clock).unwrap_or(0.0))
                .sum()
        };
        Column::all()
            .map(|column| match column.declaration().cost {
                EventCost::None => 0.0,
                EventCost::Gauge(gauge) => rate(column) * self.gauges.get(gauge).unwrap_or(&0.0),
                EventCost::ClockRead { .. } => clocks(),
                EventCost::Seconds => rate(column),
            })
            .sum()
    }
}

/// Reads a series missing from the agent's page is remembered for: a
/// series that comes back within them continues from its last value
/// instead of counting everything again from 0 (seen once in a test: a
/// process's series missing from one scrape around its exit made its
/// calls count twice).
const CARRY_READS: u32 = 30;

/// One read of the agent's metrics, by row.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    pub rows: HashMap<Identity, Totals>,
    /// The findings that hold per row (`slowpath_finding_info`), by the
    /// identity without pid (findings are per comm and cgroup).
    pub findings: HashMap<Identity, Vec<String>>,
    /// The node's cost of each kind of event, as of this read.
    pub costs: EventCosts,
    /// What the read says of the node and of the agent itself.
    pub node: NodeState,
}

/// The identity of a sample's series.
fn identity(sample: &Sample) -> Identity {
    IDENTITY.map(|name| sample.label_or_empty(name).into_owned())
}

/// The identity without its pid, which findings do not carry.
fn without_pid(mut id: Identity) -> Identity {
    id[1].clear();
    id
}

/// Add a cumulative histogram to one already held, bucket by bucket.
fn add_buckets(into: &mut Vec<(f64, f64)>, buckets: &[(f64, f64)]) {
    for &(bound, count) in buckets {
        match into.iter_mut().find(|(le, _)| *le == bound) {
            Some((_, n)) => *n += count,
            None => into.push((bound, count)),
        }
    }
    into.sort_by(|a, b| a.0.total_cmp(&b.0));
}

impl Reading {
    /// This reading with the series of `older` (the reading before) that it
    /// lacks, for [`CARRY_READS`] reads, as the base of the next interval.
    pub fn carrying(mut self, older: Reading) -> Reading {
        for (id, mut totals) in older.rows {
            if self.rows.contains_key(&id) || totals.missed >= CARRY_READS {
                continue;
            }
            totals.missed += 1;
            self.rows.insert(id, totals);
        }
        self
    }

    /// The rows of one read of the agent's metrics (a scrape of its page,
    /// or its families gathered in process: [`super::sample`]).
    pub fn from_samples<'a>(samples: impl Iterator<Item = Sample<'a>>) -> Self {
        let mut reading = Reading::default();
        let mut clock_reads = Vec::new();
        for sample in samples {
            if sample.metric == "slowpath_finding_info" {
                let finding = sample.label_or_empty("finding").into_owned();
                reading
                    .findings
                    .entry(without_pid(identity(&sample)))
                    .or_default()
                    .push(finding);
                continue;
            }
            if let Value::Histogram(buckets) = &sample.value {
                if is_timeout_histogram(sample.metric) {
                    let totals = reading.rows.entry(identity(&sample)).or_default();
                    add_buckets(&mut totals.timeouts, buckets);
                }
                continue;
            }
            let value = match sample.value {
                Value::Counter(v) => v,
                Value::Gauge(v) => {
                    reading.costs.take(&sample, v, &mut clock_reads);
                    reading.node.take(&sample, v);
                    continue;
                }
                _ => continue,
            };
            reading.node.take(&sample, value);
            for column in Column::all().filter(|c| c.counts(&sample)) {
                let totals = reading.rows.entry(identity(&sample)).or_default();
                *totals.counters.entry(column).or_default() += value;
                if matches!(column.declaration().cost, EventCost::ClockRead { .. }) {
                    let clock = sample.label_or_empty("clock");
                    *totals.clock_reads.entry(clock.into_owned()).or_default() += value;
                }
            }
        }
        // only the clocks that fall back, at their measured read cost
        let fallback = &mut reading.costs.fallback_read;
        for (clock, seconds) in clock_reads {
            if let Some(cost) = fallback.get_mut(&clock) {
                *cost = seconds;
            }
        }
        fallback.retain(|_, cost| !cost.is_nan());
        reading.node.finish();
        for list in reading.findings.values_mut() {
            list.sort();
            list.dedup();
        }
        reading
    }
}

/// One row of a frame: who, each column's rate over the interval, the
/// median requested timeout of its timed waits and sleeps in it, and its
/// findings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The identity labels' values ([`IDENTITY`] order).
    #[serde(skip)]
    pub identity: Identity,
    pub rates: BTreeMap<Column, f64>,
    /// The share of one CPU the row's slow paths cost in the interval,
    /// estimated from the node's measured cost of each event
    /// ([`EventCosts`]); 0.01 is 1 % of a CPU.
    pub estimated_cpu_share: f64,
    /// Upper bound of the bucket that holds the median, in seconds; `None`
    /// without a timeout requested in the interval.
    pub median_timeout_seconds: Option<f64>,
    pub findings: Vec<String>,
}

impl Row {
    /// Every column's rate added up: the default sort key (how often, all
    /// slow paths together, this process left a fast path).
    pub fn events(&self) -> f64 {
        self.rates.values().sum()
    }

    /// A column's rate, 0 when the row has none.
    pub fn rate(&self, column: Column) -> f64 {
        self.rates.get(&column).copied().unwrap_or(0.0)
    }
}

/// A counter's increase from `before` to `now`: a series that is new or
/// restarted (its process image replaced, the agent restarted) counts
/// from 0, as Prometheus's rate() does.
fn increase(before: Option<f64>, now: f64) -> f64 {
    match before {
        Some(b) if b <= now => now - b,
        _ => now,
    }
}

/// The median of the requests made between two cumulative histograms
/// (upper bound, cumulative count), as the upper bound of the bucket that
/// holds it.
fn median_between(before: &[(f64, f64)], now: &[(f64, f64)]) -> Option<f64> {
    let delta: Vec<(f64, f64)> = now
        .iter()
        .map(|&(le, n)| {
            let b = before.iter().find(|(l, _)| *l == le).map(|(_, c)| *c);
            (le, increase(b, n))
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    delta
        .iter()
        .find(|(_, n)| *n >= total / 2.0)
        .map(|(le, _)| *le)
}

/// The rows between two readings `seconds` apart, rows with no slow path
/// in the interval left out.
pub fn rows_between(before: &Reading, now: &Reading, seconds: f64) -> Vec<Row> {
    let empty = Totals::default();
    now.rows
        .iter()
        .filter_map(|(id, totals)| {
            let old = before.rows.get(id).unwrap_or(&empty);
            let rates: BTreeMap<Column, f64> = totals
                .counters
                .iter()
                .map(|(&c, &n)| (c, increase(old.counters.get(&c).copied(), n) / seconds))
                .filter(|&(_, r)| r > 0.0)
                .collect();
            if rates.is_empty() {
                return None;
            }
            let clock_rates: Vec<(String, f64)> = (totals.clock_reads.iter())
                .map(|(clock, &n)| {
                    let b = old.clock_reads.get(clock).copied();
                    (clock.clone(), increase(b, n) / seconds)
                })
                .collect();
            let rate = |c: Column| rates.get(&c).copied().unwrap_or(0.0);
            Some(Row {
                identity: id.clone(),
                estimated_cpu_share: now.costs.cpu_share(rate, &clock_rates),
                median_timeout_seconds: median_between(&old.timeouts, &totals.timeouts),
                findings: now
                    .findings
                    .get(&without_pid(id.clone()))
                    .cloned()
                    .unwrap_or_default(),
                rates,
            })
        })
        .collect()
}

/// How a frame's rows are ordered, highest first: by the estimated CPU
/// (the default), by all events together, or by one column's rate; ties
/// by all events, then by identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Cpu,
    Events,
    Column(Column),
}

impl SortKey {
    /// The key a `slowpath top --sort` value names
    /// ([`crate::signals::top_sort_names`]).
    pub fn by_name(name: &str) -> Option<SortKey> {
        match name {
            "cpu" => Some(SortKey::Cpu),
            "events" => Some(SortKey::Events),
            column => Column::by_sort(column).map(SortKey::Column),
        }
    }
}

/// Sort rows, highest first.
pub fn sort_rows(rows: &mut [Row], key: SortKey) {
    let value = |r: &Row| match key {
        SortKey::Cpu => r.estimated_cpu_share,
        SortKey::Events => r.events(),
        SortKey::Column(c) => r.rate(c),
    };
    rows.sort_by(|a, b| {
        value(b)
            .total_cmp(&value(a))
            .then_with(|| b.events().total_cmp(&a.events()))
            .then_with(|| a.identity.cmp(&b.identity))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(text: &str) -> Reading {
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        Reading::from_samples(super::super::sample::parsed(&scrape))
    }

    const BEFORE: &str = r#"# TYPE slowpath_clock_syscalls_total counter
slowpath_clock_syscalls_total{comm="java",cgroup="/a",unit="",clock="monotonic",fallback="true"} 100
slowpath_clock_syscalls_total{comm="java",cgroup="/a",unit="",clock="realtime",fallback="true"} 50
slowpath_clock_syscalls_total{comm="java",cgroup="/a",unit="",clock="thread_cputime",fallback="false"} 7
# TYPE slowpath_rt_sigprocmask_calls_total counter
slowpath_rt_sigprocmask_calls_total{comm="ruby",cgroup="/b",unit="",op="query"} 10
slowpath_rt_sigprocmask_calls_total{comm="ruby",cgroup="/b",unit="",op="setmask"} 10
# TYPE slowpath_timer_requested_seconds histogram
slowpath_timer_requested_seconds_bucket{comm="java",cgroup="/a",unit="",wait="futex",le="0.0001"} 0
slowpath_timer_requested_seconds_bucket{comm="java",cgroup="/a",unit="",wait="futex",le="0.001"} 5
slowpath_timer_requested_seconds_bucket{comm="java",cgroup="/a",unit="",wait="futex",le="+Inf"} 5
slowpath_timer_requested_seconds_sum{comm="java",cgroup="/a",unit="",wait="futex"} 0.005
slowpath_timer_requested_seconds_count{comm="java",cgroup="/a",unit="",wait="futex"} 5
"#;

    const NOW: &str = r#"# TYPE slowpath_clock_syscalls_total counter
slowpath_clock_syscalls_total{comm="java",cgroup="/a",unit="",clock="monotonic",fallback="true"} 300
slowpath_clock_syscalls_total{comm="java",cgroup="/a",unit="",clock="realtime",fallback="true"} 150
slowpath_clock_syscalls_total{comm="java",cgroup="/a",unit="",clock="thread_cputime",fallback="false"} 9000
# TYPE slowpath_rt_sigprocmask_calls_total counter
slowpath_rt_sigprocmask_calls_total{comm="ruby",cgroup="/b",unit="",op="query"} 4010
slowpath_rt_sigprocmask_calls_total{comm="ruby",cgroup="/b",unit="",op="setmask"} 4010
slowpath_rt_sigprocmask_calls_total{comm="idle",cgroup="/c",unit="",op="query"} 3
# TYPE slowpath_timer_requested_seconds histogram
slowpath_timer_requested_seconds_bucket{comm="java",cgroup="/a",unit="",wait="futex",le="0.0001"} 1
slowpath_timer_requested_seconds_bucket{comm="java",cgroup="/a",unit="",wait="futex",le="0.001"} 5
slowpath_timer_requested_seconds_bucket{comm="java",cgroup="/a",unit="",wait="futex",le="+Inf"} 25
slowpath_timer_requested_seconds_sum{comm="java",cgroup="/a",unit="",wait="futex"} 1
slowpath_timer_requested_seconds_count{comm="java",cgroup="/a",unit="",wait="futex"} 25
# TYPE slowpath_finding_info gauge
slowpath_finding_info{finding="sigprocmask_storm",severity="warning",known_source="",comm="ruby",cgroup="/b",unit="",namespace="",pod="",container=""} 1
# TYPE slowpath_syscall_seconds gauge
slowpath_syscall_seconds 2e-7
# TYPE slowpath_vdso_fallback gauge
slowpath_vdso_fallback{clock="realtime"} 0
slowpath_vdso_fallback{clock="monotonic"} 1
# TYPE slowpath_clock_read_seconds gauge
slowpath_clock_read_seconds{clock="realtime"} 2e-8
slowpath_clock_read_seconds{clock="monotonic"} 1e-5
# TYPE slowpath_timer_wakeup_cost_seconds gauge
slowpath_timer_wakeup_cost_seconds 1e-5
"#;

    fn clock() -> Column {
        Column::by_sort("clock").unwrap()
    }

    fn sigmask() -> Column {
        Column::by_sort("sigmask").unwrap()
    }

    fn by_comm(rows: &[Row], comm: &str) -> Row {
        rows.iter().find(|r| r.identity[0] == comm).unwrap().clone()
    }

    #[test]
    fn rates_are_increases_over_the_interval_summed_over_kinds() {
        let rows = rows_between(&reading(BEFORE), &reading(NOW), 2.0);
        let java = by_comm(&rows, "java");
        // only the clocks the vDSO should serve: (200 + 100) / 2 s
        assert_eq!(java.rate(clock()), 150.0);
        let ruby = by_comm(&rows, "ruby");
        assert_eq!(ruby.rate(sigmask()), 4000.0);
        assert_eq!(ruby.findings, vec!["sigprocmask_storm".to_string()]);
        assert!(java.findings.is_empty());
    }

    #[test]
    fn the_cpu_share_is_each_rate_times_its_events_cost_on_the_node() {
        let rows = rows_between(&reading(BEFORE), &reading(NOW), 2.0);
        // monotonic falls back here: 100/s at its read of 10 us; realtime
        // does not (a raw syscall): 50/s at a syscall's 200 ns
        let java = by_comm(&rows, "java");
        let want = 100.0 * 1e-5 + 50.0 * 2e-7;
        assert!((java.estimated_cpu_share - want).abs() < 1e-12, "{java:?}");
        // 4,000 rt_sigprocmask calls/s at a syscall each
        let ruby = by_comm(&rows, "ruby");
        assert!((ruby.estimated_cpu_share - 4000.0 * 2e-7).abs() < 1e-12);
        // without the agent's figures, events cost nothing known
        let mut bare = reading(NOW);
        bare.costs = EventCosts::default();
        let rows = rows_between(&reading(BEFORE), &bare, 2.0);
        assert!(rows.iter().all(|r| r.estimated_cpu_share == 0.0));
    }

    #[test]
    fn a_new_series_counts_from_zero_and_a_restarted_one_too() {
        let rows = rows_between(&reading(BEFORE), &reading(NOW), 1.0);
        assert_eq!(by_comm(&rows, "idle").rate(sigmask()), 3.0);
        // the agent restarted between the reads: counters went down
        let rows = rows_between(&reading(NOW), &reading(BEFORE), 1.0);
        assert_eq!(by_comm(&rows, "ruby").rate(sigmask()), 20.0);
    }

    #[test]
    fn a_series_missing_from_one_read_continues_from_its_last_value() {
        let before = reading(BEFORE);
        let mut gap = reading(NOW);
        gap.rows.retain(|id, _| id[0] != "ruby");
        let base = gap.clone().carrying(before.clone());
        // nothing new for ruby in the gap itself
        assert!(rows_between(&before, &base, 1.0)
            .iter()
            .all(|r| r.identity[0] != "ruby"));
        let rows = rows_between(&base, &reading(NOW), 1.0);
        assert_eq!(by_comm(&rows, "ruby").rate(sigmask()), 8000.0);
        // forgotten after CARRY_READS reads without it
        let mut old = base;
        for _ in 0..CARRY_READS {
            old = gap.clone().carrying(old);
        }
        assert!(!old.rows.keys().any(|id| id[0] == "ruby"));
    }

    #[test]
    fn rows_without_a_slow_path_in_the_interval_are_left_out() {
        let now = reading(NOW);
        assert!(rows_between(&now, &now, 1.0).is_empty());
    }

    #[test]
    fn the_median_timeout_is_the_bucket_holding_the_middle_request_of_the_interval() {
        let rows = rows_between(&reading(BEFORE), &reading(NOW), 1.0);
        // 20 requests in the interval: 1 up to 100 us, 19 above 1 ms
        assert_eq!(
            by_comm(&rows, "java").median_timeout_seconds,
            Some(f64::INFINITY)
        );
        let before = reading(BEFORE);
        let mut now = reading(NOW);
        let java = now
            .rows
            .values_mut()
            .find(|t| !t.timeouts.is_empty())
            .unwrap();
        java.timeouts = vec![(0.0001, 3.0), (0.001, 20.0), (f64::INFINITY, 20.0)];
        let rows = rows_between(&before, &now, 1.0);
        // 3 up to 100 us and 12 between 100 us and 1 ms: the 8th is in the second
        assert_eq!(by_comm(&rows, "java").median_timeout_seconds, Some(0.001));
    }

    #[test]
    fn rows_sort_highest_first_by_cpu_all_events_or_one_column() {
        let mut rows = rows_between(&reading(BEFORE), &reading(NOW), 1.0);
        sort_rows(&mut rows, SortKey::Cpu);
        let comms: Vec<&str> = rows.iter().map(|r| r.identity[0].as_str()).collect();
        // java: 200/s at 10 us and 100/s at 0.2 us; ruby: 8,000/s at 0.2 us
        assert_eq!(comms, ["java", "ruby", "idle"]);
        sort_rows(&mut rows, SortKey::Events);
        let comms: Vec<&str> = rows.iter().map(|r| r.identity[0].as_str()).collect();
        assert_eq!(comms, ["ruby", "java", "idle"]);
        sort_rows(&mut rows, SortKey::Column(clock()));
        assert_eq!(rows[0].identity[0], "java");
        // ties (no clock fallbacks) by all events
        assert_eq!(rows[1].identity[0], "ruby");
    }
}
