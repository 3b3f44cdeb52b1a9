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

. "$(dirname "$0")/cases.sh"
run_loopback_suite run-coll rcoll_coll_test 400 "${RCOLL_COLL_CASES:-}" "${1:-}"
