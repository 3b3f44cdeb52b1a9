#!/usr/bin/env bash
# Builds rcoll with AddressSanitizer and UBSan in its own tree and runs the
# unit tests and the multi-process suites that exercise rcoll's own code
# (the glue over a scripted core, point-to-point, hostile peers, collectives) under them; then builds it
# with ThreadSanitizer in another and runs the threaded paths (application
# threads sharing an endpoint, rcoll's progress thread) under it. Any
# sanitizer report fails the run: ASan and TSan stop at their first error,
# UBSan is made to (halt_on_error), LeakSanitizer reports at exit.
# Suppressions cover only libraries rcoll does not own (test/lsan.supp).
#   $RCOLL_SANITIZE_DIR   ASan build tree (default build-asan/); TSan's is
#                         the same name with -tsan instead of -asan
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_SANITIZE_DIR:-$top/build-asan}
RCOLL_BUILD_DIR=$build "$top/scripts/build.sh" --enable-sanitizers >"$build.log" 2>&1 ||
	{ tail -n 30 "$build.log"; echo "sanitizer build failed (log: $build.log)"; exit 1; }
cd "$build" || exit 1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$top/test/lsan.supp
export RCOLL_TEST_QUICK=1
tests="test/unit/proto_wire test/unit/proto_fifo test/unit/proto_match test/unit/proto_pool
	test/unit/proto_rendezvous test/unit/transport_local test/unit/engine_patterns
	test/unit/engine_kernels test/unit/engine_schedule test/unit/engine_selection
	test/unit/engine_sim test/unit/secret test/unit/domain_lock test/unit/local_collectives test/glue/glue_test test/mp/run-p2p.sh test/mp/run-hostile.sh test/mp/run-coll.sh"
make -j2 check TESTS="$(echo $tests)" >"$build/sanitize-check.log" 2>&1
status=$?
"$top/scripts/test-times.sh" "sanitizers took" 6
reports=$(grep -laE 'ERROR: (Address|Leak)Sanitizer|runtime error:' test/unit/*.log test/glue/*.log test/mp/*.log 2>/dev/null)
for log in $tests; do
	summary=$(grep -aE 'Synthesis: Tested|^[0-9]+ passed, [0-9]+ failed' "$log.log" 2>/dev/null | tail -1)
	printf 'sanitizers %-34s %s\n' "$log" "${summary:-no result}"
done
if [ -n "$reports" ]; then
	echo "sanitizer reports in: $reports"
	status=1
fi
# What failed, for the end of CI's output (scripts/check.sh prints it).
why=${RCOLL_WHY:-/dev/null}
"$top/scripts/failed-tails.sh" asan >>"$why"
for log in $reports; do
	grep -aE -A 20 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log" | head -n 30 |
		sed "s|^|asan $log: |" >>"$why"
done
echo "sanitizers: $(grep -E '^# PASS:' test-suite.log | awk '{print $3}') passed," \
	"$(grep -E '^# (FAIL|ERROR):' test-suite.log | awk '{s += $3} END {print s + 0}') failed," \
	"$(echo "$reports" | grep -c . ) logs with reports"

# ThreadSanitizer: the threaded paths.
tsan=${build%-asan}-tsan
[ "$tsan" != "$build" ] || tsan=$build-tsan
RCOLL_BUILD_DIR=$tsan "$top/scripts/build.sh" --enable-tsan >"$tsan.log" 2>&1 &&
	make -C "$tsan" -j2 fabtests/rcoll_p2p_test fabtests/rcoll_coll_test >>"$tsan.log" 2>&1 ||
	{ tail -n 30 "$tsan.log"; echo "ThreadSanitizer build failed (log: $tsan.log)"; exit 1; }
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
export FI_PROVIDER_PATH=$tsan/.libs FI_TCP_IFACE=lo
tsan_run() { # PROGRESS_THREAD CLIENT CASE...
	local pt=$1 client=$2
	shift 2
	FI_RCOLL_PROGRESS_THREAD=$pt timeout -k 5 600 "$tsan/fabtests/$client" --quick "$@" 2>&1 |
		tee -a "$tsan/tsan-runs.log" | grep -E '^(PASS|FAIL|N/A) ' |
		sed "s/^/tsan (progress thread $pt) /"
}
: >"$tsan/tsan-runs.log"
tsan_run 0 rcoll_p2p_test threads eq-read-while-closing pingpong-thread-domain
# (Not peer-killed: it needs transfers still in flight when the peer dies,
# and a progress thread on the dying side may finish them first.)
tsan_run 1 rcoll_p2p_test threads pingpong-tagged pingpong-thread-domain stream-msg unexpected-flood rma-read rma-write \
	wildcard-source peer-closed eq-read-while-closing
tsan_run 1 rcoll_coll_test sweep-4 two-groups-in-flight rank-killed join-eq-only finishing-threads
tsan_run 0 rcoll_coll_test finishing-threads finishing-mismatch
tsan_pass=$(grep -cE '^PASS ' "$tsan/tsan-runs.log")
tsan_fail=$(grep -cE '^FAIL ' "$tsan/tsan-runs.log")
tsan_reports=$(grep -cE 'WARNING: ThreadSanitizer' "$tsan/tsan-runs.log")
echo "ThreadSanitizer: $tsan_pass passed, $tsan_fail failed, $tsan_reports reports"
if [ "$tsan_fail" -ne 0 ] || [ "$tsan_reports" -ne 0 ]; then
	status=1
	grep -aE -A 30 '^FAIL |WARNING: ThreadSanitizer' "$tsan/tsan-runs.log" | head -n 40 |
		sed 's/^/tsan: /' >>"$why"
fi
exit $status
