#!/usr/bin/env bash
# Shows that each glue test can fail: builds the provider from a copy of the
# sources with one deliberate bug at a time (a mutant) and runs the glue test
# that must catch it. A mutant passes when its test fails; a mutation whose
# text is no longer in the source fails the run, so the list keeps up with
# the code. Prints "N passed, N failed".
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap '[ -n "${RCOLL_KEEP_MUTANTS:-}" ] || rm -rf "$work"' EXIT

# name | test that must fail | file | text | replacement (\n for newlines)
mutants=(
	"completions-in-posting-order|completions_out_of_order|prov/rcoll/src/transmit.cpp|	auto* r = static_cast<BufferRecord*>(owner);\n|	auto* r = static_cast<BufferRecord*>(owner);\n	bool first = true;\n	ep.tx.buffers->for_each([&](BufferRecord& oldest) {\n		if (first && oldest.in_core)\n			r = &oldest, first = false;\n	});\n"
	"refused-send-dropped|core_refuses_posts|prov/rcoll/src/transmit.cpp|	if (ret == -FI_EAGAIN) {\n		peer.backlog.push_back(r);\n		tx.backlogged++;\n		return 0;\n	}|	if (ret == -FI_EAGAIN) {\n		tx.buffers->release(*r);\n		return 0;\n	}"
	"failed-peer-keeps-rendezvous-receives|peer_fails_mid_rendezvous|prov/rcoll/src/peer_failure.cpp|		if (op.peer == &peer && op.machine)\n|		if (op.peer == &peer && op.machine && false)\n"
	"refused-collective-write-counted-as-posted|collective_over_refusing_reordering_core|prov/rcoll/src/coll_transport.cpp|	if (ret)\n		return refused(ret);\n	claim(ctx, w.has_immediate ? 2 : 1);|	if (ret && ret != -FI_EAGAIN)\n		return refused(ret);\n	claim(ctx, w.has_immediate ? 2 : 1);"
	"both-accept-simultaneous-connects|simultaneous_connect|prov/rcoll/src/conn.cpp|		if (!self && ours_live && address.key < hs.endpoint_key) {|		if (false) {"
	"refused-join-tells-no-member|join_refused_on_one_member|prov/rcoll/src/coll_group.cpp|	send_notice(join_id, rank, peers, notice);\n	take_early(join_id);|	take_early(join_id);"
	"half-sent-join-not-failed|join_record_refused_by_core|prov/rcoll/src/coll_group.cpp|		joined.closed = true;\n		begin_failure(joined, -ret);|		joined.closed = true;"
	"join-done-with-its-record-in-the-core|join_completes_once_its_records_left|prov/rcoll/src/coll_group.cpp|g.records_unsent)\n		return;|false)\n		return;"
	"join-done-although-a-record-failed|join_fails_when_its_record_could_not_go|prov/rcoll/src/coll_group.cpp|	if (g.record_error)\n		return begin_failure|	if (false)\n		return begin_failure"
	"closed-joining-group-left-joining|group_closed_mid_join|prov/rcoll/src/coll_group.cpp|	if (g.state == CollGroup::State::joining) {\n		// Closed before|	if (false) {\n		// Closed before"
)

echo "== copying the sources and building the glue test"
cd "$top"
mkdir -p "$work/src"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/src"
(cd "$work/src" && ./autogen.sh >"$work/autogen.log" 2>&1)
mkdir -p "$work/build"
cd "$work/build"
"$work/src/configure" --quiet >"$work/configure.log" 2>&1
targets="librcoll-fi.la test/glue/libfake-fi.la test/glue/glue_test"
make -j"$(nproc)" $targets >"$work/make.log" 2>&1 || { tail -20 "$work/make.log"; exit 1; }
if ! ./test/glue/glue_test >"$work/baseline.log" 2>&1; then
	echo "the unmutated provider fails its glue tests:"
	tail -20 "$work/baseline.log"
	exit 1
fi

passed=0
failed=0
for m in "${mutants[@]}"; do
	IFS='|' read -r name test file from to <<<"$m"
	src="$work/src/$file"
	cp "$src" "$src.orig"
	if ! python3 - "$src" "$from" "$to" <<'EOF'; then
import sys
path, old, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
text = open(path).read()
if text.count(old) != 1:
    sys.exit(1)
open(path, "w").write(text.replace(old, new))
EOF
		echo "FAIL: mutant $name: its text is not (exactly once) in $file"
		failed=$((failed + 1))
		continue
	fi
	if ! make -j"$(nproc)" librcoll-fi.la >"$work/$name.make.log" 2>&1; then
		echo "FAIL: mutant $name does not build"
		tail -5 "$work/$name.make.log"
		failed=$((failed + 1))
	elif ./test/glue/glue_test --filter="glue/$test" >"$work/$name.log" 2>&1; then
		echo "FAIL: mutant $name: glue/$test passed with the bug in"
		failed=$((failed + 1))
	else
		why=$(grep -A2 -m1 -E 'Assertion Failed|Timed out|signal' "$work/$name.log" |
			grep -vE '^\[----\] *$|Assertion Failed' | head -1 | sed 's/^\[----\] *//' || true)
		echo "PASS: mutant $name: caught by glue/$test (${why:-failed})"
		passed=$((passed + 1))
	fi
	mv "$src.orig" "$src"
	touch "$src" # newer than the mutant's object: rebuilt next time
done
make -j"$(nproc)" librcoll-fi.la >/dev/null 2>&1
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
