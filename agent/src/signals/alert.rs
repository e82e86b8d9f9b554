//! A signal's per-process alert ([`super::Signal::alert`]): a process
//! whose recorded rate of the signal stays above a threshold for a while,
//! joined to the agent's finding for it. `slowpath signals` prints it;
//! `deploy/render.sh` writes it into the chart (`files/signals.json`, whose
//! PrometheusRule makes the alert from it) and its threshold and duration
//! into `values.yaml` (`prometheusRule.thresholds`, `.for`), so a new
//! signal's alert is written once, here. Alerts of another shape (a node's
//! sum, a ratio, the agent's health) stay in the chart's template.

use serde::{Serialize, Serializer};

use super::recorded::recorded_name;
use super::{FindingRule, Recorded};

/// Finding ids as the regex a `finding=~` matcher takes: "a|b".
fn ids_regex<S: Serializer>(
    rules: &&'static [&'static FindingRule],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rules.iter().map(|r| r.id).collect::<Vec<_>>().join("|"))
}

/// The per-process alert of a signal, as the chart renders it:
///
/// ```text
/// alert: <name>
/// expr: instance_cgroup_comm:<rate>:rate5m > <thresholds.KEY>  (joined to the finding)
/// for: <for.KEY>
/// summary: <summary>
/// description: Process <comm> (pod, unit, cgroup) on <instance> <description> <the fix>
/// runbook_url: <runbook base>#<runbook>
/// ```
#[derive(Serialize)]
pub struct ProcessAlert {
    /// The alert's name, `Slowpath<Something>` in upper camel case.
    pub name: &'static str,
    /// The recorded rate it compares, per process
    /// (`instance_cgroup_comm:<name>:rate5m`): one of the signal's
    /// [`super::Signal::recorded`].
    #[serde(serialize_with = "recorded_name")]
    pub rate: &'static Recorded,
    /// Its threshold, in the rate's unit (per second, or seconds per second).
    pub threshold: Setting,
    /// How long the rate must stay above it, a Prometheus duration.
    #[serde(rename = "for")]
    pub for_: Setting,
    /// The findings of the signal, for the same process, whose
    /// `slowpath_finding_info` gives the alert its `known_source` (the
    /// chart matches their ids as a regex, `a|b`).
    #[serde(serialize_with = "ids_regex")]
    pub findings: &'static [&'static FindingRule],
    /// The summary annotation, a Prometheus template: its own text whole,
    /// e.g. `{{ $labels.comm }} on {{ $labels.instance }} makes ...`.
    pub summary: &'static str,
    /// What the rate means for the process, the fix in a few words: the
    /// description annotation after "Process <comm> (<where>) on
    /// <instance>", before the signal's fixes (a Prometheus template, one
    /// paragraph).
    pub description: &'static str,
    /// The anchor of its section in docs/runbook.md (`runbook_url`).
    pub runbook: &'static str,
}

/// A setting of the chart's `prometheusRule` values.
#[derive(Serialize)]
pub struct Setting {
    /// Its key under `prometheusRule.thresholds` or `prometheusRule.for`.
    pub key: &'static str,
    /// Its default, as `values.yaml` writes it (a number, or a duration).
    pub default: &'static str,
    /// Why this default: the comment above it in `values.yaml` (empty: none).
    pub why: &'static str,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use crate::signals::SIGNALS;

    #[test]
    fn every_alert_is_named_keyed_and_reads_a_rate_of_its_own_signal() {
        let (mut names, mut thresholds) = (HashSet::new(), HashSet::new());
        for signal in SIGNALS {
            let Some(alert) = &signal.alert else { continue };
            let camel = alert.name.bytes().all(|b| b.is_ascii_alphanumeric());
            assert!(
                alert.name.starts_with("Slowpath") && camel,
                "{}",
                alert.name
            );
            assert!(names.insert(alert.name), "{} declared twice", alert.name);
            assert!(
                thresholds.insert(alert.threshold.key),
                "{}",
                alert.threshold.key
            );
            let own = signal.recorded.iter().any(|r| r.name == alert.rate.name);
            assert!(
                own,
                "{}: {} is not its signal's",
                alert.name, alert.rate.name
            );
            let threshold: f64 = alert.threshold.default.parse().expect("a number");
            assert!(threshold > 0.0, "{}", alert.name);
            let unit = alert.for_.default.trim_end_matches(char::is_alphabetic);
            assert!(unit.parse::<u32>().is_ok(), "{}: for", alert.name);
            for key in [alert.threshold.key, alert.for_.key] {
                assert!(key.bytes().all(|b| b.is_ascii_alphanumeric()), "{key}");
            }
            assert!(alert.runbook.bytes().all(|b| b != b'#' && b != b' '));
            // The template adds the process and the fix around these.
            assert!(!alert.description.contains('\n'), "{}", alert.name);
            assert!(alert.summary.contains("{{ $value"), "{}", alert.name);
        }
    }
}
