#!/usr/bin/env bash
# Every C++ source is laid out as .clang-format says (`make format` fixes
# it). Skipped where clang-format is not installed.
set -uo pipefail
srcdir=${srcdir:-$(dirname "$0")/..}
command -v clang-format >/dev/null || { echo "clang-format not installed: skipped"; exit 77; }
pass=0 fail=0
while IFS= read -r -d '' f; do
	if clang-format --style=file:"$srcdir/.clang-format" --dry-run -Werror "$f" 2>/dev/null; then
		pass=$((pass + 1))
	else
		echo "FAIL: ${f#"$srcdir"/} is not formatted (make format)"
		fail=$((fail + 1))
	fi
done < <(find "$srcdir/prov" "$srcdir/fabtests" "$srcdir/test" "$srcdir/util" "$srcdir/mpi" \
	\( -name '*.cpp' -o -name '*.hpp' \) -print0)
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
