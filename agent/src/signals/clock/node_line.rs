//! The clock signal's words on `slowpath top`'s node line: the clocksource
//! and whether the vDSO serves the clocks the canary read, e.g.
//! `clocksource acpi_pm (vDSO falls back: monotonic, realtime)`.

use std::collections::BTreeMap;

use crate::signals::{NodeGauges, TopNode};

use super::{CLOCKSOURCE_CURRENT, VDSO_FALLBACK};

/// Its part of the node line: `slowpath_clocksource_current_info`'s
/// clocksource and `slowpath_vdso_fallback`'s verdict per clock.
pub const TOP_NODE: TopNode = TopNode {
    gauges: &[
        (&CLOCKSOURCE_CURRENT, &["clocksource"]),
        (&VDSO_FALLBACK, &["clock"]),
    ],
    words,
};

/// `clocksource NAME (VERDICT)`, or `clocksource unknown` before the
/// agent has read it.
fn words(gauges: &NodeGauges) -> Option<String> {
    let Some((labels, _)) = gauges.series(&CLOCKSOURCE_CURRENT).first() else {
        return Some("clocksource unknown".into());
    };
    let fallback: BTreeMap<&str, bool> = (gauges.series(&VDSO_FALLBACK).iter())
        .map(|(labels, value)| (labels[0].as_str(), *value == 1.0))
        .collect();
    Some(format!(
        "clocksource {} ({})",
        labels[0],
        vdso_verdict(&fallback)
    ))
}

/// Whether the vDSO serves the clocks the canary read.
fn vdso_verdict(fallback: &BTreeMap<&str, bool>) -> String {
    let fell: Vec<&str> = (fallback.iter())
        .filter(|(_, &f)| f)
        .map(|(c, _)| *c)
        .collect();
    match (fallback.is_empty(), fell.is_empty()) {
        (true, _) => "vDSO not checked yet".into(),
        (false, true) => "vDSO ok".into(),
        (false, false) => format!("vDSO falls back: {}", fell.join(", ")),
    }
}
