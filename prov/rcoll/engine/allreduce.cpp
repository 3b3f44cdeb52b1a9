// Reductions: allreduce, reduce and reduce_scatter.
//
// Floating-point bracketing (all operations are commutative, the order of
// operands is fixed so every rank that computes a value computes the same
// bits, whatever the arrival order):
//  ktree               acc = ((x_v (op) c1) (op) c2) ..., children in
//                      ascending rank, level by level (Gupta 6.3.3); the
//                      root's value is broadcast, so all ranks agree.
//  recursive_doubling  at distance d both partners compute
//                      lower-half (op) upper-half: identical on all ranks.
//  rabenseifner        each block is reduced once, lower half first, and
//                      then copied: identical on all ranks.
//  ring                segment s is accumulated along the ring starting
//                      at rank s + 1: ((x_{s+1} (op) x_{s+2}) ...) (op) x_s;
//                      a different bracketing per segment, identical on
//                      every rank (Patarasuk and Yuan, section 2.1).
#include <algorithm>

#include "engine/builder.hpp"

namespace rcoll::engine::detail {

namespace {

using pattern::Chunking;
using pattern::FoldedHypercube;
using pattern::KnomialTree;
using pattern::Partition;

uint32_t effective_radix(const OpDescriptor& d, const Limits& limits) noexcept
{
	uint32_t k = d.params.radix ? d.params.radix : limits.radix;
	if (k == 0)
		k = 1;
	return d.size > 1 ? std::min(k, d.size - 1) : 1;
}

enum class TreeRole { allreduce, reduce, reduce_scatter };

// Gupta's degree-k tree (ch. 6): a node receives from at most k children
// per step, each into its own landing slot (Gupta: "a sender of rank r
// always writes into block r"), and reduces them in ascending rank order.
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
	const uint32_t v = pattern::to_virtual(b.rank(), root, p);

	if (p == 1) {
		b.copy(Buf::output, 0, Buf::input, 0, nb);
		return Errc::ok;
	}
	if (d.count == 0)
		return Errc::ok;

	const KnomialTree tree{p, effective_radix(d, limits)};
	const uint32_t k = tree.k;
	const unsigned levels = tree.levels();
	const uint32_t slots = levels * k;
	auto real = [&](uint32_t vr) { return pattern::to_real(vr, root, p); };
	// Receiving levels of u: every level below the one it sends at.
	auto up_slots = [&](uint32_t u) { return uint64_t(u == 0 ? levels : tree.send_level(u)) * k; };
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
	b.choose_landing(uniform, 0, slots + 1, limits);
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
			OwnKey which = role == TreeRole::allreduce ? OwnKey::output : OwnKey::landing;
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
		up_write = b.write(real(*parent), acc, acc_off, Dest::landing, tree.child_slot(v) * nb, nb,
				   tree.child_slot(v), slots);
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
					b.write(real(child), src, src_off, Dest::output, 0, nb, down_counter, s);
				} else {
					b.write(real(child), src, src_off, Dest::landing, down_offset(child), nb,
						down_counter);
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

namespace {

// The non-power-of-two fold shared by recursive doubling and Rabenseifner:
// an extra rank r >= pof2 writes its input to core rank r - pof2, which
// reduces it (lower rank first) before the exchange and writes the result
// back after it.
struct Fold {
	static constexpr uint32_t fold_counter = 0;

	const FoldedHypercube cube;
	const uint32_t rank;
	const uint64_t nb;
	const uint64_t fold_offset = 0; // landing slot of the extra's input
	uint64_t result_offset = 0;	// landing slot of the result at the extra
	uint32_t result_counter = 0;
	uint32_t key_counter = 0;
	uint32_t key_slot = 0;

	// Extra ranks: the whole operation. Returns true if `rank` is an extra.
	bool run_extra(ScheduleBuilder& b) const
	{
		if (!cube.is_extra(rank))
			return false;
		const uint32_t core = *cube.fold_partner(rank);
		if (!b.eager()) {
			b.ship_key(core, OwnKey::output, key_slot, key_counter);
			b.wait(key_counter);
		}
		b.write(core, Buf::input, 0, Dest::landing, fold_offset, nb, fold_counter, key_slot);
		b.wait(result_counter);
		if (b.eager())
			b.copy(Buf::output, 0, Buf::landing, result_offset, nb);
		return true;
	}
	// Core ranks with an extra: fold it in; returns the accumulator.
	Buf fold_in(ScheduleBuilder& b) const
	{
		auto extra = cube.fold_partner(rank);
		if (!extra)
			return Buf::input;
		if (!b.eager())
			b.ship_key(*extra, OwnKey::landing, key_slot, key_counter);
		b.wait(fold_counter);
		b.reduce(Buf::output, 0, Buf::input, 0, Buf::landing, fold_offset, nb / b.elem());
		return Buf::output;
	}
	void release(ScheduleBuilder& b) const
	{
		auto extra = cube.fold_partner(rank);
		if (!extra)
			return;
		if (b.eager()) {
			b.write(*extra, Buf::output, 0, Dest::landing, result_offset, nb, result_counter);
		} else {
			b.wait(key_counter);
			b.write(*extra, Buf::output, 0, Dest::output, 0, nb, result_counter, key_slot);
		}
	}
};

} // namespace

// Recursive doubling: at distance 2^j partners exchange their whole partial
// vectors; log2(pof2) steps of n bytes, plus the fold.
Errc build_allreduce_recursive_doubling(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint64_t nb = d.count * b.elem();
	if (d.size == 1) {
		b.copy(Buf::output, 0, Buf::input, 0, nb);
		return Errc::ok;
	}
	if (d.count == 0)
		return Errc::ok;

	const FoldedHypercube cube{d.size};
	const unsigned dims = cube.dimensions();
	const uint32_t r = b.rank();
	// Landing: fold slot, one slot per step, result slot.
	auto step_offset = [&](unsigned j) { return (1 + uint64_t(j)) * nb; };
	// Counters: fold, steps, result, step keys, fold key.
	const uint32_t result_counter = 1 + dims;
	const uint32_t key_base = 2 + dims;
	Fold fold{cube, r, nb};
	fold.result_offset = (1 + uint64_t(dims)) * nb;
	fold.result_counter = result_counter;
	fold.key_counter = key_base + dims;
	fold.key_slot = dims;
	b.set_counters(3 + 2 * uint64_t(dims));
	b.choose_landing((2 + uint64_t(dims)) * nb, 0, dims + 1, limits);
	// In rendezvous the result goes straight into the extra's output.
	if (!b.eager())
		b.layout().landing_bytes = fold.result_offset;

	if (fold.run_extra(b))
		return Errc::ok;
	if (!b.eager())
		for (unsigned j = 0; j < dims; ++j)
			b.ship_key(FoldedHypercube::partner(r, j), OwnKey::landing, j, key_base + j);
	Buf acc = fold.fold_in(b);
	for (unsigned j = 0; j < dims; ++j) {
		const uint32_t partner = FoldedHypercube::partner(r, j);
		if (!b.eager())
			b.wait(key_base + j);
		const uint32_t w = b.write(partner, acc, 0, Dest::landing, step_offset(j), nb, 1 + j, j);
		b.wait(1 + j);
		if (acc == Buf::output)
			b.wait_sent(w);
		if (r < partner)
			b.reduce(Buf::output, 0, acc, 0, Buf::landing, step_offset(j), d.count);
		else
			b.reduce(Buf::output, 0, Buf::landing, step_offset(j), acc, 0, d.count);
		acc = Buf::output;
	}
	fold.release(b);
	return Errc::ok;
}

// Rabenseifner (2004): reduce-scatter by recursive halving, then allgather
// by recursive doubling; each rank moves 2 (pof2 - 1) / pof2 * n bytes in
// 2 log2(pof2) steps, plus the fold.
Errc build_allreduce_rabenseifner(ScheduleBuilder& b, const Limits& limits)
{
	const OpDescriptor& d = b.op();
	const uint64_t esz = b.elem();
	const uint64_t nb = d.count * esz;
	if (d.size == 1) {
		b.copy(Buf::output, 0, Buf::input, 0, nb);
		return Errc::ok;
	}
	if (d.count == 0)
		return Errc::ok;

	const FoldedHypercube cube{d.size};
	const unsigned dims = cube.dimensions();
	const uint32_t pof2 = cube.pof2();
	const uint32_t r = b.rank();
	const Partition part{d.count, pof2};

	// Landing: fold slot | reduce-scatter slot per step (sized for the
	// largest half any rank keeps) | allgather area (block offsets) | result.
	std::vector<uint64_t> rs_offset(dims + 1);
	rs_offset[0] = nb;
	for (unsigned j = 0; j < dims; ++j)
		rs_offset[j + 1] = rs_offset[j] + part.max_size() * (pof2 >> (j + 1)) * esz;
	const uint64_t ag_offset = rs_offset[dims];
	// Counters: fold | rs steps | ag steps | result | rs keys | ag keys | fold key.
	const uint32_t rs_counter = 1, ag_counter = 1 + dims, result_counter = 1 + 2 * dims;
	const uint32_t rs_key = 2 + 2 * dims, ag_key = 2 + 3 * dims;
	Fold fold{cube, r, nb};
	fold.result_offset = ag_offset + nb;
	fold.result_counter = result_counter;
	fold.key_counter = 2 + 4 * dims;
	fold.key_slot = 2 * dims;
	b.set_counters(3 + 4 * uint64_t(dims));
	b.choose_landing(ag_offset + 2 * nb, 0, 2 * dims + 1, limits);
	// In rendezvous the allgather and the result go straight into outputs.
	if (!b.eager())
		b.layout().landing_bytes = ag_offset;

	if (fold.run_extra(b))
		return Errc::ok;
	if (!b.eager())
		for (unsigned j = 0; j < dims; ++j) {
			const uint32_t partner = r ^ (pof2 >> (j + 1));
			b.ship_key(partner, OwnKey::landing, j, rs_key + j);
			b.ship_key(partner, OwnKey::output, dims + j, ag_key + j);
		}
	Buf acc = fold.fold_in(b);

	// Reduce-scatter: halve the block range each step, keep the half that
	// holds our own block index.
	struct Range {
		uint32_t lo, hi;
	};
	std::vector<Range> kept(dims), given(dims);
	std::vector<uint32_t> rs_writes(dims);
	std::vector<Buf> rs_source(dims);
	Range cur{0, pof2};
	for (unsigned j = 0; j < dims; ++j) {
		const uint32_t dist = pof2 >> (j + 1);
		const uint32_t partner = r ^ dist;
		const uint32_t mid = cur.lo + dist;
		const bool lower = (r & dist) == 0;
		const Range keep = lower ? Range{cur.lo, mid} : Range{mid, cur.hi};
		const Range give = lower ? Range{mid, cur.hi} : Range{cur.lo, mid};
		if (!b.eager())
			b.wait(rs_key + j);
		rs_source[j] = acc;
		rs_writes[j] = b.write(partner, acc, part.offset(give.lo) * esz, Dest::landing, rs_offset[j],
				       part.span(give.lo, give.hi) * esz, rs_counter + j, j);
		b.wait(rs_counter + j);
		const uint64_t off = part.offset(keep.lo) * esz;
		const uint64_t elems = part.span(keep.lo, keep.hi);
		if (r < partner)
			b.reduce(Buf::output, off, acc, off, Buf::landing, rs_offset[j], elems);
		else
			b.reduce(Buf::output, off, Buf::landing, rs_offset[j], acc, off, elems);
		kept[j] = keep;
		given[j] = give;
		cur = keep;
		acc = Buf::output;
	}
	// Allgather: retrace the halving; the partner gets what we own.
	for (unsigned j = dims; j-- > 0;) {
		const uint32_t dist = pof2 >> (j + 1);
		const uint32_t partner = r ^ dist;
		const Range own = kept[j];
		const Range other = given[j];
		const uint64_t own_off = part.offset(own.lo) * esz;
		const uint64_t other_off = part.offset(other.lo) * esz;
		const uint64_t other_bytes = part.span(other.lo, other.hi) * esz;
		if (b.eager()) {
			b.write(partner, Buf::output, own_off, Dest::landing, ag_offset + own_off,
				part.span(own.lo, own.hi) * esz, ag_counter + j);
			b.wait(ag_counter + j);
			// The range we gave away in step j comes back reduced.
			if (rs_source[j] == Buf::output)
				b.wait_sent(rs_writes[j]);
			b.copy(Buf::output, other_off, Buf::landing, ag_offset + other_off, other_bytes);
		} else {
			b.wait(ag_key + j);
			b.write(partner, Buf::output, own_off, Dest::output, own_off,
				part.span(own.lo, own.hi) * esz, ag_counter + j, dims + j);
			b.wait(ag_counter + j);
		}
	}
	fold.release(b);
	return Errc::ok;
}

namespace {

enum class RingRole { allreduce, reduce_scatter, reduce };

// Patarasuk and Yuan (2009): p - 1 reduce-scatter steps around the ring
// (in step j rank r sends segment r - j to r + 1, which reduces it into
// its own copy), then p - 1 allgather steps. Each rank sends
// 2 (p - 1) / p * n bytes, the lower bound. Segments are cut into chunks
// that are forwarded as soon as they are reduced, so the reduction of one
// chunk overlaps the transfer of the next.
//
// allreduce writes partial segments straight into the neighbour's output
// buffer when the data does not fit scratch; reduce_scatter keeps partials
// in the landing area and ends with block r; reduce ends with each rank
// writing its finished segment to the root.
Errc build_ring(ScheduleBuilder& b, const Limits& limits, RingRole role)
{
	const OpDescriptor& d = b.op();
	const uint32_t p = d.size;
	const uint64_t esz = b.elem();
	const uint64_t total = role == RingRole::reduce_scatter ? d.count * p : d.count;
	const uint32_t r = b.rank();
	if (p == 1) {
		b.copy(Buf::output, 0, Buf::input, 0, total * esz);
		return Errc::ok;
	}
	if (d.count == 0)
		return Errc::ok;

	const Partition part{total, p};
	const pattern::Ring ring{p, role == RingRole::reduce_scatter ? -1 : 0};
	const uint32_t right = pattern::ring_right(r, p);
	const uint32_t steps = p - 1;
	const bool gather_phase = role == RingRole::allreduce;
	const uint32_t phases = gather_phase ? 2 : 1;
	const uint64_t max_seg = part.max_size();
	const uint64_t slot_bytes = max_seg * esz;

	// Counters: [phase][step][chunk], then GATHER (reduce), then keys.
	uint64_t chunk = b.fit_chunk(max_seg, limits, [&](uint64_t c) {
		return uint64_t(phases) * steps * Chunking{max_seg, c}.count() + 3;
	});
	if (chunk == 0)
		return Errc::no_resources;
	const uint32_t per_step = Chunking{max_seg, chunk}.count();
	auto counter = [&](uint32_t phase, uint32_t step, uint32_t c) {
		return (phase * steps + step) * per_step + c;
	};
	const uint32_t gather_counter = phases * steps * per_step;
	const uint32_t right_key_counter = gather_counter + 1;
	const uint32_t root_key_counter = gather_counter + 2;
	b.set_counters(uint64_t(gather_counter) + 3);
	constexpr uint32_t right_key_slot = 0, root_key_slot = 1;

	// Landing: one slot per (phase, step), then the root's gather area.
	auto slot = [&](uint32_t phase, uint32_t step) { return (uint64_t(phase) * steps + step) * slot_bytes; };
	const uint64_t gather_area = slot(phases, 0);
	const uint64_t eager_bytes = gather_area + (role == RingRole::reduce ? total * esz : 0);
	b.choose_landing(eager_bytes, 0, 2, limits);
	const bool rdv = !b.eager();
	// In rendezvous, allreduce needs no landing at all: partials and final
	// segments go straight into the right neighbour's output buffer.
	const bool into_output = rdv && role == RingRole::allreduce;
	if (into_output)
		b.layout().landing_bytes = 0;
	else if (rdv)
		b.layout().landing_bytes = slot(phases, 0);

	if (rdv) {
		const uint32_t left = pattern::ring_left(r, p);
		b.ship_key(left, into_output ? OwnKey::output : OwnKey::landing, right_key_slot,
			   right_key_counter);
		b.wait(right_key_counter);
	}
	const bool root = role == RingRole::reduce && r == d.root;
	if (role == RingRole::reduce && rdv && root)
		for (uint32_t q = 0; q < p; ++q)
			if (q != r && part.size(ring.owned_after_reduce_scatter(q)) > 0)
				b.ship_key(q, OwnKey::output, root_key_slot, root_key_counter);

	auto seg_off = [&](uint32_t s, const Chunking& ch, uint32_t c) {
		return (part.offset(s) + ch.offset(c)) * esz;
	};
	auto send = [&](Buf src, uint64_t src_off, uint32_t phase, uint32_t step, uint32_t s,
			const Chunking& ch, uint32_t c) {
		const uint64_t bytes = ch.size(c) * esz;
		if (into_output)
			return b.write(right, src, src_off, Dest::output, seg_off(s, ch, c), bytes,
				       counter(phase, step, c), right_key_slot);
		return b.write(right, src, src_off, Dest::landing, slot(phase, step) + ch.offset(c) * esz,
			       bytes, counter(phase, step, c), right_key_slot);
	};
	// Where chunk c of the segment received in (phase, step) sits locally.
	auto incoming = [&](uint32_t phase, uint32_t step, uint32_t s, const Chunking& ch,
			    uint32_t c) -> std::pair<Buf, uint64_t> {
		if (into_output)
			return {Buf::output, seg_off(s, ch, c)};
		return {Buf::landing, slot(phase, step) + ch.offset(c) * esz};
	};

	// Reduce-scatter. Step 0 sends our own input segment; step j forwards
	// the segment received in step j - 1 after folding our input into it.
	std::vector<std::vector<uint32_t>> rs_writes(steps);
	{
		const uint32_t s = ring.send_segment(r, 0);
		const Chunking ch{part.size(s), chunk};
		for (uint32_t c = 0; c < ch.count(); ++c)
			rs_writes[0].push_back(send(Buf::input, seg_off(s, ch, c), 0, 0, s, ch, c));
	}
	for (uint32_t j = 1; j <= steps; ++j) {
		const uint32_t s = ring.receive_segment(r, j - 1);
		const Chunking ch{part.size(s), chunk};
		const bool last = j == steps;
		for (uint32_t c = 0; c < ch.count(); ++c) {
			b.wait(counter(0, j - 1, c));
			auto [in_buf, in_off] = incoming(0, j - 1, s, ch, c);
			const uint64_t elems = ch.size(c);
			const uint64_t own = seg_off(s, ch, c);
			// Partial sums live in the output (allreduce) or stay where
			// they landed (reduce_scatter, reduce).
			Buf acc = role == RingRole::allreduce ? Buf::output : in_buf;
			uint64_t acc_off = role == RingRole::allreduce ? own : in_off;
			if (last && role == RingRole::reduce_scatter) {
				acc = Buf::output;
				acc_off = ch.offset(c) * esz;
			}
			if (last && root) {
				acc = Buf::output;
				acc_off = own;
			}
			b.reduce(acc, acc_off, in_buf, in_off, Buf::input, own, elems);
			if (!last)
				rs_writes[j].push_back(send(acc, acc_off, 0, j, s, ch, c));
			else if (role == RingRole::allreduce)
				send(acc, acc_off, 1, 0, s, ch, c);
			else if (role == RingRole::reduce && !root) {
				if (rdv) {
					if (c == 0)
						b.wait(root_key_counter);
					b.write(d.root, acc, acc_off, Dest::output, own, elems * esz,
						gather_counter, root_key_slot);
				} else {
					b.write(d.root, acc, acc_off, Dest::landing, gather_area + own,
						elems * esz, gather_counter);
				}
			}
		}
	}

	if (role == RingRole::reduce) {
		if (!root)
			return Errc::ok;
		uint64_t expected = 0;
		for (uint32_t q = 0; q < p; ++q)
			if (q != r)
				expected += Chunking{part.size(ring.owned_after_reduce_scatter(q)), chunk}.count();
		b.wait(gather_counter, expected);
		if (!rdv)
			for (uint32_t q = 0; q < p; ++q) {
				const uint32_t s = ring.owned_after_reduce_scatter(q);
				if (q != r)
					b.copy(Buf::output, part.offset(s) * esz, Buf::landing,
					       gather_area + part.offset(s) * esz, part.size(s) * esz);
			}
		return Errc::ok;
	}
	if (role == RingRole::reduce_scatter)
		return Errc::ok;

	// Allgather: pass finished segments on; in eager mode copy them out of
	// the landing slot, after the reduce-scatter write that read the same
	// output range has completed.
	for (uint32_t j = 1; j <= steps; ++j) {
		const uint32_t s = pattern::mod_sub(r, j - 1, p); // received in AG step j - 1
		const Chunking ch{part.size(s), chunk};
		const uint32_t sent_in_rs = pattern::mod_sub(r, s, p); // ring.send_segment(r, x) == s
		for (uint32_t c = 0; c < ch.count(); ++c) {
			b.wait(counter(1, j - 1, c));
			auto [in_buf, in_off] = incoming(1, j - 1, s, ch, c);
			if (j < steps)
				send(in_buf, in_off, 1, j, s, ch, c);
			if (into_output)
				continue;
			if (sent_in_rs > 0 && sent_in_rs < steps)
				b.wait_sent(rs_writes[sent_in_rs][c]);
			b.copy(Buf::output, seg_off(s, ch, c), in_buf, in_off, ch.size(c) * esz);
		}
	}
	return Errc::ok;
}

} // namespace

Errc build_allreduce_ring(ScheduleBuilder& b, const Limits& limits)
{
	return build_ring(b, limits, RingRole::allreduce);
}

Errc build_reduce_scatter_ring(ScheduleBuilder& b, const Limits& limits)
{
	return build_ring(b, limits, RingRole::reduce_scatter);
}

Errc build_reduce_ring(ScheduleBuilder& b, const Limits& limits)
{
	return build_ring(b, limits, RingRole::reduce);
}

} // namespace rcoll::engine::detail
