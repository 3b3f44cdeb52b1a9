// Collective algorithms as data. A schedule is the list of steps one rank
// executes for one collective operation: RDMA-write into a peer's buffer
// and bump one of its arrival counters, wait for a local counter, reduce,
// copy. It is computed once from (rank, size, count, datatype, op, root,
// algorithm, parameters) by pure rank arithmetic, identical on every run,
// and executed by the trivial non-blocking interpreter in group.cpp.
//
// Memory a schedule talks about, per operation:
//   input     the user's send buffer (read only);
//   output    the user's result buffer (broadcast: the one buffer);
//   landing   where peers' data lands: a piece of the join-time registered
//             scratch region ("eager", Gupta ch. 3 static registration), or
//             a per-call registered temporary when it would not fit
//             ("rendezvous", Gupta's dynamic registration);
//   key slots 24-byte slots in scratch that receive peers' memory keys, so
//             that a rank can write straight into a peer's user buffer;
//   own keys  this rank's keys for its landing and output, shipped to peers.
// Arrival counters are per operation (recycled with the scratch region) or,
// for barriers, monotone per group and compared against a 64-bit epoch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/types.hpp"

namespace rcoll::engine {

enum class Algorithm : uint8_t {
	automatic,
	pairwise,           // barrier: Gupta pairwise exchange; alltoall: pairwise-ordered direct
	dissemination,      // barrier
	binomial,           // broadcast, scatter, gather
	scatter_allgather,  // broadcast, large messages
	ktree,              // broadcast, allreduce, reduce, reduce_scatter: Gupta degree-k tree
	recursive_doubling, // allreduce
	rabenseifner,       // allreduce
	ring,               // allreduce, allgather, reduce_scatter, reduce
	bruck,              // allgather
	hierarchical,       // allgather: through one leader per host
	multi_leader,       // allgather: every member a leader
};
inline constexpr unsigned algorithm_count = 12;

std::string_view to_string(Algorithm) noexcept;
Algorithm parse_algorithm(std::string_view) noexcept; // automatic when unknown
bool algorithm_supports(Collective, Algorithm) noexcept;
// The concrete algorithms of a collective, in a fixed order.
std::vector<Algorithm> algorithms_for(Collective);

struct AlgorithmParams {
	uint32_t radix = 0;       // k of the degree-k tree; 0: Limits::radix
	uint64_t chunk_bytes = 0; // pipeline chunk; 0: Limits::chunk_bytes
	friend bool operator==(const AlgorithmParams&, const AlgorithmParams&) = default;
};

// Everything every member of the group agrees on for one operation. Counts
// follow fi_collective(3)/MPI conventions: allreduce/reduce/broadcast
// `count` elements; allgather, gather, scatter, alltoall and reduce_scatter
// `count` elements per rank block (reduce_scatter: MPI_Reduce_scatter_block,
// input p * count, output count).
struct OpDescriptor {
	Collective coll = Collective::barrier;
	Algorithm algorithm = Algorithm::automatic;
	AlgorithmParams params;
	uint32_t size = 1;
	uint32_t root = 0;
	uint64_t count = 0;
	Datatype dtype = Datatype::uint8;
	ReduceOp op = ReduceOp::sum;
	friend bool operator==(const OpDescriptor&, const OpDescriptor&) = default;
};

// Per-operation resources of the group, identical on every member.
struct Limits {
	// Scratch available to one operation: a half of the group's scratch.
	// It holds the landings of three 64 KiB recursive-doubling allreduces
	// at 4 members (two vectors each), or two of Rabenseifner, which then
	// stay eager (a rendezvous costs a key message per step); the halves
	// take turns, and each turn costs a recycle barrier among the members.
	uint64_t scratch_bytes = 512 * 1024;
	uint32_t counters = 4096; // arrival counters available to one operation
	// Most bytes a schedule staged through scratch may copy out of it;
	// above it the data goes straight into the destination after a key
	// exchange, one latency more.
	// On the tcp core a latency is worth some 60 KiB of copying: at 16 KiB
	// a 32 KiB broadcast took 48 us against 36 staged.
	uint64_t eager_bytes = 64 * 1024;
	// The same for a tree broadcast, each of whose members copies what
	// lands out once. The glue raises it where staging measured faster
	// (coll_group.cpp).
	uint64_t broadcast_eager_bytes = 64 * 1024;
	// Default pipeline chunk. Every chunk is one RDMA write and one arrival;
	// on the tcp core each costs system calls at both ends, and at 64 KiB
	// that overhead made the ring 1.5-2x slower at 1-64 MiB than at
	// 256 KiB, which still leaves many chunks to pipeline.
	uint64_t chunk_bytes = 256 * 1024;
	uint32_t radix = 3;        // default degree k of the k-ary tree (Gupta's best at 16 nodes)
	uint32_t bcast_blocks = 8; // landing blocks per tree edge, tree broadcasts
};

// The degree k of a k-nomial tree schedule: the call's radix, else the
// group's, within 1..p - 1 (a wider tree has no more children to take).
inline uint32_t tree_radix(const OpDescriptor& d, const Limits& limits) noexcept
{
	const uint32_t k = std::max<uint32_t>(d.params.radix ? d.params.radix : limits.radix, 1);
	return d.size > 1 ? std::min(k, d.size - 1) : 1;
}

inline constexpr size_t memory_key_bytes = 24;
// Changes whenever schedules, the counter and scratch layouts they address,
// or the selector's choices change: members must build mirror images of one
// another, and the glue's join compares it (with the configuration) to
// refuse members of another version. 3: choices by placement; 4: trees
// grouped by host; 5: tuning rules by placement, o in the model; 6: the
// allgather ring grouped by host; 7: the model sums its terms in the order
// it did before o (the last bit of a near tie may differ from 6); 8: the
// hierarchical and multi-leader allgathers.
inline constexpr uint32_t schedule_version = 8;
inline constexpr uint32_t monotone_counter = 1u << 31;

enum class Buf : uint8_t { input, output, landing, own_keys };
// What a call buffer serves as, so that it is registered for that alone.
enum class Access : uint8_t {
	none = 0,
	read = 1,         // local source of writes
	remote_write = 2, // target of peers' writes: its key is shipped
	read_write = 3,
};
constexpr Access operator|(Access a, Access b) noexcept
{
	return static_cast<Access>(uint8_t(a) | uint8_t(b));
}
constexpr bool grants(Access granted, Access wanted) noexcept
{
	return (uint8_t(granted) & uint8_t(wanted)) == uint8_t(wanted);
}
enum class Dest : uint8_t { landing, output, key_slot };

struct Step {
	enum class Kind : uint8_t { write, wait, reduce, copy, wait_sent };

	Kind kind = Kind::wait;
	Buf src = Buf::input;      // write, copy: source; reduce: operand b
	Buf dst = Buf::output;     // copy, reduce: destination
	Buf a = Buf::output;       // reduce: operand a
	Dest dest = Dest::landing; // write: which of the peer's buffers
	bool control = false;      // write: key, credit or signal, not payload
	uint32_t peer = 0;         // write
	uint32_t counter = 0;      // write: peer's counter; wait: own counter
	uint32_t key = 0; // write to a peer buffer reached by key: own key slot holding it;
			  // write to Dest::key_slot: slot index at the peer
	uint64_t src_off = 0;
	uint64_t dst_off = 0;
	uint64_t a_off = 0;
	uint64_t length = 0; // write, copy: bytes; reduce: elements
	uint64_t value = 0;  // wait: arrivals (times the epoch if monotone); wait_sent: write index
};

// Scratch footprint of one operation, the same on every rank.
struct ScheduleLayout {
	uint32_t key_slots = 0;
	uint32_t counters = 0;
	uint64_t landing_bytes = 0;
	bool landing_in_scratch = true;

	static constexpr uint64_t own_keys_offset = 0;
	static constexpr uint64_t key_slots_offset = 2 * memory_key_bytes;
	uint64_t landing_offset() const noexcept
	{
		return align(key_slots_offset + uint64_t(key_slots) * memory_key_bytes);
	}
	uint64_t scratch_bytes() const noexcept
	{
		return align(landing_offset() + (landing_in_scratch ? landing_bytes : 0));
	}
	static constexpr uint64_t align(uint64_t v) noexcept { return (v + 63) & ~uint64_t(63); }
};

// Which monotone counter family (and epoch) a barrier uses.
enum class EpochClass : uint8_t { none, pairwise, dissemination, tree };

struct Schedule {
	ScheduleLayout layout;
	std::vector<Step> steps;
	uint32_t writes = 0;
	EpochClass epoch = EpochClass::none;
	bool uses_input = false;             // input is read (a local copy or reduce source)
	Access input_access = Access::none;  // read: input is a write source
	Access output_access = Access::none; // read: a write source; remote_write: a target
	uint64_t payload_bytes = 0;          // bytes this rank writes, data only
	uint64_t control_bytes = 0;          // keys and zero-byte signals
};

// Monotone counter space of a group of `size` members: pairwise barrier,
// dissemination barrier, the two scratch-recycling syncs, the tree
// barrier's release from above and its arrivals from below, one counter per
// child slot. Every monotone counter hears from one peer only, so that
// ">= epoch" counts that peer's barriers even when it is several ahead.
struct MonotoneCounters {
	uint32_t size = 1;

	unsigned rounds() const noexcept;
	uint32_t pairwise(unsigned index) const noexcept { return index; }
	uint32_t dissemination(unsigned round) const noexcept { return rounds() + 2 + round; }
	uint32_t recycle(unsigned half, unsigned round) const noexcept
	{
		return 2 * rounds() + 2 + half * rounds() + round;
	}
	uint32_t tree_release() const noexcept { return 4 * rounds() + 2; }
	uint32_t tree_gather(uint32_t child_slot) const noexcept
	{
		return 4 * rounds() + 3 + child_slot;
	}
	// A k-nomial tree has levels * k child slots, fewer than 2 p for any k.
	uint32_t tree_slots() const noexcept { return 2 * size; }
	uint32_t total() const noexcept { return 4 * rounds() + 3 + tree_slots(); }
};

// Checks the descriptor: datatype/op pair, root, count overflow, algorithm.
Errc validate(const OpDescriptor&) noexcept;

// Bytes of one rank's input and output buffers for the descriptor.
struct BufferSizes {
	uint64_t input = 0;
	uint64_t output = 0;
};
BufferSizes buffer_sizes(const OpDescriptor&, uint32_t rank) noexcept;

// Where the members run: host[r] is member r's host, as an index that is
// equal for members that say they share a host and offer its memory (the
// path a pair takes may still differ; every member must see the same).
// Empty, or with every member on a host of its own or all on one, every edge
// costs the same: alpha and beta, and trees keep the rotation's order.
using Placement = std::span<const uint32_t>;

// How a placement spreads a group of p members over hosts: all on one, each
// on a host of its own, or across hosts with some together. Empty or of
// another size: unknown.
enum class Spread : uint8_t { one_host, apart, shared };
std::optional<Spread> spread_of(Placement placement, uint32_t p);

// Builds rank `rank`'s schedule. The descriptor must have passed validate()
// and name a concrete algorithm. Fails with no_resources when the operation
// cannot fit the limits and no_memory when allocation fails. The trees and
// rings group their members by `placement` (pattern::HostOrder).
Errc build_schedule(const OpDescriptor&, uint32_t rank, const Limits&, Schedule&,
		    Placement placement = {}) noexcept;

} // namespace rcoll::engine
