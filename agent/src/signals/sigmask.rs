//! `rt_sigprocmask` calls (hook `sys_enter`, or fentry), by operation. glibc's
//! `getcontext` queries the mask (NULL new set) and `setcontext` sets it:
//! one system call each, the Ruby 1.8.7 `--enable-pthread` case.
//!
//! Doctor rule: a process changing signal masks at a high rate. Its cause
//! comes from the call site ([`SOURCES`]: ucontext switches, user-space
//! thread libraries, sigsetjmp with a saved mask, process creation, masked
//! critical sections); without a matching frame, a guess from the operation
//! mix (query and setmask at equal rates: the getcontext/setcontext
//! signature).

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{sp_callsite_kind, sp_counters, sp_sigmask_op, sp_syscall_group};
use crate::exposition::{family, push_nonzero, with, Family};
use crate::finding::{Compose, Finding, Severity};
use crate::signals::CallKind;
use crate::signals::FamilyDoc;
use crate::signals::FindingRule;
use crate::signals::{
    Cell, EventCost, FleetRow, KernelNeeds, NodeNeeds, Observation, Recorded, Scrape, Signal, Top,
    TopColumn,
};
use crate::signals::{ProcessAlert, Setting};
use crate::sources::{CauseBasis, KnownSource, Pattern};

/// Number of `enum sp_sigmask_op` slots.
const OP_COUNT: usize = slot!(sp_sigmask_op::SP_SIGMASK_OP_COUNT);

/// `op` label values, indexed by `enum sp_sigmask_op`. `invalid` is a call
/// with a new set and an unknown `how` (the kernel returns EINVAL); it keeps
/// the sum equal to the syscall count.
pub const OP_NAMES: [&str; OP_COUNT] = ["block", "unblock", "setmask", "query", "invalid"];

const _: fn(&sp_counters) -> &[u64; OP_COUNT] = |c| &c.sigprocmask;

const QUERY: usize = slot!(sp_sigmask_op::SP_SIGMASK_QUERY);
const SETMASK: usize = slot!(sp_sigmask_op::SP_SIGMASK_SETMASK);

/// Doctor threshold: calls per second of one process.
const SIGPROCMASK_PER_SEC: f64 = 10_000.0;

const SIGPROCMASK: Family = Family {
    name: "slowpath_rt_sigprocmask_calls_total",
    help: "rt_sigprocmask calls (raw_syscalls:sys_enter, or fentry) by operation; query = NULL new set, the glibc getcontext() signature",
    kind: MetricType::COUNTER,
};

// The rates the chart's recording rules record.
const CALLS: Recorded = Recorded {
    name: "slowpath_rt_sigprocmask_calls",
    family: &SIGPROCMASK,
    only: None,
    fleet: Some(FleetRow {
        title: "rt_sigprocmask calls",
        meaning: "signal-mask changes per second (getcontext/setcontext coroutines, signal-safe sections)",
    }),
};

// Its case in docs/metrics.md's PromQL: each a title line, then queries and comments.
const PROMQL: &[&str] = &[
    r#"rt_sigprocmask storms, and the getcontext/setcontext signature (query ~ setmask)
topk(10, sum by (instance, comm) (rate(slowpath_rt_sigprocmask_calls_total[5m])))
sum by (instance, comm) (rate(slowpath_rt_sigprocmask_calls_total{op="query"}[5m]))"#,
];

// docs/metrics.md's rows for its families (labels, what a count is, the hook).
const FAMILY_DOCS: &[FamilyDoc] = &[
    FamilyDoc {
        family: &SIGPROCMASK,
        labels: "`op` (`block`, `unblock`, `setmask`, `query`, `invalid`)",
        counts: "`rt_sigprocmask` calls; `query` = new set NULL, the glibc `getcontext` signature; `setcontext` is a `setmask`; `invalid` = unknown `how` (EINVAL)",
        hook: "`raw_syscalls:sys_enter`",
    },
];

// The findings its diagnosis makes (docs/doctor.md's table).
const RT_SIGPROCMASK_STORM: FindingRule = FindingRule {
    id: "rt_sigprocmask_storm",
    severities: &[Severity::Warning],
    when: "10,000+ calls/s; the cause from the call site's [known source](#how-the-doctor-knows-the-cause), else a guess from the mix of operations (`query` = `setmask`: the getcontext/setcontext or sigsetjmp signature)",
};

// Its per-process alert (the chart's PrometheusRule makes it from this).
const ALERT: ProcessAlert = ProcessAlert {
    name: "SlowpathRtSigprocmaskStorm",
    rate: &CALLS,
    threshold: Setting {
        key: "sigprocmaskPerProcess",
        default: "100000",
        why: "rt_sigprocmask calls/s per process: 100k/s at ~150 ns is 1.5 % of a core; the Ruby getcontext case ran at several 100k/s",
    },
    for_: Setting {
        key: "sigprocmaskStorm",
        default: "10m",
        why: "",
    },
    findings: &[&RT_SIGPROCMASK_STORM],
    summary: "{{ $labels.comm }} on {{ $labels.instance }} makes {{ $value | humanize }} rt_sigprocmask calls/s",
    description: "changes its signal mask {{ $value | humanize }} times per second. Equal op=\"query\" and op=\"setmask\" rates are the glibc getcontext/setcontext signature (e.g. Ruby built with --enable-pthread).",
    runbook: "rt_sigprocmask-storm",
};

pub const SIGNAL: Signal = Signal {
    name: "sigmask",
    summary: "rt_sigprocmask calls by operation",
    case: "rt_sigprocmask storms",
    story: Some("glibc `getcontext`/`setcontext` make one syscall each; Ruby 1.8.7 with `--enable-pthread` made 20M of them and ran ~40 % slower."),
    families: &[&SIGPROCMASK],
    export,
    diagnose,
    enrich: None,
    sources: SOURCES,
    call_sites: &[CallKind {
        kind: sp_callsite_kind::SP_CALLSITE_SIGPROCMASK,
        name: "rt_sigprocmask",
        what: "`rt_sigprocmask` calls",
    }],
    node: NodeNeeds::NONE,
    kernel: KernelNeeds {
        hooks: &[],
        syscall_groups: &[sp_syscall_group::SP_SYSCALLS_SIGPROCMASK],
        rodata: None,
        upkeep: None,
        map_sizes: None,
        left_out: None,
    },
    top: Top {
        columns: &[TopColumn {
            header: "SIGMSK/s",
            meaning: "`rt_sigprocmask` calls, every operation",
            sort: "sigmask",
            key: "sigprocmask",
            family: &SIGPROCMASK,
            only: None,
            cost: EventCost::Gauge("slowpath_syscall_seconds"),
            recorded: Some(&CALLS),
            cell: Cell::PerSecond,
            common: true,
        }],
        timeouts: None,
        not_shown: &[],
        node: None,
    },
    recorded: &[CALLS],
    finding_rules: &[RT_SIGPROCMASK_STORM],
    family_docs: FAMILY_DOCS,
    promql: PROMQL,
    alert: Some(ALERT),
    runbook: RUNBOOK,
};

/// Its sections of docs/runbook.md, in Markdown (docs/generate.py writes
/// every signal's there, in [`super::SIGNALS`] order): what fired, why the
/// threshold is where it is, how to find the cause, and the fix. Each
/// starts at a `## ` heading, whose anchor an alert's `runbook_url` names.
const RUNBOOK: &str = r##"## rt_sigprocmask storm

`SlowpathRtSigprocmaskStorm`: one process above 100,000 `rt_sigprocmask` calls/s for 10 min.

Each call costs ~100-200 ns plus the syscall entry: 100,000/s is 1.5-2 % of a core. The Ruby case
(1.8.7 built with `--enable-pthread`: glibc `getcontext`/`setcontext` on every thread switch) made
20M calls and ran ~40 % slower; Puppet crawled.

Find the cause: `op="query"` and `op="setmask"` at the same rate is the getcontext/setcontext
signature (`query` is a NULL new set). `block`/`unblock` pairs are signal-safe critical sections
(e.g. around `fork`, or a library masking signals per call).

Fix: rebuild the interpreter without the feature (Ruby: without `--enable-pthread`); use
`sigprocmask`-free context switching (`swapcontext` still calls it; `ucontext` alternatives or a
newer runtime); move the masking out of the hot loop.
"##;

const RUBY_GAIN: &str =
    "Ruby 1.8.7 ran ~40 % faster without --enable-pthread (20M rt_sigprocmask calls gone)";

/// Where rt_sigprocmask storms come from, most specific first.
pub const SOURCES: &[KnownSource] = &[
    KnownSource {
        id: "ruby18_green_threads",
        frames: &[
            Pattern::FunctionPrefix("rb_thread_"),
            Pattern::Module("libruby-1.8"),
            Pattern::Module("libruby18"),
            Pattern::ModuleIs("ruby1.8"),
        ],
        cause: "Ruby 1.8's green threads save and restore contexts with getcontext/setcontext \
                when Ruby is built with --enable-pthread: one rt_sigprocmask call each, on \
                every thread switch and every method call that checks for one (the Ruby \
                1.8.7 case).",
        fix: "Rebuild Ruby 1.8 without --enable-pthread, or move to Ruby 1.9 or later \
              (native threads, no ucontext switching).",
        expected_gain: Some(RUBY_GAIN),
        example: ("rb_thread_save_context", "/usr/lib/libruby-1.8.so.1.8.7"),
    },
    KnownSource {
        id: "gnu_pth",
        frames: &[
            Pattern::FunctionPrefix("pth_"),
            Pattern::Module("libpth.so"),
        ],
        cause: "GNU Pth switches its user-space threads through ucontext (swapcontext) and \
                saves and restores each thread's signal mask on every switch: one or more \
                rt_sigprocmask calls per context switch, the pattern of the Ruby 1.8.7 case.",
        fix: "Use native threads, or a coroutine library whose switch stays in user space \
              (Boost.Context, libco, libaco: no signal mask per switch); Pth keeps \
              per-thread masks by design, so no Pth setting removes the calls.",
        expected_gain: Some(RUBY_GAIN),
        example: (
            "__pth_scheduler",
            "/usr/lib/x86_64-linux-gnu/libpth.so.20.0.27",
        ),
    },
    KnownSource {
        id: "ucontext_switch",
        frames: &[
            Pattern::Function("getcontext"),
            Pattern::Function("setcontext"),
            Pattern::Function("swapcontext"),
            Pattern::Function("makecontext"),
            Pattern::Function("start_context"),
        ],
        cause: "glibc's ucontext functions make one rt_sigprocmask call each (getcontext \
                queries the mask, setcontext sets it, swapcontext does both): {caller} \
                switches coroutines or user-space threads through ucontext, a system call \
                per switch.",
        fix: "Switch contexts without the signal mask: a coroutine library with its own \
              user-space switch (Boost.Context, libco, libaco, minicoro), or save the mask \
              once per thread instead of per switch.",
        expected_gain: Some(RUBY_GAIN),
        example: ("getcontext", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
    KnownSource {
        id: "sigsetjmp_savemask",
        frames: &[
            Pattern::Function("sigsetjmp"),
            Pattern::Function("sigjmp_save"),
            Pattern::Function("siglongjmp"),
            Pattern::Function("libc_siglongjmp"),
            Pattern::Function("libc_longjmp"),
            Pattern::Function("longjmp"),
            Pattern::Function("longjmp_chk"),
            Pattern::Function("longjmp_unwind"),
        ],
        cause: "sigsetjmp(env, savemask != 0) saves the signal mask with an rt_sigprocmask \
                call and siglongjmp restores it with another: {caller} jumps with a saved \
                mask in a hot path (error handling, an interpreter, emulated coroutines).",
        fix: "Where the jump never leaves a signal handler, the mask does not change: use \
              sigsetjmp(env, 0) or _setjmp/_longjmp; otherwise jump less often.",
        expected_gain: None,
        example: ("__sigsetjmp", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
    KnownSource {
        id: "fork_spawn_mask",
        frames: &[
            Pattern::Function("spawni"),
            Pattern::Function("spawnix"),
            Pattern::Function("posix_spawn"),
            Pattern::Function("posix_spawnp"),
            Pattern::Function("libc_fork"),
            Pattern::Function("fork"),
            Pattern::Function("Fork"),
            Pattern::Function("libc_system"),
            Pattern::Function("do_system"),
            Pattern::Function("system"),
            Pattern::Function("popen"),
            Pattern::Function("IO_proc_open"),
        ],
        cause: "Creating a process blocks every signal around fork/clone and restores the \
                mask after (glibc's posix_spawn, fork, system and popen): {caller} starts \
                processes at a high rate.",
        fix: "Start fewer processes: keep long-lived workers, batch the commands, or do the \
              work in-process instead of system()/popen().",
        expected_gain: None,
        example: ("__spawni", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    },
    KnownSource {
        id: "masked_critical_section",
        frames: &[
            Pattern::Function("pthread_sigmask"),
            Pattern::Function("sigprocmask"),
            Pattern::Function("sigblock"),
            Pattern::Function("sigsetmask"),
            Pattern::Function("sighold"),
            Pattern::Function("sigrelse"),
        ],
        cause: "{caller} blocks and unblocks signals itself (pthread_sigmask/sigprocmask), \
                around a short critical section, at a high rate.",
        fix: "Block the signals once per thread or around the whole loop, or take them \
              synchronously (signalfd, sigwaitinfo in a dedicated thread) so that the mask \
              never has to change.",
        expected_gain: None,
        example: (
            "__GI___pthread_sigmask",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ),
    },
];

fn export(scrape: &Scrape<'_>) -> Vec<MetricFamily> {
    let mut calls = Vec::new();
    for (key, series) in scrape.series() {
        for (op, &n) in OP_NAMES.iter().zip(&series.counters.sigprocmask) {
            push_nonzero(&mut calls, with(key, &[("op", op)]), n as f64);
        }
    }
    vec![family(&SIGPROCMASK, calls)]
}

fn diagnose(obs: &Observation<'_>) -> Vec<Finding> {
    storm_finding(obs).into_iter().collect()
}

/// Whether a process's op mix is getcontext()/setcontext()'s: queries and
/// setmasks at the same rate, together most of its calls.
fn getcontext_signature(counts: &[u64]) -> bool {
    let total: u64 = counts.iter().sum();
    let (query, setmask) = (counts[QUERY] as f64, counts[SETMASK] as f64);
    query > 0.4 * total as f64 && (query - setmask).abs() <= 0.1 * query
}

/// The cause and fix the op mix suggests, before any call site is matched.
fn guess_from_op_mix(getcontext: bool) -> (String, String) {
    if getcontext {
        (
            "query and setmask at the same rate: the signature of glibc's \
             getcontext()/setcontext() (one rt_sigprocmask call each, as in Ruby 1.8.7 built \
             with --enable-pthread), or of sigsetjmp()/siglongjmp() with a saved mask."
                .to_string(),
            "Switch contexts without ucontext (Ruby: rebuild without --enable-pthread), or \
             jump with sigsetjmp(env, 0)/_longjmp where the mask does not change; the call \
             sites tell which."
                .to_string(),
        )
    } else {
        (
            "Signal masks changed at a high rate, around short critical sections or by a \
             library; the call sites name no known source."
                .to_string(),
            "Find the caller in the call sites and move the masking out of the hot loop \
             (block once per thread, or take signals with signalfd)."
                .to_string(),
        )
    }
}

fn storm_finding(obs: &Observation<'_>) -> Option<Finding> {
    let mut getcontext = false;
    let processes = obs.ranked(|d| {
        let total: u64 = d.c.sigprocmask.iter().sum();
        let rate = total as f64 / obs.secs;
        if rate < SIGPROCMASK_PER_SEC {
            return None;
        }
        getcontext |= getcontext_signature(&d.c.sigprocmask);
        let detail = OP_NAMES
            .iter()
            .zip(d.c.sigprocmask)
            .filter(|(_, n)| *n > 0)
            .map(|(op, n)| (op.to_string(), n as f64 / obs.secs))
            .collect();
        Some((rate, detail))
    });
    let top = processes.first()?;
    let (cause, fix) = guess_from_op_mix(getcontext);
    Some(Finding {
        id: RT_SIGPROCMASK_STORM.id,
        severity: Severity::Warning,
        title: format!(
            "{} makes {:.0} rt_sigprocmask calls/s",
            top.identity.comm, top.per_second
        ),
        evidence: BTreeMap::from([(
            "getcontext_setcontext_signature".to_string(),
            getcontext.to_string(),
        )]),
        processes,
        cause,
        fix,
        expected_gain: getcontext.then(|| RUBY_GAIN.to_string()),
        cause_basis: CauseBasis::Guess {
            from: "the operation mix (no sampled frame matches a known source)".into(),
        },
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_SIGPROCMASK),
        sources: Some((SOURCES, Compose::Replace)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::test_support::{delta, observe};

    #[test]
    fn getcontext_signature_is_recognised() {
        let d = delta("ruby", |c| {
            c.sigprocmask[QUERY] = 100_000;
            c.sigprocmask[SETMASK] = 100_000;
        });
        let f = observe(&[d], storm_finding).unwrap();
        assert_eq!(f.evidence["getcontext_setcontext_signature"], "true");
        assert!(f.cause.contains("getcontext"));
        let block = slot!(sp_sigmask_op::SP_SIGMASK_BLOCK);
        let blocky = delta("x", |c| c.sigprocmask[block] = 50_000);
        let f = observe(&[blocky], storm_finding).unwrap();
        assert_eq!(f.evidence["getcontext_setcontext_signature"], "false");
        let idle = delta("idle", |c| c.sigprocmask[SETMASK] = 10);
        assert!(observe(&[idle], storm_finding).is_none());
    }

    #[test]
    fn every_known_source_matches_its_example_first() {
        crate::sources::tests::check_table(SOURCES);
    }
}
