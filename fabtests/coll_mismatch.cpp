// Members that post one call with different arguments: an application
// error, which MPI leaves undefined. Whatever the path, it must not make the
// provider write outside a buffer, hang past its timeout, or keep the group
// from closing. Where every member takes the shared-memory path, each member
// that reads another's bytes must also fail its call rather than take them
// for its own, and so must a reduce's other member where it checks the
// root's call (a reduce of more than one chunk).
#include "coll_cases.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace fabtests::coll {

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Each call gets a fresh group: a mismatch may fail the group.
struct Mismatch {
	fi_collective_op coll;
	size_t count[2]; // group ranks 0 and 1
	fi_datatype type[2];
	fi_op op[2];
	int root[2] = {0, 0}; // the root each rank names
};

constexpr Mismatch kMismatches[] = {
	// Inline beside the flag, in one slot, in slots and in one copy on
	// either side of FI_RCOLL_COLL_SHM_SINGLE_COPY_MIN, pipelined.
	{FI_BROADCAST, {8, 16}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_BROADCAST, {16, 8}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_BROADCAST, {200, 100}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_BROADCAST, {16384, 65536}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_BROADCAST, {65536, 16384}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_BROADCAST, {1 << 20, 1 << 21}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_BROADCAST, {1 << 21, 1 << 20}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_ALLREDUCE, {2, 4}, {FI_INT32, FI_INT32}, {FI_SUM, FI_SUM}},
	{FI_ALLREDUCE, {2000, 1000}, {FI_INT32, FI_INT32}, {FI_SUM, FI_SUM}},
	{FI_ALLREDUCE, {1 << 18, 1 << 17}, {FI_INT32, FI_INT32}, {FI_SUM, FI_SUM}},
	// Same bytes, another datatype or operation.
	{FI_ALLREDUCE, {64, 32}, {FI_INT32, FI_INT64}, {FI_SUM, FI_SUM}},
	{FI_ALLREDUCE, {64, 64}, {FI_INT32, FI_INT32}, {FI_SUM, FI_MAX}},
	{FI_REDUCE, {1000, 500}, {FI_INT64, FI_INT64}, {FI_SUM, FI_SUM}},
	{FI_ALLGATHER, {100, 200}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	{FI_ALLGATHER, {65536, 16384}, {FI_UINT8, FI_UINT8}, {FI_SUM, FI_SUM}},
	// Each names the other the root: two members that read nothing.
	{FI_REDUCE, {32769, 32769}, {FI_INT64, FI_INT64}, {FI_SUM, FI_SUM}, {1, 0}},
	{FI_REDUCE, {300000, 300000}, {FI_INT64, FI_INT64}, {FI_SUM, FI_SUM}, {1, 0}},
};

// The shared-memory path's chunk (the manual's "chunks of 64 KiB").
constexpr size_t kChunkBytes = size_t(64) << 10;

constexpr milliseconds kCollTimeout{1000};
// The timeout, the members' stop confirmations, and slack for a loaded host.
constexpr seconds kBound{20};

// Whether group rank `me` checks the other member's call in `m` on the
// shared-memory path: it reads the other's bytes, or, as a reduce's other
// member in more than one chunk, the root's signature.
bool checks_other(const Mismatch& m, int me)
{
	const auto r = static_cast<size_t>(me);
	switch (m.coll) {
	case FI_BROADCAST: return me != m.root[r];
	case FI_REDUCE:
		return me == m.root[r] || m.count[r] * datatype_info(m.type[r]).size > kChunkBytes;
	default: return true;
	}
}

void run_mismatched_calls(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("the case sets rcoll's FI_RCOLL_COLL_TIMEOUT_MS");
	setenv("FI_RCOLL_COLL_TIMEOUT_MS", std::to_string(kCollTimeout.count()).c_str(), 1);
	const bool detects = shared_memory_path();
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	ProgressingBarrier sync(ep, boot, boot.size());
	size_t failed = 0, checking = 0;
	for (const Mismatch& m : kMismatches) {
		auto group = join_shape(ep, boot, world, Shape::full);
		const int me = group->rank();
		const auto r = static_cast<size_t>(me);
		const CallSpec call{m.coll, m.count[r], m.type[r], m.op[r], m.root[r]};
		const std::string what =
			strfmt("%s of %zu %s %s, root %d (the other member: %zu %s %s, root %d)",
			       collective_name(m.coll), m.count[r], datatype_name(m.type[r]),
			       op_name(m.op[r]), m.root[r], m.count[1 - r],
			       datatype_name(m.type[1 - r]), op_name(m.op[1 - r]), m.root[1 - r]);
		const BufferBytes bytes = buffer_bytes(call, group->size(), me);
		const bool has_input = m.coll != FI_BROADCAST;
		const bool has_output = m.coll != FI_REDUCE || me == m.root[r];
		GuardedBuffer in, out;
		in.prepare(bytes.input);
		out.prepare(bytes.output);
		fill_pattern(in.bytes(), make_seed(0x515, r, 1));
		fill_pattern(out.bytes(), make_seed(0x515, r, 2));
		const std::vector<std::byte> in_before(in.span().begin(), in.span().end());
		const std::vector<std::byte> out_before(out.span().begin(), out.span().end());

		OpContext ctx;
		const ssize_t rc = issue(ep, *group, call, has_input ? &in : nullptr,
					 has_output ? &out : nullptr, ctx);
		expect(rc == 0 || rc == -FI_EINVAL || rc == -FI_EIO, "%s: posting returned %zd",
		       what.c_str(), rc);
		if (rc == 0) {
			ep.track(ctx);
			ep.wait_done(ctx, what, kBound);
		}
		in.expect_guards(what + ", input");
		out.expect_guards(what + ", output");
		// (A broadcast has no input: std::equal, not memcmp of a null.)
		expect(std::equal(in_before.begin(), in_before.end(), in.span().begin()),
		       "%s: the input changed", what.c_str());
		if (m.coll == FI_BROADCAST && me == m.root[r])
			expect(std::equal(out_before.begin(), out_before.end(), out.span().begin()),
			       "%s: the root's buffer changed", what.c_str());
		if (checks_other(m, me)) {
			checking++;
			failed += rc != 0 || ctx.error != 0;
			expect(!detects || rc != 0 || ctx.error != 0,
			       "%s completed without error on the shared-memory path",
			       what.c_str());
		}
		sync.wait();
		expect(group->close() == 0, "%s: fi_close of its group failed", what.c_str());
	}
	// The same calls in another order, after two that agree: rank 1 enters
	// the barrier while rank 0 runs its third allreduce.
	auto group = join_shape(ep, boot, world, Shape::full);
	const int me = group->rank();
	std::vector<fi_collective_op> order = {FI_ALLREDUCE, FI_ALLREDUCE, FI_ALLREDUCE,
					       FI_BARRIER};
	if (me == 1)
		std::swap(order[2], order[3]);
	std::string outcomes;
	for (size_t k = 0; k < order.size(); k++) {
		const bool barrier = order[k] == FI_BARRIER;
		const CallSpec call{order[k], barrier ? 0u : 4u, FI_INT64, FI_SUM, 0};
		const std::string what = strfmt("call %zu (%s) of calls in another order", k,
						collective_name(order[k]));
		GuardedBuffer in, out;
		in.prepare(32);
		out.prepare(32);
		fill_pattern(in.bytes(), make_seed(0x516, k, static_cast<uint64_t>(me)));
		OpContext ctx;
		const ssize_t rc = issue(ep, *group, call, barrier ? nullptr : &in,
					 barrier ? nullptr : &out, ctx);
		if (rc == 0) {
			ep.track(ctx);
			ep.wait_done(ctx, what, kBound);
		}
		in.expect_guards(what + ", input");
		out.expect_guards(what + ", output");
		const bool ok = rc == 0 && ctx.error == 0;
		outcomes += ok ? "ok " : "failed ";
		if (k < 2)
			expect(ok, "%s failed (%zd, %s)", what.c_str(), rc, fi_strerror(ctx.error));
		// Rank 0's third allreduce reads a member in a barrier; rank 1's
		// last finds the group failed.
		else if (!barrier)
			expect(!detects || !ok,
			       "%s completed without error on the shared-memory path",
			       what.c_str());
	}
	sync.wait();
	expect(group->close() == 0, "fi_close of the group of calls in another order failed");
	sync.wait();
	summary_note(boot,
		     strfmt("%zu mismatched calls: guards and inputs intact, groups closed; "
			    "rank 0 failed %zu of the %zu calls that check the other's "
			    "call%s; calls in another order: %s",
			    std::size(kMismatches), failed, checking,
			    detects ? " (shared-memory path: must be all)" : "", outcomes.c_str()));
}

} // namespace

void add_mismatch_cases(std::vector<CollCase>& cases)
{
	cases.push_back(
		{"mismatched-calls",
		 "2 ranks post one broadcast, allreduce, reduce or allgather with different "
		 "counts, datatypes, operations or roots, each on a fresh group: no byte "
		 "outside the buffers, inputs and the root's buffer intact, every call ends, "
		 "every group closes; on the shared-memory path every member that reads "
		 "the other's bytes, or checks the root's call, fails its call",
		 2, seconds(300), "", run_mismatched_calls});
}

} // namespace fabtests::coll
