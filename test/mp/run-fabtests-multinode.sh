#!/bin/bash
# libfabric's own fi_multinode_coll (join, barrier, allreduce, allgather,
# scatter, broadcast on fresh groups, with an out-of-band barrier that does
# not call the provider between tests), run as its authors run it: one
# process per rank on this host, started 0.2 s apart, the first one serving
# the out-of-band exchange ("-n N -s 127.0.0.1 127.0.0.1"). Their endpoints
# take ports the system picks (-B 0) rather than fabtests' default 9228,
# which other fabtests on this host may hold.
#
#   run-fabtests-multinode.sh          make check: the provider under test at
#                                      2 and 4 ranks, 5 runs each
#   run-fabtests-multinode.sh --full   2..8 ranks, 20 runs each, beside
#                                      tcp;ofi_rxm for comparison
#
#   RCOLL_TEST_PROV            provider under test (default "rcoll")
#   RCOLL_MULTINODE_RANKS      rank counts (default "2 4"; --full: "2 3 4 5 6 7 8")
#   RCOLL_MULTINODE_REPEAT     runs per rank count (default 5; --full: 20)
#   RCOLL_MULTINODE_COMPARE    providers run the same way for comparison only
#                              (default none; --full: "tcp;ofi_rxm")
#   RCOLL_MULTINODE_LIMIT      seconds one run may take before it counts as a
#                              hang and is killed (default 60)
#   RCOLL_BUILD_DIR             build tree (default: the current directory)
#
# Prints a line per failed run (with the ranks' last output), one line of
# pass/fail counts per provider and rank count, and closes with
# "N passed, N failed" for the provider under test; comparison providers
# never fail the script. The fabtests come from scripts/upstream.sh's cache:
# when they have not been built, it prints SKIP and exits 77 (automake's
# skip). The out-of-band port is fixed (multinode's PM_DEFAULT_OOB_PORT), so
# as root each run gets a network namespace of its own; otherwise runs on
# this host take turns through a lock.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
prov=${RCOLL_TEST_PROV:-rcoll}
if [ "${1:-}" = --full ]; then
    ranks_list=${RCOLL_MULTINODE_RANKS:-2 3 4 5 6 7 8}
    repeat=${RCOLL_MULTINODE_REPEAT:-20}
    compare=${RCOLL_MULTINODE_COMPARE-tcp;ofi_rxm}
else
    ranks_list=${RCOLL_MULTINODE_RANKS:-2 4}
    repeat=${RCOLL_MULTINODE_REPEAT:-5}
    compare=${RCOLL_MULTINODE_COMPARE:-}
fi
limit=${RCOLL_MULTINODE_LIMIT:-60}
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}

skip() {
    echo "SKIP run-fabtests-multinode: $*"
    exit 77
}
prefix=$("$top/scripts/upstream.sh" --cached fabtests 2>/dev/null) ||
    skip "libfabric's fabtests are not built (scripts/upstream.sh fabtests builds them once)"
client=$prefix/bin/fi_multinode_coll
[ -x "$client" ] || skip "$client missing from the fabtests build"

# The ranks of one run, in a network namespace of their own when possible.
isolate=()
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null &&
    unshare -n true 2>/dev/null; then
    isolate=(unshare -n)
fi
lock=${TMPDIR:-/tmp}/rcoll-fi-multinode.lock

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The ranks run under another name: after any failed test, libfabric's
# runfabtests.sh SIGKILLs every process on the host whose name starts with
# "fi_", which would end the runs of this script that happen to overlap.
ln -s "$client" "$work/multinode_coll"
client=$work/multinode_coll

# one_run PROV N DIR: rank i's output goes to DIR/rank<i>, its exit status
# and seconds to DIR/status<i>; succeeds when every rank exits 0 having
# printed "passed".
one_run() {
    local prov=$1 n=$2 dir=$3 r ok=0
    [ ${#isolate[@]} -eq 0 ] || ip link set lo up || return 1
    for ((r = 0; r < n; r++)); do
        (
            start=$SECONDS
            timeout -s KILL "$limit" "$client" -p "$prov" -n "$n" -B 0 -s 127.0.0.1 127.0.0.1 \
                >"$dir/rank$r" 2>&1
            echo "$? $((SECONDS - start))" >"$dir/status$r"
        ) &
        sleep 0.2
    done
    wait
    for ((r = 0; r < n; r++)); do
        read -r status _ <"$dir/status$r" && [ "$status" = 0 ] && grep -q '^passed' "$dir/rank$r" || ok=1
    done
    return $ok
}
export -f one_run
export client limit
isolate_run() {
    if [ ${#isolate[@]} -gt 0 ]; then
        "${isolate[@]}" bash -c 'isolate=(x); one_run "$@"' one_run "$@"
    else
        flock "$lock" bash -c 'isolate=(); one_run "$@"' one_run "$@"
    fi
}

passed=0
failed=0
started=$(date +%s)
for p in "$prov" $compare; do
    [ "$p" = "$prov" ] && role="" || role=" (comparison)"
    for n in $ranks_list; do
        ok=0
        bad=0
        for ((i = 1; i <= repeat; i++)); do
            dir=$work/run
            rm -rf "$dir"
            mkdir -p "$dir"
            t0=$(date +%s)
            if isolate_run "$p" "$n" "$dir" 2>/dev/null; then
                ok=$((ok + 1))
            else
                bad=$((bad + 1))
                echo "FAIL fi_multinode_coll [$p, $n ranks, run $i, $(($(date +%s) - t0)) s]"
                for ((r = 0; r < n; r++)); do
                    read -r status seconds <"$dir/status$r" || status="?"
                    if [ "$status" = 137 ]; then
                        [ "${seconds:-0}" -ge "$limit" ] && status="$status (killed after $limit s)" ||
                            status="$status (SIGKILL after ${seconds:-?} s, from outside this script)"
                    fi
                    echo "    | rank $r: exit status $status"
                    grep -v '^libfabric:.*<info>' "$dir/rank$r" | grep . | tail -n 3 | sed -e "s/^/    | rank $r: /"
                done
            fi
        done
        echo "fi_multinode_coll [$p$role, $n ranks]: $ok of $repeat passed, $bad failed"
        if [ "$p" = "$prov" ]; then
            passed=$((passed + ok))
            failed=$((failed + bad))
        fi
    done
done
echo "# $prov: $repeat runs per rank count ($ranks_list); $(($(date +%s) - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
