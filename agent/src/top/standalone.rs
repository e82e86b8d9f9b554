//! `slowpath top` without an agent: the agent's worker, registry and
//! findings engine run in the view's own process (`pipeline::
//! start_standalone_top` builds them), and each read is the families the
//! agent would serve, gathered in process (the samples a scrape of its page
//! would parse to: [`super::sample`]). The rows are then the same code's,
//! whichever source fed them.

use anyhow::{bail, Context, Result};
use prometheus::Registry;

use super::rows::Reading;
use super::sample;
use super::source::Source;
use crate::findings::{FindingsThread, SharedFindings};

/// The programs this view loaded, read in process. Dropping it stops the
/// findings engine, then detaches the programs (the registry holds the
/// last handle on the worker).
pub struct StandaloneSource {
    // field order is drop order: the engine holds a worker handle too
    findings: Option<(SharedFindings, FindingsThread)>,
    registry: Registry,
    description: String,
}

impl StandaloneSource {
    /// `registry` serves the worker's families; `findings` is the engine,
    /// unless findings are off; `why` goes in the header
    /// (`standalone (why)`).
    pub fn new(
        registry: Registry,
        findings: Option<(SharedFindings, FindingsThread)>,
        why: &str,
    ) -> Self {
        Self {
            findings,
            registry,
            description: format!("standalone ({why})"),
        }
    }
}

impl Source for StandaloneSource {
    /// Gather every family (reads the kernel tables) and take its rows.
    fn read(&self) -> Result<Reading> {
        Ok(Reading::from_samples(sample::gathered(
            &self.registry.gather(),
        )))
    }

    fn read_findings(&self) -> Result<serde_json::Value> {
        let Some((shared, _)) = &self.findings else {
            bail!("findings are off: run slowpath top with --findings.window above 0");
        };
        let json = shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .json
            .clone();
        serde_json::from_str(&json).context("parsing the findings")
    }

    fn describe(&self) -> &str {
        &self.description
    }

    fn reader(&self) -> &'static str {
        "view"
    }
}
