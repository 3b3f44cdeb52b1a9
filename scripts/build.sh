#!/usr/bin/env bash
# Configures and builds rcoll in build/ (or $RCOLL_BUILD_DIR). Extra
# arguments go to configure (e.g. --enable-sanitizers).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${RCOLL_BUILD_DIR:-$top/build}
cd "$top"
[ -x configure ] || ./autogen.sh
mkdir -p "$build"
cd "$build"
[ -f Makefile ] || "$top/configure" "$@"
make -j"$(nproc)"
