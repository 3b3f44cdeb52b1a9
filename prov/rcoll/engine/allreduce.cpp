// Allreduce by recursive doubling and by Rabenseifner's reduce-scatter and
// allgather (Thakur, Rabenseifner and Gropp 2005). Floating-point
// bracketing, identical on every rank whatever the arrival order:
//  recursive_doubling  at distance d both partners compute
//                      lower-half (op) upper-half.
//  rabenseifner        each block is reduced once, lower half first, and
//                      then copied.
#include <algorithm>

#include "engine/builder.hpp"

namespace rcoll::engine::detail {

using pattern::FoldedHypercube;
using pattern::Partition;

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
	uint64_t result_offset = 0;     // landing slot of the result at the extra
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
		b.write(core, Buf::input, 0, Dest::landing, fold_offset, nb, fold_counter,
			key_slot);
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
			b.write(*extra, Buf::output, 0, Dest::landing, result_offset, nb,
				result_counter);
		} else {
			b.wait(key_counter);
			b.write(*extra, Buf::output, 0, Dest::output, 0, nb, result_counter,
				key_slot);
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
	// Landing: a fold slot, one slot per step, a result slot; the fold's
	// slots only where the group has extras, so that a power-of-two group
	// stages dims vectors and stays eager up to eager_bytes / dims.
	const uint64_t fold_slots = cube.extras() > 0 ? 1 : 0;
	auto step_offset = [&](unsigned j) { return (fold_slots + j) * nb; };
	// Counters: fold, steps, result, step keys, fold key.
	const uint32_t result_counter = 1 + dims;
	const uint32_t key_base = 2 + dims;
	Fold fold{cube, r, nb};
	fold.result_offset = (fold_slots + dims) * nb;
	fold.result_counter = result_counter;
	fold.key_counter = key_base + dims;
	fold.key_slot = dims;
	b.set_counters(3 + 2 * uint64_t(dims));
	// Every step's vector is reduced where it lands; an extra copies the result.
	b.choose_landing((2 * fold_slots + dims) * nb, fold_slots * nb, 0, dims + 1, limits);
	// In rendezvous the result goes straight into the extra's output.
	if (!b.eager())
		b.layout().landing_bytes = fold.result_offset;

	if (fold.run_extra(b))
		return Errc::ok;
	if (!b.eager())
		for (unsigned j = 0; j < dims; ++j)
			b.ship_key(FoldedHypercube::partner(r, j), OwnKey::landing, j,
				   key_base + j);
	Buf acc = fold.fold_in(b);
	for (unsigned j = 0; j < dims; ++j) {
		const uint32_t partner = FoldedHypercube::partner(r, j);
		if (!b.eager())
			b.wait(key_base + j);
		const uint32_t w =
			b.write(partner, acc, 0, Dest::landing, step_offset(j), nb, 1 + j, j);
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
	// The reduce-scatter reduces where it lands; the allgather copies all
	// but a rank's own block, an extra the whole result.
	const uint64_t copied = cube.extras() > 0 ? nb : nb - d.count / pof2 * esz;
	b.choose_landing(ag_offset + 2 * nb, copied, 0, 2 * dims + 1, limits);
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
		rs_writes[j] =
			b.write(partner, acc, part.offset(give.lo) * esz, Dest::landing,
				rs_offset[j], part.span(give.lo, give.hi) * esz, rs_counter + j, j);
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
			b.copy(Buf::output, other_off, Buf::landing, ag_offset + other_off,
			       other_bytes);
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

} // namespace rcoll::engine::detail
