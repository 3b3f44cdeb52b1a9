# Sourced by the multi-process test runners. Runs client cases, each in its
# own process tree under a time limit, prints one line per case (PASS, FAIL
# or N/A) and counts the outcomes; cases_summary prints the closing
# "N passed, N failed". The caller sets $prov and $case_limit.

cases_passed=0
cases_failed=0
cases_not_applicable=0
cases_started=$(date +%s)

# run_case CLIENT NAME ARGS...: passes ARGS, then NAME, to CLIENT.
run_case() {
    local client=$1 name=$2
    shift 2
    local output status line errors
    errors=$(mktemp)
    output=$(timeout -k 5 "$case_limit" "$client" --prov "$prov" "$@" "$name" 2>"$errors")
    status=$?
    line=$(printf '%s\n' "$output" | grep -E '^(PASS|FAIL|N/A) ' | head -n 1)
    case "$line" in
    PASS*)
        cases_passed=$((cases_passed + 1))
        echo "$line"
        ;;
    N/A*)
        cases_not_applicable=$((cases_not_applicable + 1))
        echo "$line"
        ;;
    *)
        cases_failed=$((cases_failed + 1))
        if [ -n "$line" ]; then
            echo "$line"
        else
            echo "FAIL $name [$prov]: no result line, exit status $status" \
                "$([ "$status" = 124 ] && echo "(killed after ${case_limit} s)")"
        fi
        sed -e 's/^/    | /' "$errors" | tail -n 20
        ;;
    esac
    rm -f "$errors"
}

# cases_summary WHAT-N/A-MEANS: the closing lines; fails when a case failed.
cases_summary() {
    echo "# $cases_not_applicable case(s) $1; $(($(date +%s) - cases_started)) s"
    echo "$cases_passed passed, $cases_failed failed"
    [ "$cases_failed" -eq 0 ]
}

# run_client_cases RUNNER CLIENT CASES ARGS...: every case of a fabtests
# client (CASES: names, or empty for all it lists) with ARGS; the closing
# lines follow.
run_client_cases() {
    local runner=$1 client=$2 cases=$3
    shift 3
    if [ ! -x "$client" ]; then
        echo "$runner: $client not built" >&2
        echo "0 passed, 1 failed"
        return 1
    fi
    [ -n "$cases" ] || cases=$("$client" --list | awk '{print $1}')
    if [ -z "$cases" ]; then
        echo "$runner: $client --list printed no cases" >&2
        echo "0 passed, 1 failed"
        return 1
    fi
    echo "# provider \"$prov\", FI_PROVIDER_PATH=$FI_PROVIDER_PATH"
    local name
    for name in $cases; do
        run_case "$client" "$name" "$@"
    done
    cases_summary "not applicable to \"$prov\" (listed as N/A above)"
}

# run_loopback_suite RUNNER CLIENT LIMIT CASES [PROV]: every case (CASES:
# names, or empty for all) of the fabtests client CLIENT of the build tree
# ($RCOLL_BUILDDIR, default the current directory as under `make check`) on
# loopback, over PROV (default $RCOLL_TEST_PROV, else "rcoll"), each within
# $RCOLL_TEST_CASE_LIMIT seconds (default LIMIT), with --quick when
# $RCOLL_TEST_QUICK=1.
run_loopback_suite() {
    local runner=$1 client=$2 limit=$3 cases=$4
    prov=${5:-${RCOLL_TEST_PROV:-rcoll}}
    case_limit=${RCOLL_TEST_CASE_LIMIT:-$limit}
    local builddir=${RCOLL_BUILDDIR:-$(pwd)}
    # rcoll is loaded from the build tree; libfabric's built-in providers
    # (tcp, ofi_rxm) do not depend on this path.
    export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
    export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
    local extra=()
    if [ "${RCOLL_TEST_QUICK:-0}" = 1 ]; then
        extra+=(--quick)
    fi
    run_client_cases "$runner" "$builddir/fabtests/$client" "$cases" "${extra[@]}"
}
