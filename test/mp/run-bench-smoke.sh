#!/bin/bash
# Smoke runs of the benchmarks with tiny parameters. rcoll_p2p_bench: every
# table must come out with a figure in every cell for rcoll and tcp;ofi_rxm
# (a figure, not "n/a" or "failed"). rcoll_coll_bench: every point must have
# a figure for rcoll and for its core path (tcp;ofi_rxm may fail there, as
# it does), and the bound 2-rank rcoll job its flag exchange. Performance
# itself is not judged here.
set -u
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
bench=$builddir/fabtests/rcoll_p2p_bench
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

output=$(timeout -k 5 300 "$bench" --latency 8:1K --bandwidth 64K:256K --peers 1,4 \
    --iterations 100 --reps 1 2>&1)
status=$?
echo "$output"
passed=0
failed=0
check() {
    if [ "$1" = ok ]; then
        passed=$((passed + 1))
        echo "PASS bench-smoke: $2"
    else
        failed=$((failed + 1))
        echo "FAIL bench-smoke: $2"
    fi
}
[ "$status" -eq 0 ] && check ok "exit status 0" || check bad "exit status $status"
for table in "Latency" "Streaming bandwidth" "Receive-side memory"; do
    if printf '%s\n' "$output" | grep -q "^$table"; then
        check ok "table \"$table\" printed"
    else
        check bad "table \"$table\" missing"
    fi
done
# Data rows: a size or peer count, then one cell per provider and the ratio.
bad_rows=$(printf '%s\n' "$output" | grep -E '^ +[0-9]+( B| KiB| MiB)? +\|' | grep -c -E 'n/a|failed')
rows=$(printf '%s\n' "$output" | grep -c -E '^ +[0-9]+( B| KiB| MiB)? +\|')
if [ "$rows" -eq 13 ] && [ "$bad_rows" -eq 0 ]; then
    check ok "13 table rows, each with a figure for both providers"
else
    check bad "$rows table rows (want 13), $bad_rows without a figure"
fi

coll_bench=$builddir/fabtests/rcoll_coll_bench
output=$(timeout -k 5 300 "$coll_bench" --quick --ranks 2,3 --sizes 8,300k --call-limit 5 2>&1)
status=$?
echo "$output"
[ "$status" -eq 0 ] && check ok "coll bench: exit status 0" || check bad "coll bench: exit status $status"
# Rows: size ("8 B", or "-" for barrier), ranks, then "|" and rcoll's time,
# its system calls per call, Open MPI's shared-memory time and the ratio, then
# "|" and the core path's time, system calls, Open MPI over tcp and the ratio.
# Normalised here to: rcoll sys ompi-sm core sys ompi-tcp.
cells=$(printf '%s\n' "$output" | awk '
    $1 == "-" && $2 ~ /^[23]$/ && $3 == "|" { print $4, $5, $6, $9, $10, $11 }
    $1 ~ /^[0-9]+$/ && $2 ~ /^(B|KiB|MiB)$/ && $3 ~ /^[23]$/ && $4 == "|" { print $5, $6, $7, $10, $11, $12 }')
total=$(printf '%s\n' "$cells" | grep -c .)
figures=$(printf '%s\n' "$cells" | awk '$1 ~ /^[0-9.]+$/ && $4 ~ /^[0-9.]+$/' | wc -l)
if [ "$total" -eq 10 ] && [ "$figures" -eq 10 ]; then
    check ok "coll bench: 10 points, each with a figure for rcoll and its core path"
else
    check bad "coll bench: $total points (want 10), $figures with figures for rcoll and its core path"
fi
if printf '%s\n' "$output" | grep -q "Open MPI's columns stay empty"; then
    echo "SKIP bench-smoke: Open MPI's columns ($(printf '%s\n' "$output" | grep "Open MPI's columns"))"
else
    ompi=$(printf '%s\n' "$cells" | awk '$3 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/' | wc -l)
    [ "$ompi" -eq 10 ] && check ok "coll bench: Open MPI's figures (shared memory and tcp) beside each point" ||
        check bad "coll bench: $ompi of 10 points with Open MPI's figures"
fi
# Bound jobs (2 ranks on 2 or more CPUs, as the bench's header says) say
# which CPU placement they met, before and after.
cpus=$(printf '%s\n' "$output" | sed -n 's/^# rank r of rcoll and of Open MPI runs on CPU r of \([0-9]*\) .*/\1/p')
if [ "${cpus:-0}" -ge 2 ]; then
    exchange=$(printf '%s\n' "$output" | grep '^#   2 ranks, rcoll ' |
        sed -n 's/.*flag exchange CPU 0-1 \([0-9.]*\) us before, \([0-9.]*\) after.*/\1 \2/p')
    if printf '%s\n' "$exchange" | awk 'NF == 2 && $1 ~ /^[0-9.]+$/ && $1 > 0 && $2 ~ /^[0-9.]+$/ && $2 > 0 { ok = 1 } END { exit !ok }'; then
        check ok "coll bench: the 2-rank job line gives the flag exchange before and after ($exchange us)"
    else
        check bad "coll bench: no flag exchange figures on the 2-rank job line"
    fi
else
    echo "SKIP bench-smoke: flag exchange (ranks not bound to 2 or more CPUs)"
fi
if printf '%s\n' "$output" | grep -q "system calls are not counted"; then
    echo "SKIP bench-smoke: system call counts ($(printf '%s\n' "$output" | grep "system calls are not counted"))"
else
    counted=$(printf '%s\n' "$cells" | awk '$2 ~ /^[0-9.]+$/ && $5 ~ /^[0-9.]+$/' | wc -l)
    [ "$counted" -eq 10 ] && check ok "coll bench: system calls per call counted for rcoll and its core path" ||
        check bad "coll bench: $counted of 10 points with system call counts"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
