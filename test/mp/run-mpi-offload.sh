#!/bin/bash
# librcoll-mpi under Open MPI: the MPI correctness programs run with the
# offload library preloaded, over Open MPI's shared-memory and tcp paths, at
# 2, 3 and 4 ranks; then, where an OFI MPICH is built on this machine
# (scripts/upstream.sh mpich), the same library built from the same sources
# by MPICH's compiler wrapper, under MPICH at 2 and 4 ranks. Every check
# must pass, every rank must have offloaded (the library says so with
# RCOLL_MPI_VERBOSE=1), and so must a share of the calls: a library that
# handed everything back to the MPI would pass the checks too; no call that
# only moves data may be handed back for its datatype. Under both
# MPIs a rank is also killed mid-collective at 3 ranks (mpi_killed): the
# survivors' calls must fail through their error handler, and nothing hang.
# As root, ranks also run on two network-namespace hosts
# (scripts/mpi-netns-hosts.sh) under both MPIs.
set -u
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
library=$builddir/mpi/librcoll-mpi.so
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
export RCOLL_MPI_VERBOSE=1
job_limit=${RCOLL_MPI_JOB_LIMIT:-300}
# Every size offloaded unless a test says otherwise: the checks must reach
# rcoll whatever the default hand-back rules.
export RCOLL_MPI_FORCE=1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
. "$here/../../scripts/mpi-netns-hosts.sh"
trap 'mpi_hosts_down; rm -rf "$work"' EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# judge STATUS PROGRAM WHAT LABEL: counts the program's own checks (in
# $output) and whether the job ran to its end and offloaded.
judge() {
    local status=$1 program=$2 what=$3 label=$4 checks offloaded
    checks=$(printf '%s\n' "$output" | grep -E '^(PASS|FAIL) ')
    [ -n "$checks" ] && printf '%s\n' "$checks" | sed -e "s/^\(PASS\|FAIL\) /\1 [librcoll-mpi, $label] /"
    passed=$((passed + $(printf '%s\n' "$checks" | grep -c '^PASS ')))
    failed=$((failed + $(printf '%s\n' "$checks" | grep -c '^FAIL ')))
    offloaded=$(printf '%s\n' "$output" | sed -n 's/^rcoll-mpi: \([0-9]*\) collective calls offloaded.*/\1/p')
    if [ "$status" -ne 0 ] || ! printf '%s\n' "$output" | grep -q "^# $program finished"; then
        fail "$what: the job exited with status $status"
        printf '%s\n' "$output" | grep -v -E '^(PASS|FAIL) ' | tail -n 12 | sed -e 's/^/    | /'
    elif ! printf '%s\n' "$output" | grep -q "collectives offloaded to rcoll"; then
        fail "$what: the library did not offload ($(printf '%s\n' "$output" | grep '^rcoll-mpi' | head -3))"
    elif [ "$program" = mpi_errors ] && ! printf '%s\n' "$output" | grep -q "MPI_Allreduce on rcoll failed: "; then
        fail "$what: no rank named rcoll's error"
    elif moved=$(printf '%s\n' "$output" | grep -E "^rcoll-mpi: MPI_I?(Bcast|Allgather|Alltoall|Gather|Scatter) .*datatype, op or count"); then
        fail "$what: a call that only moves data was handed back for its datatype: $moved"
    elif [ "${offloaded:-0}" -lt 100 ]; then
        fail "$what: only ${offloaded:-0} calls offloaded"
    else
        pass "$what: $offloaded calls offloaded"
    fi
}

programs="mpi_coll mpi_comms mpi_threads mpi_errors"
# mpi_errors makes a rank late into a collective on purpose: rcoll's
# collective timeout is short for it (and at its default elsewhere).
coll_timeout() { if [ "$1" = mpi_errors ]; then echo 1000; else echo 60000; fi; }

if [ ! -f "$library" ] || ! command -v mpirun >/dev/null; then
    fail "run-mpi-offload: $library or mpirun missing (no MPI compiler at configure time?)"
    echo "$passed passed, $failed failed"
    exit 1
fi

for btl in self,vader self,tcp; do
    for np in 2 3 4; do
        for program in $programs; do
            what="$program with librcoll-mpi (np=$np, btl $btl)"
            output=$(timeout -k 10 "$job_limit" mpirun --allow-run-as-root --oversubscribe \
                --bind-to none -np "$np" --mca pml ob1 --mca btl "$btl" \
                --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo \
                -x LD_PRELOAD="$library" -x FI_PROVIDER_PATH -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE \
                -x RCOLL_MPI_FORCE -x FI_RCOLL_COLL_TIMEOUT_MS="$(coll_timeout "$program")" \
                "$builddir/test/mp/$program" 2>&1)
            judge $? "$program" "$what" "btl $btl"
        done
    done
done

# The switches and the hand-back rules, judged from the report at
# MPI_Finalize (RCOLL_MPI_VERBOSE). switch_job WHAT PATTERN... runs
# $switch_program (default mpi_coll; $switch_checks: its checks, default
# all) at 2 ranks with the environment given before the call (the rules not
# named are empty: no default rule interferes) and wants every PATTERN in
# its output (a leading ! : wants none), the job's checks passed.
switch_job() {
    local what=$1 pattern missing= program=${switch_program:-mpi_coll}
    shift
    output=$(timeout -k 10 "$job_limit" \
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 --mca pml ob1 \
        --mca btl self,vader --mca oob_tcp_if_include lo \
        -x LD_PRELOAD="$library" -x FI_PROVIDER_PATH -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE \
        -x RCOLL_MPI_FORCE $(env | sed -n 's/^\(RCOLL_MPI_[A-Z_]*_HAND_BACK\|RCOLL_MPI_DISABLE\|FI_RCOLL_COLL_LOCAL\)=.*/-x \1/p') \
        ${launch:-} "$builddir/test/mp/$program" ${switch_checks:-} 2>&1)
    local status=$?
    for pattern in "$@"; do
        case $pattern in
        !*) printf '%s\n' "$output" | grep -q -e "${pattern#!}" && missing="$missing; has \"${pattern#!}\"" ;;
        *) printf '%s\n' "$output" | grep -q -e "$pattern" || missing="$missing; lacks \"$pattern\"" ;;
        esac
    done
    if [ "$status" -ne 0 ] || ! printf '%s\n' "$output" | grep -q "^# $program finished" ||
            printf '%s\n' "$output" | grep -q '^FAIL '; then
        fail "switches: $what: the job failed (status $status)"
        printf '%s\n' "$output" | grep -v '^PASS ' | tail -n 12 | sed -e 's/^/    | /'
    elif [ -n "$missing" ]; then
        fail "switches: $what: the report${missing}"
        printf '%s\n' "$output" | grep '^rcoll-mpi' | sed -e 's/^/    | /'
    else
        pass "switches: $what"
    fi
}
no_rules() {
    for coll in BARRIER BCAST ALLREDUCE REDUCE ALLGATHER REDUCE_SCATTER ALLTOALL GATHER SCATTER; do
        export RCOLL_MPI_${coll}_HAND_BACK=
    done
}
# rank1 VAR=VALUE COMMAND...: rank 1 alone runs with that setting.
cat >"$work/rank1" <<'EOF'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export "$1"
shift
exec "$@"
EOF
chmod +x "$work/rank1"
(
    no_rules
    export RCOLL_MPI_FORCE=0
    RCOLL_MPI_DISABLE=1 switch_job "RCOLL_MPI_DISABLE=1 hands every call to the MPI" \
        'collectives left to the MPI: RCOLL_MPI_DISABLE is set' \
        '^rcoll-mpi: 0 collective calls offloaded' 'MPI_Allreduce  *0 offloaded.*library off'
    RCOLL_MPI_ALLREDUCE_HAND_BACK=1k- switch_job "an allreduce rule hands back its sizes, no others" \
        'MPI_Allreduce  *[1-9][0-9]* offloaded.*[1-9][0-9]* by a hand-back rule' \
        '!MPI_Bcast .*hand-back rule' '!MPI_Reduce  .*hand-back rule'
    RCOLL_MPI_ALLREDUCE_HAND_BACK=1k- RCOLL_MPI_FORCE=1 switch_job "RCOLL_MPI_FORCE=1 overrides the rules" \
        'at every size (RCOLL_MPI_FORCE)' '!hand-back rule' 'MPI_Allreduce  *[1-9][0-9]* offloaded'
    RCOLL_MPI_BCAST_HAND_BACK='host:2:*' switch_job "a rule for one host and 2 ranks takes every broadcast" \
        'MPI_Bcast  *0 offloaded.*by a hand-back rule' '!MPI_Allreduce .*hand-back rule'
    RCOLL_MPI_BCAST_HAND_BACK='net:*;3-:*' switch_job "rules for other hosts or sizes take none" \
        '!hand-back rule' 'MPI_Bcast  *[1-9][0-9]* offloaded'
    FI_RCOLL_COLL_LOCAL=0 RCOLL_MPI_BCAST_HAND_BACK='net:*' \
        switch_job "members reached through the core count as between hosts" \
        'MPI_Bcast  *0 offloaded.*by a hand-back rule'
    RCOLL_MPI_BCAST_HAND_BACK=oops switch_job "a rule that cannot be read leaves the library off" \
        'RCOLL_MPI_BCAST_HAND_BACK: rule "oops"' '^rcoll-mpi: 0 collective calls offloaded'
    launch="$work/rank1 RCOLL_MPI_BCAST_HAND_BACK=8" \
        switch_job "a rule on one rank alone leaves the library off" \
        "settings differ" '^rcoll-mpi: 0 collective calls offloaded'
    launch="$work/rank1 RCOLL_MPI_BCAST_HAND_BACK=oops" \
        switch_job "a rule one rank alone cannot read leaves the library off" \
        'rank 1: .*RCOLL_MPI_BCAST_HAND_BACK: rule "oops"' '^rcoll-mpi: 0 collective calls offloaded'
    launch="$work/rank1 RCOLL_MPI_DISABLE=1" \
        switch_job "RCOLL_MPI_DISABLE on one rank alone leaves the library off" \
        'collectives left to the MPI: another rank did not open rcoll' \
        '^rcoll-mpi: 0 collective calls offloaded'
    # The library off, a call of any datatype is the MPI's alone.
    switch_program=mpi_comms switch_checks=any-types RCOLL_MPI_DISABLE=1 \
        switch_job "RCOLL_MPI_DISABLE=1: any datatype goes to the MPI" \
        '^rcoll-mpi: 0 collective calls offloaded' 'MPI_Bcast  *0 offloaded.*library off'
    switch_program=mpi_comms switch_checks=any-types launch="$work/rank1 RCOLL_MPI_DISABLE=1" \
        switch_job "RCOLL_MPI_DISABLE on one rank alone: any datatype goes to the MPI" \
        '^rcoll-mpi: 0 collective calls offloaded' 'MPI_Bcast  *0 offloaded.*library off'
    launch="--mca mpi_yield_when_idle 1" \
        switch_job "Open MPI's mpi_yield_when_idle makes rcoll's waits yield" \
        'offloaded to rcoll, waits yield (mpi_yield_when_idle)'
    FI_RCOLL_YIELD_WHEN_IDLE=0 launch="-x FI_RCOLL_YIELD_WHEN_IDLE --mca mpi_yield_when_idle 1" \
        switch_job "FI_RCOLL_YIELD_WHEN_IDLE set overrides mpi_yield_when_idle" \
        'offloaded to rcoll$' '!waits yield'
    echo "$passed $failed" >"$work/switches"
)
read -r passed failed <"$work/switches" || fail "switches: no result"
# judge_killed STATUS NP WHAT: a rank killed itself; every survivor must
# have passed (mpi_killed.cpp) and the job ended within its limit.
judge_killed() {
    local status=$1 np=$2 what=$3 survivors
    survivors=$(printf '%s\n' "$output" | grep -c '^PASS \[mpi_killed\]')
    printf '%s\n' "$output" | grep -E '^(PASS|FAIL) \[mpi_killed\]' | sed -e 's/^/    | /'
    # (mpirun itself may exit with 137 for the rank killed on purpose)
    if [ $((SECONDS - started)) -ge "$job_limit" ]; then
        fail "$what: the job did not end within $job_limit s"
    elif [ "$survivors" -ne $((np - 1)) ] || printf '%s\n' "$output" | grep -q '^FAIL '; then
        fail "$what: $survivors of $((np - 1)) survivors passed"
        printf '%s\n' "$output" | grep -v -E '^(PASS|FAIL) ' | tail -n 8 | sed -e 's/^/    | /'
    elif ! printf '%s\n' "$output" | grep -q "MPI_Allreduce on rcoll failed: \|MPI_Bcast on rcoll failed: "; then
        fail "$what: no survivor named rcoll's error"
    else
        pass "$what: $survivors survivors' calls failed through the error handler"
    fi
}

# A rank killed mid-collective: Open MPI keeps the survivors running with
# orte_enable_recovery.
for btl in self,vader self,tcp; do
    what="mpi_killed with librcoll-mpi (np=3, btl $btl)"
    started=$SECONDS
    output=$(timeout -k 10 "$job_limit" mpirun --allow-run-as-root --oversubscribe \
        --bind-to none -np 3 --mca pml ob1 --mca btl "$btl" --mca orte_enable_recovery 1 \
        --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo \
        -x LD_PRELOAD="$library" -x FI_PROVIDER_PATH -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE \
        "$builddir/test/mp/mpi_killed" 2>&1)
    judge_killed $? 3 "$what"
done

# Ranks on two hosts (network namespaces sharing this machine's CPUs): at 3
# and 4 ranks groups mix rcoll's node-local path and its core, and
# split_type communicators hold one host each. The ranks outnumber the CPUs
# where neither MPI nor rcoll can see it: Open MPI is told to yield while
# idle, which the library passes on to rcoll (asserted from its message).
# Open MPI's map must show both hosts, or the jobs prove nothing.
hosts_ready=0
if [ "$(id -u)" != 0 ]; then
    echo "SKIP librcoll-mpi on namespace hosts: not root"
elif ! mpi_hosts_up 2 10.79.0 "$work"; then
    fail "librcoll-mpi on namespace hosts: could not make them"
else
    hosts_ready=1
    for np in 3 4; do
        for program in mpi_coll mpi_comms; do
            what="$program with librcoll-mpi (np=$np on 2 namespace hosts)"
            output=$(FI_TCP_IFACE=eth0 timeout -k 10 "$job_limit" "$mpi_on_first_host" \
                mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
                --hostfile "$mpi_hostfile" --map-by node --display-map \
                --mca plm_rsh_agent "$mpi_agent" --mca oob_tcp_if_include eth0 \
                --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 \
                --mca mpi_yield_when_idle 1 \
                -x LD_PRELOAD="$library" -x FI_PROVIDER_PATH -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE \
                -x RCOLL_MPI_FORCE -x FI_RCOLL_COLL_TIMEOUT_MS=60000 \
                "$builddir/test/mp/$program" 2>&1)
            status=$?
            # (the map may be printed more than once)
            nodes=$(printf '%s\n' "$output" | grep -o 'Data for node: [^[:space:]]*' | sort -u | wc -l)
            if [ "$nodes" -ne 2 ]; then
                fail "$what: Open MPI's map shows $nodes hosts, not 2"
            elif ! printf '%s\n' "$output" | grep -q 'waits yield (mpi_yield_when_idle)'; then
                fail "$what: the library did not pass mpi_yield_when_idle on to rcoll"
            else
                judge $status "$program" "$what" "2 hosts"
            fi
        done
    done
fi

# MPICH: its own traffic over rcoll too (FI_PROVIDER hides every other
# provider from libfabric, the library's endpoint included), with no MPICH
# setting.
if prefix=$("$here/../../scripts/upstream.sh" --cached mpich); then
    # Built as packagers build it (mpi/Makefile.include), always anew: the
    # one there may come from another MPICH's wrapper.
    mpich_library=$builddir/mpi/mpich/librcoll-mpi.so
    flags="-DMPICH_SKIP_MPICXX=1 -std=c++20 -O2 -Wall -Wextra"
    rm -f "$mpich_library"
    if ! make -s -C "$builddir" mpi-offload-family MPI_FAMILY=mpich MPICXX="$prefix/bin/mpicxx"; then
        fail "librcoll-mpi: make mpi-offload-family could not build it with MPICH's mpicxx"
    else
        for program in $programs mpi_killed; do
            "$prefix/bin/mpicxx" $flags -o "$builddir/test/mp/$program-mpich" "$here/$program.cpp" -pthread ||
                fail "$program: MPICH's mpicxx could not build it"
        done
        for np in 2 4; do
            for program in $programs; do
                what="$program with librcoll-mpi under MPICH (np=$np)"
                output=$(FI_PROVIDER=rcoll LD_PRELOAD="$mpich_library" \
                    FI_RCOLL_COLL_TIMEOUT_MS="$(coll_timeout "$program")" \
                    timeout -k 10 "$job_limit" "$prefix/bin/mpiexec" -n "$np" \
                    "$builddir/test/mp/$program-mpich" 2>&1)
                judge $? "$program" "$what" MPICH
            done
        done
        # One rank on each namespace host, MPICH's own traffic over rcoll too.
        if [ $hosts_ready = 1 ]; then
            hydra=(-hosts "$mpi_host_list" -launcher rsh -launcher-exec "$mpi_agent")
            placement=$(timeout -k 10 "$job_limit" "$mpi_on_first_host" "$prefix/bin/mpiexec" -n 2 \
                "${hydra[@]}" hostname </dev/null 2>&1)
            placement_status=$?
            placed=$(printf '%s\n' "$placement" | sort -u | tr '\n' ' ')
            if [ "$placed" != "$(printf '%s\n' "${mpi_hosts[@]}" | sort | tr '\n' ' ')" ]; then
                # Without the placement the jobs would prove nothing: said, not counted.
                echo "SKIP librcoll-mpi under MPICH on namespace hosts: hydra placed its ranks on" \
                    "\"$placed\" (status $placement_status):"
                printf '%s\n' "$placement" | tail -n 8 | sed -e 's/^/    | /'
            else
                for program in mpi_coll mpi_comms; do
                    what="$program with librcoll-mpi under MPICH (np=2 on 2 namespace hosts)"
                    output=$(FI_PROVIDER=rcoll FI_TCP_IFACE=eth0 FI_RCOLL_COLL_TIMEOUT_MS=60000 \
                        timeout -k 10 "$job_limit" "$mpi_on_first_host" "$prefix/bin/mpiexec" -n 2 \
                        "${hydra[@]}" -genv LD_PRELOAD "$mpich_library" \
                        "$builddir/test/mp/$program-mpich" </dev/null 2>&1)
                    judge $? "$program" "$what" "MPICH, 2 hosts"
                done
            fi
        fi
        what="mpi_killed with librcoll-mpi under MPICH (np=3)"
        started=$SECONDS
        output=$(FI_PROVIDER=rcoll LD_PRELOAD="$mpich_library" \
            timeout -k 10 "$job_limit" "$prefix/bin/mpiexec" -disable-auto-cleanup -n 3 \
            "$builddir/test/mp/mpi_killed-mpich" --exit 2>&1)
        judge_killed $? 3 "$what"
    fi
else
    echo "SKIP librcoll-mpi under MPICH: no OFI MPICH built here (scripts/upstream.sh mpich builds it)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
