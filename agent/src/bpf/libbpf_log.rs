//! libbpf's messages during a load attempt: captured rather than printed,
//! and read for the program the kernel refused and the verifier's reason.

use std::ffi::OsStr;
use std::sync::Mutex;

use super::hooks::{AttachType, HookTable};

/// Run `f` with libbpf's messages captured (not printed), and return them:
/// a refused plan or program is expected on many kernels, and its verifier
/// log says which program and why.
pub(super) fn with_libbpf_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    fn capture(_level: libbpf_rs::PrintLevel, msg: String) {
        LIBBPF_LOG
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_str(&msg);
    }
    LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let saved = libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, capture)));
    let out = f();
    libbpf_rs::set_print(saved);
    let log = std::mem::take(&mut *LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()));
    (out, log)
}

/// What `with_libbpf_log` captured so far: libbpf's print callback is a
/// plain function, so the messages go through a static.
static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());

/// The tracepoint program the kernel refused, from libbpf's log ("prog
/// 'mm_page_alloc_raw': BPF program load failed: ..." and the verifier's
/// log after it), with the verifier's last message. `None` for fentry
/// programs (a refused fentry program moves the whole plan on) and for
/// failures that name no program. The hook is an index into `table`.
pub(super) fn refused_program(log: &str, table: &HookTable) -> Option<(usize, AttachType, String)> {
    let name = log.lines().find_map(|line| {
        let rest = &line[line.find("prog '")? + "prog '".len()..];
        let (name, after) = rest.split_once('\'')?;
        (after.contains("load failed") || after.contains("failed to load")).then_some(name)
    })?;
    let (idx, attach_type) = table.classify(OsStr::new(name)).ok()?;
    if attach_type == AttachType::Fentry {
        return None;
    }
    Some((idx, attach_type, verifier_reason(log)))
}

/// The verifier's message: the last line of the program's load log that is
/// not its statistics, or libbpf's own line when there is no log.
fn verifier_reason(log: &str) -> String {
    let body = log
        .split("-- BEGIN PROG LOAD LOG --")
        .nth(1)
        .and_then(|b| b.split("-- END PROG LOAD LOG --").next());
    let line = body.and_then(|b| {
        b.lines().map(str::trim).rfind(|l| {
            !l.is_empty()
                && !l.starts_with("processed ")
                && !l.starts_with("verification time")
                && !l.starts_with("stack depth")
        })
    });
    line.or_else(|| log.lines().find(|l| l.contains("load failed")))
        .unwrap_or("no reason given")
        .trim()
        .to_string()
}

/// The last lines of libbpf's log, for a load failure nothing could fix.
pub(super) fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(4)..];
    format!("libbpf: {}", tail.join(" | "))
}

/// How to take a container's seccomp profile out of the way: the chart's
/// value first (its default is RuntimeDefault, which containerd 1.7+ and
/// CRI-O make allow bpf(2) with CAP_BPF; older runtimes' profiles do not).
pub(super) const SECCOMP_UNCONFINED: &str = "run the container with a seccomp profile that allows \
     bpf(2), or unconfined (Helm chart: --set seccompProfile.type=Unconfined; a pod: \
     securityContext.seccompProfile.type: Unconfined; podman/docker: \
     --security-opt seccomp=unconfined)";

/// Add the likely cause and fix to a final load failure.
pub(super) fn explain_load_error(err: anyhow::Error) -> anyhow::Error {
    let release = crate::kernel::release().unwrap_or_default();
    explain_load_error_on(err, &release, crate::memlock::limit())
}

/// [`explain_load_error`] on a kernel `release` with the soft locked-memory
/// limit `memlock` (bytes, `None`: unlimited): a kernel older than 5.8 first
/// (nothing else helps then), then EPERM (a finite memlock limit before
/// 5.11, else seccomp or lockdown), else where libbpf's full log is.
fn explain_load_error_on(err: anyhow::Error, release: &str, memlock: Option<u64>) -> anyhow::Error {
    if let Some(too_old) = crate::kernel::too_old(release) {
        return err.context(too_old);
    }
    let eperm = err
        .chain()
        .any(|e| e.to_string().contains("Operation not permitted"));
    let memlock = crate::memlock::too_low(release, memlock);
    if let (true, Some(memlock)) = (eperm, memlock) {
        return err.context(format!("the kernel refused bpf() with EPERM: {memlock}"));
    }
    if eperm {
        return err.context(format!(
            "the kernel refused bpf() with EPERM although the capabilities are present: \
             a seccomp profile (a container runtime's default one) or kernel lockdown blocks it; \
             {SECCOMP_UNCONFINED}"
        ));
    }
    err.context(
        "the kernel refused every plan of BPF programs (the log lines above that start with \
         \"kernel refused\" give each attempt): run with --log.level=debug for libbpf's full \
         log, and report it with that log",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::hooks::tests::setup;

    #[test]
    fn the_refused_program_and_the_verifiers_reason_come_from_libbpfs_log() {
        // as libbpf 1.x prints a program the 5.10 verifier refuses
        let log = "libbpf: prog 'mm_page_alloc_raw': BPF program load failed: Invalid argument\n\
                   libbpf: prog 'mm_page_alloc_raw': -- BEGIN PROG LOAD LOG --\n\
                   0: (85) call unknown#158\ninvalid func unknown#158\n\
                   processed 3 insns (limit 1000000) max_states_per_insn 0\n\
                   -- END PROG LOAD LOG --\n\
                   libbpf: prog 'mm_page_alloc_raw': failed to load: -22\n";
        let table = HookTable::new(&setup());
        let refused_program = |log| refused_program(log, &table);
        let (idx, attach_type, reason) = refused_program(log).unwrap();
        assert_eq!((idx, attach_type), (3, AttachType::RawTp));
        assert_eq!(reason, "invalid func unknown#158");
        // fentry refusals and logs that name no program move the whole plan
        assert!(refused_program("libbpf: prog 'sys_enter_fentry_time': BPF program load failed: Operation not permitted").is_none());
        assert!(refused_program("libbpf: failed to load object").is_none());
    }

    #[test]
    fn a_final_load_failure_says_the_cause_and_the_next_step() {
        let failure = || {
            anyhow::anyhow!("map 'proc_events': failed to create: Invalid argument")
                .context("loading the BPF programs into the kernel")
        };
        let old = format!(
            "{:#}",
            explain_load_error_on(failure(), "5.4.0-150-generic", None)
        );
        assert_eq!(
            old,
            "slowpath needs Linux 5.8 or newer (BPF ring buffer, CAP_BPF); this kernel is \
             5.4.0-150-generic: upgrade the kernel: loading the BPF programs into the kernel: \
             map 'proc_events': failed to create: Invalid argument"
        );
        let other = format!(
            "{:#}",
            explain_load_error_on(failure(), "6.1.0-18-amd64", None)
        );
        assert!(
            other.starts_with(
                "the kernel refused every plan of BPF programs (the log lines above that start \
                 with \"kernel refused\" give each attempt): run with --log.level=debug"
            ),
            "{other}"
        );
        let eperm = || anyhow::anyhow!("Operation not permitted (os error 1)");
        let seccomp = format!(
            "{:#}",
            explain_load_error_on(eperm(), "6.1.0-18-amd64", Some(8 << 20))
        );
        assert!(seccomp.contains("seccomp=unconfined"), "{seccomp}");
        // before 5.11 a finite memlock limit is the likelier cause
        let memlock = format!(
            "{:#}",
            explain_load_error_on(eperm(), "5.10.0-28-amd64", Some(65536))
        );
        assert!(
            memlock.starts_with("the kernel refused bpf() with EPERM: Linux before 5.11"),
            "{memlock}"
        );
        let unlimited = format!(
            "{:#}",
            explain_load_error_on(eperm(), "5.10.0-28-amd64", None)
        );
        assert!(unlimited.contains("seccomp=unconfined"), "{unlimited}");
    }
}
