//! The kernel's BTF, parsed once per start: the attach plans ask it which
//! tracepoints and functions the kernel has, the signals which helpers.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use libbpf_rs::btf::types::Enum;
use libbpf_rs::btf::BtfType;
use libbpf_rs::Btf;

use super::plan::KernelOffer;
use super::KERNEL_BTF;

/// A parsed kernel BTF (several MB in memory: drop it once loaded).
pub struct KernelBtf {
    btf: Btf<'static>,
    path: PathBuf,
}

// SAFETY: `btf` owns its libbpf `struct btf` alone (parsed from a file,
// freed on drop, no pointer to it is handed out beyond borrows of `self`),
// and libbpf keeps no thread-local or global state for it, so using it from
// the thread it was moved to is sound. Not `Sync`: no shared use across threads.
unsafe impl Send for KernelBtf {}

impl KernelBtf {
    /// Parse the BTF file at `path`: the kernel's own ([`KERNEL_BTF`]) or
    /// the one given with `--bpf.btf-path`. Errors when it cannot be read
    /// or is not a BTF blob.
    pub fn open(path: &Path) -> Result<Self> {
        let btf = Btf::from_path(path).with_context(|| {
            format!(
                "reading kernel BTF from {}: is it a BTF blob?",
                path.display()
            )
        })?;
        Ok(Self {
            btf,
            path: path.to_path_buf(),
        })
    }

    /// The file it was parsed from (also the BTF libbpf relocates against).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a type of any kind is named `name`.
    pub fn has_type(&self, name: &str) -> bool {
        self.btf.type_by_name::<BtfType<'_>>(name).is_some()
    }

    /// Whether the kernel has BPF helper `name` (`"snprintf"`): a member
    /// `BPF_FUNC_<name>` of its `enum bpf_func_id`.
    pub fn has_helper(&self, name: &str) -> bool {
        let member = format!("BPF_FUNC_{name}");
        self.btf
            .type_by_name::<Enum<'_>>("bpf_func_id")
            .is_some_and(|ids| ids.iter().any(|m| m.name == Some(OsStr::new(&member))))
    }
}

impl KernelOffer for KernelBtf {
    fn has_type(&self, name: &str) -> bool {
        KernelBtf::has_type(self, name)
    }

    /// The running kernel's own BTF, whatever file was parsed: fentry and
    /// tp_btf resolve their targets in it.
    fn exposes_btf(&self) -> bool {
        Path::new(KERNEL_BTF).exists()
    }

    fn unsafe_live_patching(&self) -> Option<&'static str> {
        super::emulator::unsafe_live_patching()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_btf_answers_types_and_helpers() {
        let btf = KernelBtf::open(Path::new(KERNEL_BTF)).unwrap();
        assert!(btf.has_type("task_struct"));
        assert!(!btf.has_type("slowpath_no_such_type"));
        assert!(btf.has_helper("map_lookup_elem"));
        assert!(!btf.has_helper("slowpath_no_such_helper"));
        let err = KernelBtf::open(Path::new("/proc/self/status"))
            .err()
            .unwrap();
        assert!(format!("{err:#}").contains("is it a BTF blob?"));
    }
}
