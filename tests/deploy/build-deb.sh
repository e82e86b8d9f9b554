#!/usr/bin/env bash
# Builds the slowpath Debian package and prints its path (the only line on
# stdout; progress goes to stderr).
#   tests/deploy/build-deb.sh             cargo build --release, then the .deb
#   tests/deploy/build-deb.sh --no-build  package target/release/slowpath as is
#   tests/deploy/build-deb.sh [--no-build] --arch arm64
#                                         the same for arm64 (Architecture: arm64),
#                                         from the cross build (scripts/setup.sh --arm64)
# cargo-deb is installed once, outside the repository (scripts/cargo-tool.sh), into
# $SLOWPATH_TOOLS_CACHE/cargo-deb (default /var/cache/slowpath-tools/cargo-deb;
# about 2 minutes on 2 cores the first time, from crates.io).
# What goes into the package: [package.metadata.deb] in agent/Cargo.toml, the
# unit and /etc/default/slowpath in deploy/systemd/, maintainer scripts in
# deploy/debian/.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"

CARGO_DEB_VERSION=3.8.0   # pinned: the generated maintainer scripts follow it
tool_bin=$(scripts/cargo-tool.sh cargo-deb "$CARGO_DEB_VERSION")
export PATH="$tool_bin:$PATH"

out=${CARGO_TARGET_DIR:-target}  # where cargo builds (cargo-deb follows it too)
build=1 target=() variant=() bin=$out/release/slowpath
while (($#)); do
  case $1 in
  --no-build) build=0 ;;
  --arch)
    [[ "${2:-}" == arm64 || "${2:-}" == amd64 ]] || { echo "build-deb.sh: --arch amd64 or arm64" >&2; exit 2; }
    if [[ $2 == arm64 ]]; then
      target=(--target aarch64-unknown-linux-gnu)
      variant=(--variant arm64)  # agent/Cargo.toml: its dependencies
      bin=$out/aarch64-unknown-linux-gnu/release/slowpath
    fi
    shift
    ;;
  *) echo "build-deb.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if ((build)); then
  echo "build-deb.sh: cargo build --release --locked -p slowpath ${target[*]}" >&2
  cargo build --release --locked -p slowpath "${target[@]}" >&2
fi
[[ -x $bin ]] || { echo "build-deb.sh: $bin missing" >&2; exit 1; }

# The man pages and shell completions, from the flags' definitions: the
# host's build writes them (they are the same for every architecture).
host=$out/release/slowpath
[[ -x $host ]] || { echo "build-deb.sh: $host missing (it writes the man pages): cargo build --release" >&2; exit 1; }
gen=target/generated
rm -rf "$gen/man" "$gen/completions"
mkdir -p "$gen/completions"
"$host" man "$gen/man" >&2
"$host" completions bash >"$gen/completions/slowpath"
"$host" completions zsh >"$gen/completions/_slowpath"
"$host" completions fish >"$gen/completions/slowpath.fish"
# The Debian changelog, from CHANGELOG.md, signed by the package's maintainer.
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' agent/Cargo.toml)
scripts/changelog.py debian "$maintainer" >"$gen/changelog"

# The binary is built above (--locked, as scripts/test.sh builds it), so
# cargo-deb only strips and packages it (for arm64 with the cross strip, and
# the dependencies from the cross libraries' shlibs).
made=$(cargo deb -p slowpath --no-build "${target[@]}" "${variant[@]}")
deb=$(printf '%s\n' "$made" | tail -1)
[[ "$deb" == *.deb && -f "$deb" ]] || { echo "build-deb.sh: cargo deb gave no package: $made" >&2; exit 1; }
echo "build-deb.sh: built $deb" >&2
echo "$deb"
