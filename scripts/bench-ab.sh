#!/usr/bin/env bash
# rcoll against rcoll: rcoll_coll_bench (rcoll alone: its node-local path and
# its core path) run once per variant in every round, the variants taking
# turns in an order that rotates from round to round, and each figure the
# median of its rounds (this machine's speed drifts within minutes, so only
# interleaved rounds compare; use an even number of rounds for two variants,
# so that each runs first as often as second). A variant is
# NAME:VAR=VALUE[,VAR=VALUE...], environment set for that run: a setting
# (FI_RCOLL_COLL_ALPHA_US=10), or another build (FI_PROVIDER_PATH=DIR, e.g. a
# copy of an older build's .libs). Arguments after -- go to rcoll_coll_bench.
#
#   scripts/bench-ab.sh [--rounds N] NAME:ENV... NAME:ENV... [-- BENCH ARGS]
#   scripts/bench-ab.sh --rounds 5 old:FI_PROVIDER_PATH=/tmp/old-libs new: \
#       -- --quick --ranks 2,4 --colls broadcast,allreduce --sizes 8,32k
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
bench=$build/fabtests/rcoll_coll_bench
rounds=5
variants=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	case $1 in
	--rounds) rounds=$2; shift ;;
	*:*) variants+=("$1") ;;
	*) echo "usage: $0 [--rounds N] NAME:VAR=VALUE[,...] NAME:... [-- BENCH ARGS]" >&2; exit 2 ;;
	esac
	shift
done
[ "${1:-}" = -- ] && shift
if [ ${#variants[@]} -lt 2 ]; then
	echo "$0: name at least two variants (NAME: with nothing after the colon is the default)" >&2
	exit 2
fi
[ -x "$bench" ] || { echo "$0: $bench not built (make -C $build check TESTS=)" >&2; exit 2; }
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$build/.libs} FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

names=()
for v in "${variants[@]}"; do
	names+=("${v%%:*}")
	settings_text=${v#*:}
	echo "# ${v%%:*}: ${settings_text:-(defaults)} $bench --rcoll-only $*"
done
count=${#variants[@]}
for round in $(seq "$rounds"); do
	# The order rotates from round to round: the variant run second has
	# been seen to gain several percent, and none may always get that place.
	for k in $(seq 0 $((count - 1))); do
		v=${variants[$(((round - 1 + k) % count))]}
		name=${v%%:*}
		settings=()
		IFS=, read -r -a settings <<<"${v#*:}"
		# Only the table rows: "size ranks | rcoll ... | core path ... |".
		env ${settings[@]+"${settings[@]}"} "$bench" --rcoll-only "$@" 2>&1 |
			grep -E '^(-|[0-9]+ [BKM]).*\|' >"$work/$name.$round" || true
	done
done

echo "# median of $rounds interleaved round(s), slowest rank, us; rows in the benchmark's order (its tables one after another)"
awk -v rounds="$rounds" -v names="${names[*]}" '
	function median(n, row, col,    a, m, r, x, i, j) {
		m = 0
		for (r = 1; r <= rounds; r++) {
			x = v[n, r, row, col]
			if (x == "" || x !~ /^[0-9.]+$/) continue
			a[++m] = x + 0
		}
		if (m == 0) return "-"
		for (i = 2; i <= m; i++)
			for (j = i; j > 1 && a[j - 1] > a[j]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
		return sprintf("%.2f", m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2)
	}
	BEGIN { count = split(names, name, " ") }
	{
		split(FILENAME, parts, "/"); file = parts[length(parts)]
		n = substr(file, 1, match(file, /\.[0-9]+$/) - 1); r = substr(file, RSTART + 1)
		if (FNR == 1) row = 0
		row++
		split($0, cell, "|")
		label[row] = cell[1]
		split(cell[2], local_, " "); split(cell[3], core, " ")
		v[n, r, row, 1] = local_[1]; v[n, r, row, 2] = core[1]
		if (row > rows) rows = row
	}
	END {
		printf "%-16s", "size ranks"
		for (c = 1; c <= 2; c++)
			for (i = 1; i <= count; i++)
				printf " %12s", substr(name[i] (c == 1 ? " local" : " core"), 1, 12)
		printf "\n"
		for (row = 1; row <= rows; row++) {
			l = label[row]; gsub(/ +$/, "", l)
			printf "%-16s", l
			for (c = 1; c <= 2; c++)
				for (i = 1; i <= count; i++)
					printf " %12s", median(name[i], row, c)
			printf "\n"
		}
		print "local: rcoll with its members on this host taking the node-local path; core: FI_RCOLL_COLL_LOCAL=0, every write through the core provider"
	}' "$work"/*.*
