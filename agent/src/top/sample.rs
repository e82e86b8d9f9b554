//! One sample of a read of the agent's metrics, whichever way it came: a
//! line of the text page a running agent served (parsed by
//! `prometheus_parse`), or a metric of the families the view's own registry
//! gathered (standalone: no text encoded and parsed back in between, which
//! was a fifth of a standalone view's CPU at 1,000 processes). The rows and
//! the node line read these, so both sources give the same rows.

use std::borrow::Cow;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// One sample: its metric name (a histogram's family name, without
/// `_bucket`), its labels and its value.
pub struct Sample<'a> {
    pub metric: &'a str,
    labels: Labels<'a>,
    pub value: Value,
}

enum Labels<'a> {
    Parsed(&'a prometheus_parse::Labels),
    Gathered(&'a [LabelPair]),
}

/// A sample's value, by the family's type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter, or an untyped sample (the agent serves none; a page
    /// from elsewhere may, and it is read as a counter).
    Counter(f64),
    Gauge(f64),
    /// A histogram's cumulative buckets, `(upper bound, count)`, ending
    /// with `+Inf` (its count is the histogram's sample count).
    Histogram(Vec<(f64, f64)>),
    /// A summary: no column reads one.
    Other,
}

impl<'a> Sample<'a> {
    /// A label's value; `None` where the series has no such label.
    pub fn label(&self, name: &str) -> Option<Cow<'a, str>> {
        match self.labels {
            Labels::Parsed(labels) => labels.get(name).map(unescape),
            Labels::Gathered(pairs) => (pairs.iter())
                .find(|p| p.name() == name)
                .map(|p| Cow::Borrowed(p.value())),
        }
    }

    /// A label's value, empty where the series has no such label.
    pub fn label_or_empty(&self, name: &str) -> Cow<'a, str> {
        self.label(name).unwrap_or_default()
    }
}

/// A label value as the exposition format escapes it (`\\`, `\"`,
/// `\n`), as it was: `prometheus_parse` keeps the escapes, and systemd's
/// unit names in cgroup paths hold backslashes (`dev-disk-by\x2duuid-...`).
fn unescape(value: &str) -> Cow<'_, str> {
    if !value.contains('\\') {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// The samples of a parsed page.
pub fn parsed(scrape: &prometheus_parse::Scrape) -> impl Iterator<Item = Sample<'_>> {
    scrape.samples.iter().map(|s| Sample {
        metric: &s.metric,
        labels: Labels::Parsed(&s.labels),
        value: match &s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => {
                Value::Counter(*v)
            }
            prometheus_parse::Value::Gauge(v) => Value::Gauge(*v),
            prometheus_parse::Value::Histogram(buckets) => {
                Value::Histogram((buckets.iter()).map(|b| (b.less_than, b.count)).collect())
            }
            prometheus_parse::Value::Summary(_) => Value::Other,
        },
    })
}

/// The samples of gathered families, as the text encoder would write them
/// and the parser read them back.
pub fn gathered(families: &[MetricFamily]) -> impl Iterator<Item = Sample<'_>> {
    families.iter().flat_map(|family| {
        let kind = family.get_field_type();
        (family.get_metric().iter()).map(move |metric| Sample {
            metric: family.name(),
            labels: Labels::Gathered(metric.get_label()),
            value: value_of(kind, metric),
        })
    })
}

fn value_of(kind: MetricType, metric: &Metric) -> Value {
    match kind {
        MetricType::COUNTER => Value::Counter(metric.get_counter().get_value()),
        MetricType::GAUGE => Value::Gauge(metric.get_gauge().get_value()),
        MetricType::HISTOGRAM => {
            let h = metric.get_histogram();
            let mut buckets: Vec<(f64, f64)> = (h.get_bucket().iter())
                .map(|b| (b.upper_bound(), b.cumulative_count() as f64))
                .collect();
            // the text encoder adds the +Inf bucket unless it is there
            if buckets.last().is_none_or(|(le, _)| *le != f64::INFINITY) {
                buckets.push((f64::INFINITY, h.get_sample_count() as f64));
            }
            Value::Histogram(buckets)
        }
        // the agent registers neither
        MetricType::SUMMARY | MetricType::UNTYPED => Value::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, Registry, TextEncoder};

    /// A registry with every type of family the agent serves, odd label
    /// values included.
    fn registry() -> Registry {
        let r = Registry::new();
        let c = prometheus::CounterVec::new(
            prometheus::Opts::new("slowpath_clock_syscalls_total", "h"),
            &["comm", "cgroup", "clock"],
        )
        .unwrap();
        c.with_label_values(&["java", "/a b\"c\\x2d\nd", "monotonic"])
            .inc_by(7.0);
        c.with_label_values(&["ruby", "/b", "realtime"]).inc_by(2.5);
        r.register(Box::new(c)).unwrap();
        let g = prometheus::Gauge::new("slowpath_syscall_seconds", "h").unwrap();
        g.set(2e-7);
        r.register(Box::new(g)).unwrap();
        let h = prometheus::HistogramVec::new(
            prometheus::HistogramOpts::new("slowpath_timer_requested_seconds", "h")
                .buckets(vec![0.0001, 0.001]),
            &["comm"],
        )
        .unwrap();
        for v in [0.00005, 0.0005, 0.0005, 3.0] {
            h.with_label_values(&["java"]).observe(v);
        }
        r.register(Box::new(h)).unwrap();
        r
    }

    /// What a sample says, in a form two sources can be compared by.
    fn described(s: Sample<'_>) -> (String, Vec<(String, String)>, Value) {
        let mut labels: Vec<(String, String)> = ["comm", "cgroup", "clock", "none"]
            .iter()
            .filter_map(|n| s.label(n).map(|v| (n.to_string(), v.to_string())))
            .collect();
        labels.sort();
        (s.metric.to_string(), labels, s.value)
    }

    #[test]
    fn gathered_samples_are_what_the_text_page_parses_to() {
        let families = registry().gather();
        let mut text = Vec::new();
        TextEncoder::new().encode(&families, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        // the parser also gives a histogram's _sum and _count lines as
        // samples of their own; no column reads them
        let mut from_text: Vec<_> = (parsed(&scrape).map(described))
            .filter(|s| !s.0.ends_with("_sum") && !s.0.ends_with("_count"))
            .collect();
        let mut in_process: Vec<_> = gathered(&families).map(described).collect();
        from_text.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        in_process.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(in_process, from_text);
        assert_eq!(in_process.len(), 4, "{in_process:?}");
        let histogram = in_process
            .iter()
            .find(|s| matches!(s.2, Value::Histogram(_)));
        assert_eq!(
            histogram.map(|s| s.2.clone()),
            Some(Value::Histogram(vec![
                (0.0001, 1.0),
                (0.001, 3.0),
                (f64::INFINITY, 4.0)
            ]))
        );
    }
}
