#!/usr/bin/env bash
# Flake hunting: runs the multi-process suites again and again under CPU
# contention and prints each case's failure rate. Every run uses the
# suites' own time limits and nothing is retried: a failure counts.
#
#   repeat.sh [-n RUNS] [-l LOADERS] [SUITE...]
#     -n RUNS     repetitions of each suite (default 20)
#     -l LOADERS  busy loops in the background (default: one per core)
#     SUITE       coll   rcoll_coll_test: node-local, through the core, mixed
#                 p2p    rcoll_p2p_test
#                 hosts  both on network-namespace hosts (root only)
#                 (default: coll p2p)
#   RCOLL_TEST_QUICK    1 by default here (smaller sizes); 0 for full cases
#   RCOLL_COLL_CASES, RCOLL_NETNS_P2P_CASES, ...  narrow a suite, as in the
#                       runners under test/mp
#   RCOLL_BUILD_DIR     build tree (default build/)
#   RCOLL_REPEAT_RECORD file that keeps every run's result across invocations
#                       (default /var/cache/rcoll/repeat.record when writable)
#
# Runs are recorded under the git trees of the sources the suites exercise
# (prov, fabtests, test/mp): runs of different invocations, sessions or
# commits add up while those sources stay the same. A checkout with changes
# in them is not recorded.
# The collective cases run at up to 8 ranks on this machine's cores, so the
# ranks alone outnumber the cores; the loaders add a competing load.
# Closes with one line per case that failed at least once and
# "N passed, N failed" over all runs.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
runs=20
loaders=$(nproc)
while getopts "n:l:" opt; do
	case $opt in
	n) runs=$OPTARG ;;
	l) loaders=$OPTARG ;;
	*) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(coll p2p)
export RCOLL_TEST_QUICK=${RCOLL_TEST_QUICK:-1} RCOLL_BUILD_DIR=$build

runner_of() {
	case $1 in
	coll) echo "$top/test/mp/run-coll.sh" ;;
	p2p) echo "$top/test/mp/run-p2p.sh" ;;
	hosts) echo "$top/test/mp/netns-hosts.sh" ;;
	*) echo "repeat.sh: unknown suite '$1' (coll, p2p, hosts)" >&2; return 1 ;;
	esac
}
for suite in "${suites[@]}"; do runner_of "$suite" >/dev/null || exit 2; done

pids=()
stop_loaders() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; }
trap stop_loaders EXIT
for ((i = 0; i < loaders; i++)); do
	(while :; do :; done) &
	pids+=($!)
done

# The sources under test, as one key: empty when they differ from HEAD.
record=${RCOLL_REPEAT_RECORD:-/var/cache/rcoll/repeat.record}
key=
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1 &&
	git -C "$top" diff --quiet HEAD -- prov fabtests test/mp; then
	key=$(git -C "$top" rev-parse HEAD:prov HEAD:fabtests HEAD:test/mp | cut -c1-10 | paste -sd-)
	key=$key-quick$RCOLL_TEST_QUICK
fi
# A narrowed suite is not the suite.
for name in ${!RCOLL_*}; do
	case $name in *CASES) key= ;; esac
done
# What runs is what the sources say: the build is brought up to date first.
make -C "$build" -j"$(nproc)" check TESTS= >/dev/null || { echo "repeat.sh: the build failed" >&2; exit 1; }
mkdir -p "$(dirname "$record")" 2>/dev/null && touch "$record" 2>/dev/null || record=

results=$(mktemp)
started=$(date +%s)
echo "# $runs runs of: ${suites[*]}; $loaders busy loops on $(nproc) cores; RCOLL_TEST_QUICK=$RCOLL_TEST_QUICK"
for ((run = 1; run <= runs; run++)); do
	for suite in "${suites[@]}"; do
		log=$(mktemp)
		(cd "$build" && "$(runner_of "$suite")") >"$log" 2>&1
		# One line per case result: "<PASS|FAIL> <suite>/<case> <label>".
		awk -v suite="$suite" '
			/^(PASS|FAIL) / {
				label = ""
				if (match($0, / \((node-local|through the core|mixed: even ranks node-local)\)$/))
					label = substr($0, RSTART + 2, RLENGTH - 3)
				print $1 "\t" suite "/" $2 "\t" label
			}' "$log" >>"$results"
		summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
		if [ -n "$key" ] && [ -n "$record" ]; then
			# "<key> <suite> <passed> <failed> <commit> <date>"; a run without
			# a summary counts as one failure.
			read -r p _ f _ <<<"${summary:-0 passed, 1 failed}"
			echo "$key $suite $p $f $(git -C "$top" rev-parse --short HEAD) $(date -u +%FT%TZ)" >>"$record"
		fi
		echo "run $run/$runs $suite: ${summary:-no summary (see below)} [$(($(date +%s) - started)) s]"
		grep -E '^FAIL ' "$log" | sed 's/^/    /'
		[ -n "$summary" ] || tail -n 5 "$log" | sed 's/^/    | /'
		rm -f "$log"
	done
done
stop_loaders
pids=()

echo
echo "# failure rate per case (cases that never failed are not listed)"
awk -F'\t' '
	{ key = $2 ($3 == "" ? "" : " (" $3 ")"); total[key]++; if ($1 == "FAIL") failed[key]++ }
	END {
		for (k in total) if (failed[k]) printf "%-60s %3d of %3d failed\n", k, failed[k], total[k]
	}' "$results" | sort
awk -F'\t' '{ if ($1 == "PASS") p++; else f++ } END { printf "%d passed, %d failed\n", p, f }' "$results"
if [ -n "$key" ] && [ -n "$record" ]; then
	echo
	echo "# recorded in $record for these sources ($key), all invocations:"
	awk -v key="$key" '$1 == key { runs[$2]++; p[$2] += $3; f[$2] += $4; if ($4) bad[$2]++ }
		END { for (s in runs) printf "#   %s: %d runs, %d with failures; %d passed, %d failed\n", s, runs[s], bad[s], p[s], f[s] }' "$record"
fi
failed=$(awk -F'\t' '$1 == "FAIL"' "$results" | wc -l)
rm -f "$results"
[ "$failed" -eq 0 ]
