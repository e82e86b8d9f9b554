//! Attaching the loaded programs.

use anyhow::{bail, Result};
use libbpf_rs::skel::Skel;
use libbpf_rs::Link;
use tracing::{info, warn};

use super::hooks::{classify_program, next_attach_type, probe_index, AttachType, PROBES};
use super::load::{LoadOptions, Loaded};
use super::plan::{Plan, Refused};
use super::skel::SlowpathSkel;

/// Result of attaching one probe.
#[derive(Clone, Debug)]
pub struct ProbeStatus {
    pub probe: &'static str,
    pub attach_type: AttachType,
    /// `None` when attached; else the kernel's or libbpf's reason.
    pub error: Option<String>,
}

impl ProbeStatus {
    pub fn attached(&self) -> bool {
        self.error.is_none()
    }
}

/// Tracepoint name used by `break_probe`.
pub(super) const MISSING_TRACEPOINT: &str = "slowpath_no_such_tracepoint";

/// What attaching a loaded object gave.
pub(super) enum Attached<'obj> {
    /// Every hook that could attach did; the others are in `probes`.
    All(Box<Loaded<'obj>>),
    /// `probe` failed to attach as `from` and has a next attach type `to`:
    /// reload with it (everything attached so far is detached on drop).
    StepDown {
        probe: &'static str,
        from: AttachType,
        to: AttachType,
    },
}

pub(super) fn attach<'obj>(
    skel: SlowpathSkel<'obj>,
    opts: &LoadOptions,
    plan: &Plan,
    refused: &Refused,
) -> Result<Attached<'obj>> {
    let (links, mut probes) = attach_all(&skel, opts);
    let failed_with_next = probes
        .iter()
        .filter(|p| !p.attached() && opts.break_probe.as_deref() != Some(p.probe))
        .find_map(|p| {
            Some((
                p.probe,
                p.attach_type,
                next_attach_type(p.probe, p.attach_type)?,
            ))
        });
    if let Some((probe, from, to)) = failed_with_next {
        return Ok(Attached::StepDown { probe, from, to });
    }
    for (idx, reason) in refused.iter().enumerate() {
        if let Some(reason) = reason {
            probes.push(ProbeStatus {
                probe: PROBES[idx],
                attach_type: plan[idx],
                error: Some(reason.clone()),
            });
        }
    }
    probes.sort_by_key(|p| probe_index(p.probe));
    if links.is_empty() {
        let reasons: Vec<String> = probes
            .iter()
            .map(|p| format!("{}: {}", p.probe, p.error.as_deref().unwrap_or("?")))
            .collect();
        bail!("no BPF program could be attached ({})", reasons.join("; "));
    }
    Ok(Attached::All(Box::new(Loaded {
        skel,
        probes,
        _links: links,
    })))
}

/// Attach every loaded program; one status per probe (a probe attached with
/// fentry is attached when all of its programs are).
pub(super) fn attach_all(
    skel: &SlowpathSkel<'_>,
    opts: &LoadOptions,
) -> (Vec<Link>, Vec<ProbeStatus>) {
    let mut links = Vec::new();
    let mut probes: Vec<ProbeStatus> = Vec::new();
    for prog in skel.object().progs_mut() {
        if !prog.autoload() {
            continue;
        }
        let Ok((probe, attach_type)) = classify_program(prog.name()) else {
            continue;
        };
        if probes.iter().any(|p| p.probe == probe && p.error.is_some()) {
            continue; // one failed program of a hook is enough to report it
        }
        let attached = if opts.break_probe.as_deref() == Some(probe) {
            prog.attach_raw_tracepoint(MISSING_TRACEPOINT)
        } else {
            prog.attach()
        };
        let error = match attached {
            Ok(link) => {
                links.push(link);
                None
            }
            Err(err) => {
                warn!(probe, program = %prog.name().to_string_lossy(), %attach_type, error = %err,
                      "probe not attached; the others keep working");
                Some(err.to_string())
            }
        };
        match probes.iter_mut().find(|p| p.probe == probe) {
            Some(status) => status.error = status.error.take().or(error),
            None => probes.push(ProbeStatus {
                probe,
                attach_type,
                error,
            }),
        }
    }
    for p in probes.iter().filter(|p| p.attached()) {
        info!(probe = p.probe, attach_type = %p.attach_type, "attached");
    }
    probes.sort_by_key(|p| PROBES.iter().position(|&n| n == p.probe));
    (links, probes)
}
