// Pure rank arithmetic shared by the schedule builders: who talks to whom,
// in which order, about which part of the data. Nothing here allocates
// resources or knows about transports; every function is a function of its
// arguments only and is tested exhaustively for small group sizes.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace rcoll::engine::pattern {

constexpr uint32_t floor_pow2(uint32_t p) noexcept { return p == 0 ? 0 : std::bit_floor(p); }

// ceil(log2(p)), 0 for p <= 1: the number of rounds of dissemination and of
// a binomial tree.
constexpr unsigned ceil_log2(uint32_t p) noexcept
{
	return p <= 1 ? 0 : static_cast<unsigned>(std::bit_width(p - 1));
}

constexpr unsigned floor_log2(uint32_t p) noexcept
{
	return p == 0 ? 0 : static_cast<unsigned>(std::bit_width(p) - 1);
}

constexpr uint32_t lowest_bit(uint32_t v) noexcept { return v & (~v + 1); }

// Rank relative to a root (the root becomes virtual rank 0) and back.
constexpr uint32_t to_virtual(uint32_t rank, uint32_t root, uint32_t p) noexcept
{
	return rank >= root ? rank - root : rank + p - root;
}

constexpr uint32_t to_real(uint32_t vrank, uint32_t root, uint32_t p) noexcept
{
	uint32_t r = vrank + root;
	return r >= p ? r - p : r;
}

// The virtual ranks of a tree rooted at `root`, or the positions around a
// ring: `root` is 0 and, where each member's host is known (`hosts`, a host
// index per member), the members of a host are consecutive, the root's host
// first and the others in the order their first member follows the root. A
// k-nomial tree's lower levels join neighbouring virtual ranks, so they stay
// on a host and only its top levels cross between hosts (Karonis et al.
// 2000), and a ring crosses once per host; with ranks placed round-robin
// over hosts, the rotation would send every level and every ring step
// across. Without hosts, or with one member per host or all on one, the
// rotation.
class HostOrder {
public:
	HostOrder(uint32_t p, uint32_t root, std::span<const uint32_t> hosts = {});
	uint32_t to_virtual(uint32_t rank) const noexcept
	{
		return virtual_.empty() ? pattern::to_virtual(rank, root_, p_) : virtual_[rank];
	}
	uint32_t to_real(uint32_t vrank) const noexcept
	{
		return real_.empty() ? pattern::to_real(vrank, root_, p_) : real_[vrank];
	}

private:
	uint32_t p_, root_;
	std::vector<uint32_t> real_, virtual_; // empty: the rotation
};

// The hosts of a group: each host's members in rank order, hosts in the
// order of their first member. `hosts` gives a host index per member, as
// HostOrder takes it; without it (or of another size), each member is a
// host of its own. A host's `runs` are its maximal ranges of consecutive
// ranks, [first, last): one write moves a range's blocks, which sit in rank
// order, so that under --map-by slot a host's blocks travel in one write.
class HostGroups {
public:
	HostGroups(uint32_t p, std::span<const uint32_t> hosts = {});
	uint32_t count() const noexcept { return uint32_t(members_.size()); }
	const std::vector<uint32_t>& members(uint32_t host) const noexcept
	{
		return members_[host];
	}
	uint32_t host_of(uint32_t rank) const noexcept { return host_of_[rank]; }
	// The member's place among its host's members; 0 is the host's leader.
	uint32_t position(uint32_t rank) const noexcept { return position_[rank]; }
	uint32_t largest() const noexcept;
	std::vector<std::pair<uint32_t, uint32_t>> runs(uint32_t host) const
	{
		return runs_of(members_[host]);
	}
	// Ranges of consecutive ranks of an ascending list.
	static std::vector<std::pair<uint32_t, uint32_t>> runs_of(std::span<const uint32_t> ranks);

	// The blocks of the members off host g, host by host in rank order,
	// dealt round-robin to g's members, so that each gets its share
	// (within one) whatever the hosts' sizes; with hosts of one size,
	// member i of each host gets member i's of every other. The member
	// of host g that x's block is dealt to, x not on g:
	uint32_t dealt_to(uint32_t x, uint32_t g) const noexcept;
	// The blocks dealt to member r, ascending.
	std::vector<uint32_t> dealt_blocks(uint32_t r) const;

private:
	// Position of host h's first member among the members off host g.
	uint32_t deal_base(uint32_t h, uint32_t g) const noexcept
	{
		return before_[h] - (g < h ? uint32_t(members_[g].size()) : 0);
	}

	std::vector<std::vector<uint32_t>> members_;
	std::vector<uint32_t> host_of_, position_;
	std::vector<uint32_t> before_; // members on the hosts before each host
};

constexpr uint32_t ring_right(uint32_t r, uint32_t p) noexcept { return r + 1 == p ? 0 : r + 1; }

constexpr uint32_t ring_left(uint32_t r, uint32_t p) noexcept { return r == 0 ? p - 1 : r - 1; }

// (a - b) mod p for a, b < p.
constexpr uint32_t mod_sub(uint32_t a, uint32_t b, uint32_t p) noexcept
{
	return a >= b ? a - b : a + p - b;
}

// Balanced partition of `total` elements into `parts` contiguous blocks:
// the first total % parts blocks hold one element more. Used for ring
// segments, Rabenseifner blocks and scatter-allgather broadcast segments.
struct Partition {
	uint64_t total = 0;
	uint32_t parts = 1;

	constexpr uint64_t size(uint32_t i) const noexcept
	{
		return total / parts + (i < total % parts ? 1 : 0);
	}
	constexpr uint64_t offset(uint32_t i) const noexcept
	{
		uint64_t extra = total % parts;
		return i * (total / parts) + (i < extra ? i : extra);
	}
	// Offset of block `last` when blocks [first, last) are taken together.
	constexpr uint64_t span(uint32_t first, uint32_t last) const noexcept
	{
		return offset(last) - offset(first);
	}
	constexpr uint64_t max_size() const noexcept
	{
		return total / parts + (total % parts ? 1 : 0);
	}
};

// A segment of `elements` cut into pipeline chunks of at most
// `chunk_elements`; an empty segment has no chunk.
struct Chunking {
	uint64_t elements = 0;
	uint64_t chunk_elements = 1;

	constexpr uint32_t count() const noexcept
	{
		return static_cast<uint32_t>((elements + chunk_elements - 1) / chunk_elements);
	}
	constexpr uint64_t offset(uint32_t c) const noexcept { return c * chunk_elements; }
	constexpr uint64_t size(uint32_t c) const noexcept
	{
		uint64_t begin = offset(c);
		return elements - begin < chunk_elements ? elements - begin : chunk_elements;
	}
};

// Binomial tree over virtual ranks [0, p), root 0 (MPICH/Gupta ch. 5):
// the parent of v is v minus its lowest set bit; the children of v are
// v + 2^j for 2^j below v's lowest set bit (all j for the root), sent to
// farthest first so that the largest subtree starts earliest.
struct BinomialTree {
	uint32_t p = 1;

	std::optional<uint32_t> parent(uint32_t v) const noexcept
	{
		if (v == 0)
			return std::nullopt;
		return v - lowest_bit(v);
	}
	// Children in send order (farthest first).
	std::vector<uint32_t> children(uint32_t v) const;
	// Number of virtual ranks in v's subtree: [v, v + subtree_size(v)).
	uint32_t subtree_size(uint32_t v) const noexcept
	{
		uint32_t span = v == 0 ? std::bit_ceil(p) : lowest_bit(v);
		return p - v < span ? p - v : span;
	}
	// Position of `child` among the possible children of its parent:
	// log2(child - parent), below ceil_log2(p).
	static unsigned child_index(uint32_t parent, uint32_t child) noexcept
	{
		return floor_log2(child - parent);
	}
};

// K-nomial tree of radix k + 1 over virtual ranks, root 0: Gupta's
// degree-k tree (ch. 6), where a node receives from at most k children per
// step, generalised from N a power of two and k = 2^j - 1 to any N and k.
// Level j children of v are v + c (k+1)^j, c = 1..k, for every level below
// the lowest non-zero base-(k+1) digit of v.
struct KnomialTree {
	uint32_t p = 1;
	uint32_t k = 1;

	// Number of reduction steps: ceil(log_{k+1} p).
	unsigned levels() const noexcept;
	// The level at which v sends to its parent (v != 0).
	unsigned send_level(uint32_t v) const noexcept;
	std::optional<uint32_t> parent(uint32_t v) const noexcept;
	// Children of v at `level`, ascending rank order (the order Gupta's
	// receiver reduces them in).
	std::vector<uint32_t> children_at(uint32_t v, unsigned level) const;
	// All children of v in send order: the highest level (largest
	// subtrees) first, and within a level the farthest first.
	std::vector<uint32_t> children_in_send_order(uint32_t v) const;
	// Slot of `child` in its parent's landing area: level * k + (c - 1).
	uint32_t child_slot(uint32_t child) const noexcept;
	uint32_t slots() const noexcept { return levels() * k; }
};

// Recursive doubling over the largest power of two pof2 <= p, with the
// p - pof2 "extra" ranks folded onto ranks [0, p - pof2) before and
// released after (Gupta ch. 4, non-power-of-two barrier).
struct FoldedHypercube {
	uint32_t p = 1;

	uint32_t pof2() const noexcept { return floor_pow2(p); }
	uint32_t extras() const noexcept { return p - pof2(); }
	unsigned dimensions() const noexcept { return floor_log2(pof2()); }
	bool is_extra(uint32_t r) const noexcept { return r >= pof2(); }
	// Core rank that an extra folds onto, or extra rank folded onto a core.
	std::optional<uint32_t> fold_partner(uint32_t r) const noexcept
	{
		if (r >= pof2())
			return r - pof2();
		if (r < extras())
			return r + pof2();
		return std::nullopt;
	}
	static uint32_t partner(uint32_t r, unsigned dim) noexcept
	{
		return r ^ (uint32_t(1) << dim);
	}
};

// Dissemination (Hensgen, Finkel and Manber 1988): in round j rank r
// signals r + 2^j and hears from r - 2^j, mod p; ceil(log2 p) rounds.
struct Dissemination {
	uint32_t p = 1;

	unsigned rounds() const noexcept { return ceil_log2(p); }
	uint32_t to(uint32_t r, unsigned j) const noexcept
	{
		return static_cast<uint32_t>((uint64_t(r) + (uint64_t(1) << j)) % p);
	}
	uint32_t from(uint32_t r, unsigned j) const noexcept
	{
		uint64_t d = (uint64_t(1) << j) % p;
		return static_cast<uint32_t>((uint64_t(r) + p - d) % p);
	}
};

// Bruck allgather: in round j rank r sends the first min(2^j, p - 2^j)
// blocks of its rotated buffer to r - 2^j and receives as many from r + 2^j
// into position 2^j; ceil(log2 p) rounds for any p.
struct Bruck {
	uint32_t p = 1;

	unsigned rounds() const noexcept { return ceil_log2(p); }
	uint32_t blocks_in_round(unsigned j) const noexcept
	{
		uint32_t have = uint32_t(1) << j;
		return p - have < have ? p - have : have;
	}
	uint32_t send_to(uint32_t r, unsigned j) const noexcept
	{
		return mod_sub(r, (uint32_t(1) << j) % p, p);
	}
	uint32_t receive_from(uint32_t r, unsigned j) const noexcept
	{
		return static_cast<uint32_t>((uint64_t(r) + (uint64_t(1) << j)) % p);
	}
};

// Patarasuk-Yuan ring: in step j rank r sends segment (r - j + shift) mod p
// to its right neighbour and receives (r - 1 - j + shift) from its left.
// After the p - 1 reduce-scatter steps rank r owns segment r + 1 + shift.
struct Ring {
	uint32_t p = 1;
	int64_t shift = 0;

	uint32_t send_segment(uint32_t r, uint32_t step) const noexcept
	{
		int64_t s = (int64_t(r) - int64_t(step) + shift) % int64_t(p);
		return static_cast<uint32_t>(s < 0 ? s + p : s);
	}
	uint32_t receive_segment(uint32_t r, uint32_t step) const noexcept
	{
		return send_segment(ring_left(r, p), step);
	}
	uint32_t owned_after_reduce_scatter(uint32_t r) const noexcept
	{
		return receive_segment(r, p - 2);
	}
};

} // namespace rcoll::engine::pattern
