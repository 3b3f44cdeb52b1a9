#!/usr/bin/env bash
# Open MPI's own collectives against the same calls offloaded to rcoll by
# librcoll-mpi, in one run: rcoll_mpi_coll_bench (OSU-style: a barrier
# before each call, the slowest rank's average, the median of repetitions,
# every result checked on every rank) under mpirun without and with the
# library preloaded, one after the other for each rank count and each of
# Open MPI's paths (shared memory: ob1 + vader; tcp: ob1 + tcp on
# loopback; the offloaded calls then go through rcoll's core, as between
# hosts). With --rounds N every job runs N times, the rounds interleaved,
# and each figure is the median of its rounds (this machine's speed drifts
# within minutes). With --also VAR=VALUE the offloaded calls run a second
# time in every round with that setting (e.g. one of rcoll's size limits),
# in columns of their own: a setting is judged against the default in the
# same rounds. The library's RCOLL_MPI_* settings in the environment are
# passed on (RCOLL_MPI_FORCE=1 measures rcoll at sizes the default rules
# hand back; --also RCOLL_MPI_FORCE=1 beside the defaults). Ranks are
# bound to a hardware thread each where they do not outnumber them. Prints the mpirun lines and one table per collective.
#
#   scripts/bench-mpi.sh [--full] [--ranks 2,4] [--sizes LIST] [--rounds N] [--also VAR=VALUE]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
ranks=2,4
sizes=8,2048,65536,1048576,16777216
quick=--quick
rounds=1
also=
while [ $# -gt 0 ]; do
	case $1 in
	--full) quick= sizes=8,64,512,4096,32768,262144,2097152,16777216 ;;
	--ranks) ranks=$2; shift ;;
	--sizes) sizes=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--also) also=$2; shift ;;
	*) echo "usage: $0 [--full] [--ranks LIST] [--sizes LIST] [--rounds N] [--also VAR=VALUE]" >&2; exit 2 ;;
	esac
	shift
done
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh" >/dev/null
library=$build/mpi/librcoll-mpi.so
program=$build/fabtests/rcoll_mpi_coll_bench
export FI_PROVIDER_PATH=$build/.libs FI_TCP_IFACE=lo RCOLL_MPI_VERBOSE=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=
[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
hows="own offloaded"
[ -n "$also" ] && hows="$hows also"

echo "# Open MPI's own collectives, and offloaded to rcoll by librcoll-mpi (median of $rounds round(s), slowest rank, us)"
for round in $(seq "$rounds"); do
	for np in ${ranks//,/ }; do
		bind="--bind-to hwthread --map-by hwthread"
		[ "$np" -gt "$(OMP_NUM_THREADS= OMP_THREAD_LIMIT= nproc)" ] && bind="--bind-to none"
		for path in sm tcp; do
			btl=self,vader
			[ $path = tcp ] && btl="self,tcp --mca btl_tcp_if_include lo"
			for how in $hows; do
				preload=
				[ $how != own ] && preload="-x LD_PRELOAD=$library"
				[ $how = also ] && preload="$preload -x $also"
				# The library's own settings from the caller's environment
				# (RCOLL_MPI_FORCE=1: every size offloaded, the rules aside).
				[ $how != own ] && preload="$preload$(env | sed -n '/VERBOSE/!s/^\(RCOLL_MPI_[A-Z_]*\)=.*/ -x \1/p' | tr -d '\n')"
				# Between hosts, rcoll's collectives go through its core:
				# FI_RCOLL_COLL_LOCAL=0 stands for that beside Open MPI's tcp.
				[ $how != own ] && [ $path = tcp ] && preload="$preload -x FI_RCOLL_COLL_LOCAL=0"
				line="mpirun $root --oversubscribe $bind -np $np --mca oob_tcp_if_include lo --mca pml ob1 --mca btl $btl $preload -x FI_PROVIDER_PATH -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE $program $quick --colls barrier,broadcast,allreduce,reduce,allgather --sizes $sizes"
				[ "$round" -eq 1 ] && echo "#   $line"
				out=$work/$np.$path.$how.$round
				# shellcheck disable=SC2086
				timeout -k 5 900 $line >"$out" 2>&1 || true
				if [ $how != own ] && ! grep -q "collectives offloaded to rcoll" "$out"; then
					echo "#   (round $round, not offloaded: $(grep '^rcoll-mpi' "$out" | head -1))"
				fi
			done
		done
	done
done

for coll in barrier broadcast allreduce reduce allgather; do
	echo
	echo "## $coll"
	if [ -n "$also" ]; then
		printf '%-9s %5s | %9s %9s %7s %9s %7s | %9s %9s %7s %9s %7s\n' size ranks "ompi sm" offloaded ratio also ratio "ompi tcp" offloaded ratio also ratio
	else
		printf '%-9s %5s | %9s %9s %7s | %9s %9s %7s\n' size ranks "ompi sm" offloaded ratio "ompi tcp" offloaded ratio
	fi
	for np in ${ranks//,/ }; do
		awk -v coll=$coll -v np=$np -v rounds="$rounds" -v with_also="${also:+1}" '
			function size_text(b) {
				if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
				if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
				return b " B"
			}
			function cell(t) { return t == "" ? "-" : t }
			function median(job, k,    a, m, r, x, i, j) {
				m = 0
				for (r = 1; r <= rounds; r++) {
					x = t[job, r, k]
					if (x == "") continue
					if (x == "WRONG") return "WRONG"
					a[++m] = x + 0
				}
				if (m == 0) return ""
				for (i = 2; i <= m; i++)
					for (j = i; j > 1 && a[j - 1] > a[j]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
				return sprintf("%.2f", m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2)
			}
			BEGIN {
				jobs["sm.own"] = 1; jobs["sm.offloaded"] = 2; jobs["sm.also"] = 3
				jobs["tcp.own"] = 4; jobs["tcp.offloaded"] = 5; jobs["tcp.also"] = 6
			}
			function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0 && a != "WRONG" && b != "WRONG") ? sprintf("%.2f", b / a) : "-" }
			# Files are named ranks.path.how.round (an empty one, a job that
			# failed, leaves its cells empty).
			FNR == 1 { f = split(FILENAME, part, "."); round = part[f]; job = jobs[part[f - 2] "." part[f - 1]] }
			$1 == "point" && $2 == coll {
				key = $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
				t[job, round, key] = ($4 == "ok") ? $5 : "WRONG"
			}
			END {
				for (i = 1; i <= n; i++) {
					k = order[i]
					line = sprintf("%-9s %5d |", coll == "barrier" ? "-" : size_text(k), np)
					for (p = 0; p < 2; p++) {
						own = median(3 * p + 1, k); off = median(3 * p + 2, k)
						line = line sprintf(" %9s %9s %7s", cell(own), cell(off), ratio(own, off))
						if (with_also) {
							alt = median(3 * p + 3, k)
							line = line sprintf(" %9s %7s", cell(alt), ratio(own, alt))
						}
						line = line " |"
					}
					print line
				}
			}' $(for job in sm.own sm.offloaded ${also:+sm.also} tcp.own tcp.offloaded ${also:+tcp.also}; do
				for round in $(seq "$rounds"); do echo "$work/$np.$job.$round"; done
			done)
	done
done
echo
echo "ratio: offloaded / own; below 1 the offloaded call is faster. WRONG: a result differed."
[ -z "$also" ] || echo "also: offloaded with $also"
grep -h "collective calls offloaded" "$work"/*.offloaded.* | sed 's/^/# /' | sort | uniq -c | head -8 || true
