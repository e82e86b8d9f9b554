//! What `slowpath top` shows for a selected row: the agent's findings for
//! that process (its `/debug/findings`, the doctor's JSON shape): the
//! title, the known source, the cause, the fix, the expected gain and the
//! sampled call sites.

use serde_json::Value;

use super::rows::{Identity, IDENTITY};

/// Frames of a call site shown, from the top of the stack.
const FRAMES_SHOWN: usize = 8;

/// Whether a finding's process entry is the row `id`: every identity label
/// the row has is the entry's (the row's pid only when the agent labels
/// series with it).
fn same_process(entry: &Value, id: &Identity) -> bool {
    IDENTITY.iter().zip(id).all(|(name, want)| {
        if want.is_empty() {
            return true;
        }
        match &entry[*name] {
            Value::String(s) => s == want,
            Value::Number(n) => n.to_string() == *want,
            _ => false,
        }
    })
}

/// One call site's frames as `function (module) file:line`.
fn call_site_lines(site: &Value) -> Vec<String> {
    let mut lines = vec![format!(
        "  call site, {} samples:",
        site["samples"].as_u64().unwrap_or(0)
    )];
    for frame in site["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .take(FRAMES_SHOWN)
    {
        let function = frame["function"].as_str().unwrap_or("?");
        let module = frame["module"].as_str().unwrap_or("?");
        let module = module.rsplit('/').next().unwrap_or(module);
        let place = match (frame["file"].as_str(), frame["line"].as_u64()) {
            (Some(file), Some(line)) => format!(" {file}:{line}"),
            _ => String::new(),
        };
        lines.push(format!("    {function} ({module}){place}"));
    }
    lines
}

/// The lines for the row `id`: each finding that names the process, with
/// its cause and fix (the process's known source first, else the
/// finding's) and its call sites. Empty when no finding names it.
pub fn finding_lines(findings: &Value, id: &Identity) -> Vec<String> {
    let mut lines = Vec::new();
    for finding in findings["findings"].as_array().into_iter().flatten() {
        for process in finding["processes"].as_array().into_iter().flatten() {
            if !same_process(process, id) {
                continue;
            }
            let source = &process["known_source"];
            let pick = |key: &str| {
                source[key]
                    .as_str()
                    .or_else(|| finding[key].as_str())
                    .unwrap_or("-")
                    .to_string()
            };
            lines.push(format!(
                "{} [{}] pid {}: {:.0}/s",
                finding["id"].as_str().unwrap_or("?"),
                finding["severity"].as_str().unwrap_or("?"),
                process["pid"],
                process["per_second"].as_f64().unwrap_or(0.0)
            ));
            lines.push(format!("  {}", finding["title"].as_str().unwrap_or("")));
            if let Some(row) = source["row"].as_str() {
                lines.push(format!("  known source: {row}"));
            }
            lines.push(format!("  cause: {}", pick("cause")));
            lines.push(format!("  fix: {}", pick("fix")));
            lines.push(format!("  expected gain: {}", pick("expected_gain")));
            for site in process["call_sites"].as_array().into_iter().flatten() {
                lines.extend(call_site_lines(site));
            }
            lines.push(String::new());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(comm: &str, pid: &str) -> Identity {
        [comm, pid, "/", "", "", "", ""].map(String::from)
    }

    const FINDINGS: &str = r#"{"findings": [{
        "id": "vdso_bypass", "severity": "warning", "title": "1 process(es) read the clock through system calls",
        "cause": "generic cause", "fix": "generic fix", "expected_gain": "generic gain",
        "processes": [{"pid": 24450, "comm": "sp-workload", "cgroup": "/", "unit": "", "namespace": "",
                       "pod": "", "container": "", "per_second": 2455408.4,
                       "call_sites": [{"samples": 501, "frames": [
                           {"function": "syscall", "module": "/usr/lib/libc.so.6", "file": "syscall.S", "line": 38},
                           {"function": "raw_clock_loop", "module": "/bin/sp-workload", "file": null, "line": null}]}],
                       "known_source": {"row": "direct_clock_syscall", "cause": "calls syscall() directly",
                                        "fix": "call clock_gettime() through libc"}}]}]}"#;

    #[test]
    fn a_row_gets_its_findings_with_the_known_sources_cause_and_fix() {
        let findings: Value = serde_json::from_str(FINDINGS).unwrap();
        let lines = finding_lines(&findings, &id("sp-workload", ""));
        assert_eq!(lines[0], "vdso_bypass [warning] pid 24450: 2455408/s");
        assert!(lines.contains(&"  known source: direct_clock_syscall".to_string()));
        assert!(lines.contains(&"  cause: calls syscall() directly".to_string()));
        assert!(lines.contains(&"  fix: call clock_gettime() through libc".to_string()));
        // no gain in the known source: the finding's
        assert!(lines.contains(&"  expected gain: generic gain".to_string()));
        assert!(lines.contains(&"    syscall (libc.so.6) syscall.S:38".to_string()));
        assert!(lines.contains(&"    raw_clock_loop (sp-workload)".to_string()));
    }

    #[test]
    fn a_pid_or_comm_that_differs_gets_none() {
        let findings: Value = serde_json::from_str(FINDINGS).unwrap();
        assert!(!finding_lines(&findings, &id("sp-workload", "24450")).is_empty());
        assert!(finding_lines(&findings, &id("sp-workload", "1")).is_empty());
        assert!(finding_lines(&findings, &id("java", "")).is_empty());
    }
}
