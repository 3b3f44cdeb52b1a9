#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (ASan and UBSan on), each
# linked with the provider's own sources of what it parses, and runs each
# for a bounded time from its seed corpus in fuzz/corpus/<target>. Prints the
# executions per target; a crash, a failed invariant or a sanitizer report
# fails the run and leaves the input in the work directory.
#   fuzz.sh [-t SECONDS] [TARGET...]    (default 20 s each, every target)
#   $RCOLL_FUZZ_DIR   work directory (default build-fuzz/)
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=${RCOLL_FUZZ_DIR:-$top/build-fuzz}
seconds=20
while getopts "t:" opt; do
	case $opt in
	t) seconds=$OPTARG ;;
	*) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))

declare -A sources=(
	[wire]="prov/rcoll/proto/wire.cpp"
	[handshake]="prov/rcoll/proto/wire.cpp"
	[records]="prov/rcoll/proto/wire.cpp"
	[rendezvous]="prov/rcoll/proto/rendezvous.cpp prov/rcoll/proto/wire.cpp"
	[tuning]="prov/rcoll/engine/tuning.cpp prov/rcoll/engine/types.cpp prov/rcoll/engine/schedule.cpp prov/rcoll/engine/patterns.cpp prov/rcoll/engine/barrier.cpp prov/rcoll/engine/broadcast.cpp prov/rcoll/engine/reduction_tree.cpp prov/rcoll/engine/allreduce.cpp prov/rcoll/engine/reduction_ring.cpp prov/rcoll/engine/data_movement.cpp"
	[doorbell]="prov/rcoll/transport/local.cpp"
)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(wire handshake records rendezvous tuning doorbell)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not installed"; exit 1; }
mkdir -p "$work"
cxxflags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
	-I"$top" -I"$top/prov/rcoll")
failed=0
for t in "${targets[@]}"; do
	[ -n "${sources[$t]:-}" ] || { echo "fuzz.sh: no target $t"; exit 2; }
	bin=$work/fuzz_$t
	src=()
	for s in ${sources[$t]}; do src+=("$top/$s"); done
	if ! clang++ "${cxxflags[@]}" -o "$bin" "$top/fuzz/fuzz_$t.cpp" "${src[@]}" 2>"$bin.build.log"; then
		echo "fuzz $t: build failed"; tail -n 20 "$bin.build.log"; failed=$((failed + 1)); continue
	fi
	corpus=$work/corpus_$t
	mkdir -p "$corpus"
	(cd "$work" && "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "$corpus" "$top/fuzz/corpus/$t") >"$work/fuzz_$t.log" 2>&1
	status=$?
	runs=$(grep -aoE 'stat::number_of_executed_units: *[0-9]+' "$work/fuzz_$t.log" | grep -oE '[0-9]+$')
	cov=$(grep -aoE 'cov: [0-9]+' "$work/fuzz_$t.log" | tail -1)
	if [ $status -eq 0 ]; then
		printf 'fuzz %-11s %10s executions in %s s, %s, corpus %s inputs\n' "$t" "${runs:-?}" \
			"$seconds" "${cov:-cov: ?}" "$(ls "$corpus" | wc -l)"
	else
		echo "fuzz $t: FAILED (status $status); log $work/fuzz_$t.log"
		grep -aE 'ERROR|SUMMARY|Test unit written' "$work/fuzz_$t.log" | head -5
		failed=$((failed + 1))
	fi
done
echo "fuzzing: $((${#targets[@]} - failed)) passed, $failed failed"
[ $failed -eq 0 ]
