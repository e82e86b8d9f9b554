//! The node line of `slowpath top`: what the signals' declarations say of
//! the node (`crate::signals::TopNode`: the clocksource and whether the
//! vDSO serves its clocks, the THP settings), the agent's own CPU and its
//! hooks, all from the agent's own series in each read.

use std::collections::BTreeMap;

use super::sample::Sample;
use crate::signals::{node_words, NodeGauges};

/// What one read of the agent says about the node and about itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeState {
    /// The series of the gauges the signals' node words read.
    pub gauges: NodeGauges,
    /// Attached hooks per attach type (`slowpath_probe_attached` 1).
    pub attached: BTreeMap<String, u32>,
    /// Hooks expected but not attached (`slowpath_probe_expected` 1 with
    /// `slowpath_probe_attached` 0), sorted.
    pub missing: Vec<String>,
    /// The agent process's CPU seconds (`process_cpu_seconds_total`).
    pub agent_cpu_seconds: Option<f64>,
    /// Its BPF programs' in-kernel seconds, their dispatch included
    /// (`slowpath_probe_run_seconds_total`, `slowpath_probe_dispatch_seconds_total`).
    pub bpf_seconds: Option<f64>,
    expected: Vec<String>,
    not_attached: Vec<String>,
}

impl NodeState {
    /// Take one sample of a read into the state, if it is one of the
    /// agent's node or self series.
    pub fn take(&mut self, sample: &Sample, value: f64) {
        let label = |name: &str| sample.label_or_empty(name).into_owned();
        match sample.metric {
            "slowpath_probe_attached" if value == 1.0 => {
                *self.attached.entry(label("attach_type")).or_default() += 1;
            }
            "slowpath_probe_attached" => self.not_attached.push(label("probe")),
            "slowpath_probe_expected" if value == 1.0 => self.expected.push(label("probe")),
            "process_cpu_seconds_total" => self.agent_cpu_seconds = Some(value),
            "slowpath_probe_run_seconds_total" | "slowpath_probe_dispatch_seconds_total" => {
                *self.bpf_seconds.get_or_insert(0.0) += value;
            }
            gauge => self.gauges.take(gauge, |name| sample.label(name), value),
        }
    }

    /// Finish a read: the hooks expected and not attached.
    pub fn finish(&mut self) {
        let expected = std::mem::take(&mut self.expected);
        let not_attached = std::mem::take(&mut self.not_attached);
        self.missing = (expected.into_iter())
            .filter(|p| not_attached.contains(p))
            .collect();
        self.missing.sort();
    }
}

/// The node line between two reads `seconds` apart, e.g.
/// `node: clocksource tsc (vDSO ok) | THP enabled=always
/// defrag=madvise | agent 0.3% CPU, BPF 0.2% | hooks 10 tp_btf`; `reader`
/// names the process that loaded the programs (`agent`, or `view` when the
/// view runs standalone).
pub fn node_line(before: &NodeState, now: &NodeState, seconds: f64, reader: &str) -> String {
    let mut parts = node_words(&now.gauges);
    let share = |old: Option<f64>, new: Option<f64>| match (old, new) {
        (Some(o), Some(n)) if n >= o && seconds > 0.0 => Some((n - o) / seconds * 100.0),
        _ => None,
    };
    if let Some(cpu) = share(before.agent_cpu_seconds, now.agent_cpu_seconds) {
        let mut own = format!("{reader} {} CPU", percent(cpu));
        if let Some(bpf) = share(before.bpf_seconds, now.bpf_seconds) {
            own.push_str(&format!(", BPF {}", percent(bpf)));
        }
        parts.push(own);
    }
    let hooks: Vec<String> = (now.attached.iter())
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    if !hooks.is_empty() {
        parts.push(format!("hooks {}", hooks.join(", ")));
    }
    if !now.missing.is_empty() {
        parts.push(format!("NOT ATTACHED: {}", now.missing.join(", ")));
    }
    format!("node: {}", parts.join(" | "))
}

/// A percentage: two decimals below 1 %, where the agent's own CPU lives.
fn percent(p: f64) -> String {
    if p < 1.0 {
        format!("{p:.2}%")
    } else {
        format!("{p:.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::{parsed, Value};
    use super::*;

    fn state(text: &str) -> NodeState {
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        let mut s = NodeState::default();
        for sample in parsed(&scrape) {
            if let Value::Counter(v) | Value::Gauge(v) = sample.value {
                s.take(&sample, v);
            }
        }
        s.finish();
        s
    }

    const BEFORE: &str = r#"# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 10
# TYPE slowpath_probe_run_seconds_total counter
slowpath_probe_run_seconds_total{probe="sys_enter"} 1
"#;

    const NOW: &str = r#"# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 10.03
# TYPE slowpath_probe_run_seconds_total counter
slowpath_probe_run_seconds_total{probe="sys_enter"} 1.006
# TYPE slowpath_probe_dispatch_seconds_total counter
slowpath_probe_dispatch_seconds_total{probe="sys_enter"} 0.004
# TYPE slowpath_clocksource_current_info gauge
slowpath_clocksource_current_info{clocksource="acpi_pm"} 1
# TYPE slowpath_vdso_fallback gauge
slowpath_vdso_fallback{clock="monotonic"} 1
slowpath_vdso_fallback{clock="realtime"} 1
# TYPE slowpath_thp_settings_info gauge
slowpath_thp_settings_info{enabled="always",defrag="madvise"} 1
# TYPE slowpath_probe_attached gauge
slowpath_probe_attached{probe="sys_enter",attach_type="tp_btf"} 1
slowpath_probe_attached{probe="sched_process_exit",attach_type="tp_btf"} 1
slowpath_probe_attached{probe="mm_page_alloc",attach_type="raw_tp"} 1
slowpath_probe_attached{probe="mm_compaction_end",attach_type="tp_btf"} 0
slowpath_probe_attached{probe="hrtimer_expire_entry",attach_type="raw_tp"} 0
# TYPE slowpath_probe_expected gauge
slowpath_probe_expected{probe="mm_compaction_end"} 1
slowpath_probe_expected{probe="hrtimer_expire_entry"} 0
"#;

    #[test]
    fn the_node_line_names_the_clocksource_thp_the_agents_cost_and_its_hooks() {
        let line = node_line(&state(BEFORE), &state(NOW), 2.0, "agent");
        assert_eq!(
            line,
            "node: clocksource acpi_pm (vDSO falls back: monotonic, realtime) | THP \
             enabled=always defrag=madvise | agent 1.5% CPU, BPF 0.50% | hooks 1 raw_tp, \
             2 tp_btf | NOT ATTACHED: mm_compaction_end"
        );
        // a first read: no rates yet, nothing unknown claimed
        let first = node_line(&NodeState::default(), &state(BEFORE), 2.0, "agent");
        assert_eq!(first, "node: clocksource unknown");
    }
}
