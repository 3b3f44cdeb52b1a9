#!/usr/bin/env bash
# Installs the dependencies, builds rcoll and the upstream test programs
# (libfabric's fabtests, an OFI MPICH: built once, cached outside the tree),
# runs the whole test suite (`make check`: Criterion unit tests, multi-process
# runs on loopback and in network namespaces, libfabric's fabtests, Open MPI
# and MPICH over rcoll), then the unit and multi-process suites again under
# ASan and UBSan (scripts/sanitize.sh) and valgrind (scripts/valgrind.sh),
# builds the Debian packages and RPMs
# and, as root, installs, uses and purges the Debian packages (make
# check-packages), builds libfabric 1.17 with rcoll's drop-in built in (make
# check-dropin DROPIN_MODES=yes), fuzzes every parser a peer reaches for a bounded time
# (scripts/fuzz.sh), and prints every runner's summary and the time of each
# phase. CI runs this on a fresh clone (2 cores, 90 minutes).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}

phases=()
# Phases add what failed and why here; it is printed last, where a CI
# report that keeps only the end of the output still shows it.
mkdir -p "$build" && build=$(cd "$build" && pwd)
export RCOLL_WHY=$build/why-failed.txt
: >"$RCOLL_WHY"
# CI gives the whole run 90 minutes on 2 cores, starting cold (no cached
# upstream build). Each phase has a share of it, in seconds: 1.3-1.5x its
# time on a cold CI machine, so that the shares add up to less than the
# whole. A phase over its share is named in the summary; it still runs to
# the end (a slower machine is no failure), but a phase that keeps growing
# past its share needs its work moved to a fuller make target.
total_budget=5400
started=$(date +%s)
# phase NAME BUDGET COMMAND...: runs a phase and records its time and outcome.
phase() {
	local name=$1 budget=$2 start status took over=
	shift 2
	echo "== $name (budget $budget s)"
	start=$(date +%s)
	"$@"
	status=$?
	took=$(($(date +%s) - start))
	[ "$took" -gt "$budget" ] && over="  OVER BUDGET"
	phases+=("$(printf '%-28s %5d s of %5d s  %s%s' "$name" "$took" "$budget" \
		"$([ $status -eq 0 ] && echo ok || echo "FAILED ($status)")" "$over")")
	return $status
}

print_phases() {
	local took=$(($(date +%s) - started))
	echo
	echo "== phase times (seconds taken of each phase's budget)"
	printf '%s\n' "${phases[@]}"
	printf '%-28s %5d s of %5d s%s\n' "all phases" "$took" "$total_budget" \
		"$([ "$took" -gt "$total_budget" ] && echo "  OVER BUDGET")"
}

phase "dependencies" 180 "$top/scripts/install-deps.sh" || { print_phases; exit 1; }
phase "build" 180 "$top/scripts/build.sh" || { print_phases; exit 1; }
# A failed upstream build only skips the runners that need it.
phase "upstream fabtests (cached)" 240 "$top/scripts/upstream.sh" fabtests
phase "upstream MPICH (cached)" 1440 "$top/scripts/upstream.sh" mpich
cd "$build" || exit 1
phase "make check" 1000 make -j2 check
status=$?
"$top/scripts/failed-tails.sh" "make check" >>"$RCOLL_WHY"
"$top/scripts/test-times.sh" "make check took"
# Each glue test shown to fail against a deliberate bug.
phase "glue mutants" 200 "$top/test/glue/mutants.sh" || status=1
# The same code under ASan and UBSan, in its own tree.
phase "sanitizers (ASan+UBSan, TSan)" 1000 "$top/scripts/sanitize.sh" || status=1
# Unit tests and point-to-point and collective cases under valgrind's memcheck.
phase "valgrind (memcheck)" 330 "$top/scripts/valgrind.sh" || status=1
# rcoll's drop-in built inside libfabric 1.17's own tree, as a built-in
# provider (make check-dropin also builds it as a loadable one).
phase "libfabric drop-in (yes)" 150 make check-dropin DROPIN_MODES=yes || status=1
# The network-namespace suite with packet loss and a rate limit between hosts.
phase "network faults (1%, 5% loss)" 150 make -j2 check-faults || status=1
# The Debian packages and RPMs, built from the tarball; as root, installed,
# used and purged (test/packages.sh).
phase "packages (deb, rpm)" 270 make check-packages || status=1
# Every parser a peer reaches, under libFuzzer, from the seed corpus.
phase "fuzzing (6 targets x 20 s)" 200 "$top/scripts/fuzz.sh" -t 20 || status=1

echo
echo "== test runner summaries"
for log in $(find . -name '*.log' -path '*test*' | sort); do
	summary=$(grep -aE 'Synthesis: Tested|^[0-9]+ passed, [0-9]+ failed|^SKIP ' "$log" | tail -1)
	[ -n "$summary" ] && printf '%-40s %s\n' "${log#./}" "$summary"
done
pass=$(grep -E '^# PASS:' test-suite.log 2>/dev/null | awk '{print $3}')
skip=$(grep -E '^# SKIP:' test-suite.log 2>/dev/null | awk '{print $3}')
fail=$(grep -E '^# (FAIL|ERROR|XPASS):' test-suite.log 2>/dev/null | awk '{s += $3} END {print s + 0}')
echo "make check: ${pass:-0} passed, ${fail:-0} failed${skip:+ ($skip skipped)}"
print_phases
if [ -s "$RCOLL_WHY" ]; then
	echo
	echo "== what failed (first lines of each)"
	head -n 80 "$RCOLL_WHY"
fi
exit $status
