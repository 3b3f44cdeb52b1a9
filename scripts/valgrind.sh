#!/usr/bin/env bash
# Runs rcoll's own code under valgrind's memcheck: the unit tests, the glue
# over a scripted core, and point-to-point and collective cases over the
# tcp core (collectives with FI_RCOLL_COLL_LOCAL=0: memcheck cannot see the
# bytes another process copies in, fi_rcoll(7) NOTES). An item fails on its
# own failure or on any memcheck error in any of its processes. Leaks are
# not counted: forked ranks leave with _exit. transport_local is left to
# the other runs: it tests the kernel interfaces memcheck does not model
# (pidfd_open, one process writing another's memory).
#   valgrind.sh [--full]   --full adds the unit tests that take minutes
#                          under valgrind (engine_schedule, engine_sim)
#   RCOLL_BUILD_DIR        build tree (default build/)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
command -v valgrind >/dev/null || { echo "valgrind: not installed"; exit 1; }
cd "$build" || exit 1
units="proto_wire proto_fifo proto_match proto_pool proto_rendezvous
	engine_patterns engine_kernels engine_selection secret local_collectives mpi_hand_back"
[ "${1:-}" = --full ] && units="$units engine_schedule engine_sim"
p2p_cases="pingpong-msg pingpong-tagged-cqdata stream-tagged inject truncation cancel-recv
	multi-recv peek-claim rma-write rma-read rma-writedata"
coll_cases="types-2 sweep-2 sweep-3"
make -j2 $(for u in $units; do echo test/unit/$u; done) test/glue/glue_test \
	fabtests/rcoll_p2p_test fabtests/rcoll_coll_test >valgrind-build.log 2>&1 ||
	{ tail -n 20 valgrind-build.log; echo "valgrind: build failed"; exit 1; }
logs=$build/valgrind-logs
rm -rf "$logs" && mkdir -p "$logs"
export FI_PROVIDER_PATH=$build/.libs FI_TCP_IFACE=lo RCOLL_TEST_QUICK=1
# run NAME COMMAND...: one item, every process it forks or executes under
# memcheck; prints one PASS or FAIL line for it (and why).
run() {
	local name=$1 start=$SECONDS
	shift
	timeout -k 5 900 valgrind --trace-children=yes --error-exitcode=99 \
		--log-file="$logs/$name.%p" "$@" >"$logs/$name.out" 2>&1
	local rc=$? errors
	errors=$(grep -l 'ERROR SUMMARY: [1-9]' "$logs/$name".[0-9]* 2>/dev/null | wc -l)
	if [ $rc -eq 0 ] && [ "$errors" -eq 0 ]; then
		printf 'PASS %-28s %4d s\n' "$name" $((SECONDS - start))
	else
		printf 'FAIL %-28s %4d s  exit %d, %d processes with memcheck errors (%s)\n' \
			"$name" $((SECONDS - start)) $rc "$errors" "$logs/$name.*"
		local first
		first=$(grep -l 'ERROR SUMMARY: [1-9]' "$logs/$name".[0-9]* 2>/dev/null | head -n 1)
		[ -n "$first" ] && sed -n '/== Command: /,/== HEAP SUMMARY:/p' "$first" |
			sed '1,2d' | head -n 30
		tail -n 5 "$logs/$name.out"
	fi
}
# The single-process items run two at a time, one per core (memcheck keeps
# a process on one), and print in order once all are done; the point-to-
# point and collective cases, two processes each, run one at a time.
items=()
single() {
	[ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n
	items+=("$1")
	run "$@" >"$logs/$1.result" &
}
for u in $units; do
	single "unit-$u" "test/unit/$u"
done
single glue test/glue/glue_test
wait
for name in "${items[@]}"; do
	cat "$logs/$name.result"
done
for c in $p2p_cases; do
	run "p2p-$c" fabtests/rcoll_p2p_test --quick "$c" | tee "$logs/p2p-$c.result"
done
for c in $coll_cases; do
	FI_RCOLL_COLL_LOCAL=0 run "coll-$c" fabtests/rcoll_coll_test --quick "$c" |
		tee "$logs/coll-$c.result"
done
passed=$(cat "$logs"/*.result | grep -c '^PASS ')
failed=$(cat "$logs"/*.result | grep -c '^FAIL ')
echo "valgrind: $passed passed, $failed failed"
[ $failed -eq 0 ]
