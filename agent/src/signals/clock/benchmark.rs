//! The doctor's clock benchmark: ns per read of each clock through libc
//! (the vDSO where it can) and through the raw system call, on this node,
//! with the canary's verdict for the vDSO clocks.

use std::sync::Arc;

use serde::Serialize;

use super::canary::{time_raw_reads, time_reads, CanaryReadings};
use super::{clock_name, is_vdso_clock};
use crate::bpf::types::sp_clock;
use crate::node::{Fact, NodeFact, NodeFacts};

/// Clocks the doctor's benchmark times: the vDSO clocks, then the two
/// CPU-time clocks (the seeds' TimeBench).
pub const BENCHMARK_CLOCKS: [sp_clock; 9] = [
    super::VDSO_CLOCKS[0],
    super::VDSO_CLOCKS[1],
    super::VDSO_CLOCKS[2],
    super::VDSO_CLOCKS[3],
    super::VDSO_CLOCKS[4],
    super::VDSO_CLOCKS[5],
    super::VDSO_CLOCKS[6],
    sp_clock::SP_CLOCK_PROCESS_CPUTIME,
    sp_clock::SP_CLOCK_THREAD_CPUTIME,
];

/// ns per read of one clock, through libc and through the raw syscall.
#[derive(Debug, Serialize)]
pub struct ClockCost {
    pub clock: &'static str,
    pub libc_ns: f64,
    pub syscall_ns: f64,
    /// Whether the vDSO should serve this clock.
    pub vdso_clock: bool,
    /// Whether the agent's libc reads of it entered the kernel.
    pub fell_back: Option<bool>,
    /// The clock measured.
    #[serde(skip)]
    pub id: sp_clock,
}

/// Every clock of [`BENCHMARK_CLOCKS`] measured on this node (the doctor
/// report's `clock_benchmark`).
#[derive(Debug, Default)]
pub struct ClockBenchmark(pub Vec<ClockCost>);

impl NodeFact for ClockBenchmark {
    fn report(&self) -> Option<(&'static str, &dyn erased_serde::Serialize)> {
        Some(("clock_benchmark", &self.0))
    }
    fn table(&self) -> Option<String> {
        let mut out = String::from("clock read cost on this node (ns per read):\n");
        out += &format!("   {:<18} {:>10} {:>12}", "CLOCK", "LIBC", "RAW SYSCALL");
        for c in &self.0 {
            out += &format!(
                "\n   {:<18} {:>10.1} {:>12.1}",
                c.clock, c.libc_ns, c.syscall_ns
            );
        }
        Some(out)
    }
}

/// Time every benchmark clock now (about 10 ms; longer when reads fall
/// back), with the canary's verdicts from `node`.
pub fn measure(node: &NodeFacts) -> Fact {
    Arc::new(with_costs(node, |clock| {
        (time_reads(clock) * 1e9, time_raw_reads(clock) * 1e9)
    }))
}

/// The benchmark with costs (libc ns, syscall ns) from `cost`, each clock's
/// canary verdict from `node`.
pub fn with_costs(
    node: &NodeFacts,
    mut cost: impl FnMut(sp_clock) -> (f64, f64),
) -> ClockBenchmark {
    let canary = node.get::<CanaryReadings>();
    ClockBenchmark(
        BENCHMARK_CLOCKS
            .iter()
            .map(|&clock| {
                let (libc_ns, syscall_ns) = cost(clock);
                ClockCost {
                    clock: clock_name(clock),
                    libc_ns,
                    syscall_ns,
                    vdso_clock: is_vdso_clock(clock),
                    fell_back: canary.and_then(|c| c.verdict(clock)),
                    id: clock,
                }
            })
            .collect(),
    )
}
