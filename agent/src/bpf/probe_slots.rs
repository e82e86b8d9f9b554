//! The hooks' slots in the programs' own per-CPU arrays (`probe_runs`,
//! `probe_time`, by `enum sp_probe` in bpf/slowpath.h), found by name in the
//! loaded object's BTF, and their sums over the CPUs.

use anyhow::{Context, Result};
use libbpf_rs::skel::Skel;
use libbpf_rs::{AsRawLibbpf, Btf, MapCore, MapFlags};

use super::hooks::HookTable;
use super::loaded::Loaded;

/// Prefix of the `enum sp_probe` members (bpf/slowpath.h): the slot of hook
/// `sys_enter` is `SP_PROBE_SYS_ENTER`.
const SLOT_PREFIX: &str = "SP_PROBE_";

/// Sum over the CPUs of slot `slot` of a per-CPU array of `u64`.
pub(super) fn percpu_sum(map: &dyn MapCore, slot: u32) -> u64 {
    match map.lookup_percpu(&slot.to_ne_bytes(), MapFlags::ANY) {
        Ok(Some(cpus)) => cpus
            .iter()
            .filter_map(|v| v.get(..8)?.try_into().ok())
            .map(u64::from_ne_bytes)
            .sum(),
        _ => 0,
    }
}

/// The `probe_runs` slot of each hook of the loaded object's table.
pub(super) fn object_slots(loaded: &Loaded<'_>) -> Result<Vec<Option<u32>>> {
    let object = loaded.skel.object();
    // SAFETY: the pointer is the loaded object's own `struct bpf_object`,
    // alive while `loaded` is borrowed, as `btf` (dropped at return) is.
    let raw = unsafe { object.as_libbpf_object().as_ref() };
    let btf = Btf::from_bpf_object(raw)
        .context("reading the BPF object's BTF")?
        .context("the BPF object has no BTF")?;
    Ok(slots(&btf, &loaded.table))
}

/// The slot of each hook of `table` among the members of `enum sp_probe` in
/// `btf` (`SP_PROBE_<HOOK>`), `None` for a hook with no member.
pub(super) fn slots(btf: &Btf<'_>, table: &HookTable) -> Vec<Option<u32>> {
    use libbpf_rs::btf::types::Enum;
    let Some(probes) = btf.type_by_name::<Enum<'_>>("sp_probe") else {
        return vec![None; table.len()];
    };
    table
        .names()
        .iter()
        .map(|hook| {
            let member = format!("{SLOT_PREFIX}{}", hook.to_uppercase());
            probes
                .iter()
                .find(|m| m.name.is_some_and(|n| n.to_str() == Some(&member)))
                .and_then(|m| u32::try_from(m.value).ok())
        })
        .collect()
}
