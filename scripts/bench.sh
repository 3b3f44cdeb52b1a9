#!/usr/bin/env bash
# Installs the dependencies, builds rcoll and runs its benchmarks over
# local ranks on the tcp core, each side by side with libfabric's own
# tcp;ofi_rxm: point-to-point latency, bandwidth and receive memory, then
# the collectives (rcoll as configured, its ranks on one host taking the
# node-local path, and through the core). Pass --full for every size and
# rank count.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
"$top/scripts/install-deps.sh"
"$top/scripts/build.sh"
export FI_PROVIDER_PATH="$build/.libs"
mode=--quick
[ "${1:-}" = --full ] && mode=
"$build/fabtests/rcoll_p2p_bench" $mode
if [ -x "$build/fabtests/rcoll_coll_bench" ]; then
	"$build/fabtests/rcoll_coll_bench" $mode
fi
