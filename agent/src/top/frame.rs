//! The frames of `slowpath top --batch`: a plain-text table per refresh
//! (as `top -b`), or one JSON line per row.

use std::fmt::Write;

use serde::Serialize;

use super::rows::{Column, Row, IDENTITY};
use crate::signals::Cell;

/// What a frame says above its table.
pub struct Header<'a> {
    /// Wall-clock time of the read, RFC 3339.
    pub time: &'a str,
    /// Where the numbers come from (the agent's URL).
    pub source: &'a str,
    /// Seconds between the two reads the rates are over.
    pub interval_seconds: f64,
    /// Rows with a slow path in the interval, before any cut.
    pub processes: usize,
    /// The node line ([`super::node::node_line`]).
    pub node: &'a str,
}

/// A rate for a column of the text table: 0 as `-`, otherwise at most
/// four significant characters and a k/M suffix.
fn rate_cell(rate: f64) -> String {
    match rate {
        r if r <= 0.0 => "-".into(),
        r if r >= 1e6 => format!("{:.1}M", r / 1e6),
        r if r >= 1e4 => format!("{:.0}k", r / 1e3),
        r if r >= 100.0 => format!("{r:.0}"),
        r => format!("{r:.1}"),
    }
}

/// A timeout in the units people set them in (the bucket bounds are
/// powers of ten from 1 us to 10 s; above them, `long`).
pub(super) fn timeout_cell(seconds: Option<f64>) -> String {
    match seconds {
        None => "-".into(),
        Some(s) if s.is_infinite() => "long".into(),
        Some(s) if s >= 1.0 => format!("{s:.0}s"),
        Some(s) if s >= 1e-3 => format!("{:.0}ms", s * 1e3),
        Some(s) => format!("{:.0}us", s * 1e6),
    }
}

/// A column's cell: events per second, or a share of a CPU in %.
pub(super) fn cell(row: &Row, column: Column) -> String {
    match column.cell() {
        Cell::PerSecond => rate_cell(row.rate(column)),
        Cell::Percent => rate_cell(row.rate(column) * 100.0),
    }
}

/// The estimated share of a CPU in %: `-` for none, `<0.1` below a
/// tenth of a percent.
pub(super) fn cpu_cell(row: &Row) -> String {
    match row.estimated_cpu_share * 100.0 {
        p if p <= 0.0 => "-".into(),
        p if p < 0.1 => "<0.1".into(),
        p => rate_cell(p),
    }
}

/// Who a row is in the text table: comm, and the first of pod, unit and
/// cgroup it has; the pid when the agent labels series with it.
pub(super) fn who(row: &Row) -> (String, String, String) {
    let [comm, pid, cgroup, unit, namespace, pod, _container] = &row.identity;
    let place = if !pod.is_empty() {
        format!("{namespace}/{pod}")
    } else if !unit.is_empty() {
        unit.clone()
    } else {
        cgroup.clone()
    };
    (pid.clone(), comm.clone(), place)
}

/// One text frame: a header line, the node line, the column titles and
/// `rows` (already sorted and cut to length).
pub fn text(header: &Header<'_>, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "slowpath top - {} - {} - rates over {:.1}s - {} processes",
        header.time, header.source, header.interval_seconds, header.processes
    );
    let _ = writeln!(out, "{}", header.node);
    let _ = write!(out, "{:>7} {:<16} {:>5}", "PID", "COMM", "CPU%");
    for column in Column::all() {
        let _ = write!(out, " {:>8}", column.header());
    }
    let _ = writeln!(out, " {:>8}  {:<32} FINDINGS", "TIMEOUT", "POD/UNIT/CGROUP");
    for row in rows {
        let (pid, comm, place) = who(row);
        let pid = if pid.is_empty() { "-".into() } else { pid };
        let _ = write!(
            out,
            "{pid:>7} {:<16} {:>5}",
            truncate(&comm, 16),
            cpu_cell(row)
        );
        for column in Column::all() {
            let _ = write!(out, " {:>8}", cell(row, column));
        }
        let _ = writeln!(
            out,
            " {:>8}  {:<32} {}",
            timeout_cell(row.median_timeout_seconds),
            truncate(&place, 32),
            row.findings.join(",")
        );
    }
    out
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut t: String = s.chars().take(width - 1).collect();
    t.push('~');
    t
}

/// A row as one JSON object: the frame's time, source (the header's: the
/// agent's URL or `standalone (...)`) and node line, the identity labels, the rates
/// per second by column name (compaction in seconds per second), the
/// median requested timeout in seconds and the findings.
#[derive(Serialize)]
struct JsonRow<'a> {
    time: &'a str,
    source: &'a str,
    /// The text frame's node line (clocksource, THP settings, the reader's
    /// CPU, the hooks): the same in every row of a frame.
    node: &'a str,
    interval_seconds: f64,
    #[serde(flatten)]
    labels: std::collections::BTreeMap<&'static str, &'a str>,
    #[serde(flatten)]
    row: &'a Row,
}

/// One JSON line per row (no line for an empty frame).
pub fn json_lines(header: &Header<'_>, rows: &[Row]) -> String {
    let mut out = String::new();
    for row in rows {
        let labels = IDENTITY
            .iter()
            .zip(&row.identity)
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        let line = JsonRow {
            time: header.time,
            source: header.source,
            node: header.node,
            interval_seconds: header.interval_seconds,
            labels,
            row,
        };
        if let Ok(text) = serde_json::to_string(&line) {
            out += &text;
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_at_a_glance() {
        assert_eq!(rate_cell(0.0), "-");
        assert_eq!(rate_cell(2.25), "2.2");
        assert_eq!(rate_cell(999.6), "1000");
        assert_eq!(rate_cell(25_400.0), "25k");
        assert_eq!(rate_cell(3_250_000.0), "3.2M");
        assert_eq!(timeout_cell(Some(0.001)), "1ms");
        assert_eq!(timeout_cell(Some(0.0001)), "100us");
        assert_eq!(timeout_cell(Some(0.00001)), "10us");
        assert_eq!(timeout_cell(Some(10.0)), "10s");
        assert_eq!(timeout_cell(Some(f64::INFINITY)), "long");
    }
}
