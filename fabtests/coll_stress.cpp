// Many collectives in flight on two groups of one endpoint at once, joins
// racing the connections they open, and long runs of calls of every size.
#include "coll_cases.hpp"

#include <cstring>

#include <array>
#include <deque>
#include <memory>

namespace fabtests::coll {

namespace {

using std::chrono::seconds;

constexpr int kRanks = 5;
constexpr std::array<fi_collective_op, 9> kMix = {FI_ALLREDUCE, FI_BROADCAST, FI_BARRIER,
						  FI_ALLGATHER, FI_REDUCE,    FI_ALLTOALL,
						  FI_GATHER,    FI_SCATTER,   FI_REDUCE_SCATTER};

// The k-th call of a group of `size`: the mix rotates collectives, counts
// (0..~300 elements), datatypes, operations and roots.
CallSpec mixed_call(size_t k, int size)
{
	const fi_collective_op coll = kMix[k % kMix.size()];
	const DatatypeInfo& type = datatypes()[(k / kMix.size()) % datatypes().size()];
	const size_t count = (k * 37) % 301;
	return {coll, count, type.type, valid_op(type.type, k / 3),
		static_cast<int>((k / 2) % static_cast<size_t>(size))};
}

// A group of every rank, in rank order.
Group join_all(CollEndpoint& ep, Bootstrap& boot, const std::vector<fi_addr_t>& world,
	       const std::string& label, std::chrono::milliseconds budget)
{
	const int n = boot.size();
	std::vector<int> everyone(static_cast<size_t>(n));
	for (int r = 0; r < n; ++r)
		everyone[static_cast<size_t>(r)] = r;
	return Group(ep,
		     av_set_range(ep, world[0], world[static_cast<size_t>(n - 1)], 1,
				  static_cast<size_t>(n)),
		     everyone, world, boot.rank(), label, budget);
}

// One group's stream of calls, with a window of them in flight.
struct Stream {
	Stream(const Group* g, uint64_t stream_id) : group(g), id(stream_id) {}

	const Group* group;
	uint64_t id; // the same on every member of the group
	size_t posted = 0;
	size_t verified = 0;
	size_t unsupported = 0; // calls the provider does not offer, never posted
	std::deque<std::unique_ptr<CheckedCall>> in_flight; // oldest first
	std::vector<std::unique_ptr<CheckedCall>> idle;
};

// Groups A = ranks 0..3 (start/end) and B = ranks 4,3,2,1 (inserted in that
// order): ranks 1..3 belong to both, with different group ranks. Every rank
// posts 1,000 calls per group, up to `window` per group in flight before it
// waits for the oldest; members of both groups interleave the two streams
// in a rank-dependent pattern, so the provider sees operations of the two
// groups arrive in different orders at different members.
void run_two_groups(Bootstrap& boot, const TestOptions& options)
{
	const size_t calls = options.quick ? 200 : 1000;
	const size_t window = 24;
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int me = boot.rank();

	std::unique_ptr<Group> a, b;
	if (me <= 3)
		a = std::make_unique<Group>(ep, av_set_range(ep, world[0], world[3], 1, 4),
					    std::vector<int>{0, 1, 2, 3}, world, me,
					    "group A {0,1,2,3}");
	if (me >= 1) {
		const std::array<fi_addr_t, 4> order = {world[4], world[3], world[2], world[1]};
		b = std::make_unique<Group>(ep, av_set_inserted(ep, order),
					    std::vector<int>{4, 3, 2, 1}, world, me,
					    "group B {4,3,2,1}");
	}

	std::deque<Stream> streams; // std::vector would insist on copying a deque of unique_ptr
	if (a)
		streams.emplace_back(a.get(), 0);
	if (b)
		streams.emplace_back(b.get(), 1);

	auto retire_oldest = [&](Stream& s) {
		CheckedCall& oldest = *s.in_flight.front();
		oldest.wait(ep);
		oldest.verify();
		++s.verified;
		s.idle.push_back(std::move(s.in_flight.front()));
		s.in_flight.pop_front();
	};
	auto post_next = [&](Stream& s) {
		const CallSpec spec = mixed_call(s.posted, s.group->size());
		if (!provider_supports(ep, spec)) {
			++s.unsupported;
			++s.posted;
			return;
		}
		if (s.in_flight.size() == window)
			retire_oldest(s);
		std::unique_ptr<CheckedCall> call;
		if (s.idle.empty()) {
			call = std::make_unique<CheckedCall>();
		} else {
			call = std::move(s.idle.back());
			s.idle.pop_back();
		}
		boot.note(strfmt("last posted: call %zu, %s on %s", s.posted,
				 spec.describe().c_str(), s.group->label().c_str()));
		call->prepare(*s.group, spec, make_seed(0x5743, s.id, s.posted));
		call->post(ep);
		++s.posted;
		s.in_flight.push_back(std::move(call));
	};

	// Rank r posts (r % 3) + 1 calls of one stream before switching.
	const size_t burst = static_cast<size_t>(me % 3) + 1;
	for (;;) {
		bool any = false;
		for (size_t i = 0; i < streams.size(); ++i) {
			Stream& s = streams[(i + static_cast<size_t>(me)) % streams.size()];
			for (size_t n = 0; n < burst && s.posted < calls; ++n) {
				post_next(s);
				any = true;
			}
		}
		if (!any)
			break;
	}
	for (Stream& s : streams)
		while (!s.in_flight.empty())
			retire_oldest(s);
	Tally tally;
	for (const Stream& s : streams) {
		expect(s.verified + s.unsupported == calls, "%s: %zu of %zu calls verified",
		       s.group->label().c_str(), s.verified, calls);
		tally.verified += s.verified;
		tally.unsupported += s.unsupported;
	}
	ProgressingBarrier(ep, boot, boot.size()).wait();
	tally.require_some(options.provider);
	summary_note(boot, strfmt("%zu mixed calls per group, up to %zu in flight per group, on 2 "
				  "overlapping groups%s",
				  calls, window, tally.skipped_text().c_str()));
}

// Every round: fresh endpoints (so no connection exists yet), addresses
// exchanged, and every rank joins the full group at once, which makes every
// pair connect to each other simultaneously. Once its FI_JOIN_COMPLETE is
// read, a rank stops calling the provider until every rank has joined (a
// plain bootstrap barrier, as fi_multinode_coll's out-of-band barrier): a
// join that completed while its own records still waited in the provider
// for a connection leaves a member waiting for a rank that no longer
// progresses, and that member's join times out.
void run_join_storm(Bootstrap& boot, const TestOptions& options)
{
	const int rounds = options.quick ? 10 : 30;
	const int n = boot.size();
	for (int round = 0; round < rounds; ++round) {
		CollEndpoint ep({options.provider});
		const auto world = ep.exchange_addresses(boot);
		boot.note(strfmt("round %d: joining", round));
		const Group group = join_all(ep, boot, world, strfmt("round %d", round),
					     std::chrono::seconds(10));
		boot.note(
			strfmt("round %d: joined, waiting for the others without progress", round));
		boot.barrier(std::chrono::seconds(15));
		// The group works: one verified barrier, then nobody closes while
		// a peer may still need it.
		OpContext ctx;
		post(ep, group, CallSpec{FI_BARRIER}, nullptr, nullptr, ctx);
		ep.wait_done(ctx, strfmt("round %d: fi_barrier", round));
		expect_collective_completion(ctx, strfmt("round %d: fi_barrier", round));
		ProgressingBarrier(ep, boot, n).wait();
	}
	summary_note(boot, strfmt("%d rounds of fresh endpoints joining at once, then a barrier "
				  "without progress",
				  rounds));
}

// The benchmark users write first: every rank repeats an allreduce of
// 8 B, 64 B, ... 4 MiB (FI_UINT64, FI_SUM), with a barrier before each call,
// `iterations` times per size, on one group for the whole run. Every result
// is verified, and any error completion (a member's connection reset in the
// middle, say) fails the case.
void run_size_ladder(Bootstrap& boot, const TestOptions& options)
{
	const int iterations = options.quick ? 20 : 200;
	const int n = boot.size();
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const Group group = join_all(ep, boot, world, "all ranks", kDefaultWait);
	size_t calls = 0;
	for (size_t bytes = 8; bytes <= (size_t{4} << 20);
	     bytes = bytes < (size_t{2} << 20) ? bytes * 8 : bytes * 2) {
		const CallSpec allreduce{FI_ALLREDUCE, bytes / sizeof(uint64_t), FI_UINT64, FI_SUM,
					 0};
		for (int i = 0; i < iterations; ++i) {
			const std::string what =
				strfmt("%s, call %d", allreduce.describe().c_str(), i);
			OpContext barrier;
			post(ep, group, CallSpec{FI_BARRIER}, nullptr, nullptr, barrier);
			ep.wait_done(barrier, "barrier before " + what);
			expect_collective_completion(barrier, "barrier before " + what);
			CheckedCall call;
			call.prepare(group, allreduce,
				     make_seed(0x1ADD, bytes, static_cast<uint64_t>(i)));
			call.post(ep);
			call.wait(ep);
			call.verify();
			++calls;
		}
	}
	ProgressingBarrier(ep, boot, n).wait();
	summary_note(boot, strfmt("%zu verified allreduces of 8 B..4 MiB (x8, then 4 MiB), %d per "
				  "size, each after a "
				  "barrier, on one group",
				  calls, iterations));
}

// Two groups of the same members, told apart by fi_av_set_attr's comm_key:
// even ranks join and call the first one first, odd ranks the second one
// first. Matched by join order instead, each rank's first group would meet
// the others' second and deliver the other call's data.
void run_comm_keys(Bootstrap& boot, const TestOptions& options)
{
	if (options.provider != "rcoll")
		throw NotApplicable("groups told apart by comm_key are an rcoll feature");
	CollEndpoint ep({options.provider});
	const auto world = ep.exchange_addresses(boot);
	const int me = boot.rank(), n = boot.size();
	std::vector<int> everyone(static_cast<size_t>(n));
	for (int r = 0; r < n; ++r)
		everyone[static_cast<size_t>(r)] = r;
	auto keyed_set = [&](const char* key) {
		fi_av_set_attr attr{};
		attr.count = world.size();
		attr.start_addr = world.front();
		attr.end_addr = world.back();
		attr.stride = 1;
		attr.comm_key_size = std::strlen(key);
		attr.comm_key = reinterpret_cast<uint8_t*>(const_cast<char*>(key));
		fid_av_set* set = nullptr;
		FT_CHECK(fi_av_set(ep.av(), &attr, &set, nullptr));
		return AvSetPtr(set);
	};
	const char* keys[2] = {"first", "second"};
	const int order[2] = {me % 2, 1 - me % 2};
	std::unique_ptr<Group> groups[2];
	for (int i : order)
		groups[i] =
			std::make_unique<Group>(ep, keyed_set(keys[i]), everyone, world, me,
						strfmt("group \"%s\"", keys[i]), Group::Deferred{});
	for (int i : order)
		groups[i]->wait_joined(ep);

	CheckedCall calls[2];
	for (int round = 0; round < 20; ++round) {
		for (int i : order) {
			// Broadcast: its data depends on the seed, so mixed
			// calls show.
			calls[i].prepare(*groups[i],
					 {FI_BROADCAST, 4096, FI_UINT8, FI_SUM, round % n},
					 make_seed(0xC0FE, static_cast<uint64_t>(round),
						   static_cast<uint64_t>(i)));
			calls[i].post(ep);
		}
		for (int i : order) {
			calls[i].wait(ep);
			calls[i].verify();
		}
	}
	ProgressingBarrier(ep, boot, n).wait();
	summary_note(boot, "two groups of the same members joined and called in opposite "
			   "orders, 20 verified broadcasts each");
}

} // namespace

void add_stress_cases(std::vector<CollCase>& cases)
{
	cases.push_back(
		{"two-groups-in-flight",
		 "5 ranks, groups {0,1,2,3} and {4,3,2,1} on one endpoint: 1,000 mixed verified "
		 "calls per "
		 "group, 24 in flight per group, streams interleaved differently on each rank",
		 kRanks, seconds(300), "", run_two_groups});
	cases.push_back({"join-storm",
			 "4 ranks, 30 rounds of fresh endpoints joining one group at once (every "
			 "pair connecting "
			 "simultaneously), each rank then stopping progress until all joined: "
			 "every join completes",
			 4, seconds(240), "", run_join_storm});
	cases.push_back({"comm-keys",
			 "4 ranks: two groups of the same members with different comm_keys, "
			 "joined and called in opposite orders on even and odd ranks",
			 4, seconds(120), "", run_comm_keys});
	cases.push_back({"size-ladder",
			 "4 ranks: allreduce FI_UINT64 of 8 B, 64 B, ... 4 MiB, 200 verified calls "
			 "per size (20 with "
			 "--quick), a barrier before each: no error completion, no wrong result",
			 4, seconds(300), "", run_size_ladder});
}

} // namespace fabtests::coll
