//! `slowpath signals` (hidden): the one export of what the agent declares,
//! for the generators (`deploy/signals.py`, `docs/generate.py`) and the
//! tests that would otherwise keep lists of their own. One JSON object:
//!
//! ```text
//! {"signals": [Signal, ...],          every signal, in SIGNALS order (signals::Signal
//!                                     says what each field holds)
//!  "agent_families": [{"name", "type", "help", "defined_in"}, ...]}
//!                                     the agent's own families: its state,
//!                                     findings, call sites, HTTP server
//! ```
//!
//! A signal's families are in its entry; together with `agent_families`
//! they are every family the agent may export.

use serde::Serialize;

use crate::exposition::FamilyList;
use crate::signals::{Signal, SIGNALS};

/// The agent's own families, by the part that defines them.
const AGENT_PARTS: [&FamilyList; 6] = [
    &crate::metrics::FAMILIES,
    &crate::findings::metrics::FAMILIES,
    &crate::callsites::harvest::FAMILIES,
    crate::http::FAMILIES[0],
    crate::http::FAMILIES[1],
    crate::http::FAMILIES[2],
];

#[derive(Serialize)]
struct Export {
    signals: &'static [&'static Signal],
    agent_families: Vec<AgentFamily>,
}

/// One of the agent's own families.
#[derive(Serialize)]
struct AgentFamily {
    name: &'static str,
    /// The Prometheus type, lower case.
    #[serde(rename = "type")]
    kind: String,
    help: &'static str,
    /// The file that defines it, from the repository's root.
    defined_in: &'static str,
}

fn agent_families() -> Vec<AgentFamily> {
    (AGENT_PARTS.iter())
        .flat_map(|part| part.families.iter().map(move |f| (part.defined_in, f)))
        .map(|(defined_in, f)| AgentFamily {
            name: f.name,
            kind: format!("{:?}", f.kind).to_lowercase(),
            help: f.help,
            defined_in,
        })
        .collect()
}

/// `slowpath signals`: the export as one JSON object on standard output.
pub fn print() -> anyhow::Result<()> {
    let export = Export {
        signals: &SIGNALS,
        agent_families: agent_families(),
    };
    println!("{}", serde_json::to_string_pretty(&export)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_family_is_exported_once_under_the_project_prefix() {
        let signal_families = SIGNALS
            .iter()
            .flat_map(|s| s.families.iter().map(|f| f.name));
        let agent: Vec<_> = agent_families();
        let mut seen = HashSet::new();
        for name in signal_families.chain(agent.iter().map(|f| f.name)) {
            assert!(name.starts_with("slowpath_"), "{name}");
            assert!(seen.insert(name), "{name} exported twice");
        }
        for f in &agent {
            assert!(f.defined_in.starts_with("agent/src/"), "{}", f.defined_in);
        }
    }
}
