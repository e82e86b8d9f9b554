//! Known sources: what code is behind a slow path, told from the frames of
//! its sampled call sites (`callsites`). Each signal keeps its table of rows
//! (`SOURCES` in its module); a row names frames by function or module and
//! gives the cause, the fix and, where the cases behind slowpath measured
//! one, the expected gain.
//!
//! Matching: rows in table order (specific before generic), then the
//! process's call sites, most sampled first, then each site's frames,
//! innermost first; the first row with a matching frame wins. A process with
//! no matching frame keeps the rule's own cause, which says what it was
//! inferred from (`CauseBasis`).
//!
//! Names are compared after dropping glibc's internal prefixes (`__GI_`,
//! then leading underscores): `__GI___pthread_sigmask` is `pthread_sigmask`.

use serde::Serialize;

use crate::callsites::{CallSite, Frame};

/// How one row recognises a frame. Serialized (`slowpath signals`) as
/// `{"kind": "function", "text": "..."}`, the kind in snake case.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
pub enum Pattern {
    /// The function is this name (after [`normalize`]).
    Function(&'static str),
    /// The function starts with this (after [`normalize`]).
    FunctionPrefix(&'static str),
    /// The (demangled) function contains this, e.g. a C++ `os::javaTimeMillis`.
    FunctionContains(&'static str),
    /// The file name of the frame's module contains this.
    Module(&'static str),
    /// The file name of the frame's module is exactly this (an executable).
    ModuleIs(&'static str),
}

impl Pattern {
    fn matches(&self, frame: &Frame) -> bool {
        let function = normalize(&frame.function);
        let module = frame.module.rsplit('/').next().unwrap_or("");
        match *self {
            Pattern::Function(name) => function == name,
            Pattern::FunctionPrefix(prefix) => function.starts_with(prefix),
            Pattern::FunctionContains(part) => frame.function.contains(part),
            // an unknown frame without a mapping carries its reason in `module`
            Pattern::Module(part) => frame.module.starts_with('/') && module.contains(part),
            Pattern::ModuleIs(name) => frame.module.starts_with('/') && module == name,
        }
    }
}

/// One known source of a signal's slow path.
#[derive(Debug, Serialize)]
pub struct KnownSource {
    /// Stable id, in the report (`known_source.row`).
    pub id: &'static str,
    /// A frame matching any of these is this source.
    pub frames: &'static [Pattern],
    /// Why the process takes the slow path. `{caller}` stands for the first
    /// named frame above the matched one, in another module.
    pub cause: &'static str,
    pub fix: &'static str,
    pub expected_gain: Option<&'static str>,
    /// A frame (function, module path) this row must be the first to match:
    /// each row's unit test (read by the tests only).
    #[cfg_attr(not(test), allow(dead_code))]
    #[serde(skip)]
    pub example: (&'static str, &'static str),
}

/// A process's call site matched to a row: the report's `known_source`.
#[derive(Clone, Debug, Serialize)]
pub struct SourceMatch {
    pub row: &'static str,
    /// The matched frame, `function (module file name)`.
    pub frame: String,
    /// Its place in the call site, 0 the innermost.
    pub frame_index: usize,
    /// How the frame was found: `frame_pointer`, `stack_top` or `eh_frame`.
    pub recovered_by: &'static str,
    pub cause: String,
    pub fix: &'static str,
    pub expected_gain: Option<&'static str>,
}

/// What a finding's cause rests on (the report's `cause_basis`).
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CauseBasis {
    /// A frame of the top process's call sites matched `row`.
    CallSite { row: &'static str, pid: u32 },
    /// The node's settings (clocksource, THP) say it; no frame matched.
    NodeSettings { from: String },
    /// The counters say it outright (e.g. the clock ids read); no frame matched.
    Counters { from: String },
    /// A guess from the op mix or the rates: no frame matched a known source.
    Guess { from: String },
}

/// The first row of `table` a frame of `sites` matches (see the module doc).
pub fn match_sites(table: &'static [KnownSource], sites: &[CallSite]) -> Option<SourceMatch> {
    table.iter().find_map(|row| {
        sites.iter().find_map(|site| {
            let i = site
                .frames
                .iter()
                .position(|f| row.frames.iter().any(|p| p.matches(f)))?;
            Some(matched(row, &site.frames, i))
        })
    })
}

fn matched(row: &'static KnownSource, frames: &[Frame], i: usize) -> SourceMatch {
    let frame = &frames[i];
    SourceMatch {
        row: row.id,
        frame: describe(frame),
        frame_index: i,
        recovered_by: frame.recovered_by,
        cause: row.cause.replace("{caller}", &caller(frames, i)),
        fix: row.fix,
        expected_gain: row.expected_gain,
    }
}

/// `function (module file name)`.
fn describe(frame: &Frame) -> String {
    let module = frame.module.rsplit('/').next().unwrap_or("");
    format!("{} ({module})", frame.function)
}

/// The first named frame above `frames[i]` in another module, described.
fn caller(frames: &[Frame], i: usize) -> String {
    frames[i + 1..]
        .iter()
        .find(|f| f.function != "?" && f.module != frames[i].module)
        .map_or_else(
            || "its caller (not recovered from the stack)".to_string(),
            describe,
        )
}

/// A function name without glibc's `__GI_` alias prefix and leading underscores.
pub fn normalize(function: &str) -> &str {
    function
        .strip_prefix("__GI_")
        .unwrap_or(function)
        .trim_start_matches('_')
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn frame(function: &str, module: &str) -> Frame {
        Frame {
            function: function.into(),
            module: module.into(),
            file: None,
            line: None,
            from_stack_top: false,
            recovered_by: "frame_pointer",
            address: None,
        }
    }

    pub fn site(frames: &[(&str, &str)]) -> CallSite {
        CallSite {
            samples: 1,
            frames: frames.iter().map(|(f, m)| frame(f, m)).collect(),
            truncated: false,
        }
    }

    /// Each row of `table` is the first to match its example, ids are
    /// unique and its cause and fix are written.
    pub fn check_table(table: &'static [KnownSource]) {
        let mut ids = std::collections::HashSet::new();
        for row in table {
            assert!(ids.insert(row.id), "{} twice", row.id);
            assert!(!row.cause.is_empty() && !row.fix.is_empty(), "{}", row.id);
            let (function, module) = row.example;
            let sites = [site(&[(function, module), ("main", "/usr/bin/app")])];
            let m = match_sites(table, &sites);
            assert_eq!(
                m.as_ref().map(|m| m.row),
                Some(row.id),
                "example of {}",
                row.id
            );
        }
    }

    #[test]
    fn names_are_compared_without_glibc_prefixes() {
        assert_eq!(normalize("__GI___pthread_sigmask"), "pthread_sigmask");
        assert_eq!(normalize("__getcontext"), "getcontext");
        assert_eq!(normalize("main"), "main");
    }

    const TABLE: &[KnownSource] = &[
        KnownSource {
            id: "lib",
            frames: &[Pattern::Module("libthreads.so")],
            cause: "the thread library, called from {caller}",
            fix: "f",
            expected_gain: None,
            example: ("switch", "/usr/lib/libthreads.so.1"),
        },
        KnownSource {
            id: "wrapper",
            frames: &[Pattern::Function("swapcontext")],
            cause: "{caller} switches",
            fix: "f",
            expected_gain: None,
            example: ("__swapcontext", "/lib/libc.so.6"),
        },
    ];

    #[test]
    fn rows_take_precedence_over_frames_and_name_the_caller() {
        check_table(TABLE);
        let sites = [
            site(&[("swapcontext", "/lib/libc.so.6"), ("main", "/usr/bin/app")]),
            site(&[
                ("sigprocmask", "/lib/libc.so.6"),
                ("?", "/usr/lib/libthreads.so.1"),
                ("sched", "/usr/lib/libthreads.so.1"),
                ("main", "/usr/bin/app"),
            ]),
        ];
        let m = match_sites(TABLE, &sites).unwrap();
        assert_eq!((m.row, m.frame_index), ("lib", 1));
        assert_eq!(m.frame, "? (libthreads.so.1)");
        assert_eq!(m.cause, "the thread library, called from main (app)");
        let m = match_sites(TABLE, &sites[..1]).unwrap();
        assert_eq!(m.cause, "main (app) switches");
        let lone = [site(&[("swapcontext", "/lib/libc.so.6")])];
        assert!(match_sites(TABLE, &lone)
            .unwrap()
            .cause
            .starts_with("its caller"));
        // an unknown frame carries a reason, not a module, in `module`
        assert!(match_sites(TABLE, &[site(&[("?", "libthreads.so gone")])]).is_none());
    }
}
