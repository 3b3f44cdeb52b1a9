#!/usr/bin/env bash
# Builds rcoll with AddressSanitizer and UBSan in its own tree and runs the
# unit tests and the multi-process suites that exercise rcoll's own code
# (point-to-point, hostile peers, collectives) under them. Any sanitizer
# report fails the run: ASan aborts at its first error, UBSan is made to
# (halt_on_error), LeakSanitizer reports at exit. Suppressions cover only
# libraries rcoll does not own (test/lsan.supp).
#   $RCOLL_SANITIZE_DIR   build tree (default build-asan/)
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
	test/unit/engine_sim test/mp/run-p2p.sh test/mp/run-hostile.sh test/mp/run-coll.sh"
make -j2 check TESTS="$(echo $tests)" >"$build/sanitize-check.log" 2>&1
status=$?
reports=$(grep -laE 'ERROR: (Address|Leak)Sanitizer|runtime error:' test/unit/*.log test/mp/*.log 2>/dev/null)
for log in $tests; do
	summary=$(grep -aE 'Synthesis: Tested|^[0-9]+ passed, [0-9]+ failed' "$log.log" 2>/dev/null | tail -1)
	printf 'sanitizers %-34s %s\n' "$log" "${summary:-no result}"
done
if [ -n "$reports" ]; then
	echo "sanitizer reports in: $reports"
	status=1
fi
echo "sanitizers: $(grep -E '^# PASS:' test-suite.log | awk '{print $3}') passed," \
	"$(grep -E '^# (FAIL|ERROR):' test-suite.log | awk '{s += $3} END {print s + 0}') failed," \
	"$(echo "$reports" | grep -c . ) logs with reports"
exit $status
