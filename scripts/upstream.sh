#!/usr/bin/env bash
# Builds the upstream sources the tests use (see ../shared/vendor/README.md)
# once, into a cache outside the source tree, and prints the install prefix.
#   upstream.sh fabtests   libfabric 1.17.0's own fabtests, against the system libfabric
#   upstream.sh mpich      MPICH 4.0.2 with the ch4:ofi device, against the system libfabric
#   upstream.sh --cached fabtests|mpich   the prefix of a complete build, or exit 1:
#                          never builds (tests skip when nothing is cached)
# The cache is $RCOLL_CACHE_DIR (default /var/cache/rcoll as root, else
# ~/.cache/rcoll); a build is keyed by its tarball's checksum, so a later
# run on the same machine skips it. Build output goes to <prefix>.log.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cached_only=0
if [ "${1:-}" = --cached ]; then
	cached_only=1
	shift
fi
what=${1:?usage: upstream.sh [--cached] fabtests|mpich}
vendor=${RCOLL_VENDOR_DIR:-$top/../shared/vendor}
if [ "$(id -u)" -eq 0 ]; then
	cache=${RCOLL_CACHE_DIR:-/var/cache/rcoll}
else
	cache=${RCOLL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rcoll}
fi

case $what in
fabtests) tarball=$vendor/libfabric-1.17.0.tar.gz ;;
mpich) tarball=$vendor/mpich-4.0.2.tar.xz ;;
*) echo "upstream.sh: unknown component '$what'" >&2; exit 2 ;;
esac
if [ ! -r "$tarball" ]; then
	echo "upstream.sh: $tarball not found (set RCOLL_VENDOR_DIR)" >&2
	exit 3
fi
sum=$(sha256sum "$tarball" | cut -c1-16)
prefix=$cache/$what-$sum
if [ -f "$prefix/.complete" ]; then
	echo "$prefix"
	exit 0
fi
[ "$cached_only" = 0 ] || exit 1

mkdir -p "$cache"
# One builder at a time per component; the others wait and reuse its result.
exec 9>"$cache/$what.lock"
flock 9
if [ -f "$prefix/.complete" ]; then
	echo "$prefix"
	exit 0
fi

work=$(mktemp -d "$cache/$what-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$prefix.log
echo "upstream.sh: building $what into $prefix (log: $log)" >&2
start=$(date +%s)
{
	tar -xf "$tarball" -C "$work"
	case $what in
	fabtests)
		cd "$work"/libfabric-*/fabtests
		./autogen.sh
		./configure --prefix="$prefix" --with-libfabric=/usr
		;;
	mpich)
		cd "$work"/mpich-*
		./configure --prefix="$prefix" --with-device=ch4:ofi --with-libfabric=/usr \
			--with-datatype-engine=dataloop --without-yaksa --disable-fortran \
			--disable-doc --enable-g=none --enable-fast=O2
		;;
	esac
	make -j"$(nproc)"
	make install
} >"$log" 2>&1 || {
	echo "upstream.sh: building $what failed; the end of $log:" >&2
	tail -30 "$log" >&2
	exit 1
}
touch "$prefix/.complete"
echo "upstream.sh: built $what in $(($(date +%s) - start)) s" >&2
echo "$prefix"
