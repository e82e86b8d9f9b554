//! Call sites of a slow path: the user stacks the BPF side samples at the
//! counted syscalls (the first call of each jiffy per process, so at most HZ,
//! 100 to 1000, per second; only under `slowpath doctor` or
//! `--debug.callsites`), symbolized with blazesym from the live process (its
//! own binaries through /proc/<pid>/map_files, so processes in containers
//! work).
//!
//! Limits: the kernel walks user stacks by frame pointers. A frame without
//! one (Debian's glibc, most distribution binaries) ends the walk, and
//! `truncated` says so. glibc's getcontext/setcontext and syscall wrappers
//! are leaf functions that push no frame, so the frame-pointer walk skips
//! their caller; the BPF side also records the two words at the user stack
//! pointer, one of which in such a function is the return address into that
//! caller (`from_stack_top`). Processes that exited before the report cannot be
//! symbolized: their frames say so.

use std::collections::BTreeMap;

use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Reason, Symbolized, Symbolizer};
use blazesym::{ErrorKind, Pid};
use serde::Serialize;

use crate::bpf::slot;
use crate::bpf::types::sp_callsite_kind;
use tables::RawCallSite;

pub mod harvest;
pub mod tables;

/// One symbolized frame.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Frame {
    /// Function name (demangled), or `?` when unknown.
    pub function: String,
    /// File of the binary or library the address is in.
    pub module: String,
    /// Source file and line, where debug information exists.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Recovered from the word at the stack pointer (caller of a leaf function).
    pub from_stack_top: bool,
    /// How the frame was found: `frame_pointer` (the kernel's walk),
    /// `stack_top` (the word at the stack pointer) or `eh_frame` (unwound
    /// with the module's unwind tables from a copy of the stack).
    pub recovered_by: &'static str,
}

/// One distinct stack, with how many samples hit it.
#[derive(Clone, Debug, Serialize)]
pub struct CallSite {
    pub samples: u64,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// The walk stopped before reaching the program's entry (a frame without
    /// a frame pointer).
    pub truncated: bool,
}

/// Stacks of `pid` for call `kind` (`enum sp_callsite_kind`), most sampled first.
pub fn for_process(
    symbolizer: &Symbolizer,
    raw: &[RawCallSite],
    pid: u32,
    kind: sp_callsite_kind,
) -> Vec<CallSite> {
    let mut sites: Vec<CallSite> = raw
        .iter()
        .filter(|s| s.tgid == pid && s.kind == kind.0 && !s.ips.is_empty())
        .map(|s| symbolize_site(symbolizer, s))
        .collect();
    // Identical symbolized stacks (different return addresses in one
    // function) are one call site.
    let mut merged: BTreeMap<Vec<(String, String, bool)>, CallSite> = BTreeMap::new();
    for site in sites.drain(..) {
        let key = site
            .frames
            .iter()
            .map(|f| (f.function.clone(), f.module.clone(), f.from_stack_top))
            .collect();
        merged
            .entry(key)
            .and_modify(|m| m.samples += site.samples)
            .or_insert(site);
    }
    let mut out: Vec<CallSite> = merged.into_values().collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.samples));
    out.truncate(5);
    out
}

/// Symbolize one sampled stack of a live process (frames say so when it has
/// exited).
pub fn symbolize_site(symbolizer: &Symbolizer, site: &RawCallSite) -> CallSite {
    // Every frame but the first is a return address: look up the call
    // instruction just before it.
    let mut addrs: Vec<u64> = site
        .ips
        .iter()
        .enumerate()
        .map(|(i, &ip)| if i == 0 { ip } else { ip.saturating_sub(1) })
        .collect();
    addrs.extend(site.stack_top.iter().map(|w| w.saturating_sub(1)));
    let src = Source::Process(Process::new(Pid::from(site.tgid)));
    let symbols = match symbolizer.symbolize(&src, Input::AbsAddr(&addrs)) {
        Ok(symbols) => symbols,
        Err(err) => return unsymbolized(site.samples, &err),
    };
    let mut frames: Vec<Frame> = symbols.iter().map(frame).collect();
    let top_words = frames.split_off(frames.len().saturating_sub(2));
    // the first stack-top word that is code
    let top = top_words.into_iter().find(|f| f.function != "?");
    // The stack-top word is a caller only if it is code, and a caller the
    // frame-pointer walk did not already find.
    if let Some(mut caller) = top {
        if frames.get(1).is_none_or(|f| f.function != caller.function) {
            caller.from_stack_top = true;
            caller.recovered_by = "stack_top";
            frames.insert(1, caller);
        }
    }
    let truncated = !frames.iter().any(|f| {
        f.function.starts_with("__libc_start")
            || f.function == "_start"
            || f.function.starts_with("start_thread")
            || f.function == "clone3"
            || f.function == "__clone"
    });
    CallSite {
        samples: site.samples,
        frames,
        truncated,
    }
}

/// A stack that could not be symbolized at all, with why in its one frame.
fn unsymbolized(samples: u64, err: &blazesym::Error) -> CallSite {
    let why = match err.kind() {
        ErrorKind::NotFound => EXITED.to_string(),
        // reading /proc/PID/maps or map_files: see preflight::warn_if_cannot_symbolize
        ErrorKind::PermissionDenied => "no access to the process's memory map".to_string(),
        _ => format!("symbolization failed: {err}"),
    };
    unknown_site(samples, &why)
}

/// A call site of one unknown frame that says `why`.
pub fn unknown_site(samples: u64, why: &str) -> CallSite {
    CallSite {
        samples,
        frames: vec![unknown(why)],
        truncated: false,
    }
}

/// Reason given for a process gone before its stacks were symbolized.
pub const EXITED: &str = "exited before symbolization";

fn frame(sym: &Symbolized<'_>) -> Frame {
    match sym {
        Symbolized::Sym(sym) => Frame {
            function: sym.name.to_string(),
            module: sym
                .module
                .as_ref()
                .map(|m| m.to_string_lossy().into_owned())
                .unwrap_or_default(),
            file: sym
                .code_info
                .as_ref()
                .map(|c| c.file.to_string_lossy().into_owned()),
            line: sym.code_info.as_ref().and_then(|c| c.line),
            from_stack_top: false,
            recovered_by: "frame_pointer",
        },
        Symbolized::Unknown(reason) => unknown(match reason {
            // e.g. a sample taken before an exec, symbolized after it
            Reason::Unmapped => "unmapped address",
            Reason::MissingSyms | Reason::UnknownAddr => "no symbol",
            _ => "unknown address",
        }),
    }
}

fn unknown(why: &str) -> Frame {
    Frame {
        function: "?".into(),
        module: why.into(),
        file: None,
        line: None,
        from_stack_top: false,
        recovered_by: "frame_pointer",
    }
}

/// `func (module) <- caller <- ...` for the text report.
pub fn one_line(site: &CallSite) -> String {
    let names: Vec<String> = site
        .frames
        .iter()
        .map(|f| {
            let module = f.module.rsplit('/').next().unwrap_or("");
            match (&f.file, f.line) {
                (Some(file), Some(line)) => format!(
                    "{} ({}:{})",
                    f.function,
                    file.rsplit('/').next().unwrap_or(file),
                    line
                ),
                _ => format!("{} ({module})", f.function),
            }
        })
        .collect();
    let cut = if site.truncated {
        " <- [stack cut short: no frame pointer]"
    } else {
        ""
    };
    format!("{} samples: {}{cut}", site.samples, names.join(" <- "))
}

/// Name of a call kind (`enum sp_callsite_kind`) in folded stacks and in the
/// `kind` query parameter of `/debug/callsites`.
pub const KIND_NAMES: [&str; slot!(sp_callsite_kind::SP_CALLSITE_KIND_COUNT)] =
    ["clock", "rt_sigprocmask", "sleep", "thp_fault"];

/// One folded-stack path (the flame graph format of `stackcollapse`, without
/// the count): `comm;outermost;...;innermost;[kind]`, with
/// `[stack cut short]` after the comm when the walk did not reach the
/// program's entry. Semicolons inside names become colons.
pub fn folded_path(comm: &str, site: &CallSite, kind: u32) -> String {
    let clean = |s: &str| s.replace([';', '\n'], ":");
    let mut parts = vec![clean(comm)];
    if site.truncated {
        parts.push("[stack cut short]".into());
    }
    // an unknown frame carries the reason in `module`
    parts.extend(site.frames.iter().rev().map(|f| match f.function.as_str() {
        "?" => format!("[{}]", clean(&f.module)),
        name => clean(name),
    }));
    parts.push(format!(
        "[{}]",
        KIND_NAMES.get(kind as usize).unwrap_or(&"?")
    ));
    parts.join(";")
}
