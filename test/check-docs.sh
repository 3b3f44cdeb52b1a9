#!/usr/bin/env bash
# Every runtime parameter rcoll defines (as `fi_info -e` lists them) must be
# documented in man/fi_rcoll.7, and the page must name no parameter that
# does not exist; every RCOLL_MPI_ variable librcoll-mpi reads must be in
# man/librcoll-mpi.7.
set -uo pipefail
srcdir=${srcdir:-$(dirname "$0")/..}
builddir=${RCOLL_BUILD_DIR:-$PWD}
man="$srcdir/man/fi_rcoll.7"
export FI_PROVIDER_PATH="$builddir/.libs"

defined=$(fi_info -e 2>/dev/null | grep -ao '^# FI_RCOLL_[A-Z_]*' | sed 's/^# //' | sort -u)
documented=$(grep -o '^\.B FI_RCOLL_[A-Z_]*' "$man" | sed 's/^\.B //' | sort -u)
pass=0 fail=0
if [ -z "$defined" ]; then
	echo "FAIL: fi_info -e lists no FI_RCOLL_ parameter (is $FI_PROVIDER_PATH/librcoll-fi.so built?)"
	fail=1
fi
for p in $defined; do
	if grep -qx "$p" <<<"$documented"; then pass=$((pass + 1)); else
		echo "FAIL: $p is not documented in man/fi_rcoll.7"; fail=$((fail + 1)); fi
done
for p in $documented; do
	grep -qx "$p" <<<"$defined" || { echo "FAIL: man/fi_rcoll.7 documents $p, which rcoll does not define"; fail=$((fail + 1)); }
done
mpi_man="$srcdir/man/librcoll-mpi.7"
for v in $(grep -oh '"RCOLL_MPI_[A-Z_]*"' "$srcdir"/mpi/*.cpp "$srcdir"/mpi/*.hpp | tr -d '"' | sort -u); do
	if grep -q "$v" "$mpi_man"; then pass=$((pass + 1)); else
		echo "FAIL: $v is not documented in man/librcoll-mpi.7"; fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
