#!/usr/bin/env bash
# Installs what slowpath needs on Debian/Ubuntu, idempotently.
#   scripts/setup.sh          build dependencies (clang, libelf, zlib, Rust)
#   scripts/setup.sh --arm64  plus the arm64 cross build: gcc-aarch64-linux-gnu,
#                             Rust's aarch64-unknown-linux-gnu target, and Debian's
#                             arm64 libelf and zlib unpacked into target/aarch64-libs
#   scripts/setup.sh --test   plus --arm64 and what the test suite uses (strace,
#                             perf (the syscalls' tracepoints counted as an oracle),
#                             bpftool, pytest, prometheus-client, Debian's Prometheus
#                             2.42 and promtool, bpftrace, QEMU x86_64 and aarch64,
#                             busybox and cpio for the guest kernel tests, runc and
#                             iptables for the real node's containerd and
#                             kube-proxy), then builds everything the tests use
#                             but do not test, once, into its cache (tests/deploy/
#                             test-tools.sh: the Go-built tools, the Kubernetes
#                             components, cargo-deb and cargo-cyclonedx, the base
#                             images, the guest kernels, the workloads; about 25 min
#                             the first time, seconds after). No test builds them.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0 want_arm64=0
case "${1:-}" in
--test) want_test=1 want_arm64=1 ;;
--arm64) want_arm64=1 ;;
"") ;;
*)
  echo "setup.sh: unknown option $1 (use --arm64 or --test)" >&2
  exit 2
  ;;
esac

if [[ $EUID -ne 0 ]]; then
  echo "setup.sh: run as root (it installs packages): sudo $0 $*" >&2
  exit 1
fi

build_pkgs=(clang libelf-dev zlib1g-dev pkg-config make gcc curl ca-certificates)
test_pkgs=(apache2-utils gnuplot-nox strace linux-perf tzdata bpftool python3 python3-pytest python3-prometheus-client prometheus util-linux
           qemu-system-x86 busybox-static cpio podman debootstrap runc
           iptables systemd dpkg-dev python3-yaml python3-jsonnet python3-venv bpftrace qemu-system-arm libcap2-bin libpth-dev lintian libproc-daemon-perl
           maven default-jdk-headless libjemalloc2 redis-server)
arm64_pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)

pkgs=("${build_pkgs[@]}")
((want_test)) && pkgs+=("${test_pkgs[@]}")
((want_arm64)) && pkgs+=("${arm64_pkgs[@]}")

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
if ((want_arm64)); then
  rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
    || rustup target add aarch64-unknown-linux-gnu
  # The libraries the agent links (libbpf-sys: libelf, zlib) for arm64; their
  # headers are the host's (libelf-dev, zlib1g-dev), the same version.
  [[ -e target/aarch64-libs/usr/lib/aarch64-linux-gnu/libelf.so ]] \
    || scripts/debian-fetch.sh bookworm arm64 target/aarch64-libs libelf1 libelf-dev zlib1g zlib1g-dev
fi
if ((want_test)); then
  tests/deploy/test-tools.sh
fi
echo "setup.sh: ready ($(cargo --version), $(clang --version | head -1))"
