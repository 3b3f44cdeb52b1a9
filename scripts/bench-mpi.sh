#!/usr/bin/env bash
# An MPI's own collectives against the same calls offloaded to rcoll by
# librcoll-mpi, in one run: rcoll_mpi_coll_bench (OSU-style: a barrier
# before each call, the slowest rank's average, the median of repetitions,
# every result checked on every rank) under the MPI's launcher without and
# with the library preloaded, one after the other for each rank count and
# each of the MPI's paths:
#   sm    one host, the MPI's shared memory (Open MPI: ob1 + vader; MPICH:
#         its own, beside its netmod);
#   tcp   one host, the MPI's tcp on loopback (Open MPI: ob1 + tcp; MPICH:
#         MPIR_CVAR_NOLOCAL=1 over tcp;ofi_rxm); the offloaded calls then go
#         through rcoll's core (FI_RCOLL_COLL_LOCAL=0), as between hosts;
#   hosts (--hosts N) ranks spread round-robin over N network-namespace hosts
#         (scripts/mpi-netns-hosts.sh; root), the MPI's shared memory within
#         a host and tcp between, rcoll's node-local path and its core alike;
#         with more ranks than hardware threads, Open MPI and rcoll are told
#         to yield while idle (mpi_yield_when_idle, FI_RCOLL_YIELD_WHEN_IDLE),
#         as each decides by itself when it sees the ranks on one host (MPICH
#         has no such setting: it busy-polls in both jobs).
# MPICH (--mpi mpich) is the OFI build of scripts/upstream.sh mpich, its own
# traffic over tcp;ofi_rxm in both jobs (FI_PROVIDER=tcp,ofi_rxm,rcoll: it
# picks tcp;ofi_rxm, the library rcoll). With --rounds N every job runs N
# times, the rounds interleaved, and each figure is the median of its rounds
# (this machine's speed drifts within minutes). Jobs with the library also
# time the MPI's own calls (their PMPI_ names, past the library) beside the
# offloaded ones, repetitions interleaved: the "in-job" ratio, free of the
# drift between jobs that the "ratio" column (against the job without the
# library) carries, which in turn shows what merely loading the library
# costs. With --also VAR=VALUE the
# offloaded calls run a second time in every round with that setting (e.g.
# one of rcoll's size limits), in columns of their own: a setting is judged
# against the default in the same rounds. The library's RCOLL_MPI_* settings
# in the environment are passed on (RCOLL_MPI_FORCE=1 measures rcoll at sizes
# the default rules hand back; --also RCOLL_MPI_FORCE=1 beside the
# defaults). With --back-to-back each repetition's calls follow one another
# with no barrier between them (rcoll_mpi_coll_bench --back-to-back). Ranks
# are bound to a hardware thread each where they do not outnumber them on
# one host. Prints the launcher lines and one table per collective.
#
#   scripts/bench-mpi.sh [--mpi openmpi|mpich] [--hosts N] [--full] [--ranks 2,4]
#                        [--sizes LIST] [--rounds N] [--also VAR=VALUE]
#                        [--colls LIST] [--paths sm,tcp] [--back-to-back]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
mpi=openmpi
hosts=0
ranks=2,4
sizes=8,2048,65536,1048576,16777216
quick=--quick
rounds=1
also=
colls=barrier,broadcast,allreduce,reduce,allgather
paths="sm tcp"
back_to_back=
usage="usage: $0 [--mpi openmpi|mpich] [--hosts N] [--full] [--ranks LIST] [--sizes LIST] [--rounds N] [--also VAR=VALUE] [--colls LIST] [--paths LIST] [--back-to-back]"
while [ $# -gt 0 ]; do
	case $1 in
	--mpi) mpi=$2; shift ;;
	--hosts) hosts=$2; shift ;;
	--full) quick= sizes=8,64,512,4096,32768,262144,2097152,16777216 ;;
	--ranks) ranks=$2; shift ;;
	--sizes) sizes=$2; shift ;;
	--rounds) rounds=$2; shift ;;
	--also) also=$2; shift ;;
	--colls) colls=$2; shift ;;
	--paths) paths=${2//,/ }; shift ;;
	--back-to-back) back_to_back=--back-to-back ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
	shift
done
case $mpi in openmpi | mpich) ;; *) echo "$usage" >&2; exit 2 ;; esac
for path in $paths; do
	case $path in sm | tcp) ;; *) echo "bench-mpi: --paths takes sm and tcp" >&2; exit 2 ;; esac
done
if ! [[ $hosts =~ ^[0-9]+$ ]] || [ "$hosts" -eq 1 ]; then
	echo "bench-mpi: --hosts needs 2 or more" >&2
	exit 2
fi
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh" >/dev/null
work=$(mktemp -d)
. "$top/scripts/mpi-netns-hosts.sh"
job=
trap 'mpi_hosts_down; rm -rf "$work"' EXIT
# An interrupted run takes its job with it (timeout passes the signal on).
trap '[ -z "$job" ] || kill -TERM "$job" 2>/dev/null; wait; exit 130' INT TERM HUP
if [ $mpi = openmpi ]; then
	library=$build/mpi/librcoll-mpi.so
	program=$build/fabtests/rcoll_mpi_coll_bench
	label=ompi
	root=
	[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
else
	prefix=$("$top/scripts/upstream.sh" --cached mpich) ||
		{ echo "bench-mpi: no OFI MPICH built here (scripts/upstream.sh mpich)" >&2; exit 1; }
	make -s -C "$build" mpi-offload-family MPI_FAMILY=mpich MPICXX="$prefix/bin/mpicxx" >/dev/null
	library=$build/mpi/mpich/librcoll-mpi.so
	program=$work/rcoll_mpi_coll_bench
	"$prefix/bin/mpicxx" -DMPICH_SKIP_MPICXX=1 -std=c++20 -O2 -Wall -Wextra -I"$top/fabtests" -o "$program" \
		"$top/fabtests/mpi_coll_bench.cpp" "$top/fabtests/syscall_counter.cpp"
	label=mpich
fi
iface=lo
if [ "$hosts" -gt 0 ]; then
	mpi_hosts_up "$hosts" 10.78.0 "$work" || { echo "bench-mpi: cannot make $hosts network-namespace hosts" >&2; exit 1; }
	paths=hosts
	iface=eth0
fi
export FI_PROVIDER_PATH=$build/.libs FI_TCP_IFACE=$iface RCOLL_MPI_VERBOSE=1
hows="own offloaded"
[ -n "$also" ] && hows="$hows also"

# job_command NP PATH HOW: sets `command` to the launcher's command line.
job_command() {
	local np=$1 path=$2 how=$3 bind=hwthread crowded=0 settings=() var i share
	[ "$np" -gt "$(OMP_NUM_THREADS='' OMP_THREAD_LIMIT='' nproc)" ] && bind=none crowded=1
	if [ "$path" = hosts ]; then
		# Each namespace host runs on its share of the hardware threads
		# (mpi-netns-hosts.sh); --map-by node gives host i the ranks i,
		# i + hosts, ...: crowded where a host has more than its share.
		bind=none crowded=0
		for ((i = 0; i < hosts && i < np; i++)); do
			share=$(tr ',' '\n' <<<"${mpi_host_cpus[i]}" | wc -l)
			(((np - i + hosts - 1) / hosts > share)) && crowded=1
		done
	fi
	# The library's own settings from the caller's environment
	# (RCOLL_MPI_FORCE=1: every size offloaded, the rules aside).
	if [ "$how" != own ]; then
		settings=(LD_PRELOAD="$library")
		for var in $(env | sed -n '/VERBOSE/!s/^\(RCOLL_MPI_[A-Z_]*\)=.*/\1/p'); do
			settings+=("$var=${!var}")
		done
		[ "$how" = also ] && settings+=("$also")
		# rcoll's collectives through its core, as between hosts.
		[ "$path" = tcp ] && settings+=(FI_RCOLL_COLL_LOCAL=0)
		# More ranks on a host than its hardware threads, which the
		# namespace hosts hide from rcoll as from the MPI: waits yield.
		[ "$path" = hosts ] && [ $crowded = 1 ] && settings+=(FI_RCOLL_YIELD_WHEN_IDLE=1)
	fi
	command=()
	[ "$path" = hosts ] && command=("$mpi_on_first_host")
	if [ $mpi = openmpi ]; then
		command+=(mpirun $root --oversubscribe --bind-to $bind -np "$np" --mca pml ob1)
		case $path in
		sm) command+=(--map-by hwthread --mca oob_tcp_if_include lo --mca btl self,vader) ;;
		tcp) command+=(--map-by hwthread --mca oob_tcp_if_include lo --mca btl self,tcp --mca btl_tcp_if_include lo) ;;
		hosts) command+=(--hostfile "$mpi_hostfile" --map-by node --mca plm_rsh_agent "$mpi_agent"
			--mca oob_tcp_if_include eth0 --mca btl self,vader,tcp --mca btl_tcp_if_include eth0)
			# It yields while idle when it sees more ranks than hardware
			# threads on one host; the namespace hosts hide that (rcoll
			# likewise: FI_RCOLL_YIELD_WHEN_IDLE above).
			[ $crowded = 1 ] && command+=(--mca mpi_yield_when_idle 1) ;;
		esac
		for var in "${settings[@]}"; do command+=(-x "$var"); done
		command+=(-x FI_PROVIDER_PATH -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE)
	else
		# Hydra passes the whole environment on; the library's settings go
		# to the ranks alone.
		command+=(env FI_PROVIDER=tcp,ofi_rxm,rcoll)
		[ "$path" = tcp ] && command+=(MPIR_CVAR_NOLOCAL=1)
		command+=("$prefix/bin/mpiexec" -bind-to $bind -n "$np")
		for var in "${settings[@]}"; do command+=(-genv "${var%%=*}" "${var#*=}"); done
		[ "$path" = hosts ] && command+=(-hosts "$mpi_host_list" -launcher rsh -launcher-exec "$mpi_agent")
	fi
	command+=("$program" $quick $back_to_back --colls "$colls" --sizes "$sizes")
	# With the library, the MPI's own calls too, interleaved in the same job.
	[ "$how" = own ] || command+=(--own-too)
}

echo "# $mpi's own collectives, and offloaded to rcoll by librcoll-mpi (median of $rounds round(s), slowest rank, us)"
[ -n "$back_to_back" ] && echo "# calls back to back: no barrier between the calls of a repetition"
[ "$hosts" -gt 0 ] && echo "# ranks round-robin over $hosts network-namespace hosts: ${mpi_hosts[*]}"
for round in $(seq "$rounds"); do
	for np in ${ranks//,/ }; do
		for path in $paths; do
			for how in $hows; do
				job_command "$np" "$path" "$how"
				[ "$round" -eq 1 ] && echo "#   ${command[*]}"
				out=$work/$np.$path.$how.$round
				status=0
				timeout -k 5 900 "${command[@]}" >"$out" 2>&1 &
				job=$!
				wait "$job" || status=$?
				job=
				if [ $status -ne 0 ]; then
					echo "#   (round $round, $np ranks, $path, $how: the job failed, status $status; its points stay empty: $(tail -n 1 "$out"))"
					: >"$out"
				elif [ $how != own ] && ! grep -q "collectives offloaded to rcoll" "$out"; then
					echo "#   (round $round, not offloaded: $(grep '^rcoll-mpi' "$out" | head -1))"
				fi
			done
		done
	done
done

for coll in ${colls//,/ }; do
	echo
	echo "## $coll"
	header=$(printf '%-9s %5s |' size ranks)
	for path in $paths; do
		header+=$(printf ' %11s %9s %7s %7s' "$label $path" offloaded ratio in-job)
		[ -n "$also" ] && header+=$(printf ' %9s %7s %7s' also ratio in-job)
		header+=" |"
	done
	echo "$header"
	for np in ${ranks//,/ }; do
		program='
			function size_text(b) {
				if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
				if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"
				return b " B"
			}
			function cell(t) { return t == "" ? "-" : t }
			function median(job, k,    a, m, r, x) {
				m = 0
				for (r = 1; r <= rounds; r++) {
					x = t[job, r, k]
					if (x == "") continue
					if (x == "WRONG") return "WRONG"
					a[++m] = x + 0
				}
				return m ? sprintf("%.2f", median_of(a, m)) : ""
			}
			function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0 && a != "WRONG" && b != "WRONG") ? sprintf("%.2f", b / a) : "-" }
			# The median over rounds of each job'"'"'s own ratio: its calls over the
			# MPI'"'"'s own measured beside them in the same job.
			function in_job(job, k,    a, m, r, x, y) {
				m = 0
				for (r = 1; r <= rounds; r++) {
					x = t[job, r, k]; y = t[job "/own", r, k]
					if (x == "WRONG" || y == "WRONG") return "WRONG"
					if (x + 0 > 0 && y + 0 > 0) a[++m] = x / y
				}
				return m ? sprintf("%.2f", median_of(a, m)) : "-"
			}
			# Files are named ranks.path.how.round (an empty one, a job that
			# failed, leaves its cells empty).
			FNR == 1 { f = split(FILENAME, part, "."); round = part[f]; job = part[f - 2] "." part[f - 1] }
			($1 == "point" || $1 == "own") && $2 == coll {
				if ($1 == "own") { t[job "/own", round, $3] = ($4 == "ok") ? $5 : "WRONG"; next }
				key = $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
				t[job, round, key] = ($4 == "ok") ? $5 : "WRONG"
			}
			END {
				np_paths = split(paths, path, " ")
				for (i = 1; i <= n; i++) {
					k = order[i]
					line = sprintf("%-9s %5d |", coll == "barrier" ? "-" : size_text(k), np)
					for (p = 1; p <= np_paths; p++) {
						own = median(path[p] ".own", k); off = median(path[p] ".offloaded", k)
						line = line sprintf(" %11s %9s %7s %7s", cell(own), cell(off), ratio(own, off), in_job(path[p] ".offloaded", k))
						if (with_also) {
							alt = median(path[p] ".also", k)
							line = line sprintf(" %9s %7s %7s", cell(alt), ratio(own, alt), in_job(path[p] ".also", k))
						}
						line = line " |"
					}
					print line
				}
			}'
		awk -v coll=$coll -v np=$np -v rounds="$rounds" -v paths="$paths" -v with_also="${also:+1}" \
			-f "$top/scripts/numbers.awk" -f <(printf '%s\n' "$program") $(for path in $paths; do
				for how in $hows; do
					for round in $(seq "$rounds"); do echo "$work/$np.$path.$how.$round"; done
				done
			done)
	done
done
echo
echo "ratio: offloaded / own; below 1 the offloaded call is faster. WRONG: a result differed."
echo "in-job: offloaded / the MPI's own calls (PMPI_) timed beside them in the same job, repetitions"
echo "  interleaved (the median of the rounds' ratios): free of the drift between jobs"
[ -z "$also" ] || echo "also: offloaded with $also"
grep -h "collective calls offloaded" "$work"/*.offloaded.* | sed 's/^/# /' | sort | uniq -c | head -8 || true
