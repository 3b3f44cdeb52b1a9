#!/usr/bin/env bash
# Applies rcoll's drop-in (scripts/libfabric-dropin.sh) to libfabric 1.17's
# source (../shared/vendor, or $RCOLL_VENDOR_DIR) in a temporary directory,
# builds and installs that libfabric (shared only; tcp and rcoll its only
# providers) once per mode given (default: dl, then yes), and checks, with
# LD_LIBRARY_PATH pointing at the install and no FI_PROVIDER_PATH, that
#   - its fi_info -p rcoll lists rcoll;
#   - the build tree's collective client (fabtests/rcoll_coll_test, linked
#     against the system's libfabric.so.1) passes a few cases on it, node
#     local and through its tcp, having loaded that libfabric and that rcoll
#     (ld.so's record of what it initialised: librcoll-fi.so from the
#     install's provider directory for dl, none for yes);
# and that the script refuses a directory that is not a libfabric tree and
# adds nothing when applied twice.
#   libfabric-dropin.sh [dl|yes]...
# Run by `make check-dropin` (RCOLL_BUILD_DIR: the build tree, default the
# current directory). Rebuilds every time, nothing is cached (a few minutes
# a mode on 2 cores); RCOLL_DROPIN_KEEP=1 keeps the temporary directory.
# Prints "N passed, N failed"; exits 77 when the vendor tarball is missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${RCOLL_BUILD_DIR:-$PWD}" && pwd)
vendor=${RCOLL_VENDOR_DIR:-$top/../shared/vendor}
tarball=$vendor/libfabric-1.17.0.tar.gz
client=$build/fabtests/rcoll_coll_test
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(dl yes)
cases=(sweep-3 barrier-semantics algorithm-allreduce-ring-5)

if [ ! -r "$tarball" ]; then
	echo "SKIP: $tarball not found (set RCOLL_VENDOR_DIR)"
	exit 77
fi
if [ ! -x "$client" ]; then
	echo "libfabric-dropin.sh: $client not built (make fabtests/rcoll_coll_test)" >&2
	exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rcoll-dropin.XXXXXX")
if [ "${RCOLL_DROPIN_KEEP:-0}" = 1 ]; then
	trap 'echo "# kept $work"' EXIT
else
	trap 'rm -rf "$work"' EXIT
fi
started=$(date +%s)
passed=0 failed=0
pass() {
	passed=$((passed + 1))
	echo "PASS $*"
}
fail() {
	failed=$((failed + 1))
	echo "FAIL $*"
}
summary() {
	echo "# $(($(date +%s) - started)) s"
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
# tail_log LOG: the end of a failed step's log.
tail_log() {
	tail -n 25 "$1" | sed -e 's/^/    | /'
}

# The drop-in, applied to a fresh tree: it refuses what is not libfabric,
# and a second run adds nothing.
tar -xzf "$tarball" -C "$work"
src=$(echo "$work"/libfabric-*)
status=0
"$top/scripts/libfabric-dropin.sh" "$work" >"$work/refuse.log" 2>&1 || status=$?
if [ "$status" -eq 2 ] && grep -q 'not a libfabric source tree' "$work/refuse.log"; then
	pass "drop-in refuses a directory that is not a libfabric tree (exit 2)"
else
	fail "drop-in on a directory that is not a libfabric tree: exit $status"
	tail_log "$work/refuse.log"
fi
touched="configure.ac Makefile.am include/ofi_prov.h src/fabric.c"
if "$top/scripts/libfabric-dropin.sh" "$src" >"$work/apply.log" 2>&1; then
	first=$(cd "$src" && sha256sum $touched)
	if "$top/scripts/libfabric-dropin.sh" "$src" >>"$work/apply.log" 2>&1 &&
		[ "$(cd "$src" && sha256sum $touched)" = "$first" ] &&
		[ "$(grep -c '^FI_PROVIDER_SETUP(\[rcoll\])$' "$src/configure.ac")" = 1 ]; then
		pass "drop-in applied; applied again, it adds nothing"
	else
		fail "drop-in applied twice: failed, or changed $touched again"
		tail_log "$work/apply.log"
	fi
else
	fail "drop-in: scripts/libfabric-dropin.sh failed"
	tail_log "$work/apply.log"
	summary
	exit 1
fi
if ! (cd "$src" && ./autogen.sh) >"$work/autogen.log" 2>&1; then
	fail "libfabric's autogen.sh"
	tail_log "$work/autogen.log"
	summary
	exit 1
fi

# check_mode MODE: builds, installs and runs libfabric with --enable-rcoll=MODE.
check_mode() {
	local mode=$1 prefix=$work/install-$mode obj=$work/build-$mode start output
	local -a run
	start=$(date +%s)
	mkdir -p "$obj"
	# The build below is libfabric's: none of this make's flags or jobserver.
	if ! (cd "$obj" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL sh -c '
		"$1"/configure --prefix="$2" --disable-static --enable-only --enable-tcp --enable-rcoll="$3" &&
		make -j"$(nproc)" && make install' sh "$src" "$prefix" "$mode") \
		>"$obj.log" 2>&1; then
		fail "[$mode] configure, build and install libfabric (log: $obj.log)"
		tail_log "$obj.log"
		return
	fi
	pass "[$mode] libfabric with --enable-rcoll=$mode built and installed in $(($(date +%s) - start)) s"

	run=(env -u FI_PROVIDER_PATH LD_LIBRARY_PATH="$prefix/lib" FI_TCP_IFACE=lo)
	# ld.so names every library it initialises, with its path, in
	# $debug.<pid> (LD_DEBUG=libs).
	local debug=$work/ld-$mode
	output=$("${run[@]}" LD_DEBUG=libs LD_DEBUG_OUTPUT="$debug-info" \
		"$prefix/bin/fi_info" -p rcoll 2>&1) || true
	if grep -q '^provider: rcoll$' <<<"$output"; then
		pass "[$mode] $prefix/bin/fi_info -p rcoll lists rcoll"
	else
		fail "[$mode] fi_info -p rcoll does not list rcoll"
		sed -e 's/^/    | /' <<<"$output" | tail -n 10
	fi

	local name label
	for name in "${cases[@]}"; do
		for label in node-local "through the core"; do
			output=$("${run[@]}" FI_PROVIDER=rcoll LD_DEBUG=libs LD_DEBUG_OUTPUT="$debug" \
				$([ "$label" = node-local ] || echo FI_RCOLL_COLL_LOCAL=0) \
				timeout -k 5 120 "$client" --quick "$name" 2>&1) || true
			if grep -q "^PASS $name " <<<"$output"; then
				pass "[$mode] rcoll_coll_test $name ($label)"
			else
				fail "[$mode] rcoll_coll_test $name ($label)"
				sed -e 's/^/    | /' <<<"$output" | tail -n 20
			fi
		done
	done

	# What fi_info and the client's ranks loaded: this libfabric, and rcoll
	# from its provider directory (dl) or none (yes: rcoll is inside).
	local loaded foreign want
	loaded=$(cat "$debug"-info.* "$debug".* 2>/dev/null | grep -o 'calling init: .*' |
		sed 's/^calling init: //' | sort -u)
	foreign=$(grep -E '/(libfabric[.]so|librcoll-fi[.]so)' <<<"$loaded" | grep -v "^$prefix/" || true)
	want="$prefix/lib/libfabric.so.1"
	[ "$mode" = dl ] && want="$want $prefix/lib/libfabric/librcoll-fi.so"
	local missing="" f
	for f in $want; do
		grep -qxF "$f" <<<"$loaded" || missing="$missing $f"
	done
	if [ -n "$foreign" ]; then
		fail "[$mode] a libfabric or rcoll from elsewhere was loaded: $(echo $foreign)"
	elif [ -n "$missing" ]; then
		fail "[$mode] not loaded:$missing"
	elif [ "$mode" = yes ] && grep -q 'librcoll-fi' <<<"$loaded"; then
		fail "[$mode] a librcoll-fi.so was loaded, though rcoll is inside libfabric.so"
	else
		pass "[$mode] fi_info and the client ran on $(sed "s|$work/||g" <<<"$want")"
	fi
}

for mode in "${modes[@]}"; do
	case $mode in
	dl | yes) check_mode "$mode" ;;
	*) fail "unknown mode '$mode' (dl or yes)" ;;
	esac
done
summary
