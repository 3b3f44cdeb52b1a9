#!/usr/bin/env bash
# Prints, for each test that an automake test-suite.log in the current
# directory lists as FAIL or ERROR, its FAIL lines and the tail of its log,
# each line prefixed with "PREFIX TEST: " (what scripts/check.sh shows last).
#   failed-tails.sh PREFIX
prefix=$1
for t in $(grep -aE '^(FAIL|ERROR): ' test-suite.log 2>/dev/null | awk '{print $2}'); do
	{ grep -aE '^FAIL |\[FAIL\]' "$t.log" | head -n 5; tail -n 12 "$t.log"; } 2>/dev/null |
		sed "s|^|$prefix $t: |"
done
