//! Builds the BPF object from `bpf/slowpath.bpf.c` (and the headers it
//! includes from `bpf/core/`, `bpf/signals/` and `bpf/compose/`) with clang and generates
//! its Rust skeleton (`OUT_DIR/slowpath.skel.rs`). The skeleton embeds the
//! object, so the agent binary is self-contained. Also names the build
//! (`agent/src/version.rs`): the git commit and the build date.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libbpf_cargo::SkeletonBuilder;

const BPF_DIR: &str = "../bpf";
const SOURCE: &str = "../bpf/slowpath.bpf.c";

fn main() {
    name_the_build();
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
    // slowpath.bpf.c includes the headers of core/, signals/ and compose/: a change to
    // any file of bpf/ rebuilds the object (cargo scans a directory whole).
    println!("cargo:rerun-if-changed={BPF_DIR}");
}

/// `SLOWPATH_REVISION` (the commit, 7 hex digits; `unknown` from a tree
/// without `.git`, e.g. a source archive or an image's build context),
/// `SLOWPATH_BUILD_DATE` (YYYY-MM-DD, UTC: `SOURCE_DATE_EPOCH`'s when set,
/// else the commit's, so that two builds of one commit say the same, else
/// today's) and `SLOWPATH_VERSION_DETAIL`, what `--version` adds to the
/// version. Rerun when the checked-out commit moves.
fn name_the_build() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        let refs = ["HEAD", "packed-refs", branch.as_deref().unwrap_or("HEAD")];
        // Only files that exist: cargo takes a missing one as changed at
        // every build (a fresh clone has no packed-refs, or no loose ref).
        for path in refs.map(|r| format!("{git_dir}/{r}")) {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let commit = git(&["rev-parse", "--short=7", "HEAD"]);
    let epoch = (env::var("SOURCE_DATE_EPOCH").ok())
        .or_else(|| git(&["log", "-1", "--format=%ct"]))
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|secs| UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap_or_else(SystemTime::now);
    let date = humantime::format_rfc3339_seconds(epoch).to_string()[..10].to_string();
    let detail = match &commit {
        Some(commit) => format!("{commit} {date}"),
        None => format!("built outside git, {date}"),
    };
    let revision = commit.unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SLOWPATH_REVISION={revision}");
    println!("cargo:rustc-env=SLOWPATH_BUILD_DATE={date}");
    println!("cargo:rustc-env=SLOWPATH_VERSION_DETAIL={detail}");
}

/// `git ARGS` in this crate's directory: its trimmed output, `None` when
/// git is missing, fails, or this is no work tree.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
