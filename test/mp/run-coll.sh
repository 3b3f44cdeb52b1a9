#!/bin/bash
# Runs every rcoll_coll_test case, each in its own process tree with a time
# limit, over one libfabric provider:
#   $RCOLL_TEST_PROV (or $1)   provider name, default "rcoll"; "tcp;ofi_rxm"
#                              runs the provider-neutral cases over libfabric's
#                              own util_coll collectives
#   $RCOLL_TEST_QUICK=1        fewer counts and rounds
#   $RCOLL_COLL_CASES          space-separated case names (default: all)
#   $RCOLL_BUILDDIR            build tree (default: the current directory, as
#                              under `make check`)
# Prints one line per case (PASS, FAIL or N/A) and closes with
# "N passed, N failed"; N/A cases (rcoll-only cases on another provider) are
# counted apart. Exits non-zero when a case failed.
set -u

prov=${1:-${RCOLL_TEST_PROV:-rcoll}}
builddir=${RCOLL_BUILDDIR:-$(pwd)}
client=$builddir/fabtests/rcoll_coll_test
case_limit=${RCOLL_TEST_CASE_LIMIT:-400}

if [ ! -x "$client" ]; then
    echo "run-coll: $client not built" >&2
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

cases=${RCOLL_COLL_CASES:-$("$client" --list | awk '{print $1}')}
if [ -z "$cases" ]; then
    echo "run-coll: no cases listed by $client" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

echo "# provider \"$prov\", FI_PROVIDER_PATH=$FI_PROVIDER_PATH"
passed=0
failed=0
not_applicable=0
started=$(date +%s)
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

echo "# $not_applicable case(s) not applicable to \"$prov\" (listed as N/A above); $(($(date +%s) - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
