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

# rcoll is loaded from the build tree; libfabric's built-in providers
# (tcp, ofi_rxm) do not depend on this path.
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

extra=()
if [ "${RCOLL_TEST_QUICK:-0}" = 1 ]; then
    extra+=(--quick)
fi

. "$(dirname "$0")/cases.sh"
run_client_cases run-p2p "$client" "" "${extra[@]}"
