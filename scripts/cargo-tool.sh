#!/usr/bin/env bash
# Installs a cargo subcommand at a pinned version, once, outside the
# repository, into $SLOWPATH_TOOLS_CACHE/CRATE (default
# /var/cache/slowpath-tools/CRATE), and prints its bin directory (for PATH).
#
#   scripts/cargo-tool.sh CRATE VERSION      e.g. cargo-deb 3.8.0
#   scripts/cargo-tool.sh --check CRATE VERSION
#                                            installs nothing: exits 1 if that
#                                            version is not installed
#
# Another version than the one installed (cargo install --list) reinstalls;
# one installer at a time per crate (parallel test sessions may race). Used by
# tests/deploy/build-deb.sh (cargo-deb) and scripts/release.sh
# (cargo-cyclonedx); each takes about 2 minutes on 2 cores the first time.
set -euo pipefail
check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
[[ $# -eq 2 ]] || { echo "usage: scripts/cargo-tool.sh [--check] CRATE VERSION" >&2; exit 2; }
crate=$1 version=$2
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"
cache=${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools}
root=$cache/$crate

# (cargo install --list creates the root: not before an install is due)
installed() { [[ -d $root ]] && cargo install --list --root "$root" 2>/dev/null | grep -qxF "$crate v$version:"; }

if ((check)) && ! installed; then
  echo "cargo-tool.sh: $crate $version not installed in $root: run scripts/setup.sh --test" >&2
  exit 1
fi
if ! installed; then
  mkdir -p "$root"
  exec 9>"$cache/.lock-$crate"
  flock 9
  if ! installed; then
    echo "cargo-tool.sh: installing $crate $version into $root" >&2
    cargo install "$crate" --version "=$version" --locked --root "$root" --force >&2
  fi
  exec 9>&-
fi
echo "$root/bin"
