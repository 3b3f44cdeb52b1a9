#!/bin/bash
# Runs every rcoll_coll_test case, each in its own process tree with a time
# limit, over one libfabric provider:
#   $RCOLL_TEST_PROV (or $1)   provider name, default "rcoll"; "tcp;ofi_rxm"
#                              runs the provider-neutral cases over libfabric's
#                              own util_coll collectives
#   $RCOLL_TEST_QUICK=1        fewer counts and rounds
#   $RCOLL_COLL_CASES          space-separated case names (default: all)
#   $RCOLL_COLL_MIXED_CASES    cases of the mixed pass (default: a subset)
#   $RCOLL_BUILD_DIR            build tree (default: the current directory, as
#                              under `make check`)
# On rcoll the cases run in three passes, because a group's members reach
# each other two ways: the node-local path (members on one host write into
# each other's memory; the default, and what every loopback rank takes),
# every write through the core provider (FI_RCOLL_COLL_LOCAL=0: what members
# on other hosts take, and the path verbs runs), and a mix of both in one
# group (only even ranks offer the node-local path); a fourth pass runs a
# subset on the node-local path with the shared-memory collectives off
# (FI_RCOLL_COLL_SHM=0), so that the engine's writes between members on one
# host stay covered for the calls the shared-memory path takes by default.
# Prints one line per case (PASS, FAIL or N/A) and closes with
# "N passed, N failed"; N/A cases (rcoll-only cases on another provider) are
# counted apart. Exits non-zero when a case failed.
set -u

. "$(dirname "$0")/cases.sh"
loopback_setup 400 "${1:-}"
client=$suite_builddir/fabtests/rcoll_coll_test
cases=${RCOLL_COLL_CASES:-}
args=(${suite_args[@]+"${suite_args[@]}"})

if [ "$prov" = rcoll ]; then
    case_label="node-local" run_client_pass run-coll "$client" "$cases" ${args[@]+"${args[@]}"}
    FI_RCOLL_COLL_LOCAL=0 case_label="through the core" \
        run_client_pass run-coll "$client" "$cases" ${args[@]+"${args[@]}"}
    mixed=${RCOLL_COLL_MIXED_CASES-sweep-3 sweep-5 sweep-8 types-5 large-3 barrier-semantics
        two-groups-in-flight rank-killed algorithm-allreduce-ring-5 algorithm-allgather-bruck-8
        algorithm-allgather-hierarchical-8 algorithm-allgather-multi_leader-5
        node-local-path member-too-late}
    [ -n "${RCOLL_COLL_CASES:-}" ] && mixed=$RCOLL_COLL_CASES
    RCOLL_TEST_COLL_LOCAL=even case_label="mixed: even ranks node-local" \
        run_client_pass run-coll "$client" "$mixed" ${args[@]+"${args[@]}"}
    FI_RCOLL_COLL_SHM=0 case_label="node-local, no shared-memory collectives" \
        run_client_pass run-coll "$client" "$mixed" ${args[@]+"${args[@]}"}
else
    run_client_pass run-coll "$client" "$cases" ${args[@]+"${args[@]}"}
fi
cases_summary "not applicable to \"$prov\" (listed as N/A above)"
