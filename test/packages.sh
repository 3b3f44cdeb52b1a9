#!/usr/bin/env bash
# Builds rcoll's Debian packages (dpkg-buildpackage, debian/) and RPMs
# (rpmbuild --nodeps, rcoll.spec) from a release tarball in a temporary
# directory, never from the developer's tree. Then, as root: installs the
# Debian packages, checks that libfabric finds the provider without
# FI_PROVIDER_PATH, runs a collective client of rcoll-tests over loopback
# and a 2-rank job under Open MPI and under MPICH with that MPI's
# librcoll-mpi preloaded, purges the packages and checks that nothing of
# them is left. One line per check (PASS, FAIL, SKIP), then
# "N passed, N failed".
#   packages.sh TARBALL      (`make check-packages` makes it with `make dist`)
set -euo pipefail
tarball=$(realpath "${1:?usage: packages.sh rcoll-VERSION.tar.gz}")
jobs=${RCOLL_PACKAGES_JOBS:-2}
debs=(librcoll-fi1 librcoll-fi-dev rcoll-tests librcoll-mpi-common librcoll-mpi-openmpi librcoll-mpi-mpich)
rpms=(rcoll rcoll-devel rcoll-tests rcoll-mpi-common rcoll-mpi-openmpi rcoll-mpi-mpich)

passed=0
failed=0
started=$(date +%s)
pass() {
	passed=$((passed + 1))
	echo "PASS packages: $*"
}
fail() {
	failed=$((failed + 1))
	echo "FAIL packages: $*"
}
# check WHAT COMMAND...: passes when COMMAND succeeds.
check() {
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
# show_tail FILE: the end of a log, indented, after a failure.
show_tail() { tail -n 25 "$1" | sed -e 's/^/    | /'; }
finish() {
	echo "# $(($(date +%s) - started)) s"
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
apt() { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -q "$@"; }

root=0
[ "$(id -u)" -eq 0 ] && root=1
if [ "$root" -eq 1 ]; then
	# A run killed before its cleanup (a CI time limit) leaves them behind;
	# they are this test's to install and purge.
	for p in "${debs[@]}"; do
		if installed "$p"; then
			echo "# $p is installed already (a run that did not finish?): purging it first"
			apt purge "${debs[@]}" >/dev/null 2>&1 || true
			break
		fi
	done
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rcoll-packages.XXXXXX")
we_installed=0
cleanup() {
	if [ "$we_installed" -eq 1 ]; then
		apt purge "${debs[@]}" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "FAIL packages: test/packages.sh stopped at line $LINENO"; echo "$passed passed, $((failed + 1)) failed"' ERR

tar -xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'rcoll-*')
version=${src##*/rcoll-}
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$multiarch
provider=$libdir/libfabric/librcoll-fi.so

# --- Debian packages -------------------------------------------------------
deb_version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
check "debian/changelog's version $deb_version is configure's $version plus a revision" \
	test "${deb_version%-*}" = "$version"

echo "# dpkg-buildpackage -us -uc -b -j$jobs in $src"
t0=$(date +%s)
if (cd "$src" && dpkg-buildpackage -us -uc -b -j"$jobs") >"$work/deb-build.log" 2>&1; then
	pass "dpkg-buildpackage -b built the packages ($(($(date +%s) - t0)) s)"
else
	fail "dpkg-buildpackage -b failed"
	show_tail "$work/deb-build.log"
fi
deb_files=()
for p in "${debs[@]}"; do
	f=$(find "$work" -maxdepth 1 -name "${p}_${deb_version}_*.deb" | head -n 1 || true)
	if [ -n "$f" ]; then
		deb_files+=("$f")
		pass "$p: ${f##*/}"
	else
		fail "$p: no ${p}_${deb_version}_*.deb"
	fi
done
if [ -n "$(find "$work" -maxdepth 1 -name "librcoll-fi1_${deb_version}_*.deb")" ]; then
	contents=$(dpkg-deb -c "$work"/librcoll-fi1_"${deb_version}"_*.deb)
	check "librcoll-fi1 ships the provider as $provider" grep -q " \.$provider\$" <<<"$contents"
fi
if [ -n "$(find "$work" -maxdepth 1 -name "librcoll-fi-dev_${deb_version}_*.deb")" ]; then
	contents=$(dpkg-deb -c "$work"/librcoll-fi-dev_"${deb_version}"_*.deb)
	check "librcoll-fi-dev ships rdma/fi_ext_rcoll.h" \
		grep -q " \./usr/include/rdma/fi_ext_rcoll\.h\$" <<<"$contents"
fi

# --- installed, used, purged (root) ---------------------------------------
if [ "$root" -eq 0 ]; then
	echo "SKIP packages: installing, running and purging the Debian packages need root"
elif [ "${#deb_files[@]}" -ne "${#debs[@]}" ]; then
	fail "not every Debian package was built: nothing installed"
else
	we_installed=1
	if apt install --no-install-recommends "${deb_files[@]}" >"$work/install.log" 2>&1; then
		pass "apt-get install ./*.deb"
	else
		fail "apt-get install ./*.deb"
		show_tail "$work/install.log"
	fi
	check "the provider is installed as $provider" test -f "$provider"
	check "fi_rcoll(7) and librcoll-mpi(7) are installed" \
		test -f /usr/share/man/man7/fi_rcoll.7.gz -a -f /usr/share/man/man7/librcoll-mpi.7.gz

	# librcoll-fi-dev's header compiles as a client includes it.
	check "rdma/fi_ext_rcoll.h compiles in a C client" sh -c \
		"printf '#include <rdma/fi_ext_rcoll.h>\\nint main(void) { struct fi_rcoll_finishing_coll_ops o; return (int) sizeof(o) == 0 || FI_RCOLL_FINISHED != 1; }\\n' |
			cc -Wall -Werror -x c -o /dev/null -"

	# libfabric finds the provider by itself: no FI_PROVIDER_PATH.
	if env -u FI_PROVIDER_PATH FI_PROVIDER=rcoll fi_info >"$work/fi_info.log" 2>&1 &&
		grep -q '^provider: rcoll$' "$work/fi_info.log"; then
		pass "FI_PROVIDER=rcoll fi_info lists rcoll, FI_PROVIDER_PATH unset"
	else
		fail "FI_PROVIDER=rcoll fi_info does not list rcoll with FI_PROVIDER_PATH unset"
		show_tail "$work/fi_info.log"
	fi

	# A collective client of rcoll-tests: 2 ranks, barrier and allreduce, on
	# the node-local path and through the core (tcp on loopback); every call
	# is checked by the client, a wrong result shows as WRONG.
	bench=$(command -v rcoll_coll_bench || true)
	check "rcoll_coll_bench is in /usr/bin" test "$bench" = /usr/bin/rcoll_coll_bench
	if env -u FI_PROVIDER_PATH FI_TCP_IFACE=lo timeout -k 5 120 rcoll_coll_bench --rcoll-only \
		--quick --ranks 2 --sizes 8 --colls barrier,allreduce --call-limit 5 \
		>"$work/coll_bench.log" 2>&1; then
		pass "rcoll_coll_bench (2 ranks, barrier and allreduce) exits 0"
	else
		fail "rcoll_coll_bench (2 ranks, barrier and allreduce) failed"
		show_tail "$work/coll_bench.log"
	fi
	# Rows: "-" (barrier) or "8 B", the rank count, "|", rcoll's time ...
	# "|", the core path's time: both must be figures.
	figures=$(awk '
		$1 == "-" && $2 == 2 && $3 == "|" && $4 ~ /^[0-9.]+$/ && $9 ~ /^[0-9.]+$/ { n++ }
		$1 == 8 && $2 == "B" && $3 == 2 && $4 == "|" && $5 ~ /^[0-9.]+$/ && $10 ~ /^[0-9.]+$/ { n++ }
		END { print n + 0 }' "$work/coll_bench.log")
	check "rcoll_coll_bench: barrier and allreduce timed on rcoll and its core path ($figures of 2)" \
		test "$figures" -eq 2
	check "rcoll_sim models an allreduce" \
		bash -c 'rcoll_sim -c allreduce -p 8 -n 1k | grep -q "recursive_doubling"'

	# librcoll-mpi under Open MPI: rcoll-tests' MPI benchmark, preloaded.
	export RCOLL_MPI_VERBOSE=1 FI_TCP_IFACE=lo
	if env -u FI_PROVIDER_PATH timeout -k 5 120 mpirun.openmpi --allow-run-as-root --oversubscribe \
		--bind-to none -np 2 --mca pml ob1 --mca btl self,vader --mca oob_tcp_if_include lo \
		-x LD_PRELOAD="$libdir/openmpi/lib/librcoll-mpi.so" -x FI_TCP_IFACE -x RCOLL_MPI_VERBOSE \
		rcoll_mpi_coll_bench --quick --sizes 8 --colls barrier,allreduce \
		>"$work/openmpi.log" 2>&1 &&
		[ "$(grep -c '^point [a-z]* [0-9]* ok ' "$work/openmpi.log")" -eq 2 ] &&
		grep -q 'collectives offloaded to rcoll' "$work/openmpi.log"; then
		pass "Open MPI, 2 ranks, $libdir/openmpi/lib/librcoll-mpi.so preloaded:" \
			"$(sed -n 's/^rcoll-mpi: \([0-9]*\) collective calls offloaded.*/\1/p' "$work/openmpi.log") calls offloaded"
	else
		fail "Open MPI with librcoll-mpi-openmpi preloaded"
		show_tail "$work/openmpi.log"
	fi

	# librcoll-mpi under MPICH: a program built by MPICH's own wrapper.
	cat >"$work/allreduce.c" <<-'EOF'
		#include <mpi.h>
		#include <stdio.h>
		int main(int argc, char** argv)
		{
			long mine, sum = 0;
			int rank, size;
			MPI_Init(&argc, &argv);
			MPI_Comm_rank(MPI_COMM_WORLD, &rank);
			MPI_Comm_size(MPI_COMM_WORLD, &size);
			mine = rank + 1;
			for (int i = 0; i < 100; i++)
				MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
			MPI_Barrier(MPI_COMM_WORLD);
			if (rank == 0)
				printf("allreduce %s\n", sum == (long)size * (size + 1) / 2 ? "ok" : "wrong");
			MPI_Finalize();
			return 0;
		}
	EOF
	if mpicc.mpich -o "$work/allreduce-mpich" "$work/allreduce.c" >"$work/mpich.log" 2>&1 &&
		env -u FI_PROVIDER_PATH timeout -k 5 120 mpirun.mpich -np 2 \
			-genv LD_PRELOAD "$libdir/mpich/lib/librcoll-mpi.so" "$work/allreduce-mpich" \
			>>"$work/mpich.log" 2>&1 &&
		grep -q '^allreduce ok' "$work/mpich.log" &&
		grep -q 'collectives offloaded to rcoll' "$work/mpich.log"; then
		pass "MPICH, 2 ranks, $libdir/mpich/lib/librcoll-mpi.so preloaded:" \
			"$(sed -n 's/^rcoll-mpi: \([0-9]*\) collective calls offloaded.*/\1/p' "$work/mpich.log") calls offloaded"
	else
		fail "MPICH with librcoll-mpi-mpich preloaded"
		show_tail "$work/mpich.log"
	fi
	unset RCOLL_MPI_VERBOSE FI_TCP_IFACE

	if apt purge "${debs[@]}" >"$work/purge.log" 2>&1; then
		pass "apt-get purge ${debs[*]}"
		we_installed=0
	else
		fail "apt-get purge ${debs[*]}"
		show_tail "$work/purge.log"
	fi
	left=()
	for p in "${debs[@]}"; do
		if dpkg -L "$p" >/dev/null 2>&1; then left+=("$p"); fi
	done
	check "dpkg knows none of the packages any more${left[*]:+ (left: ${left[*]})}" \
		test "${#left[@]}" -eq 0
	check "no file of theirs is left" bash -c "! ls '$provider' '$libdir'/openmpi/lib/librcoll-mpi.so \
		'$libdir'/mpich/lib/librcoll-mpi.so /usr/bin/rcoll_* /usr/share/man/man7/fi_rcoll.7.gz \
		/usr/share/man/man7/librcoll-mpi.7.gz 2>/dev/null"
	check "fi_info no longer finds rcoll" \
		bash -c '! env -u FI_PROVIDER_PATH fi_info -l 2>/dev/null | grep -q "^rcoll:"'
fi

# --- RPMs --------------------------------------------------------------------
# Debian has none of the spec's BuildRequires as RPMs: --nodeps. The MPI
# compiler wrappers are Debian's, and no debuginfo packages (Debian's rpm
# lacks Fedora's debuginfo tooling).
if ! command -v rpmbuild >/dev/null; then
	fail "rpmbuild is missing (scripts/install-deps.sh installs rpm)"
else
	echo "# rpmbuild --nodeps -tb ${tarball##*/}"
	t0=$(date +%s)
	if rpmbuild --nodeps -tb "$tarball" --define "_topdir $work/rpm" \
		--define "_smp_mflags -j$jobs" --define 'debug_package %{nil}' \
		--define 'mpicxx_openmpi mpicxx.openmpi' --define 'mpirun_openmpi mpirun.openmpi' \
		--define 'mpicxx_mpich mpicxx.mpich' >"$work/rpm-build.log" 2>&1; then
		pass "rpmbuild --nodeps -tb built the RPMs ($(($(date +%s) - t0)) s)"
	else
		fail "rpmbuild --nodeps -tb failed"
		show_tail "$work/rpm-build.log"
	fi
	rpm_libdir=$(rpm --eval '%{_libdir}')
	rpm_mandir=$(rpm --eval '%{_mandir}')
	for p in "${rpms[@]}"; do
		f=$(find "$work/rpm/RPMS" -name "$p-$version-*.rpm" 2>/dev/null | head -n 1 || true)
		case $p in
		rcoll) want=$rpm_libdir/libfabric/librcoll-fi.so ;;
		rcoll-devel) want=/usr/include/rdma/fi_ext_rcoll.h ;;
		rcoll-tests) want=/usr/bin/rcoll_coll_bench ;;
		rcoll-mpi-common) want=$rpm_mandir/man7/librcoll-mpi.7 ;;
		rcoll-mpi-openmpi) want=$rpm_libdir/openmpi/lib/librcoll-mpi.so ;;
		rcoll-mpi-mpich) want=$rpm_libdir/mpich/lib/librcoll-mpi.so ;;
		esac
		if [ -z "$f" ]; then
			fail "$p: no $p-$version-*.rpm"
		else
			# A manual may be compressed, or not (Debian's rpm leaves it).
			contents=$(rpm -qlp "$f" 2>&1 || true)
			if grep -qxE "${want//./\\.}(\.[a-z0-9]+)?" <<<"$contents"; then
				pass "$p: ${f##*/} holds $want"
			else
				fail "$p: ${f##*/} does not hold $want"
				sed -e 's/^/    | /' <<<"$contents"
			fi
		fi
	done
fi

finish
