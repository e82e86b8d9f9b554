//! The counted syscalls of the embedded BPF object and their groups, read
//! from its BTF: `enum sp_counted_syscall`, which `bpf/core/syscalls.h`
//! makes from the one table of counted syscalls
//! (`bpf/core/syscall_table.h`), one member `SP_COUNTED_<name>` per syscall
//! of this architecture with its `enum sp_syscall_group` as the value. The
//! agent keeps no list of syscalls of its own: a signal names the groups it
//! counts, and their syscalls (the fentry programs
//! `sys_enter_fentry_<name>` to load) come from here, each with its kernel
//! function as its fentry program's section names it (the table's choice:
//! `__x64_sys_<name>`, or `__do_sys_<name>` for an x86_64 syscall without
//! arguments).

use std::mem::MaybeUninit;
use std::sync::OnceLock;

use libbpf_rs::btf::types::Enum;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, Btf, OpenObject};

use super::hooks::FENTRY_PROGRAM_PREFIX;
use super::skel::SlowpathSkelBuilder;
use super::types::sp_syscall_group;

/// The prefix of the members of `enum sp_counted_syscall`.
const MEMBER_PREFIX: &str = "SP_COUNTED_";

/// One counted syscall of this architecture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountedSyscall {
    /// The syscall's name (`"clock_gettime"`).
    pub name: String,
    /// Its kernel function, the fentry target (`"__x64_sys_clock_gettime"`,
    /// `"__do_sys_sched_yield"`): the section of its program
    /// `sys_enter_fentry_<name>` less `fentry/`; `None` without one.
    pub function: Option<String>,
    /// The group whose switch turns its counting on.
    pub group: sp_syscall_group,
}

/// Every counted syscall, in the table's order; read once. Empty when the
/// object cannot be opened or has no such enum, which the object check
/// (`check_object`, a unit test) reports as groups without syscalls.
pub fn counted_syscalls() -> &'static [CountedSyscall] {
    static TABLE: OnceLock<Vec<CountedSyscall>> = OnceLock::new();
    TABLE.get_or_init(|| with_embedded_object(read_table).unwrap_or_default())
}

/// The syscalls of `groups`, group by group in the order given, each in the
/// table's order, each once.
pub fn syscalls_of(groups: &[sp_syscall_group]) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for group in groups {
        for syscall in counted_syscalls().iter().filter(|s| s.group == *group) {
            if !names.contains(&syscall.name.as_str()) {
                names.push(&syscall.name);
            }
        }
    }
    names
}

/// The members of `enum sp_counted_syscall` in `object`'s BTF.
fn read_table(object: &OpenObject) -> Vec<CountedSyscall> {
    // SAFETY: the open object's own `struct bpf_object`, alive for this
    // call, as the BTF view of it (dropped at return) is.
    let raw = unsafe { object.as_libbpf_object().as_ref() };
    let Ok(Some(btf)) = Btf::from_bpf_object(raw) else {
        return Vec::new();
    };
    let Some(members) = btf.type_by_name::<Enum<'_>>("sp_counted_syscall") else {
        return Vec::new();
    };
    let functions: Vec<(String, String)> = object
        .progs()
        .filter_map(|p| {
            let syscall = p.name().to_str()?.strip_prefix(FENTRY_PROGRAM_PREFIX)?;
            let function = p.section().to_str()?.strip_prefix("fentry/")?;
            Some((syscall.to_string(), function.to_string()))
        })
        .collect();
    members
        .iter()
        .filter_map(|m| {
            let name = m.name?.to_str()?.strip_prefix(MEMBER_PREFIX)?;
            let group = sp_syscall_group(u32::try_from(m.value).ok()?);
            let function = functions
                .iter()
                .find(|(s, _)| s == name)
                .map(|(_, f)| f.clone());
            Some(CountedSyscall {
                name: name.to_string(),
                function,
                group,
            })
        })
        .collect()
}

/// `f` of the object built into this binary, opened (not loaded: no
/// privileges and no kernel needed); errors when libbpf cannot open it.
pub(super) fn with_embedded_object<T>(f: impl FnOnce(&OpenObject) -> T) -> Result<T, String> {
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let open = SlowpathSkelBuilder::default()
        .open(&mut storage)
        .map_err(|err| format!("opening the embedded BPF object: {err}"))?;
    Ok(f(open.open_object()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_has_its_syscalls_in_the_table_order() {
        let names = |group| syscalls_of(&[group]);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            names(sp_syscall_group::SP_SYSCALLS_CLOCK_READS),
            ["clock_gettime", "gettimeofday", "time"]
        );
        #[cfg(target_arch = "aarch64")]
        assert_eq!(
            names(sp_syscall_group::SP_SYSCALLS_CLOCK_READS),
            ["clock_gettime", "gettimeofday"]
        );
        assert_eq!(
            names(sp_syscall_group::SP_SYSCALLS_SIGPROCMASK),
            ["rt_sigprocmask"]
        );
        assert_eq!(
            names(sp_syscall_group::SP_SYSCALLS_SLEEPS),
            ["nanosleep", "clock_nanosleep"]
        );
        let waits = names(sp_syscall_group::SP_SYSCALLS_TIMED_WAITS);
        assert_eq!(waits[..2], ["futex", "futex_waitv"]);
        assert_eq!(waits.contains(&"poll"), cfg!(target_arch = "x86_64"));
    }

    #[test]
    fn a_syscall_without_arguments_attaches_where_btf_has_its_function() {
        let function = |name: &str| {
            counted_syscalls()
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.function.clone())
        };
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(
                function("sched_yield").as_deref(),
                Some("__do_sys_sched_yield")
            );
            assert_eq!(function("close").as_deref(), Some("__x64_sys_close"));
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(
            function("sched_yield").as_deref(),
            Some("__arm64_sys_sched_yield")
        );
        assert!(counted_syscalls().iter().all(|s| s.function.is_some()));
    }

    #[test]
    fn a_syscall_of_two_groups_asked_for_is_named_once() {
        let sleeps = sp_syscall_group::SP_SYSCALLS_SLEEPS;
        assert_eq!(syscalls_of(&[sleeps, sleeps]), syscalls_of(&[sleeps]));
        assert!(syscalls_of(&[]).is_empty());
    }
}
