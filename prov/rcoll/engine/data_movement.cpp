// Collectives that move data without reducing it: allgather, scatter,
// gather, alltoall. `count` is the number of elements of one rank block.
#include <algorithm>

#include "engine/builder.hpp"

namespace rcoll::engine::detail {

namespace {

using pattern::BinomialTree;
using pattern::Chunking;

// Copies `blocks` blocks stored in virtual-rank order (block u belongs to
// rank (u + shift) mod p) into rank order: at most two contiguous copies.
void rotate_into_output(ScheduleBuilder& b, Buf src, uint64_t src_off, uint32_t first_block,
			uint32_t blocks, uint32_t shift, uint64_t block_bytes)
{
	const uint32_t p = b.size();
	uint32_t u = first_block;
	uint32_t left = blocks;
	while (left > 0) {
		const uint32_t rank = pattern::to_real(u, shift, p);
		const uint32_t run = std::min(left, p - rank);
		b.copy(Buf::output, rank * block_bytes, src,
		       src_off + (u - first_block) * block_bytes, run * block_bytes);
		u += run;
		left -= run;
	}
}

// An allgather of one member, or of nothing: the own block is all there is.
bool own_block_only(ScheduleBuilder& b)
{
	const OpDescriptor& d = b.op();
	if (d.size > 1 && d.count > 0)
		return false;
	const uint64_t blk = d.count * b.elem();
	b.copy(Buf::output, b.rank() * blk, Buf::input, 0, blk);
	return true;
}

} // namespace

// Ring allgather (the second half of Patarasuk and Yuan's allreduce): in
// step j the member at position v passes the block of position v - j to
// position v + 1; chunked, each chunk forwarded on arrival; written straight
// into the neighbour's output buffer when it does not fit scratch. The ring
// runs through each host's members in turn (pattern::HostOrder), so that
// only one edge per host crosses hosts; blocks keep their owners' places.
Errc build_allgather_ring(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t esz = b.elem();
	const uint64_t blk = d.count * esz;
	const uint32_t r = b.rank();
	const pattern::HostOrder order = b.host_order(0);
	const uint32_t v = order.to_virtual(r);
	b.copy(Buf::output, r * blk, Buf::input, 0, blk);
	if (p == 1 || d.count == 0)
		return Errc::ok;

	const uint32_t steps = p - 1;
	const uint64_t chunk = b.fit_chunk(d.count, limits, [&](uint64_t c) {
		return uint64_t(steps) * Chunking{d.count, c}.count() + 1;
	});
	if (chunk == 0)
		return Errc::no_resources;
	const Chunking ch{d.count, chunk};
	const uint32_t key_counter = steps * ch.count();
	b.set_counters(uint64_t(key_counter) + 1);
	b.choose_landing(uint64_t(steps) * blk, 0, 1, limits);
	const bool rdv = !b.eager();
	if (rdv) {
		b.layout().landing_bytes = 0;
		b.ship_key(order.to_real(pattern::ring_left(v, p)), OwnKey::output, 0, key_counter);
		b.wait(key_counter);
	}
	const uint32_t right = order.to_real(pattern::ring_right(v, p));
	auto counter = [&](uint32_t step, uint32_t c) { return step * ch.count() + c; };
	auto send = [&](Buf src, uint64_t src_off, uint32_t step, uint32_t block, uint32_t c) {
		const uint64_t bytes = ch.size(c) * esz;
		if (rdv)
			b.write(right, src, src_off, Dest::output, block * blk + ch.offset(c) * esz,
				bytes, counter(step, c), 0);
		else
			b.write(right, src, src_off, Dest::landing, step * blk + ch.offset(c) * esz,
				bytes, counter(step, c));
	};
	for (uint32_t c = 0; c < ch.count(); ++c)
		send(Buf::input, ch.offset(c) * esz, 0, r, c);
	for (uint32_t j = 1; j <= steps; ++j) {
		// Received in step j - 1.
		const uint32_t block = order.to_real(pattern::mod_sub(v, j, p));
		for (uint32_t c = 0; c < ch.count(); ++c) {
			b.wait(counter(j - 1, c));
			const uint64_t out = block * blk + ch.offset(c) * esz;
			const uint64_t land = (j - 1) * blk + ch.offset(c) * esz;
			if (j < steps)
				send(rdv ? Buf::output : Buf::landing, rdv ? out : land, j, block,
				     c);
			if (!rdv)
				b.copy(Buf::output, out, Buf::landing, land, ch.size(c) * esz);
		}
	}
	return Errc::ok;
}

// Bruck, Ho, Kipnis, Upfal and Weathersby (1997): ceil(log2 p) rounds for
// any p. The landing area holds blocks in rotated order (block i belongs
// to rank r + i); round j sends the first min(2^j, p - 2^j) blocks to
// r - 2^j, and a final local rotation puts them in rank order.
Errc build_allgather_bruck(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t blk = d.count * b.elem();
	const uint32_t r = b.rank();
	if (own_block_only(b))
		return Errc::ok;
	const pattern::Bruck bruck{p};
	const unsigned rounds = bruck.rounds();
	b.set_counters(2 * uint64_t(rounds));
	b.choose_landing(uint64_t(p) * blk, 0, rounds, limits);
	const bool rdv = !b.eager();
	if (rdv)
		for (unsigned j = 0; j < rounds; ++j)
			b.ship_key(bruck.receive_from(r, j), OwnKey::landing, j, rounds + j);
	b.copy(Buf::landing, 0, Buf::input, 0, blk);
	for (unsigned j = 0; j < rounds; ++j) {
		const uint64_t have = uint64_t(1) << j;
		const uint64_t bytes = bruck.blocks_in_round(j) * blk;
		if (rdv)
			b.wait(rounds + j);
		b.write(bruck.send_to(r, j), Buf::landing, 0, Dest::landing, have * blk, bytes, j,
			j);
		b.wait(j);
	}
	rotate_into_output(b, Buf::landing, 0, 0, p, r, blk);
	return Errc::ok;
}

// Two levels (Karonis et al. 2000): each host's members write their blocks
// to the host's leader, its first member; the leaders send their host's
// blocks to one another, once per pair of hosts; and each host passes
// everything on down a binomial tree of its members. Between hosts a
// block crosses once per other host, where Bruck's rounds send up to half
// of all blocks from every member across. Blocks keep their owners' places
// (rank order) throughout. Staged, everything goes down the tree in one
// write once all has arrived; by rendezvous, straight into the outputs,
// each host's blocks as soon as they are there.
Errc build_allgather_hierarchical(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t blk = d.count * b.elem();
	const uint32_t r = b.rank();
	if (own_block_only(b))
		return Errc::ok;
	const pattern::HostGroups hosts = b.host_groups();
	const uint32_t h_count = hosts.count();
	const uint32_t h = hosts.host_of(r);
	const std::vector<uint32_t>& mine = hosts.members(h);
	const uint32_t leader = mine.front();
	const uint32_t q = hosts.position(r);
	const BinomialTree tree{uint32_t(mine.size())};
	const unsigned fanout = pattern::ceil_log2(hosts.largest());
	// Counters: the leader's gather; a host's blocks (at a leader from
	// that host's leader, at a member from its parent); everything, staged;
	// keys from leaders; keys from tree children.
	constexpr uint32_t gathered = 0;
	auto host_counter = [](uint32_t host) { return 1 + host; };
	const uint32_t everything = 1 + h_count, leader_keys = 2 + h_count,
		       child_keys = 3 + h_count;
	b.set_counters(4 + uint64_t(h_count));
	// Key slots, by rendezvous: a leader's key in its host's slot, a tree
	// child's after the hosts'.
	b.choose_landing(uint64_t(p) * blk, 0, h_count + fanout, limits);
	const bool rdv = !b.eager();
	if (rdv)
		b.layout().landing_bytes = 0;
	const Buf held = rdv ? Buf::output : Buf::landing;
	const Dest into = rdv ? Dest::output : Dest::landing;
	auto send_host = [&](uint32_t peer, uint32_t host, uint32_t counter, uint32_t key) {
		for (auto [first, last] : hosts.runs(host))
			b.write(peer, held, first * blk, into, first * blk, (last - first) * blk,
				counter, key);
	};
	const auto parent = tree.parent(q);
	const std::vector<uint32_t> children = tree.children(q);
	auto child_slot = [&](uint32_t child) {
		return h_count + BinomialTree::child_index(*tree.parent(child), child);
	};

	if (rdv) {
		if (q == 0) {
			for (uint32_t g = 0; g < h_count; g++)
				if (g != h)
					b.ship_key(hosts.members(g).front(), OwnKey::output, h,
						   leader_keys);
			for (uint32_t m = 1; m < mine.size(); m++)
				b.ship_key(mine[m], OwnKey::output, h, leader_keys);
		} else {
			b.ship_key(mine[*parent], OwnKey::output, child_slot(q), child_keys);
		}
	}
	if (q != 0) {
		// A member's own block comes back down the tree with the rest.
		if (rdv)
			b.wait(leader_keys);
		b.write(leader, Buf::input, 0, into, r * blk, blk, gathered, h);
	} else {
		b.copy(held, r * blk, Buf::input, 0, blk);
		b.wait(gathered, mine.size() - 1);
		if (rdv)
			b.wait(leader_keys, h_count - 1);
		for (uint32_t i = 1; i < h_count; i++) {
			const uint32_t g = (h + i) % h_count;
			send_host(hosts.members(g).front(), h, host_counter(h), g);
		}
	}
	// Down the host's tree: the other hosts' blocks in the order their
	// leaders sent them (the next host first).
	if (rdv) {
		b.wait(child_keys, children.size());
		for (uint32_t i = 0; i < h_count; i++) {
			const uint32_t g = (h + i) % h_count;
			if (q != 0 || g != h)
				b.wait(host_counter(g), hosts.runs(g).size());
			for (uint32_t child : children)
				send_host(mine[child], g, host_counter(g), child_slot(child));
		}
		return Errc::ok;
	}
	if (q == 0) {
		for (uint32_t g = 0; g < h_count; g++)
			if (g != h)
				b.wait(host_counter(g), hosts.runs(g).size());
	} else {
		b.wait(everything);
	}
	for (uint32_t child : children)
		b.write(mine[child], Buf::landing, 0, Dest::landing, 0, uint64_t(p) * blk,
			everything);
	b.copy(Buf::output, 0, Buf::landing, 0, uint64_t(p) * blk);
	return Errc::ok;
}

// Two levels, with every member a leader (the multi-leader scheme of
// Kandalla et al. 2009, after Karonis et al. 2000): a member writes its
// block to one member of every other host (HostGroups::dealt_to: member i
// of each host to member i of the others, where hosts are of one size),
// then passes its own block and those it received to the members of its
// host. Each block crosses to each other host once, as through one leader
// per host, but every member sends and receives its share: with hosts of
// one size, p - 1 blocks in all (Bruck's rounds send up to half of all
// blocks from every member across hosts). Blocks keep their owners' places
// (rank order). Staged, a member passes everything on at once when it has
// arrived; by rendezvous, straight into the outputs, its own block first.
Errc build_allgather_multi_leader(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t blk = d.count * b.elem();
	const uint32_t r = b.rank();
	if (own_block_only(b))
		return Errc::ok;
	const pattern::HostGroups hosts = b.host_groups();
	const uint32_t h_count = hosts.count(), most = hosts.largest();
	const uint32_t h = hosts.host_of(r);
	const std::vector<uint32_t>& mine = hosts.members(h);
	constexpr uint32_t from_hosts = 0, from_host = 1, local_keys = 2, remote_keys = 3;
	b.set_counters(4);
	// Key slots, by rendezvous: a member of this host's by its position,
	// another host's target after them, by host.
	b.choose_landing(uint64_t(p) * blk, 0, most + h_count, limits);
	const bool rdv = !b.eager();
	if (rdv)
		b.layout().landing_bytes = 0;
	const Buf held = rdv ? Buf::output : Buf::landing;
	const Dest into = rdv ? Dest::output : Dest::landing;
	const std::vector<uint32_t> received = hosts.dealt_blocks(r);
	// What each member of this host writes to each of the others: its own
	// block, then (by rendezvous, once arrived) the ones it passes on.
	auto local_writes = [&](uint32_t x) {
		std::vector<uint32_t> blocks = hosts.dealt_blocks(x);
		if (rdv) {
			auto runs = pattern::HostGroups::runs_of(blocks);
			runs.insert(runs.begin(), {x, x + 1});
			return runs;
		}
		blocks.insert(std::upper_bound(blocks.begin(), blocks.end(), x), x);
		return pattern::HostGroups::runs_of(blocks);
	};

	if (rdv) {
		for (uint32_t y : mine)
			if (y != r)
				b.ship_key(y, OwnKey::output, hosts.position(r), local_keys);
		for (uint32_t x : received)
			b.ship_key(x, OwnKey::output, most + h, remote_keys);
		b.wait(remote_keys, h_count - 1);
	}
	b.copy(held, r * blk, Buf::input, 0, blk);
	for (uint32_t i = 1; i < h_count; i++) {
		const uint32_t g = (h + i) % h_count;
		b.write(hosts.dealt_to(r, g), Buf::input, 0, into, r * blk, blk, from_hosts,
			most + g);
	}
	const auto writes = local_writes(r);
	auto send_local = [&](size_t first, size_t last) {
		for (uint32_t i = 1; i < mine.size(); i++) {
			const uint32_t y = mine[(hosts.position(r) + i) % mine.size()];
			for (size_t w = first; w < last; w++)
				b.write(y, held, writes[w].first * blk, into, writes[w].first * blk,
					(writes[w].second - writes[w].first) * blk, from_host,
					hosts.position(y));
		}
	};
	if (rdv) {
		b.wait(local_keys, mine.size() - 1);
		send_local(0, 1);
	}
	b.wait(from_hosts, received.size());
	send_local(rdv ? 1 : 0, writes.size());
	uint64_t arrivals = 0;
	for (uint32_t x : mine)
		if (x != r)
			arrivals += local_writes(x).size();
	b.wait(from_host, arrivals);
	if (!rdv)
		b.copy(Buf::output, 0, Buf::landing, 0, uint64_t(p) * blk);
	return Errc::ok;
}

namespace {

// Binomial tree over virtual ranks (root 0) for scatter and gather. A
// rank's landing area holds its subtree's blocks in virtual-rank order.
struct BlockTree {
	const BinomialTree tree;
	const uint32_t root;
	const uint64_t blk;

	uint32_t real(uint32_t v) const noexcept { return pattern::to_real(v, root, tree.p); }
	// Largest subtree below the root: the eager landing size in blocks.
	uint32_t largest_child_subtree() const noexcept
	{
		uint32_t best = 1;
		for (uint32_t c : tree.children(0))
			best = std::max(best, tree.subtree_size(c));
		return best;
	}
	// The root's copy of a child's subtree is in rank order and may wrap
	// around rank p - 1: one or two contiguous pieces [virtual begin, end).
	std::vector<std::pair<uint32_t, uint32_t>> root_pieces(uint32_t child) const
	{
		std::vector<std::pair<uint32_t, uint32_t>> out;
		const uint32_t end = child + tree.subtree_size(child);
		const uint32_t wrap = tree.p - root; // virtual rank of real rank 0
		if (root != 0 && child < wrap && end > wrap) {
			out.emplace_back(child, wrap);
			out.emplace_back(wrap, end);
		} else {
			out.emplace_back(child, end);
		}
		return out;
	}
};

} // namespace

// Binomial scatter (as in MPICH and libfabric's util_coll): each child gets
// its subtree's blocks in one write (two from a root whose blocks wrap).
Errc build_scatter_binomial(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t blk = d.count * b.elem();
	const BlockTree bt{BinomialTree{p}, d.root, blk};
	const uint32_t v = pattern::to_virtual(b.rank(), d.root, p);
	if (v == 0)
		b.copy(Buf::output, 0, Buf::input, d.root * blk, blk);
	if (p == 1 || d.count == 0)
		return Errc::ok;

	const unsigned fanout = pattern::ceil_log2(p);
	constexpr uint32_t data_counter = 0;
	b.set_counters(1 + uint64_t(fanout));
	b.choose_landing(uint64_t(bt.largest_child_subtree()) * blk, 0, fanout, limits);
	const bool rdv = !b.eager();
	if (rdv)
		b.layout().landing_bytes = v == 0 ? 0 : bt.tree.subtree_size(v) * blk;
	const auto parent = bt.tree.parent(v);
	if (parent) {
		const unsigned me = BinomialTree::child_index(*parent, v);
		if (rdv)
			b.ship_key(bt.real(*parent), OwnKey::landing, me, 1 + me);
		b.wait(data_counter, *parent == 0 ? bt.root_pieces(v).size() : 1);
	}
	for (uint32_t child : bt.tree.children(v)) {
		const unsigned j = BinomialTree::child_index(v, child);
		if (rdv)
			b.wait(1 + j);
		if (v == 0) {
			for (auto [first, last] : bt.root_pieces(child))
				b.write(bt.real(child), Buf::input, bt.real(first) * blk,
					Dest::landing, (first - child) * blk, (last - first) * blk,
					data_counter, j);
		} else {
			b.write(bt.real(child), Buf::landing, (child - v) * blk, Dest::landing, 0,
				bt.tree.subtree_size(child) * blk, data_counter, j);
		}
	}
	if (v != 0)
		b.copy(Buf::output, 0, Buf::landing, 0, blk);
	return Errc::ok;
}

// Binomial gather: the mirror image; a leaf writes its input straight to
// its parent, an inner rank forwards its whole subtree in one write, and
// the root rotates the virtual-rank-ordered blocks into rank order.
Errc build_gather_binomial(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t blk = d.count * b.elem();
	const BlockTree bt{BinomialTree{p}, d.root, blk};
	const uint32_t v = pattern::to_virtual(b.rank(), d.root, p);
	if (v == 0)
		b.copy(Buf::output, d.root * blk, Buf::input, 0, blk);
	if (p == 1 || d.count == 0)
		return Errc::ok;

	constexpr uint32_t data_counter = 0, key_counter = 1;
	b.set_counters(2);
	b.choose_landing(uint64_t(p) * blk, 0, 1, limits);
	const bool rdv = !b.eager();
	const uint32_t sub = bt.tree.subtree_size(v);
	const auto children = bt.tree.children(v);
	if (rdv)
		b.layout().landing_bytes = children.empty() ? 0 : uint64_t(sub) * blk;
	if (rdv)
		for (uint32_t child : children)
			b.ship_key(bt.real(child), OwnKey::landing, 0, key_counter);
	b.wait(data_counter, children.size());
	if (v == 0) {
		rotate_into_output(b, Buf::landing, blk, 1, p - 1, d.root, blk);
		return Errc::ok;
	}
	const uint32_t parent = *bt.tree.parent(v);
	if (rdv)
		b.wait(key_counter);
	if (children.empty()) {
		b.write(bt.real(parent), Buf::input, 0, Dest::landing, (v - parent) * blk, blk,
			data_counter);
		return Errc::ok;
	}
	b.copy(Buf::landing, 0, Buf::input, 0, blk);
	b.write(bt.real(parent), Buf::landing, 0, Dest::landing, (v - parent) * blk, sub * blk,
		data_counter);
	return Errc::ok;
}

// Alltoall: every block written directly to its owner, destinations in
// pairwise order (r + 1, r + 2, ...) so that no rank is hit by everyone at
// once; each arrival is copied out as soon as it is there.
Errc build_alltoall_pairwise(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t blk = d.count * b.elem();
	const uint32_t r = b.rank();
	b.copy(Buf::output, r * blk, Buf::input, r * blk, blk);
	if (p == 1 || d.count == 0)
		return Errc::ok;

	const uint32_t peers = p - 1;
	// Counters: arrival from distance i at i - 1; key from distance i at peers + i - 1.
	b.set_counters(2 * uint64_t(peers));
	b.choose_landing(uint64_t(peers) * blk, 0, peers, limits);
	const bool rdv = !b.eager();
	if (rdv) {
		b.layout().landing_bytes = 0;
		// The sender at distance i needs our output key, in its slot for
		// distance i (the same distance seen from the other side).
		for (uint32_t i = 1; i < p; ++i)
			b.ship_key(pattern::mod_sub(r, i, p), OwnKey::output, i - 1, peers + i - 1);
	}
	for (uint32_t i = 1; i < p; ++i) {
		const uint32_t t = static_cast<uint32_t>((uint64_t(r) + i) % p);
		if (rdv) {
			b.wait(peers + i - 1);
			b.write(t, Buf::input, t * blk, Dest::output, r * blk, blk, i - 1, i - 1);
		} else {
			b.write(t, Buf::input, t * blk, Dest::landing, (i - 1) * blk, blk, i - 1);
		}
	}
	for (uint32_t i = 1; i < p; ++i) {
		const uint32_t s = pattern::mod_sub(r, i, p);
		b.wait(i - 1);
		if (!rdv)
			b.copy(Buf::output, s * blk, Buf::landing, (i - 1) * blk, blk);
	}
	return Errc::ok;
}

} // namespace rcoll::engine::detail
