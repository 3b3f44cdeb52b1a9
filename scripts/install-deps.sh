#!/usr/bin/env bash
# Installs what building and testing rcoll needs on Debian 12: a C++20
# compiler, the Autotools, libfabric 1.17 with its headers, Criterion for
# the unit tests and valgrind, Open MPI for the MPI tests, clang for fuzzing and
# clang-format for the layout check, and what builds the Debian packages and
# RPMs (debhelper, rpm; MPICH's wrappers for its librcoll-mpi). Open MPI stays
# the default MPI (mpicxx, mpirun) with MPICH beside it: Debian's alternatives
# rank it higher. As root it also mounts tracefs, through which the benchmarks
# count system calls.
set -euo pipefail

packages=(
	g++ make autoconf automake libtool pkg-config
	libfabric-dev libfabric-bin
	libcriterion-dev valgrind
	openmpi-bin libopenmpi-dev
	iproute2 procps
	clang clang-format nftables
	librdmacm-dev libpsm2-dev libpsm-infinipath1-dev python3
	debhelper rpm libmpich-dev
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "$(id -u)" -eq 0 ] && [ ! -e /sys/kernel/tracing/events ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
echo "== installing: ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
