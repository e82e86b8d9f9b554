#!/usr/bin/env bash
# Builds the local base images the deployment tests use, once:
#   base-image.sh          localhost/slowpath-base:bookworm        Debian bookworm minbase (debootstrap)
#   base-image.sh arm64    localhost/slowpath-base:bookworm-arm64  the same for arm64, unpacked only
#   base-image.sh runtimes localhost/slowpath-runtimes:bookworm    minbase with Debian's python3 and
#                                                                  OpenJDK 17 (the real node's workload pods,
#                                                                  tests/e2e/test_real_node.py; about 3 min)
# No container registry is reachable from the test machines, so the base is
# made from Debian's own packages and imported into podman. The arm64 one is
# debootstrap's first stage (--foreign: the packages unpacked, their scripts
# not run, as that needs arm64 execution): enough for an image whose build
# runs nothing in it (deploy/Containerfile). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
kind=${1:-amd64}
arch=$kind
include=()
case $arch in
amd64) image=localhost/slowpath-base:bookworm foreign=() variant=() ;;
arm64) image=localhost/slowpath-base:bookworm-arm64 foreign=(--arch=arm64 --foreign) variant=(--variant v8) ;;
runtimes)
  image=localhost/slowpath-runtimes:bookworm foreign=() variant=()
  include=(--include=python3-minimal,openjdk-17-jre-headless)
  arch=amd64
  ;;
*) echo "base-image.sh: amd64, arm64 or runtimes" >&2; exit 2 ;;
esac
# one build at a time (tests may call this concurrently)
exec 9>"/tmp/slowpath-base-image-$kind.lock"
flock 9
if podman image exists "$image"; then
  echo "base-image.sh: $image exists"
  exit 0
fi
mirror=${DEBIAN_MIRROR:-$(awk '/^deb / && /bookworm/ {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)}
if [[ -z $mirror ]]; then
  mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
fi
root=$(mktemp -d /tmp/slowpath-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base-image.sh: debootstrap ${foreign[*]} bookworm from $mirror"
debootstrap "${foreign[@]}" "${include[@]}" --variant=minbase bookworm "$root" "$mirror" >/dev/null
rm -rf "$root/debootstrap" "$root"/var/cache/apt/archives/*.deb  # the first stage's packages and scripts
tar -C "$root" -c . | podman import --arch "$arch" "${variant[@]}" - "$image" >/dev/null
echo "base-image.sh: built $image"
