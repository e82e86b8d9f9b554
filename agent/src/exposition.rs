//! Building blocks of the exposition, shared by every signal: a metric
//! family's name, help and type, and builders for counters, gauges and
//! histograms in the protobuf model the `prometheus` crate encodes.

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

/// One metric family: name, help, type. Per-process families carry the
/// series labels (`comm`, `cgroup`, `unit`, optional `pid` and pod labels)
/// before their own.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
}

/// The families one part of the agent (outside the signals) defines, with
/// the file that defines them: what `slowpath signals` lists as the agent's
/// own families (docs/metrics.md's table links the file).
pub struct FamilyList {
    /// The defining file, from the workspace root (`file!()`).
    pub defined_in: &'static str,
    pub families: &'static [&'static Family],
}

/// Label pairs of one metric, in export order.
pub type Labels = Vec<(&'static str, String)>;

/// A metric with `labels` (name, value) in order.
fn metric(labels: &[(&str, String)]) -> Metric {
    let pairs = labels
        .iter()
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.clone());
            pair
        })
        .collect();
    let mut m = Metric::default();
    m.set_label(pairs);
    m
}

pub fn counter(labels: &[(&str, String)], value: f64) -> Metric {
    let mut m = metric(labels);
    let mut c = Counter::default();
    c.set_value(value);
    m.set_counter(c);
    m
}

pub fn gauge(labels: &[(&str, String)], value: f64) -> Metric {
    let mut m = metric(labels);
    let mut g = Gauge::default();
    g.set_value(value);
    m.set_gauge(g);
    m
}

/// A histogram from the kernel's non-cumulative bucket counts: `counts[i]`
/// holds the observations in (`bounds[i-1]`, `bounds[i]`], and the one
/// extra last count those above every bound (+Inf). `None` when empty.
pub fn histogram(
    labels: &[(&str, String)],
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
) -> Option<Metric> {
    let (finite, total) = cumulative_buckets(bounds, counts);
    if total == 0 {
        return None;
    }
    let buckets = finite
        .into_iter()
        .map(|(bound, count)| {
            let mut b = Bucket::default();
            b.set_upper_bound(bound);
            b.set_cumulative_count(count);
            b
        })
        .collect();
    let mut h = Histogram::default();
    h.set_sample_count(total);
    h.set_sample_sum(sum);
    h.set_bucket(buckets);
    let mut m = metric(labels);
    m.set_histogram(h);
    Some(m)
}

/// Cumulative `(upper_bound, count)` pairs for the finite bounds, and the
/// total count (the +Inf bucket), from non-cumulative `counts` (one more
/// than `bounds`).
pub fn cumulative_buckets(bounds: &[f64], counts: &[u64]) -> (Vec<(f64, u64)>, u64) {
    let mut running = 0u64;
    let finite = bounds
        .iter()
        .zip(counts)
        .map(|(&bound, &n)| {
            running += n;
            (bound, running)
        })
        .collect();
    (finite, counts.iter().sum())
}

pub fn family(f: &Family, metrics: Vec<Metric>) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(f.name.into());
    mf.set_help(f.help.into());
    mf.set_field_type(f.kind);
    mf.set_metric(metrics);
    mf
}

/// The series' labels followed by `extra`.
pub fn with(key: &[(&'static str, String)], extra: &[(&'static str, &str)]) -> Labels {
    let mut labels = key.to_vec();
    labels.extend(extra.iter().map(|(n, v)| (*n, v.to_string())));
    labels
}

/// Push a counter when non-zero: an idle process costs no series.
pub fn push_nonzero(out: &mut Vec<Metric>, labels: Labels, value: f64) {
    if value > 0.0 {
        out.push(counter(&labels, value));
    }
}

/// Whether `f` follows the Prometheus naming rules slowpath keeps: the
/// `slowpath_` prefix, `_total` exactly on counters, a help text.
#[cfg(test)]
pub fn follows_conventions(f: &Family) -> bool {
    let is_counter = f.kind == MetricType::COUNTER;
    f.name.starts_with("slowpath_")
        && f.name.ends_with("_total") == is_counter
        && !f.help.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_accumulate_and_end_in_inf() {
        let bounds = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0];
        let counts = [0, 0, 0, 1000, 2, 0, 0, 0, 5];
        let (finite, total) = cumulative_buckets(&bounds, &counts);
        assert_eq!(finite[2], (1e-4, 0));
        assert_eq!(finite[3], (1e-3, 1000));
        assert_eq!(finite[4], (1e-2, 1002));
        assert_eq!(finite[7], (10.0, 1002));
        assert_eq!(total, 1007);
        let h = histogram(&[], &bounds, &counts, 1.5).unwrap();
        assert_eq!(h.get_histogram().get_sample_count(), 1007);
        assert!(histogram(&[], &bounds, &[0; 9], 0.0).is_none());
    }
}
