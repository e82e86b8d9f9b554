//! Builds the BPF object from `bpf/slowpath.bpf.c` (and the headers it
//! includes from `bpf/core/` and `bpf/signals/`) with clang and generates
//! its Rust skeleton (`OUT_DIR/slowpath.skel.rs`). The skeleton embeds the
//! object, so the agent binary is self-contained.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const BPF_DIR: &str = "../bpf";
const SOURCE: &str = "../bpf/slowpath.bpf.c";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    // One committed vmlinux.h per architecture (bpf/vmlinux/generate.sh).
    let vmlinux_arch = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => panic!(
            "no bpf/vmlinux/<arch>/vmlinux.h for target arch {other}: generate one with \
             `bpftool btf dump file /sys/kernel/btf/vmlinux format c`"
        ),
    };
    let mut clang_args = vec![
        format!("-I{BPF_DIR}"),
        format!("-I{BPF_DIR}/vmlinux/{vmlinux_arch}"),
        "-Wall".to_string(),
        "-Werror".to_string(),
    ];
    // The test-only BPF code (`#ifdef SP_FAULT_INJECTION`) is in the object
    // only with the cargo feature fault-injection: the product has none.
    if env::var_os("CARGO_FEATURE_FAULT_INJECTION").is_some() {
        clang_args.push("-DSP_FAULT_INJECTION".to_string());
    }
    SkeletonBuilder::new()
        .source(SOURCE)
        // clang_args replaces earlier arguments: pass every extra flag here.
        .clang_args(clang_args)
        .build_and_generate(out_dir.join("slowpath.skel.rs"))
        .expect("building bpf/slowpath.bpf.c (is clang installed? run scripts/setup.sh)");
    // slowpath.bpf.c includes the headers of core/ and signals/: a change to
    // any file of bpf/ rebuilds the object (cargo scans a directory whole).
    println!("cargo:rerun-if-changed={BPF_DIR}");
}
