//! The kernel's sampled-stack tables (`callsites`, `stacks`,
//! `stack_copies`, `stack_drops` in `bpf/core/callsites.h`), read and pruned
//! through their own file descriptors so that any thread can use them, not
//! only the BPF worker.
//!
//! The BPF side samples at most one user stack per jiffy (1 to 10 ms) per kind
//! of call per process at the counted syscalls, and only when loaded with `capture_stacks`
//! (`slowpath doctor`, or the agent with `--debug.callsites`).

use std::collections::HashSet;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::unwind::StackCopy;
use crate::bpf::{types, Loaded};
use crate::snapshot::comm_to_string;

/// User stacks sampled at counted syscalls: one entry of the `callsites` map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawCallSite {
    pub tgid: u32,
    /// The group leader's comm when sampled.
    pub comm: String,
    /// `enum sp_callsite_kind`, named by the signal that owns it
    /// (`signals::callsite_kinds()`).
    pub kind: u32,
    /// Samples so far (monotonic while the entry lives).
    pub samples: u64,
    /// Key of the stack in the `stacks` map, a hash of its frames (what,
    /// with `stack_top`, makes the entry distinct).
    pub stack_id: u64,
    /// Instruction pointers, innermost first (frame-pointer walk).
    pub ips: Vec<u64>,
    /// The two words at the user stack pointer: one is the caller's return
    /// address when the syscall was made from a leaf function.
    pub stack_top: [u64; 2],
    /// Registers and top of stack of the site's first sample, for
    /// unwinding with .eh_frame (`stack_copies`), when the kernel kept one.
    pub copy: Option<StackCopy>,
    /// The map key as read, to find the site in the other tables.
    pub key: Vec<u8>,
}

/// Handles on the stack maps; `Send`, unlike the skeleton.
pub struct StackTables {
    callsites: MapHandle,
    stacks: MapHandle,
    copies: MapHandle,
    drops: MapHandle,
    /// tgid -> samples still wanted (on-demand sampling).
    targets: MapHandle,
}

impl StackTables {
    /// Duplicate the maps' descriptors out of a loaded skeleton.
    pub fn open(loaded: &Loaded<'_>) -> Result<Self> {
        let maps = &loaded.skel.maps;
        Ok(Self {
            callsites: MapHandle::try_from(&maps.callsites).context("callsites map")?,
            stacks: MapHandle::try_from(&maps.stacks).context("stacks map")?,
            copies: MapHandle::try_from(&maps.stack_copies).context("stack_copies map")?,
            drops: MapHandle::try_from(&maps.stack_drops).context("stack_drops map")?,
            targets: MapHandle::try_from(&maps.stack_targets).context("stack_targets map")?,
        })
    }

    /// Make `stack_targets` hold exactly the thread groups of `wanted`,
    /// tgid -> samples (at most one per jiffy per kind of call, at its
    /// counted calls). Returns how many the table took (it holds
    /// `SP_MAX_STACK_TARGETS`): the count the programs must be told
    /// (`Worker::set_stack_target_count`), 0 before the table changes and
    /// the new count after, so that they never look up a table in the middle
    /// of a change (a stale lookup only costs a sample more or less).
    pub fn set_targets(&self, wanted: &[(u32, u32)]) -> usize {
        let keep: HashSet<u32> = wanted.iter().map(|&(tgid, _)| tgid).collect();
        for key in self.targets.keys() {
            let gone = <[u8; 4]>::try_from(key.as_slice())
                .is_ok_and(|k| !keep.contains(&u32::from_ne_bytes(k)));
            if gone {
                let _ = self.targets.delete(&key);
            }
        }
        wanted
            .iter()
            .filter(|(tgid, samples)| {
                let (key, value) = (tgid.to_ne_bytes(), samples.to_ne_bytes());
                self.targets.update(&key, &value, MapFlags::ANY).is_ok()
            })
            .count()
    }

    /// Every sampled call site with its stack. An entry whose stack is gone
    /// (pruned between the two lookups) is skipped.
    pub fn read(&self) -> Vec<RawCallSite> {
        let mut sites = self.entries();
        sites.retain_mut(|site| self.fill_stack(site));
        sites
    }

    /// Every sampled call site, without its stack (`ips` empty).
    pub fn entries(&self) -> Vec<RawCallSite> {
        self.callsites
            .keys()
            .filter_map(|key_bytes| {
                let key = parse_key(&key_bytes)?;
                let count = self.callsites.lookup(&key_bytes, MapFlags::ANY).ok()??;
                Some(RawCallSite {
                    tgid: key.tgid,
                    comm: comm_to_string(&key.comm),
                    kind: key.kind,
                    samples: u64_at(&count, 0),
                    stack_id: key.stack_id,
                    ips: Vec::new(),
                    stack_top: key.stack_top,
                    copy: None,
                    key: key_bytes,
                })
            })
            .collect()
    }

    /// Read `site`'s stack into `ips`, and its stack copy if there is one;
    /// false when the stack is no longer there.
    pub fn fill_stack(&self, site: &mut RawCallSite) -> bool {
        let Ok(Some(stack)) = self
            .stacks
            .lookup(&site.stack_id.to_ne_bytes(), MapFlags::ANY)
        else {
            return false;
        };
        site.ips = (0..stack.len() / 8)
            .map(|i| u64_at(&stack, i))
            .take_while(|&ip| ip != 0)
            .collect();
        site.copy = match self.copies.lookup(&site.key, MapFlags::ANY) {
            Ok(Some(value)) => parse_copy(&value),
            _ => None,
        };
        true
    }

    /// Delete `site`'s stack copy (symbolized, it is not needed again): room
    /// for the copies of new sites.
    pub fn drop_copy(&self, site: &RawCallSite) {
        let _ = self.copies.delete(&site.key);
    }

    /// Delete the entries of `tgids` (processes that exited), then the
    /// stacks no remaining entry refers to, so that both tables keep room
    /// for live processes. Returns how many entries went.
    ///
    /// A sample the kernel adds to a deleted stack between the two passes
    /// loses its stack and is skipped by [`read`](Self::read).
    pub fn forget(&self, tgids: &HashSet<u32>) -> usize {
        if tgids.is_empty() {
            return 0;
        }
        let mut gone_stacks = HashSet::new();
        let mut kept_stacks = HashSet::new();
        let mut deleted = 0;
        for key_bytes in self.callsites.keys() {
            let Some(key) = parse_key(&key_bytes) else {
                continue;
            };
            if tgids.contains(&key.tgid) {
                if self.callsites.delete(&key_bytes).is_ok() {
                    deleted += 1;
                }
                let _ = self.copies.delete(&key_bytes);
                gone_stacks.insert(key.stack_id);
            } else {
                kept_stacks.insert(key.stack_id);
            }
        }
        for id in gone_stacks.difference(&kept_stacks) {
            let _ = self.stacks.delete(&id.to_ne_bytes());
        }
        deleted
    }

    /// Samples dropped so far (all CPUs): no room in `stacks` or in
    /// `callsites`, or a stack the kernel could not walk.
    pub fn dropped(&self) -> u64 {
        match self.drops.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY) {
            Ok(Some(per_cpu)) => per_cpu.iter().map(|v| u64_at(v, 0)).sum(),
            _ => 0,
        }
    }
}

fn parse_key(bytes: &[u8]) -> Option<types::sp_callsite_key> {
    let mut key = types::sp_callsite_key {
        tgid: 0,
        kind: 0,
        stack_id: 0,
        stack_top: [0; 2],
        comm: [0; 16],
    };
    plain::copy_from_bytes(&mut key, bytes).ok()?;
    Some(key)
}

/// A `stack_copies` value: its registers and the `len` bytes of stack read.
fn parse_copy(bytes: &[u8]) -> Option<StackCopy> {
    use std::mem::offset_of;
    use types::sp_stack_copy as C;
    let word = |off: usize| Some(u64_at(bytes.get(off..off + 8)?, 0));
    let len = bytes.get(offset_of!(C, len)..offset_of!(C, len) + 4)?;
    let len = u32::from_ne_bytes(len.try_into().ok()?) as usize;
    let data = offset_of!(C, data);
    Some(StackCopy {
        ip: word(offset_of!(C, ip))?,
        sp: word(offset_of!(C, sp))?,
        fp: word(offset_of!(C, fp))?,
        lr: word(offset_of!(C, lr))?,
        data: bytes.get(data..data + len)?.to_vec(),
    })
}

/// The `i`th native-endian u64 of `bytes` (0 past the end).
fn u64_at(bytes: &[u8], i: usize) -> u64 {
    bytes
        .get(i * 8..i * 8 + 8)
        .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
}
