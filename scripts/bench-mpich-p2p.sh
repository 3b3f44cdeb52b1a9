#!/usr/bin/env bash
# MPICH's point-to-point over rcoll against the same MPICH over tcp;ofi_rxm:
# latency and bandwidth between two ranks (fabtests/mpi_p2p_bench.c, every
# message checked), MPICH's shared memory off so that every byte goes through
# the provider. The two providers run in turn, ROUNDS times (the order
# alternating), and the table gives the medians and their ratio. The ranks
# are bound to a hardware thread each where there are two (with --no-bind,
# the scheduler places them).
#
#   scripts/bench-mpich-p2p.sh [--rounds N] [--quick] [--no-bind]
# Needs the OFI MPICH that scripts/upstream.sh mpich builds.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
rounds=5
quick=
bind=hwthread
[ "$(OMP_NUM_THREADS='' OMP_THREAD_LIMIT='' nproc)" -ge 2 ] || bind=none
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift ;;
	--quick) quick=--quick ;;
	--no-bind) bind=none ;;
	*) echo "usage: $0 [--rounds N] [--quick] [--no-bind]" >&2; exit 2 ;;
	esac
	shift
done
prefix=$("$top/scripts/upstream.sh" --cached mpich) || {
	echo "bench-mpich-p2p: no OFI MPICH built here (scripts/upstream.sh mpich)" >&2
	exit 1
}
"$top/scripts/build.sh" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
program=$work/rcoll_mpi_p2p_bench
"$prefix/bin/mpicc" -O2 -Wall -Wextra -o "$program" "$top/fabtests/mpi_p2p_bench.c"
export FI_PROVIDER_PATH=$build/.libs FI_TCP_IFACE=lo MPIR_CVAR_NOLOCAL=1

echo "# MPICH $("$prefix/bin/mpichversion" --version | awk '{print $NF}') (ch4:ofi), 2 ranks, $rounds rounds:"
echo "#   FI_PROVIDER=<rcoll | tcp;ofi_rxm> MPIR_CVAR_NOLOCAL=1 FI_TCP_IFACE=lo mpiexec -bind-to $bind -n 2 rcoll_mpi_p2p_bench $quick"
for ((round = 1; round <= rounds; round++)); do
	order=(rcoll "tcp;ofi_rxm")
	[ $((round % 2)) -eq 0 ] && order=("tcp;ofi_rxm" rcoll)
	for prov in "${order[@]}"; do
		out=$work/${prov//;/_}.$round
		if ! FI_PROVIDER=$prov timeout -k 5 300 "$prefix/bin/mpiexec" -bind-to $bind -n 2 "$program" $quick \
			>"$out" 2>&1 || grep -q '^FAIL' "$out"; then
			echo "bench-mpich-p2p: the run over $prov failed:" >&2
			tail -n 20 "$out" >&2
			exit 1
		fi
	done
done

# Medians per (kind, size) and provider, then one row per size.
for f in "$work"/*.[0-9]*; do
	prov=$(basename "$f")
	prov=${prov%.*}
	awk -v prov="$prov" '/^(latency|bandwidth) / { print $1, $2, prov, $3 }' "$f"
done | sort -k1,1 -k2,2n -k3,3 -k4,4g | awk '
	function median(    n) { n = split(values, v, " "); return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
	function flush() { if (key != "") { m[key] = median(); kinds[kind] = 1; sizes[kind, size] = 1 } values = "" }
	{ k = $1 SUBSEP $2 SUBSEP $3; if (k != key) { flush(); key = k; kind = $1; size = $2 } values = values " " $4 }
	END {
		flush()
		printf "%-10s %10s %12s %12s %8s\n", "", "bytes", "rcoll", "tcp;ofi_rxm", "ratio"
		for (kind in kinds) {
			unit = kind == "latency" ? "us" : "MB/s"
			for (s = 8; s <= 16777216; s *= 4) {
				if (!((kind, s) in sizes)) continue
				r = m[kind, s, "rcoll"]; x = m[kind, s, "tcp_ofi_rxm"]
				printf "%-10s %10d %9.2f %-4s %9.2f %-4s %7.2fx\n", kind, s, r, unit, x, unit, x ? r / x : 0
			}
		}
	}'
echo "# ratio: rcoll / tcp;ofi_rxm (latency: lower is better; bandwidth: higher is better)"
