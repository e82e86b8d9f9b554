//! `rt_sigprocmask` calls (hook `sys_enter`, or fentry), by operation. glibc's
//! `getcontext` queries the mask (NULL new set) and `setcontext` sets it:
//! one system call each, the Ruby 1.8.7 `--enable-pthread` case.
//!
//! Doctor rule: a process changing signal masks at a high rate, with the
//! getcontext/setcontext signature recognised from the operation mix.

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::bpf::slot;
use crate::bpf::types::{sp_callsite_kind, sp_counters, sp_sigmask_op};
use crate::exposition::{family, push_nonzero, with, Family};
use crate::finding::{Finding, Observation, Severity};
use crate::signals::{Scrape, Signal};

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

pub const SIGNAL: Signal = Signal {
    name: "rt_sigprocmask",
    families: &[&SIGPROCMASK],
    export,
    diagnose,
    enrich: None,
};

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

fn storm_finding(obs: &Observation<'_>) -> Option<Finding> {
    let mut getcontext = false;
    let processes = obs.ranked(|d| {
        let total: u64 = d.c.sigprocmask.iter().sum();
        let rate = total as f64 / obs.secs;
        if rate < SIGPROCMASK_PER_SEC {
            return None;
        }
        let (query, setmask) = (
            d.c.sigprocmask[QUERY] as f64,
            d.c.sigprocmask[SETMASK] as f64,
        );
        // getcontext() queries, setcontext() sets: equal halves
        if query > 0.4 * total as f64 && (query - setmask).abs() <= 0.1 * query {
            getcontext = true;
        }
        let detail = OP_NAMES
            .iter()
            .zip(d.c.sigprocmask)
            .filter(|(_, n)| *n > 0)
            .map(|(op, n)| (op.to_string(), n as f64 / obs.secs))
            .collect();
        Some((rate, detail))
    });
    let top = processes.first()?;
    let (cause, fix) = if getcontext {
        (
            "query and setmask at the same rate: the glibc getcontext()/setcontext() signature \
             (each makes one rt_sigprocmask call), as in Ruby 1.8.7 built with --enable-pthread."
                .to_string(),
            "Rebuild the runtime without the option that switches threads with \
             getcontext/setcontext (Ruby: without --enable-pthread), or move context switching \
             off ucontext."
                .to_string(),
        )
    } else {
        (
            "Signal masks changed around short critical sections at a high rate.".to_string(),
            "Move the masking out of the hot loop.".to_string(),
        )
    };
    Some(Finding {
        id: "rt_sigprocmask_storm",
        severity: Severity::Warning,
        title: format!("{} makes {:.0} rt_sigprocmask calls/s", top.comm, top.per_second),
        evidence: BTreeMap::from([(
            "getcontext_setcontext_signature".to_string(),
            getcontext.to_string(),
        )]),
        processes,
        cause,
        fix,
        expected_gain: getcontext.then(|| {
            "Ruby 1.8.7 ran ~40 % faster without --enable-pthread (20M rt_sigprocmask calls gone)".to_string()
        }),
        call_sites: Some(sp_callsite_kind::SP_CALLSITE_SIGPROCMASK),
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
}
