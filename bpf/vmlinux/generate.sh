#!/bin/sh
# Regenerate bpf/vmlinux/<arch>/vmlinux.h, the kernel types the BPF programs
# are compiled against (CO-RE relocates every field access at load, so one
# recent kernel's types serve 5.10 to 6.12).
#
#   bpf/vmlinux/generate.sh x86     # from this machine's /sys/kernel/btf/vmlinux
#   bpf/vmlinux/generate.sh arm64   # from Debian bookworm's arm64 cloud kernel
#
# arm64: the kernel package is fetched with apt (a private state under
# $TMPDIR, the system's apt configuration untouched; apt checks the
# package's SHA256 against the signed index), and scripts/extract-btf.py cuts
# the BTF blob out of its Image for bpftool to dump.
set -eu
arch=${1:?usage: generate.sh x86|arm64}
out=$(dirname "$0")/$arch/vmlinux.h
mkdir -p "$(dirname "$out")"
case $arch in
x86)
	bpftool btf dump file /sys/kernel/btf/vmlinux format c >"$out"
	;;
arm64)
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
	echo "deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" \
		>"$work/sources.list"
	set -- -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
		-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" \
		-o APT::Architecture=arm64 -o APT::Architectures=arm64
	apt-get "$@" update -qq
	pkg=$(apt-cache "$@" depends linux-image-cloud-arm64 | sed -n 's/.*Depends: \(linux-image-.*-cloud-arm64\)$/\1/p' | head -1)
	(cd "$work" && apt-get "$@" download "$pkg-unsigned" 2>/dev/null)
	dpkg-deb -x "$work"/*.deb "$work/x"
	"$(dirname "$0")/../../scripts/extract-btf.py" "$work"/x/boot/vmlinuz-* "$work/vmlinux.btf"
	bpftool btf dump file "$work/vmlinux.btf" format c >"$out"
	echo "generate.sh: from $pkg-unsigned" >&2
	;;
*)
	echo "generate.sh: unknown arch $arch (x86 or arm64)" >&2
	exit 2
	;;
esac
echo "generate.sh: wrote $out" >&2
