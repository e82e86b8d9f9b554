//! Attaching the loaded programs, one status per hook.

use anyhow::{bail, Result};
use libbpf_rs::skel::Skel;
use libbpf_rs::Link;
use tracing::{info, warn};

#[cfg(feature = "fault-injection")]
use super::fault::{attach_program, broken_on_purpose};
use super::hooks::{AttachType, HookTable};
use super::libbpf_log::SECCOMP_UNCONFINED;
use super::loaded::{LoadOptions, Loaded, ProbeStatus};
use super::plan::Search;
use super::skel::SlowpathSkel;

/// What attaching a loaded object gave.
pub(super) enum Attached<'obj> {
    /// Every hook that could attach did; the others are in `probes`.
    All(Box<Loaded<'obj>>),
    /// Hook `idx` failed to attach as `from` and has a next attach type
    /// `to`: reload with it (everything attached so far is detached on drop).
    StepDown {
        idx: usize,
        from: AttachType,
        to: AttachType,
    },
}

/// Attach the programs of the loaded `skel`; the hooks `search` left out
/// are reported with their reason. Errors when nothing attached.
pub(super) fn attach<'obj>(
    skel: SlowpathSkel<'obj>,
    opts: &LoadOptions,
    search: &Search<'_>,
) -> Result<Attached<'obj>> {
    let table = search.table();
    let (links, mut probes) = attach_all(&skel, opts, table);
    let failed_with_next = probes
        .iter()
        .filter(|p| !p.attached() && !broken_on_purpose(opts, p.probe))
        .find_map(|p| {
            let idx = table.index(p.probe)?;
            Some((
                idx,
                p.attach_type,
                table.next_attach_type(idx, p.attach_type)?,
            ))
        });
    if let Some((idx, from, to)) = failed_with_next {
        return Ok(Attached::StepDown { idx, from, to });
    }
    for (idx, reason) in search.refused().iter().enumerate() {
        if let Some(reason) = reason {
            probes.push(ProbeStatus {
                probe: table.name(idx),
                attach_type: search.plan()[idx],
                error: Some(reason.clone()),
                left_out: None,
            });
        }
    }
    probes.sort_by_key(|p| table.index(p.probe));
    for p in &mut probes {
        p.left_out = table
            .index(p.probe)
            .and_then(|idx| table.left_out_cause(idx));
    }
    if links.is_empty() {
        bail!(nothing_attached(&probes));
    }
    Ok(Attached::All(Box::new(Loaded {
        skel,
        probes,
        process_capacity: opts.max_processes,
        untraced_before: None,
        table: table.clone(),
        _links: links,
    })))
}

/// The error when no hook attached: each hook's reason, then the fix for
/// each kind of reason met, in one line.
fn nothing_attached(probes: &[ProbeStatus]) -> String {
    let reasons: Vec<String> = probes
        .iter()
        .map(|p| format!("{}: {}", p.probe, p.error.as_deref().unwrap_or("?")))
        .collect();
    let mut fixes: Vec<String> = Vec::new();
    for fix in probes
        .iter()
        .filter_map(|p| attach_fix(p.error.as_deref()?))
    {
        if !fixes.contains(&fix) {
            fixes.push(fix);
        }
    }
    format!(
        "no BPF program could be attached ({}): {}",
        reasons.join("; "),
        fixes.join("; ")
    )
}

/// What to do about one hook's reason (libbpf's `... (os error N)`, or the
/// search's refusal); `None` for a hook left out with the one it serves.
fn attach_fix(reason: &str) -> Option<String> {
    if reason.starts_with("needs ") {
        return None;
    }
    if reason.starts_with("kernel refused the program") {
        return Some(
            "the verifier refused it: run with --log.level=debug for its log and report it".into(),
        );
    }
    let errno = reason
        .rsplit_once("(os error ")
        .and_then(|(_, n)| n.trim_end_matches(')').parse::<i32>().ok());
    // ENOTSUPP (524) is the kernel's own, not in libc
    Some(match errno {
        Some(libc::EPERM | libc::EACCES) => format!(
            "EPERM/EACCES: the kernel refuses to attach: check CAP_PERFMON (or CAP_SYS_ADMIN), \
             then a seccomp profile ({SECCOMP_UNCONFINED}) or an LSM policy (SELinux, AppArmor)"
        ),
        Some(libc::ENOENT) => "ENOENT: this kernel has no such tracepoint: check that the BTF \
             (--bpf.btf-path) is this kernel's own"
            .into(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | 524) => "EINVAL/ENOTSUPP: this kernel cannot \
             attach this type: try --bpf.attach-type=raw-tp (slowpath needs Linux 5.8 or newer)"
            .into(),
        _ => "run with --log.level=debug for libbpf's messages and report them with the log".into(),
    })
}

/// Attach every loaded program; one status per probe, in table order (a
/// probe attached with fentry is attached when all of its programs are).
fn attach_all(
    skel: &SlowpathSkel<'_>,
    opts: &LoadOptions,
    table: &HookTable,
) -> (Vec<Link>, Vec<ProbeStatus>) {
    let mut links = Vec::new();
    let mut probes: Vec<ProbeStatus> = Vec::new();
    for prog in skel.object().progs_mut() {
        if !prog.autoload() {
            continue;
        }
        let Ok((idx, attach_type)) = table.classify(prog.name()) else {
            continue;
        };
        let probe = table.name(idx);
        if probes.iter().any(|p| p.probe == probe && p.error.is_some()) {
            continue; // one failed program of a hook is enough to report it
        }
        let error = match attach_program(&prog, probe, opts) {
            Ok(link) => {
                links.push(link);
                None
            }
            Err(err) => {
                // with its cause: "failed to attach BPF program: Operation
                // not permitted (os error 1)"
                let reason = format!("{err:#}");
                warn!(probe, program = %prog.name().to_string_lossy(), %attach_type, error = %reason,
                      "probe not attached; the others keep working");
                Some(reason)
            }
        };
        match probes.iter_mut().find(|p| p.probe == probe) {
            Some(status) => status.error = status.error.take().or(error),
            None => probes.push(ProbeStatus {
                probe,
                attach_type,
                error,
                left_out: None,
            }),
        }
    }
    for p in probes.iter().filter(|p| p.attached()) {
        info!(probe = p.probe, attach_type = %p.attach_type, "attached");
    }
    probes.sort_by_key(|p| table.index(p.probe));
    (links, probes)
}

/// Whether hook `probe` is broken on purpose: never without fault injection.
#[cfg(not(feature = "fault-injection"))]
fn broken_on_purpose(_opts: &LoadOptions, _probe: &str) -> bool {
    false
}

/// Attach one program of hook `probe` where its section says.
#[cfg(not(feature = "fault-injection"))]
fn attach_program(
    prog: &libbpf_rs::ProgramMut<'_>,
    _probe: &str,
    _opts: &LoadOptions,
) -> libbpf_rs::Result<Link> {
    prog.attach()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(probe: &'static str, error: &str) -> ProbeStatus {
        ProbeStatus {
            probe,
            attach_type: AttachType::RawTp,
            error: Some(error.to_string()),
            left_out: None,
        }
    }

    #[test]
    fn nothing_attached_names_each_reason_and_its_fix_once() {
        let probes = [
            status(
                "sys_enter",
                "failed to attach BPF program: Operation not permitted (os error 1)",
            ),
            status(
                "sched_process_exit",
                "failed to attach BPF program: Operation not permitted (os error 1)",
            ),
            status(
                "mm_page_alloc",
                "kernel refused the program: invalid func unknown#158",
            ),
            status(
                "mm_compaction_end",
                "needs mm_page_alloc, which the kernel refused",
            ),
            status("cgroup_mkdir", "No such file or directory (os error 2)"),
        ];
        let message = nothing_attached(&probes);
        assert!(message.starts_with(
            "no BPF program could be attached (sys_enter: failed to attach BPF program: Operation \
             not permitted (os error 1); sched_process_exit: failed to attach BPF program: \
             Operation not permitted (os error 1); mm_page_alloc: kernel \
             refused the program: invalid func unknown#158; mm_compaction_end: needs \
             mm_page_alloc, which the kernel refused; cgroup_mkdir: No such file or directory \
             (os error 2)): EPERM/EACCES: the kernel refuses to attach: check CAP_PERFMON"
        ));
        assert_eq!(message.matches("EPERM/EACCES").count(), 1, "{message}");
        assert!(message.contains("seccomp=unconfined"));
        assert!(message.contains("; the verifier refused it: run with --log.level=debug"));
        assert!(message.ends_with("; ENOENT: this kernel has no such tracepoint: check that the BTF (--bpf.btf-path) is this kernel's own"));
        assert!(!message.contains('\n'));
    }

    #[test]
    fn an_unsupported_attach_points_to_raw_tp_and_an_unknown_one_to_the_log() {
        for reason in [
            "Invalid argument (os error 22)",
            "Unknown error 524 (os error 524)",
        ] {
            let fix = attach_fix(reason).unwrap();
            assert!(fix.contains("try --bpf.attach-type=raw-tp"), "{fix}");
        }
        let fix = attach_fix("Device or resource busy (os error 16)").unwrap();
        assert!(fix.starts_with("run with --log.level=debug"), "{fix}");
    }
}
