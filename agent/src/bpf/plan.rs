//! Attach plans (one attach type per hook) and the search for one the
//! kernel takes. Pure code: what the kernel offers comes from a
//! [`KernelOffer`] (its BTF, or a fake in the tests); nothing here calls
//! libbpf.

use std::path::Path;

use anyhow::{bail, Context, Result};
use tracing::{info, warn};

use super::hooks::{AttachType, HookTable, LeftOutCause};
use super::KERNEL_BTF;

/// What the running kernel offers the attach plans.
pub trait KernelOffer {
    /// Whether the kernel's BTF has a type named `name`: a tracepoint's
    /// `btf_trace_<name>`, a syscall function (`__x64_sys_futex`).
    fn has_type(&self, name: &str) -> bool;
    /// Whether the kernel exposes its own BTF ([`KERNEL_BTF`]), in which
    /// fentry and tp_btf resolve their targets.
    fn exposes_btf(&self) -> bool;
    /// Why attaching fentry to syscalls that run right now is unsafe on
    /// this machine (`None`: it is safe; see `emulator.rs`).
    fn unsafe_live_patching(&self) -> Option<&'static str> {
        None
    }
}

/// One attach type per hook, indexed like the [`HookTable`].
pub(super) type Plan = Vec<AttachType>;

/// Hooks left out because the kernel refused every program they have,
/// with the kernel's reason, indexed like the [`HookTable`].
pub(super) type Refused = Vec<Option<String>>;

/// The plans to try, in order, without repeats. A kernel that does not
/// expose its own BTF (built without CONFIG_DEBUG_INFO_BTF, run with
/// --bpf.btf-path `btf_path`) gets raw_tp only: fentry and tp_btf resolve
/// their targets in the kernel's BTF. `force` (--bpf.attach-type) gives
/// one plan; it errors when it needs BTF the kernel does not expose.
pub(super) fn plans(
    table: &HookTable,
    force: Option<AttachType>,
    btf_path: &Path,
    offer: &dyn KernelOffer,
) -> Result<Vec<Plan>> {
    let kernel_has_btf = offer.exposes_btf();
    let mut plans = match force {
        Some(forced) if !kernel_has_btf && forced != AttachType::RawTp => bail!(
            "--bpf.attach-type={} needs the kernel's own BTF ({KERNEL_BTF}), which this \
             kernel does not expose: use --bpf.attach-type=raw-tp or leave it to the agent",
            clap::ValueEnum::to_possible_value(&forced)
                .map_or(forced.to_string(), |v| v.get_name().into())
        ),
        None if !kernel_has_btf => {
            info!(
                btf = %btf_path.display(),
                "the kernel exposes no BTF ({KERNEL_BTF}): raw_tp for every hook, \
                 field offsets from the BTF file"
            );
            vec![vec![AttachType::RawTp; table.len()]]
        }
        Some(forced) => vec![forced_plan(table, forced)],
        None => auto_plans(table, offer),
    };
    plans.dedup();
    Ok(plans)
}

/// Forced: that type where the hook has it, else the hook's cheapest.
fn forced_plan(table: &HookTable, forced: AttachType) -> Plan {
    (0..table.len())
        .map(|idx| {
            let types = table.attach_types(idx);
            let at = types.iter().position(|&t| t == forced).unwrap_or(0);
            types[at]
        })
        .collect()
}

/// Cheapest plan the kernel's BTF allows, then without fentry, then raw_tp
/// everywhere. fentry needs the syscall functions in BTF (and may still be
/// refused at load, e.g. under lockdown); tp_btf needs `btf_trace_<name>`.
fn auto_plans(table: &HookTable, offer: &dyn KernelOffer) -> Vec<Plan> {
    let mut fentry_ok = table.fentry_targets().iter().all(|f| offer.has_type(f));
    if let Some(why) = offer.unsafe_live_patching().filter(|_| fentry_ok) {
        info!(
            "fentry left out of the automatic choice: {why} (--bpf.attach-type=fentry forces it)"
        );
        fentry_ok = false;
    }
    let tracepoint: Plan = table
        .names()
        .into_iter()
        .map(|probe| {
            if offer.has_type(&format!("btf_trace_{probe}")) {
                AttachType::TpBtf
            } else {
                info!(probe, "no btf_trace_{probe} in kernel BTF: using raw_tp");
                AttachType::RawTp
            }
        })
        .collect();
    let mut cheapest = tracepoint.clone();
    if fentry_ok {
        for (idx, attach_type) in cheapest.iter_mut().enumerate() {
            if table.attach_types(idx).contains(&AttachType::Fentry) {
                *attach_type = AttachType::Fentry;
            }
        }
    }
    vec![cheapest, tracepoint, vec![AttachType::RawTp; table.len()]]
}

/// Leave out by design the hooks whose tracepoint this kernel was built
/// without: a kernel that exposes its BTF has a `btf_trace_<name>` for every
/// tracepoint it has (`CONFIG_COMPACTION=n` removes the compaction ones).
/// Without the kernel's BTF nothing can be told: every hook stays expected.
pub(super) fn leave_out_missing_tracepoints(table: &mut HookTable, offer: &dyn KernelOffer) {
    if !offer.exposes_btf() {
        return;
    }
    for (idx, probe) in table.names().into_iter().enumerate() {
        if !offer.has_type(&format!("btf_trace_{probe}")) {
            let why =
                format!("the kernel has no {probe} tracepoint (no btf_trace_{probe} in its BTF)");
            table.leave_out_by_design(idx, LeftOutCause::NoKernelHook, why);
        }
    }
}

/// The search for a plan the kernel takes: the plan being tried, the plans
/// after it, and the hooks left out so far.
pub(super) struct Search<'t> {
    table: &'t HookTable,
    plan: Plan,
    later: std::vec::IntoIter<Plan>,
    refused: Refused,
}

impl<'t> Search<'t> {
    /// Start with the first of `plans`; errors when there is none.
    pub(super) fn new(table: &'t HookTable, plans: Vec<Plan>) -> Result<Self> {
        let mut later = plans.into_iter();
        let plan = later.next().context("no attach plan to try")?;
        Ok(Self {
            table,
            plan,
            later,
            refused: vec![None; table.len()],
        })
    }

    pub(super) fn table(&self) -> &'t HookTable {
        self.table
    }

    pub(super) fn plan(&self) -> &Plan {
        &self.plan
    }

    pub(super) fn refused(&self) -> &Refused {
        &self.refused
    }

    /// Whether the program of hook `idx` with `attach_type` is to be loaded.
    pub(super) fn wants(&self, idx: usize, attach_type: AttachType) -> bool {
        self.plan[idx] == attach_type && self.refused[idx].is_none()
    }

    /// Move hook `idx` to attach type `next` in this plan and every later one.
    pub(super) fn step_down(&mut self, idx: usize, next: AttachType) {
        self.plan[idx] = next;
        for later in self.later.as_mut_slice() {
            later[idx] = later[idx].max(next);
        }
    }

    /// The kernel refused hook `idx`'s program of `attach_type` for
    /// `reason`: the hook steps down to its next attach type or, with none
    /// left, is left out with the hooks that only serve it.
    pub(super) fn refuse(&mut self, idx: usize, attach_type: AttachType, reason: &str) {
        let probe = self.table.name(idx);
        if let Some(next) = self.table.next_attach_type(idx, attach_type) {
            info!(probe, from = %attach_type, to = %next, reason = %reason,
                  "kernel refused this program; trying the hook's next attach type");
            self.step_down(idx, next);
            return;
        }
        warn!(probe, %attach_type, reason = %reason,
              "kernel refused every program of this hook; the others keep working");
        self.refused[idx] = Some(format!("kernel refused the program: {reason}"));
        for dependent in self.table.dependents(idx) {
            info!(
                probe = self.table.name(dependent),
                needs = probe,
                "left out: it only serves a refused hook"
            );
            self.refused[dependent] = Some(format!("needs {probe}, which the kernel refused"));
        }
    }

    /// Go on with the next plan; false when there is none.
    pub(super) fn advance(&mut self) -> bool {
        match self.later.next() {
            Some(next) => {
                self.plan = next;
                true
            }
            None => false,
        }
    }

    /// The plan being tried, `hook=attach_type` separated by spaces.
    pub(super) fn describe(&self) -> String {
        self.table
            .names()
            .iter()
            .zip(&self.plan)
            .map(|(p, t)| format!("{p}={t}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::AttachType::{Fentry, RawTp, TpBtf};
    use super::*;
    use crate::bpf::hooks::tests::setup;
    use crate::bpf::hooks::{fentry_target, KernelSetup};

    /// What a kernel offers: whether it exposes BTF, and the types it has.
    struct Offer {
        btf: bool,
        types: Vec<String>,
        emulated: bool,
    }

    impl KernelOffer for Offer {
        fn has_type(&self, name: &str) -> bool {
            self.types.iter().any(|t| t == name)
        }
        fn exposes_btf(&self) -> bool {
            self.btf
        }
        fn unsafe_live_patching(&self) -> Option<&'static str> {
            self.emulated.then_some("an emulator")
        }
    }

    /// A kernel with BTF that has `btf_trace_` of every hook of the test
    /// table but `without`, and the fentry targets when `fentry`.
    fn kernel(table: &HookTable, fentry: bool, without: &[&str]) -> Offer {
        let mut types: Vec<String> = (table.names().into_iter())
            .filter(|name| !without.contains(name))
            .map(|name| format!("btf_trace_{name}"))
            .collect();
        if fentry {
            types.extend(table.fentry_targets().iter().cloned());
        }
        Offer {
            btf: true,
            types,
            emulated: false,
        }
    }

    fn plans_for(offer: &Offer, force: Option<AttachType>) -> Result<Vec<Plan>> {
        plans(&HookTable::new(&setup()), force, Path::new("/btf"), offer)
    }

    #[test]
    fn fentry_allowed_comes_first_then_tracepoints_then_raw_tp() {
        let table = HookTable::new(&setup());
        let plans = plans_for(&kernel(&table, true, &[]), None).unwrap();
        assert_eq!(
            plans,
            [
                vec![Fentry, TpBtf, TpBtf, TpBtf, TpBtf, TpBtf],
                vec![TpBtf; 6],
                vec![RawTp; 6]
            ]
        );
    }

    #[test]
    fn an_emulator_leaves_fentry_out_unless_forced() {
        let table = HookTable::new(&setup());
        let mut offer = kernel(&table, true, &[]);
        offer.emulated = true;
        let plans = plans_for(&offer, None).unwrap();
        assert_eq!(plans, [vec![TpBtf; 6], vec![RawTp; 6]]);
        let forced = plans_for(&offer, Some(Fentry)).unwrap();
        assert_eq!(forced[0], vec![Fentry, TpBtf, TpBtf, TpBtf, TpBtf, TpBtf]);
    }

    #[test]
    fn a_missing_fentry_target_or_btf_trace_type_moves_that_hook_down() {
        let table = HookTable::new(&setup());
        let mut offer = kernel(&table, true, &["mm_page_alloc"]);
        offer.types.retain(|t| *t != fentry_target("futex"));
        let plans = plans_for(&offer, None).unwrap();
        assert_eq!(
            plans,
            [
                vec![TpBtf, TpBtf, TpBtf, RawTp, TpBtf, TpBtf],
                vec![RawTp; 6]
            ]
        );
    }

    #[test]
    fn without_the_kernels_own_btf_only_raw_tp_and_no_forcing() {
        let offer = Offer {
            btf: false,
            types: Vec::new(),
            emulated: false,
        };
        assert_eq!(plans_for(&offer, None).unwrap(), [vec![RawTp; 6]]);
        assert_eq!(plans_for(&offer, Some(RawTp)).unwrap(), [vec![RawTp; 6]]);
        let err = plans_for(&offer, Some(TpBtf)).unwrap_err().to_string();
        assert!(err.starts_with("--bpf.attach-type=tp-btf needs the kernel's own BTF"));
    }

    #[test]
    fn forced_attach_types_fall_back_per_hook() {
        let table = HookTable::new(&setup());
        let offer = kernel(&table, false, &["mm_page_alloc"]);
        let fentry = plans_for(&offer, Some(Fentry)).unwrap();
        assert_eq!(fentry, [vec![Fentry, TpBtf, TpBtf, TpBtf, TpBtf, TpBtf]]);
        let tp_btf = plans_for(&offer, Some(TpBtf)).unwrap();
        assert_eq!(tp_btf, [vec![TpBtf; 6]]);
        // without syscalls to count there is no syscall hook, so no fentry
        let bare = HookTable::new(&KernelSetup::default());
        let plans = plans(&bare, Some(Fentry), Path::new("/btf"), &offer).unwrap();
        assert_eq!(plans, [vec![TpBtf; 3]]);
    }

    #[test]
    fn a_step_down_holds_in_every_later_plan() {
        let table = HookTable::new(&setup());
        let all = plans_for(&kernel(&table, true, &[]), None).unwrap();
        let mut search = Search::new(&table, all).unwrap();
        search.step_down(0, TpBtf);
        search.refuse(3, TpBtf, "invalid func unknown#32767");
        assert_eq!(
            search.plan(),
            &vec![TpBtf, TpBtf, TpBtf, RawTp, TpBtf, TpBtf]
        );
        assert!(search.advance());
        assert_eq!(
            search.plan(),
            &vec![TpBtf, TpBtf, TpBtf, RawTp, TpBtf, TpBtf]
        );
        assert!(search.advance());
        assert_eq!(search.plan(), &vec![RawTp; 6]);
        assert!(!search.advance());
    }

    #[test]
    fn a_hook_refused_as_raw_tp_is_left_out_with_the_hooks_that_need_it() {
        let table = HookTable::new(&setup());
        let mut search = Search::new(&table, vec![vec![RawTp; 6]]).unwrap();
        search.refuse(3, RawTp, "invalid func unknown#32767");
        let refused = search.refused();
        assert_eq!(
            refused[3].as_deref(),
            Some("kernel refused the program: invalid func unknown#32767")
        );
        assert_eq!(
            refused[4].as_deref(),
            Some("needs mm_page_alloc, which the kernel refused")
        );
        assert!(refused
            .iter()
            .enumerate()
            .all(|(i, r)| r.is_none() || (3..=4).contains(&i)));
        assert!(!search.wants(3, RawTp) && search.wants(5, RawTp));
        assert_eq!(
            search.describe(),
            "sys_enter=raw_tp sched_process_exit=raw_tp sched_process_exec=raw_tp \
             mm_page_alloc=raw_tp mm_compaction_end=raw_tp cgroup_mkdir=raw_tp"
        );
    }

    #[test]
    fn hooks_without_a_tracepoint_are_left_out_by_design_only_when_btf_tells() {
        let mut table = HookTable::new(&setup());
        let offer = kernel(&table, true, &["mm_page_alloc"]);
        leave_out_missing_tracepoints(&mut table, &offer);
        let left_out: Vec<_> = (0..table.len())
            .filter(|&i| table.by_design(i).is_some())
            .collect();
        assert_eq!(left_out, [3, 4]); // mm_compaction_end only serves mm_page_alloc
        let mut table = HookTable::new(&setup());
        let no_btf = Offer {
            btf: false,
            types: Vec::new(),
            emulated: false,
        };
        leave_out_missing_tracepoints(&mut table, &no_btf);
        assert!((0..table.len()).all(|i| table.by_design(i).is_none()));
    }
}
