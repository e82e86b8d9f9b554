#!/usr/bin/env bash
# Installs what slowpath needs on Debian/Ubuntu, idempotently.
#   scripts/setup.sh          build dependencies (clang, libelf, zlib, Rust)
#   scripts/setup.sh --test   plus what the test suite uses (strace, bpftool,
#                             pytest, prometheus-client, Prometheus/promtool, bpftrace,
#                             QEMU, busybox and cpio for the guest kernel tests)
set -euo pipefail

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

if [[ $EUID -ne 0 ]]; then
  echo "setup.sh: run as root (it installs packages): sudo $0 $*" >&2
  exit 1
fi

build_pkgs=(clang libelf-dev zlib1g-dev pkg-config make gcc curl ca-certificates)
test_pkgs=(strace bpftool python3 python3-pytest python3-prometheus-client prometheus util-linux
           qemu-system-x86 busybox-static cpio podman debootstrap runc
           systemd dpkg-dev python3-yaml python3-venv bpftrace)

pkgs=("${build_pkgs[@]}")
((want_test)) && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust: rustup's toolchain if present, else install it (Debian's rustc is too old).
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"
if ! command -v cargo >/dev/null; then
  echo "setup.sh: installing the Rust toolchain with rustup"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
  source "$HOME/.cargo/env"
fi
echo "setup.sh: ready ($(cargo --version), $(clang --version | head -1))"
