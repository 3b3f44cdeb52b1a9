#!/usr/bin/env bash
# librcoll-mpi's hand-back rules from measurements: reads the tables of
# scripts/bench-mpi.sh (files, one per run, or standard input) and prints,
# for each collective, the RCOLL_MPI_<COLL>_HAND_BACK setting that hands
# back every size where the offloaded call was slower than the MPI's own
# (the median over the runs of its "offloaded" ratio above --max-ratio,
# default 1.0: the in-job ratio where the table has one, against the MPI's
# own calls timed in the same job, else the ratio against the job without
# the library; "also" columns are not read: whole jobs of this machine
# drift 2-3x, so several runs make better rules than one). The
# shared-memory columns (sm) give the rules for one host, the tcp columns
# those between hosts; a table of the namespace hosts (bench-mpi.sh --hosts,
# one host and between hosts mixed in one call) is refused. A measured size s stands for payloads from s/2 to 4s (the
# tables step by 8), the smallest for everything below it and the largest
# for everything above; a measured rank count stands for the counts above
# the next smaller one (larger communicators than measured get no rule: a
# guess either way). The library's defaults (mpi/hand_back.hpp) come from
# it, measured with RCOLL_MPI_FORCE=1; where they also have rules for
# "shared" communicators (measured on namespace hosts, which it refuses),
# its "net" rules of those sizes went in as "apart".
#
#   RCOLL_MPI_FORCE=1 scripts/bench-mpi.sh --full --rounds 3 | tee bench.txt
#   scripts/hand-back-rules.sh [--max-ratio R] bench.txt [bench2.txt...]
set -euo pipefail
max_ratio=1.0
if [ "${1:-}" = --max-ratio ]; then
	max_ratio=$2
	shift 2
fi
program='
	function bytes(n, unit) { return n * (unit == "KiB" ? 1024 : unit == "MiB" ? 1048576 : 1) }
	function text(b) {
		if (b >= 1073741824 && b % 1073741824 == 0) return (b / 1073741824) "g"
		if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) "m"
		if (b >= 1024 && b % 1024 == 0) return (b / 1024) "k"
		return b
	}
	FNR == 1 { coll = "" }
	/^## / { coll = $2; next }
	# The header names each group of columns: "<mpi> <path> offloaded ratio".
	coll != "" && $1 == "size" {
		groups = split($0, part, "|") - 1
		for (p = 2; p <= groups; p++) {
			n = split(part[p], label, " ")
			paired[p] = n >= 5 && label[5] == "in-job"
			place[p] = label[2] == "sm" ? "host" : label[2] == "tcp" ? "net" : ""
			if (place[p] == "") {
				printf "hand-back-rules: %s: columns \"%s %s\" are neither one host (sm) nor between hosts (tcp)\n", FILENAME, label[1], label[2] > "/dev/stderr"
				failed = 1
				exit 2
			}
		}
		next
	}
	coll != "" && /\|/ {
		split($0, part, "|")
		n = split(part[1], head, " ")
		if (n < 2 || head[n] !~ /^[0-9]+$/) next
		np = head[n]
		size = coll == "barrier" ? 0 : bytes(head[1], head[2])
		if (!((coll, size) in known)) { known[coll, size] = 1; sizes[coll] = sizes[coll] " " size }
		if (!(np in nps)) { nps[np] = 1; np_list = np_list " " np }
		for (p = 2; p <= groups; p++) {
			split(part[p], cell, " ")
			measured = paired[p] ? cell[4] : cell[3]
			if (measured ~ /^[0-9.]+$/) {
				point = coll SUBSEP place[p] SUBSEP np SUBSEP size
				ratios[point, ++count[point]] = measured + 0
			}
		}
	}
	END {
		if (failed) exit 2
		# Each point: the median of its ratios over the runs given.
		for (point in count) {
			m = count[point]
			for (i = 1; i <= m; i++) a[i] = ratios[point, i]
			if (median_of(a, m) > max_ratio + 0) slow[point] = 1
		}
		m = split(np_list, ranks_sorted, " ")
		sort_numbers(ranks_sorted, m)
		split("barrier broadcast allreduce reduce allgather", colls, " ")
		split("BARRIER BCAST ALLREDUCE REDUCE ALLGATHER", names, " ")
		for (c = 1; c <= 5; c++) {
			coll = colls[c]
			k = split(sizes[coll], s, " ")
			sort_numbers(s, k)
			rules = ""
			for (w = 1; w <= 2; w++) {
				where = w == 1 ? "host" : "net"
				for (r = 1; r <= m; r++) {
					np = ranks_sorted[r]
					low_np = r == 1 ? 2 : ranks_sorted[r - 1] + 1
					ranks = low_np == np ? np : low_np "-" np
					# Runs of slow sizes, each one range.
					for (i = 1; i <= k; i++) {
						if (!((coll, where, np, s[i]) in slow)) continue
						first = i
						while (i < k && (coll, where, np, s[i + 1]) in slow) i++
						lo = first == 1 ? "" : text(int(s[first] / 2))
						hi = i == k ? "" : text(s[i] * 4)
						range = coll == "barrier" ? "*" : (lo == "" && hi == "" ? "*" : lo "-" hi)
						rules = rules (rules == "" ? "" : ";") where ":" ranks ":" range
					}
				}
			}
			printf "RCOLL_MPI_%s_HAND_BACK=\"%s\"\n", names[c], rules
		}
	}'
awk -v max_ratio="$max_ratio" -f "$(dirname "$0")/numbers.awk" -f <(printf '%s\n' "$program") "${@:--}"
