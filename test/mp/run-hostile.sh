#!/bin/bash
# Runs every rcoll_hostile_test case: a peer that breaks rcoll's protocol on
# purpose, against an rcoll endpoint that also serves an honest peer.
#   $RCOLL_BUILD_DIR            build tree (default: the current directory)
# Prints one line per case and closes with "N passed, N failed".
set -u

. "$(dirname "$0")/cases.sh"
loopback_setup 120 rcoll
run_client_cases run-hostile "$suite_builddir/test/hostile/rcoll_hostile_test" ""
