// Allreduce, reduce_scatter and reduce around a ring (Patarasuk and Yuan
// 2009). Floating-point bracketing: segment s is accumulated along the ring
// starting at position s + 1 (pattern::HostOrder):
// ((x_{s+1} (op) x_{s+2}) ...) (op) x_s; a different bracketing per
// segment, identical on every rank (Patarasuk and Yuan, section 2.1).
#include <algorithm>

#include "engine/builder.hpp"

namespace rcoll::engine::detail {

using pattern::Chunking;
using pattern::Partition;

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
	// Positions around the ring: with the members grouped by host, the ring
	// crosses between hosts once per host instead of at every step where
	// ranks alternate between hosts. reduce_scatter's block r must end at
	// rank r: it keeps the ranks' order.
	const pattern::HostOrder order =
		role == RingRole::reduce_scatter ? pattern::HostOrder(p, 0) : b.host_order(0);
	const uint32_t r = order.to_virtual(b.rank()); // this member's position
	if (p == 1) {
		b.copy(Buf::output, 0, Buf::input, 0, total * esz);
		return Errc::ok;
	}
	if (d.count == 0)
		return Errc::ok;

	const Partition part{total, p};
	const pattern::Ring ring{p, role == RingRole::reduce_scatter ? -1 : 0};
	const uint32_t right = order.to_real(pattern::ring_right(r, p));
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
	auto slot = [&](uint32_t phase, uint32_t step) {
		return (uint64_t(phase) * steps + step) * slot_bytes;
	};
	const uint64_t gather_area = slot(phases, 0);
	const uint64_t eager_bytes = gather_area + (role == RingRole::reduce ? total * esz : 0);
	// Partials are reduced where they land; what a rendezvous writes
	// straight into place is copied: allreduce's final segments, reduce's
	// gather at the root.
	const uint64_t copied = role == RingRole::allreduce ? slot(phases, 0) - slot(1, 0)
				: role == RingRole::reduce  ? total * esz
							    : 0;
	b.choose_landing(eager_bytes, copied, 0, 2, limits);
	const bool rdv = !b.eager();
	// In rendezvous, allreduce needs no landing at all: partials and final
	// segments go straight into the right neighbour's output buffer.
	const bool into_output = rdv && role == RingRole::allreduce;
	if (into_output)
		b.layout().landing_bytes = 0;
	else if (rdv)
		b.layout().landing_bytes = slot(phases, 0);

	if (rdv) {
		const uint32_t left = order.to_real(pattern::ring_left(r, p));
		b.ship_key(left, into_output ? OwnKey::output : OwnKey::landing, right_key_slot,
			   right_key_counter);
		b.wait(right_key_counter);
	}
	const bool root = role == RingRole::reduce && b.rank() == d.root;
	if (role == RingRole::reduce && rdv && root)
		for (uint32_t q = 0; q < p; ++q)
			if (q != r && part.size(ring.owned_after_reduce_scatter(q)) > 0)
				b.ship_key(order.to_real(q), OwnKey::output, root_key_slot,
					   root_key_counter);

	auto seg_off = [&](uint32_t s, const Chunking& ch, uint32_t c) {
		return (part.offset(s) + ch.offset(c)) * esz;
	};
	auto send = [&](Buf src, uint64_t src_off, uint32_t phase, uint32_t step, uint32_t s,
			const Chunking& ch, uint32_t c) {
		const uint64_t bytes = ch.size(c) * esz;
		if (into_output)
			return b.write(right, src, src_off, Dest::output, seg_off(s, ch, c), bytes,
				       counter(phase, step, c), right_key_slot);
		return b.write(right, src, src_off, Dest::landing,
			       slot(phase, step) + ch.offset(c) * esz, bytes,
			       counter(phase, step, c), right_key_slot);
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
					b.write(d.root, acc, acc_off, Dest::output, own,
						elems * esz, gather_counter, root_key_slot);
				} else {
					b.write(d.root, acc, acc_off, Dest::landing,
						gather_area + own, elems * esz, gather_counter);
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
				expected += Chunking{part.size(ring.owned_after_reduce_scatter(q)),
						     chunk}
						    .count();
		b.wait(gather_counter, expected);
		if (!rdv)
			for (uint32_t q = 0; q < p; ++q) {
				const uint32_t s = ring.owned_after_reduce_scatter(q);
				if (q != r)
					b.copy(Buf::output, part.offset(s) * esz, Buf::landing,
					       gather_area + part.offset(s) * esz,
					       part.size(s) * esz);
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
		const uint32_t sent_in_rs =
			pattern::mod_sub(r, s, p); // ring.send_segment(r, x) == s
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
