// Internal to the engine: the helper every algorithm uses to append steps,
// and the per-algorithm builder entry points. Builders return no_resources
// when the operation cannot fit the limits; they may throw std::bad_alloc,
// which build_schedule() turns into Errc::no_memory.
#pragma once

#include "engine/patterns.hpp"
#include "engine/schedule.hpp"

namespace rcoll::engine::detail {

// Which of this rank's keys a key-shipping write carries.
enum class OwnKey : uint8_t { landing = 0, output = 1 };

class ScheduleBuilder {
public:
	ScheduleBuilder(Schedule& s, const OpDescriptor& d, uint32_t rank, Placement placement = {})
		: s_(s), d_(d), rank_(rank), placement_(placement)
	{}

	const OpDescriptor& op() const noexcept { return d_; }
	uint32_t rank() const noexcept { return rank_; }
	uint32_t size() const noexcept { return d_.size; }
	// The order of a tree rooted at `root` (or a ring), members grouped by host.
	pattern::HostOrder host_order(uint32_t root) const
	{
		return pattern::HostOrder(d_.size, root, placement_);
	}
	// Each host's members, from the placement.
	pattern::HostGroups host_groups() const { return pattern::HostGroups(d_.size, placement_); }
	size_t elem() const noexcept { return datatype_size(d_.dtype); }
	ScheduleLayout& layout() noexcept { return s_.layout; }
	bool eager() const noexcept { return s_.layout.landing_in_scratch; }
	void set_epoch(EpochClass e) noexcept { s_.epoch = e; }
	// Counters this schedule uses, [0, n).
	void set_counters(uint64_t n)
	{
		s_.layout.counters = n > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(n);
	}

	// RDMA write of `bytes` from a local buffer into a peer's buffer,
	// bumping the peer's `counter` once the data is placed. `key` names the
	// own key slot holding the peer's key when `dest` is reached by key
	// (output, or landing in rendezvous mode). Returns the write index.
	uint32_t write(uint32_t peer, Buf src, uint64_t src_off, Dest dest, uint64_t dst_off,
		       uint64_t bytes, uint32_t counter, uint32_t key = 0);
	// Zero-byte write: a credit or a barrier signal.
	uint32_t signal(uint32_t peer, uint32_t counter);
	// Ships one of this rank's memory keys into key slot `slot` of `peer`.
	uint32_t ship_key(uint32_t peer, OwnKey which, uint32_t slot, uint32_t counter);
	void wait(uint32_t counter, uint64_t arrivals = 1);
	void wait_sent(uint32_t write_index);
	void copy(Buf dst, uint64_t dst_off, Buf src, uint64_t src_off, uint64_t bytes);
	// dst = a (op) b over `elements` elements.
	void reduce(Buf dst, uint64_t dst_off, Buf a, uint64_t a_off, Buf b, uint64_t b_off,
		    uint64_t elements);

	// Chooses eager (landing in scratch) when the landing area and the key
	// slots fit the per-operation scratch and `copied_bytes`, what the
	// schedule copies out of the landing area where a rendezvous would
	// write it straight into place, is within the eager limit (a
	// broadcast's own: Limits::broadcast_eager_bytes); otherwise
	// rendezvous. Data that a reduction reads where it lands costs no copy.
	void choose_landing(uint64_t landing_bytes, uint64_t copied_bytes,
			    uint32_t key_slots_if_eager, uint32_t key_slots_if_rendezvous,
			    const Limits& limits);
	// The same for a schedule that copies out everything that lands.
	void choose_landing(uint64_t landing_bytes, uint32_t key_slots_if_eager,
			    uint32_t key_slots_if_rendezvous, const Limits& limits)
	{
		choose_landing(landing_bytes, landing_bytes, key_slots_if_eager,
			       key_slots_if_rendezvous, limits);
	}

	// Pipeline chunk in elements: the requested chunk size, doubled until
	// `counters_needed(chunk)` fits the counter budget. 0 if nothing fits.
	template <class F>
	uint64_t fit_chunk(uint64_t largest_segment, const Limits& limits, F counters_needed) const
	{
		uint64_t bytes = d_.params.chunk_bytes ? d_.params.chunk_bytes : limits.chunk_bytes;
		uint64_t chunk = bytes / elem() ? bytes / elem() : 1;
		for (;;) {
			if (uint64_t(counters_needed(chunk)) <= limits.counters)
				return chunk;
			if (chunk >= largest_segment)
				return 0;
			chunk *= 2;
		}
	}

private:
	Schedule& s_;
	const OpDescriptor& d_;
	uint32_t rank_;
	Placement placement_;
};

using Builder = Errc (*)(ScheduleBuilder&, const Limits&);

Errc build_barrier_pairwise(ScheduleBuilder&, const Limits&);
Errc build_barrier_dissemination(ScheduleBuilder&, const Limits&);
Errc build_barrier_ktree(ScheduleBuilder&, const Limits&);
Errc build_broadcast_binomial(ScheduleBuilder&, const Limits&);
Errc build_broadcast_ktree(ScheduleBuilder&, const Limits&);
Errc build_broadcast_scatter_allgather(ScheduleBuilder&, const Limits&);
Errc build_allreduce_ktree(ScheduleBuilder&, const Limits&);
Errc build_reduce_ktree(ScheduleBuilder&, const Limits&);
Errc build_reduce_scatter_ktree(ScheduleBuilder&, const Limits&);
Errc build_allreduce_recursive_doubling(ScheduleBuilder&, const Limits&);
Errc build_allreduce_rabenseifner(ScheduleBuilder&, const Limits&);
Errc build_allreduce_ring(ScheduleBuilder&, const Limits&);
Errc build_reduce_scatter_ring(ScheduleBuilder&, const Limits&);
Errc build_reduce_ring(ScheduleBuilder&, const Limits&);
Errc build_allgather_ring(ScheduleBuilder&, const Limits&);
Errc build_allgather_bruck(ScheduleBuilder&, const Limits&);
Errc build_allgather_hierarchical(ScheduleBuilder&, const Limits&);
Errc build_allgather_multi_leader(ScheduleBuilder&, const Limits&);
Errc build_scatter_binomial(ScheduleBuilder&, const Limits&);
Errc build_gather_binomial(ScheduleBuilder&, const Limits&);
Errc build_alltoall_pairwise(ScheduleBuilder&, const Limits&);

} // namespace rcoll::engine::detail
