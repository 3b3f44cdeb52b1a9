// Broadcast, any root.
//
// ktree: Gupta 2002 ch. 5 (binomial) widened to the k-nomial tree of his
// ch. 6: each node writes to up to k children per level, so a message
// crosses ceil(log_{k+1} p) levels instead of ceil(log2 p); binomial is
// k = 1. Where a message costs far more than its bytes (the tcp core),
// fewer levels win although a node sends more messages. The root writes
// to its farthest child first;
// the message is cut into chunks that travel in join-time registered
// landing blocks, each chunk forwarded as soon as it arrives (Gupta forwards
// after the whole message; chunk-wise forwarding pipelines the tree). A
// child has `bcast_blocks` blocks per operation; before its parent reuses a
// block the child returns a credit (Gupta's "notification" before reusing
// block 0, and LA-MPI's channel recycling, Yu et al.). Messages too large
// for scratch are written straight into the children's user buffers,
// after each child ships its buffer key to its parent (Gupta's rendezvous).
//
// scatter_allgather: van de Geijn's long-message broadcast (as in MPICH):
// a binomial scatter of p segments followed by an allgather along the
// chain 0 -> 1 -> ... -> p-1 of virtual ranks, both written straight into
// the user buffers, chunked so that a rank forwards a chunk as soon as it
// has it. A rank never receives a segment it already got from the scatter.
#include <algorithm>

#include "engine/builder.hpp"

namespace rcoll::engine::detail {

namespace {

using pattern::BinomialTree;
using pattern::Chunking;
using pattern::KnomialTree;
using pattern::Partition;

// `radix`: the tree's degree, 1..p - 1.
Errc build_broadcast_tree(ScheduleBuilder& b, const Limits& limits, uint32_t radix)
{
	const uint32_t p = b.size();
	const OpDescriptor& d = b.op();
	const uint64_t esz = b.elem();
	if (p == 1 || d.count == 0)
		return Errc::ok;

	const KnomialTree tree{p, radix};
	const pattern::HostOrder order = b.host_order(d.root);
	const uint32_t v = order.to_virtual(b.rank());
	// A landing slot, a credit counter and a key slot per possible child.
	const unsigned fanout = tree.slots();
	auto real = [&](uint32_t vr) { return order.to_real(vr); };

	// Eager if the blocks of one edge fit; else rendezvous.
	uint64_t chunk = std::min(
		d.count, b.fit_chunk(d.count, limits, [](uint64_t) { return uint64_t(0); }));
	Chunking chunks{d.count, chunk};
	uint32_t blocks =
		std::min<uint32_t>(chunks.count(), limits.bcast_blocks ? limits.bcast_blocks : 1);
	b.choose_landing(uint64_t(blocks) * chunk * esz, 0, fanout, limits);

	if (b.eager()) {
		// Counters: [0, blocks) data per landing block, then one credit
		// counter per possible child.
		const uint32_t credit_base = blocks;
		b.set_counters(uint64_t(blocks) + fanout);
		const uint32_t nchunks = chunks.count();
		const auto children = tree.children_in_send_order(v);
		const auto parent = tree.parent(v);
		std::vector<uint32_t> forwarded;
		for (uint32_t c = 0; c < nchunks; ++c) {
			const uint32_t blk = c % blocks;
			const uint64_t bytes = chunks.size(c) * esz;
			const uint64_t user_off = chunks.offset(c) * esz;
			const uint64_t block_off = uint64_t(blk) * chunk * esz;
			if (parent)
				b.wait(blk, c / blocks + 1);
			forwarded.clear();
			for (uint32_t child : children) {
				const unsigned j = tree.child_slot(child);
				if (c >= blocks)
					b.wait(credit_base + j, c - blocks + 1);
				if (parent)
					forwarded.push_back(b.write(real(child), Buf::landing,
								    block_off, Dest::landing,
								    block_off, bytes, blk));
				else
					b.write(real(child), Buf::output, user_off, Dest::landing,
						block_off, bytes, blk);
			}
			if (!parent)
				continue;
			// Sends to children before copying out (Gupta 5.4).
			b.copy(Buf::output, user_off, Buf::landing, block_off, bytes);
			if (c + blocks < nchunks) {
				for (uint32_t w : forwarded)
					b.wait_sent(w);
				b.signal(real(*parent), credit_base + tree.child_slot(v));
			}
		}
		return Errc::ok;
	}

	// Rendezvous: counters [0, fanout) key arrivals per child, then one per chunk.
	chunk = b.fit_chunk(d.count, limits, [&](uint64_t c) {
		return fanout + Chunking{d.count, c}.count();
	});
	if (chunk == 0)
		return Errc::no_resources;
	chunks = Chunking{d.count, chunk};
	b.layout().landing_bytes = 0;
	const uint32_t data_base = fanout;
	b.set_counters(uint64_t(fanout) + chunks.count());
	const auto children = tree.children_in_send_order(v);
	const auto parent = tree.parent(v);
	if (parent) {
		const unsigned me = tree.child_slot(v);
		b.ship_key(real(*parent), OwnKey::output, me, me);
	}
	for (uint32_t c = 0; c < chunks.count(); ++c) {
		const uint64_t off = chunks.offset(c) * esz;
		const uint64_t bytes = chunks.size(c) * esz;
		if (parent)
			b.wait(data_base + c);
		for (uint32_t child : children) {
			const unsigned j = tree.child_slot(child);
			if (c == 0)
				b.wait(j);
			b.write(real(child), Buf::output, off, Dest::output, off, bytes,
				data_base + c, j);
		}
	}
	return Errc::ok;
}

} // namespace

Errc build_broadcast_binomial(ScheduleBuilder& b, const Limits& limits)
{
	return build_broadcast_tree(b, limits, 1);
}

Errc build_broadcast_ktree(ScheduleBuilder& b, const Limits& limits)
{
	return build_broadcast_tree(b, limits, tree_radix(b.op(), limits));
}

Errc build_broadcast_scatter_allgather(ScheduleBuilder& b, const Limits& limits)
{
	const uint32_t p = b.size();
	const OpDescriptor& d = b.op();
	const uint64_t esz = b.elem();
	if (p == 1 || d.count == 0)
		return Errc::ok;

	const BinomialTree tree{p};
	const Partition part{d.count, p};
	const pattern::HostOrder order = b.host_order(d.root);
	const uint32_t v = order.to_virtual(b.rank());
	const unsigned fanout = pattern::ceil_log2(p);
	auto real = [&](uint32_t vr) { return order.to_real(vr); };
	// Segments [u, u + subtree) reach u during the scatter; the root has all.
	auto has = [&](uint32_t u, uint32_t s) {
		return u == 0 || (s >= u && s < u + tree.subtree_size(u));
	};
	auto subtree_bytes = [&](uint32_t u) {
		return part.span(u, u + tree.subtree_size(u)) * esz;
	};
	// Whether u writes anything to its chain successor u + 1.
	auto chain_writes = [&](uint32_t u) {
		return u + 1 < p && subtree_bytes(u + 1) < d.count * esz;
	};

	// Counters: [0, fanout) keys of children, fanout: key of the chain
	// successor, fanout + 1: the scatter range, then chunk counters.
	const uint32_t chain_key = fanout;
	const uint32_t scatter_counter = fanout + 1;
	const uint32_t seg_base = fanout + 2;
	uint64_t chunk = b.fit_chunk(part.max_size(), limits, [&](uint64_t c) {
		return uint64_t(seg_base) + uint64_t(p) * Chunking{part.max_size(), c}.count();
	});
	if (chunk == 0)
		return Errc::no_resources;
	const uint32_t per_segment = Chunking{part.max_size(), chunk}.count();
	auto seg_counter = [&](uint32_t s, uint32_t c) { return seg_base + s * per_segment + c; };
	b.layout().landing_in_scratch = false;
	b.layout().landing_bytes = 0;
	b.layout().key_slots = fanout + 1;
	b.set_counters(uint64_t(seg_base) + uint64_t(p) * per_segment);

	const auto parent = tree.parent(v);
	if (parent && subtree_bytes(v) > 0) {
		const unsigned me = BinomialTree::child_index(*parent, v);
		b.ship_key(real(*parent), OwnKey::output, me, me);
	}
	if (v > 0 && chain_writes(v - 1))
		b.ship_key(real(v - 1), OwnKey::output, chain_key, chain_key);

	// Scatter: each child gets its subtree's segments in one write.
	if (parent && subtree_bytes(v) > 0)
		b.wait(scatter_counter);
	for (uint32_t child : tree.children(v)) {
		const uint64_t bytes = subtree_bytes(child);
		if (bytes == 0)
			continue;
		const unsigned j = BinomialTree::child_index(v, child);
		const uint64_t off = part.offset(child) * esz;
		b.wait(j);
		b.write(real(child), Buf::output, off, Dest::output, off, bytes, scatter_counter,
			j);
	}

	// Allgather along the chain: in step j virtual rank v handles segment
	// v - j: it waits for it unless it has it, and passes it on unless the
	// successor has it.
	bool successor_key_waited = false;
	for (uint32_t j = 0; j < p; ++j) {
		const uint32_t s = pattern::mod_sub(v, j, p);
		const bool receive = !has(v, s);
		const bool forward = j + 1 < p && v + 1 < p && !has(v + 1, s);
		const Chunking segment{part.size(s), chunk};
		for (uint32_t c = 0; c < segment.count(); ++c) {
			if (receive)
				b.wait(seg_counter(s, c));
			if (!forward)
				continue;
			if (!successor_key_waited) {
				b.wait(chain_key);
				successor_key_waited = true;
			}
			const uint64_t off = (part.offset(s) + segment.offset(c)) * esz;
			b.write(real(v + 1), Buf::output, off, Dest::output, off,
				segment.size(c) * esz, seg_counter(s, c), chain_key);
		}
	}
	return Errc::ok;
}

} // namespace rcoll::engine::detail
