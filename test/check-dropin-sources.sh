#!/usr/bin/env bash
# The drop-in for libfabric's source tree (prov/rcoll/libfabric/
# Makefile.include) builds exactly the files rcoll's own build puts in
# librcoll-fi.so: the sources and headers of librcoll_fi_la, the engine,
# its kernels and the protocol library. Fails, naming the files, when a
# file was added to or removed from one list and not the other.
set -uo pipefail
srcdir=${srcdir:-$(dirname "$0")/..}

# files_of FILE VARIABLE...: the files the variables name (assignments with
# = or +=, continued by backslashes), one per line.
files_of() {
	local file=$1
	shift
	awk -v vars=" $* " '
		!cont && match($0, /^[A-Za-z0-9_]+[ \t]*\+?=/) {
			name = $0
			sub(/[ \t]*\+?=.*/, "", name)
			take = index(vars, " " name " ") > 0
			line = $0
			sub(/^[^=]*=/, "", line)
		}
		cont { line = $0 }
		!cont && !match($0, /^[A-Za-z0-9_]+[ \t]*\+?=/) { take = 0; line = "" }
		{
			cont = /\\$/
			if (take) {
				n = split(line, words, /[ \t\\]+/)
				for (i = 1; i <= n; i++)
					if (words[i] ~ /^prov\/rcoll\//) print words[i]
			}
			if (!cont) take = 0
		}' "$file"
}

own=$( {
	files_of "$srcdir/prov/rcoll/Makefile.include" librcoll_fi_la_SOURCES noinst_HEADERS
	files_of "$srcdir/prov/rcoll/engine/Makefile.include" librcoll_engine_la_SOURCES \
		librcoll_kernels_la_SOURCES
	files_of "$srcdir/prov/rcoll/proto/Makefile.include" librcoll_proto_la_SOURCES
} | sort -u)
dropin=$(files_of "$srcdir/prov/rcoll/libfabric/Makefile.include" _rcoll_files \
	_rcoll_kernel_files | sort -u)

pass=0 fail=0
if [ -z "$own" ] || [ -z "$dropin" ]; then
	echo "FAIL: no file list found (rcoll's: $(wc -w <<<"$own") files, the drop-in's: $(wc -w <<<"$dropin"))"
	fail=1
fi
while read -r f; do
	[ -n "$f" ] || continue
	echo "FAIL: $f is built by rcoll but missing from prov/rcoll/libfabric/Makefile.include"
	fail=$((fail + 1))
done < <(comm -23 <(echo "$own") <(echo "$dropin"))
while read -r f; do
	[ -n "$f" ] || continue
	echo "FAIL: prov/rcoll/libfabric/Makefile.include names $f, which rcoll's build does not"
	fail=$((fail + 1))
done < <(comm -13 <(echo "$own") <(echo "$dropin"))
# The kernels keep their own flags in both builds.
kernels_own=$(files_of "$srcdir/prov/rcoll/engine/Makefile.include" librcoll_kernels_la_SOURCES | sort)
kernels_dropin=$(files_of "$srcdir/prov/rcoll/libfabric/Makefile.include" _rcoll_kernel_files | sort)
if [ "$kernels_own" != "$kernels_dropin" ]; then
	echo "FAIL: the reduction kernels differ: rcoll builds '$(echo $kernels_own)', the drop-in '$(echo $kernels_dropin)'"
	fail=$((fail + 1))
fi
[ "$fail" -eq 0 ] && pass=$(wc -l <<<"$dropin")
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
