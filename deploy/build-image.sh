#!/usr/bin/env bash
# Builds the agent's container image for amd64 and arm64 from deploy/Containerfile
# and joins them in one manifest list (what a DaemonSet on mixed node pools
# pulls). Prints the image names, one per line: the manifest, then each
# architecture's image (NAME-amd64, NAME-arm64).
#
#   deploy/build-image.sh [--arch amd64|arm64|all] [--no-build] [NAME]
#
# NAME defaults to localhost/slowpath:VERSION (agent/Cargo.toml's). Without --no-build it runs
# cargo build --release (and with --target aarch64-unknown-linux-gnu for
# arm64: scripts/setup.sh --arm64 first). Push with
#   podman manifest push --all NAME docker://registry.example.com/slowpath:0.2.0
# Environment: BASE_amd64, BASE_arm64 (the base image per architecture),
# passed as the BASE build arg when set (default debian:bookworm-slim).
# SOURCE_DATE_EPOCH, when set, is every file's and the image's creation time
# (podman build --timestamp), so a rebuild of the same binaries is the same
# image (scripts/release.sh sets it to the commit's time).
# Needs setcap (libcap2-bin) and apt (for libelf1 of each architecture,
# scripts/debian-fetch.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' agent/Cargo.toml | head -1)
arches=(amd64 arm64) build=1 name=localhost/slowpath:$version
while (($#)); do
  case $1 in
  --arch)
    case ${2:-} in
    amd64 | arm64) arches=("$2") ;;
    all) ;;
    *) echo "build-image.sh: --arch amd64, arm64 or all" >&2; exit 2 ;;
    esac
    shift
    ;;
  --no-build) build=0 ;;
  -*) echo "build-image.sh: unknown option $1" >&2; exit 2 ;;
  *) name=$1 ;;
  esac
  shift
done

binary() {
  local out=${CARGO_TARGET_DIR:-target}
  case $1 in
  amd64) echo "$out/release/slowpath" ;;
  arm64) echo "$out/aarch64-unknown-linux-gnu/release/slowpath" ;;
  esac
}

podman manifest rm "$name" >/dev/null 2>&1 || true
podman manifest create "$name" >/dev/null
echo "$name"
for arch in "${arches[@]}"; do
  if ((build)); then
    target=()
    [[ $arch == arm64 ]] && target=(--target aarch64-unknown-linux-gnu)
    cargo build --release --locked -p slowpath "${target[@]}" >&2
  fi
  bin=$(binary "$arch")
  [[ -x $bin ]] || { echo "build-image.sh: $bin missing (build it, or drop --no-build)" >&2; exit 1; }
  root=target/image/$arch/root
  rm -rf "$root"
  scripts/debian-fetch.sh bookworm "$arch" "$root" libelf1 >&2
  install -D -m 0755 "$bin" "$root/usr/bin/slowpath"
  # Permitted-only file capabilities: a non-root exec (the chart's uid 65534)
  # keeps, of what the runtime permits, only what the file grants; the agent
  # raises what it uses into its effective set. CAP_SYS_RESOURCE lifts
  # RLIMIT_MEMLOCK on kernels before 5.11 and is dropped at start;
  # CAP_SYSLOG only counts where the chart adds it (agent.readKernelAddresses).
  setcap cap_bpf,cap_perfmon,cap_sys_resource,cap_sys_ptrace,cap_dac_read_search,cap_checkpoint_restore,cap_syslog=p "$root/usr/bin/slowpath"
  args=(--platform "linux/$arch" -f deploy/Containerfile -t "$name-$arch")
  base_var=BASE_$arch
  [[ -n ${!base_var:-} ]] && args+=(--build-arg "BASE=${!base_var}")
  [[ -n ${SOURCE_DATE_EPOCH:-} ]] && args+=(--timestamp "$SOURCE_DATE_EPOCH")
  # The OCI labels a registry shows (GHCR links the image to its repository by
  # the source label).
  args+=(--label "org.opencontainers.image.version=$version"
    --label "org.opencontainers.image.source=https://github.com/slowpath/slowpath"
    --label "org.opencontainers.image.licenses=GPL-2.0-only OR MIT")
  revision=$(git rev-parse HEAD 2>/dev/null) && args+=(--label "org.opencontainers.image.revision=$revision")
  echo "build-image.sh: podman build ${args[*]}" >&2
  podman build -q "${args[@]}" . >&2
  podman manifest add "$name" "containers-storage:$name-$arch" >/dev/null
  echo "$name-$arch"
done
