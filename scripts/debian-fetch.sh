#!/bin/sh
# Fetches Debian packages of any release and architecture and unpacks them
# into a directory, leaving the system's apt configuration and dpkg database
# as they are (a private apt state; apt checks each package's SHA256 against
# the release's signed index).
#
#   scripts/debian-fetch.sh SUITE ARCH DEST PACKAGE...
#
# e.g. `debian-fetch.sh bookworm arm64 target/aarch64-libs libelf-dev zlib1g-dev`
# unpacks those packages' files under target/aarch64-libs/usr/...
# The apt state lives in $SLOWPATH_APT_STATE (default
# /var/cache/slowpath-apt)/SUITE-ARCH and its lists are refreshed when older
# than a day. Exit status: apt's, or 2 for bad usage.
set -eu
if [ $# -lt 4 ]; then
	echo "usage: debian-fetch.sh SUITE ARCH DEST PACKAGE..." >&2
	exit 2
fi
suite=$1 arch=$2 dest=$3
shift 3
state=${SLOWPATH_APT_STATE:-/var/cache/slowpath-apt}/$suite-$arch
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$state/debs" "$dest"
echo "deb [arch=$arch signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
	>"$state/sources.list"
opts="-o Dir::Etc::SourceList=$state/sources.list -o Dir::Etc::SourceParts=/dev/null
	-o Dir::State::Lists=$state/lists -o Dir::Cache=$state/cache
	-o APT::Architecture=$arch -o APT::Architectures=$arch -o APT::Sandbox::User=root"
# A stamp of our own: apt dates the list files by the archive's Last-Modified.
if [ -z "$(find "$state/updated" -mmin -1440 2>/dev/null)" ]; then
	# shellcheck disable=SC2086 # $opts is a list of words
	apt-get $opts update -qq
	touch "$state/updated"
fi
for pkg in "$@"; do
	# shellcheck disable=SC2086
	(cd "$state/debs" && apt-get $opts download "$pkg" >/dev/null)
done
for pkg in "$@"; do
	deb=$(ls -t "$state/debs/${pkg}_"*"_$arch.deb" "$state/debs/${pkg}_"*"_all.deb" 2>/dev/null | head -1)
	dpkg-deb -x "$deb" "$dest"
done
# Absolute links (usr/lib/.../libz.so -> /lib/...) point into DEST instead
# (relative links, so DEST can be moved or copied into an image).
find "$dest" -type l | while read -r link; do
	target=$(readlink "$link")
	case $target in /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dest$target")" "$link" ;; esac
done
