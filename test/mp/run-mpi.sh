#!/bin/bash
# Runs the MPI correctness programs at 2 and 4 ranks with Open MPI forced
# onto one libfabric provider: pml cm + mtl ofi, btl self only, so no
# other transport can carry the traffic.
#   $RCOLL_TEST_PROV (or $1)   provider, default "rcoll"; "tcp;ofi_rxm" (or
#                              "tcp") for libfabric's own stack
#   $RCOLL_BUILD_DIR            build tree (default: the current directory)
# Closes with "N passed, N failed".
set -u

prov=${1:-${RCOLL_TEST_PROV:-rcoll}}
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
job_limit=${RCOLL_TEST_MPI_LIMIT:-120}
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

# FI_PROVIDER takes core provider names ("tcp" brings "tcp;ofi_rxm");
# Open MPI's mtl/ofi excludes anything named tcp* unless it is included
# explicitly.
case "$prov" in
tcp | "tcp;ofi_rxm")
    export FI_PROVIDER=tcp
    include="tcp;ofi_rxm"
    ;;
*)
    export FI_PROVIDER=$prov
    include=$prov
    ;;
esac

if ! command -v mpirun >/dev/null; then
    echo "run-mpi: mpirun not found" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

echo "# provider \"$prov\" (FI_PROVIDER=$FI_PROVIDER, mtl_ofi_provider_include=$include)"
passed=0
failed=0
for np in 2 4; do
    for program in mpi_p2p mpi_coll; do
        binary=$builddir/test/mp/$program
        if [ ! -x "$binary" ]; then
            echo "FAIL $program (np=$np): $binary not built"
            failed=$((failed + 1))
            continue
        fi
        output=$(timeout -k 10 "$job_limit" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
            --mca pml cm --mca mtl ofi --mca btl self \
            --mca mtl_ofi_provider_include "$include" --mca mtl_ofi_verbose 1 \
            --mca oob_tcp_if_include lo \
            -x FI_PROVIDER -x FI_PROVIDER_PATH -x FI_TCP_IFACE \
            "$binary" 2>&1)
        status=$?
        results=$(printf '%s\n' "$output" | grep -E '^(PASS|FAIL) ')
        if [ -n "$results" ]; then
            echo "$results"
        fi
        pass_lines=$(printf '%s\n' "$results" | grep -c '^PASS ')
        fail_lines=$(printf '%s\n' "$results" | grep -c '^FAIL ')
        passed=$((passed + pass_lines))
        failed=$((failed + fail_lines))
        finished=$(printf '%s\n' "$output" | grep -c "^# $program finished:")
        # mtl/ofi names the provider it picked: prove the traffic used it.
        if [ "$pass_lines" -gt 0 ] && ! printf '%s\n' "$output" | grep -q -F "mtl:ofi:prov: $include"; then
            failed=$((failed + 1))
            echo "FAIL $program (np=$np): Open MPI's mtl/ofi never reported selecting \"$include\""
        fi
        if [ "$finished" -eq 0 ] || { [ "$status" -ne 0 ] && [ "$fail_lines" -eq 0 ]; }; then
            # The job died (crash, hang, abort) outside of any reported check.
            failed=$((failed + 1))
            echo "FAIL $program (np=$np): mpirun exited with status $status" \
                "$([ "$status" = 124 ] && echo "(killed after ${job_limit} s)")" \
                "after $pass_lines passing and $fail_lines failing checks" \
                "$([ "$finished" -eq 0 ] && echo "without finishing")"
            printf '%s\n' "$output" | grep -v -E '^(PASS|FAIL) ' | tail -n 15 | sed -e 's/^/    | /'
        fi
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
