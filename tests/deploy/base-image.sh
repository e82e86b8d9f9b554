#!/usr/bin/env bash
# Builds the local base image the deployment tests use, once:
#   localhost/slowpath-base:bookworm   Debian bookworm minbase (debootstrap)
# No container registry is reachable from the test machines, so the base is
# made from Debian's own packages and imported into podman. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
image=localhost/slowpath-base:bookworm
# one build at a time (tests may call this concurrently)
exec 9>/tmp/slowpath-base-image.lock
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
echo "base-image.sh: debootstrap bookworm from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
tar -C "$root" -c . | podman import - "$image" >/dev/null
echo "base-image.sh: built $image"
