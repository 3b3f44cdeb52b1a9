// Allreduce, reduce and reduce_scatter on Gupta's degree-k tree (Gupta
// 2002, ch. 6). Floating-point bracketing: acc = ((x_v (op) c1) (op) c2)
// ..., children in ascending rank, level by level (Gupta 6.3.3); the root's
// value is broadcast, so every rank computes the same bits whatever the
// arrival order.
#include <algorithm>

#include "engine/builder.hpp"

namespace rcoll::engine::detail {

namespace {

using pattern::KnomialTree;

enum class TreeRole { allreduce, reduce, reduce_scatter };

// Gupta's degree-k tree (ch. 6): a node receives from at most k children
// per step, each into its own landing slot (Gupta: "a sender of rank r
// always writes into block r"), and reduces them in ascending order of
// their positions in the tree (pattern::HostOrder).
// Generalised to any N and k with the k-nomial tree of radix k + 1.
// allreduce then broadcasts the result down the same tree; reduce_scatter
// reduces the whole p * count vector to rank 0 and scatters the blocks
// down the tree, each child receiving its subtree's contiguous blocks.
Errc build_ktree(ScheduleBuilder& b, const Limits& limits, TreeRole role)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t esz = b.elem();
	const uint32_t root = role == TreeRole::reduce ? d.root : 0;
	const uint64_t n = role == TreeRole::reduce_scatter ? d.count * p : d.count;
	const uint64_t nb = n * esz;
	const uint64_t block = d.count * esz; // reduce_scatter output block
	// reduce_scatter's blocks go down by subtree, each one contiguous run
	// of ranks: it keeps the ranks' own order.
	const pattern::HostOrder order =
		role == TreeRole::reduce_scatter ? pattern::HostOrder(p, root) : b.host_order(root);
	const uint32_t v = order.to_virtual(b.rank());

	if (p == 1) {
		b.copy(Buf::output, 0, Buf::input, 0, nb);
		return Errc::ok;
	}
	if (d.count == 0)
		return Errc::ok;

	const KnomialTree tree{p, tree_radix(d, limits)};
	const uint32_t k = tree.k;
	const unsigned levels = tree.levels();
	const uint32_t slots = levels * k;
	auto real = [&](uint32_t vr) { return order.to_real(vr); };
	// Receiving levels of u: every level below the one it sends at.
	auto up_slots = [&](uint32_t u) {
		return uint64_t(u == 0 ? levels : tree.send_level(u)) * k;
	};
	auto subtree = [&](uint32_t u) -> uint64_t {
		uint64_t span = 1;
		for (unsigned j = 0; j < tree.send_level(u); ++j)
			span *= uint64_t(k) + 1;
		return u == 0 ? p : std::min<uint64_t>(span, p - u);
	};
	// Landing of u: up slots, then the area for what comes down, then the
	// accumulator when the output buffer cannot hold it.
	const bool has_down = role != TreeRole::reduce;
	auto acc_in_output = [&](uint32_t u) {
		return role == TreeRole::allreduce || (role == TreeRole::reduce && u == 0);
	};
	auto down_offset = [&](uint32_t u) { return up_slots(u) * nb; };
	auto down_bytes = [&](uint32_t u) -> uint64_t {
		if (!has_down || u == 0)
			return 0;
		return role == TreeRole::allreduce ? nb : subtree(u) * block;
	};
	auto acc_offset = [&](uint32_t u) { return down_offset(u) + down_bytes(u); };
	auto landing_of = [&](uint32_t u) { return acc_offset(u) + (acc_in_output(u) ? 0 : nb); };
	// The eager layout must hold the largest landing of any rank: both
	// grow with the level a rank sends at, so it is the root's or that of
	// the first child of the root's top level.
	uint64_t uniform = landing_of(0);
	if (levels > 0) {
		uint64_t top = 1;
		for (unsigned j = 1; j < levels; ++j)
			top *= uint64_t(k) + 1;
		uniform = std::max(uniform, landing_of(static_cast<uint32_t>(top)));
	}

	// Counters: up slot s, the down arrival, keys of children (slot s), key
	// of the parent. Key slots: [0, slots) children, `slots` the parent.
	const uint32_t down_counter = slots;
	const uint32_t child_key_base = slots + 1;
	const uint32_t parent_key = 2 * slots + 1;
	b.set_counters(2 * uint64_t(slots) + 2);
	// Children's vectors are reduced where they land; allreduce copies out
	// the result that comes down, which a rendezvous writes into outputs.
	b.choose_landing(uniform, role == TreeRole::allreduce ? nb : 0, 0, slots + 1, limits);
	if (!b.eager())
		b.layout().landing_bytes = landing_of(v);
	const bool rdv = !b.eager();

	const auto parent = tree.parent(v);
	// What each child needs from us to write up, and what we need from the
	// parent to receive the down phase: keys first, all at once.
	if (rdv) {
		for (unsigned level = 0; level < levels; ++level)
			for (uint32_t child : tree.children_at(v, level))
				b.ship_key(real(child), OwnKey::landing, slots, parent_key);
		if (parent && has_down) {
			const uint32_t me = tree.child_slot(v);
			OwnKey which =
				role == TreeRole::allreduce ? OwnKey::output : OwnKey::landing;
			b.ship_key(real(*parent), which, me, child_key_base + me);
		}
	}

	// Reduce up the tree.
	Buf acc = Buf::input;
	uint64_t acc_off = 0;
	const Buf acc_home = acc_in_output(v) ? Buf::output : Buf::landing;
	const uint64_t acc_home_off = acc_in_output(v) ? 0 : acc_offset(v);
	for (unsigned level = 0; level < levels; ++level) {
		for (uint32_t child : tree.children_at(v, level)) {
			const uint32_t s = tree.child_slot(child);
			b.wait(s);
			b.reduce(acc_home, acc_home_off, acc, acc_off, Buf::landing, s * nb, n);
			acc = acc_home;
			acc_off = acc_home_off;
		}
	}
	uint32_t up_write = 0;
	if (parent) {
		if (rdv)
			b.wait(parent_key);
		up_write = b.write(real(*parent), acc, acc_off, Dest::landing,
				   tree.child_slot(v) * nb, nb, tree.child_slot(v), slots);
	}
	if (!has_down)
		return Errc::ok;

	// Down the tree, farthest (highest level) children first.
	if (role == TreeRole::allreduce) {
		Buf src = Buf::output;
		uint64_t src_off = 0;
		if (parent) {
			b.wait(down_counter);
			if (!rdv) {
				src = Buf::landing;
				src_off = down_offset(v);
			}
		}
		for (unsigned level = levels; level-- > 0;) {
			for (uint32_t child : tree.children_at(v, level)) {
				const uint32_t s = tree.child_slot(child);
				if (rdv) {
					b.wait(child_key_base + s);
					b.write(real(child), src, src_off, Dest::output, 0, nb,
						down_counter, s);
				} else {
					b.write(real(child), src, src_off, Dest::landing,
						down_offset(child), nb, down_counter);
				}
			}
		}
		if (parent && !rdv) {
			if (acc == Buf::output)
				b.wait_sent(up_write);
			b.copy(Buf::output, 0, Buf::landing, down_offset(v), nb);
		}
		return Errc::ok;
	}

	// reduce_scatter: the root holds all p blocks in its accumulator; a
	// child receives blocks [child, child + subtree) into its down area.
	Buf src = acc_home;
	uint64_t src_off = acc_home_off;
	if (parent) {
		b.wait(down_counter);
		src = Buf::landing;
		src_off = down_offset(v);
	}
	for (unsigned level = levels; level-- > 0;) {
		for (uint32_t child : tree.children_at(v, level)) {
			const uint32_t s = tree.child_slot(child);
			if (rdv)
				b.wait(child_key_base + s);
			b.write(real(child), src, src_off + (child - v) * block, Dest::landing,
				down_offset(child), subtree(child) * block, down_counter, s);
		}
	}
	b.copy(Buf::output, 0, src, src_off, block);
	return Errc::ok;
}

} // namespace

Errc build_allreduce_ktree(ScheduleBuilder& b, const Limits& limits)
{
	return build_ktree(b, limits, TreeRole::allreduce);
}

Errc build_reduce_ktree(ScheduleBuilder& b, const Limits& limits)
{
	return build_ktree(b, limits, TreeRole::reduce);
}

Errc build_reduce_scatter_ktree(ScheduleBuilder& b, const Limits& limits)
{
	return build_ktree(b, limits, TreeRole::reduce_scatter);
}

} // namespace rcoll::engine::detail
