#!/bin/bash
# Runs every rcoll_p2p_test case, each in its own process tree with a time
# limit, over one libfabric provider:
#   $RCOLL_TEST_PROV (or $1)   provider name, default "rcoll"; "tcp;ofi_rxm"
#                              runs the same cases over libfabric's own stack
#   $RCOLL_TEST_QUICK=1        smaller sizes and fewer iterations
#   $RCOLL_BUILDDIR            build tree (default: the current directory, as
#                              under `make check`)
# Prints one line per case and closes with "N passed, N failed"; cases that
# do not apply to the provider are listed as N/A and counted apart.
set -u

prov=${1:-${RCOLL_TEST_PROV:-rcoll}}
builddir=${RCOLL_BUILDDIR:-$(pwd)}
client=$builddir/fabtests/rcoll_p2p_test
case_limit=${RCOLL_TEST_CASE_LIMIT:-300}

if [ ! -x "$client" ]; then
    echo "run-p2p: $client not built" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
# rcoll is loaded from the build tree; libfabric's built-in providers
# (tcp, ofi_rxm) do not depend on this path.
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

extra=()
if [ "${RCOLL_TEST_QUICK:-0}" = 1 ]; then
    extra+=(--quick)
fi

cases=$("$client" --list | awk '{print $1}')
if [ -z "$cases" ]; then
    echo "run-p2p: $client --list printed no cases" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

echo "# provider \"$prov\", FI_PROVIDER_PATH=$FI_PROVIDER_PATH"
passed=0
failed=0
not_applicable=0
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
for name in $cases; do
    output=$(timeout -k 5 "$case_limit" "$client" --prov "$prov" "${extra[@]}" "$name" 2>"$errors")
    status=$?
    line=$(printf '%s\n' "$output" | grep -E '^(PASS|FAIL|N/A) ' | head -n 1)
    case "$line" in
    PASS*)
        passed=$((passed + 1))
        echo "$line"
        ;;
    N/A*)
        not_applicable=$((not_applicable + 1))
        echo "$line"
        ;;
    *)
        failed=$((failed + 1))
        if [ -n "$line" ]; then
            echo "$line"
        else
            echo "FAIL $name [$prov]: no result line, exit status $status" \
                "$([ "$status" = 124 ] && echo "(killed after ${case_limit} s)")"
        fi
        sed -e 's/^/    | /' "$errors" | tail -n 20
        ;;
    esac
done

echo "# $not_applicable case(s) not applicable to \"$prov\" (listed as N/A above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
