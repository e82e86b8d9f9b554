#!/usr/bin/env bash
# Builds every artifact of a slowpath release into dist/, offline, from a
# clean clone (.github/workflows/release.yml runs it on a v* tag, then
# publishes what it made; nothing here needs a registry):
#
#   slowpath_VERSION-1_amd64.deb, slowpath_VERSION-1_arm64.deb
#                                 the Debian packages (tests/deploy/build-deb.sh)
#   slowpath_VERSION_linux_amd64.oci.tar, ..._linux_arm64.oci.tar
#                                 each architecture's image, an OCI archive
#                                 (`podman load -i` takes it)
#   slowpath_VERSION_image.oci.tar
#                                 both images under one multi-arch index
#                                 (`skopeo copy --all oci-archive:... docker://...`)
#   slowpath-VERSION.tgz          the Helm chart, version and appVersion VERSION
#   slowpath_VERSION.cdx.json     SBOM: the binary's Rust dependencies, CycloneDX
#                                 JSON from cargo-cyclonedx
#   RELEASE_NOTES.md              CHANGELOG.md's entry for VERSION
#   SHA256SUMS                    of all the above (`sha256sum -c SHA256SUMS`)
#
#   scripts/release.sh [--allow-dirty] [--image NAME]
#
# VERSION is agent/Cargo.toml's; the script stops (one line, exit 1) when the
# chart or CHANGELOG.md's newest entry says another, or when the tree has
# uncommitted changes (--allow-dirty: for trying it out). NAME is the images'
# name without tag (default ghcr.io/slowpath/slowpath); they are also left in
# podman's local storage as NAME:VERSION (the manifest list) and
# NAME:VERSION-amd64/-arm64.
#
# Runs scripts/setup.sh --arm64 (the cross build; root), needs podman,
# setcap, helm (in PATH or the test tools' cache: tests/deploy/install-tools.sh),
# and installs cargo-deb and cargo-cyclonedx (scripts/cargo-tool.sh) into $SLOWPATH_TOOLS_CACHE
# (default /var/cache/slowpath-tools) the first time (about 4 minutes).
# BASE_amd64 / BASE_arm64 name the images' Debian base when no registry is
# reachable (deploy/build-image.sh).
#
# CARGO_TARGET_DIR, when set, is where cargo builds (and where the scripts
# take the binaries from).
#
# Reproducible: SOURCE_DATE_EPOCH (default: the commit's time) dates the
# binaries' build (slowpath --version), the .debs' files, the images' files
# and creation time, the SBOM, and the entries of the OCI archives and of
# the chart package (podman save and helm package stamp them with the
# current time: both are repacked). The same commit built with the same
# toolchain in the same directory (rustc records source paths) and the same
# base images gives the same SHA256SUMS (measured: two builds, the agent
# recompiled in between). Not reproducible: a base image named by a tag
# (BASE), which is whatever the registry holds that day; pin it by digest.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f "$HOME/.cargo/env" ]] && source "$HOME/.cargo/env"

CARGO_CYCLONEDX_VERSION=0.5.9   # pinned: the SBOM's shape follows it
cache=${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools}
image=ghcr.io/slowpath/slowpath allow_dirty=0

die() { echo "release.sh: $*" >&2; exit 1; }
log() { echo "release.sh: $*" >&2; }

while (($#)); do
  case $1 in
  --allow-dirty) allow_dirty=1 ;;
  --image) image=${2:?--image NAME}; shift ;;
  *) echo "usage: scripts/release.sh [--allow-dirty] [--image NAME]" >&2; exit 2 ;;
  esac
  shift
done

# One version everywhere, before anything is built.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' agent/Cargo.toml | head -1)
[[ -n $version ]] || die "no version in agent/Cargo.toml"
chart=deploy/helm/slowpath
for key in version appVersion; do
  v=$(sed -n "s/^$key: \"\\{0,1\\}\\([^\"]*\\)\"\\{0,1\\}\$/\\1/p" "$chart/Chart.yaml")
  [[ $v == "$version" ]] || die "$chart/Chart.yaml $key is '$v', agent/Cargo.toml says $version: make them equal"
done
newest=$(scripts/changelog.py newest)
[[ $newest == "$version" ]] || die "CHANGELOG.md's newest entry is $newest, agent/Cargo.toml says $version: add its entry"
if ((!allow_dirty)) && [[ -n $(git status --porcelain --untracked-files=no) ]]; then
  die "the tree has uncommitted changes (a release is built from a commit): commit them, or --allow-dirty to try"
fi

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
log "slowpath $version from $(git rev-parse --short HEAD), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
dist=$PWD/dist
rm -rf "$dist"
mkdir -p "$dist"

build_debs() {
  local arch deb
  for arch in amd64 arm64; do
    deb=$(tests/deploy/build-deb.sh --arch "$arch")
    cp "$deb" "$dist/"
  done
}

# Each architecture's image and the index over both, as OCI archives.
build_images() {
  local arch archive
  deploy/build-image.sh --no-build "$image:$version" >/dev/null
  for arch in amd64 arm64; do
    podman save -q --format oci-archive -o "$dist/slowpath_${version}_linux_$arch.oci.tar" \
      "$image:$version-$arch"
  done
  podman manifest push -q --all "$image:$version" \
    "oci-archive:$dist/slowpath_${version}_image.oci.tar:$version" >&2
  for archive in "$dist"/*.oci.tar; do repack "$archive"; done
}

# FILE again with the same entries, sorted, owned by root and dated
# SOURCE_DATE_EPOCH (a .tgz gzipped without a name or time stamp).
repack() {
  local file=$1 dir
  dir=$(mktemp -d)
  tar -xf "$file" -C "$dir"
  local entries
  mapfile -t entries < <(cd "$dir" && LC_ALL=C ls -A)
  local opts=(--sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -C "$dir")
  case $file in
  *.tgz) tar "${opts[@]}" -cf - "${entries[@]}" | gzip -9n >"$file" ;;
  *) tar "${opts[@]}" -cf "$file" "${entries[@]}" ;;
  esac
  rm -rf "$dir"
}

helm_bin() {
  command -v helm 2>/dev/null || { [[ -x $cache/bin/helm ]] && echo "$cache/bin/helm"; } ||
    die "helm not found: install it, or run tests/deploy/install-tools.sh"
}

build_chart() {
  "$(helm_bin)" package "$chart" --version "$version" --app-version "$version" -d "$dist" >&2
  repack "$dist/slowpath-$version.tgz"
}

build_sbom() {
  local tool_bin
  tool_bin=$(scripts/cargo-tool.sh cargo-cyclonedx "$CARGO_CYCLONEDX_VERSION")
  export PATH="$tool_bin:$PATH"
  # Only what the binary links: no dev- or build-dependencies.
  cargo cyclonedx --manifest-path agent/Cargo.toml --format json --spec-version 1.5 \
    --no-build-deps --override-filename slowpath.cdx >&2
  mv agent/slowpath.cdx.json "$dist/slowpath_$version.cdx.json"
}

for tool in podman setcap; do
  command -v "$tool" >/dev/null || die "$tool not found: apt-get install podman libcap2-bin"
done
helm_bin >/dev/null
# The cross build's compiler and arm64 libraries (target/aarch64-libs).
scripts/setup.sh --arm64 >&2

log "the .debs (amd64, arm64)"
# build-deb.sh builds each architecture's binary; the images reuse them.
build_debs
log "the images (OCI archives, multi-arch index)"
build_images
log "the chart"
build_chart
log "the SBOM"
build_sbom
scripts/changelog.py notes "$version" >"$dist/RELEASE_NOTES.md"
(cd "$dist" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort |
  xargs sha256sum >SHA256SUMS)
log "done: $dist"
cat "$dist/SHA256SUMS"
