#!/usr/bin/env bash
# Installs the dependencies, builds rcoll and runs the whole test suite
# (`make check`: Criterion unit tests, multi-process runs on loopback,
# Open MPI over rcoll), then prints every runner's summary.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
"$top/scripts/install-deps.sh" || exit 1
"$top/scripts/build.sh" || exit 1
cd "$build"
make -j2 check
status=$?

echo
echo "== test runner summaries"
for log in $(find . -name '*.log' -path '*test*' | sort); do
	summary=$(grep -aE 'Synthesis: Tested|^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
	[ -n "$summary" ] && printf '%-40s %s\n' "${log#./}" "$summary"
done
pass=$(grep -E '^# PASS:' test-suite.log 2>/dev/null | awk '{print $3}')
fail=$(grep -E '^# (FAIL|ERROR|XPASS):' test-suite.log 2>/dev/null | awk '{s += $3} END {print s + 0}')
echo "make check: ${pass:-0} passed, ${fail:-0} failed"
exit $status
