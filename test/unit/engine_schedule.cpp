// Schedule invariants, checked on the schedules of all members of a group
// without running anything:
//  - every write has exactly one matching arrival: for each (rank,
//    counter) the writes aimed at it equal the largest count the rank
//    waits for, so nothing is waited for in vain and nothing arrives
//    unaccounted (which would corrupt the next use of the counter);
//  - every write stays inside the target's buffer, every local step
//    inside its own buffers;
//  - a write through a memory key comes after the wait for that key;
//  - the per-operation footprint (counters, scratch bytes) is the same on
//    every member, since members place operations in scratch independently;
//  - the bytes each rank sends equal the documented cost.
// Exhaustive for group sizes 1..64, sampled at 127, 128, 1000 and 1024.
#include <criterion/criterion.h>

#include <map>
#include <string>

#include "engine/patterns.hpp"
#include "engine/schedule.hpp"

using namespace rcoll::engine;

namespace {

struct Report {
	std::string error;
	std::vector<uint64_t> payload;
	std::vector<uint64_t> control;
};

struct KeyShip {
	uint32_t from;
	uint32_t counter;
};

std::string describe(const OpDescriptor& d)
{
	return std::string(to_string(d.coll)) + "/" + std::string(to_string(d.algorithm)) +
	       " p=" + std::to_string(d.size) + " count=" + std::to_string(d.count) +
	       " root=" + std::to_string(d.root);
}

// Two passes over the members' schedules, so memory stays proportional to
// one schedule even for 1024 ranks.
Report check_group(const OpDescriptor& d, const Limits& limits, Placement placement = {})
{
	const uint32_t p = d.size;
	const MonotoneCounters mono{p};
	Report rep;
	rep.payload.assign(p, 0);
	rep.control.assign(p, 0);
	std::vector<ScheduleLayout> layouts(p);
	// Counts per (rank, counter): monotone counters first, then the
	// operation's own.
	std::vector<std::vector<uint32_t>> waits(p), writes(p);
	auto slot = [&](std::vector<uint32_t>& v, uint32_t c) -> uint32_t& {
		size_t i = (c & monotone_counter) ? (c & ~monotone_counter) : mono.total() + c;
		if (i >= v.size())
			v.resize(i + 1, 0);
		return v[i];
	};
	auto counter_name = [&](size_t i) {
		return i < mono.total() ? "monotone " + std::to_string(i)
					: std::to_string(i - mono.total());
	};
	std::vector<std::map<uint32_t, KeyShip>> keys(p); // [receiver][slot]
	auto fail = [&](uint32_t r, const std::string& why) {
		rep.error = describe(d) + " rank " + std::to_string(r) + ": " + why;
		return rep;
	};
	auto counter_ok = [&](uint32_t r, uint32_t c) {
		return (c & monotone_counter) ? (c & ~monotone_counter) < mono.total()
					      : c < layouts[r].counters;
	};

	Schedule s;
	for (uint32_t r = 0; r < p; ++r) {
		Errc e = build_schedule(d, r, limits, s, placement);
		if (e != Errc::ok)
			return fail(r, "build failed: " + std::string(to_string(e)));
		layouts[r] = s.layout;
		for (const Step& st : s.steps) {
			if (st.kind == Step::Kind::wait) {
				uint32_t& w = slot(waits[r], st.counter);
				if (st.value < w)
					return fail(r, "waits on a counter are not monotone");
				w = static_cast<uint32_t>(st.value);
			} else if (st.kind == Step::Kind::write) {
				if (st.peer >= p || st.peer == r)
					return fail(r, "write to bad peer");
				slot(writes[st.peer], st.counter)++;
				if (st.dest == Dest::key_slot && st.length == memory_key_bytes) {
					if (keys[st.peer].count(st.key))
						return fail(st.peer,
							    "two keys shipped into one slot");
					keys[st.peer][st.key] = KeyShip{r, st.counter};
				}
			}
		}
	}
	for (uint32_t r = 1; r < p; ++r) {
		if (layouts[r].counters != layouts[0].counters ||
		    layouts[r].scratch_bytes() != layouts[0].scratch_bytes() ||
		    layouts[r].landing_in_scratch != layouts[0].landing_in_scratch ||
		    layouts[r].key_slots != layouts[0].key_slots)
			return fail(r, "footprint differs from rank 0's");
	}
	for (uint32_t r = 0; r < p; ++r) {
		const size_t n = std::max(waits[r].size(), writes[r].size());
		waits[r].resize(n, 0);
		writes[r].resize(n, 0);
		for (size_t i = 0; i < n; ++i)
			if (waits[r][i] != writes[r][i])
				return fail(r, "counter " + counter_name(i) + " gets " +
						       std::to_string(writes[r][i]) +
						       " writes but waits for " +
						       std::to_string(waits[r][i]));
		std::vector<uint32_t>().swap(waits[r]);
		std::vector<uint32_t>().swap(writes[r]);
	}

	for (uint32_t r = 0; r < p; ++r) {
		build_schedule(d, r, limits, s, placement);
		const BufferSizes mine = buffer_sizes(d, r);
		auto size_of = [&](Buf b) -> uint64_t {
			switch (b) {
			case Buf::input: return mine.input;
			case Buf::output: return mine.output;
			case Buf::landing: return s.layout.landing_bytes;
			case Buf::own_keys: return 2 * memory_key_bytes;
			}
			return 0;
		};
		std::vector<uint32_t> waited;
		uint32_t writes_so_far = 0;
		const size_t esz = datatype_size(d.dtype);
		for (const Step& st : s.steps) {
			switch (st.kind) {
			case Step::Kind::wait:
				if (!counter_ok(r, st.counter))
					return fail(r, "wait on a counter outside the footprint");
				slot(waited, st.counter) = static_cast<uint32_t>(st.value);
				break;
			case Step::Kind::wait_sent:
				if (st.value >= writes_so_far)
					return fail(r, "waits for a write not posted yet");
				break;
			case Step::Kind::copy:
				if (st.src_off + st.length > size_of(st.src) ||
				    st.dst_off + st.length > size_of(st.dst))
					return fail(r, "copy out of bounds");
				break;
			case Step::Kind::reduce:
				if (st.src_off + st.length * esz > size_of(st.src) ||
				    st.a_off + st.length * esz > size_of(st.a) ||
				    st.dst_off + st.length * esz > size_of(st.dst))
					return fail(r, "reduce out of bounds");
				break;
			case Step::Kind::write: {
				writes_so_far++;
				(st.control ? rep.control[r] : rep.payload[r]) += st.length;
				if (!counter_ok(st.peer, st.counter))
					return fail(
						r, "write signals a counter outside the footprint");
				if (st.src_off + st.length > size_of(st.src))
					return fail(r, "write source out of bounds");
				const ScheduleLayout& theirs = layouts[st.peer];
				const bool by_key =
					st.dest == Dest::output ||
					(st.dest == Dest::landing && !theirs.landing_in_scratch);
				if (by_key) {
					auto it = keys[r].find(st.key);
					if (it == keys[r].end() || it->second.from != st.peer)
						return fail(r, "write through a key the target "
							       "never shipped");
					if (slot(waited, it->second.counter) < 1)
						return fail(r, "write through a key before waiting "
							       "for it");
				}
				uint64_t limit = 0;
				if (st.dest == Dest::key_slot)
					limit = uint64_t(theirs.key_slots) * memory_key_bytes;
				else if (st.dest == Dest::landing)
					limit = theirs.landing_bytes;
				else
					limit = buffer_sizes(d, st.peer).output;
				uint64_t off = st.dest == Dest::key_slot
						       ? uint64_t(st.key) * memory_key_bytes
						       : st.dst_off;
				if (off + st.length > limit)
					return fail(r, "write beyond the target's buffer");
				break;
			}
			}
		}
	}
	return rep;
}

struct Entry {
	Collective coll;
	Algorithm alg;
};

std::vector<Entry> every_algorithm()
{
	std::vector<Entry> out;
	for (unsigned c = 0; c < collective_count; ++c)
		for (Algorithm a : algorithms_for(static_cast<Collective>(c)))
			out.push_back({static_cast<Collective>(c), a});
	return out;
}

Limits eager_limits()
{
	Limits l;
	l.scratch_bytes = 64 * 1024;
	l.eager_bytes = 16 * 1024;
	l.broadcast_eager_bytes = 16 * 1024;
	l.chunk_bytes = 256;
	l.bcast_blocks = 3;
	return l;
}

Limits rendezvous_limits()
{
	Limits l = eager_limits();
	l.eager_bytes = 0;
	l.broadcast_eager_bytes = 0;
	return l;
}

OpDescriptor descriptor(Entry e, uint32_t p, uint64_t count, uint32_t root)
{
	OpDescriptor d;
	d.coll = e.coll;
	d.algorithm = e.alg;
	d.size = p;
	d.count = count;
	d.root = root;
	d.dtype = Datatype::int32;
	d.op = ReduceOp::sum;
	return d;
}

} // namespace

Test(engine_schedule, every_algorithm_is_registered)
{
	auto all = every_algorithm();
	cr_assert_eq(all.size(), 21u);
	for (auto e : all)
		cr_assert(algorithm_supports(e.coll, e.alg));
	cr_assert(!algorithm_supports(Collective::barrier, Algorithm::ring));
	cr_assert_eq(parse_algorithm("rabenseifner"), Algorithm::rabenseifner);
	cr_assert_eq(parse_algorithm("nonsense"), Algorithm::automatic);
}

// The timeouts of the long tests only catch a hang: under the sanitizers,
// two suites at once, they take 10-20 times as long as in a plain build.
Test(engine_schedule, invariants_small_groups, .timeout = 600)
{
	for (Entry e : every_algorithm())
		for (uint32_t p = 1; p <= 64; ++p) {
			for (uint64_t count : {0ull, 1ull, 5ull, 1000ull})
				for (const Limits& l : {eager_limits(), rendezvous_limits()}) {
					OpDescriptor d = descriptor(e, p, count, (p - 1) / 2);
					Report rep = check_group(d, l);
					cr_assert(rep.error.empty(), "%s", rep.error.c_str());
				}
			if (!is_rooted(e.coll))
				continue;
			// Every root, with a prime count.
			for (uint32_t root = 0; root < p; ++root) {
				OpDescriptor d = descriptor(e, p, 97, root);
				Report rep = check_group(d, root % 2 ? rendezvous_limits()
								     : eager_limits());
				cr_assert(rep.error.empty(), "%s", rep.error.c_str());
			}
		}
}

Test(engine_schedule, invariants_large_groups, .timeout = 600)
{
	for (Entry e : every_algorithm())
		for (uint32_t p : {127u, 128u, 1000u, 1024u}) {
			Limits l = eager_limits();
			l.chunk_bytes = 4096;
			l.counters = 8 * p;
			l.scratch_bytes = 64 * 1024 + 32 * uint64_t(p);
			OpDescriptor d = descriptor(e, p, 1031, p / 3);
			Report rep = check_group(d, l);
			cr_assert(rep.error.empty(), "%s", rep.error.c_str());
		}
}

// The invariants with members placed on hosts: blocks (--map-by slot),
// round-robin (--map-by node), uneven hosts and hosts of one member.
Test(engine_schedule, invariants_with_placements, .timeout = 600)
{
	for (Entry e : every_algorithm())
		for (uint32_t p = 2; p <= 24; ++p)
			for (uint32_t hosts : {2u, 3u, 5u}) {
				if (hosts > p)
					continue;
				std::vector<uint32_t> blocked(p), round_robin(p), uneven(p);
				for (uint32_t r = 0; r < p; ++r) {
					blocked[r] = r * hosts / p;
					round_robin[r] = r % hosts;
					uneven[r] = r < p - hosts + 1 ? 0 : r; // one big host
				}
				for (const auto& placement : {blocked, round_robin, uneven})
					for (uint64_t count : {1ull, 97ull})
						for (const Limits& l :
						     {eager_limits(), rendezvous_limits()}) {
							Report rep = check_group(
								descriptor(e, p, count, p / 2), l,
								placement);
							cr_assert(rep.error.empty(), "%s",
								  rep.error.c_str());
						}
			}
}

// Between hosts, the two-level allgathers move each host's blocks once to
// every other host, where Bruck sends up to half the blocks from every
// member: the hierarchical one from the host's leader, in one message, the
// multi-leader one a block from each member, which sends p - 1 in all.
Test(engine_schedule, two_level_allgathers_cross_hosts_once_per_host)
{
	const uint32_t p = 8;
	const uint32_t slot[] = {0, 0, 0, 0, 4, 4, 4, 4};
	const uint64_t count = 16, n = count * 4;
	const Limits limits = eager_limits();
	for (Algorithm a : {Algorithm::hierarchical, Algorithm::multi_leader, Algorithm::bruck}) {
		uint64_t across = 0, messages = 0;
		std::vector<uint64_t> sent(p, 0);
		for (uint32_t r = 0; r < p; ++r) {
			Schedule s;
			cr_assert_eq(
				build_schedule(descriptor({Collective::allgather, a}, p, count, 0),
					       r, limits, s, slot),
				Errc::ok);
			for (const Step& st : s.steps) {
				if (st.kind != Step::Kind::write || st.control)
					continue;
				sent[r] += st.length;
				if (slot[st.peer] != slot[r]) {
					across += st.length;
					messages++;
				}
			}
		}
		if (a == Algorithm::hierarchical) {
			cr_assert_eq(across, 2 * 4 * n); // 4 blocks each way
			cr_assert_eq(messages, 2u);
		} else if (a == Algorithm::multi_leader) {
			cr_assert_eq(across, 2 * 4 * n);
			cr_assert_eq(messages, 8u);
			for (uint32_t r = 0; r < p; ++r)
				cr_assert_eq(sent[r], (p - 1) * n);
		} else {
			cr_assert_gt(across, 2 * 4 * n);
		}
	}
	// Hosts of unequal sizes: the blocks of the three single-member hosts
	// are dealt to three different members of the big one, whose members
	// then send within one forwarded block of one another.
	const uint32_t uneven[] = {0, 0, 0, 0, 4, 5, 6};
	std::vector<uint64_t> sent(7, 0);
	for (uint32_t r = 0; r < 7; ++r) {
		Schedule s;
		cr_assert_eq(
			build_schedule(descriptor({Collective::allgather, Algorithm::multi_leader},
						  7, count, 0),
				       r, limits, s, uneven),
			Errc::ok);
		for (const Step& st : s.steps)
			if (st.kind == Step::Kind::write && !st.control)
				sent[r] += st.length;
	}
	const auto [least, most] = std::minmax_element(sent.begin(), sent.begin() + 4);
	cr_assert_leq(*most - *least, 3 * n);
	cr_assert_eq(*most, (3 + 3 * 2) * n); // 3 across, own and one dealt to 3
}

Test(engine_schedule, ring_sends_the_lower_bound)
{
	// Patarasuk and Yuan: rank r sends every segment but r + 1 in the
	// reduce-scatter and every segment but r + 2 in the allgather, which is
	// 2 (p - 1) / p * n when p divides n.
	for (uint32_t p = 2; p <= 64; ++p)
		for (uint64_t count : {1ull, 7ull, 64ull, 1000ull, 1024ull}) {
			OpDescriptor d =
				descriptor({Collective::allreduce, Algorithm::ring}, p, count, 0);
			Report rep = check_group(d, eager_limits());
			cr_assert(rep.error.empty(), "%s", rep.error.c_str());
			pattern::Partition part{count, p};
			for (uint32_t r = 0; r < p; ++r) {
				uint64_t want = (2 * count - part.size((r + 1) % p) -
						 part.size((r + 2) % p)) *
						4;
				cr_assert_eq(rep.payload[r], want, "p=%u count=%llu rank %u", p,
					     (unsigned long long)count, r);
				if (count % p == 0)
					cr_assert_eq(rep.payload[r] * p, 2 * (p - 1) * count * 4);
			}
		}
}

Test(engine_schedule, documented_bytes_per_rank)
{
	const Limits l = eager_limits();
	for (uint32_t p = 1; p <= 64; ++p) {
		const uint64_t count = 4 * p; // divisible by p
		const uint64_t n = count * 4;
		const pattern::FoldedHypercube cube{p};
		const pattern::BinomialTree tree{p};
		auto run = [&](Collective c, Algorithm a, uint32_t root = 0,
			       uint64_t elements = 0) {
			Report rep = check_group(
				descriptor({c, a}, p, elements ? elements : count, root), l);
			cr_assert(rep.error.empty(), "%s", rep.error.c_str());
			return rep;
		};
		auto sum = [](const std::vector<uint64_t>& v) {
			uint64_t s = 0;
			for (auto x : v)
				s += x;
			return s;
		};
		// Rabenseifner's blocks are over the power-of-two core.
		const uint64_t core_count = 8 * cube.pof2();
		const uint64_t core_n = core_count * 4;
		Report rd =
			run(Collective::allreduce, Algorithm::recursive_doubling, 0, core_count);
		Report rab = run(Collective::allreduce, Algorithm::rabenseifner, 0, core_count);
		for (uint32_t r = 0; r < p; ++r) {
			const bool extra = cube.is_extra(r);
			const bool folded_core = !extra && cube.fold_partner(r).has_value();
			// n per exchange step, plus n for each end of the fold.
			cr_assert_eq(rd.payload[r],
				     extra ? core_n : (cube.dimensions() + folded_core) * core_n);
			// 2 (pof2 - 1) / pof2 * n among the core, plus the fold.
			const uint64_t core = 2 * (cube.pof2() - 1) * core_n / cube.pof2();
			cr_assert_eq(rab.payload[r],
				     extra ? core_n : core + (folded_core ? core_n : 0));
		}
		// The two-level ones without a placement: every member a host of its own.
		for (Algorithm a : {Algorithm::ring, Algorithm::bruck, Algorithm::hierarchical,
				    Algorithm::multi_leader}) {
			Report ag = run(Collective::allgather, a);
			for (uint32_t r = 0; r < p; ++r)
				cr_assert_eq(ag.payload[r], (p - 1) * n, "allgather/%s",
					     to_string(a).data());
		}
		Report rs = run(Collective::reduce_scatter, Algorithm::ring);
		Report a2a = run(Collective::alltoall, Algorithm::pairwise);
		Report bar = run(Collective::barrier, Algorithm::dissemination);
		for (uint32_t r = 0; r < p; ++r) {
			cr_assert_eq(rs.payload[r], (p - 1) * n);
			cr_assert_eq(a2a.payload[r], (p - 1) * n);
			cr_assert_eq(bar.payload[r], 0u);
		}
		// The k-ary tree moves n up and n down every edge.
		cr_assert_eq(sum(run(Collective::allreduce, Algorithm::ktree).payload),
			     2 * (p - 1) * n);
		cr_assert_eq(sum(run(Collective::reduce, Algorithm::ktree, p - 1).payload),
			     (p - 1) * n);
		for (uint32_t root : {0u, p / 2, p - 1}) {
			// Every non-root receives the message exactly once in total.
			cr_assert_eq(
				sum(run(Collective::broadcast, Algorithm::scatter_allgather, root)
					    .payload),
				(p - 1) * n);
			Report bin = run(Collective::broadcast, Algorithm::binomial, root);
			uint64_t subtrees = 0;
			for (uint32_t r = 0; r < p; ++r) {
				uint32_t v = pattern::to_virtual(r, root, p);
				cr_assert_eq(bin.payload[r], tree.children(v).size() * n);
				if (v)
					subtrees += tree.subtree_size(v);
			}
			cr_assert_eq(
				sum(run(Collective::scatter, Algorithm::binomial, root).payload),
				subtrees * n);
			cr_assert_eq(
				sum(run(Collective::gather, Algorithm::binomial, root).payload),
				subtrees * n);
		}
	}
}

Test(engine_schedule, bad_descriptors_are_rejected)
{
	OpDescriptor d = descriptor({Collective::allreduce, Algorithm::ring}, 4, 10, 0);
	Schedule s;
	Limits l = eager_limits();
	d.dtype = Datatype::double_complex;
	d.op = ReduceOp::max;
	cr_assert_eq(build_schedule(d, 0, l, s), Errc::not_supported);
	d.dtype = Datatype::float32;
	d.op = ReduceOp::bxor;
	cr_assert_eq(validate(d), Errc::not_supported);
	d = descriptor({Collective::broadcast, Algorithm::binomial}, 4, 10, 4);
	cr_assert_eq(validate(d), Errc::invalid_argument);
	d = descriptor({Collective::allgather, Algorithm::ring}, 4, UINT64_MAX / 8, 0);
	cr_assert_eq(validate(d), Errc::overflow);
	d = descriptor({Collective::allreduce, Algorithm::ring}, 4, UINT64_MAX / 2, 0);
	cr_assert_eq(validate(d), Errc::overflow);
	d = descriptor({Collective::allreduce, Algorithm::bruck}, 4, 10, 0);
	cr_assert_eq(validate(d), Errc::invalid_argument);
	d = descriptor({Collective::allreduce, Algorithm::ring}, 4, 10, 0);
	cr_assert_eq(build_schedule(d, 4, l, s), Errc::invalid_argument);
	d.size = 0;
	cr_assert_eq(validate(d), Errc::invalid_argument);
	// Too few counters for a ring of 64: refused, not overrun.
	d = descriptor({Collective::allreduce, Algorithm::ring}, 64, 6400, 0);
	l.counters = 16;
	cr_assert_eq(build_schedule(d, 0, l, s), Errc::no_resources);
}

// Recursive doubling stages one vector per step, and the fold's input and
// result only where the group has extras, and reduces the steps' vectors
// where they land: a power-of-two group stays eager while they fit the
// scratch. (It staged the fold's two slots always, and a
// 32 KiB allreduce at 2 ranks went by rendezvous, a key exchange more, for
// a 96 KiB landing.)
Test(engine_schedule, recursive_doubling_stages_what_it_receives)
{
	// Eager while the staged vectors fit the scratch and what is copied out
	// of it (an extra's result; step vectors are reduced where they land)
	// is within the eager limit.
	const Limits limits; // the defaults: 64 KiB eager, 512 KiB scratch
	for (uint32_t p = 2; p <= 9; ++p)
		for (uint64_t kib : {1, 16, 21, 32, 64, 65, 128, 200}) {
			OpDescriptor d =
				descriptor({Collective::allreduce, Algorithm::recursive_doubling},
					   p, kib * 1024 / 4, 0);
			const pattern::FoldedHypercube cube{p};
			const uint64_t staged =
				(cube.dimensions() + (cube.extras() ? 2 : 0)) * kib * 1024;
			const uint64_t copied = cube.extras() ? kib * 1024 : 0;
			const bool eager =
				ScheduleLayout::align(ScheduleLayout::key_slots_offset) + staged <=
					limits.scratch_bytes &&
				copied <= limits.eager_bytes;
			Schedule s;
			cr_assert_eq(build_schedule(d, 0, limits, s), Errc::ok);
			cr_assert_eq(s.layout.landing_in_scratch, eager,
				     "p=%u %llu KiB: %s with %llu bytes staged", p,
				     (unsigned long long)kib,
				     s.layout.landing_in_scratch ? "eager" : "rendezvous",
				     (unsigned long long)staged);
			Report rep = check_group(d, limits);
			cr_assert(rep.error.empty(), "%s", rep.error.c_str());
		}
}

// A tree broadcast stages up to its own limit, whatever the reductions'
// (the glue raises it to 256 KiB on a kernel-TCP core, where staging
// measured faster), and is checked both ways.
Test(engine_schedule, broadcast_stages_up_to_its_own_limit)
{
	Limits limits;
	limits.eager_bytes = 0;
	for (uint32_t p : {2u, 3u, 5u, 8u})
		for (uint64_t bytes : {128 * 1024, 256 * 1024, 256 * 1024 + 4}) {
			const OpDescriptor bcast = descriptor(
				{Collective::broadcast, Algorithm::binomial}, p, bytes / 4, 0);
			const OpDescriptor allreduce = descriptor(
				{Collective::allreduce, Algorithm::ring}, p, bytes / 4, 0);
			for (uint32_t rank = 0; rank < p; ++rank) {
				Schedule r;
				cr_assert_eq(build_schedule(allreduce, rank, limits, r), Errc::ok);
				cr_assert(!r.layout.landing_in_scratch, "the allreduce staged");
			}
			for (uint64_t kib : {64, 256}) {
				limits.broadcast_eager_bytes = kib * 1024;
				const bool eager = bytes <= kib * 1024;
				for (uint32_t rank = 0; rank < p; ++rank) {
					Schedule s;
					cr_assert_eq(build_schedule(bcast, rank, limits, s),
						     Errc::ok);
					cr_assert_eq(s.layout.landing_in_scratch, eager,
						     "p=%u %llu B broadcast, limit %llu KiB, rank "
						     "%u: %s",
						     p, (unsigned long long)bytes,
						     (unsigned long long)kib, rank,
						     s.layout.landing_in_scratch ? "eager"
										 : "rendezvous");
				}
				Report rep = check_group(bcast, limits);
				cr_assert(rep.error.empty(), "%s", rep.error.c_str());
			}
		}
}

// With a placement, the trees and rings visit each host's members together
// (pattern::HostOrder); without one, in the ranks' order. Under --map-by
// node over two hosts (0 2 | 1 3), the binomial broadcast's root writes
// first to the other host's first member, 1, where the rotation sends to 2;
// the ring allreduce's rank 0 writes to its host's 2, not to 1.
Test(engine_schedule, placement_groups_trees_and_rings_by_host)
{
	const uint32_t by_node[] = {0, 1, 0, 1};
	const Limits limits = eager_limits();
	auto first_write = [&](const OpDescriptor& d, uint32_t rank, Placement placement) {
		Schedule s;
		cr_assert_eq(build_schedule(d, rank, limits, s, placement), Errc::ok);
		for (const Step& st : s.steps)
			if (st.kind == Step::Kind::write)
				return st.peer;
		cr_assert_fail("no write");
		return UINT32_MAX;
	};
	const OpDescriptor bcast =
		descriptor({Collective::broadcast, Algorithm::binomial}, 4, 64, 0);
	cr_assert_eq(first_write(bcast, 0, by_node), 1u);
	cr_assert_eq(first_write(bcast, 0, {}), 2u);
	cr_assert_eq(first_write(bcast, 1, by_node), 3u); // 1 forwards on its host
	const OpDescriptor ring = descriptor({Collective::allreduce, Algorithm::ring}, 4, 64, 0);
	cr_assert_eq(first_write(ring, 0, by_node), 2u);
	cr_assert_eq(first_write(ring, 0, {}), 1u);
	cr_assert_eq(first_write(ring, 3, by_node), 0u); // the ring closes: 0 2 1 3
	// The allgather's ring too; its blocks keep their owners' places.
	const OpDescriptor gather_ring =
		descriptor({Collective::allgather, Algorithm::ring}, 4, 16, 0);
	cr_assert_eq(first_write(gather_ring, 0, by_node), 2u);
	cr_assert_eq(first_write(gather_ring, 1, by_node), 3u);
	cr_assert_eq(first_write(gather_ring, 0, {}), 1u);
	// reduce_scatter's blocks belong to ranks: its ring keeps their order.
	const OpDescriptor rs = descriptor({Collective::reduce_scatter, Algorithm::ring}, 4, 16, 0);
	cr_assert_eq(first_write(rs, 0, by_node), first_write(rs, 0, {}));
}
