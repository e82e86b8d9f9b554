#!/usr/bin/env bash
# The compiled dependencies of an earlier build, for a fresh clone: cargo
# compiles slowpath's few hundred dependencies for four profiles (clippy's
# check, the tests, release, the arm64 release), about 25 minutes on 2 cores,
# while slowpath itself takes a few. scripts/test.sh restores them before it
# builds and saves them after.
#
#   scripts/target-cache.sh restore   fill target/ from the cache, when the
#                                     checkout has never built (no target/debug
#                                     or target/release) and the cache holds a
#                                     build of this Cargo.lock and toolchain
#   scripts/target-cache.sh save      copy target/ into the cache, when it holds
#                                     none of this Cargo.lock and toolchain (one
#                                     is kept: an older one is removed)
#
# The cache is $SLOWPATH_TOOLS_CACHE/cargo-target (default
# /var/cache/slowpath-tools/cargo-target), about 5 GB, without cargo's
# incremental state. A restored build is only a head start: cargo's own
# fingerprints decide what is rebuilt, and slowpath is (rustc records its
# source path, which differs from clone to clone). Copying takes about a
# minute either way.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"

cache=${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools}/cargo-target
key=$({ cat Cargo.lock; rustc -vV; } | sha256sum | cut -c1-16)
entry=$cache/$key

copy() { # FROM TO: a directory's tree without cargo's incremental state
  mkdir -p "$2"
  tar -C "$1" --exclude=incremental -cf - . | tar -C "$2" -xf -
}

case ${1:-} in
restore)
  if [[ -d target/debug || -d target/release ]]; then
    echo "target-cache.sh: target/ has built before: nothing restored" >&2
  elif [[ -f $entry/.complete ]]; then
    t0=$SECONDS
    copy "$entry" target
    rm -f target/.complete
    echo "target-cache.sh: restored $entry into target/ in $((SECONDS - t0)) s" >&2
  else
    echo "target-cache.sh: no cached build of this Cargo.lock and toolchain ($key): cargo builds from scratch" >&2
  fi
  ;;
save)
  if [[ -f $entry/.complete ]]; then
    exit 0
  fi
  t0=$SECONDS
  rm -rf "$cache"
  # What another checkout reuses: the profiles' trees, not this run's logs,
  # copies and downloaded libraries.
  mkdir -p "$entry"
  for dir in target/debug target/release target/aarch64-unknown-linux-gnu; do
    [[ -d $dir ]] && copy "$dir" "$entry/${dir#target/}"
  done
  touch "$entry/.complete"
  echo "target-cache.sh: saved target/ into $entry in $((SECONDS - t0)) s ($(du -sh "$entry" | cut -f1))" >&2
  ;;
*)
  echo "usage: scripts/target-cache.sh restore|save" >&2
  exit 2
  ;;
esac
