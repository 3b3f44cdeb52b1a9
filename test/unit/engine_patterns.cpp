// The rank arithmetic, exhaustively for group sizes 1..64 and sampled for
// large ones: every tree spans the group exactly once, parents and
// children agree, every exchange pattern is symmetric and covers all
// ranks in the advertised number of rounds.
#include <criterion/criterion.h>

#include <algorithm>
#include <set>
#include <span>

#include "engine/patterns.hpp"

using namespace rcoll::engine::pattern;

namespace {

std::vector<uint32_t> sizes_to_check()
{
	std::vector<uint32_t> s;
	for (uint32_t p = 1; p <= 64; ++p)
		s.push_back(p);
	for (uint32_t p : {127u, 128u, 1000u, 1024u})
		s.push_back(p);
	return s;
}

} // namespace

Test(engine_patterns, log_helpers)
{
	cr_assert_eq(ceil_log2(1), 0u);
	cr_assert_eq(ceil_log2(2), 1u);
	cr_assert_eq(ceil_log2(3), 2u);
	cr_assert_eq(ceil_log2(1024), 10u);
	cr_assert_eq(ceil_log2(1025), 11u);
	cr_assert_eq(floor_log2(1000), 9u);
	cr_assert_eq(floor_pow2(1000), 512u);
	cr_assert_eq(lowest_bit(12), 4u);
	for (uint32_t p = 1; p <= 64; ++p)
		for (uint32_t root = 0; root < p; ++root)
			for (uint32_t r = 0; r < p; ++r)
				cr_assert_eq(to_real(to_virtual(r, root, p), root, p), r);
}

Test(engine_patterns, partition_is_balanced_and_contiguous)
{
	for (uint32_t parts = 1; parts <= 64; ++parts)
		for (uint64_t total : {0ull, 1ull, 7ull, 63ull, 64ull, 65ull, 1000003ull}) {
			Partition part{total, parts};
			uint64_t sum = 0;
			for (uint32_t i = 0; i < parts; ++i) {
				cr_assert_eq(part.offset(i), sum);
				cr_assert(part.size(i) <= part.max_size());
				cr_assert(part.max_size() - part.size(i) <= 1);
				sum += part.size(i);
			}
			cr_assert_eq(sum, total);
			cr_assert_eq(part.offset(parts), total);
			cr_assert_eq(part.span(0, parts), total);
		}
}

Test(engine_patterns, chunking_covers_segment)
{
	for (uint64_t elements : {0ull, 1ull, 5ull, 64ull, 1000ull})
		for (uint64_t chunk : {1ull, 3ull, 64ull, 5000ull}) {
			Chunking c{elements, chunk};
			uint64_t sum = 0;
			for (uint32_t i = 0; i < c.count(); ++i) {
				cr_assert_eq(c.offset(i), sum);
				cr_assert(c.size(i) >= 1 && c.size(i) <= chunk);
				sum += c.size(i);
			}
			cr_assert_eq(sum, elements);
		}
}

Test(engine_patterns, binomial_tree_spans_group)
{
	for (uint32_t p : sizes_to_check()) {
		BinomialTree t{p};
		std::vector<uint32_t> reached(p, 0);
		reached[0] = 1;
		cr_assert_eq(t.subtree_size(0), p);
		for (uint32_t v = 0; v < p; ++v) {
			auto kids = t.children(v);
			std::set<unsigned> indexes;
			uint32_t covered = 1;
			uint32_t previous = UINT32_MAX;
			for (uint32_t c : kids) {
				cr_assert(c > v && c < p);
				cr_assert_eq(*t.parent(c), v, "p=%u v=%u c=%u", p, v, c);
				cr_assert(c < previous, "children are sent farthest first");
				previous = c;
				unsigned j = BinomialTree::child_index(v, c);
				cr_assert(j < ceil_log2(p));
				cr_assert(indexes.insert(j).second);
				reached[c]++;
				// Subtrees are the contiguous ranges right after v.
				cr_assert(c + t.subtree_size(c) <= v + t.subtree_size(v));
				covered += t.subtree_size(c);
			}
			cr_assert_eq(covered, t.subtree_size(v), "p=%u v=%u", p, v);
		}
		for (uint32_t v = 0; v < p; ++v)
			cr_assert_eq(reached[v], 1u, "p=%u: rank %u reached %u times", p, v,
				     reached[v]);
	}
}

Test(engine_patterns, knomial_tree_spans_group)
{
	for (uint32_t p : sizes_to_check())
		for (uint32_t k = 1; k <= 9; ++k) {
			KnomialTree t{p, k};
			const unsigned levels = t.levels();
			// (k+1)^(levels-1) < p <= (k+1)^levels
			uint64_t span = 1;
			for (unsigned j = 0; j < levels; ++j)
				span *= k + 1;
			cr_assert(span >= p);
			cr_assert(p == 1 || span / (k + 1) < p);
			std::vector<uint32_t> parents(p, 0);
			for (uint32_t v = 0; v < p; ++v) {
				std::set<uint32_t> slots;
				for (unsigned level = 0; level < levels; ++level) {
					auto kids = t.children_at(v, level);
					cr_assert(kids.size() <= k,
						  "Gupta's degree: at most k per step");
					for (size_t i = 0; i < kids.size(); ++i) {
						uint32_t c = kids[i];
						cr_assert(i == 0 || kids[i - 1] < c,
							  "ascending rank order");
						cr_assert_eq(*t.parent(c), v);
						cr_assert_eq(t.send_level(c), level);
						cr_assert(t.child_slot(c) < t.slots());
						cr_assert(slots.insert(t.child_slot(c)).second);
						parents[c]++;
					}
				}
				if (v != 0) {
					// A child sends after its own children: its levels are lower.
					cr_assert(t.send_level(v) < levels);
					for (unsigned level = t.send_level(v); level < levels;
					     ++level)
						cr_assert(t.children_at(v, level).empty());
				}
			}
			for (uint32_t v = 1; v < p; ++v)
				cr_assert_eq(parents[v], 1u, "p=%u k=%u v=%u", p, k, v);
		}
	// k = 1 is the binomial tree.
	for (uint32_t p = 1; p <= 64; ++p) {
		const KnomialTree knomial{p, 1};
		const BinomialTree binomial{p};
		for (uint32_t v = 1; v < p; ++v)
			cr_assert_eq(*knomial.parent(v), *binomial.parent(v));
	}
}

// Members grouped by host: a permutation with the root first, each host's
// members consecutive and in the rotation's order, the root's host first
// and the others in the order their first member follows the root; the
// rotation itself without a placement that has a host of several members
// besides others.
Test(engine_patterns, host_order_groups_members_by_host)
{
	for (uint32_t p = 1; p <= 40; ++p)
		for (uint32_t hosts : {1u, 2u, 3u, 5u, p})
			for (int blocked = 0; blocked < 2; ++blocked) {
				// A host's index is its first member's rank.
				std::vector<uint32_t> place(p), first(hosts, UINT32_MAX);
				for (uint32_t r = 0; r < p; ++r) {
					const uint32_t h = blocked ? r * hosts / p : r % hosts;
					first[h] = std::min(first[h], r);
					place[r] = first[h];
				}
				for (uint32_t root = 0; root < p; ++root) {
					const HostOrder order(p, root, place);
					const HostOrder rotation(p, root);
					std::vector<bool> seen(p, false);
					std::vector<uint32_t> host_seq;
					for (uint32_t v = 0; v < p; ++v) {
						const uint32_t r = order.to_real(v);
						cr_assert(r < p && !seen[r]);
						seen[r] = true;
						cr_assert_eq(order.to_virtual(r), v);
						cr_assert_eq(rotation.to_real(v),
							     to_real(v, root, p));
						if (host_seq.empty() || host_seq.back() != place[r])
							host_seq.push_back(place[r]);
					}
					cr_assert_eq(order.to_real(0), root);
					// Each host one run, in the order their first member
					// follows the root.
					std::vector<uint32_t> first_seen;
					for (uint32_t v = 0; v < p; ++v) {
						const uint32_t h = place[to_real(v, root, p)];
						if (std::find(first_seen.begin(), first_seen.end(),
							      h) == first_seen.end())
							first_seen.push_back(h);
					}
					cr_assert(host_seq == first_seen, "p=%u hosts=%u root=%u",
						  p, hosts, root);
					// Within a host, the rotation's order.
					for (uint32_t v = 1; v < p; ++v) {
						const uint32_t a = order.to_real(v - 1),
							       b = order.to_real(v);
						if (place[a] == place[b])
							cr_assert_lt(to_virtual(a, root, p),
								     to_virtual(b, root, p));
					}
					if (hosts == 1 || hosts == p || p < 3)
						for (uint32_t v = 0; v < p; ++v)
							cr_assert_eq(order.to_real(v),
								     to_real(v, root, p));
				}
			}
	// --map-by node over two hosts: 0 2 | 1 3, so a binomial tree's lower
	// level stays on the hosts.
	const uint32_t by_node[] = {0, 1, 0, 1};
	const HostOrder order(4, 0, by_node);
	cr_assert(order.to_real(1) == 2 && order.to_real(2) == 1 && order.to_real(3) == 3);
	// A placement of another group, or naming no member, is no placement.
	const uint32_t short_one[] = {0, 1, 0};
	const uint32_t bad[] = {0, 9, 0, 9};
	for (auto place : {std::span<const uint32_t>(short_one), std::span<const uint32_t>(bad)})
		for (uint32_t v = 0; v < 4; ++v)
			cr_assert_eq(HostOrder(4, 1, place).to_real(v), to_real(v, 1, 4));
}

Test(engine_patterns, folded_hypercube)
{
	for (uint32_t p : sizes_to_check()) {
		FoldedHypercube h{p};
		cr_assert_eq(h.pof2() + h.extras(), p);
		cr_assert(h.extras() < h.pof2());
		for (uint32_t r = 0; r < p; ++r) {
			if (auto f = h.fold_partner(r)) {
				cr_assert_eq(*h.fold_partner(*f), r);
				cr_assert_neq(h.is_extra(r), h.is_extra(*f));
			} else {
				cr_assert(!h.is_extra(r) && r >= h.extras());
			}
			if (h.is_extra(r))
				continue;
			for (unsigned d = 0; d < h.dimensions(); ++d) {
				uint32_t q = FoldedHypercube::partner(r, d);
				cr_assert(q < h.pof2());
				cr_assert_eq(FoldedHypercube::partner(q, d), r);
			}
		}
		if (p > 128)
			continue;
		// Recursive doubling among the core spreads every core rank's
		// contribution to every core rank.
		std::vector<std::vector<bool>> knows(h.pof2(), std::vector<bool>(h.pof2(), false));
		for (uint32_t r = 0; r < h.pof2(); ++r)
			knows[r][r] = true;
		for (unsigned d = 0; d < h.dimensions(); ++d) {
			auto next = knows;
			for (uint32_t r = 0; r < h.pof2(); ++r)
				for (uint32_t x = 0; x < h.pof2(); ++x)
					if (knows[FoldedHypercube::partner(r, d)][x])
						next[r][x] = true;
			knows = std::move(next);
		}
		for (uint32_t r = 0; r < h.pof2(); ++r)
			for (uint32_t x = 0; x < h.pof2(); ++x)
				cr_assert(knows[r][x]);
	}
}

Test(engine_patterns, dissemination_reaches_everyone)
{
	for (uint32_t p = 1; p <= 128; ++p) {
		Dissemination d{p};
		cr_assert_eq(d.rounds(), ceil_log2(p));
		std::vector<std::vector<bool>> knows(p, std::vector<bool>(p, false));
		for (uint32_t r = 0; r < p; ++r)
			knows[r][r] = true;
		for (unsigned j = 0; j < d.rounds(); ++j) {
			auto next = knows;
			for (uint32_t r = 0; r < p; ++r) {
				cr_assert_eq(d.from(d.to(r, j), j), r);
				cr_assert_neq(d.to(r, j), r);
				for (uint32_t x = 0; x < p; ++x)
					if (knows[r][x])
						next[d.to(r, j)][x] = true;
			}
			knows = std::move(next);
		}
		for (uint32_t r = 0; r < p; ++r)
			for (uint32_t x = 0; x < p; ++x)
				cr_assert(knows[r][x], "p=%u: %u never heard of %u", p, r, x);
	}
}

Test(engine_patterns, bruck_gathers_every_block_once)
{
	for (uint32_t p : sizes_to_check()) {
		Bruck b{p};
		uint32_t have = 1;
		for (unsigned j = 0; j < b.rounds(); ++j) {
			cr_assert_eq(b.receive_from(b.send_to(0, j), j), 0u);
			cr_assert_eq(uint32_t(1) << j, have);
			have += b.blocks_in_round(j);
		}
		cr_assert_eq(have, p, "p=%u", p);
	}
}

Test(engine_patterns, ring_owns_each_segment_once)
{
	for (uint32_t p : sizes_to_check())
		for (int64_t shift : {0, -1}) {
			Ring ring{p, shift};
			if (p < 2)
				continue;
			std::vector<uint32_t> owners(p, 0);
			for (uint32_t r = 0; r < p; ++r) {
				owners[ring.owned_after_reduce_scatter(r)]++;
				for (uint32_t j = 0; j + 1 < p; ++j) {
					// What r receives in step j it sends in step j + 1.
					if (j + 2 < p)
						cr_assert_eq(ring.receive_segment(r, j),
							     ring.send_segment(r, j + 1));
				}
				// Over the reduce-scatter, r receives every segment but
				// the one it sent first.
				std::set<uint32_t> got;
				for (uint32_t j = 0; j + 1 < p; ++j)
					got.insert(ring.receive_segment(r, j));
				cr_assert_eq(got.size(), p - 1);
				cr_assert(!got.count(ring.send_segment(r, 0)));
			}
			for (uint32_t s = 0; s < p; ++s)
				cr_assert_eq(owners[s], 1u);
			if (shift == -1)
				for (uint32_t r = 0; r < p; ++r)
					cr_assert_eq(ring.owned_after_reduce_scatter(r), r);
		}
}

// Hosts in the order of their first member, members in rank order, and a
// host's runs of consecutive ranks; without a placement, a host per member.
Test(engine_patterns, host_groups_follow_the_placement)
{
	const uint32_t mixed[] = {7, 3, 7, 7, 3, 9};
	const HostGroups g(6, mixed);
	cr_assert_eq(g.count(), 3u);
	cr_assert(g.members(0) == (std::vector<uint32_t>{0, 2, 3}));
	cr_assert(g.members(1) == (std::vector<uint32_t>{1, 4}));
	cr_assert(g.members(2) == (std::vector<uint32_t>{5}));
	cr_assert_eq(g.host_of(4), 1u);
	cr_assert_eq(g.position(3), 2u);
	cr_assert_eq(g.position(5), 0u);
	cr_assert_eq(g.largest(), 3u);
	using Runs = std::vector<std::pair<uint32_t, uint32_t>>;
	cr_assert(g.runs(0) == (Runs{{0, 1}, {2, 4}}));
	cr_assert(g.runs(1) == (Runs{{1, 2}, {4, 5}}));
	const HostGroups alone(4);
	cr_assert_eq(alone.count(), 4u);
	cr_assert_eq(alone.largest(), 1u);
	cr_assert(alone.runs(2) == (Runs{{2, 3}}));
	const uint32_t wrong_size[] = {0, 0};
	cr_assert_eq(HostGroups(3, wrong_size).count(), 3u);
}

// Every block off a host is dealt to exactly one of its members, and the
// members' shares differ by one at most, whatever the hosts' sizes; with
// hosts of one size, member i gets member i's of every other host.
Test(engine_patterns, dealt_blocks_are_shared_out_evenly)
{
	for (uint32_t p = 1; p <= 24; p++)
		for (uint32_t seed = 0; seed < 20; seed++) {
			std::vector<uint32_t> place(p);
			for (uint32_t r = 0; r < p; r++)
				place[r] = (r * 7919u + seed * 104729u) % (1 + seed % 5) * 3 + 100;
			const HostGroups g(p, place);
			for (uint32_t host = 0; host < g.count(); host++) {
				size_t least = SIZE_MAX, most = 0, total = 0;
				for (uint32_t r : g.members(host)) {
					const auto dealt = g.dealt_blocks(r);
					cr_assert(std::is_sorted(dealt.begin(), dealt.end()));
					for (uint32_t x : dealt) {
						cr_assert_neq(g.host_of(x), host);
						cr_assert_eq(g.dealt_to(x, host), r);
					}
					least = std::min(least, dealt.size());
					most = std::max(most, dealt.size());
					total += dealt.size();
				}
				cr_assert_eq(total, p - g.members(host).size());
				cr_assert_leq(most - least, 1u, "p %u seed %u", p, seed);
			}
		}
	const uint32_t even[] = {0, 1, 0, 1, 0, 1};
	const HostGroups g(6, even);
	cr_assert_eq(g.dealt_to(2, 1), 3u);
	cr_assert(g.dealt_blocks(4) == (std::vector<uint32_t>{5}));
	const uint32_t uneven[] = {0, 0, 0, 0, 1, 2, 3};
	const HostGroups u(7, uneven);
	cr_assert(u.dealt_blocks(0) == (std::vector<uint32_t>{4}));
	cr_assert(u.dealt_blocks(2) == (std::vector<uint32_t>{6}));
	cr_assert(u.dealt_blocks(3).empty());
}
