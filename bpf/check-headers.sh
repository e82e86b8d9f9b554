#!/bin/sh
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Compiles every header of bpf/core, bpf/signals and bpf/compose alone: a
# translation unit of vmlinux.h, libbpf's bpf_helpers.h, bpf_tracing.h and
# bpf_core_read.h, then the header, with the flags agent/build.rs gives
# clang (and libbpf-cargo adds). A header that compiles only after what
# slowpath.bpf.c included before it fails here, named on stderr.
#
# Usage: bpf/check-headers.sh [--arch x86|arm64] [--only] [HEADER...]
#   --arch   the target arch (default: this machine's)
#   HEADER   more headers to check the same way (by path)
#   --only   check the HEADERs named, not the project's
#
# Exits 1 when a header fails, 2 when the check cannot run.
#
# libbpf's headers: $LIBBPF_INCLUDE (a directory holding bpf/bpf_helpers.h)
# if set, else the ones of the libbpf-sys crate that Cargo.lock names (the
# build's own), else the system's (/usr/include).
set -eu

BPF_DIR=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$BPF_DIR")

case $(uname -m) in
aarch64 | arm64) arch=arm64 ;;
*) arch=x86 ;;
esac
if [ "${1:-}" = --arch ]; then
	[ $# -ge 2 ] || { echo "check-headers: --arch needs x86 or arm64" >&2; exit 2; }
	arch=$2
	shift 2
fi
only=false
if [ "${1:-}" = --only ]; then
	only=true
	shift
fi
case $arch in
x86 | arm64) ;;
*) echo "check-headers: unknown arch $arch (x86 or arm64)" >&2; exit 2 ;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -n "${LIBBPF_INCLUDE:-}" ]; then
	libbpf_inc=$LIBBPF_INCLUDE
else
	version=$(awk '/^name = "libbpf-sys"$/ { getline; gsub(/"/, "", $3); print $3; exit }' \
		"$REPO/Cargo.lock")
	src=
	for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"libbpf-sys-$version"/libbpf/src; do
		[ -f "$dir/bpf_helpers.h" ] && src=$dir
	done
	if [ -n "$src" ]; then
		# the build extracts the crate's headers under a bpf/ directory
		mkdir "$work/inc"
		ln -s "$src" "$work/inc/bpf"
		libbpf_inc=$work/inc
	elif [ -f /usr/include/bpf/bpf_helpers.h ]; then
		libbpf_inc=/usr/include
	else
		echo "check-headers: no libbpf headers (fetch the crates: cargo fetch; or set LIBBPF_INCLUDE)" >&2
		exit 2
	fi
fi

# signals/all.h, which agent/build.rs writes into the build's output: an
# include of every signals/*.bpf.h, sorted by name
mkdir -p "$work/gen/signals"
{
	echo '#ifndef SP_SIGNALS_ALL_H'
	echo '#define SP_SIGNALS_ALL_H'
	for h in "$BPF_DIR"/signals/*.bpf.h; do
		echo "#include \"signals/$(basename "$h")\""
	done
	echo '#endif'
} >"$work/gen/signals/all.h"

failed=0
checked=0
check() {
	header=$1
	shift
	tu=$work/tu.c
	{
		echo '#include "vmlinux.h"'
		echo '#include <bpf/bpf_helpers.h>'
		echo '#include <bpf/bpf_tracing.h>'
		echo '#include <bpf/bpf_core_read.h>'
		echo "#include \"$header\""
	} >"$tu"
	if ! clang -I"$BPF_DIR" -I"$work/gen" -I"$BPF_DIR/vmlinux/$arch" -Wall -Werror -I "$libbpf_inc" \
		-fno-stack-protector "-D__TARGET_ARCH_$arch" "$@" -g -O2 -target bpf \
		-c "$tu" -o "$work/tu.o" 2>"$work/err"; then
		echo "check-headers: $header does not compile alone ($arch${*:+ $*}):" >&2
		sed 's/^/  /' "$work/err" >&2
		failed=$((failed + 1))
	fi
	checked=$((checked + 1))
}

if $only; then
	[ $# -ge 1 ] || { echo "check-headers: --only needs a HEADER" >&2; exit 2; }
else
	set -- "$BPF_DIR"/core/*.h "$BPF_DIR"/signals/*.h "$BPF_DIR"/compose/*.h "$@"
fi
for header in "$@"; do
	[ -f "$header" ] || { echo "check-headers: no header $header" >&2; exit 2; }
	case $header in
	/*) ;;
	*) header=$PWD/$header ;;
	esac
	# the product's build and the test build (cargo feature fault-injection)
	check "$header"
	check "$header" -DSP_FAULT_INJECTION
done

if [ "$failed" -ne 0 ]; then
	echo "check-headers: $failed of $checked compilations failed" >&2
	exit 1
fi
echo "check-headers: $checked compilations ($arch), every header compiles alone"
