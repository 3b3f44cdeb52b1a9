#!/bin/bash
# Smoke run of rcoll_p2p_bench with tiny parameters: every table must come
# out with a figure in every cell for rcoll and tcp;ofi_rxm (a figure, not
# "n/a" or "failed"). Performance itself is not judged here.
set -u
builddir=${RCOLL_BUILDDIR:-$(pwd)}
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
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
