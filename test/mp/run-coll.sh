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

# rcoll is loaded from the build tree; libfabric's built-in providers
# (tcp, ofi_rxm) do not depend on this path.
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

extra=()
if [ "${RCOLL_TEST_QUICK:-0}" = 1 ]; then
    extra+=(--quick)
fi

. "$(dirname "$0")/cases.sh"
run_client_cases run-coll "$client" "${RCOLL_COLL_CASES:-}" "${extra[@]}"
