#!/usr/bin/env bash
# Builds the slowpath Debian package and prints its path (the only line on
# stdout; progress goes to stderr).
#   tests/deploy/build-deb.sh             cargo build --release, then the .deb
#   tests/deploy/build-deb.sh --no-build  package target/release/slowpath as is
# cargo-deb is installed once, outside the repository, into
# $SLOWPATH_TOOLS_CACHE/cargo-deb (default /var/cache/slowpath-tools/cargo-deb;
# about 2 minutes on 2 cores the first time, from crates.io).
# What goes into the package: [package.metadata.deb] in agent/Cargo.toml, the
# unit and /etc/default/slowpath in deploy/systemd/, maintainer scripts in
# deploy/debian/.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"

CARGO_DEB_VERSION=3.8.0   # pinned: the generated maintainer scripts follow it
cache=${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools}
root="$cache/cargo-deb"
mkdir -p "$root"
export PATH="$root/bin:$PATH"

if [[ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]]; then
  # One installer at a time (parallel test sessions may race).
  exec 9>"$cache/.lock-cargo-deb"
  flock 9
  if [[ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]]; then
    echo "build-deb.sh: installing cargo-deb $CARGO_DEB_VERSION into $root" >&2
    cargo install cargo-deb --version "=$CARGO_DEB_VERSION" --locked --root "$root" --force >&2
  fi
  exec 9>&-
fi

if [[ "${1:-}" == "--no-build" ]]; then
  [[ -x target/release/slowpath ]] || { echo "build-deb.sh: target/release/slowpath missing" >&2; exit 1; }
else
  echo "build-deb.sh: cargo build --release --locked -p slowpath" >&2
  cargo build --release --locked -p slowpath >&2
fi

# The binary is built above (--locked, as scripts/test.sh builds it), so
# cargo-deb only strips and packages it.
out=$(cargo deb -p slowpath --no-build)
deb=$(printf '%s\n' "$out" | tail -1)
[[ "$deb" == *.deb && -f "$deb" ]] || { echo "build-deb.sh: cargo deb gave no package: $out" >&2; exit 1; }
echo "build-deb.sh: built $deb" >&2
echo "$deb"
