// Barriers over monotone counters (Gupta 2002, ch. 4). Every signal is a
// zero-byte RDMA write with immediate data; the receiver counts arrivals
// per round and proceeds when the count reaches the barrier epoch. Counts
// are 64-bit and compared with ">= epoch" (Gupta accepts a partner that is
// already one barrier ahead), so no wrap-around and no buffer reset: the
// thesis' 8-bit counter wrapped at 127 and completed early after the wrap.
#include "engine/builder.hpp"

namespace rcoll::engine::detail {

// Pairwise exchange with recursive doubling, partner = rank ^ 2^d. Group
// sizes that are not a power of two fold the extra ranks onto the first
// ones before the exchange and release them after (log2 N + 2 steps).
Errc build_barrier_pairwise(ScheduleBuilder& b, const Limits&)
{
	b.set_epoch(EpochClass::pairwise);
	MonotoneCounters mc{b.size()};
	pattern::FoldedHypercube cube{b.size()};
	const uint32_t r = b.rank();
	const uint32_t pre = monotone_counter | mc.pairwise(0);
	const uint32_t post = monotone_counter | mc.pairwise(mc.rounds() + 1);
	if (b.size() == 1)
		return Errc::ok;

	if (cube.is_extra(r)) {
		b.signal(*cube.fold_partner(r), pre);
		b.wait(post);
		return Errc::ok;
	}
	auto extra = cube.fold_partner(r);
	if (extra)
		b.wait(pre);
	for (unsigned dim = 0; dim < cube.dimensions(); ++dim) {
		const uint32_t counter = monotone_counter | mc.pairwise(1 + dim);
		b.signal(pattern::FoldedHypercube::partner(r, dim), counter);
		b.wait(counter);
	}
	if (extra)
		b.signal(*extra, post);
	return Errc::ok;
}

// Dissemination: round j signals r + 2^j and waits for r - 2^j, any N in
// ceil(log2 N) rounds.
Errc build_barrier_dissemination(ScheduleBuilder& b, const Limits&)
{
	b.set_epoch(EpochClass::dissemination);
	MonotoneCounters mc{b.size()};
	pattern::Dissemination dis{b.size()};
	for (unsigned j = 0; j < dis.rounds(); ++j) {
		const uint32_t counter = monotone_counter | mc.dissemination(j);
		b.signal(dis.to(b.rank(), j), counter);
		b.wait(counter);
	}
	return Errc::ok;
}

// Gather and release over a k-nomial tree rooted at rank 0 (the combining
// tree barrier of Yew, Tzeng and Lawrie 1987, with the wake-up tree of
// Mellor-Crummey and Scott 1991): a member signals its parent once all its
// children have, and waits for the release that the root starts. 2 (p - 1)
// messages against dissemination's p ceil(log2 p), in twice the levels.
// Each child signals a counter of its own at the parent: a child may post
// the next barriers before this one ends, and a shared count would take
// its early arrivals for a sibling's. Every barrier of a group takes the
// same radix (the selector's, or a tuning rule's, for the group's size).
Errc build_barrier_ktree(ScheduleBuilder& b, const Limits& limits)
{
	b.set_epoch(EpochClass::tree);
	const MonotoneCounters mc{b.size()};
	const pattern::KnomialTree tree{b.size(), tree_radix(b.op(), limits)};
	if (tree.slots() > mc.tree_slots())
		return Errc::no_resources;
	auto gather = [&](uint32_t child) {
		return monotone_counter | mc.tree_gather(tree.child_slot(child));
	};
	const uint32_t release = monotone_counter | mc.tree_release();
	const pattern::HostOrder order = b.host_order(0);
	const uint32_t v = order.to_virtual(b.rank());
	const auto children = tree.children_in_send_order(v);
	for (uint32_t child : children)
		b.wait(gather(child));
	if (auto parent = tree.parent(v)) {
		b.signal(order.to_real(*parent), gather(v));
		b.wait(release);
	}
	for (uint32_t child : children)
		b.signal(order.to_real(child), release);
	return Errc::ok;
}

} // namespace rcoll::engine::detail
