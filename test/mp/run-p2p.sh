#!/bin/bash
# Runs every rcoll_p2p_test case, each in its own process tree with a time
# limit, over one libfabric provider:
#   $RCOLL_TEST_PROV (or $1)   provider name, default "rcoll"; "tcp;ofi_rxm"
#                              runs the same cases over libfabric's own stack
#   $RCOLL_TEST_QUICK=1        smaller sizes and fewer iterations
#   $RCOLL_BUILD_DIR            build tree (default: the current directory, as
#                              under `make check`)
# Prints one line per case and closes with "N passed, N failed"; cases that
# do not apply to the provider are listed as N/A and counted apart.
set -u

. "$(dirname "$0")/cases.sh"
run_loopback_suite run-p2p rcoll_p2p_test 300 "" "${1:-}"
