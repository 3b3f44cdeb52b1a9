#!/bin/bash
# The point-to-point and collective cases again, over libfabric 1.17's "net"
# core (FI_RCOLL_CORE=net) instead of tcp: net is the code that replaced tcp
# in libfabric 1.18, so rcoll must not lean on one implementation's quirks.
# The collective cases run with every write through the core
# (FI_RCOLL_COLL_LOCAL=0), the only path on which the core matters. Same
# variables as run-p2p.sh and run-coll.sh; closes with "N passed, N failed".
set -u

. "$(dirname "$0")/cases.sh"
loopback_setup 400
if [ "$prov" != rcoll ]; then
    echo "# run-net-core: only for rcoll (RCOLL_TEST_PROV=$prov)"
    cases_summary "not applicable"
    exit
fi
if ! fi_info -p net >/dev/null 2>&1; then
    echo "FAIL run-net-core: this libfabric has no \"net\" provider (fi_info -p net)"
    cases_failed=$((cases_failed + 1))
    cases_summary "not applicable"
    exit
fi
args=(${suite_args[@]+"${suite_args[@]}"})
export FI_RCOLL_CORE=net
case_label="net core" run_client_pass run-net-core "$suite_builddir/fabtests/rcoll_p2p_test" "" \
    ${args[@]+"${args[@]}"}
FI_RCOLL_COLL_LOCAL=0 case_label="net core, through the core" \
    run_client_pass run-net-core "$suite_builddir/fabtests/rcoll_coll_test" "${RCOLL_COLL_CASES:-}" \
    ${args[@]+"${args[@]}"}
cases_summary "not applicable to \"$prov\" (listed as N/A above)"
