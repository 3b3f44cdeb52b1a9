// The small collectives that run straight through shared memory
// (transport/local_collectives.hpp), with every member in this process:
// each has its own published area, and a driver steps the members in an
// order drawn at random, so that members run ahead of, or lag behind, the
// others by up to a few calls. Every result is checked exactly, and so are
// the orderings the slots' reuse relies on.
#include <criterion/criterion.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/local_collectives.hpp"

using namespace rcoll;
using engine::Collective;
using engine::Errc;

namespace {

struct Member {
	std::unique_ptr<local::Published> area = std::make_unique<local::Published>();
	std::unique_ptr<local::LocalCollectives> calls;
	std::vector<std::vector<int64_t>> outputs; // per call
	std::vector<std::vector<int64_t>> inputs;
	size_t posted = 0, completed = 0;
	std::vector<uint64_t> completion_order;
	std::string wrong; // the first wrong result it got
};

struct Group {
	std::vector<Member> members;

	explicit Group(uint32_t p, size_t broadcast_max = size_t(1) << 20,
		       size_t reduction_max = size_t(1) << 20, size_t split_min = SIZE_MAX,
		       bool member_0_releases = false)
		: members(p)
	{
		std::vector<const local::Published*> areas;
		for (Member& m : members) {
			m.area->arrived.store(0);
			areas.push_back(m.area.get());
		}
		for (uint32_t r = 0; r < p; r++)
			members[r].calls = std::make_unique<local::LocalCollectives>(
				areas, *members[r].area, r,
				local::LocalCollectives::Limits{.broadcast_max = broadcast_max,
								.reduction_max = reduction_max,
								.split_min = split_min,
								.member_0_releases =
									member_0_releases});
	}
	uint32_t size() const { return uint32_t(members.size()); }
};

// int64 elements that fill a slot: the sizes below are told from it, and the
// single-copy size of the tests that take it from it too.
constexpr size_t kSlot = local::Published::kSlotBytes / sizeof(int64_t);

int64_t operand(size_t call, uint32_t rank, size_t i)
{
	return int64_t(call * 1000003 + rank * 7919 + i * 31) - 5000;
}

engine::Request request(Collective coll, uint32_t root, size_t count, Member& m, size_t call,
			uint32_t rank, uint32_t size = 1, bool in_place = false)
{
	m.inputs.emplace_back(count);
	m.outputs.emplace_back(coll == Collective::allgather ? count * size : count, -1);
	for (size_t i = 0; i < count; i++)
		m.inputs.back()[i] = operand(call, rank, i);
	if (coll == Collective::broadcast && rank == root)
		m.outputs.back() = m.inputs.back();
	engine::Request r;
	r.coll = coll;
	r.root = root;
	r.count = coll == Collective::barrier ? 0 : count;
	r.dtype = engine::Datatype::int64;
	r.op = engine::ReduceOp::sum;
	r.input = m.inputs.back().data();
	r.output = m.outputs.back().data();
	if (in_place && coll == Collective::allgather) { // the input is its block of the output
		std::copy(m.inputs.back().begin(), m.inputs.back().end(),
			  m.outputs.back().begin() + ptrdiff_t(rank * count));
		r.input = m.outputs.back().data() + rank * count;
	} else if (in_place) { // the input is the output (MPI_IN_PLACE)
		m.outputs.back() = m.inputs.back();
		r.input = r.output = m.outputs.back().data();
	}
	r.context = reinterpret_cast<void*>(call + 1);
	return r;
}

// Every member posts the calls of `script` in order, at most `window` ahead
// of its completions, stepping in an order drawn from `seed`.
struct Call {
	Collective coll;
	uint32_t root;
	size_t count;
	bool in_place = false;
};

// What is wrong with member `r`'s result of call `k` ("" if nothing).
std::string wrong_result(const Member& m, uint32_t r, size_t k, const Call& c, uint32_t p)
{
	auto wrong = [&](const char* what, size_t i, int64_t got, int64_t want) {
		char text[160];
		std::snprintf(text, sizeof text,
			      "member %u, call %zu (%d, root %u), %s [%zu]: %lld, want %lld", r, k,
			      int(c.coll), c.root, what, i, (long long)got, (long long)want);
		return std::string(text);
	};
	if (c.coll == Collective::allgather) {
		for (size_t i = 0; i < p * c.count; i++)
			if (m.outputs[k][i] != operand(k, uint32_t(i / c.count), i % c.count))
				return wrong("element", i, m.outputs[k][i],
					     operand(k, uint32_t(i / c.count), i % c.count));
		return "";
	}
	for (size_t i = 0; i < c.count; i++) {
		// Untouched: a reduce's output away from the root.
		int64_t want = c.in_place ? operand(k, r, i) : -1;
		if (c.coll == Collective::broadcast)
			want = operand(k, c.root, i);
		else if (c.coll == Collective::allreduce ||
			 (c.coll == Collective::reduce && r == c.root)) {
			want = 0;
			for (uint32_t s = 0; s < p; s++)
				want += operand(k, s, i);
		}
		if (m.outputs[k][i] != want)
			return wrong("element", i, m.outputs[k][i], want);
	}
	return "";
}

// Member `r`'s call `call` (from 1) completed: its result is checked at
// once, then its buffers are poisoned, as an application may reuse them
// then: a member still reading them would get these values.
void completed(Member& m, uint32_t r, uint64_t call, const std::vector<Call>& script, uint32_t p)
{
	m.completion_order.push_back(call);
	m.completed++;
	if (m.wrong.empty())
		m.wrong = wrong_result(m, r, call - 1, script[call - 1], p);
	constexpr int64_t kPoison = 0x5a5a5a5a5a5a5a5a;
	std::fill(m.inputs[call - 1].begin(), m.inputs[call - 1].end(), kPoison);
	std::fill(m.outputs[call - 1].begin(), m.outputs[call - 1].end(), kPoison);
}

// Every member completed every call, in order, with the right result.
void check_results(const Group& g, const std::vector<Call>& script)
{
	for (uint32_t r = 0; r < g.size(); r++) {
		const Member& m = g.members[r];
		cr_assert_eq(m.completed, script.size(), "member %u completed %zu of %zu calls", r,
			     m.completed, script.size());
		cr_assert(m.wrong.empty(), "%s", m.wrong.c_str());
		for (size_t k = 0; k < script.size(); k++)
			cr_assert_eq(m.completion_order[k], k + 1,
				     "member %u completed out of order", r);
	}
}

void run(Group& g, const std::vector<Call>& script, unsigned seed, size_t window = 3)
{
	std::mt19937 rng(seed);
	const uint32_t p = g.size();
	for (size_t round = 0; round < 1000000; round++) {
		bool all_done = true;
		const uint32_t r = uint32_t(rng() % p);
		Member& m = g.members[r];
		if (m.posted < script.size() && m.posted - m.completed < window && rng() % 2) {
			const Call& c = script[m.posted];
			engine::Request req =
				request(c.coll, c.root, c.count, m, m.posted, r, p, c.in_place);
			cr_assert(m.calls->takes(req));
			cr_assert_eq(m.calls->post(req), Errc::ok);
			m.posted++;
		}
		m.calls->progress();
		engine::Completion done;
		while (m.calls->next_completion(done)) {
			cr_assert_eq(done.status, Errc::ok);
			completed(m, r, uint64_t(reinterpret_cast<uintptr_t>(done.context)), script,
				  p);
		}
		for (const Member& each : g.members)
			all_done &= each.completed == script.size();
		if (all_done)
			return;
	}
	cr_assert_fail("the calls did not complete");
}

// `script` with its roots taken modulo `p`.
std::vector<Call> for_members(const std::vector<Call>& script, uint32_t p)
{
	std::vector<Call> calls;
	for (Call c : script) {
		c.root %= p;
		calls.push_back(c);
	}
	return calls;
}

// Single-copy broadcasts from `min_bytes`: the reader stands in for
// cross-memory attach (every member is in this process).
void read_in_process(Group& g, size_t min_bytes, size_t allreduce_min_bytes = SIZE_MAX)
{
	for (Member& m : g.members)
		m.calls->enable_single_copy(
			[](uint32_t, uint64_t address, void* target, size_t length) {
				std::memcpy(target, reinterpret_cast<const void*>(address), length);
				return 0;
			},
			{min_bytes, allreduce_min_bytes});
}

} // namespace

Test(local_collectives, mixed_calls_under_random_interleavings)
{
	const std::vector<Call> script = {{Collective::barrier, 0, 0},
					  {Collective::allreduce, 0, 1},
					  {Collective::broadcast, 1, 5},
					  {Collective::broadcast, 1, 5},
					  {Collective::allreduce, 0, 64},
					  {Collective::reduce, 2, 9},
					  {Collective::barrier, 0, 0},
					  {Collective::broadcast, 0, kSlot},
					  {Collective::reduce, 0, 3},
					  {Collective::allreduce, 0, kSlot},
					  {Collective::broadcast, 2, 1},
					  {Collective::barrier, 0, 0},
					  // Larger than a slot: in chunks, the last one short.
					  {Collective::broadcast, 1, kSlot * 5 / 2},
					  {Collective::allreduce, 0, 2 * kSlot + 1},
					  {Collective::reduce, 1, 3 * kSlot - 1},
					  {Collective::broadcast, 0, kSlot * 3},
					  {Collective::barrier, 0, 0},
					  // Allgather blocks, one of them over a slot.
					  {Collective::allgather, 0, 1},
					  {Collective::allgather, 0, kSlot * 3 / 2},
					  {Collective::allgather, 0, 7}};
	for (bool member_0_releases : {false, true})
		for (uint32_t p : {1u, 2u, 3u, 4u, 8u}) {
			for (unsigned seed = 1; seed <= 40; seed++) {
				const std::vector<Call> calls = for_members(script, p);
				Group g(p, size_t(1) << 20, size_t(1) << 20, SIZE_MAX,
					member_0_releases);
				run(g, calls, seed * 7 + p);
				check_results(g, calls);
			}
		}
}

// Payloads of up to Published::kLineBytes ride beside the arrival flag:
// a root that runs ahead rewrites the line's halves in turn, with sizes
// at and around the limit (3 int64 = 24 bytes fit, 4 do not, so line and
// slot of one parity alternate), calls over a slot whose last chunk is
// that small (kSlot int64 fill a slot), and nothing of theirs goes in a
// slot; some of them in place.
Test(local_collectives, small_payloads_beside_the_flag)
{
	static_assert(local::Published::kLineBytes == 3 * sizeof(int64_t));
	std::vector<Call> script;
	for (int round = 0; round < 8; round++)
		for (const Call& c : std::vector<Call>{{Collective::broadcast, 0, 1},
						       {Collective::broadcast, 0, 3},
						       {Collective::allreduce, 0, 2},
						       {Collective::broadcast, 1, 4},
						       {Collective::reduce, 1, 3},
						       {Collective::allgather, 0, 1},
						       {Collective::broadcast, 0, 2},
						       {Collective::barrier, 0, 0},
						       {Collective::broadcast, 1, kSlot + 1},
						       {Collective::allgather, 0, kSlot + 2},
						       {Collective::reduce, 1, kSlot + 3},
						       // In place: a member's own part is
						       // not read back from its line.
						       {Collective::allreduce, 0, 3, true},
						       {Collective::allgather, 0, 2, true},
						       {Collective::reduce, 2, 1, true},
						       {Collective::allreduce, 0, 4, true},
						       // Sizes past the line, in place too.
						       {Collective::allreduce, 0, 7},
						       {Collective::allgather, 0, 8},
						       {Collective::broadcast, 1, 56},
						       {Collective::reduce, 1, 57},
						       {Collective::allreduce, 0, 9, true},
						       {Collective::allgather, 0, 5, true},
						       {Collective::reduce, 0, 30, true}})
			script.push_back(c);
	for (uint32_t p : {2u, 3u, 5u}) {
		for (unsigned seed = 1; seed <= 30; seed++) {
			const std::vector<Call> calls = for_members(script, p);
			Group g(p);
			run(g, calls, seed * 13 + p, 6);
			check_results(g, calls);
		}
	}
	// Where the bytes went: a 16-byte broadcast in the root's line, not in
	// its slot; a 32-byte one in its slot.
	const std::vector<Call> two = {{Collective::broadcast, 0, 2},
				       {Collective::broadcast, 0, 4}};
	Group g(2);
	run(g, two, 1);
	check_results(g, two);
	const local::Published& root = *g.members[0].area;
	const std::byte zero[32] = {};
	cr_assert_neq(std::memcmp(root.line[1], zero, 16), 0, "call 1 went beside the flag");
	cr_assert_eq(std::memcmp(root.slots[1], zero, 16), 0, "and not in a slot");
	cr_assert_neq(std::memcmp(root.slots[0], zero, 32), 0, "call 2 went in a slot");
	cr_assert_eq(std::memcmp(root.line[0], zero, 24), 0, "and not beside the flag");
}

// Reductions in shares (every one of them here: split_min 1), among the
// other calls, with shares of no element (fewer elements than members),
// short last chunks, in place, and the reduce's root anywhere; and mixed
// with single-copy broadcasts, whose readers say they finished in the same
// flag that a reduced share is announced in.
Test(local_collectives, reductions_in_shares)
{
	const std::vector<Call> script = {{Collective::allreduce, 0, 1},
					  {Collective::allreduce, 0, 3},
					  {Collective::reduce, 1, 2},
					  {Collective::barrier, 0, 0},
					  {Collective::allreduce, 0, 7, true},
					  {Collective::reduce, 2, 9, true},
					  {Collective::broadcast, 1, kSlot * 5 / 2},
					  {Collective::allreduce, 0, kSlot},
					  {Collective::allreduce, 0, kSlot * 5 / 2, true},
					  {Collective::reduce, 0, 3 * kSlot - 1},
					  {Collective::allgather, 0, kSlot * 3 / 2},
					  {Collective::reduce, 1, 2 * kSlot + 1, true},
					  {Collective::allreduce, 0, kSlot + 1},
					  {Collective::broadcast, 0, 4 * kSlot + 1}};
	for (uint32_t p : {2u, 3u, 4u, 5u, 8u}) {
		for (unsigned seed = 1; seed <= 30; seed++) {
			const std::vector<Call> calls = for_members(script, p);
			Group g(p, size_t(1) << 20, size_t(1) << 20, 1);
			read_in_process(g, 2 * kSlot * sizeof(int64_t));
			run(g, calls, seed * 11 + p);
			check_results(g, calls);
		}
	}
}

// The same protocol with each member in a thread of its own, as members
// are processes of their own: the flags' orderings, not a driver's order,
// must keep every slot and buffer intact.
Test(local_collectives, members_in_threads)
{
	std::vector<Call> script;
	for (int round = 0; round < 10; round++)
		for (const Call& c :
		     std::vector<Call>{{Collective::allreduce, 0, kSlot * 5 / 2},
				       {Collective::reduce, 1, 2 * kSlot + 1, true},
				       {Collective::broadcast, 2, kSlot * 5 / 2},
				       {Collective::allreduce, 0, 3, true},
				       {Collective::barrier, 0, 0},
				       {Collective::allgather, 0, kSlot * 5 / 2},
				       {Collective::reduce, 0, 600},
				       {Collective::allgather, 0, 100, true},
				       {Collective::allgather, 0, kSlot * 5 / 2, true},
				       {Collective::broadcast, 0, 4 * kSlot + 1},
				       // Beside the flag, and a last chunk there.
				       {Collective::broadcast, 1, 1},
				       {Collective::broadcast, 2, 3},
				       {Collective::allgather, 0, 2},
				       {Collective::allreduce, 0, 1},
				       {Collective::broadcast, 0, kSlot + 1},
				       // In one copy.
				       {Collective::allreduce, 0, 4 * kSlot + 3, true},
				       {Collective::allreduce, 1, 3 * kSlot}})
			script.push_back(c);
	for (uint32_t p : {2u, 3u, 4u}) {
		const std::vector<Call> calls = for_members(script, p);
		Group g(p, size_t(1) << 20, size_t(1) << 20, 4096);
		read_in_process(g, 2 * kSlot * sizeof(int64_t), 3 * kSlot * sizeof(int64_t));
		std::vector<std::thread> threads;
		for (uint32_t r = 0; r < p; r++)
			threads.emplace_back([&g, &calls, r, p] {
				Member& m = g.members[r];
				// A member that gave up leaves the others waiting: they give
				// up too, and the counts below say so.
				const auto give_up =
					std::chrono::steady_clock::now() + std::chrono::seconds(60);
				while (m.completed < calls.size() &&
				       std::chrono::steady_clock::now() < give_up) {
					if (m.posted < calls.size() && m.posted - m.completed < 3) {
						const Call& c = calls[m.posted];
						engine::Request req =
							request(c.coll, c.root, c.count, m,
								m.posted, r, p, c.in_place);
						if (m.calls->post(req) != Errc::ok)
							return;
						m.posted++;
					}
					m.calls->progress();
					engine::Completion done;
					while (m.calls->next_completion(done)) {
						if (done.status != Errc::ok)
							return;
						completed(m, r,
							  uint64_t(reinterpret_cast<uintptr_t>(
								  done.context)),
							  calls, p);
					}
					std::this_thread::yield();
				}
			});
		for (std::thread& t : threads)
			t.join();
		check_results(g, calls);
	}
}

// Broadcasts from the root's buffer and allgathers from every member's
// block in one copy (the reader stands in for cross-memory attach: every
// member is in this process), in place too and beyond the slotted limit,
// mixed with the slotted calls; and a reader that fails fails the call and
// the group.
Test(local_collectives, single_copy_calls)
{
	const std::vector<Call> script = {
		{Collective::broadcast, 1, 5000},       {Collective::allreduce, 0, 300},
		{Collective::broadcast, 0, 9000},       {Collective::barrier, 0, 0},
		{Collective::allgather, 0, 4096},       {Collective::broadcast, 2, 4097},
		{Collective::allgather, 0, 5000, true}, {Collective::allgather, 0, 100},
		{Collective::broadcast, 2, 100},        {Collective::allgather, 0, 70000}};
	for (unsigned seed = 1; seed <= 30; seed++) {
		// Members that take turns on the CPUs (member 0 releases the
		// barrier, reductions in the slots up to their limit) or not.
		for (bool crowded : {true, false}) {
			Group g(3, size_t(1) << 20, crowded ? size_t(64) << 10 : size_t(1) << 20,
				SIZE_MAX, crowded);
			read_in_process(g, 4096 * 8);
			run(g, script, seed);
			check_results(g, script);
		}
	}
	Group g(2);
	for (Member& m : g.members)
		m.calls->enable_single_copy(
			[](uint32_t, uint64_t, void*, size_t) { return -ESRCH; }, {64});
	cr_assert_eq(g.members[0].calls->post(
			     request(Collective::broadcast, 0, 100, g.members[0], 0, 0)),
		     Errc::ok);
	cr_assert_eq(g.members[1].calls->post(
			     request(Collective::broadcast, 0, 100, g.members[1], 0, 1)),
		     Errc::ok);
	g.members[1].calls->progress();
	engine::Completion c;
	cr_assert(g.members[1].calls->next_completion(c));
	cr_assert_eq(c.status, Errc::io_error, "a failed read completed with %d", int(c.status));
	cr_assert(g.members[1].calls->failed());
}

// Allreduces in one copy (each member reads its share of the others' inputs
// straight out of their buffers, then their reduced shares) among the other
// calls: shares larger and smaller than a slot, of no element, in place, with
// pieces through the slot, under random interleavings and windows.
Test(local_collectives, allreduces_in_one_copy)
{
	const size_t min = 2 * kSlot;
	const std::vector<Call> script = {{Collective::allreduce, 0, min},
					  {Collective::broadcast, 1, 5000},
					  {Collective::allreduce, 0, min - 1},
					  {Collective::allreduce, 0, 5 * kSlot + 3, true},
					  {Collective::barrier, 0, 0},
					  {Collective::allreduce, 0, 9 * kSlot + 1},
					  {Collective::reduce, 1, 3 * kSlot},
					  {Collective::allgather, 0, 5000, true},
					  {Collective::allreduce, 0, 4 * kSlot, true},
					  {Collective::allreduce, 0, 7}};
	for (uint32_t p : {2u, 3u, 4u, 5u})
		for (unsigned seed = 1; seed <= 12; seed++) {
			const std::vector<Call> calls = for_members(script, p);
			Group g(p, size_t(1) << 24, size_t(1) << 24, seed % 2 ? 64 : SIZE_MAX);
			read_in_process(g, 4096 * 8, min * sizeof(int64_t));
			run(g, calls, seed * 7 + p, seed % 4 + 1);
			check_results(g, calls);
		}
	// Fewer elements than members: shares of no element.
	Group g(5, size_t(1) << 24, size_t(1) << 24);
	read_in_process(g, 64, 8);
	const std::vector<Call> few = {{Collective::allreduce, 0, 1},
				       {Collective::allreduce, 0, 3, true},
				       {Collective::allreduce, 0, 6}};
	run(g, few, 1);
	check_results(g, few);
}

// A member whose input and output overlap in part fails its one-copy
// allreduce (the others read its input while it writes its output), and the
// others' calls fail with it rather than wait for good.
Test(local_collectives, a_one_copy_allreduce_needs_apart_or_equal_buffers)
{
	Group g(2);
	read_in_process(g, 64, 64);
	for (uint32_t r = 0; r < 2; r++) {
		Member& m = g.members[r];
		engine::Request req = request(Collective::allreduce, 0, 100, m, 0, r, 2);
		if (r == 1) {
			m.inputs.back().resize(150);
			req.input = m.inputs.back().data();
			req.output = m.inputs.back().data() + 50;
		}
		cr_assert_eq(m.calls->post(req), Errc::ok);
	}
	Errc status[2] = {Errc::ok, Errc::ok};
	for (size_t round = 0; round < 50; round++)
		for (uint32_t r = 0; r < 2; r++) {
			Member& m = g.members[r];
			m.calls->progress();
			engine::Completion c;
			while (m.calls->next_completion(c)) {
				m.completed++;
				status[r] = c.status;
			}
		}
	cr_assert_eq(g.members[1].completed, 1u);
	cr_assert_eq(status[1], Errc::invalid_argument);
	cr_assert_eq(g.members[0].completed, 1u, "member 0 still waits");
	cr_assert_neq(status[0], Errc::ok, "member 0 completed without error");
}

// Members that post one call with different counts (inline, in slots, in
// one copy, pipelined, on either side of the single-copy size) or another
// datatype or operation: every member that reads another's bytes fails the
// call with invalid_argument, and with it the group, rather than take them
// for its own; the others' calls fail too, none waits for good.
Test(local_collectives, members_that_post_different_calls_fail_them)
{
	struct Pair {
		Collective coll;
		size_t count[2]; // member 0 (the root), the others
		engine::Datatype dtype = engine::Datatype::int64;
		engine::ReduceOp op = engine::ReduceOp::sum;
	};
	const Pair pairs[] = {
		{Collective::broadcast, {1, 2}},
		{Collective::broadcast, {2, 1}},
		{Collective::broadcast, {100, 200}},
		{Collective::broadcast, {4096, 1024}},
		{Collective::broadcast, {1024, 4096}},
		{Collective::broadcast, {9000, 5000}},
		{Collective::allreduce, {3, 2}},
		{Collective::allreduce, {kSlot * 5 / 2, 2 * kSlot}},
		{Collective::reduce, {300, 200}},
		{Collective::allgather, {100, 50}},
		{Collective::allgather, {4096, 1024}},
		// The flag's line against a slot, slots of other lengths.
		{Collective::broadcast, {3, 4}},
		{Collective::broadcast, {8, 7}},
		{Collective::allreduce, {56, 57}},
		{Collective::allreduce, {20, 3}},
		{Collective::allgather, {57, 56}},
		{Collective::reduce, {8, 20}},
		{Collective::allreduce, {8, 8}, {}, engine::ReduceOp::max},
		{Collective::allreduce, {8, 8}, engine::Datatype::uint64},
		// On either side of the one-copy allreduce's size, and in one copy.
		{Collective::allreduce, {3 * kSlot, 3 * kSlot - 1}},
		{Collective::allreduce, {3 * kSlot - 1, 3 * kSlot}},
		{Collective::allreduce, {4 * kSlot, 3 * kSlot}},
		{Collective::allreduce, {3 * kSlot, 3 * kSlot}, engine::Datatype::uint64},
	};
	for (const Pair& pair : pairs)
		for (bool split : {false, true}) {
			Group g(3, size_t(1) << 24, size_t(1) << 24, split ? 64 : SIZE_MAX);
			read_in_process(g, 4096 * 8, 3 * kSlot * 8);
			for (uint32_t r = 0; r < 3; r++) {
				Member& m = g.members[r];
				engine::Request req =
					request(pair.coll, 0, pair.count[r ? 1 : 0], m, 0, r, 3);
				if (r) {
					req.dtype = pair.dtype;
					req.op = pair.op;
				}
				cr_assert_eq(m.calls->post(req), Errc::ok);
			}
			bool reader_failed_first = false;
			for (size_t round = 0; round < 100; round++)
				for (uint32_t r = 0; r < 3; r++) {
					Member& m = g.members[r];
					m.calls->progress();
					engine::Completion c;
					while (m.calls->next_completion(c)) {
						m.completed++;
						reader_failed_first |=
							c.status == Errc::invalid_argument;
						const bool reads =
							pair.coll == Collective::broadcast ? r != 0
							: pair.coll == Collective::reduce  ? r == 0
											   : true;
						cr_assert(!reads || c.status != Errc::ok,
							  "call %d (%zu and %zu elements): member "
							  "%u completed "
							  "it without error",
							  int(pair.coll), pair.count[0],
							  pair.count[1], r);
					}
				}
			cr_assert(reader_failed_first,
				  "call %d (%zu and %zu elements): no member saw the "
				  "mismatch",
				  int(pair.coll), pair.count[0], pair.count[1]);
			for (uint32_t r = 0; r < 3; r++)
				cr_assert_eq(
					g.members[r].completed, 1u,
					"call %d (%zu and %zu elements): member %u still waits",
					int(pair.coll), pair.count[0], pair.count[1], r);
		}
}

// Each member posts the next call of its own script once its last one
// ended, for `rounds` rounds of every member; returns each member's
// statuses, in order.
std::vector<std::vector<Errc>> run_scripts(Group& g, const std::vector<std::vector<Call>>& scripts,
					   size_t rounds = 400)
{
	const auto p = uint32_t(scripts.size());
	std::vector<std::vector<Errc>> status(p);
	for (size_t round = 0; round < rounds; round++)
		for (uint32_t r = 0; r < p; r++) {
			Member& m = g.members[r];
			const std::vector<Call>& script = scripts[r];
			if (m.posted < script.size() && m.calls->outstanding() == 0) {
				const Call& c = script[m.posted];
				const Errc e = m.calls->post(request(c.coll, c.root, c.count, m,
								     m.posted, r, p, c.in_place));
				m.posted++;
				if (e != Errc::ok)
					status[r].push_back(e); // the group failed already
			}
			m.calls->progress();
			engine::Completion done;
			while (m.calls->next_completion(done))
				status[r].push_back(done.status);
		}
	return status;
}

// Members that post their calls in another order, or name another root,
// after calls they agreed on: what an older call left in a half, or what a
// member that contributes nothing to the current chunk never wrote there,
// must not pass for the current call. Each member posts its next call once
// its last one ended; the calls listed fail, and no call waits for good.
Test(local_collectives, calls_in_another_order_fail)
{
	struct Scenario {
		const char* name;
		bool single_copy;
		std::vector<std::vector<Call>> scripts;             // per member
		std::vector<std::pair<uint32_t, size_t>> must_fail; // member, call
	};
	using C = Collective;
	// Three calls of `coll` and a barrier; member 1 swaps the last two.
	auto against_a_barrier = [](C coll, size_t count) {
		std::vector<Call> calls(3, Call{coll, 0, count});
		calls.push_back({C::barrier, 0, 0});
		std::vector<Call> swapped = calls;
		std::swap(swapped[2], swapped[3]);
		return std::vector<std::vector<Call>>{calls, swapped};
	};
	const Scenario scenarios[] = {
		{"an allreduce against a barrier",
		 false,
		 against_a_barrier(C::allreduce, 4),
		 {{0, 2}, {1, 3}}},
		{"an allgather in one copy against a barrier",
		 true,
		 against_a_barrier(C::allgather, 16),
		 {{0, 2}, {1, 3}}},
		{"a broadcast from another root",
		 false,
		 {{{C::broadcast, 1, 4}, {C::allreduce, 0, 4}, {C::broadcast, 0, 4}},
		  {{C::broadcast, 1, 4}, {C::allreduce, 0, 4}, {C::broadcast, 0, 4}},
		  {{C::broadcast, 1, 4}, {C::allreduce, 0, 4}, {C::broadcast, 1, 4}}},
		 {{2, 2}}},
	};
	for (const Scenario& sc : scenarios) {
		const auto p = uint32_t(sc.scripts.size());
		Group g(p);
		if (sc.single_copy)
			read_in_process(g, 64);
		const auto status = run_scripts(g, sc.scripts);
		for (uint32_t r = 0; r < p; r++)
			cr_assert_eq(status[r].size(), sc.scripts[r].size(),
				     "%s: member %u ended %zu of its %zu calls", sc.name, r,
				     status[r].size(), sc.scripts[r].size());
		for (auto [r, k] : sc.must_fail)
			cr_assert_neq(status[r][k], Errc::ok,
				      "%s: member %u completed its call %zu without error", sc.name,
				      r, k);
		for (uint32_t r = 0; r < p; r++)
			for (size_t k = 0; k < 2; k++)
				cr_assert_eq(status[r][k], Errc::ok,
					     "%s: member %u's call %zu failed", sc.name, r, k);
	}
}

// A reduce of two members in several chunks, where the others read nothing
// (each checks the root's signature instead): roots named differently, or a
// reduce against barriers, fail; before that check, they ended without error
// (the root of the shifted calls with another call's bytes), or a barrier
// after them waited for good.
Test(local_collectives, mismatched_reduces_of_two_members_fail)
{
	using C = Collective;
	struct Scenario {
		const char* name;
		std::vector<std::vector<Call>> scripts;
	};
	const Scenario scenarios[] = {
		{"each names the other the root",
		 {{{C::reduce, 1, 2 * kSlot}}, {{C::reduce, 0, 2 * kSlot}}}},
		{"each names the other the root, in place",
		 {{{C::reduce, 1, 5 * kSlot, true}}, {{C::reduce, 0, 5 * kSlot, true}}}},
		{"each names the other the root, 3 and 2 chunks, then a barrier",
		 {{{C::reduce, 1, 3 * kSlot}, {C::barrier, 0, 0}},
		  {{C::reduce, 0, 2 * kSlot}, {C::barrier, 0, 0}}}},
		{"a reduce to a member that posts barriers",
		 {{{C::reduce, 1, 3 * kSlot}, {C::barrier, 0, 0}},
		  {{C::barrier, 0, 0},
		   {C::barrier, 0, 0},
		   {C::barrier, 0, 0},
		   {C::barrier, 0, 0}}}},
		{"calls shifted by a small reduce to the other root",
		 {{{C::reduce, 1, 100}, {C::reduce, 0, 2 * kSlot}},
		  {{C::reduce, 0, 2 * kSlot}, {C::reduce, 0, 2 * kSlot}}}},
	};
	for (const Scenario& sc : scenarios) {
		Group g(2, size_t(1) << 24, size_t(1) << 24, 16384);
		const auto status = run_scripts(g, sc.scripts);
		bool failed = false;
		for (uint32_t r = 0; r < 2; r++) {
			cr_assert_eq(status[r].size(), sc.scripts[r].size(),
				     "%s: member %u ended %zu of its %zu calls", sc.name, r,
				     status[r].size(), sc.scripts[r].size());
			for (Errc e : status[r])
				failed |= e != Errc::ok;
		}
		cr_assert(failed, "%s: every call completed without error", sc.name);
	}
}

// A barrier: nobody completes call n before every member posted it.
Test(local_collectives, barrier_waits_for_the_last_member)
{
	Group g(3);
	engine::Request r = request(Collective::barrier, 0, 0, g.members[0], 0, 0);
	cr_assert_eq(g.members[0].calls->post(r), Errc::ok);
	r = request(Collective::barrier, 0, 0, g.members[1], 0, 1);
	cr_assert_eq(g.members[1].calls->post(r), Errc::ok);
	engine::Completion c;
	for (int i = 0; i < 10; i++)
		for (uint32_t m = 0; m < 2; m++) {
			g.members[m].calls->progress();
			cr_assert_not(g.members[m].calls->next_completion(c),
				      "member %u left the barrier before member 2 entered", m);
		}
	r = request(Collective::barrier, 0, 0, g.members[2], 0, 2);
	cr_assert_eq(g.members[2].calls->post(r), Errc::ok);
	for (uint32_t m = 0; m < 3; m++) {
		g.members[m].calls->progress();
		cr_assert(g.members[m].calls->next_completion(c));
	}
}

// Where the members take turns on the CPUs, member 0 leaves a barrier
// first: the last member to enter finds every flag set but still waits for
// member 0 to release it, so that a broadcast member 0 roots next is on its
// way before the others leave. Members with a CPU each leave as soon as
// they see every flag.
Test(local_collectives, member_0_leaves_the_barrier_first)
{
	Group flat(2);
	for (uint32_t m = 0; m < 2; m++) // member 1 enters last
		cr_assert_eq(flat.members[m].calls->post(
				     request(Collective::barrier, 0, 0, flat.members[m], 0, m)),
			     Errc::ok);
	engine::Completion c;
	cr_assert(flat.members[1].calls->next_completion(c),
		  "the last to enter a barrier with a CPU each waited for member 0");
	Group g(4, size_t(1) << 20, size_t(1) << 20, SIZE_MAX, true);
	for (uint32_t m = 0; m < 4; m++) { // member 3 enters last
		engine::Request r = request(Collective::barrier, 0, 0, g.members[m], 0, m);
		cr_assert_eq(g.members[m].calls->post(r), Errc::ok);
	}
	for (uint32_t m = 3; m >= 1; m--) {
		g.members[m].calls->progress();
		cr_assert_not(g.members[m].calls->next_completion(c),
			      "member %u left the barrier before member 0", m);
	}
	g.members[0].calls->progress();
	cr_assert(g.members[0].calls->next_completion(c));
	for (uint32_t m = 1; m < 4; m++) {
		g.members[m].calls->progress();
		cr_assert(g.members[m].calls->next_completion(c), "member %u was not released", m);
		cr_assert_eq(c.status, Errc::ok);
	}
}

// A root that broadcasts twice more before a member copied the first one
// must wait: slot 1 % 2 is not written again before that member is past it.
Test(local_collectives, a_slot_is_not_rewritten_before_every_member_read_it)
{
	Group g(2);
	Member& root = g.members[0];
	Member& slow = g.members[1];
	for (size_t k = 0; k < 3; k++)
		cr_assert_eq(root.calls->post(request(Collective::broadcast, 0, 4, root, k, 0)),
			     Errc::ok);
	root.calls->progress();
	engine::Completion c;
	size_t root_done = 0;
	while (root.calls->next_completion(c))
		root_done++;
	cr_assert_eq(root_done, 2, "the root ran %zu broadcasts ahead of its member", root_done);
	// The slow member takes the first two; then the third can go.
	for (size_t k = 0; k < 3; k++) {
		cr_assert_eq(slow.calls->post(request(Collective::broadcast, 0, 4, slow, k, 1)),
			     Errc::ok);
		slow.calls->progress();
		root.calls->progress();
	}
	while (root.calls->next_completion(c))
		root_done++;
	cr_assert_eq(root_done, 3);
	size_t slow_done = 0;
	while (slow.calls->next_completion(c))
		slow_done++;
	cr_assert_eq(slow_done, 3);
	for (size_t k = 0; k < 3; k++)
		for (size_t i = 0; i < 4; i++)
			cr_assert_eq(slow.outputs[k][i], operand(k, 0, i));
}

Test(local_collectives, takes_only_what_fits)
{
	Group g(4, 8192, 4096);
	local::LocalCollectives& s = *g.members[0].calls;
	engine::Request r;
	r.coll = Collective::barrier;
	cr_assert(s.takes(r));
	r.coll = Collective::allreduce;
	r.dtype = engine::Datatype::int64;
	r.op = engine::ReduceOp::sum;
	r.count = 4096 / 8;
	cr_assert(s.takes(r));
	r.count++;
	cr_assert_not(s.takes(r), "a reduction above its threshold");
	r.coll = Collective::broadcast;
	cr_assert(s.takes(r), "a broadcast under its own threshold");
	r.count = 8192 / 8 + 1;
	cr_assert_not(s.takes(r), "a broadcast above its threshold");
	r.coll = Collective::allreduce;
	r.count = 1;
	r.dtype = engine::Datatype::float32;
	r.op = engine::ReduceOp::bor;
	cr_assert_not(s.takes(r), "a reduction the kernels do not have");
	r.coll = Collective::broadcast;
	r.root = 4;
	cr_assert_not(s.takes(r), "a root outside the group");
	r.coll = Collective::alltoall;
	r.root = 0;
	cr_assert_not(s.takes(r));
	r.coll = Collective::broadcast;
	r.algorithm = engine::Algorithm::binomial;
	cr_assert_not(s.takes(r), "a forced algorithm is the engine's");
}

// A failed group ends the queued calls with the error; later posts fail.
Test(local_collectives, failure_ends_every_queued_call)
{
	Group g(2);
	Member& m = g.members[0];
	for (size_t k = 0; k < 3; k++)
		cr_assert_eq(m.calls->post(request(Collective::allreduce, 0, 2, m, k, 0)),
			     Errc::ok);
	m.calls->fail(Errc::io_error);
	engine::Completion c;
	size_t ended = 0;
	while (m.calls->next_completion(c)) {
		cr_assert_eq(c.status, Errc::io_error);
		ended++;
	}
	cr_assert_eq(ended, 3);
	cr_assert_eq(m.calls->outstanding(), 0u);
	cr_assert_eq(m.calls->post(request(Collective::barrier, 0, 0, m, 3, 0)), Errc::io_error);
}

// A member that failed the group fails the others' calls, even a barrier
// every member entered before the failure.
Test(local_collectives, another_members_failure_fails_this_ones_calls)
{
	Group g(2);
	Member& a = g.members[0];
	Member& b = g.members[1];
	cr_assert_eq(a.calls->post(request(Collective::barrier, 0, 0, a, 0, 0)), Errc::ok);
	a.calls->fail(Errc::io_error);
	cr_assert_eq(b.calls->post(request(Collective::barrier, 0, 0, b, 0, 1)), Errc::ok);
	b.calls->progress();
	engine::Completion c;
	cr_assert(b.calls->next_completion(c));
	cr_assert_eq(c.status, Errc::io_error, "the barrier completed with %d", int(c.status));
	cr_assert(b.calls->failed());
}

// A member that fails the group gives its buffers back at once, perhaps
// while another member still reads one (single copy): the reader must
// fail its call rather than deliver what the application wrote there since.
Test(local_collectives, a_reader_fails_when_the_member_it_reads_gives_up)
{
	for (Collective coll : {Collective::allgather, Collective::allreduce}) {
		Group g(2);
		for (uint32_t r = 0; r < 2; r++)
			g.members[r].calls->enable_single_copy(
				[r, &g](uint32_t member, uint64_t address, void* target,
					size_t length) {
					if (r == 0 && member == 1) {
						// Member 1's group fails in the middle of the read: its
						// call ends and the application reuses its input.
						g.members[1].calls->fail(Errc::io_error);
						std::fill(g.members[1].inputs[0].begin(),
							  g.members[1].inputs[0].end(),
							  int64_t(0x5a5a5a5a5a5a5a5a));
					}
					std::memcpy(target, reinterpret_cast<const void*>(address),
						    length);
					return 0;
				},
				{64, 64});
		Member& reader = g.members[0];
		Member& quitter = g.members[1];
		cr_assert_eq(reader.calls->post(request(coll, 0, 100, reader, 0, 0, 2)), Errc::ok);
		cr_assert_eq(quitter.calls->post(request(coll, 0, 100, quitter, 0, 1, 2)),
			     Errc::ok);
		reader.calls->progress();
		engine::Completion c;
		cr_assert(reader.calls->next_completion(c), "the reader's call %d did not end",
			  int(coll));
		cr_assert_neq(
			c.status, Errc::ok,
			"the reader's call %d succeeded with what it read after member 1 gave up",
			int(coll));
	}
}

// A member whose published header names another length than the call's
// (a buggy or hostile process writing its own shared memory) is not read
// from: the readers fail the call rather than copy what the header points
// at. Broadcasts, allgathers and both steps of an allreduce in one copy.
Test(local_collectives, a_member_whose_header_names_another_length_is_not_read)
{
	struct Read {
		uint32_t reader, member;
	};
	auto reading = [](Group& g, std::vector<Read>& reads) {
		for (uint32_t r = 0; r < g.size(); r++)
			g.members[r].calls->enable_single_copy(
				[r, &reads](uint32_t member, uint64_t address, void* target,
					    size_t length) {
					reads.push_back({r, member});
					std::memcpy(target, reinterpret_cast<const void*>(address),
						    length);
					return 0;
				},
				{64, 64});
	};
	// The length is the header's third word (after the two addresses).
	auto bend_length = [](Group& g, uint32_t member) {
		uint64_t length = 0xdead00;
		std::memcpy(g.members[member].area->slots[1] + 2 * sizeof(uint64_t), &length,
			    sizeof(length));
	};
	auto statuses = [](Group& g) {
		std::vector<Errc> status(g.size(), Errc::ok);
		std::vector<bool> ended(g.size(), false);
		for (int round = 0; round < 50; round++)
			for (uint32_t r = 0; r < g.size(); r++) {
				g.members[r].calls->progress();
				engine::Completion c;
				while (g.members[r].calls->next_completion(c)) {
					ended[r] = true;
					status[r] = c.status;
				}
			}
		for (uint32_t r = 0; r < g.size(); r++)
			cr_assert(ended[r], "member %u still waits", r);
		return status;
	};
	auto reads_of = [](const std::vector<Read>& reads, uint32_t member) {
		return std::count_if(reads.begin(), reads.end(),
				     [member](const Read& r) { return r.member == member; });
	};

	// Broadcast: the root's header is bent before anyone reads it.
	for (uint32_t p : {2u, 3u}) {
		Group g(p);
		std::vector<Read> reads;
		reading(g, reads);
		cr_assert_eq(g.members[0].calls->post(request(Collective::broadcast, 0, 5000,
							      g.members[0], 0, 0, p)),
			     Errc::ok);
		bend_length(g, 0);
		for (uint32_t r = 1; r < p; r++)
			cr_assert_eq(g.members[r].calls->post(request(Collective::broadcast, 0,
								      5000, g.members[r], 0, r, p)),
				     Errc::ok);
		const auto status = statuses(g);
		cr_assert_eq(reads.size(), 0u, "%zu reads of a bent header", reads.size());
		for (uint32_t r = 1; r < p; r++)
			cr_assert_eq(status[r], Errc::io_error, "member %u: %d", r, int(status[r]));
	}
	// Allgather: member 1's header is bent; the others do not read it.
	{
		Group g(3);
		std::vector<Read> reads;
		reading(g, reads);
		for (uint32_t r = 0; r < 3; r++) {
			if (r == 2)
				bend_length(g, 1);
			cr_assert_eq(g.members[r].calls->post(request(Collective::allgather, 0, 100,
								      g.members[r], 0, r, 3)),
				     Errc::ok);
		}
		const auto status = statuses(g);
		cr_assert_eq(reads_of(reads, 1), 0);
		cr_assert_eq(status[0], Errc::io_error);
		cr_assert_eq(status[2], Errc::io_error);
	}
	// Allreduce: bent before the reduce-scatter reads member 1's input, or
	// after it, before the allgather reads member 2's reduced share.
	for (const bool late : {false, true})
		for (const bool in_place : {false, true}) {
			Group g(3);
			std::vector<Read> reads;
			reading(g, reads);
			const uint32_t bent = late ? 2 : 1;
			for (uint32_t r = 0; r < 3; r++) {
				if (!late && r == 2)
					bend_length(g, bent);
				cr_assert_eq(g.members[r].calls->post(
						     request(Collective::allreduce, 0, 3 * kSlot,
							     g.members[r], 0, r, 3, in_place)),
					     Errc::ok);
			}
			if (late) {
				g.members[0].calls->progress();
				g.members[1].calls->progress();
				bend_length(g, bent);
				reads.clear();
			}
			const auto status = statuses(g);
			cr_assert_eq(reads_of(reads, bent), 0, "member %u read (late %d)", bent,
				     int(late));
			for (uint32_t r = 0; r < 3; r++)
				if (r != bent)
					cr_assert_neq(status[r], Errc::ok, "member %u ok (late %d)",
						      r, int(late));
		}
}

// Members that disagree on whether a call goes in one copy: the glue decides
// it from every member's `verdict`, read out of each one's file at the
// moment each member finishes its join, and a member may rewrite its own
// verdict's reads_all bit in between (its own memory), so that honest
// member 0 enables single copy and honest member 1 does not. A broadcast (or
// allgather block) of 32 to 64 KiB is then one sequence number on both,
// with the same signature: member 1 must not copy member 0's exposed header
// out of its slot and complete the call as if it were the payload.
Test(local_collectives, members_that_disagree_on_single_copy_do_not_take_the_header_for_data)
{
	for (Collective coll : {Collective::allgather, Collective::broadcast}) {
		Group g(2);
		g.members[0].calls->enable_single_copy(
			[](uint32_t, uint64_t address, void* target, size_t length) {
				std::memcpy(target, reinterpret_cast<const void*>(address), length);
				return 0;
			},
			{4096 * 8});
		const size_t count = 5000; // 40000 bytes: one copy for member 0, one slot for 1
		for (uint32_t r = 0; r < 2; r++)
			cr_assert_eq(g.members[r].calls->post(
					     request(coll, 0, count, g.members[r], 0, r, 2)),
				     Errc::ok);
		Errc status[2] = {Errc::ok, Errc::ok};
		bool ended[2] = {false, false};
		for (int round = 0; round < 50; round++)
			for (uint32_t r : {1u, 0u}) {
				g.members[r].calls->progress();
				engine::Completion c;
				while (g.members[r].calls->next_completion(c)) {
					ended[r] = true;
					status[r] = c.status;
				}
			}
		cr_assert(ended[1], "call %d: member 1 still waits", int(coll));
		const std::string wrong = wrong_result(g.members[1], 1, 0, Call{coll, 0, count}, 2);
		cr_assert(status[1] != Errc::ok || wrong.empty(),
			  "call %d: member 1 completed without error with %s", int(coll),
			  wrong.c_str());
	}
}
