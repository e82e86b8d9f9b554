//! The embedded object checked against a setup: every program accounted
//! for by the hook table or the fentry syscalls, in the section its name
//! says, and every hook and syscall with its programs. The object is opened,
//! never loaded: no privileges and no kernel needed, so a unit test runs it.

use std::collections::BTreeMap;

use libbpf_rs::{AsRawLibbpf, Btf};

use super::hooks::{fentry_target, AttachType, HookTable, KernelSetup, FENTRY_PROGRAM_PREFIX};
use super::probe_slots::slots;
use super::syscall_table::with_embedded_object;

/// Check the object built into this binary against `setup` (with the core
/// hooks). `Err` lists every problem, one sentence each: a program no hook
/// or syscall accounts for, one in the wrong section, a hook or syscall
/// without its programs, a hook named twice, a `needs` naming no hook.
pub fn check_object(setup: &KernelSetup) -> Result<(), Vec<String>> {
    let table = HookTable::new(setup);
    let (programs, maps, slots) = with_embedded_object(|object| {
        let programs = object.progs().map(|p| {
            let name = p.name().to_string_lossy().into_owned();
            (name, p.section().to_string_lossy().into_owned())
        });
        let maps = object
            .maps()
            .map(|m| m.name().to_string_lossy().into_owned());
        // SAFETY: the open object's own `struct bpf_object`, alive for this
        // closure, as the BTF view of it is.
        let raw = unsafe { object.as_libbpf_object().as_ref() };
        let slots = match Btf::from_bpf_object(raw) {
            Ok(Some(btf)) => slots(&btf, &table),
            _ => vec![None; table.len()],
        };
        (
            programs.collect::<Vec<_>>(),
            maps.collect::<Vec<_>>(),
            slots,
        )
    })
    .map_err(|err| vec![err])?;
    let mut problems = check_programs(setup, &programs);
    for (hook, slot) in table.names().iter().zip(&slots) {
        if slot.is_none() {
            problems.push(format!(
                "hook {hook} has no member SP_PROBE_{} in enum sp_probe (bpf/slowpath.h): \
                 its runs would not be counted",
                hook.to_uppercase()
            ));
        }
    }
    for group in &setup.syscall_groups {
        if super::syscalls_of(&[*group]).is_empty() {
            problems.push(format!(
                "syscall group {} has no syscall in enum sp_counted_syscall (bpf/core/syscall_table.h)",
                group.0
            ));
        }
    }
    for (name, _) in &setup.map_sizes {
        if !maps.iter().any(|m| m == name) {
            problems.push(format!("the object has no map {name} to size"));
        }
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(problems),
    }
}

/// The problems of `programs` (name, section) against `setup`.
fn check_programs(setup: &KernelSetup, programs: &[(String, String)]) -> Vec<String> {
    let table = HookTable::new(setup);
    let mut problems = check_table(&table);
    let mut wanted = wanted_programs(&table, setup);
    for (name, section) in programs {
        if super::RUN_PROGRAMS.contains(&name.as_str()) && section == "raw_tp" {
            continue; // run by the agent on each CPU, attached nowhere
        }
        match wanted.remove(name) {
            None => problems.push(format!(
                "program {name} ({section}) is accounted for by no hook and no fentry syscall"
            )),
            Some((want, _)) if want != *section => problems.push(format!(
                "program {name} is in section {section}, its name says {want}"
            )),
            Some(_) => {}
        }
    }
    for (name, (section, owner)) in wanted {
        problems.push(format!(
            "{owner} has no program {name} ({section}) in the object"
        ));
    }
    problems
}

/// Hooks named twice, and `needs` that name no hook of the table.
fn check_table(table: &HookTable) -> Vec<String> {
    let names = table.names();
    let mut problems = Vec::new();
    for (idx, hook) in table.hooks().iter().enumerate() {
        if names[..idx].contains(&hook.name) {
            problems.push(format!("hook {} is named twice", hook.name));
        }
        if let Some(needed) = hook.needs.filter(|n| !names.contains(n)) {
            problems.push(format!(
                "hook {} needs {needed}, which is no hook",
                hook.name
            ));
        }
    }
    problems
}

/// Program name -> (section, who wants it): both twins of every hook and
/// one fentry program per syscall.
fn wanted_programs(table: &HookTable, setup: &KernelSetup) -> BTreeMap<String, (String, String)> {
    let mut wanted = BTreeMap::new();
    for name in table.names() {
        for attach_type in [AttachType::TpBtf, AttachType::RawTp] {
            wanted.insert(
                format!("{name}{}", attach_type.suffix()),
                (format!("{attach_type}/{name}"), format!("hook {name}")),
            );
        }
    }
    for syscall in &setup.fentry_syscalls {
        wanted.insert(
            format!("{FENTRY_PROGRAM_PREFIX}{syscall}"),
            (
                format!("{}/{}", AttachType::Fentry, fentry_target(syscall)),
                format!("fentry syscall {syscall}"),
            ),
        );
    }
    wanted
}

#[cfg(test)]
mod tests {
    use libbpf_rs::btf::types::Var;
    use libbpf_rs::{AsRawLibbpf, Btf};

    use super::*;
    use crate::bpf::hooks::tests::setup;
    use crate::bpf::hooks::SYSCALL_FN_PREFIX;

    /// The programs `setup()` asks for, as the object would have them.
    fn programs() -> Vec<(String, String)> {
        let table = HookTable::new(&setup());
        let mut out = Vec::new();
        for name in table.names() {
            out.push((format!("{name}_btf"), format!("tp_btf/{name}")));
            out.push((format!("{name}_raw"), format!("raw_tp/{name}")));
        }
        for syscall in ["clock_gettime", "futex"] {
            let section = format!("fentry/{SYSCALL_FN_PREFIX}{syscall}");
            out.push((format!("sys_enter_fentry_{syscall}"), section));
        }
        out
    }

    #[test]
    fn programs_that_match_the_setup_pass() {
        assert_eq!(check_programs(&setup(), &programs()), Vec::<String>::new());
    }

    #[test]
    fn every_mismatch_is_named() {
        let mut programs = programs();
        programs.retain(|(name, _)| name != "mm_page_alloc_raw");
        programs[0].1 = "raw_tp/sys_enter".into();
        programs.push(("sched_waking_btf".into(), "tp_btf/sched_waking".into()));
        let mut setup = setup();
        setup.fentry_syscalls.push("poll");
        setup.hooks.push(setup.hooks[0]);
        assert_eq!(
            check_programs(&setup, &programs),
            [
                "hook mm_page_alloc is named twice",
                "program sys_enter_btf is in section raw_tp/sys_enter, its name says \
                 tp_btf/sys_enter",
                "program sched_waking_btf (tp_btf/sched_waking) is accounted for by no hook \
                 and no fentry syscall",
                "hook mm_page_alloc has no program mm_page_alloc_raw (raw_tp/mm_page_alloc) \
                 in the object",
                &format!(
                    "fentry syscall poll has no program sys_enter_fentry_poll \
                     (fentry/{SYSCALL_FN_PREFIX}poll) in the object"
                ),
            ]
        );
    }

    /// Whether the embedded object's BTF has a variable named `name`.
    fn object_has_variable(name: &str) -> bool {
        with_embedded_object(|object| {
            // SAFETY: the pointer is the open object's, valid while `object`
            // is borrowed (for this closure), and only read through.
            let raw = unsafe { object.as_libbpf_object().as_ref() };
            let btf = Btf::from_bpf_object(raw)
                .unwrap()
                .expect("the object has BTF");
            btf.type_by_name::<Var<'_>>(name).is_some()
        })
        .unwrap()
    }

    #[cfg(not(feature = "fault-injection"))]
    #[test]
    fn the_product_has_no_fault_injection_code() {
        assert!(object_has_variable("capture_stacks")); // the lookup works
        assert!(!object_has_variable("test_refuse_page_alloc"));
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn the_fault_injection_build_has_its_bpf_code() {
        assert!(object_has_variable("test_refuse_page_alloc"));
    }

    #[test]
    fn a_hook_needing_no_hook_of_the_table_is_named() {
        let mut setup = setup();
        setup.hooks[1].needs = Some("no_such_hook");
        let problems = check_programs(&setup, &programs());
        assert_eq!(
            problems,
            ["hook mm_compaction_end needs no_such_hook, which is no hook"]
        );
    }
}
