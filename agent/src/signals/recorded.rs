//! What the chart's recording rules record of each signal
//! ([`super::Signal::recorded`]): one per-process and per-node rate each
//! (`instance_cgroup_comm:<name>:rate5m`, `instance:<name>:rate5m`, summed
//! further to pods, namespaces, units and the cluster), of one counter
//! family of the signal, optionally only where one label has one value.
//! `slowpath signals` prints them; `deploy/render.sh` writes them into the
//! chart (`files/signals.json`), whose rules are made from that list.

use serde::{Serialize, Serializer};

use crate::exposition::Family;

/// A family by its name (`slowpath signals`; the declarations' one form
/// of a family reference).
pub(super) fn family_name<S: Serializer>(
    family: &&'static Family,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(family.name)
}

/// A recorded rate by its name (`slowpath signals`).
pub(super) fn recorded_name<S: Serializer>(r: &&'static Recorded, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(r.name)
}

/// A recorded rate of one counter of a signal.
#[derive(Serialize)]
pub struct Recorded {
    /// The metric part of the recorded names (`level:<name>:rate5m`).
    pub name: &'static str,
    /// The counter whose rate is recorded.
    #[serde(serialize_with = "family_name")]
    pub family: &'static Family,
    /// A label that must have this value for a series to count.
    pub only: Option<(&'static str, &'static str)>,
    /// Its row in the fleet dashboard (dashboards/src/fleet.py: the top
    /// namespaces, pods, systemd units and nodes by this rate), or `None`
    /// for a rate the fleet view leaves out (an ordinary figure such as
    /// sleep calls, or the half of a ratio another row shows).
    pub fleet: Option<FleetRow>,
}

/// A recorded rate's row in the fleet dashboard: its unit is the counter's
/// (seconds per second for a `_seconds_total`, else per second).
#[derive(Serialize)]
pub struct FleetRow {
    /// The row's title, e.g. "Clock syscall fallbacks".
    pub title: &'static str,
    /// What one unit of the rate is and why it matters, in the panels'
    /// descriptions: "clock reads per second that entered the kernel ...".
    pub meaning: &'static str,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use prometheus::proto::MetricType;

    use crate::signals::{EventCost, SIGNALS};

    #[test]
    fn every_recorded_rate_is_of_a_counter_of_its_signal_under_a_name_of_its_own() {
        let mut names = HashSet::new();
        for signal in SIGNALS {
            for r in signal.recorded {
                assert!(names.insert(r.name), "{} recorded twice", r.name);
                let snake = r.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
                assert!(r.name.starts_with("slowpath_") && snake, "{}", r.name);
                assert!(
                    !r.name.ends_with("_total"),
                    "{}: a rate, not a total",
                    r.name
                );
                assert_eq!(r.family.kind, MetricType::COUNTER, "{}", r.name);
                let own = signal.families.iter().any(|f| f.name == r.family.name);
                assert!(own, "{}: {} is not its family", signal.name, r.family.name);
            }
        }
    }

    #[test]
    fn every_costed_top_column_charges_a_recorded_rate_of_its_counter() {
        for signal in SIGNALS {
            for column in signal.top.columns {
                let Some(r) = column.recorded else {
                    assert_eq!(
                        column.cost,
                        EventCost::None,
                        "{}: charges nothing",
                        column.header
                    );
                    continue;
                };
                assert!(
                    signal.recorded.iter().any(|own| own.name == r.name),
                    "{}: {} is not one of its signal's recorded rates",
                    column.header,
                    r.name
                );
                assert_eq!(r.family.name, column.family.name, "{}", column.header);
            }
        }
    }
}
