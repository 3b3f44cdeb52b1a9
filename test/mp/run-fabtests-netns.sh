#!/bin/bash
# libfabric's fabtests with the server and the client each on a host of its
# own (network namespaces; root only, else skipped): run-fabtests.sh with
# RCOLL_FABTESTS_HOSTS=netns.
RCOLL_FABTESTS_HOSTS=netns exec "$(dirname "$0")/run-fabtests.sh" "$@"
