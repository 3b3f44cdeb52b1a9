#!/bin/bash
# Runs libfabric's own fabtests (runfabtests.sh, built once by
# scripts/upstream.sh) against rcoll on loopback, in both of libfabric's
# address-exchange modes: the default one, where a client finds its server
# by node and service, and out-of-band (-b).
#   $1 / $RCOLL_FABTESTS_SET   "check" (default): test sets unit and
#                              functional, rcoll only (make check);
#                              "full": unit, functional and short, for rcoll
#                              and, for comparison (its failures do not
#                              count), tcp;ofi_rxm (make check-fabtests)
#   $RCOLL_BUILD_DIR            build tree (default: the current directory)
# Tests that rcoll leaves out in a mode, with their reasons, are listed in
# test/fabtests-<mode>.exclude and printed. Closes with rcoll's
# "N passed, N failed" (Notrun and excluded apart).
# Exits 77 (skipped) when the fabtests are not built on this machine.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
set_name=${1:-${RCOLL_FABTESTS_SET:-check}}
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

if ! prefix=$("$top/scripts/upstream.sh" --cached fabtests); then
    echo "SKIP run-fabtests: libfabric's fabtests are not built here (scripts/upstream.sh fabtests builds them)"
    exit 77
fi

case $set_name in
check)
    sets=unit,functional
    providers=(rcoll)
    ;;
full)
    sets=unit,functional,short
    providers=(rcoll "tcp;ofi_rxm")
    ;;
*)
    echo "run-fabtests: unknown set '$set_name' (check or full)" >&2
    exit 2
    ;;
esac

echo "# fabtests from $prefix, sets $sets"
for mode in node-service out-of-band; do
    [ -f "$top/test/fabtests-$mode.exclude" ] || continue
    echo "# excluded for rcoll in $mode mode (test/fabtests-$mode.exclude):"
    sed -n '/^# *$/,$ s/^# \(.\+\)/#   \1/p' "$top/test/fabtests-$mode.exclude"
done

passed=0
failed=0
notrun=0
started=$(date +%s)
for prov in "${providers[@]}"; do
    for mode in node-service out-of-band; do
        # Out of band, client and server each bind the port they are told:
        # give them different loopback addresses.
        mode_args=()
        [ "$mode" = out-of-band ] && mode_args=(-b -L "-s 127.0.0.1" -C "-s 127.0.0.2")
        excludes=()
        [ "$prov" = rcoll ] && [ -f "$top/test/fabtests-$mode.exclude" ] &&
            excludes=(-f "$top/test/fabtests-$mode.exclude")
        log=$(mktemp)
        mode_started=$(date +%s)
        "$prefix/bin/runfabtests.sh" -v -T 60 -t "$sets" -p "$prefix/bin" -s 127.0.0.1 -c 127.0.0.1 \
            ${excludes[@]+"${excludes[@]}"} ${mode_args[@]+"${mode_args[@]}"} "$prov" >"$log" 2>&1
        p=$(awk '/^# Total Pass/ {print $NF}' "$log")
        f=$(awk '/^# Total Fail/ {print $NF}' "$log")
        n=$(awk '/^# Total Notrun/ {print $NF}' "$log")
        if [ -z "$p" ] || [ -z "$f" ]; then
            echo "FAIL [$prov, $mode]: runfabtests.sh printed no totals"
            tail -n 20 "$log" | sed 's/^/    | /'
            failed=$((failed + 1))
        else
            # runfabtests -v reports each test as a YAML block ("- name:",
            # "result:", and the output of failing tests): one line per test
            # here, with the block of each failure.
            awk -v tag="[$prov, $mode]" '
                /^- name:/ { flush(); name = $0; sub(/^- name:[[:space:]]*/, "", name); block = ""; result = "" }
                /^  result:/ { result = $2 }
                /^[- ] / { block = block "    | " $0 "\n" }
                function flush() {
                    if (name == "") return
                    print result " " name " " tag
                    if (result == "Fail") printf "%s", block
                }
                END { flush() }' "$log"
            if [ "$prov" = rcoll ]; then
                echo "# $prov, $mode: $p passed, $f failed, $n notrun/excluded; $(($(date +%s) - mode_started)) s"
                passed=$((passed + p))
                failed=$((failed + f))
                notrun=$((notrun + n))
            else
                # For comparison only: its failures are not rcoll's.
                echo "# $prov (comparison), $mode: $p passed, $f failed, $n notrun/excluded;" \
                    "$(($(date +%s) - mode_started)) s"
            fi
        fi
        rm -f "$log"
    done
done
echo "# $notrun notrun or excluded; $(($(date +%s) - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
