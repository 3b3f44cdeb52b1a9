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
        echo "$line${case_label:+ ($case_label)}"
        ;;
    N/A*)
        cases_not_applicable=$((cases_not_applicable + 1))
        echo "$line${case_label:+ ($case_label)}"
        ;;
    *)
        cases_failed=$((cases_failed + 1))
        if [ -n "$line" ]; then
            echo "$line${case_label:+ ($case_label)}"
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

# run_client_pass RUNNER CLIENT CASES ARGS...: every case of a fabtests
# client (CASES: names, or empty for all it lists) with ARGS, counted; a
# non-empty $case_label is shown after each result line.
run_client_pass() {
    local runner=$1 client=$2 cases=$3
    shift 3
    if [ ! -x "$client" ]; then
        echo "$runner: $client not built" >&2
        cases_failed=$((cases_failed + 1))
        return 1
    fi
    [ -n "$cases" ] || cases=$("$client" --list | awk '{print $1}')
    if [ -z "$cases" ]; then
        echo "$runner: $client --list printed no cases" >&2
        cases_failed=$((cases_failed + 1))
        return 1
    fi
    echo "# provider \"$prov\"${case_label:+, $case_label}, FI_PROVIDER_PATH=$FI_PROVIDER_PATH"
    local name
    for name in $cases; do
        run_case "$client" "$name" "$@"
    done
}

# run_client_cases RUNNER CLIENT CASES ARGS...: one pass, then the closing
# lines.
run_client_cases() {
    run_client_pass "$@"
    cases_summary "not applicable to \"$prov\" (listed as N/A above)"
}

# loopback_setup LIMIT [PROV]: what every loopback suite shares: the
# provider (PROV, default $RCOLL_TEST_PROV, else "rcoll"), the per-case
# limit ($RCOLL_TEST_CASE_LIMIT seconds, default LIMIT), rcoll loaded from
# the build tree ($RCOLL_BUILD_DIR, default the current directory as under
# `make check`), and the client arguments in suite_args (--quick when
# $RCOLL_TEST_QUICK=1).
loopback_setup() {
    prov=${2:-${RCOLL_TEST_PROV:-rcoll}}
    case_limit=${RCOLL_TEST_CASE_LIMIT:-$1}
    suite_builddir=${RCOLL_BUILD_DIR:-$(pwd)}
    # libfabric's built-in providers (tcp, ofi_rxm) do not depend on this path.
    export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$suite_builddir/.libs}
    export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
    suite_args=()
    if [ "${RCOLL_TEST_QUICK:-0}" = 1 ]; then
        suite_args+=(--quick)
    fi
}

# run_loopback_suite RUNNER CLIENT LIMIT CASES [PROV]: every case (CASES:
# names, or empty for all) of the fabtests client CLIENT on loopback (see
# loopback_setup), then the closing lines.
run_loopback_suite() {
    loopback_setup "$3" "${5:-}"
    run_client_cases "$1" "$suite_builddir/fabtests/$2" "$4" ${suite_args[@]+"${suite_args[@]}"}
}
