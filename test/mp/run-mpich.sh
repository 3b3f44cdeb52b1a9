#!/bin/bash
# Runs MPI programs (test/mp/mpich_checks.c) at 4 ranks under an OFI build
# of MPICH (ch4:ofi; scripts/upstream.sh mpich builds it once) over rcoll,
# and over tcp;ofi_rxm for comparison. MPICH's shared memory is off
# (MPIR_CVAR_NOLOCAL), so that every byte goes through the provider; its OFI
# active messages (FI_MULTI_RECV buffers) stay on, as MPICH chooses them.
#   $RCOLL_BUILD_DIR   build tree (default: the current directory)
# Closes with "N passed, N failed"; exits 77 (skipped) when no MPICH is
# built on this machine.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
job_limit=${RCOLL_TEST_MPI_LIMIT:-120}
ranks=4

if ! prefix=$("$top/scripts/upstream.sh" --cached mpich); then
    echo "SKIP run-mpich: no OFI MPICH built here (scripts/upstream.sh mpich builds it)"
    exit 77
fi
program=$builddir/test/mp/mpich_checks
mkdir -p "$(dirname "$program")"
if ! "$prefix/bin/mpicc" -O2 -Wall -Wextra -o "$program" "$here/mpich_checks.c"; then
    echo "run-mpich: mpicc failed"
    echo "0 passed, 1 failed"
    exit 1
fi

export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
export MPIR_CVAR_NOLOCAL=1
passed=0
failed=0
started=$(date +%s)
for prov in rcoll "tcp;ofi_rxm"; do
    echo "# MPICH $("$prefix/bin/mpichversion" --version 2>/dev/null | awk '{print $NF}') over \"$prov\", $ranks ranks"
    for name in user-op nonblocking finalize rma; do
        out=$(mktemp)
        start=$(date +%s)
        FI_PROVIDER=$prov timeout -k 5 "$job_limit" \
            "$prefix/bin/mpiexec" -n "$ranks" "$program" "$name" >"$out" 2>&1
        status=$?
        line=$(grep -E '^(PASS|FAIL) ' "$out" | head -n 1)
        if [ $status -eq 0 ] && [ "${line%% *}" = PASS ]; then
            passed=$((passed + 1))
            echo "$line [$prov, $(($(date +%s) - start)) s]"
        else
            failed=$((failed + 1))
            echo "FAIL $name [$prov]: ${line:-no result line}, exit status $status" \
                "$([ $status = 124 ] && echo "(killed after $job_limit s)")"
            tail -n 20 "$out" | sed 's/^/    | /'
        fi
        rm -f "$out"
    done
done
echo "# $(($(date +%s) - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
