#!/usr/bin/env bash
# Applies rcoll's drop-in to a libfabric source tree (libfabric 1.17; a git
# checkout or `git archive`, before ./autogen.sh), so that libfabric builds
# rcoll like its own providers:
#   libfabric-dropin.sh LIBFABRIC_SRC_DIR
# It copies the provider's sources (the files prov/rcoll/libfabric/
# Makefile.include names, and rcoll.map) to prov/rcoll/, the drop-in's
# configure.m4 and Makefile.include beside them, the manual to
# man/man7/fi_rcoll.7, and adds rcoll where libfabric lists its providers:
# FI_PROVIDER_SETUP([rcoll]) in configure.ac, the Makefile.include in
# Makefile.am, RCOLL_INI/RCOLL_INIT in include/ofi_prov.h and its
# registration in src/fabric.c (what --enable-rcoll=yes, rcoll inside
# libfabric.so, needs). Running it again refreshes prov/rcoll/ and adds
# nothing twice. Exits 2 when the directory is not a libfabric source tree.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dropin=$top/prov/rcoll/libfabric

if [ $# -ne 1 ]; then
	echo "usage: libfabric-dropin.sh LIBFABRIC_SRC_DIR" >&2
	exit 2
fi
lf=$1
not_libfabric() {
	echo "libfabric-dropin.sh: $lf is not a libfabric source tree ($1)" >&2
	exit 2
}
[ -d "$lf" ] || not_libfabric "no such directory"
for f in configure.ac Makefile.am config/fi_provider.m4 include/ofi_prov.h src/fabric.c; do
	[ -f "$lf/$f" ] || not_libfabric "no $f"
done
grep -q '^AC_INIT(\[libfabric\]' "$lf/configure.ac" || not_libfabric "configure.ac is not libfabric's"
grep -q '^FI_PROVIDER_FINI$' "$lf/configure.ac" || not_libfabric "no FI_PROVIDER_FINI in configure.ac"
grep -q '^include prov/[a-z0-9_]*/Makefile.include$' "$lf/Makefile.am" ||
	not_libfabric "Makefile.am includes no provider"
grep -q '^#endif /\* _OFI_PROV_H_ \*/$' "$lf/include/ofi_prov.h" ||
	not_libfabric "include/ofi_prov.h does not end as expected"
grep -q '^	ofi_register_provider([A-Z0-9_]*_INIT, NULL);$' "$lf/src/fabric.c" ||
	not_libfabric "src/fabric.c registers no provider"
lf=$(cd "$lf" && pwd)

# The provider's files: exactly those the drop-in's Makefile.include builds
# or distributes.
files=$(grep -v '^#' "$dropin/Makefile.include" | grep -o 'prov/rcoll/[A-Za-z0-9_./-]*' | sort -u)
rm -rf "$lf/prov/rcoll"
for f in $files; do
	install -D -m 644 "$top/$f" "$lf/$f"
done
install -m 644 "$dropin/configure.m4" "$lf/prov/rcoll/configure.m4"
install -m 644 "$dropin/Makefile.include" "$lf/prov/rcoll/Makefile.include"
install -D -m 644 "$top/man/fi_rcoll.7" "$lf/man/man7/fi_rcoll.7"
install -D -m 644 "$top/include/rdma/fi_ext_rcoll.h" "$lf/include/rdma/fi_ext_rcoll.h"
echo "libfabric-dropin.sh: copied prov/rcoll ($(wc -w <<<"$files") files)," \
	"man/man7/fi_rcoll.7 and include/rdma/fi_ext_rcoll.h"

# insert_line FILE LINE AWK-CONDITION WHERE: adds LINE before or after
# (WHERE) the last line matching AWK-CONDITION, unless FILE holds it already.
insert_line() {
	local file=$1 line=$2 cond=$3 where=$4 tmp
	if grep -qxF -- "$line" "$file"; then
		echo "libfabric-dropin.sh: ${file#"$lf"/} already has '$line'"
		return
	fi
	tmp=$(mktemp)
	awk -v line="$line" -v where="$where" "
		$cond { last = NR }
		{ text[NR] = \$0 }
		END {
			for (i = 1; i <= NR; i++) {
				if (i == last && where == \"before\") print line
				print text[i]
				if (i == last && where == \"after\") print line
			}
		}" "$file" >"$tmp"
	cat "$tmp" >"$file"
	rm -f "$tmp"
	echo "libfabric-dropin.sh: added '$line' to ${file#"$lf"/}"
}

insert_line "$lf/configure.ac" 'FI_PROVIDER_SETUP([rcoll])' '/^FI_PROVIDER_FINI$/' before
insert_line "$lf/Makefile.am" 'include prov/rcoll/Makefile.include' \
	'/^include prov\/[a-z0-9_]*\/Makefile.include$/ && !/prov\/hook\//' after
insert_line "$lf/src/fabric.c" '	ofi_register_provider(RCOLL_INIT, NULL);' \
	'/^\tofi_register_provider\([A-Z0-9_]*_INIT, NULL\);$/ && !/HOOK_/' after

# RCOLL_INI and RCOLL_INIT as ofi_prov.h defines them for every provider.
if grep -q 'RCOLL_INIT' "$lf/include/ofi_prov.h"; then
	echo "libfabric-dropin.sh: include/ofi_prov.h already defines RCOLL_INIT"
else
	tmp=$(mktemp)
	awk '
		/^#endif \/\* _OFI_PROV_H_ \*\/$/ {
			print "#if (HAVE_RCOLL) && (HAVE_RCOLL_DL)"
			print "#  define RCOLL_INI FI_EXT_INI"
			print "#  define RCOLL_INIT NULL"
			print "#elif (HAVE_RCOLL)"
			print "#  define RCOLL_INI INI_SIG(fi_rcoll_ini)"
			print "#  define RCOLL_INIT fi_rcoll_ini()"
			print "RCOLL_INI ;"
			print "#else"
			print "#  define RCOLL_INIT NULL"
			print "#endif"
			print ""
		}
		{ print }' "$lf/include/ofi_prov.h" >"$tmp"
	cat "$tmp" >"$lf/include/ofi_prov.h"
	rm -f "$tmp"
	echo "libfabric-dropin.sh: added RCOLL_INI and RCOLL_INIT to include/ofi_prov.h"
fi

cat <<EOF
libfabric-dropin.sh: done. Then, in $lf:
  ./autogen.sh
  ./configure --enable-rcoll=dl     # or yes (inside libfabric.so), auto (the default), no
  make -j && make install
rcoll needs a C++20 compiler (g++ 10 or later) and, at run time, a core
provider for its connections (tcp or verbs).
EOF
