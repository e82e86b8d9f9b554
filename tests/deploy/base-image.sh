#!/usr/bin/env bash
# Builds the local base images the deployment tests use, once:
#   base-image.sh          localhost/slowpath-base:bookworm        Debian bookworm minbase (debootstrap)
#   base-image.sh arm64    localhost/slowpath-base:bookworm-arm64  the same for arm64, unpacked only
#   base-image.sh runtimes localhost/slowpath-runtimes:bookworm    minbase with Debian's python3 and
#                                                                  OpenJDK 17 (the real node's workload pods,
#                                                                  tests/e2e/test_real_node.py; about 3 min)
#   base-image.sh systemd  localhost/slowpath-systemd:bookworm-H   the amd64 base with systemd as init
#                                                                  (tests/e2e/test_systemd.py; H hashes
#                                                                  its package list)
#   base-image.sh --check [KIND]   builds nothing: prints the image's name, or
#                                  exits 1 if it is missing
# No container registry is reachable from the test machines, so the base is
# made from Debian's own packages and imported into podman. The arm64 one is
# debootstrap's first stage (--foreign: the packages unpacked, their scripts
# not run, as that needs arm64 execution): enough for an image whose build
# runs nothing in it (deploy/Containerfile). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
kind=${1:-amd64}
arch=$kind
include=()
# Packages on top of the minbase for systemd: systemd as init, the .deb's
# dependency that minbase lacks (libelf1; libc6 and zlib1g are there), curl
# to scrape from inside.
systemd_packages="systemd systemd-sysv libelf1 curl man-db"
case $arch in
amd64) image=localhost/slowpath-base:bookworm foreign=() variant=() ;;
arm64) image=localhost/slowpath-base:bookworm-arm64 foreign=(--arch=arm64 --foreign) variant=(--variant v8) ;;
runtimes)
  image=localhost/slowpath-runtimes:bookworm foreign=() variant=()
  include=(--include=python3-minimal,openjdk-17-jre-headless)
  arch=amd64
  ;;
systemd) image=localhost/slowpath-systemd:bookworm-$(printf %s "$systemd_packages" | sha256sum | cut -c1-12) ;;
*) echo "base-image.sh: amd64, arm64, runtimes or systemd" >&2; exit 2 ;;
esac
if ((check)); then
  podman image exists "$image" && { echo "$image"; exit 0; }
  echo "base-image.sh: no image $image: run scripts/setup.sh --test" >&2
  exit 1
fi
# one build at a time
exec 9>"/tmp/slowpath-base-image-$kind.lock"
flock 9
if podman image exists "$image"; then
  echo "base-image.sh: $image exists"
  exit 0
fi

# systemd: the amd64 base, its packages installed with apt in a container
# (host network for this step only: apt fetches from Debian's mirror).
if [[ $kind == systemd ]]; then
  base=$("$0" amd64 >&2 && "$0" --check amd64)
  build=slowpath-systemd-build-$$
  trap 'podman rm -f "$build" >/dev/null 2>&1 || true' EXIT
  podman run --name "$build" --network=host "$base" sh -c "set -e; export DEBIAN_FRONTEND=noninteractive;
    apt-get update -qq; apt-get install -y -qq --no-install-recommends $systemd_packages >/dev/null;
    apt-get clean; rm -rf /var/lib/apt/lists/*"
  podman commit -q --change 'CMD ["/sbin/init"]' "$build" "$image" >/dev/null
  echo "base-image.sh: built $image"
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
