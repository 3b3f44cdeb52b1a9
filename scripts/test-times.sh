#!/usr/bin/env bash
# Prints how long each test of the automake run in the current directory took,
# slowest first: a log is created when its test starts and last written when
# it ends. What check.sh shows so that a phase over its share can be split.
#   test-times.sh PREFIX [COUNT]
prefix=$1 count=${2:-12}
for trs in $(find . -name '*.trs' 2>/dev/null); do
	log=${trs%.trs}.log
	[ -f "$log" ] || continue
	read -r born ended < <(stat -c '%W %Y' "$log")
	[ "$born" -gt 0 ] && printf '%s %6d s  %s\n' "$prefix" $((ended - born)) "${log#./}"
done | sort -k2 -nr | head -n "$count"
