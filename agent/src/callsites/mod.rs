//! Call sites of a slow path: the user stacks the BPF side samples at the
//! counted syscalls (the first call of each jiffy per process, so at most HZ,
//! 100 to 1000, per second; only under `slowpath doctor` or
//! `--debug.callsites`), symbolized with blazesym from the live process (its
//! own binaries through /proc/<pid>/map_files, so processes in containers
//! work).
//!
//! Limits: the kernel walks user stacks by frame pointers. A frame without
//! one (Debian's glibc, most distribution binaries) ends the walk. Two
//! things recover what lies beyond:
//!
//! - glibc's getcontext/setcontext and syscall wrappers are leaf functions
//!   that push no frame, so the frame-pointer walk skips their caller; the
//!   BPF side also records the two words at the user stack pointer, one of
//!   which in such a function is the return address into that caller
//!   (`recovered_by: "stack_top"`).
//! - For the first sample of each distinct stack, the BPF side keeps the
//!   user registers and 4 to 8 KiB of stack (`stack_copies`, at most 512
//!   sites per run); [`unwind`] unwinds that copy with the binaries'
//!   .eh_frame (`recovered_by: "eh_frame"`). That stack is kept when it
//!   reaches the program's or thread's entry and the frame-pointer walk does
//!   not, else when it names more frames. It stops where the copy ends (a
//!   caller more than about 4 KiB of stack above the syscall), at code
//!   without call-frame information (JIT code: the frame-pointer walk's
//!   frames beyond the last address both found are appended), and at sites
//!   sampled after the table filled. Samples with the same frame-pointer
//!   walk and stack-top words are one site: they all show the callers
//!   unwound from the first one (callers that differ only beyond the
//!   frame-pointer walk are not told apart).
//!
//! `truncated` says the stack kept does not reach an entry (`_start`,
//! `__libc_start_main`, `start_thread`, `clone`, or `__start_context`, the
//! root of a makecontext(3) context). An address that no symbol covers
//! still names the file it is in (`module`). Processes that exited before
//! the report cannot be symbolized: their frames say so.

use std::collections::BTreeMap;

use blazesym::symbolize::source::{Process, Source};
use blazesym::symbolize::{Input, Reason, Symbolized, Symbolizer};
use blazesym::{ErrorKind, Pid};
use serde::Serialize;

use crate::bpf::types::sp_callsite_kind;
use tables::RawCallSite;
use unwind::{Unwinding, Unwound};

pub mod harvest;
pub mod tables;
pub mod unwind;

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
    /// How the frame was found: [`FRAME_POINTER`] (the kernel's walk),
    /// [`STACK_TOP`] (the word at the stack pointer) or [`EH_FRAME`]
    /// (the stack copy unwound with the binaries' call-frame information;
    /// the instruction pointer counts for the walk that was kept).
    pub recovered_by: &'static str,
    /// The address looked up (the return address minus one for callers).
    #[serde(skip)]
    pub address: Option<u64>,
}

/// [`Frame::recovered_by`] of a frame of the kernel's frame-pointer walk.
pub const FRAME_POINTER: &str = "frame_pointer";
/// [`Frame::recovered_by`] of a caller found in the stack-top words.
pub const STACK_TOP: &str = "stack_top";
/// [`Frame::recovered_by`] of a frame unwound with .eh_frame.
pub const EH_FRAME: &str = "eh_frame";

/// One distinct stack, with how many samples hit it.
#[derive(Clone, Debug, Serialize)]
pub struct CallSite {
    pub samples: u64,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// The stack kept stopped before reaching the program's or thread's
    /// entry (a frame without a frame pointer, and no .eh_frame unwind got
    /// there either).
    pub truncated: bool,
}

/// Stacks of `pid` for call `kind` (`enum sp_callsite_kind`), most sampled first.
pub fn for_process(
    symbolizer: &Symbolizer,
    raw: &[RawCallSite],
    pid: u32,
    kind: sp_callsite_kind,
) -> Vec<CallSite> {
    let started = std::time::Instant::now();
    let mut sites: Vec<CallSite> = raw
        .iter()
        .filter(|s| s.tgid == pid && s.kind == kind.0 && !s.ips.is_empty())
        .map(|s| symbolize_site(symbolizer, s))
        .collect();
    tracing::debug!(
        pid,
        sites = sites.len(),
        unwound = sites
            .iter()
            .filter(|s| s.frames.iter().any(|f| f.recovered_by == EH_FRAME))
            .count(),
        elapsed = ?started.elapsed(),
        "call sites symbolized"
    );
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
/// exited), with this thread's [`Unwinding`].
pub fn symbolize_site(symbolizer: &Symbolizer, site: &RawCallSite) -> CallSite {
    unwind::with_thread_unwinding(|unwinding| symbolize_site_with(symbolizer, unwinding, site))
}

/// Symbolize one sampled stack: the kernel's frame-pointer walk, or the
/// stack copy unwound with .eh_frame where that reaches further.
pub fn symbolize_site_with(
    symbolizer: &Symbolizer,
    unwinding: &mut Unwinding,
    site: &RawCallSite,
) -> CallSite {
    let src = Source::Process(Process::new(Pid::from(site.tgid)));
    let mut frames = match frame_pointer_frames(symbolizer, &src, site) {
        Ok(frames) => frames,
        Err(err) => return unsymbolized(site.samples, &err),
    };
    if let Some(unwound) = site
        .copy
        .as_ref()
        .and_then(|copy| unwinding.unwind(site.tgid, copy))
        .and_then(|unwound| unwound_frames(symbolizer, &src, site, &unwound))
    {
        tracing::debug!(
            pid = site.tgid,
            frame_pointer = ?frames.iter().map(|f| (&f.function, f.address)).collect::<Vec<_>>(),
            eh_frame = ?unwound.iter().map(|f| (&f.function, f.address)).collect::<Vec<_>>(),
            "call site walked two ways"
        );
        // the stack that reaches the entry, else the one that names more
        // frames (a frame-pointer walk through code that uses the register
        // for data goes on through garbage), else the longer one
        if reach(&unwound) > reach(&frames) {
            frames = unwound;
        }
    }
    // an address blazesym cannot name still tells the file it is in
    for f in frames.iter_mut().filter(|f| f.function == "?") {
        if let Some(path) = f.address.and_then(|a| unwinding.file_at(site.tgid, a)) {
            f.module = path;
        }
    }
    CallSite {
        samples: site.samples,
        truncated: !reaches_entry(&frames),
        frames,
    }
}

/// The kernel's frame-pointer walk, with the caller of a leaf function
/// found in the stack-top words.
fn frame_pointer_frames(
    symbolizer: &Symbolizer,
    src: &Source<'_>,
    site: &RawCallSite,
) -> Result<Vec<Frame>, blazesym::Error> {
    let mut frames = symbolize_stack(symbolizer, src, &site.ips, |_| FRAME_POINTER)?;
    // the first stack-top word that is code (just after a call: a
    // function's first byte is data that happens to be a function pointer)
    let words = site.stack_top.map(|w| w.saturating_sub(1));
    let top = symbolize_addrs(symbolizer, src, &words)?
        .iter()
        .zip(words)
        .map(|(sym, addr)| frame(sym, addr, STACK_TOP))
        .find(|f| f.function != "?");
    // The stack-top word is a caller only if it is code, and a caller the
    // frame-pointer walk did not already find.
    if let Some(mut caller) = top {
        if frames.get(1).is_none_or(|f| f.function != caller.function) {
            caller.from_stack_top = true;
            caller.recovered_by = "stack_top";
            frames.insert(1, caller);
        }
    }
    Ok(frames)
}

/// The frames of an .eh_frame unwind, followed by the frame-pointer walk's
/// frames beyond the last return address both found (the unwind stops at
/// code without call-frame information, such as JIT code, where the
/// frame-pointer walk may go on). `None` when it found no caller.
fn unwound_frames(
    symbolizer: &Symbolizer,
    src: &Source<'_>,
    site: &RawCallSite,
    unwound: &Unwound,
) -> Option<Vec<Frame>> {
    if unwound.addrs.len() < 2 {
        return None;
    }
    let tail: &[u64] = match unwound.complete {
        true => &[],
        false => unwound.addrs[1..]
            .iter()
            .rev()
            .find_map(|a| site.ips.iter().skip(1).position(|ip| ip == a))
            .map_or(&[], |j| &site.ips[j + 2..]),
    };
    let mut addrs = unwound.addrs.clone();
    addrs.extend(tail);
    let n = unwound.addrs.len();
    symbolize_stack(symbolizer, src, &addrs, |i| match i < n {
        true => EH_FRAME,
        false => FRAME_POINTER,
    })
    .ok()
}

/// Symbolize a stack: the instruction pointer, then return addresses, with
/// `recovered_by(i)` for frame `i`. A return address is looked up one byte
/// before (the call instruction), and where nothing is there, at itself:
/// the return address that makecontext(3) or a signal frame plants points
/// to the first instruction of its function (glibc's __start_context).
fn symbolize_stack(
    symbolizer: &Symbolizer,
    src: &Source<'_>,
    addrs: &[u64],
    recovered_by: impl Fn(usize) -> &'static str,
) -> Result<Vec<Frame>, blazesym::Error> {
    let lookup: Vec<u64> = addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| if i == 0 { a } else { a.saturating_sub(1) })
        .collect();
    let symbols = symbolize_addrs(symbolizer, src, &lookup)?;
    let mut frames: Vec<Frame> = symbols
        .iter()
        .zip(&lookup)
        .enumerate()
        .map(|(i, (sym, &addr))| frame(sym, addr, recovered_by(i)))
        .collect();
    let retry: Vec<usize> = (1..frames.len())
        .filter(|&i| frames[i].function == "?")
        .collect();
    if retry.is_empty() {
        return Ok(frames);
    }
    let at: Vec<u64> = retry.iter().map(|&i| addrs[i]).collect();
    if let Ok(symbols) = symbolize_addrs(symbolizer, src, &at) {
        for ((&i, sym), &addr) in retry.iter().zip(&symbols).zip(&at) {
            if matches!(sym, Symbolized::Sym(_)) {
                frames[i] = frame(sym, addr, recovered_by(i));
            }
        }
    }
    Ok(frames)
}

/// blazesym's symbols of `addrs`, where an address in a mapped file it
/// cannot read costs that frame alone, not the stack: blazesym fails a whole
/// batch on such a file (a frame-pointer walk through JIT code, or a
/// stack-top word, lands in a JVM's class-data archive, `classes.jsa`, which
/// is mapped but not ELF: "unexpected e_ident"), so on any error but the
/// process's own (gone, no access) each address is looked up alone, and one
/// that still fails is unknown.
fn symbolize_addrs<'s>(
    symbolizer: &'s Symbolizer,
    src: &Source<'_>,
    addrs: &[u64],
) -> Result<Vec<Symbolized<'s>>, blazesym::Error> {
    match symbolizer.symbolize(src, Input::AbsAddr(addrs)) {
        Err(err)
            if !matches!(
                err.kind(),
                ErrorKind::NotFound | ErrorKind::PermissionDenied
            ) =>
        {
            Ok(addrs
                .iter()
                .map(|&addr| {
                    symbolizer
                        .symbolize_single(src, Input::AbsAddr(addr))
                        .unwrap_or(Symbolized::Unknown(Reason::IgnoredError))
                })
                .collect())
        }
        result => result,
    }
}

/// How far a stack reaches, to compare two walks of it.
fn reach(frames: &[Frame]) -> (bool, usize, usize) {
    let named = frames.iter().filter(|f| f.function != "?").count();
    (reaches_entry(frames), named, frames.len())
}

/// Whether a stack goes down to where the program or thread started.
fn reaches_entry(frames: &[Frame]) -> bool {
    frames.iter().any(|f| {
        f.function.starts_with("__libc_start")
            || f.function == "_start"
            || f.function.starts_with("start_thread")
            || f.function == "clone3"
            || f.function == "__clone"
            // the root of a context made by makecontext(3) (coroutines, GNU Pth)
            || f.function == "__start_context"
    })
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

fn frame(sym: &Symbolized<'_>, address: u64, recovered_by: &'static str) -> Frame {
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
            recovered_by,
            address: Some(address),
        },
        Symbolized::Unknown(reason) => Frame {
            recovered_by,
            address: Some(address),
            ..unknown(match reason {
                // e.g. a sample taken before an exec, symbolized after it
                Reason::Unmapped => "unmapped address",
                Reason::MissingSyms | Reason::UnknownAddr => "no symbol",
                _ => "unknown address",
            })
        },
    }
}

fn unknown(why: &str) -> Frame {
    Frame {
        function: "?".into(),
        module: why.into(),
        file: None,
        line: None,
        from_stack_top: false,
        recovered_by: FRAME_POINTER,
        address: None,
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

/// One folded-stack path (the flame graph format of `stackcollapse`, without
/// the count): `comm;outermost;...;innermost;[kind]`, with
/// `[stack cut short]` after the comm when the walk did not reach the
/// program's entry. Semicolons inside names become colons. `kind` is the
/// call kind's name (the signals' `call_sites`).
pub fn folded_path(comm: &str, site: &CallSite, kind: &str) -> String {
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
    parts.push(format!("[{kind}]"));
    parts.join(";")
}
