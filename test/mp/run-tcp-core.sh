#!/bin/bash
# The point-to-point and collective cases again, over libfabric 1.17's "tcp"
# core (FI_RCOLL_CORE=tcp): FI_RCOLL_CORE=auto prefers "net", its rewrite
# (1.18's tcp), so the other suites run there; this keeps rcoll honest on
# the implementation a library without net has, and off one core's quirks.
# The collective cases run with every write through the core
# (FI_RCOLL_COLL_LOCAL=0), the only path on which the core matters. Same
# variables as run-p2p.sh and run-coll.sh; closes with "N passed, N failed".
set -u

. "$(dirname "$0")/cases.sh"
loopback_setup 400
if [ "$prov" != rcoll ]; then
    echo "# run-tcp-core: only for rcoll (RCOLL_TEST_PROV=$prov)"
    cases_summary "not applicable"
    exit
fi
args=(${suite_args[@]+"${suite_args[@]}"})
export FI_RCOLL_CORE=tcp
case_label="tcp core" run_client_pass run-tcp-core "$suite_builddir/fabtests/rcoll_p2p_test" "" \
    ${args[@]+"${args[@]}"}
FI_RCOLL_COLL_LOCAL=0 case_label="tcp core, through the core" \
    run_client_pass run-tcp-core "$suite_builddir/fabtests/rcoll_coll_test" "${RCOLL_COLL_CASES:-}" \
    ${args[@]+"${args[@]}"}
cases_summary "not applicable to \"$prov\" (listed as N/A above)"
